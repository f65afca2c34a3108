"""Mapping HLO facts back to the user's world: mesh axis names, source lines, forward or backward pass.

Device groups. In the HLO jax produces, partition (logical device) id `i` is position `i` of the user's mesh
in row-major order (`mesh.devices.flat[i]`), whatever physical device sits there. A replica group is
therefore a set of mesh positions, and the axes it spans are read off their coordinates: the group
`{0,2,4,6}` on a mesh `data=4, model=2` varies `data` only, so the collective runs over `data`. A group may
cover part of an axis (a "sub-axis"): `{0,4}` on `X=8` is the major factor of size 2 of X, named `X:(1)2`
after XLA's `(pre-size)size` spelling: the part of X of size 2 with 1 position-factor before it. The
minor factor of size 4 is `X:(2)4`.

Axes are listed major to minor in the order the group enumerates devices: the order that decides how an
all-gather concatenates (an all-gather over `("Y", "X")` puts Y's shards outermost).

Stack frames. The stack-frame tables of the HLO name every frame of the Python stack that traced an op;
the user's line is the innermost frame outside every installed package and the standard library
(site-packages/jax, flax, optax, transformers..., the analyzer's own wrappers); the library frame the user's
line called into is kept as context (`in transformers' modeling_flax_llama.py:412`).

Example:
    >>> mesh = MeshInfo(("data", "model"), (4, 2), tuple(range(8)))
    >>> groups_to_axes([(0, 2, 4, 6), (1, 3, 5, 7)], mesh).axes
    ('data',)
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from analyzer.errors import MeshError
from analyzer.theory.mesh import MeshInfo, mesh_from_any, parse_mesh_spec

if TYPE_CHECKING:
    from analyzer.hlo.ir import HloModule

__all__ = [
    "AxisSpan",
    "logical_names",
    "user_packages",
    "names_of_array",
    "einsum_subscripts",
    "groups_to_axes",
    "infer_mesh",
    "mesh_from_any",
    "op_label",
    "pairs_to_axes",
    "parse_mesh_spec",
    "package_of",
    "pass_of",
    "SourceFrames",
    "source_frames",
    "user_frame",
]


@dataclass(frozen=True)
class AxisSpan:
    """What a set of device groups spans on the mesh.

    Attributes:
      axes: axis labels major to minor (`"X"`, or `"X:(1)2"` for a sub-axis).
      sizes: devices along each label.
      regular: True when every group is exactly the product of those (sub-)axes with the other coordinates
        fixed, and all groups have the same shape. False for groups that are not axis-aligned; `axes` then
        lists every axis the groups vary along, a best effort.
    """

    axes: tuple[str, ...]
    sizes: tuple[int, ...]
    regular: bool = True

    @property
    def group_size(self) -> int:
        n = 1
        for s in self.sizes:
            n *= s
        return n


def _coords(i: int, sizes: Sequence[int]) -> tuple[int, ...]:
    out = []
    for s in reversed(sizes):
        out.append(i % s)
        i //= s
    return tuple(reversed(out))


def _sub_label(name: str, full: int, values: Sequence[int]) -> tuple[str, int] | None:
    """Label of the part of axis `name` (size `full`) that `values` (sorted, distinct) covers, or None when it
    is not an arithmetic progression that is a factor of the axis."""
    m = len(values)
    if m == full:
        return name, m
    stride = values[1] - values[0] if m > 1 else 1
    if any(b - a != stride for a, b in itertools.pairwise(values)):
        return None
    if stride <= 0 or full % (stride * m):
        return None
    pre = full // (stride * m)
    return f"{name}:({pre}){m}", m


def _enumeration_order(group: Sequence[int], sizes: Sequence[int], varying: Sequence[int]) -> tuple[int, ...] | None:
    """The order (major to minor) of the varying mesh dims under which `group` is listed row-major."""
    coords = [_coords(i, sizes) for i in group]
    if len(varying) <= 1:
        return tuple(varying)
    for perm in itertools.permutations(varying):
        key = [tuple(c[d] for d in perm) for c in coords]
        if key == sorted(key):
            return perm
    return None


def groups_to_axes(groups: Sequence[Sequence[int]], mesh: MeshInfo) -> AxisSpan:
    """The mesh axes (or sub-axes) a collective's replica groups span.

    Args:
      groups: device-id groups as the HLO lists them (expanded), ids = mesh positions.
      mesh: the user's mesh.
    Returns:
      `AxisSpan`; `axes == ()` for a collective whose groups are single devices.
    Raises:
      MeshError: an id is outside the mesh.

    Example:
        >>> m = MeshInfo(("X", "Y"), (4, 2), tuple(range(8)))
        >>> groups_to_axes([(0, 1), (2, 3), (4, 5), (6, 7)], m).axes
        ('Y',)
        >>> groups_to_axes([(0, 2, 4, 6, 1, 3, 5, 7)], m).axes
        ('Y', 'X')
    """
    sizes = mesh.axis_sizes
    n = mesh.size
    if not groups or all(len(g) <= 1 for g in groups):
        return AxisSpan((), ())
    for g in groups:
        for i in g:
            if not 0 <= i < n:
                raise MeshError(f"device id {i} in replica groups is outside mesh {mesh} ({n} devices); "
                                "give the mesh the program was compiled for")
    shapes = set()
    regular = True
    first_labels: tuple[str, ...] | None = None
    first_sizes: tuple[int, ...] = ()
    varying_all: set[int] = set()
    for g in groups:
        coords = [_coords(i, sizes) for i in g]
        values = [sorted({c[d] for c in coords}) for d in range(len(sizes))]
        varying = [d for d in range(len(sizes)) if len(values[d]) > 1]
        varying_all.update(varying)
        product = 1
        for d in varying:
            product *= len(values[d])
        if product != len(g) or len(set(g)) != len(g):
            regular = False
        order = _enumeration_order(g, sizes, varying)
        if order is None:
            regular = False
            order = tuple(varying)
        labels, lsizes = [], []
        for d in order:
            sub = _sub_label(mesh.axis_names[d], sizes[d], values[d])
            if sub is None:
                regular = False
                sub = (mesh.axis_names[d], len(values[d]))
            labels.append(sub[0])
            lsizes.append(sub[1])
        shapes.add(tuple(labels))
        if first_labels is None:
            first_labels, first_sizes = tuple(labels), tuple(lsizes)
    if len(shapes) != 1:
        regular = False
        names = tuple(mesh.axis_names[d] for d in sorted(varying_all))
        return AxisSpan(names, tuple(mesh.axis_sizes[d] for d in sorted(varying_all)), False)
    assert first_labels is not None
    if not regular:
        names = tuple(mesh.axis_names[d] for d in sorted(varying_all))
        return AxisSpan(names, tuple(mesh.axis_sizes[d] for d in sorted(varying_all)), False)
    return AxisSpan(first_labels, first_sizes, regular)


def pairs_to_axes(pairs: Sequence[tuple[int, int]], mesh: MeshInfo) -> tuple[AxisSpan, int]:
    """The axes a collective-permute moves data along, and the largest hop distance along them.

    Args:
      pairs: (source, target) mesh positions.
      mesh: the user's mesh.
    Returns:
      (`AxisSpan` of the axes whose coordinate differs between source and target, max ring distance in
      positions along those axes, counting wraparound).

    Example:
        >>> m = MeshInfo(("X", "Y"), (4, 2), tuple(range(8)))
        >>> span, hops = pairs_to_axes([(0, 2), (2, 4), (4, 6), (6, 0)], m)
        >>> span.axes, hops
        (('X',), 1)
    """
    sizes = mesh.axis_sizes
    n = mesh.size
    varying: set[int] = set()
    hops = 0
    for s, t in pairs:
        if not (0 <= s < n and 0 <= t < n):
            raise MeshError(f"device id in source_target_pairs {(s, t)} is outside mesh {mesh} ({n} devices)")
        cs, ct = _coords(s, sizes), _coords(t, sizes)
        dist = 0
        for d, (a, b) in enumerate(zip(cs, ct)):
            if a != b:
                varying.add(d)
                delta = abs(a - b)
                dist += min(delta, sizes[d] - delta)
        hops = max(hops, dist)
    ds = sorted(varying)
    return AxisSpan(tuple(mesh.axis_names[d] for d in ds), tuple(sizes[d] for d in ds)), hops


def _progressions(ids: Sequence[int]) -> list[tuple[int, int]]:
    """Nested arithmetic runs of sorted ids, innermost first: `[0,1,4,5]` -> `[(1, 2), (4, 2)]`."""
    out: list[tuple[int, int]] = []
    while len(ids) > 1:
        stride = ids[1] - ids[0]
        run = 1
        while run < len(ids) and ids[run] - ids[run - 1] == stride:
            run += 1
        out.append((stride, run))
        if len(ids) % run:
            break
        ids = list(ids[::run])
    return out


def infer_mesh(groups: Iterable[Sequence[Sequence[int]]], num_devices: int) -> MeshInfo:
    """A mesh for a dump read without one: axes `axis_0, axis_1, ...` (major to minor) cut where the
    collectives' groups cut the device ids.

    Each group that is a set of arithmetic progressions of ids contributes its strides as boundaries; the
    boundaries that divide each other form a mixed-radix mesh. Device counts with no structure found give one
    axis `devices`.

    Args:
      groups: the replica groups of every collective (a sequence of groups per collective).
      num_devices: partitions in the module.
    Returns:
      `MeshInfo` with device ids 0..N-1.

    Example:
        >>> infer_mesh([[(0, 1), (2, 3)], [(0, 2), (1, 3)]], 4)
        MeshInfo(axis_names=('axis_0', 'axis_1'), axis_sizes=(2, 2), device_ids=(0, 1, 2, 3), axis_types=())
    """
    n = max(1, num_devices)
    bounds = {1, n}
    for gs in groups:
        for g in list(gs)[:1]:
            for stride, run in _progressions(sorted(set(g))):
                bounds.update((stride, stride * run))
    ordered = sorted(b for b in bounds if 1 <= b <= n and n % b == 0)
    chain = [1]
    for b in ordered[1:]:
        if b % chain[-1] == 0:
            chain.append(b)
    if chain[-1] != n:
        chain.append(n)
    sizes_minor_first = [chain[i + 1] // chain[i] for i in range(len(chain) - 1)]
    sizes = tuple(reversed([s for s in sizes_minor_first if s > 1])) or (n,)
    if len(sizes) == 1:
        names: tuple[str, ...] = ("devices",)
    else:
        names = tuple(f"axis_{i}" for i in range(len(sizes)))
    return MeshInfo(names, sizes, tuple(range(n)))


# ---------------------------------------------------------------------- source and pass
# Frames that are never the user's, wherever they are installed: jax's own sources (also in a source checkout),
# the analyzer's compile wrappers, frozen modules and exec'd strings.
_INTERNAL = re.compile(r"/jax/_src/|/jaxlib/"
                       r"|/analyzer/(compile/lower|pipeline|workflows/auditing|integrations/\w+)\.py$"
                       r"|^<frozen |^<string>")
_INSTALLED = re.compile(r"[/\\](?:site|dist)-packages[/\\]([^/\\]+)")


@functools.cache
def _stdlib_dirs() -> tuple[str, ...]:
    """The standard library's folders of this interpreter (read once, when first needed)."""
    import sysconfig

    paths = sysconfig.get_paths()
    return tuple(sorted({os.path.normpath(paths[k]) + os.sep for k in ("stdlib", "platstdlib") if paths.get(k)}))


def package_of(file: str) -> str | None:
    """The installed package a source file belongs to: its top-level name under site-packages (`jax`,
    `flax`, `transformers`), "python" for the standard library and jax's internals, None for the user's
    own code.

    Example:
        >>> package_of("/venv/lib/python3.11/site-packages/transformers/models/llama/modeling_flax_llama.py")
        'transformers'
        >>> package_of("/home/me/proj/train.py") is None
        True
    """
    if not file:
        return None
    m = _INSTALLED.search(file)
    if m:
        name = m.group(1)
        return name[:-3] if name.endswith(".py") else name
    if _INTERNAL.search(file):
        return "jax" if "/jax" in file else "python"
    if os.path.isabs(file) and os.path.normpath(file).startswith(_stdlib_dirs()):
        return "python"
    return None


@dataclass(frozen=True)
class SourceFrames:
    """Where an op comes from: the innermost frame of the user's code, and the library frame it went through.

    Attributes:
      user: `file:line` of the innermost frame that is not in an installed package or the standard library
        ("" when the stack holds none).
      library: `file:line` of the innermost frame of the library the user's line called into (the outermost
        installed package inside the user's frame, jax and the standard library aside), "" when the user
        called jax directly or the stack is unknown.
      package: that library's name (`transformers`, `flax`), "" when none.
    """

    user: str = ""
    library: str = ""
    package: str = ""

    @property
    def context(self) -> str:
        """The library frame in words: `in transformers' modeling_flax_llama.py:412`; "" when none."""
        if not self.library:
            return ""
        file, _, line = self.library.rpartition(":")
        name = os.path.basename(file) or file
        owner = f"{self.package}'" if self.package.endswith("s") else f"{self.package}'s"
        return f"in {owner} {name}:{line}"


_NOT_A_LIBRARY = frozenset({"jax", "jaxlib", "python", "analyzer"})


def source_frames(module: HloModule, frame_id: int | None, fallback_file: str | None = None,
                  fallback_line: int | None = None) -> SourceFrames:
    """The user's frame and the library frame of a stack-frame id (see `SourceFrames`).

    The user's frame is the innermost one outside every installed package (site-packages, dist-packages),
    the standard library and jax's own sources; when the stack holds none (a program written inside a
    library), the innermost frame outside jax stands in. Without stack tables, the metadata's
    source_file:source_line is used.

    Args:
      module: the `HloModule` (its `frame_chain`).
      frame_id: `metadata.stack_frame_id`.
      fallback_file, fallback_line: `metadata.source_file` / `source_line`.
    """
    chain = module.frame_chain(frame_id) if frame_id is not None else ()
    own = _USER_PACKAGES.get()
    packages = [None if p in own else p for p in (package_of(f.file) for f in chain)]
    for i, (f, pkg) in enumerate(zip(chain, packages)):
        if pkg is None:
            # the library the user's line called: the outermost library frame inside it (jax, the standard
            # library's wrappers and the analyzer are not libraries to name), and that library's innermost frame
            inner = next((p for p in reversed(packages[:i]) if p is not None and p not in _NOT_A_LIBRARY), None)
            if inner is None:
                return SourceFrames(f"{f.file}:{f.line}")
            first = next(j for j, p in enumerate(packages) if p == inner)
            return SourceFrames(f"{f.file}:{f.line}", f"{chain[first].file}:{chain[first].line}", inner)
    if fallback_file and package_of(fallback_file) is None:
        return SourceFrames(f"{fallback_file}:{fallback_line}" if fallback_line else fallback_file)
    for f, pkg in zip(chain, packages):
        if pkg not in ("jax", "jaxlib", "python"):
            return SourceFrames(f"{f.file}:{f.line}")
    if chain:
        return SourceFrames(f"{chain[0].file}:{chain[0].line}")
    return SourceFrames()


_USER_PACKAGES: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("hlo_analyzer_user_packages",
                                                                               default=frozenset())


@contextlib.contextmanager
def user_packages(*names: str) -> Iterator[None]:
    """Within the `with`, frames of these installed packages are the user's code for `source_frames`: a
    program written inside a library (MaxText's model, analysed by `analyzer.integrations.maxtext`) gets
    its own lines as sources, not the line that called the analysis. Put back when the `with` ends.

    Example:
        >>> with user_packages("maxtext"):  # analyze_lowered(...) here: rows' sources are maxtext/layers/*.py lines
        ...     pass
    """
    token = _USER_PACKAGES.set(_USER_PACKAGES.get() | frozenset(names))
    try:
        yield
    finally:
        _USER_PACKAGES.reset(token)


def user_frame(module: object, frame_id: int | None, fallback_file: str | None = None,
               fallback_line: int | None = None) -> str:
    """`file:line` of the innermost user frame of a stack-frame id (`source_frames(...).user`); the
    metadata's source_file:source_line when the module has no stack tables; "" when nothing is known."""
    return source_frames(module, frame_id, fallback_file, fallback_line).user


def pass_of(op_name: str | None) -> str:
    """"backward" for ops jax's autodiff transposed (`transpose(jvp(...))`), "forward" for the rest of a
    differentiated program (`jvp(...)`), "" when the op_name does not say.

    Example:
        >>> pass_of("jit(step)/transpose(jvp())/while/body/dot_general")
        'backward'
        >>> pass_of("jit(step)/jvp()/while/body/dot_general")
        'forward'
    """
    if not op_name:
        return ""
    if "transpose(" in op_name:
        return "backward"
    if "jvp(" in op_name or "vjp(" in op_name or "linearize(" in op_name:
        return "forward"
    return ""


def op_label(op_name: str | None) -> str:
    """The op that caused a collective, from its op_name: the last path element without the jit prefix.

    Example:
        >>> op_label("jit(step)/transpose(jvp())/while/body/closed_call/dot_general")
        'dot_general'
    """
    if not op_name:
        return ""
    first = op_name.split(";")[0]
    return first.rstrip("/").rsplit("/", 1)[-1]


# ---------------------------------------------------------------------- notation
_LETTERS = "IJKLMNOPQRSTUVWXYZABCDEFGH"
_TITLES = {
    "all-gather": "AllGather", "reduce-scatter": "ReduceScatter", "all-reduce": "AllReduce",
    "all-to-all": "AllToAll", "collective-permute": "CollectivePermute",
    "collective-broadcast": "CollectiveBroadcast", "ragged-all-to-all": "RaggedAllToAll",
}


def _sub(axes: Sequence[str]) -> str:
    """Subscript for a set of axes: `XY` for one-letter names (the chapter's style), else `{data,model}`."""
    if not axes:
        return ""
    if all(len(a) == 1 for a in axes):
        return "".join(axes)
    if len(axes) == 1 and axes[0].replace("_", "").isalnum():
        return axes[0]
    return "{" + ",".join(axes) + "}"


def _letter(d: int, letters: Sequence[str] | None) -> str:
    """The letter of dimension `d`: the program's own name for it when known, else I, J, K... by position."""
    if letters is not None and d < len(letters):
        return letters[d]
    return _LETTERS[d % len(_LETTERS)]


_EINSUM = re.compile(r"^([A-Za-z]+(?:,[A-Za-z]+)*)->([A-Za-z]*)$")


def einsum_subscripts(op_name: str | None) -> tuple[tuple[str, ...], str] | None:
    """The einsum spec jax writes into a dot's op_name (`jit(step)/bd,df->bf/dot_general`): the operands'
    subscripts and the output's, upper-cased; None when the op_name holds none, or holds one of the
    transposed (backward) pass, whose operands are not the spec's.

    Example:
        >>> einsum_subscripts("jit(step)/jvp(mlp)/bsd,df->bsf/dot_general")
        (('BSD', 'DF'), 'BSF')
        >>> einsum_subscripts("jit(step)/transpose(jvp(mlp))/bsd,df->bsf/dot_general") is None
        True
    """
    if not op_name or "transpose(" in op_name:
        return None
    for part in reversed(op_name.split(";")[0].split("/")):
        m = _EINSUM.match(part)
        if m:
            return tuple(s.upper() for s in m.group(1).split(",")), m.group(2).upper()
    return None


def logical_names(args: Any) -> dict[str, tuple[str, ...]]:
    """The dimension names the program declares for its arguments: Flax's logically partitioned parameters
    (`nn.with_logical_partitioning(init, ('embed', 'mlp'))` makes `LogicallyPartitioned` boxes whose `names`
    name each dimension), by the path of the boxed array inside its top-level argument, as jax names the
    parameter after that argument's name (`['w_in']['kernel'].value` of `params['w_in']['kernel'].value`).
    A dimension the box leaves unnamed (None) is named by position (I, J, K...). Boxes that name mesh axes
    instead (`nn.Partitioned`) and arguments without boxes give nothing.

    Example:
        >>> from types import SimpleNamespace
        >>> import jax
        >>> box = type("LogicallyPartitioned", (), {})()
        >>> box.value, box.names = SimpleNamespace(shape=(4, 8)), ("embed", None)
        >>> jax.tree_util.register_pytree_with_keys(type(box), lambda b: (((jax.tree_util.GetAttrKey("value"),
        ...     b.value),), b.names), lambda names, kids: None)
        >>> logical_names(({"w": box},))
        {"['w'].value": ('embed', 'J')}
    """
    import jax

    def is_box(x: Any) -> bool:
        return (type(x).__name__ == "LogicallyPartitioned" and isinstance(getattr(x, "names", None), tuple)) \
            or _nnx_names(x) is not None

    out: dict[str, tuple[str, ...]] = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tuple(args), is_leaf=is_box)[0]:
        if not is_box(leaf):
            continue
        inner = jax.tree_util.tree_flatten_with_path(leaf)[0]
        if len(inner) != 1:
            continue
        names = _nnx_names(leaf) if type(leaf).__name__ != "LogicallyPartitioned" else leaf.names
        rank = len(getattr(inner[0][1], "shape", names))
        if names is None or len(names) > rank:
            continue
        names = tuple(names) + (None,) * (rank - len(names))  # trailing dimensions left unnamed, as Flax does
        key = jax.tree_util.keystr(tuple(path[1:]) + tuple(inner[0][0]))
        out[key] = tuple(str(n) if n else _LETTERS[d % len(_LETTERS)] for d, n in enumerate(names))
    return out


def _nnx_names(x: Any) -> tuple[Any, ...] | None:
    """The logical axis names of a Flax NNX variable (`nnx.Param(..., sharding=('embed', 'mlp'))`, or
    `nnx.with_partitioning`; Flax keeps them in the variable's metadata as `out_sharding`, `sharding_names` or
    `sharding`), with the stacking axis `nnx.scan` inserts (`partition_name` at `param_scan_axis`, e.g.
    MaxText's scanned 'layers'); None for anything else. Mesh shardings (PartitionSpec, NamedSharding) are not
    logical names."""
    get = getattr(x, "get_metadata", None)
    if get is None or not callable(get) or not hasattr(x, "get_value"):
        return None
    try:
        meta = dict(get())
    except Exception:  # noqa: BLE001 - not an NNX variable after all
        return None
    names = meta.get("out_sharding") or meta.get("sharding_names") or meta.get("sharding")
    if isinstance(names, str):
        names = (names,)
    if not isinstance(names, (tuple, list)) or not all(n is None or isinstance(n, str) for n in names):
        return None
    names = list(names)
    part = meta.get("partition_name")
    if part is not None and "param_scan_axis" in meta and part not in names:
        names.insert(int(meta.get("param_scan_axis") or 0), part)
    return tuple(names)


_ARG_NAME = re.compile(r"^[A-Za-z_]\w*(\[\d+\])?$")


def names_of_array(array: str, names: Mapping[str, tuple[str, ...]]) -> tuple[str, ...] | None:
    """The declared dimension names (`logical_names`) of the argument jax calls `array`; None when it has
    none, or when arguments of different names share its inner path (which one it is cannot be told).

    Example:
        >>> names_of_array("params['w_in']['kernel'].value", {"['w_in']['kernel'].value": ("embed", "mlp")})
        ('embed', 'mlp')
    """
    found = {v for k, v in names.items() if array.endswith(k) and _ARG_NAME.match(array[: len(array) - len(k)])}
    return found.pop() if len(found) == 1 else None


def _array(spec: Sequence[Sequence[str]], unreduced: Sequence[str] = (), letters: Sequence[str] | None = None) -> str:
    dims = []
    for d, axes in enumerate(spec):
        letter = _letter(d, letters)
        dims.append(f"{letter}_{_sub(axes)}" if axes else letter)
    text = "[" + ", ".join(dims) + "]"
    if unreduced:
        text += "{U_" + _sub(unreduced) + "}"
    return text


def collective_notation(kind: str, axes: Sequence[str], rank: int, *, dims: Sequence[int] = (),
                        a2a: tuple[int, int] | None = None,
                        base: Sequence[Sequence[str]] | None = None,
                        letters: Sequence[str] | None = None) -> tuple[str, tuple[tuple[str, ...], ...],
                                                                              tuple[tuple[str, ...], ...],
                                                                              tuple[str, ...]]:
    """A collective in the chapter's notation, with dimension letters I, J, K... by position.

    Only what the collective itself does is written: the dimension it gathers, scatters or moves carries its
    axes' subscript; the other dimensions are written plain (the post-partitioning HLO does not say how
    they are sharded over other axes).

    Args:
      kind: logical kind.
      axes: user mesh axes, major to minor.
      rank: rank of the (global, per group) array.
      dims: the gathered / scattered dimension(s).
      a2a: for all-to-all, (dimension sharded before, dimension sharded after).
      base: for all-gather, how the operand is sharded on every dimension when that is known (from the
        argument it slices): the other dimensions then keep their subscripts (`[I_X, J_Y] -> [I, J_Y]`).
      letters: the program's own names for the dimensions, one letter each (an einsum's subscripts, `DF`);
        None: I, J, K... by position.
    Returns:
      (notation, before spec, after spec, unreduced axes before): specs are per-dimension tuples of axes.

    Example:
        >>> collective_notation("all-gather", ("Y",), 2, dims=(0,))[0]
        'AllGather_Y: [I_Y, J] -> [I, J]'
        >>> collective_notation("reduce-scatter", ("X",), 2, dims=(1,))[0]
        'ReduceScatter_X,J: [I, J]{U_X} -> [I, J_X]'
        >>> collective_notation("all-gather", ("X",), 2, dims=(0,), base=(("X",), ("Y",)))[0]
        'AllGather_X: [I_X, J_Y] -> [I, J_Y]'
        >>> collective_notation("all-gather", ("data",), 2, dims=(0,), letters="DF")[0]
        'AllGather_data: [D_data, F] -> [D, F]'
    """
    if letters is not None and (len(letters) != rank or len(set(letters)) != rank or "U" in letters):
        letters = None  # not one distinct letter per dimension (U marks unreduced sums): by position
    ax = tuple(axes)
    none: tuple[tuple[str, ...], ...] = tuple(() for _ in range(rank))
    title = _TITLES.get(kind, kind)
    name = f"{title}_{_sub(ax)}" if ax else title

    def with_axes(dd: Sequence[int]) -> tuple[tuple[str, ...], ...]:
        spec = [() for _ in range(rank)]
        if dd and 0 <= dd[0] < rank:
            spec[dd[0]] = ax
        return tuple(spec)

    if kind == "all-gather" and base is not None and len(base) == rank and dims and 0 <= dims[0] < rank \
            and tuple(base[dims[0]])[-len(ax):] == ax:
        before = tuple(tuple(b) for b in base)
        after = tuple(b[: len(b) - len(ax)] if d == dims[0] else b for d, b in enumerate(before))
        return f"{name}: {_array(before, letters=letters)} -> {_array(after, letters=letters)}", before, after, ()
    if kind == "all-gather":
        before, after = with_axes(dims), none
        return f"{name}: {_array(before, letters=letters)} -> {_array(after, letters=letters)}", before, after, ()
    if kind == "reduce-scatter":
        after = with_axes(dims)
        letter = _letter(dims[0], letters) if dims else ""
        label = f"{name},{letter}" if letter else name
        return f"{label}: {_array(none, ax, letters=letters)} -> {_array(after, letters=letters)}", none, after, ax
    if kind == "all-reduce":
        return f"{name}: {_array(none, ax, letters=letters)} -> {_array(none, letters=letters)}", none, none, ax
    if kind in ("all-to-all", "ragged-all-to-all") and a2a is not None:
        before, after = with_axes((a2a[0],)), with_axes((a2a[1],))
        return f"{name}: {_array(before, letters=letters)} -> {_array(after, letters=letters)}", before, after, ()
    return f"{name}: {_array(none, letters=letters)} -> {_array(none, letters=letters)}", none, none, ()
