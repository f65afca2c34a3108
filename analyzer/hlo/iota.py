"""Iota tile assignments, the compact device lists XLA prints as `[4,2]<=[8]` or `[2,4]<=[4,2]T(1,0)`.

`[d0,d1,...]<=[r0,r1,...]T(p0,p1,...)` means: take `iota(prod(r))`, reshape it to `r`, transpose it by
`p` (identity when `T(...)` is absent), then reshape to `d`. Replica groups use the same form, where the
first dim counts groups and the second the devices in each group; shardings use it for the tile
assignment (source: XLA's `IotaTileAssignment`, hlo_sharding.h / tile_assignment.h).
"""

from __future__ import annotations

import numpy as np

__all__ = ["expand_iota"]


def expand_iota(
    dims: tuple[int, ...], reshape_dims: tuple[int, ...], transpose_perm: tuple[int, ...] | None = None
) -> np.ndarray:
    """The device ids of an iota tile assignment, as an int64 array of shape `dims`.

    Args:
      dims: the shape of the result, e.g. `(4, 2)`.
      reshape_dims: the shape iota is reshaped to before the transpose, e.g. `(8,)` or `(4, 2)`.
      transpose_perm: the permutation after `T`, or None for the identity.

    Returns:
      `np.ndarray` of shape `dims`.

    Raises:
      ValueError: when the sizes disagree or the permutation is not one of `range(len(reshape_dims))`.

    Example:
      >>> expand_iota((2, 4), (4, 2), (1, 0)).tolist()
      [[0, 2, 4, 6], [1, 3, 5, 7]]
    """
    total = int(np.prod(reshape_dims, dtype=np.int64)) if reshape_dims else 1
    if int(np.prod(dims, dtype=np.int64)) != total:
        raise ValueError(f"iota dims {list(dims)} hold {int(np.prod(dims))} devices, but reshape dims "
                         f"{list(reshape_dims)} hold {total}")
    ids = np.arange(total, dtype=np.int64).reshape(reshape_dims)
    if transpose_perm is not None:
        if sorted(transpose_perm) != list(range(len(reshape_dims))):
            raise ValueError(f"transpose T{tuple(transpose_perm)} is not a permutation of the "
                             f"{len(reshape_dims)} reshape dims")
        ids = ids.transpose(transpose_perm)
    return ids.reshape(dims)
