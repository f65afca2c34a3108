"""The program's array arguments as the rules read them: each array's global shape, bytes per element and
the mesh axes each dimension is sharded over, from the abstract arguments `analyze` was given.

HA101 takes the batch's mesh axes from them (the leading dim of the integer arguments: token ids, labels);
`analyzer.rules.fit` re-shards them on the mesh a fix leads to. `Facts.argument_arrays` builds them once per
report for both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ArgumentArray", "argument_arrays", "arrays_of", "batch_axes"]


@dataclass(frozen=True)
class ArgumentArray:
    """One array argument: its global `shape`, bytes per element, and the mesh axes each dim is sharded over."""

    name: str
    shape: tuple[int, ...]
    itemsize: int
    axes: tuple[tuple[str, ...], ...]
    integer: bool = False

    def bytes_on(self, sizes: Mapping[str, int]) -> int:
        """Per-device bytes with the mesh axes at `sizes` (an axis not in `sizes` counts 1)."""
        n = self.itemsize
        for k, dim in enumerate(self.shape):
            shards = math.prod(int(sizes.get(a, 1)) for a in (self.axes[k] if k < len(self.axes) else ()))
            n *= -(-dim // max(shards, 1))
        return n


def _spec_axes(entry: Any) -> tuple[str, ...]:
    if entry is None:
        return ()
    if isinstance(entry, str):
        return (entry,)
    return tuple(str(a) for a in entry if a is not None)


def argument_arrays(report: Any) -> list[ArgumentArray]:
    """The program's array arguments with their shardings, from the abstract arguments `analyze` was given
    (`report.analysis.args`); empty for a report without them (an HLO dump, a report rebuilt from JSON).
    The rules read them once per report: `Facts.argument_arrays`."""
    return arrays_of(getattr(getattr(report, "analysis", None), "args", None))


def arrays_of(args: Any) -> list[ArgumentArray]:
    """`argument_arrays` of the abstract arguments `args` (a pytree of shape, dtype and sharding leaves)."""
    if not args:
        return []
    import jax
    import numpy as np

    out = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tuple(args))[0]:
        shape, dtype = getattr(leaf, "shape", None), getattr(leaf, "dtype", None)
        if shape is None or dtype is None:
            continue
        if jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
            continue  # a typed PRNG key (key<urbg>, MaxText's and Flax NNX's rngs): not an array the rules weigh
        spec = getattr(getattr(leaf, "sharding", None), "spec", None)
        dims = tuple(_spec_axes(e) for e in spec) if spec is not None else ()
        dt = np.dtype(dtype) if not hasattr(dtype, "itemsize") else dtype
        out.append(ArgumentArray(jax.tree_util.keystr(path), tuple(int(d) for d in shape), int(dt.itemsize),
                                 dims, integer=bool(np.issubdtype(dt, np.integer))))
    return out


def batch_axes(arrays: Sequence[ArgumentArray]) -> tuple[str, ...]:
    """The mesh axes the batch is sharded over: those of the leading dim of the integer arguments (token ids,
    labels), in order of first appearance; empty when no integer argument is sharded."""
    seen: list[str] = []
    for a in arrays:
        if a.integer and a.shape and a.axes:
            for ax in a.axes[0]:
                if ax not in seen:
                    seen.append(ax)
    return tuple(seen)
