"""The sharding notation of "How to Scale Your Model" (chapter 3): `A[I_XY, J]{U_Z}`.

Each dimension of an array is named by a letter (or word); a subscript lists the mesh axes it is split
over, major to minor (`I_XY`: split over X, then each X-block over Y); `{U_Z}` says the values are
partial sums not yet reduced over Z. A mesh axis can appear at most once (`A[I_X, J_X]` is forbidden).

Upper-case axis names of one character print run together (`I_XY`); one longer name prints bare (`B_data`);
several longer names print braced (`B_{data,model}`),
and so do sub-axes (`I_{X:(1)2}`: the major half of X, XLA's `{'X':(1)2}`). Axes that are manual (inside
`shard_map`) print as a `{M_Y}` suffix, the way unreduced ones print as `{U_Y}`.

    >>> n = Notation.parse("A[I_XY, J]")
    >>> n = n.with_mesh({"X": 8, "Y": 2}).with_shape((1024, 4096), "f32")
    >>> n.local_shape, n.bytes_per_device
    ((64, 4096), 1048576)

`Notation.from_partition_spec` builds it from a jax `PartitionSpec` and `Notation.from_hlo_sharding` from
an HLO sharding (device assignment -> which mesh axes split each dim). `format_collective` writes a
collective: `AllGather_Y: [E_Y, F] -> [E, F]`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from analyzer.errors import ShardingError, valid_choices
from analyzer.hlo.sharding import HloSharding, parse_hlo_sharding
from analyzer.theory.dtypes import dtype_bytes

__all__ = [
    "axis_size",
    "Dim",
    "Notation",
    "NotationSyntaxError",
    "mesh_axes",
    "dtype_bytes",
    "format_collective",
    "parse_collective",
    "Collective",
    "COLLECTIVE_NAMES",
    "SUB_AXIS",
    "sub_axis_meaning",
    "sub_axes_note",
]

# Collective kinds (HLO opcode names) -> the chapter's names.
COLLECTIVE_NAMES: Mapping[str, str] = {
    "all-gather": "AllGather",
    "reduce-scatter": "ReduceScatter",
    "all-reduce": "AllReduce",
    "all-to-all": "AllToAll",
    "collective-permute": "CollectivePermute",
    "collective-broadcast": "CollectiveBroadcast",
    "ragged-all-to-all": "RaggedAllToAll",
}

class NotationSyntaxError(ShardingError):
    """Notation text that does not parse; `column` is 1-based."""

    def __init__(self, message: str, text: str, column: int) -> None:
        self.message, self.text, self.column = message, text, column
        super().__init__(f"bad sharding notation at column {column}: {message}\n  {text}\n  {' ' * (column - 1)}^")


def mesh_axes(mesh: Any) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(axis names, axis sizes) of a mesh given as a dict, a jax `Mesh`/`AbstractMesh`, a report `MeshInfo`,
    or a sequence of `(name, size)` pairs.

    Example:
      >>> mesh_axes({"X": 8, "Y": 4})
      (('X', 'Y'), (8, 4))
    """
    if isinstance(mesh, Mapping):
        return tuple(str(k) for k in mesh), tuple(int(v) for v in mesh.values())
    if hasattr(mesh, "axis_names") and hasattr(mesh, "axis_sizes") and not hasattr(mesh, "devices"):
        return tuple(mesh.axis_names), tuple(int(s) for s in mesh.axis_sizes)
    if hasattr(mesh, "axis_names") and hasattr(mesh, "devices"):
        return tuple(mesh.axis_names), tuple(int(s) for s in mesh.devices.shape)
    if hasattr(mesh, "axis_names") and hasattr(mesh, "shape"):
        return tuple(mesh.axis_names), tuple(int(s) for s in dict(mesh.shape).values())
    try:
        pairs = [(str(n), int(s)) for n, s in mesh]
    except (TypeError, ValueError):
        raise ShardingError(f"cannot read a mesh from {mesh!r}: give a dict such as {{'X': 8, 'Y': 4}} "
                            f"or a jax Mesh") from None
    return tuple(n for n, _ in pairs), tuple(s for _, s in pairs)


def axis_size(names: tuple[str, ...], sizes: tuple[int, ...], axis: str) -> int:
    """Size of a mesh axis or of a sub-axis `NAME:(PRE)SIZE`.

    Raises:
      ShardingError: the mesh has no such axis, or the sub-axis does not divide it.

    Example:
        >>> axis_size(("X", "Y"), (4, 2), "X:(1)2"), axis_size(("X", "Y"), (4, 2), "Y")
        (2, 2)
    """
    m = re.fullmatch(r"(.+?):\((\d+)\)(\d+)", axis)
    base = m.group(1) if m else axis
    if base not in names:
        raise ShardingError(f"the mesh has no axis {base!r}; {valid_choices(base, names, what='mesh axes')}")
    if m:
        pre, size = int(m.group(2)), int(m.group(3))
        full = sizes[names.index(base)]
        if full % (pre * size):
            raise ShardingError(f"sub-axis {axis} does not divide mesh axis {base!r} of size {full}")
        return size
    return sizes[names.index(base)]


# What a sub-axis label means: the one definition every report, trace and doc states (sub_axes_note).
SUB_AXIS = ("a label X:(pre)size (XLA's spelling, also in the trace's track names, e.g. ICI X:(pre)size) is the "
            "part of mesh axis X its group runs over: X's devices split, major to minor, into pre x size x the rest, "
            "and the group is the size devices of the middle factor, so its members are (X's size) / (pre x size) "
            "positions apart along X")

_SUB_AXIS_LABEL = re.compile(r"(.+?):\((\d+)\)(\d+)")


def sub_axis_meaning(label: str, mesh: Any) -> str | None:
    """What one sub-axis label is on a mesh (dict, jax Mesh, `MeshInfo`, names and sizes of a `Topology`...), in
    words; None when `label` is a whole axis. A label whose axis the mesh lacks, or that does not divide it, is
    described by its size alone.

    Example:
        >>> sub_axis_meaning("data:(1)2", {"data": 8, "fsdp": 32})
        "data:(1)2 is 2 of data's 8 (1 x 2 x 4: the major factor: 2 positions 4 apart)"
        >>> sub_axis_meaning("fsdp:(8)4", {"data": 8, "fsdp": 32})
        "fsdp:(8)4 is 4 of fsdp's 32 (8 x 4 x 1: 4 neighbouring positions, 1 apart)"
        >>> sub_axis_meaning("data", {"data": 8}) is None
        True
    """
    m = _SUB_AXIS_LABEL.fullmatch(str(label))
    if m is None:
        return None
    name, pre, size = m.group(1), int(m.group(2)), int(m.group(3))
    try:
        names, sizes = mesh_axes(mesh) if mesh is not None else ((), ())
    except ShardingError:
        names, sizes = (), ()
    full = sizes[names.index(name)] if name in names else None
    if full is None or full % (pre * size):
        return f"{label} is {size} of {name}'s devices"
    rest = full // (pre * size)
    if rest == 1:
        where = f"{size} neighbouring positions, 1 apart"
    elif pre == 1:
        where = f"the major factor: {size} positions {rest} apart"
    else:
        where = f"{size} positions {rest} apart"
    return f"{label} is {size} of {name}'s {full} ({pre} x {size} x {rest}: {where})"


def sub_axes_note(labels: Any, mesh: Any) -> str | None:
    """The report's note on sub-axis labels: `SUB_AXIS`, then what each label among `labels` (axis labels, or
    groups of them such as the collectives' axes) is on `mesh`; None when none is a sub-axis. Every place that
    shows a sub-axis (the report's notes in each format, the trace) states this text, so it is written once.

    Example:
        >>> print(sub_axes_note([("fsdp:(8)4",), ("data:(1)2",), ("fsdp",)], {"data": 8, "fsdp": 32}))
        ... # doctest: +NORMALIZE_WHITESPACE
        Sub-axes: a label X:(pre)size (XLA's spelling, also in the trace's track names, e.g. ICI X:(pre)size) is
        the part of mesh axis X its group runs over: X's devices split, major to minor, into pre x size x the
        rest, and the group is the size devices of the middle factor, so its members are (X's size) / (pre x
        size) positions apart along X. Here: data:(1)2 is 2 of data's 8 (1 x 2 x 4: the major factor: 2
        positions 4 apart); fsdp:(8)4 is 4 of fsdp's 32 (8 x 4 x 1: 4 neighbouring positions, 1 apart).
    """
    flat = [a for group in labels for a in ((group,) if isinstance(group, str) else group)]
    parts = [t for t in (sub_axis_meaning(a, mesh) for a in sorted({str(a) for a in flat})) if t]
    if not parts:
        return None
    return f"Sub-axes: {SUB_AXIS}. Here: " + "; ".join(parts) + "."


def _factor_range(axis: str) -> tuple[str, float, float]:
    """(base axis, lo, hi): the part of the axis a (sub-)axis covers, on the multiplicative scale."""
    m = re.fullmatch(r"(.+?):\((\d+)\)(\d+)", axis)
    if not m:
        return axis, 1.0, float("inf")
    pre, size = int(m.group(2)), int(m.group(3))
    return m.group(1), float(pre), float(pre * size)


def _fmt_axes(axes: Sequence[str]) -> str:
    """Subscript text: `XY` for one-letter upper-case names (the chapter's style), `data` for one plain
    name, `{data,model}` or `{X:(1)2}` otherwise. Each form parses back without a mesh."""
    if all(len(a) == 1 and a.isupper() for a in axes):
        return "".join(axes)
    if len(axes) == 1 and axes[0].isalnum():
        return axes[0]
    return "{" + ",".join(axes) + "}"


@dataclass(frozen=True)
class Dim:
    """One array dimension: its name and the mesh axes that split it, major to minor."""

    name: str
    axes: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.name + (f"_{_fmt_axes(self.axes)}" if self.axes else "")


@dataclass(frozen=True)
class Notation:
    """A sharded array in the chapter's notation, optionally with its mesh, global shape and dtype.

    Attributes:
      dims: the dimensions, each with the mesh axes splitting it.
      unreduced: mesh axes over which the values are partial sums (`{U_X}`).
      manual: mesh axes that are manual (shard_map; `{M_X}`).
      array: the array's name ("A"), or "" to print just `[I_X, J]`.
      mesh: `((axis, size), ...)` when known; required for sizes and checked on construction.
      shape: global shape when known.
      dtype: element type when known.
      maximal_device: for a `{maximal device=k}` sharding, the one device holding the array.
    """

    dims: tuple[Dim, ...]
    unreduced: tuple[str, ...] = ()
    manual: tuple[str, ...] = ()
    array: str = ""
    mesh: tuple[tuple[str, int], ...] | None = None
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    maximal_device: int | None = None

    def __post_init__(self) -> None:
        self._check_axes_once()
        if self.mesh is not None:
            self._check_against_mesh()
        if self.shape is not None:
            if len(self.shape) != len(self.dims):
                raise ShardingError(f"{self}: shape {list(self.shape)} has {len(self.shape)} dims but the "
                                    f"notation has {len(self.dims)}")
            if self.mesh is not None:
                self._check_divides()

    # ------------------------------------------------------------------------------------------ checks
    def _check_axes_once(self) -> None:
        # Each use of an axis covers a factor range [lo, hi) of it on the multiplicative scale: the whole axis
        # is [1, inf); the sub-axis X:(pre)size is [pre, pre*size). Two uses of one axis must not overlap.
        seen: dict[str, list[tuple[float, float, str]]] = {}
        for d in self.dims:
            for a in d.axes:
                b, lo, hi = _factor_range(a)
                for lo2, hi2, where in seen.get(b, []):
                    if max(lo, lo2) < min(hi, hi2):
                        place = f"twice in dim {d.name}" if where == d.name else f"in dims {where} and {d.name}"
                        raise ShardingError(f"{self._plain()}: mesh axis {b!r} is used {place}; a mesh axis can "
                                            f"split at most one dimension once (the chapter forbids A[I_X, J_X])")
                seen.setdefault(b, []).append((lo, hi, d.name))
        for a in self.unreduced:
            b, lo, hi = _factor_range(a)
            for lo2, hi2, where in seen.get(b, []):
                if max(lo, lo2) < min(hi, hi2):
                    raise ShardingError(f"{self._plain()}: mesh axis {a!r} both splits dim {where} and is "
                                        f"unreduced; partial sums over an axis cannot also be split over it")

    def _check_against_mesh(self) -> None:
        names = tuple(n for n, _ in self.mesh)
        sizes = tuple(s for _, s in self.mesh)
        for d in self.dims:
            for a in d.axes:
                axis_size(names, sizes, a)
        for a in (*self.unreduced, *self.manual):
            axis_size(names, sizes, a)

    def _check_divides(self) -> None:
        for d, n in zip(self.dims, self.shape):
            k = self.shards(d)
            if n % k:
                raise ShardingError(f"{self._plain()}: dim {d.name} of size {n} is split {k} ways over "
                                    f"{_fmt_axes(d.axes)}, which does not divide it; pad it to a multiple of {k} "
                                    f"or shard it over fewer devices")

    def _plain(self) -> str:
        return _render(self)

    # --------------------------------------------------------------------------------------- builders
    def with_mesh(self, mesh: Any) -> Notation:
        """The same notation bound to a mesh (dict, jax Mesh, ...); checks every axis exists."""
        names, sizes = mesh_axes(mesh)
        return replace(self, mesh=tuple(zip(names, sizes)))

    def with_shape(self, shape: Sequence[int], dtype: Any = None) -> Notation:
        """The same notation with a global shape (and dtype); checks the shards divide the dims."""
        dt = None if dtype is None else (getattr(dtype, "name", None) or str(dtype))
        return replace(self, shape=tuple(int(s) for s in shape), dtype=dt if dt is not None else self.dtype)

    @classmethod
    def parse(cls, text: str, mesh: Any = None) -> Notation:
        """Parse `A[I_XY, J]{U_Z}`, `[E_Y, F]`, `W[D_{data,model}, F]{U_{pod}}`.

        With a `mesh`, run-together subscripts of multi-letter axis names are split by the mesh's names
        (`B_datamodel` -> data, model), and the axes are checked.

        Raises:
          NotationSyntaxError: text that is not notation (with the column). ShardingError: an axis used
            twice, or (with a mesh) an axis the mesh lacks.

        Example:
          >>> str(Notation.parse("A[I_XY, J]{U_Z}"))
          'A[I_XY, J]{U_Z}'
        """
        names = mesh_axes(mesh)[0] if mesh is not None else None
        n = _parse_notation(text, names)
        return n.with_mesh(mesh) if mesh is not None else n

    @classmethod
    def from_partition_spec(cls, shape: Sequence[int], spec: Any, mesh: Any, *, dtype: Any = None,
                            names: Sequence[str] | None = None, array: str = "") -> Notation:
        """Build from a global shape, a jax `PartitionSpec` (or a tuple of None / axis / tuple of axes),
        and a mesh (dict or jax Mesh).

        Args:
          names: dimension names; default `I, J, K, L, ...`.

        Example:
          >>> str(Notation.from_partition_spec((8, 2048), (("X", "Y"), None), {"X": 4, "Y": 2}))
          '[I_XY, J]'
        """
        entries = list(tuple(spec))
        rank = len(shape)
        if len(entries) > rank:
            raise ShardingError(f"PartitionSpec {tuple(spec)} has {len(entries)} entries for an array of rank {rank}")
        entries += [None] * (rank - len(entries))
        dims = []
        letters = _dim_names(rank, names)
        for letter, e in zip(letters, entries):
            if e is None:
                axes: tuple[str, ...] = ()
            elif isinstance(e, str):
                axes = (e,)
            else:
                axes = tuple(str(a) for a in e)
            dims.append(Dim(letter, axes))
        unreduced = tuple(sorted(getattr(spec, "unreduced", ()) or ()))
        mnames, msizes = mesh_axes(mesh)
        order = {a: i for i, a in enumerate(mnames)}
        unreduced = tuple(sorted(unreduced, key=lambda a: order.get(a, len(order))))
        return cls(tuple(dims), unreduced=unreduced, array=array, mesh=tuple(zip(mnames, msizes)),
                   shape=tuple(int(s) for s in shape),
                   dtype=None if dtype is None else (getattr(dtype, "name", None) or str(dtype)))

    @classmethod
    def from_hlo_sharding(cls, sharding: HloSharding | str, shape: Sequence[int], mesh: Any, *,
                          dtype: Any = None, names: Sequence[str] | None = None, array: str = "",
                          device_order: Sequence[int] | None = None) -> Notation:
        """Build from an HLO sharding and the mesh it was compiled for.

        The device ids in the sharding are logical ids: id `i` is the device at position `i` of
        `mesh.devices.flat` (jax compiles with that device assignment), so a mesh whose devices are
        permuted needs nothing extra. When the ids are physical device ids instead (a dump compiled with
        a different assignment), pass `device_order` = the ids of `mesh.devices.flat`.

        Each tile dim is matched to the mesh axes whose coordinates it steps through, minor to major; a dim
        split by part of an axis gets a sub-axis (`X:(1)2`). `last_tile_dim_replicate` and replicated
        subgroups are replication; manual subgroups become `{M_...}`, unreduced ones `{U_...}`.

        Raises:
          ShardingError: a tuple sharding (use `.leaves()`), a rank mismatch, or a tile assignment that
            is not a product of mesh (sub-)axes.

        Example:
          >>> str(Notation.from_hlo_sharding("{devices=[1,2,4]<=[4,2]T(1,0) last_tile_dim_replicate}",
          ...                                 (8, 8), {"X": 4, "Y": 2}))
          '[I, J_Y]'
        """
        s = parse_hlo_sharding(sharding) if isinstance(sharding, str) else sharding
        mnames, msizes = mesh_axes(mesh)
        mesh_t = tuple(zip(mnames, msizes))
        rank = len(shape)
        letters = _dim_names(rank, names)
        dt = None if dtype is None else (getattr(dtype, "name", None) or str(dtype))
        shp = tuple(int(x) for x in shape)
        if s.is_tuple:
            raise ShardingError(f"{s} is a tuple sharding; build one notation per leaf (HloSharding.leaves())")
        if s.kind in ("replicated", "unknown"):
            return cls(tuple(Dim(x) for x in letters), array=array, mesh=mesh_t, shape=shp, dtype=dt)
        if s.kind == "maximal":
            return cls(tuple(Dim(x) for x in letters), array=array, mesh=mesh_t, shape=shp, dtype=dt,
                       maximal_device=s.device)
        if s.kind == "manual":
            return cls(tuple(Dim(x) for x in letters), manual=tuple(a for a, n in mesh_t if n > 1),
                       array=array, mesh=mesh_t, shape=shp, dtype=dt)
        data = s.data_tile_dims
        if len(data) != rank:
            raise ShardingError(f"sharding {s} tiles {len(data)} dims but the array has rank {rank}")
        per_dim = _tile_axes(s, mnames, msizes, device_order)
        dims = tuple(Dim(letter, per_dim[i]) for i, letter in enumerate(letters))
        unreduced: list[str] = []
        manual: list[str] = []
        for k, kind in enumerate(s.last_tile_dims):
            axes = per_dim[len(data) + k]
            if kind == "manual":
                manual.extend(axes)
            elif kind == "unreduced":
                unreduced.extend(axes)
        return cls(dims, unreduced=tuple(unreduced), manual=tuple(manual), array=array, mesh=mesh_t,
                   shape=shp, dtype=dt)

    # ----------------------------------------------------------------------------------------- sizes
    def _mesh_lookup(self) -> tuple[tuple[str, ...], tuple[int, ...]]:
        if self.mesh is None:
            raise ShardingError(f"{self}: sizes need the mesh; use .with_mesh(...)")
        return tuple(n for n, _ in self.mesh), tuple(s for _, s in self.mesh)

    def shards(self, dim: Dim | int | str) -> int:
        """How many ways a dim is split (the product of its axes' sizes)."""
        names, sizes = self._mesh_lookup()
        d = self._dim(dim)
        k = 1
        for a in d.axes:
            k *= axis_size(names, sizes, a)
        return k

    def _dim(self, dim: Dim | int | str) -> Dim:
        if isinstance(dim, Dim):
            return dim
        if isinstance(dim, int):
            return self.dims[dim]
        for d in self.dims:
            if d.name == dim:
                return d
        raise ShardingError(f"{self}: no dim {dim!r}; {valid_choices(dim, [d.name for d in self.dims], what='dims')}")

    @property
    def num_devices(self) -> int:
        names, sizes = self._mesh_lookup()
        n = 1
        for s in sizes:
            n *= s
        return n

    @property
    def local_shape(self) -> tuple[int, ...]:
        """The shape each device holds."""
        if self.shape is None:
            raise ShardingError(f"{self}: the local shape needs the global shape; use .with_shape(...)")
        return tuple(n // self.shards(d) for n, d in zip(self.shape, self.dims))

    @property
    def itemsize(self) -> float:
        if self.dtype is None:
            raise ShardingError(f"{self}: bytes need a dtype; use .with_shape(shape, dtype)")
        return dtype_bytes(self.dtype)

    @property
    def bytes_per_device(self) -> int:
        """Bytes each device holds (0 on every device but one for a maximal sharding; this is that one's)."""
        n = 1
        for x in self.local_shape:
            n *= x
        return int(n * self.itemsize)

    @property
    def global_bytes(self) -> int:
        """Bytes of one full copy of the array."""
        if self.shape is None:
            raise ShardingError(f"{self}: bytes need the global shape; use .with_shape(...)")
        n = 1
        for x in self.shape:
            n *= x
        return int(n * self.itemsize)

    @property
    def total_bytes(self) -> int:
        """Bytes over all devices, replication counted (sharding.md's memory quiz: 32 x 16,384 = 512 KiB)."""
        if self.maximal_device is not None:
            return self.bytes_per_device
        return self.bytes_per_device * self.num_devices

    @property
    def replication(self) -> int:
        """How many devices hold each shard (total bytes / one copy, for an evenly split array)."""
        if self.maximal_device is not None:
            return 1
        used = 1
        for d in self.dims:
            used *= self.shards(d)
        return self.num_devices // used

    def used_axes(self) -> tuple[str, ...]:
        return tuple(a for d in self.dims for a in d.axes)

    def __str__(self) -> str:
        return _render(self)


def _render(n: Notation) -> str:
    body = f"{n.array}[{', '.join(str(d) for d in n.dims)}]"
    if n.unreduced:
        body += "{U_" + _fmt_axes(n.unreduced) + "}"
    if n.manual:
        body += "{M_" + _fmt_axes(n.manual) + "}"
    return body


def _dim_names(rank: int, names: Sequence[str] | None) -> tuple[str, ...]:
    if names is not None:
        if len(names) != rank:
            raise ShardingError(f"{len(names)} dim names for an array of rank {rank}")
        return tuple(names)
    letters = "IJKLMNOPQRSTUVWXYZ"
    if rank <= len(letters):
        return tuple(letters[:rank])
    return tuple(f"D{i}" for i in range(rank))


# ----------------------------------------------------------------------------------------------- parse
_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9]*")


class _P:
    def __init__(self, text: str) -> None:
        self.text, self.i = text, 0

    def ws(self) -> None:
        while self.i < len(self.text) and self.text[self.i].isspace():
            self.i += 1

    def err(self, msg: str) -> NotationSyntaxError:
        return NotationSyntaxError(msg, self.text, self.i + 1)

    def peek(self) -> str:
        self.ws()
        return self.text[self.i] if self.i < len(self.text) else ""

    def eat(self, c: str, what: str | None = None) -> None:
        if self.peek() != c:
            got = repr(self.text[self.i]) if self.i < len(self.text) else "end of text"
            raise self.err(f"expected {what or repr(c)}, got {got}")
        self.i += 1

    def ident(self, what: str) -> str:
        self.ws()
        m = _IDENT.match(self.text, self.i)
        if not m:
            raise self.err(f"expected {what}")
        self.i = m.end()
        return m.group(0)

    def axes(self, names: Sequence[str] | None) -> tuple[str, ...]:
        """After '_': `XY`, `{data,model}`, `{X:(1)2}`."""
        if self.i < len(self.text) and self.text[self.i] == "{":
            self.i += 1
            out = []
            while True:
                self.ws()
                m = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?::\(\d+\)\d+)?").match(self.text, self.i)
                if not m:
                    raise self.err("expected a mesh axis name")
                out.append(m.group(0))
                self.i = m.end()
                if self.peek() == ",":
                    self.i += 1
                    continue
                self.eat("}", "',' or '}'")
                return tuple(out)
        m = re.compile(r"[A-Za-z0-9]+").match(self.text, self.i)
        if not m:
            raise self.err("expected mesh axes after '_' (e.g. X, XY or {data,model})")
        self.i = m.end()
        return _split_run(m.group(0), names, self, m.start())


def _split_run(run: str, names: Sequence[str] | None, p: _P, start: int) -> tuple[str, ...]:
    """Split a run-together subscript into axes.

    Without a mesh: `XY` (upper-case letters, the chapter's style) is one axis per letter; anything else
    (`data`) is one axis. With a mesh: greedy longest match against its axis names."""
    if names is None:
        return tuple(run) if run.isalpha() and run.isupper() else (run,)
    if all(len(n) == 1 for n in names):
        return tuple(run)
    out, i = [], 0
    ordered = sorted(names, key=len, reverse=True)
    while i < len(run):
        for n in ordered:
            if run.startswith(n, i):
                out.append(n)
                i += len(n)
                break
        else:
            p.i = start + i
            raise p.err(f"{run[i:]!r} does not start with a mesh axis; "
                        f"{valid_choices(run[i:], names, what='mesh axes')}")
    return tuple(out)


def _parse_suffixes(p: _P, names: Sequence[str] | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    unreduced: list[str] = []
    manual: list[str] = []
    while p.peek() == "{":
        p.i += 1
        p.ws()
        tag = p.text[p.i] if p.i < len(p.text) else ""
        if tag not in ("U", "M") or p.i + 1 >= len(p.text) or p.text[p.i + 1] != "_":
            raise p.err("expected U_ (unreduced) or M_ (manual) inside '{...}'")
        p.i += 2
        axes = p.axes(names)
        (unreduced if tag == "U" else manual).extend(axes)
        p.eat("}", "'}'")
    return tuple(unreduced), tuple(manual)


def _parse_array(p: _P, names: Sequence[str] | None) -> Notation:
    array = ""
    if p.peek() != "[":
        array = p.ident("an array name or '['")
    p.eat("[", "'['")
    dims: list[Dim] = []
    if p.peek() == "]":
        p.i += 1
    else:
        while True:
            name = p.ident("a dimension name such as I or B")
            axes: tuple[str, ...] = ()
            if p.i < len(p.text) and p.text[p.i] == "_":
                p.i += 1
                axes = p.axes(names)
            dims.append(Dim(name, axes))
            if p.peek() == ",":
                p.i += 1
                continue
            p.eat("]", "',' or ']'")
            break
    unreduced, manual = _parse_suffixes(p, names)
    return Notation(tuple(dims), unreduced=unreduced, manual=manual, array=array)


def _parse_notation(text: str, names: Sequence[str] | None) -> Notation:
    p = _P(text)
    n = _parse_array(p, names)
    if p.peek():
        raise p.err("unexpected text after the notation")
    return n


# ------------------------------------------------------------------------------- HLO tile -> mesh axes
def _tile_axes(s: HloSharding, names: tuple[str, ...], sizes: tuple[int, ...],
               device_order: Sequence[int] | None) -> list[tuple[str, ...]]:
    """For each tile dim of a tiled sharding, the mesh (sub-)axes it steps through, major to minor."""
    import numpy as np

    n = int(np.prod(sizes)) if sizes else 1
    ta = s.tile_assignment
    if ta.size != n:
        raise ShardingError(f"sharding {s} assigns {ta.size} devices but the mesh "
                            f"{dict(zip(names, sizes))} has {n}")
    if device_order is not None:
        order = {int(d): i for i, d in enumerate(device_order)}
        try:
            ta = np.vectorize(lambda d: order[int(d)])(ta)
        except KeyError as e:
            raise ShardingError(f"sharding {s} names device {e.args[0]}, which is not in the mesh") from None
    coords = np.stack(np.unravel_index(ta, sizes), axis=-1) if sizes else np.zeros(ta.shape + (0,), int)
    origin = coords[(0,) * ta.ndim]
    out: list[tuple[str, ...]] = []
    # Walk each tile dim from the origin tile: every run of steps that moves one mesh axis by a fixed
    # delta is one (sub-)axis factor, minor to major. A full reconstruction checks the result.
    factors_per_dim: list[list[tuple[int, int, int]]] = []  # (axis index, delta, size), minor to major
    for t in range(ta.ndim):
        length = ta.shape[t]
        facs: list[tuple[int, int, int]] = []
        step = 1
        while step < length:
            idx = [0] * ta.ndim
            idx[t] = step
            diff = coords[tuple(idx)] - origin
            changed = np.nonzero(diff)[0]
            if len(changed) != 1 or diff[changed[0]] <= 0:
                raise ShardingError(f"sharding {s}: tile dim {t} does not step through one mesh axis at a "
                                    f"time on the mesh {dict(zip(names, sizes))}; it is not a product of mesh axes")
            a = int(changed[0])
            delta = int(diff[a])
            # how many positions continue along axis a with the same delta
            k = 1
            while step * k < length:
                idx2 = [0] * ta.ndim
                idx2[t] = step * k
                expect = np.zeros_like(diff)
                expect[a] = delta * k
                if not np.array_equal(coords[tuple(idx2)] - origin, expect):
                    break
                k += 1
            while (length // step) % k:
                k -= 1
            facs.append((a, delta, k))
            step *= k
        factors_per_dim.append(facs)
    # Reconstruct and compare.
    recon = np.zeros(ta.shape + (len(sizes),), dtype=np.int64) + origin
    for t, facs in enumerate(factors_per_dim):
        stride = 1
        shape = [1] * ta.ndim
        shape[t] = ta.shape[t]
        i_t = np.arange(ta.shape[t]).reshape(shape)
        for a, delta, k in facs:
            recon[..., a] += ((i_t // stride) % k) * delta
            stride *= k
    if not np.array_equal(recon, coords):
        raise ShardingError(f"sharding {s} is not a product of mesh axes of {dict(zip(names, sizes))} "
                            f"(its device order does not follow the mesh); pass device_order= if its ids "
                            f"are physical device ids")
    for facs in factors_per_dim:
        labels = []
        for a, delta, k in reversed(facs):  # major to minor
            full = sizes[a]
            if k == full and delta == 1:
                labels.append(names[a])
            else:
                pre = full // (k * delta)
                labels.append(f"{names[a]}:({pre}){k}")
        out.append(tuple(labels))
    return out


# ---------------------------------------------------------------------------------------- collectives
@dataclass(frozen=True)
class Collective:
    """A collective in notation: `AllGather_Y: [E_Y, F] -> [E, F]`.

    Attributes:
      kind: HLO kind ("all-gather", ...).
      axes: mesh axes it runs over, major to minor.
      before, after: the operand and result.
      scatter_dim: for ReduceScatter (and AllToAll), the dim that gains the axes.
    """

    kind: str
    axes: tuple[str, ...]
    before: Notation
    after: Notation
    scatter_dim: str | None = None

    def __str__(self) -> str:
        return format_collective(self.kind, self.axes, self.before, self.after, scatter_dim=self.scatter_dim)

    def volume_bytes(self) -> int:
        """V for the cost model (analyzer.theory.cost): AllGather: the result per device; ReduceScatter and
        AllReduce: the unreduced operand per device; AllToAll: the operand per device times the group
        size; permute / broadcast: the operand per device. Needs mesh, shape and dtype on `before`/`after`.
        """
        if self.kind == "all-gather":
            return self.after.bytes_per_device
        if self.kind in ("all-to-all", "ragged-all-to-all"):
            names, sizes = self.before._mesh_lookup()
            group = 1
            for a in self.axes:
                group *= axis_size(names, sizes, a)
            return self.before.bytes_per_device * group
        return self.before.bytes_per_device


def format_collective(kind: str, axes: Sequence[str], before: Notation | str, after: Notation | str, *,
                      scatter_dim: str | None = None) -> str:
    """Write a collective the chapter's way.

    Examples (issue 4 item 4):
      >>> format_collective("all-gather", ["Y"], "[E_Y, F]", "[E, F]")
      'AllGather_Y: [E_Y, F] -> [E, F]'
      >>> format_collective("reduce-scatter", ["X"], "[B, F]{U_X}", "[B, F_X]")
      'ReduceScatter_X,F: [B, F]{U_X} -> [B, F_X]'
      >>> format_collective("all-to-all", ["X"], "[I_X, J]", "[I, J_X]")
      'AllToAll_X: [I_X, J] -> [I, J_X]'
    """
    from analyzer.theory.cost import canonical_kind

    k = canonical_kind(kind)
    b = Notation.parse(before) if isinstance(before, str) else before
    a = Notation.parse(after) if isinstance(after, str) else after
    name = COLLECTIVE_NAMES[k] + "_" + (_fmt_axes(tuple(axes)) if axes else "")
    if k == "reduce-scatter":
        dim = scatter_dim or _gained_dim(b, a)
        if dim:
            name += f",{dim}"
    return f"{name}: {_render(replace(b, array=''))} -> {_render(replace(a, array=''))}"


def _gained_dim(before: Notation, after: Notation) -> str | None:
    for db, da in zip(before.dims, after.dims):
        if len(da.axes) > len(db.axes):
            return da.name
    return None


_COLL_RE = re.compile(r"^\s*(?P<name>[A-Za-z]+)(?:_(?P<axes>\{[^}]*\}|[A-Za-z0-9]+)(?:,(?P<dim>[A-Za-z][A-Za-z0-9]*))?)?\s*:?\s*(?P<rest>.*)$")


def parse_collective(text: str, mesh: Any = None) -> Collective:
    """Parse `AllGather_Y [E_Y, F] -> [E, F]` (the colon is optional), `AllReduce_X: [B, F]{U_X} -> [B, F]`,
    `ReduceScatter_X,F: [B, F]{U_X} -> [B, F_X]`, `AllToAll_X: [I_X, J] -> [I, J_X]`.

    The axes may be omitted: they are then read off the notation (the subscripts or `U_` axes that change).

    Raises:
      NotationSyntaxError: text that does not parse. ShardingError: a transformation the collective cannot
        make (e.g. an AllGather that adds subscripts).
    """
    from analyzer.theory.cost import CostModelError, canonical_kind

    m = _COLL_RE.match(text)
    if not m or "->" not in m.group("rest"):
        raise NotationSyntaxError("expected 'Kind_AXES: [before] -> [after]', e.g. 'AllGather_Y: [E_Y, F] -> [E, F]'",
                                  text, 1)
    try:
        kind = canonical_kind(m.group("name"))
    except CostModelError as e:
        raise NotationSyntaxError(str(e), text, 1) from None
    names = mesh_axes(mesh)[0] if mesh is not None else None
    rest = m.group("rest")
    lhs, rhs = rest.split("->", 1)
    offset = m.start("rest")
    try:
        before = Notation.parse(lhs.strip(), mesh)
    except NotationSyntaxError as e:
        raise NotationSyntaxError(e.message, text, offset + (len(lhs) - len(lhs.lstrip())) + e.column) from None
    try:
        after = Notation.parse(rhs.strip(), mesh)
    except NotationSyntaxError as e:
        start = offset + len(lhs) + 2 + (len(rhs) - len(rhs.lstrip()))
        raise NotationSyntaxError(e.message, text, start + e.column) from None
    axes_text = m.group("axes")
    if axes_text:
        p = _P(axes_text)
        axes = p.axes(names) if axes_text.startswith("{") else _split_run(axes_text, names, p, 0)
    else:
        axes = _infer_axes(kind, before, after)
    if len(before.dims) != len(after.dims):
        raise ShardingError(f"{text}: before has {len(before.dims)} dims, after has {len(after.dims)}")
    _check_transform(kind, tuple(axes), before, after, text)
    return Collective(kind, tuple(axes), before, after, m.group("dim"))


def _infer_axes(kind: str, before: Notation, after: Notation) -> tuple[str, ...]:
    if kind in ("all-reduce", "reduce-scatter"):
        return tuple(a for a in before.unreduced if a not in after.unreduced)
    removed = [x for db, da in zip(before.dims, after.dims) for x in db.axes if x not in da.axes]
    return tuple(removed)


def _check_transform(kind: str, axes: tuple[str, ...], before: Notation, after: Notation, text: str) -> None:
    removed = [x for db, da in zip(before.dims, after.dims) for x in db.axes if x not in da.axes]
    added = [x for db, da in zip(before.dims, after.dims) for x in da.axes if x not in db.axes]
    if kind == "all-gather":
        if added or before.unreduced != after.unreduced or set(removed) != set(axes):
            raise ShardingError(f"{text}: an AllGather over {_fmt_axes(axes)} removes exactly those subscripts "
                                f"(removed {removed or 'none'}, added {added or 'none'})")
    elif kind == "all-reduce":
        if removed or added or set(before.unreduced) - set(after.unreduced) != set(axes):
            raise ShardingError(f"{text}: an AllReduce over {_fmt_axes(axes)} removes {{U_{_fmt_axes(axes)}}} "
                                f"and keeps the subscripts")
    elif kind == "reduce-scatter":
        if removed or set(added) != set(axes) or set(before.unreduced) - set(after.unreduced) != set(axes):
            raise ShardingError(f"{text}: a ReduceScatter over {_fmt_axes(axes)} turns {{U_{_fmt_axes(axes)}}} "
                                f"into a subscript on one dim")
    elif kind in ("all-to-all", "ragged-all-to-all"):
        if set(removed) != set(axes) or set(added) != set(axes):
            raise ShardingError(f"{text}: an AllToAll over {_fmt_axes(axes)} moves those subscripts from one dim "
                                f"to another")
