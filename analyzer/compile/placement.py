"""Where `jax.make_mesh` puts each mesh position on a TPU slice, with or without libtpu.

On a real slice (and on the ahead-of-time `tpu:<topology>` target) a mesh built by `jax.make_mesh` takes
its device order from jax's own mesh utilities (`jax.experimental.mesh_utils.create_device_mesh`), which
read each device's `platform`, `device_kind`, `coords` and `core_on_chip`: ring orders for small v5e/v6e
and v5p trays (jax's `_V5E_TRAY_RING_ORDER`...), the N-D torus assignment elsewhere. A mesh axis can
therefore straddle physical axes. The cpu target has no TPU devices, so it builds stand-ins carrying those
attributes at the slice's coordinates and asks the same jax functions, so that both targets price the same
placement. Nothing here copies jax's logic: every order comes from calling jax.

    devices = standin_devices(parse_slice("v5e:2x4"))
    ordered, how = make_mesh_devices((4, 2), ("data", "model"), devices)
    [d.coords for d in ordered]   # the coords jax.make_mesh gives data=4,model=2 on a v5e 2x4
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from analyzer.theory.topology import PhysicalSlice

__all__ = ["StandInDevice", "standin_devices", "make_mesh_devices", "hybrid_mesh_devices", "dcn_split",
           "jax_placement"]


@dataclass(frozen=True)
class StandInDevice:
    """A TPU device as jax's mesh utilities see it, for a slice no TPU or libtpu is needed for.

    Attributes:
      id: the device id; numbered as libtpu numbers a single slice: x fastest, then y, then z (slice after
        slice on several slices).
      coords: the chip's (x, y, z) torus coordinates in its slice (z is 0 on 2-D tori, as libtpu reports).
      device_kind: jax's `Device.device_kind` for the chip ("TPU v5 lite"), from the hardware spec.
      core_on_chip: 0 (one device per chip: megacore chips, and v5e/v6e).
      platform: "tpu".
      process_index, slice_index: the slice's index (0 on one slice; libtpu's multi-slice topologies give
        each slice its own process too).
    """

    id: int
    coords: tuple[int, int, int]
    device_kind: str
    core_on_chip: int = 0
    platform: str = "tpu"
    process_index: int = 0
    slice_index: int = 0

    def __repr__(self) -> str:
        return f"StandInDevice(id={self.id}, coords={self.coords})"


def standin_devices(sl: PhysicalSlice) -> list[StandInDevice] | None:
    """Stand-in devices for every chip of a TPU slice (or of each of several slices over DCN, with their
    `slice_index`), in id order; None when jax has nothing to say: a GPU slice, a torus of more than 3 dims,
    or a hardware spec without a `device_kind`.

    Example:
      >>> from analyzer.theory.topology import parse_slice
      >>> [d.coords for d in standin_devices(parse_slice("v5e:2x2"))]
      [(0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0)]
      >>> [(d.slice_index, d.coords[:2]) for d in standin_devices(parse_slice("v5e:2x1*2"))]
      [(0, (0, 0)), (0, (1, 0)), (1, (0, 0)), (1, (1, 0))]
    """
    hw = sl.hardware
    slices, torus, networks = 1, tuple(sl.dims), tuple(sl.networks)
    if networks and networks[0] == "dcn":
        slices, torus, networks = sl.dims[0], torus[1:], networks[1:]
    if hw.kind != "tpu" or not hw.device_kind or any(n != "ici" for n in networks) or len(torus) > 3:
        return None
    dims = (*torus, *(1,) * (3 - len(torus)))
    # itertools.product varies the last factor fastest: iterate (z, y, x) so that x is fastest.
    coords = [(x, y, z) for z, y, x in itertools.product(range(dims[2]), range(dims[1]), range(dims[0]))]
    return [StandInDevice(s * len(coords) + i, c, hw.device_kind, process_index=s, slice_index=s)
            for s in range(slices) for i, c in enumerate(coords)]


def make_mesh_devices(axis_sizes: Sequence[int], axis_names: Sequence[str], devices: Sequence[Any],
                      axis_types: tuple[Any, ...] | None = None) -> tuple[list[Any], str]:
    """`devices` in the order a mesh of `axis_sizes` puts them (`mesh.devices.flat`), and how it was chosen.

    The order is `jax.make_mesh`'s; for shapes it cannot honour (it refuses to split a physical axis
    except on v5e), `jax.experimental.mesh_utils.create_device_mesh(..., allow_split_physical_axes=True)`;
    for shapes neither can lay out, the devices as given. The TPU target uses this with libtpu's devices,
    the cpu target with `standin_devices`, so both place a mesh alike.

    Returns:
      (devices in mesh order, "jax.make_mesh" | "mesh_utils.create_device_mesh" | "device order").
    """
    import jax
    import numpy as np
    from jax.experimental import mesh_utils

    shape = tuple(int(s) for s in axis_sizes)
    try:
        kwargs = {} if axis_types is None else {"axis_types": tuple(axis_types)}
        mesh = jax.make_mesh(shape, tuple(axis_names), devices=list(devices), **kwargs)
        return list(mesh.devices.flat), "jax.make_mesh"
    except Exception:  # shapes jax's physical layout cannot honour (jax raises ValueError/AssertionError)
        pass
    try:
        arr = mesh_utils.create_device_mesh(shape, devices=list(devices), allow_split_physical_axes=True)
        return list(np.asarray(arr).flat), "mesh_utils.create_device_mesh"
    except Exception:
        return list(devices), "device order"


def dcn_split(axis_sizes: Sequence[int], num_slices: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """How a mesh spans `num_slices` slices: (DCN shape, per-slice ICI shape), the arguments of jax's
    `mesh_utils.create_hybrid_device_mesh(mesh_shape=ICI, dcn_mesh_shape=DCN)`, whose product axis by axis is
    the mesh. The slices go to the major axes first, as the DCN is the major physical axis (MaxText's
    `dcn_data_parallelism` and friends): axis k takes gcd(slices left, size_k) of them. None when the axes
    cannot share out the slices (their product is not a multiple of `num_slices` in that order).

    Example:
      >>> dcn_split((2, 4), 2), dcn_split((8,), 2), dcn_split((4, 2), 3)
      (((2, 1), (1, 4)), ((2,), (4,)), None)
    """
    import math

    left, dcn = int(num_slices), []
    for size in axis_sizes:
        d = math.gcd(left, int(size))
        dcn.append(d)
        left //= d
    if left != 1:
        return None
    return tuple(dcn), tuple(int(s) // d for s, d in zip(axis_sizes, dcn))


def hybrid_mesh_devices(axis_sizes: Sequence[int], devices: Sequence[Any]) -> tuple[list[Any], str]:
    """`devices` of several slices (each with a `slice_index`) in the order jax's hybrid mesh puts them:
    `mesh_utils.create_hybrid_device_mesh` with the split of `dcn_split`, which lays each slice's part of the
    mesh by jax's device-mesh logic and the slices over the DCN axes. For a split jax cannot lay out, the
    devices by slice, then as given.

    Returns:
      (devices in mesh order, "mesh_utils.create_hybrid_device_mesh" | "slice order").
    """
    import numpy as np
    from jax.experimental import mesh_utils

    num_slices = len({int(d.slice_index) for d in devices})
    split = dcn_split(axis_sizes, num_slices)
    if split is not None:
        dcn, ici = split
        for split_axes in (False, True):  # jax's default first; then letting an axis split a physical one
            try:
                arr = mesh_utils.create_hybrid_device_mesh(ici, dcn, devices=list(devices),
                                                           allow_split_physical_axes=split_axes)
                return list(np.asarray(arr).flat), "mesh_utils.create_hybrid_device_mesh"
            except Exception:  # shapes jax's per-slice layout cannot honour
                continue
    return sorted(devices, key=lambda d: int(d.slice_index)), "slice order"


def jax_placement(sl: PhysicalSlice, axis_names: Sequence[str], axis_sizes: Sequence[int]
                  ) -> tuple[tuple[tuple[int, ...], ...], str] | None:
    """The physical coordinates of each mesh position when `jax.make_mesh` builds the mesh on slice `sl` (on
    several slices, which `jax.make_mesh` refuses, where `mesh_utils.create_hybrid_device_mesh` puts it; the
    coords are then led by the slice index, as the slice's dims are).

    Returns:
      (coords in `mesh.devices.flat` order, trimmed to the slice's rank; how the order was chosen), or None
      when `standin_devices` has no devices for the slice or the mesh does not fill it.

    Example:
      >>> from analyzer.theory.topology import parse_slice
      >>> coords, how = jax_placement(parse_slice("v5e:2x4"), ("data", "model"), (4, 2))
      >>> how, coords[:4]
      ('jax.make_mesh', ((0, 0), (1, 0), (0, 1), (1, 1)))
    """
    devices = standin_devices(sl)
    n = 1
    for s in axis_sizes:
        n *= int(s)
    if devices is None or len(devices) != n:
        return None
    if sl.networks[0] == "dcn":  # several slices: jax's hybrid mesh; coords (slice, *torus) as the slice's dims
        ordered, how = hybrid_mesh_devices(axis_sizes, devices)
        rank = len(sl.dims) - 1
        return tuple((int(d.slice_index), *(int(v) for v in d.coords[:rank])) for d in ordered), how
    ordered, how = make_mesh_devices(axis_sizes, axis_names, devices)
    rank = len(sl.dims)
    return tuple(tuple(int(v) for v in d.coords[:rank]) for d in ordered), how


def placed_topology(hw: Any, sl: PhysicalSlice, axis_names: Sequence[str], axis_sizes: Sequence[int], *,
                    declared: bool) -> tuple[Any, str] | None:
    """The `Topology` of the mesh placed on `sl` where `jax.make_mesh` would place it, and how it was placed
    ("jax.make_mesh" or the fallback named by `jax_placement`); None when jax has no placement for it.

    The one place that turns a slice into jax's placement: the pipeline uses it for the cpu target, and a
    report rebuilt from JSON uses it to rebuild the topology its description names.
    """
    from analyzer.theory.topology import Topology

    placed = jax_placement(sl, axis_names, axis_sizes) if sl.size == _product(axis_sizes) else None
    if placed is None:
        return None
    coords, how = placed
    topo = Topology.for_mesh(hw, tuple(axis_names), tuple(axis_sizes), topology=sl, device_coords=coords,
                             coords_origin="jax.make_mesh", declared=declared)
    return topo, how


def _product(sizes: Sequence[int]) -> int:
    n = 1
    for s in sizes:
        n *= s
    return n
