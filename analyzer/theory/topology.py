"""Physical slices and how a mesh's axes lie on them.

A *slice* is the hardware a program runs on, written `PREFIX:DIMS`:

- TPU: `v5e:8x4`, `v5p:4x4x4` (the torus dims, major to minor, as many as the torus has). Several slices
  joined by the data-center network: `v5e:16x16*4` (4 slices of 16x16; the DCN is the major axis).
- GPU: `h100:8` (one NVLink domain of 8), `h100:4x8` (4 nodes of 8 GPUs), `gb200:2x72`.

A `Topology` places every logical device of a mesh (position `i` of `mesh.devices.flat`) at a physical
coordinate, in one of four ways:

1. *in order*: logical device `i` is the `i`-th chip of the slice in row-major order, so the mesh axes fill
   the physical axes major to minor (a mesh axis may span several physical axes, or part of one);
2. an explicit `mapping` from each mesh axis to the physical axes it spans (major to minor);
3. the TPU devices' own torus coordinates (`device.coords` from jax), for meshes built from real or
   ahead-of-time topologies, including meshes whose devices are permuted;
4. *jax.make_mesh*: the coordinates `jax.make_mesh` would give each mesh position on the slice (computed
   by `analyzer.compile.placement` with jax's own mesh utilities and passed in as device coords). This is
   what the analysis uses by default for TPU slices, so that the cpu target prices the placement a real
   run gets; a mesh axis may then straddle physical axes (`Topology.placement()` says which do).

A topology string can name the placement after the slice: `v5e:2x4@in-order`, or a mapping
`v5e:2x4@data=y,model=x` (several physical axes joined by `+`: `v5p:4x4x4@data=x+y,model=z`); see
`split_placement`.

Each collective runs over *groups* of devices. `Topology.geometry(axes)` describes one group's shape on
the hardware: for a TPU, one `Ring` per physical axis the group spans (its size, the physical hops between
neighbours, wraparound, how many groups share its links); for a GPU, one `TreeLevel` per level of the
NVLink / scale-out tree (its degree and how many groups share each uplink). `analyzer.theory.cost` prices
collectives from that description. A mesh axis of 16 laid on a 4x4 sub-grid is a group that spans two
physical rings of 4: the cost model uses both, as the book does for a gather over several axes.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from analyzer.errors import HardwareError, MeshError, ShardingError, valid_choices
from analyzer.theory.hardware import HardwareSpec, list_hardware, load_hardware

__all__ = [
    "PhysicalSlice",
    "Ring",
    "TreeLevel",
    "GroupGeometry",
    "AxisInfo",
    "SubAxis",
    "Topology",
    "parse_slice",
    "smallest_slice",
    "product_slice",
    "split_placement",
    "AxisPlacement",
    "AxisLike",
]


# ------------------------------------------------------------------------------------------------ slices
@dataclass(frozen=True)
class PhysicalSlice:
    """A slice of hardware: physical axes (major to minor), their networks and wraparound.

    Attributes:
      hardware: the chip's spec.
      dims: physical axis sizes. TPU: `(dcn_slices?, *torus_dims)`; GPU: `(nodes, gpus_per_node)`.
      networks: per physical axis, "ici", "dcn", "nvlink" or "scale-out".
      wraps: per physical axis, whether it closes into a ring (TPU ICI axes by the hardware's rule;
        DCN and GPU axes are switched, reported False).
      axis_labels: short names of the physical axes ("x", "y", "z", "slice"; "node", "gpu").
    """

    hardware: HardwareSpec
    dims: tuple[int, ...]
    networks: tuple[str, ...]
    wraps: tuple[bool, ...]
    axis_labels: tuple[str, ...]

    @property
    def size(self) -> int:
        return int(np.prod(self.dims))

    @property
    def name(self) -> str:
        """The slice as a topology string, e.g. `v5e:8x4`, `v5e:16x16*2`, `h100:4x8`, `h100:8`."""
        hw = self.hardware
        if hw.kind == "gpu":
            nodes, per = self.dims
            return f"{hw.topology_prefix}:{per}" if nodes == 1 else f"{hw.topology_prefix}:{nodes}x{per}"
        torus = [d for d, n in zip(self.dims, self.networks) if n == "ici"]
        text = f"{hw.topology_prefix}:{'x'.join(map(str, torus))}"
        if self.networks[0] == "dcn":
            text += f"*{self.dims[0]}"
        return text

    def __str__(self) -> str:
        return self.name


_SLICE_RE = re.compile(r"^\s*(?P<prefix>[A-Za-z0-9.\-]+)\s*:\s*(?P<dims>\d+(?:\s*x\s*\d+)*)\s*(?:\*\s*(?P<dcn>\d+))?\s*$")


def _hardware_for_prefix(prefix: str) -> HardwareSpec:
    specs = [load_hardware(n) for n in list_hardware()]
    for spec in specs:
        if spec.topology_prefix == prefix.lower() or spec.name == prefix.lower():
            return spec
    raise HardwareError(f"unknown slice prefix {prefix!r}; "
                        f"{valid_choices(prefix, [s.topology_prefix for s in specs], what='prefixes')}")


def parse_slice(text: str, hardware: HardwareSpec | str | None = None) -> PhysicalSlice:
    """Parse a slice string such as `v5e:8x4`, `v5p:4x4x4`, `v5e:16x16*2`, `h100:8` or `h100:4x8`.

    Args:
      text: the slice.
      hardware: the spec to check it against (name or spec); None finds it from the prefix.

    Raises:
      HardwareError: a malformed string, a prefix of other hardware, dims the hardware cannot have.

    Example:
      >>> s = parse_slice("v5e:8x4")
      >>> s.dims, s.wraps
      ((8, 4), (False, False))
      >>> parse_slice("h100:4x8").networks
      ('scale-out', 'nvlink')
    """
    m = _SLICE_RE.match(str(text))
    if not m:
        raise HardwareError(f"bad topology {text!r}: expected PREFIX:DIMS such as 'v5e:8x4', 'v5p:4x4x4', "
                            f"'v5e:16x16*2' (2 slices over DCN), 'h100:8' or 'h100:4x8' (4 nodes of 8)")
    prefix = m.group("prefix")
    dims = tuple(int(d) for d in re.split(r"\s*x\s*", m.group("dims")))
    hw = _hardware_for_prefix(prefix) if hardware is None else load_hardware(hardware)
    if prefix.lower() not in (hw.topology_prefix, hw.name):
        raise HardwareError(f"topology {text!r} is for {prefix!r}, but the hardware is {hw.name} "
                            f"(its topologies read '{hw.topology_prefix}:...')")
    if any(d <= 0 for d in dims):
        raise HardwareError(f"bad topology {text!r}: dims must be positive")
    dcn = int(m.group("dcn")) if m.group("dcn") else None
    if hw.kind == "gpu":
        if dcn is not None:
            raise HardwareError(f"bad topology {text!r}: '*N' (DCN slices) is for TPUs; write GPU clusters "
                                f"as NODESxGPUS, e.g. '{hw.topology_prefix}:4x8'")
        assert hw.nvlink is not None
        if len(dims) == 1:
            dims = (1, dims[0])
        if len(dims) != 2:
            raise HardwareError(f"bad topology {text!r}: a GPU slice is GPUS or NODESxGPUS")
        nodes, per = dims
        if per > hw.nvlink.domain_size:
            hint = (f"'{hw.topology_prefix}:{per // hw.nvlink.domain_size}x{hw.nvlink.domain_size}'"
                    if per % hw.nvlink.domain_size == 0 else "NODESxGPUS")
            raise HardwareError(f"topology {text!r}: {per} GPUs exceed the NVLink domain of "
                                f"{hw.nvlink.domain_size} on {hw.name}; write {hint}")
        if nodes > 1:
            _check_scale_out(hw, nodes, text)
        return PhysicalSlice(hw, (nodes, per), ("scale-out", "nvlink"), (False, False), ("node", "gpu"))
    assert hw.ici is not None
    if len(dims) != hw.ici.rank:
        raise HardwareError(f"topology {text!r}: {hw.name} is a {hw.ici.rank}D torus, so give "
                            f"{hw.ici.rank} dims (max {'x'.join(map(str, hw.ici.max_topology))})")
    if any(d > mx for d, mx in zip(dims, hw.ici.max_topology)):
        raise HardwareError(f"topology {text!r}: larger than the {hw.name} pod "
                            f"{'x'.join(map(str, hw.ici.max_topology))}; join slices over DCN with '*N'")
    labels = ("x", "y", "z")[: len(dims)]
    wraps = hw.ici.wraparound.wraps(dims)
    if dcn is not None and dcn > 1:
        if hw.dcn_bandwidth_per_chip is None:
            raise HardwareError(f"topology {text!r}: {hw.name} has no DCN bandwidth in its spec")
        return PhysicalSlice(hw, (dcn, *dims), ("dcn",) + ("ici",) * len(dims), (False, *wraps),
                             ("slice", *labels))
    return PhysicalSlice(hw, dims, ("ici",) * len(dims), wraps, labels)


def _check_scale_out(hw: HardwareSpec, nodes: int, text: str) -> None:
    if hw.scale_out is None:
        raise HardwareError(f"topology {text!r}: the {hw.name} spec has no [scale_out] network, so "
                            f"cross-node collectives cannot be priced; use one node or a spec file with one")
    capacity = int(np.prod([lv.degree for lv in hw.scale_out.levels]))
    if nodes > capacity:
        raise HardwareError(f"topology {text!r}: {nodes} nodes exceed the {capacity} the {hw.name} "
                            f"scale-out tree holds")


def _factorizations(n: int, limits: Sequence[int]) -> Iterable[tuple[int, ...]]:
    if len(limits) == 1:
        if n <= limits[0]:
            yield (n,)
        return
    for d in range(1, min(n, limits[0]) + 1):
        if n % d == 0:
            for rest in _factorizations(n // d, limits[1:]):
                yield (d, *rest)


def _aligned(axis_sizes: Sequence[int], dims: Sequence[int]) -> bool:
    """True when laying the mesh axes in order gives each mesh axis a run of whole physical axes."""
    i = 0
    phys = [d for d in dims]
    for size in axis_sizes:
        prod = 1
        while prod < size and i < len(phys):
            prod *= phys[i]
            i += 1
        if prod != size:
            return False
    return True


def smallest_slice(hardware: HardwareSpec | str, axis_sizes: Sequence[int]) -> PhysicalSlice:
    """The smallest slice of `hardware` that holds a mesh of `axis_sizes`, for laying the axes in order.

    TPU: among the torus shapes with exactly as many chips as the mesh, prefer those where each mesh axis
    covers whole physical axes, then the most compact (smallest longest axis, the fewest hops). Meshes
    larger than a pod take several pods joined by DCN. GPU: one domain when it fits, else whole nodes.

    Example:
      >>> smallest_slice("tpu-v5e", (8, 4)).name
      'v5e:8x4'
      >>> smallest_slice("tpu-v5e", (8,)).name
      'v5e:2x4'
      >>> smallest_slice("h100", (2, 8)).name
      'h100:2x8'
    """
    hw = load_hardware(hardware)
    n = int(np.prod(axis_sizes)) if axis_sizes else 1
    if hw.kind == "gpu":
        assert hw.nvlink is not None
        dom = hw.nvlink.domain_size
        if n <= dom:
            return parse_slice(f"{hw.topology_prefix}:{n}", hw)
        if n % dom:
            raise MeshError(f"a mesh of {n} devices does not fill whole {hw.name} nodes of {dom}; "
                            f"use a multiple of {dom} or pass a topology")
        return parse_slice(f"{hw.topology_prefix}:{n // dom}x{dom}", hw)
    assert hw.ici is not None
    pod = int(np.prod(hw.ici.max_topology))
    if n > pod:
        if n % pod:
            raise MeshError(f"a mesh of {n} devices is larger than a {hw.name} pod of {pod} and not a "
                            f"multiple of it; pass a topology such as '{hw.topology_prefix}:...*N'")
        dims = "x".join(map(str, hw.ici.max_topology))
        return parse_slice(f"{hw.topology_prefix}:{dims}*{n // pod}", hw)
    candidates = list(_factorizations(n, hw.ici.max_topology))
    if not candidates:
        raise MeshError(f"no {hw.name} slice holds exactly {n} chips")
    best = min(candidates, key=lambda d: (not _aligned(axis_sizes, d), max(d), d))
    return parse_slice(f"{hw.topology_prefix}:{'x'.join(map(str, best))}", hw)


def product_slice(hardware: HardwareSpec | str, n: int) -> PhysicalSlice | None:
    """The single TPU slice of `n` chips in the shape the products come in, for placing a mesh the way
    `jax.make_mesh` does: the most compact torus (smallest longest axis, then the fewest hops around), dims
    ascending as libtpu names them (`v5e:2x4`, `v5e:4x8`, `v5p:2x2x4`). None for GPUs, for `n` beyond one
    pod, or when no torus of `n` chips fits the pod.

    Example:
      >>> product_slice("tpu-v5e", 8).name, product_slice("tpu-v5e", 32).name, product_slice("tpu-v5p", 16).name
      ('v5e:2x4', 'v5e:4x8', 'v5p:2x2x4')
    """
    hw = load_hardware(hardware)
    if hw.ici is None or n > int(np.prod(hw.ici.max_topology)):
        return None
    candidates = list(_factorizations(n, hw.ici.max_topology))
    if not candidates:
        return None
    best = min(candidates, key=lambda d: (max(d), sum(d), tuple(d) != tuple(sorted(d)), d))
    return parse_slice(f"{hw.topology_prefix}:{'x'.join(map(str, best))}", hw)


_PLACEMENT_RE = re.compile(r"^\s*(?P<slice>[^@]*?)\s*(?:@\s*(?P<placement>.*?)\s*)?$")


def split_placement(text: str) -> tuple[str, str | dict[str, tuple[str, ...]] | None]:
    """Split a topology string into the slice and the placement it asks for.

    `SLICE` leaves the placement to the analysis (jax.make_mesh's on TPU slices); `SLICE@in-order` lays
    the mesh axes on the physical axes in order; `SLICE@AXIS=PHYS[+PHYS],...` maps each mesh axis to the
    physical axes it spans, major to minor (`x`, `y`, `z`, `slice`; `node`, `gpu`).

    Raises:
      HardwareError: an empty slice or a malformed mapping.

    Example:
      >>> split_placement("v5e:2x4@data=y,model=x")
      ('v5e:2x4', {'data': ('y',), 'model': ('x',)})
      >>> split_placement("v5p:4x4x4@in-order")
      ('v5p:4x4x4', 'in order')
    """
    m = _PLACEMENT_RE.match(str(text))
    assert m is not None
    sl, spec = m.group("slice"), m.group("placement")
    if not sl:
        raise HardwareError(f"bad topology {text!r}: give the slice before '@', e.g. 'v5e:2x4@data=y,model=x'")
    if spec is None:
        return sl, None
    if spec.replace("_", "-").lower() in ("in-order", "inorder"):
        return sl, "in order"
    mapping: dict[str, tuple[str, ...]] = {}
    for item in spec.split(","):
        name, eq, phys = item.partition("=")
        name = name.strip()
        axes = tuple(p.strip() for p in phys.split("+"))
        if not eq or not name or not all(axes) or name in mapping:
            raise HardwareError(f"bad placement {spec!r} in topology {text!r}: expected 'in-order' or "
                                f"AXIS=PHYS[+PHYS],... such as 'data=x+y,model=z', each mesh axis once")
        mapping[name] = axes
    return sl, mapping


# ---------------------------------------------------------------------------------------------- geometry
@dataclass(frozen=True)
class Ring:
    """A group's extent along one physical TPU axis (or the DCN between slices).

    Attributes:
      physical_axis: index into the slice's dims.
      size: devices of the group along this axis.
      stride: physical hops between neighbouring members (1 when they are adjacent chips).
      wraparound: the members close into a ring (the axis wraps and the group covers it).
      network: "ici", "dcn", or "chip" (between the cores of one chip: counted free).
      link_bandwidth_one_way: bytes/s one way per link (DCN: egress per chip; chip: infinite).
      hop_latency: seconds per hop, or None when the spec gives none.
      share: how many groups' traffic shares each link (interleaved groups on one line: the stride).
    """

    physical_axis: int
    size: int
    stride: int
    wraparound: bool
    network: str
    link_bandwidth_one_way: float
    hop_latency: float | None
    share: int = 1

    @property
    def hops(self) -> int:
        """Physical hops on the longest path around the ring: `stride * floor(size/2)` with wraparound
        (both directions), `stride * (size-1)` without (sharding.md, pop quiz 2)."""
        if self.network == "dcn":
            return self.size - 1
        if self.network == "chip":
            return 0
        return self.stride * (self.size // 2 if self.wraparound else self.size - 1)


@dataclass(frozen=True)
class TreeLevel:
    """A group's extent at one level of a GPU switch tree (gpus.md, "precise tree form").

    Attributes:
      name: "nvlink" for the GPUs under one NVLink domain, else the scale-out level ("leaf", "spine"...).
      degree: D_i, how many children of one unit at this level the group spans (1: the level is idle).
      link_bandwidth: W_i, bytes/s of each child's uplink (a GPU's NVLink egress, a node's egress...).
      share: how many groups' traffic shares one child's uplink.
      network: "nvlink" or "scale-out".
    """

    name: str
    degree: int
    link_bandwidth: float
    share: int
    network: str


@dataclass(frozen=True)
class GroupGeometry:
    """How one replica group lies on the hardware.

    Attributes:
      kind: "torus" (TPU rings) or "tree" (GPU NVLink and scale-out levels).
      group_size: devices per group.
      num_groups: groups running at once.
      rings: per spanned physical TPU axis (torus).
      levels: per tree level the group spans (tree).
      mesh_axes: the mesh axes (or sub-axes) that make the group, as given, for describing it.
      regular: False when the group is not an evenly strided product of physical lines (the model then
        treats each spanned axis as a line without wraparound, a conservative bound).
    """

    kind: str
    group_size: int
    num_groups: int
    rings: tuple[Ring, ...] = ()
    levels: tuple[TreeLevel, ...] = ()
    mesh_axes: tuple[str, ...] = ()
    regular: bool = True

    def with_wraparound(self, wrap: bool = True) -> GroupGeometry:
        """The same groups as if every spanned ICI ring did (or did not) close: for what-if pricing, e.g. the
        saving a topology with wraparound would bring (`analyzer.theory.cost.geometry_cost` prices it).

        Example:
          >>> t = Topology.for_mesh("tpu-v5e", ("X", "Y"), (8, 4))
          >>> [r.wraparound for r in t.geometry("Y").with_wraparound().rings]
          [True]
        """
        rings = tuple(replace(r, wraparound=wrap) if r.network == "ici" else r for r in self.rings)
        return replace(self, rings=rings)

    @property
    def networks(self) -> tuple[str, ...]:
        if self.kind == "torus":
            return tuple(dict.fromkeys(r.network for r in self.rings))
        return tuple(dict.fromkeys(lv.network for lv in self.levels if lv.degree > 1))


# ------------------------------------------------------------------------------------------- mesh axes
@dataclass(frozen=True)
class SubAxis:
    """Part of a mesh axis: axis `name` of size n viewed as `(pre, size, n // (pre*size))`, major to minor;
    this is the middle factor. XLA prints it as `{'name':(pre)size}`; `str()` gives `name:(pre)size`.

    A plain `(name, size)` pair given where axes are expected means the major part: `SubAxis(name, 1, size)`.

    Example:
      >>> SubAxis.parse("X:(2)4")
      SubAxis(name='X', pre=2, size=4)
    """

    name: str
    pre: int
    size: int

    def __str__(self) -> str:
        return f"{self.name}:({self.pre}){self.size}"

    @classmethod
    def parse(cls, text: str) -> SubAxis:
        m = re.fullmatch(r"\s*([^:\s]+)\s*:\s*(?:\((\d+)\))?\s*(\d+)\s*", text)
        if not m:
            raise ShardingError(f"bad sub-axis {text!r}: expected NAME:(PRE)SIZE, e.g. 'X:(1)2'")
        return cls(m.group(1), int(m.group(2) or 1), int(m.group(3)))


AxisLike = str | SubAxis | tuple


def _normalize_axes(axes: AxisLike | Sequence[AxisLike]) -> tuple[str | SubAxis, ...]:
    if isinstance(axes, (str, SubAxis)):
        axes = (axes,)
    elif (isinstance(axes, tuple) and len(axes) in (2, 3) and isinstance(axes[0], str)
          and all(isinstance(x, int) for x in axes[1:])):
        axes = (axes,)  # one sub-axis given as (name, size) or (name, pre, size)
    out: list[str | SubAxis] = []
    for a in axes:
        if isinstance(a, SubAxis):
            out.append(a)
        elif isinstance(a, str):
            out.append(SubAxis.parse(a) if ":" in a else a)
        elif isinstance(a, tuple) and len(a) == 2:
            out.append(SubAxis(str(a[0]), 1, int(a[1])))
        elif isinstance(a, tuple) and len(a) == 3:
            out.append(SubAxis(str(a[0]), int(a[1]), int(a[2])))
        else:
            raise ShardingError(f"bad mesh axis {a!r}: give a name, NAME:(PRE)SIZE, (name, size) or "
                                f"(name, pre, size)")
    return tuple(out)


@dataclass(frozen=True)
class AxisInfo:
    """What one mesh axis rides on.

    Attributes:
      name, size: the mesh axis.
      network: "ici", "dcn", "nvlink" or "scale-out" (the slowest network it crosses).
      physical_axes: labels of the physical axes it spans (e.g. ("x",) or ("y", "z")).
      ring_sizes: devices along each spanned physical axis.
      wraparound: True when every spanned physical ring closes (TPU); False on lines and switched networks.
      links: ICI links per chip the axis can use (2 per spanned ring that is longer than 2 chips, else 1);
        for GPUs the NVLink links per GPU, or 0 across nodes.
      hops: physical hops on the longest path of one group.
    """

    name: str
    size: int
    network: str
    physical_axes: tuple[str, ...]
    ring_sizes: tuple[int, ...]
    wraparound: bool
    links: int
    hops: int

    def describe(self) -> str:
        where = "x".join(map(str, self.ring_sizes)) or "1"
        on = "+".join(self.physical_axes) or "-"
        wrap = "wraparound" if self.wraparound else "no wraparound"
        if self.network in ("nvlink", "scale-out"):
            wrap = "switched"
        return f"{self.name}={self.size}: {self.network} on {on} ({where}), {wrap}, {self.links} links, {self.hops} hops"


@dataclass(frozen=True)
class AxisPlacement:
    """How the device groups of one mesh axis lie on the physical axes.

    Attributes:
      name, size: the mesh axis.
      physical_axes: labels of the physical axes its groups span.
      extent: per spanned physical axis, how many distinct coordinates one group covers there.
      regular: each group is an evenly spaced grid of whole or partial physical lines (extents multiply to
        the group size). False when the groups zig-zag across physical axes, as jax's ring orders make them.
      straddles: the axis spans several physical axes without being such a grid: its collectives cannot ride
        one ring per physical axis, and the cost model prices each spanned axis as a line without wraparound.
    """

    name: str
    size: int
    physical_axes: tuple[str, ...]
    extent: tuple[int, ...]
    regular: bool
    straddles: bool

    def describe(self) -> str:
        on = "+".join(self.physical_axes) or "-"
        if self.straddles:
            return (f"straddles {on}: a group of {self.size} covers {'x'.join(map(str, self.extent))} chips' "
                    f"extent, not a grid of physical lines")
        return f"on {on} ({'x'.join(map(str, self.extent)) or '1'})"


# --------------------------------------------------------------------------------------------- topology
@dataclass(frozen=True)
class Topology:
    """A mesh laid on a physical slice.

    Build it with `Topology.for_mesh(...)`. Attributes:
      slice: the physical slice.
      axis_names, axis_sizes: the mesh (major to minor).
      coords: the physical coordinate of each logical device (position in `mesh.devices.flat`).
      origin: how the placement was decided: "in order", "mapping", "device coords", "jax.make_mesh".
      declared: False when the slice was chosen here (the smallest that holds the mesh).
    """

    slice: PhysicalSlice
    axis_names: tuple[str, ...]
    axis_sizes: tuple[int, ...]
    coords: tuple[tuple[int, ...], ...]
    origin: str = "in order"
    declared: bool = True
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    @property
    def hardware(self) -> HardwareSpec:
        return self.slice.hardware

    @property
    def num_devices(self) -> int:
        return len(self.coords)

    # ------------------------------------------------------------------------------------- constructors
    @classmethod
    def for_mesh(
        cls,
        hardware: HardwareSpec | str,
        axis_names: Sequence[str],
        axis_sizes: Sequence[int],
        *,
        topology: str | PhysicalSlice | None = None,
        mapping: Mapping[str, str | int | Sequence[str | int]] | None = None,
        device_coords: Sequence[Sequence[int]] | None = None,
        coords_origin: str = "device coords",
        declared: bool | None = None,
    ) -> Topology:
        """Lay a mesh on hardware.

        Args:
          hardware: spec or name.
          axis_names, axis_sizes: the mesh, major to minor.
          topology: the slice (`"v5e:8x4"`); None picks the smallest that holds the mesh (or, with
            `device_coords`, the bounding box of the coords).
          mapping: mesh axis -> physical axes it spans, major to minor, by label ("x", "y", "z", "slice",
            "node", "gpu") or index. Every physical axis is used once; sizes must multiply out.
          device_coords: the physical coordinate of each logical device, in `mesh.devices.flat` order (for
            TPUs, `device.coords`). Takes precedence over `mapping`.
          coords_origin: what `device_coords` are: "device coords" (the devices' own) or "jax.make_mesh"
            (where jax.make_mesh puts each position on the slice, `analyzer.compile.placement`).
          declared: whether the slice was the user's choice (default: `topology` is not None).

        A topology string may carry the placement after '@' (`split_placement`): `v5e:2x4@in-order` or
        `v5e:2x4@data=y,model=x`; without it, and without `mapping` or `device_coords`, axes go in order.

        Raises:
          MeshError: the mesh and the slice disagree (device count, mapping sizes, duplicate coords).
          HardwareError: a bad topology string.

        Example:
          >>> t = Topology.for_mesh("tpu-v5e", ("X", "Y"), (8, 4))
          >>> t.axis_info("Y").wraparound
          False
        """
        hw = load_hardware(hardware)
        names, sizes = tuple(axis_names), tuple(int(s) for s in axis_sizes)
        _check_mesh(names, sizes)
        n = int(np.prod(sizes)) if sizes else 1
        declared = topology is not None if declared is None else declared
        if coords_origin not in ("device coords", "jax.make_mesh"):
            raise ValueError(f"coords_origin must be 'device coords' or 'jax.make_mesh', got {coords_origin!r}")
        if isinstance(topology, str):
            topology, mapping = _placement_of(topology, mapping)
        if device_coords is not None:
            coords, sl = _placed_by_coords(hw, device_coords, topology, n)
            return cls(sl, names, sizes, coords, origin=coords_origin, declared=declared)
        if topology is None:
            sl = smallest_slice(hw, sizes)
        else:
            sl = topology if isinstance(topology, PhysicalSlice) else parse_slice(topology, hw)
        if sl.size != n:
            raise MeshError(f"the mesh {dict(zip(names, sizes))} has {n} devices but the slice {sl.name} "
                            f"has {sl.size}; use a mesh of {sl.size} devices or another topology")
        if mapping is None:
            flat = np.arange(n)
            coords = tuple(tuple(int(v) for v in c) for c in zip(*np.unravel_index(flat, sl.dims)))
            return cls(sl, names, sizes, coords, origin="in order", declared=declared)
        return cls(sl, names, sizes, _coords_from_mapping(sl, names, sizes, mapping), origin="mapping",
                   declared=declared)

    # -------------------------------------------------------------------------------------------- groups
    def groups(self, axes: AxisLike | Sequence[AxisLike]) -> np.ndarray:
        """The device groups of a collective over `axes`: int array `[num_groups, group_size]` of logical
        ids (positions in `mesh.devices.flat`), members ordered major to minor over `axes`.

        Raises:
          ShardingError: an axis the mesh lacks, an axis used twice, a sub-axis that does not divide.

        Example:
          >>> Topology.for_mesh("tpu-v5e", ("X", "Y"), (2, 4)).groups("X").tolist()
          [[0, 4], [1, 5], [2, 6], [3, 7]]
        """
        norm = _normalize_axes(axes)
        key = ("groups", norm)
        if key not in self._cache:
            groups = mesh_groups(self.axis_names, self.axis_sizes, norm)
            groups.setflags(write=False)
            self._cache[key] = groups
        return self._cache[key]

    def axis_info(self, axis: AxisLike) -> AxisInfo:
        """Ring size, wraparound, links, hops and network of one mesh axis (or sub-axis)."""
        (norm,) = _normalize_axes(axis)
        label = str(norm)
        size = self.axis_sizes[self._axis_index(norm if isinstance(norm, str) else norm.name)] \
            if isinstance(norm, str) else norm.size
        geo = self.geometry((norm,))
        hw = self.hardware
        if geo.kind == "torus":
            rings = geo.rings
            network = ("dcn" if any(r.network == "dcn" for r in rings) else
                       "chip" if rings and all(r.network == "chip" for r in rings) else "ici")
            links = sum((hw.ici.links_per_axis if r.size > 2 or r.wraparound else 1)
                        for r in rings if r.network == "ici") if hw.ici else 0
            return AxisInfo(
                name=label, size=size, network=network,
                physical_axes=tuple(self.slice.axis_labels[r.physical_axis] for r in rings),
                ring_sizes=tuple(r.size for r in rings),
                wraparound=bool(rings) and all(r.wraparound for r in rings),
                links=links, hops=sum(r.hops for r in rings),
            )
        active = [lv for lv in geo.levels if lv.degree > 1]
        network = "scale-out" if any(lv.network == "scale-out" for lv in active) else "nvlink"
        assert hw.nvlink is not None
        return AxisInfo(
            name=label, size=size, network=network, physical_axes=tuple(lv.name for lv in active),
            ring_sizes=tuple(lv.degree for lv in active), wraparound=False,
            links=hw.nvlink.links_per_gpu if network == "nvlink" else 0,
            hops=len(active),
        )

    def placement(self) -> dict[str, AxisPlacement]:
        """Per mesh axis, the physical axes its groups span and whether it straddles them.

        Example:
          >>> t = Topology.for_mesh("tpu-v5e", ("data", "model"), (4, 2), topology="v5e:2x4",
          ...                       device_coords=[(0, 0), (1, 0), (0, 1), (1, 1), (1, 3), (0, 3), (1, 2), (0, 2)])
          >>> t.placement()["data"].straddles, t.placement()["model"].straddles
          (True, False)
        """
        key = ("placement",)
        if key not in self._cache:
            out: dict[str, AxisPlacement] = {}
            for name, size in zip(self.axis_names, self.axis_sizes):
                geo = self.geometry(name)
                rings = geo.rings if geo.kind == "torus" else ()
                if geo.kind == "torus":
                    labels = tuple(self.slice.axis_labels[r.physical_axis] for r in rings)
                    extent = tuple(r.size for r in rings)
                else:
                    active = [lv for lv in geo.levels if lv.degree > 1]
                    labels, extent = tuple(lv.name for lv in active), tuple(lv.degree for lv in active)
                regular = geo.regular
                out[name] = AxisPlacement(name, size, labels, extent, regular,
                                          straddles=not regular and len(labels) > 1)
            self._cache[key] = out
        return dict(self._cache[key])

    def straddling_axes(self) -> tuple[str, ...]:
        """The mesh axes that straddle physical axes (see `placement`), major to minor."""
        return tuple(n for n, p in self.placement().items() if p.straddles)

    def _axis_index(self, name: str) -> int:
        try:
            return self.axis_names.index(name)
        except ValueError:
            raise ShardingError(f"the mesh has no axis {name!r}; "
                                f"{valid_choices(name, self.axis_names, what='mesh axes')}") from None

    @cached_property
    def _coords_array(self) -> np.ndarray:
        return np.asarray(self.coords, dtype=np.int64).reshape(len(self.coords), len(self.slice.dims))

    def geometry(self, axes: AxisLike | Sequence[AxisLike]) -> GroupGeometry:
        """How the groups of a collective over `axes` lie on the hardware (see `GroupGeometry`)."""
        norm = _normalize_axes(axes)
        key = ("geometry", norm)
        if key not in self._cache:  # the analysis prices many collectives over the same axes
            geo = self.geometry_for_groups(self.groups(norm))
            self._cache[key] = GroupGeometry(geo.kind, geo.group_size, geo.num_groups, geo.rings, geo.levels,
                                             tuple(str(a) for a in norm), geo.regular)
        return self._cache[key]

    def geometry_for_groups(self, groups: Sequence[Sequence[int]] | np.ndarray) -> GroupGeometry:
        """`geometry` for explicit device groups (logical ids), e.g. replica groups not aligned to mesh axes.

        Groups of equal size are expected; the worst group sets each ring's shape and sharing.
        """
        g = np.asarray(groups, dtype=np.int64)
        if g.ndim != 2 or g.size == 0:
            raise MeshError("replica groups must be a non-empty list of equal-size device lists")
        if g.min() < 0 or g.max() >= self.num_devices:
            raise MeshError(f"replica groups name devices outside 0..{self.num_devices - 1}")
        pos = self._coords_array[g]  # [groups, size, phys]
        if self.hardware.kind == "gpu":
            return self._tree_geometry(pos)
        return self._torus_geometry(pos)

    def _torus_geometry(self, pos: np.ndarray) -> GroupGeometry:
        hw, sl = self.hardware, self.slice
        assert hw.ici is not None
        num_groups, size, _ = pos.shape
        rings: list[Ring] = []
        regular = True
        prod = 1
        for k, dim in enumerate(sl.dims):
            # Per group: the distinct coordinates along axis k, their count and spacing (vectorised).
            v = np.sort(pos[:, :, k], axis=1)
            d = np.diff(v, axis=1)
            nz = d > 0
            count = 1 + nz.sum(axis=1)
            if int(count.max()) <= 1:
                continue
            dmax = np.where(nz, d, 0).max(axis=1)
            dmin = np.where(nz, d, dim + 1).min(axis=1)
            even = dmax == dmin
            if not bool(even[count > 1].all()):
                regular = False
            if sl.networks[k] == "dcn":
                s = int(count.max())
                ring = Ring(k, s, 1, False, "dcn", float(hw.dcn_bandwidth_per_chip), None, 1)
            elif sl.networks[k] == "chip":
                ring = Ring(k, int(count.max()), 1, False, "chip", float("inf"), None, 1)
            else:
                wraps = sl.wraps[k] & even & (count * dmax == dim)
                hops = np.where(wraps, dmax * (count // 2), dmax * (count - 1))
                gi = int(np.lexsort((dmax, hops))[-1])  # the worst group: most hops, then most sharing
                s, stride = int(count[gi]), int(dmax[gi])
                ring = Ring(k, s, stride, bool(wraps[gi]), "ici", hw.ici.link_bandwidth_one_way,
                            hw.ici.hop_latency, share=stride)
            rings.append(ring)
            prod *= ring.size
        if prod != size:
            regular = False  # the group is not a product of lines (e.g. a diagonal); rings are a bound
        return GroupGeometry("torus", size, num_groups, tuple(rings), (), (), regular)

    def _tree_geometry(self, pos: np.ndarray) -> GroupGeometry:
        hw, sl = self.hardware, self.slice
        assert hw.nvlink is not None
        num_groups, size, _ = pos.shape
        gid = np.repeat(np.arange(num_groups), size)
        node = pos[:, :, 0].reshape(-1)
        # NVLink level: the most GPUs one group has inside one node; each GPU's egress is its own.
        _, per_node = np.unique(gid * sl.dims[0] + node, return_counts=True)
        levels = [TreeLevel("nvlink", int(per_node.max()), hw.nvlink.gpu_egress, 1, "nvlink")]
        if sl.dims[0] > 1:
            assert hw.scale_out is not None
            unit = node  # the child unit at the current level: a node, then an SU, ...
            n_units = sl.dims[0]
            for lv in hw.scale_out.levels:
                pairs = np.unique(np.stack([gid, unit], axis=1), axis=0)  # (group, child) present
                parent = pairs[:, 1] // lv.degree
                # D_i: the most children of one parent a group spans
                _, degree = np.unique(pairs[:, 0] * (n_units + 1) + parent, return_counts=True)
                # g_i: how many groups have a member under one child (they share its uplink)
                _, share = np.unique(pairs[:, 1], return_counts=True)
                levels.append(TreeLevel(lv.name, int(degree.max()), lv.link_bandwidth, int(share.max()),
                                        "scale-out"))
                unit = unit // lv.degree
                if int(unit.max()) == 0:
                    break
        return GroupGeometry("tree", size, num_groups, (), tuple(levels), (), True)

    # ------------------------------------------------------------------------------------------ describe
    def describe(self) -> str:
        """A few lines for people: the slice, how it was chosen, and each mesh axis's network and rings."""
        how = {"in order": "mesh axes laid on the physical axes in order",
               "mapping": "mesh axes placed by the given mapping",
               "device coords": "placed by the devices' physical coords",
               "jax.make_mesh": "placed where jax.make_mesh puts each mesh position on it (jax's mesh "
                                "utilities over the chips' coords)"}[self.origin]
        if self.origin == "jax.make_mesh" and self.slice.networks[0] == "dcn":
            how = ("placed where jax's hybrid mesh puts each mesh position on it (mesh_utils."
                   "create_hybrid_device_mesh over the chips' slice and coords, the major mesh axes over DCN; "
                   "jax.make_mesh refuses several slices)")
        if self.declared:
            chosen = "declared"
        elif self.origin == "jax.make_mesh":
            chosen = "the single slice of that many chips (none was given)"
        elif self.origin == "device coords":
            chosen = "the bounding box of the devices' coords"
        else:
            chosen = "the smallest slice that holds the mesh (none was given)"
        lines = [f"{self.hardware.name} slice {self.slice.name}: {chosen}; {how}."]
        if self.hardware.ici is not None:
            lines.append(f"  ICI {self.hardware.ici.wraparound.describe()}.")
        placement = self.placement()
        for name in self.axis_names:
            extra = f" ({placement[name].describe()})" if placement[name].straddles else ""
            lines.append("  " + self.axis_info(name).describe() + extra)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.describe()


def _check_mesh(names: tuple[str, ...], sizes: tuple[int, ...]) -> None:
    """A mesh has a size per axis name, names once, sizes positive."""
    if len(names) != len(sizes):
        raise MeshError(f"mesh has {len(names)} axis names but {len(sizes)} sizes")
    if len(set(names)) != len(names):
        raise MeshError(f"mesh axis names repeat: {names}")
    if any(s <= 0 for s in sizes):
        raise MeshError(f"mesh axis sizes must be positive, got {sizes}")


def _placement_of(topology: str, mapping: Mapping | None) -> tuple[str, Mapping | None]:
    """A topology string without its '@' placement (`split_placement`), and the mapping it carries (or the
    one passed; not both)."""
    topology, spec = split_placement(topology)
    if isinstance(spec, dict):
        if mapping is not None:
            raise MeshError(f"the topology {topology!r} carries a mapping and a mapping was passed too; "
                            "give one")
        mapping = spec
    return topology, mapping


def _placed_by_coords(hw: HardwareSpec, device_coords: Sequence[Sequence[int]], topology: str | PhysicalSlice | None,
                      n: int) -> tuple[tuple[tuple[int, ...], ...], PhysicalSlice]:
    """The coords of `n` devices given by `device_coords` and the slice they lie on (`topology`, or the
    bounding box of the coords, moved to the origin), with a core axis where the chip has several."""
    coords = tuple(tuple(int(c) for c in xyz) for xyz in device_coords)
    if len(coords) != n:
        raise MeshError(f"{len(coords)} device coords for a mesh of {n} devices")
    if not coords or len({len(c) for c in coords}) != 1:
        raise MeshError("device coords must all have the same number of coordinates")
    if hw.ici is not None:
        # jax reports (x, y, z) even on 2D tori: drop trailing coordinates that never change (down to
        # the given slice's rank, which counts a leading DCN slice index)
        rank = hw.ici.rank
        if topology is not None:
            rank = len((topology if isinstance(topology, PhysicalSlice) else parse_slice(topology, hw)).dims)
        while len(coords[0]) > rank and len({c[-1] for c in coords}) == 1:
            coords = tuple(c[:-1] for c in coords)
    if topology is None:
        low = [min(c[k] for c in coords) for k in range(len(coords[0]))]
        coords = tuple(tuple(v - lo for v, lo in zip(c, low)) for c in coords)
        dims = tuple(max(c[k] for c in coords) + 1 for k in range(len(coords[0])))
        topology = f"{hw.topology_prefix}:{'x'.join(map(str, dims))}"
    sl = topology if isinstance(topology, PhysicalSlice) else parse_slice(topology, hw)
    if any(len(c) != len(sl.dims) or any(not 0 <= v < d for v, d in zip(c, sl.dims)) for c in coords):
        raise MeshError(f"device coords do not fit the slice {sl.name} (dims {sl.dims})")
    return _add_core_axis(coords, sl)


def _add_core_axis(coords: tuple[tuple[int, ...], ...], sl: PhysicalSlice
                   ) -> tuple[tuple[tuple[int, ...], ...], PhysicalSlice]:
    """Chips with several devices (TPU7x has two cores per chip without megacore) report one coordinate
    for each: number the devices of a chip in order as a minor "core" axis on the "chip" network, which the
    cost model counts as free (the book gives no figure for the link between the two cores)."""
    counts: dict[tuple[int, ...], int] = {}
    for c in coords:
        counts[c] = counts.get(c, 0) + 1
    k = set(counts.values())
    if k == {1}:
        return coords, sl
    if len(k) != 1:
        raise MeshError("devices share physical coords unevenly (some chips have more devices than others); "
                        "give one coordinate per device")
    (per_chip,) = k
    seen: dict[tuple[int, ...], int] = {}
    out = []
    for c in coords:
        out.append((*c, seen.get(c, 0)))
        seen[c] = seen.get(c, 0) + 1
    return tuple(out), PhysicalSlice(sl.hardware, (*sl.dims, per_chip), (*sl.networks, "chip"),
                                     (*sl.wraps, False), (*sl.axis_labels, "core"))


def mesh_groups(axis_names: Sequence[str], axis_sizes: Sequence[int],
                axes: AxisLike | Sequence[AxisLike]) -> np.ndarray:
    """Device groups (logical ids, `[num_groups, group_size]`) of a collective over `axes` of a mesh.

    Sub-axes split their axis into `(pre, size, rest)`; members vary over the chosen factors, major to
    minor in the order `axes` lists them.

    Raises:
      ShardingError: an unknown axis, an axis (or overlapping sub-axes) used twice, a sub-axis that does
        not divide its axis.
    """
    names, sizes = tuple(axis_names), tuple(int(s) for s in axis_sizes)
    norm = _normalize_axes(axes)
    # factors per mesh axis: list of (label, size); selected labels
    factors: list[list[tuple[str, int]]] = [[(n, s)] for n, s in zip(names, sizes)]
    chosen: list[str] = []
    used: dict[str, str] = {}
    for a in norm:
        name = a if isinstance(a, str) else a.name
        if name not in names:
            raise ShardingError(f"the mesh has no axis {name!r}; {valid_choices(name, names, what='mesh axes')}")
        if name in used:
            raise ShardingError(f"mesh axis {name!r} used twice in {[str(x) for x in norm]}: a collective "
                                f"runs over each axis at most once")
        i = names.index(name)
        if isinstance(a, str):
            used[name] = name
            chosen.append(name)
            continue
        n = sizes[i]
        if a.pre <= 0 or a.size <= 0 or n % (a.pre * a.size):
            raise ShardingError(f"sub-axis {a} does not divide mesh axis {name!r} of size {n}: "
                                f"pre*size = {a.pre * a.size} must divide {n}")
        post = n // (a.pre * a.size)
        factors[i] = [(f"{name}#pre", a.pre), (str(a), a.size), (f"{name}#post", post)]
        used[name] = str(a)
        chosen.append(str(a))
    flat_labels = [lab for fs in factors for lab, _ in fs]
    flat_sizes = [s for fs in factors for _, s in fs]
    ids = np.arange(int(np.prod(sizes)) if sizes else 1, dtype=np.int64).reshape(flat_sizes)
    sel = [flat_labels.index(c) for c in chosen]
    rest = [k for k in range(len(flat_labels)) if k not in sel]
    gsize = int(np.prod([flat_sizes[k] for k in sel])) if sel else 1
    return ids.transpose(rest + sel).reshape(-1, gsize)


def _coords_from_mapping(sl: PhysicalSlice, names: tuple[str, ...], sizes: tuple[int, ...],
                         mapping: Mapping[str, Any]) -> tuple[tuple[int, ...], ...]:
    labels = list(sl.axis_labels)
    unknown = [k for k in mapping if k not in names]
    if unknown:
        raise MeshError(f"mapping names mesh axis {unknown[0]!r}; {valid_choices(unknown[0], names, what='mesh axes')}")
    spans: list[list[int]] = []
    seen: set[int] = set()
    for name, size in zip(names, sizes):
        raw = mapping.get(name, ())
        if isinstance(raw, (str, int)):
            raw = (raw,)
        idx: list[int] = []
        for r in raw:
            if isinstance(r, int) and 0 <= r < len(labels):
                k = r
            elif isinstance(r, str) and r in labels:
                k = labels.index(r)
            else:
                raise MeshError(f"mapping of mesh axis {name!r}: unknown physical axis {r!r}; "
                                f"{valid_choices(str(r), labels, what='physical axes')}")
            if k in seen:
                raise MeshError(f"physical axis {labels[k]!r} is mapped twice")
            seen.add(k)
            idx.append(k)
        span = int(np.prod([sl.dims[k] for k in idx])) if idx else 1
        if span != size:
            raise MeshError(f"mesh axis {name!r} has size {size} but the physical axes {[labels[k] for k in idx]} "
                            f"it is mapped to hold {span}")
        spans.append(idx)
    missing = [labels[k] for k in range(len(labels)) if k not in seen and sl.dims[k] > 1]
    if missing:
        raise MeshError(f"physical axes {missing} of {sl.name} are not mapped to any mesh axis")
    coords = []
    for multi in itertools.product(*(range(s) for s in sizes)):
        c = [0] * len(sl.dims)
        for i_m, idx in zip(multi, spans):
            sub = np.unravel_index(i_m, [sl.dims[k] for k in idx]) if idx else ()
            for k, v in zip(idx, sub):
                c[k] = int(v)
        coords.append(tuple(c))
    return tuple(coords)
