"""Typed views of instruction attributes, decoded on demand from their raw text.

The grammar keeps every `key=value` verbatim (`ir.Attribute.raw`). This module decodes the values that the
analysis needs, table-driven: `DECODERS` maps an attribute key to the function that types it. A full parse
runs the decoders of the keys present (so malformed values are syntax errors with a position); unknown
keys are kept as text, so an attribute a newer XLA adds never breaks parsing.

Replica groups come in four printed forms, all expanded here into explicit device-id groups:

- explicit `{{0,1},{2,3}}` (and `{}`: one group of every participant, expanded by `expand_replica_groups`
  when the module's device count is known);
- iota `[4,2]<=[8]` or `[2,4]<=[4,2]T(1,0)`: 4 groups of 2 (see `analyzer.hlo.iota`);
- mesh `mesh['x'=4,'y'=2] {'y'}`: the groups that vary along mesh axis `y`, one per position on the other
  axes; `, device_ids=(...)` gives a non-iota device order; a sub-axis `'x':(2)2` is the size-2 slice of
  axis `x` whose pre-size (product of the sizes of the finer-grained part before it) is 2.
  Semantics from XLA's `MeshAxesReplicaGroupList::flattened_replica_groups` (xla/hlo/ir/replica_group.cc):
  reshape the device array so that every referenced (sub-)axis is its own dimension, move the grouped
  dimensions last in the order given, and cut the flattened array into groups.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from math import prod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from analyzer.errors import AnalyzerError
from analyzer.hlo.iota import expand_iota
from analyzer.hlo.literals import check_literal
from analyzer.hlo.memo import memoised, state as memo_state
from analyzer.hlo.shapes import Shape, decode_shape

if TYPE_CHECKING:  # pragma: no cover  (what a decoder reads: it imports no IR, which imports the decoders)
    from analyzer.hlo.protocols import InstructionLike as Instruction, ModuleLike as HloModule

__all__ = [
    "XLA_CHANGES",
    "xla_does",
    "Metadata",
    "DECODERS",
    "CALL_KEYS",
    "CALL_KEY_SET",
    "names_callee",
    "unquote",
    "split_top",
    "parse_int_list",
    "parse_replica_groups",
    "parse_mesh_groups",
    "parse_source_target_pairs",
    "parse_metadata",
    "parse_frontend_attributes",
    "parse_computation_list",
    "parse_dim_labels",
    "parse_literal_attribute",
    "parse_outfeed_shape",
    "parse_origin",
    "parse_domain",
    "parse_window",
    "parse_padding",
    "parse_slice",
    "parse_name_list",
    "replica_groups",
    "expand_replica_groups",
    "source_target_pairs",
    "int_list",
    "called_computations",
    "metadata",
    "frontend_attributes",
    "sharding",
    "validate",
]


@dataclass(frozen=True, slots=True)
class Metadata:
    """The `metadata={...}` of an instruction."""

    op_type: str | None = None
    op_name: str | None = None
    source_file: str | None = None
    source_line: int | None = None
    source_end_line: int | None = None
    stack_frame_id: int | None = None
    extra: Mapping[str, str] = field(default_factory=dict)

# Attributes whose value names called computations, in the order XLA prints them.
CALL_KEYS: tuple[str, ...] = (
    "to_apply", "calls", "body", "condition", "branch_computations", "true_computation", "false_computation",
    "called_computations", "select", "scatter",
)

_CALL_KEY_SET = CALL_KEY_SET = frozenset(CALL_KEYS)
_ONE_NAME = re.compile(r"%?[A-Za-z_][\w.\-]*")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "'": "'", "\\": "\\", "0": "\0", "?": "?", "a": "\a",
            "b": "\b", "f": "\f", "v": "\v"}
# C's escapes as XLA's lexer reads them (absl::CUnescape): `\xH...`, `\uHHHH`, `\UHHHHHHHH`, octal, one character.
_ESCAPE_RE = re.compile(r"\\(x[0-9a-fA-F]+|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-7]{1,3}|.)", re.S)


def unquote(text: str) -> str:
    """The value of a quoted HLO string (C escapes), e.g. `"a\\"b"` -> `a"b`.

    Example:
      >>> unquote('"x\\\\ny"')
      'x\\ny'
    """
    if len(text) < 2 or text[0] not in "\"'" or text[-1] != text[0]:
        raise ValueError(f"expected a quoted string, got {text[:40]!r}")
    body = text[1:-1]
    if "\\" not in body:
        return body

    def sub(m: re.Match) -> str:
        e = m.group(1)
        if e[0] in "xuU" and len(e) > 1:
            return chr(min(int(e[1:], 16), 0x10FFFF))
        if e[0].isdigit():
            return chr(int(e, 8))
        return _ESCAPES.get(e, "\\" + e)

    return _ESCAPE_RE.sub(sub, body)


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split `text` at `sep` characters outside brackets and quotes; items are stripped, empty ones kept out.

    Example:
      >>> split_top('{0,1},{2,3}')
      ['{0,1}', '{2,3}']
    """
    out: list[str] = []
    depth = 0
    start = 0
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if c in "{[(":
            depth += 1
        elif c in "}])":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced {c!r} in {text[:60]!r}")
        elif c == sep and depth == 0:
            out.append(text[start:i].strip())
            start = i + 1
        i += 1
    if depth != 0:
        raise ValueError(f"unbalanced brackets in {text[:60]!r}")
    last = text[start:].strip()
    if not out:
        return [last] if last else []
    out.append(last)
    if any(not x for x in out):
        raise ValueError(f"an empty item in the list {text[:60]!r}")
    return out


def _strip_comments(text: str) -> str:
    return re.sub(r"/\*.*?\*/", " ", text, flags=re.S) if "/*" in text else text


def _braced(text: str, what: str) -> str:
    text = _strip_comments(text).strip()
    if len(text) < 2 or text[0] != "{" or text[-1] != "}":
        raise ValueError(f"expected {what}, got {text[:60]!r}")
    return text[1:-1].strip()


def parse_int_list(raw: str) -> tuple[int, ...]:
    """`{1,2,3}` -> (1, 2, 3); `{}` -> ().

    Example:
      >>> parse_int_list("{0, 2}")
      (0, 2)
    """
    body = _braced(raw, "a list of integers like `{0,1}`")
    if not body:
        return ()
    try:
        return tuple(int(x) for x in body.split(","))
    except ValueError:
        raise ValueError(f"expected a list of integers like `{{0,1}}`, got {raw[:60]!r}") from None


def parse_int_list_or_lists(raw: str) -> tuple[int, ...] | tuple[tuple[int, ...], ...]:
    """`{1,2}` -> (1, 2); `{{1,8},{2,8}}` -> ((1, 8), (2, 8)) (collective-permute's `slice_sizes`).

    Example:
      >>> parse_int_list_or_lists("{{128,32}}")
      ((128, 32),)
    """
    body = _braced(raw, "a list of integers like `{0,1}`")
    if body.startswith("{"):
        return _int_groups(raw, "a list of integer lists like `{{1,2},{3,4}}`")
    return parse_int_list(raw)


def _int_groups(raw: str, what: str) -> tuple[tuple[int, ...], ...]:
    body = _braced(raw, what)
    if not body:
        return ()
    return tuple(parse_int_list(g) for g in split_top(body))


_IOTA_RE = re.compile(r"^\[([\d,\s]*)\]\s*<=\s*\[([\d,\s]*)\]\s*(?:T\(([\d,\s]*)\))?$")


def _ints(text: str) -> tuple[int, ...]:
    text = text.strip()
    return tuple(int(x) for x in text.split(",")) if text else ()


def parse_replica_groups(raw: str) -> tuple[tuple[int, ...], ...]:
    """Expand any printed replica-group form into explicit groups of device ids.

    Args:
      raw: `{{0,1},{2,3}}`, `{}`, `[4,2]<=[8]`, `[2,4]<=[4,2]T(1,0)`, or the mesh form
        `mesh['x'=4,'y'=2] {'y'}` (optionally with `, device_ids=(...)` before the braces).

    Returns:
      A tuple of groups; `()` for `{}` (every participant in one group; see `expand_replica_groups`).

    Example:
      >>> parse_replica_groups("[2,4]<=[4,2]T(1,0)")
      ((0, 2, 4, 6), (1, 3, 5, 7))
    """
    text = _strip_comments(raw).strip()
    if text.startswith("{"):
        return _int_groups(text, "replica groups like `{{0,1},{2,3}}`")
    if text.startswith("["):
        m = _IOTA_RE.match(text)
        if not m:
            raise ValueError(f"expected iota replica groups like `[4,2]<=[8]` or `[2,4]<=[4,2]T(1,0)`, got {raw!r}")
        dims, reshape, perm = _ints(m.group(1)), _ints(m.group(2)), m.group(3)
        if len(dims) != 2:
            raise ValueError(f"iota replica groups need two dims [groups,group_size], got {list(dims)}")
        ids = expand_iota(dims, reshape, _ints(perm) if perm is not None else None)
        return tuple(tuple(int(x) for x in row) for row in ids)
    if text.startswith("mesh"):
        return parse_mesh_groups(text)
    raise ValueError(f"expected replica groups: `{{{{0,1}},{{2,3}}}}`, `[4,2]<=[8]` or `mesh['x'=4] {{'x'}}`, "
                     f"got {raw[:60]!r}")


def check_replica_groups(raw: str) -> None:
    """Check replica groups only as far as XLA's parser does: an iota form `[g,s]<=[r...]T(p...)` has two dims, a
    transpose exactly when there are several reshape dims, each index within them. Its
    sizes are not compared (XLA's parser takes `[10,10]<=[6,5]T(1,0)`; `parse_replica_groups`, which expands
    the groups for the analysis, does not)."""
    text = _strip_comments(raw).strip()
    if not text.startswith("["):
        DECODERS["replica_groups"](raw)  # (memoised: the analysis reads the same groups again)
        return
    m = _IOTA_RE.match(text)
    if not m:
        raise ValueError(f"expected iota replica groups like `[4,2]<=[8]` or `[2,4]<=[4,2]T(1,0)`, got {raw!r}")
    dims, reshape = _ints(m.group(1)), _ints(m.group(2))
    if len(dims) != 2:
        raise ValueError(f"iota replica groups need two dims [groups,group_size], got {list(dims)}")
    if not reshape:
        raise ValueError("iota replica groups need reshape dims after `<=`, e.g. `[4,2]<=[8]`")
    perm = _ints(m.group(3)) if m.group(3) is not None else None
    if len(reshape) == 1:
        if perm is not None:
            raise ValueError("no transpose `T(...)` after a single reshape dim (XLA reads `<=[8]` as `<=[8]T(0)`)")
        return
    if perm is None:
        raise ValueError(f"expected `T(...)` after the {len(reshape)} reshape dims {list(reshape)}")
    if any(not 0 <= p < len(reshape) for p in perm):
        raise ValueError(f"the transpose T{tuple(perm)} has an index outside [0, {len(reshape)}), the reshape dims")


def _check_sharding(raw: str) -> None:
    from analyzer.hlo.sharding import check_hlo_sharding

    check_hlo_sharding(raw)


_MESH_RE = re.compile(
    r"^mesh\s*\[(?P<axes>[^\]]*)\]\s*(?:,\s*device_ids\s*=\s*\((?P<ids>(?:[^()]|\([^()]*\))*)\))?\s*\{(?P<group>[^}]*)\}$"
)
_DEVICE_IOTA = re.compile(r"^\[([\d,\s]+)\]\s*(?:T\(([\d,\s]+)\))?$")
_AXIS_DECL = re.compile(r"^'([^']*)'\s*=\s*(\d+)$")
_AXIS_REF = re.compile(r"^'([^']*)'(?:\s*:\s*\((\d+)\)\s*(\d+))?$")


def parse_mesh_groups(raw: str) -> tuple[tuple[int, ...], ...]:
    """Expand the mesh form `mesh['x'=4,'y'=2] {'y'}` into explicit device-id groups.

    The mesh's axes are the dims of the device array (`iota` unless `device_ids=(...)` is given). The
    braces name the axes a group spans, major to minor; `'x':(p)s` is the sub-axis of size `s` inside
    `x` with pre-size `p` (the product of the finer-grained sizes before it: `x` of size 8 splits as
    `[8/(p*s), s, p]` major to minor... XLA writes it as reshape `[p, s, 8/(p*s)]` of the axis with the
    group on the middle dim).

    Example:
      >>> parse_mesh_groups("mesh['x'=2,'y'=2] {'x'}")
      ((0, 2), (1, 3))
    """
    m = _MESH_RE.match(_strip_comments(raw).strip())
    if not m:
        raise ValueError("expected mesh replica groups like `mesh['x'=4,'y'=2] {'y'}` or "
                         f"`mesh['x'=4,'y'=2], device_ids=(...) {{'y'}}`, got {raw[:80]!r}")
    names, sizes = _mesh_axes(m.group("axes"))
    devices = _mesh_devices(m.group("ids"), sizes)
    refs = _mesh_group_refs(m.group("group").strip(), names, sizes)
    new_sizes, grouped = _grouped_dims(refs, names, sizes)
    perm = [d for d in range(len(new_sizes)) if d not in grouped] + grouped
    arr = devices.reshape(new_sizes).transpose(perm)
    per_group = prod(new_sizes[d] for d in grouped)
    flat = arr.reshape(-1, per_group)
    return tuple(tuple(int(x) for x in row) for row in flat)


def _mesh_axes(text: str) -> tuple[list[str], list[int]]:
    """`'x'=4,'y'=2` (inside `mesh[...]`): the axes' names and sizes, major to minor; at least one, each named
    once, sizes positive."""
    names: list[str] = []
    sizes: list[int] = []
    for decl in split_top(text):
        d = _AXIS_DECL.match(decl)
        if not d:
            raise ValueError(f"expected a mesh axis like `'x'=4`, got {decl!r}")
        if d.group(1) in names:
            raise ValueError(f"mesh axis {d.group(1)!r} is declared twice")
        names.append(d.group(1))
        sizes.append(int(d.group(2)))
        if sizes[-1] <= 0:
            raise ValueError(f"mesh axis {d.group(1)!r} has size {sizes[-1]}; sizes must be positive")
    if not names:
        raise ValueError("a mesh needs at least one axis")
    return names, sizes


def _mesh_devices(ids: str | None, sizes: list[int]) -> Any:
    """The device array of a mesh with these axis sizes (a numpy array of that shape): in iota order without
    `device_ids=`, else the ids it lists (each device once) or its iota `[2,4]T(1,0)` (as many devices)."""
    import numpy as np

    total = prod(sizes)
    if ids is None:
        return np.arange(total, dtype=np.int64).reshape(sizes)
    ids_text = ids.strip()
    iota = _DEVICE_IOTA.match(ids_text)
    if iota:  # `device_ids=([2,4]T(1,0))`: iota reshaped to these dims, transposed, then to the mesh
        reshape = _ints(iota.group(1))
        perm = _ints(iota.group(2)) if iota.group(2) is not None else None
        if prod(reshape) != total:
            raise ValueError(f"device_ids ({ids_text}) hold {prod(reshape)} devices but the mesh has {total}")
        return expand_iota(tuple(sizes), reshape, perm)
    listed = _ints(ids_text)
    if sorted(listed) != list(range(total)):
        raise ValueError(f"device_ids must be a permutation of 0..{total - 1}, got {len(listed)} ids")
    return np.array(listed, dtype=np.int64).reshape(sizes)


def _mesh_group_refs(group_text: str, names: list[str],
                     sizes: list[int]) -> list[tuple[int, tuple[int, int] | None]]:
    """`'y', 'x':(2)2` (inside the group's braces): each reference as (mesh axis index, (pre-size, size) of a
    sub-axis or None for the whole axis), in the order given; at least one, of the mesh's axes, sub-axes that
    fit their axis."""
    refs: list[tuple[int, tuple[int, int] | None]] = []
    if not group_text:
        raise ValueError("the mesh form needs at least one axis in braces, e.g. {'y'}")
    for item in split_top(group_text):
        r = _AXIS_REF.match(item)
        if not r:
            raise ValueError(f"expected an axis reference like `'y'` or `'y':(2)2`, got {item!r}")
        if r.group(1) not in names:
            raise ValueError(f"axis {r.group(1)!r} is not in the mesh; mesh axes: {', '.join(names)}")
        ax = names.index(r.group(1))
        sub = None
        if r.group(2) is not None:
            pre, size = int(r.group(2)), int(r.group(3))
            full = sizes[ax]
            if pre < 1 or size < 2 or full % (pre * size) or size >= full:
                raise ValueError(f"sub-axis {item} does not fit axis {r.group(1)!r} of size {full}")
            sub = (pre, size)
        refs.append((ax, sub))
    return refs


def _grouped_dims(refs: list[tuple[int, tuple[int, int] | None]], names: list[str],
                  sizes: list[int]) -> tuple[list[int], list[int]]:
    """The device array's dims once every referenced (sub-)axis is a dim of its own, and the dims a group spans,
    in reference order (each at most once)."""
    # Per mesh dim: the reshape of that axis and which of its new dims are grouped (in reference order).
    reshape: dict[int, list[int]] = {}
    aggregate: dict[int, list[int]] = {}
    for ax in sorted({a for a, _ in refs}):
        subs = [s for a, s in refs if a == ax]
        reshape[ax], aggregate[ax] = _split_axis(names[ax], sizes[ax], subs)
    new_sizes: list[int] = []
    offsets: list[int] = []
    for ax, size in enumerate(sizes):
        offsets.append(len(new_sizes))
        new_sizes.extend(reshape.get(ax, [size]))
    consumed: dict[int, int] = {}
    grouped: list[int] = []
    for ax, _ in refs:
        k = consumed.get(ax, 0)
        consumed[ax] = k + 1
        grouped.append(aggregate[ax][k] + offsets[ax])
    if len(set(grouped)) != len(grouped):
        raise ValueError("an axis appears twice in the mesh group")
    return new_sizes, grouped


def _split_axis(name: str, full: int, subs: list[tuple[int, int] | None]) -> tuple[list[int], list[int]]:
    """One mesh axis of size `full` cut at its referenced sub-axes (`subs`, in reference order; None: the whole
    axis): the dims it becomes, major to minor as XLA reshapes it (`[pre, size, rest]`), and which of them each
    reference is. Sub-axes of one axis may not overlap; a whole axis is referenced once."""
    if len(subs) == 1:
        s = subs[0]
        if s is None:
            return [full], [0]
        return [s[0], s[1], full // (s[0] * s[1])], [1]
    if any(s is None for s in subs):
        raise ValueError(f"axis {name!r} is referenced twice")
    order = sorted(range(len(subs)), key=lambda k: subs[k][0])  # type: ignore[index]
    dims: list[int] = []
    agg_sorted: list[int] = []
    prefix = 1
    for k in order:
        pre, size = subs[k]  # type: ignore[misc]
        if pre < prefix or pre % prefix:
            raise ValueError(f"sub-axes of {name!r} overlap")
        if pre != prefix:
            dims.append(pre // prefix)
            prefix = pre
        agg_sorted.append(len(dims))
        dims.append(size)
        prefix *= size
    if prefix != full:
        dims.append(full // prefix)
    agg = [0] * len(order)
    for pos, k in enumerate(order):
        agg[k] = agg_sorted[pos]
    return dims, agg


def parse_source_target_pairs(raw: str) -> tuple[tuple[int, int], ...]:
    """`{{0,1},{1,2}}` -> ((0, 1), (1, 2)).

    Example:
      >>> parse_source_target_pairs("{{0,1},{1,0}}")
      ((0, 1), (1, 0))
    """
    groups = _int_groups(raw, "source-target pairs like `{{0,1},{1,0}}`")
    for g in groups:
        if len(g) != 2:
            raise ValueError(f"expected source-target pairs of two ids, got {{{','.join(map(str, g))}}}")
    return groups  # type: ignore[return-value]


_METADATA_ITEM = re.compile(r'\s*([A-Za-z_][\w.\-]*)\s*=\s*("(?:[^"\\]|\\.)*"|\{[^{}]*\}|[^\s"{},]+)\s*,?\s*', re.S)
_METADATA_INT = {"source_line", "source_end_line", "source_column", "source_end_column", "stack_frame_id",
                 "size_of_generated_code_in_bytes", "size_of_memory_working_set_in_bytes"}


def parse_metadata(raw: str) -> Metadata:
    """`{op_type="dot" op_name="jit(f)/dot" source_file="a.py" source_line=3 stack_frame_id=2}` -> Metadata.

    Example:
      >>> parse_metadata('{op_name="add" stack_frame_id=5}').stack_frame_id
      5
    """
    body = _braced(raw, 'metadata like `{op_name="..." source_line=3}`')
    values: dict[str, str] = {}
    pos = 0
    while pos < len(body):
        m = _METADATA_ITEM.match(body, pos)
        if not m or m.end() == pos:
            raise ValueError(f"expected `key=value` in metadata, got {body[pos:pos + 40]!r}")
        key, val = m.group(1), m.group(2)
        values[key] = unquote(val) if val.startswith('"') else val
        pos = m.end()
    ints: dict[str, int | None] = {}
    for k in ("source_line", "source_end_line", "stack_frame_id"):
        v = values.pop(k, None)
        if v is not None:
            try:
                ints[k] = int(v)
            except ValueError:
                raise ValueError(f"metadata {k} must be an integer, got {v!r}") from None
    for k in _METADATA_INT & set(values):
        try:
            int(values[k])
        except ValueError:
            raise ValueError(f"metadata {k} must be an integer, got {values[k]!r}") from None
    return Metadata(
        op_type=values.pop("op_type", None),
        op_name=values.pop("op_name", None),
        source_file=values.pop("source_file", None),
        source_line=ints.get("source_line"),
        source_end_line=ints.get("source_end_line"),
        stack_frame_id=ints.get("stack_frame_id"),
        extra=values,
    )


def parse_frontend_attributes(raw: str) -> dict[str, str]:
    """`{_xla_stream_annotation="1",inlineable="true"}` -> {'_xla_stream_annotation': '1', ...}.

    Example:
      >>> parse_frontend_attributes('{a="1",b="x"}')
      {'a': '1', 'b': 'x'}
    """
    body = _braced(raw, 'frontend attributes like `{key="value"}`')
    out: dict[str, str] = {}
    for item in split_top(body):
        m = _FRONTEND_ITEM.fullmatch(item)
        if m is None:  # XLA: a name directly followed by `=`, then a quoted string or a `{...}` group
            raise ValueError(f"expected `key=\"value\"` or `key={{...}}` in frontend_attributes, got {item.strip()[:40]!r}")
        key, val = m.group(1), m.group(2)
        out[key] = unquote(val) if val[0] == '"' else val
    return out


_FRONTEND_ITEM = re.compile(r'\s*([A-Za-z_][\w.\-]*)=\s*("(?:[^"\\]|\\.)*"|\{.*\})\s*', re.S)


# What XLA's parser reads differently across the jaxlib versions this tool supports, each measured with that
# version's own parser (tests/hlo/extract_xla_corpus.py labels XLA's parser tests with every installed jaxlib;
# tests/hlo/corpus/xla/manifest.json keeps the verdicts): change -> the first jaxlib (major, minor) that does it.
# Strict parse follows the XLA of the jaxlib installed.
XLA_CHANGES: Mapping[str, tuple[int, int]] = {
    # jaxlib 0.12's XLA no longer checks that an async-update/-done continues an async chain (its operands may be
    # any values, of any count: AsyncDoneNoAsyncStart, AsyncUpdateAndAsyncDoneNoAsyncStart), nor that a
    # computation is wrapped by one async-start only (AsyncOpSharedComputation); 0.10's rejects all three.
    "async_chain_unchecked": (0, 12),
    # jaxlib 0.12's XLA reads `idx=` in a convolution's sparsity_config (`{lhs={sparsity=2x4 ... idx=3}}`); 0.10's
    # says "unknown attribute".
    "sparsity_idx": (0, 12),
}


def _installed_jaxlib() -> tuple[int, int] | None:
    from importlib import metadata

    try:
        m = re.match(r"(\d+)\.(\d+)", metadata.version("jaxlib"))
    except metadata.PackageNotFoundError:
        return None
    return (int(m.group(1)), int(m.group(2))) if m else None


def xla_does(change: str) -> bool:
    """Whether the XLA of the installed jaxlib reads text as `XLA_CHANGES[change]` says (asked only where a check
    that the versions disagree on would fail: it reads the installed version each time, no cache). Without jaxlib,
    the oldest supported XLA's reading (the stricter) holds.

    Example:
      >>> isinstance(xla_does("async_chain_unchecked"), bool)
      True
    """
    version = _installed_jaxlib()
    return version is not None and version >= XLA_CHANGES[change]


# A name in an attribute value: `%add`, `add`, or `add:` (XLA's lexer reads a bare name directly followed by `:` as
# that name, there as everywhere).
_COMP_NAME = re.compile(r"^(?:%[A-Za-z_][\w.\-]*|[A-Za-z_][\w.\-]*:?)$")


def parse_computation_list(raw: str) -> tuple[str, ...]:
    """`%add` -> ('add',); `{%a, %b}` -> ('a', 'b').

    Example:
      >>> parse_computation_list("{%then, %else}")
      ('then', 'else')
    """
    text = _strip_comments(raw).strip()
    items = split_top(text[1:-1]) if text.startswith("{") and text.endswith("}") else [text]
    out = []
    for item in items:
        if not _COMP_NAME.match(item):
            raise ValueError(f"expected a computation name like `%add`, got {item[:40]!r}")
        out.append(item[1:] if item[0] == "%" else item.rstrip(":"))
    return tuple(out)


def parse_bool_list(raw: str) -> tuple[bool, ...]:
    """`{true,false}` -> (True, False) (`parameter_replication`, the header's sharding-propagation flags).

    Example:
      >>> parse_bool_list("{true, false}")
      (True, False)
    """
    body = _braced(raw, "a list of booleans like `{true,false}`")
    items = [x.strip() for x in body.split(",")] if body.strip() else []
    for x in items:
        if x not in ("true", "false"):
            raise ValueError(f"expected true or false, got {x!r}")
    return tuple(x == "true" for x in items)


_ACCURACY = re.compile(r"\{\s*(?:mode=\s*([A-Za-z_]+)|tolerance=\s*\{([^{}]*)\})\s*\}")
_TOLERANCE_ITEM = re.compile(r"\s*(atol|rtol|ulps)=\s*(-?(?:inf|nan|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?))\s*")


def parse_result_accuracy(raw: str) -> dict[str, Any]:
    """`{mode=highest}` or `{tolerance={atol=1e-5,rtol=0,ulps=1}}` -> {"mode": "highest"} / {"atol": 1e-05, ...}.

    What XLA's parser takes (measured against it): a mode `highest` or `default` (any case), or tolerances
    `atol`, `rtol`, `ulps`, each a finite or infinite number that is not negative and not NaN (XLA aborts on
    those), integers within int64; `key=` without a space before `=`.

    Example:
      >>> parse_result_accuracy("{tolerance={atol=1e-5,ulps=1}}")
      {'atol': 1e-05, 'ulps': 1.0}
    """
    m = _ACCURACY.fullmatch(raw.strip())
    if m is None:
        raise ValueError("expected `{mode=highest}` or `{tolerance={atol=..., rtol=..., ulps=...}}`, "
                         f"got {raw[:60]!r}")
    if m.group(1) is not None:
        mode = m.group(1).lower()
        if mode not in ("highest", "default"):
            raise ValueError(f"unknown accuracy mode {m.group(1)!r}; expected highest or default")
        return {"mode": mode}
    out: dict[str, Any] = {}
    body = m.group(2)
    for item in (body.split(",") if body.strip() else []):
        t = _TOLERANCE_ITEM.fullmatch(item)
        if t is None:
            raise ValueError(f"expected `atol=`, `rtol=` or `ulps=` and a number, got {item.strip()!r}")
        key, text = t.groups()
        value = float(text)
        if text.lstrip("-").isdigit() and not -(1 << 63) <= int(text) < (1 << 63):
            raise ValueError(f"{text} is out of range for an int64")
        if value != value or value < 0:
            raise ValueError(f"{key}={text}: a tolerance is a number >= 0")
        if value == float("inf") and "inf" not in text:
            raise ValueError(f"{key}={text} is out of range for a double")
        out[key] = value
    return out


def _parse_bool(raw: str) -> bool:
    if raw not in ("true", "false"):
        raise ValueError(f"expected true or false, got {raw[:20]!r}")
    return raw == "true"


def _parse_int(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"expected an integer, got {raw[:20]!r}") from None


def _parse_sharding(raw: str) -> Any:
    try:
        from analyzer.hlo.sharding import parse_hlo_sharding
    except ImportError:  # the sharding module is another helper's; keep the text until it lands
        return raw
    # XLA prints `/*index=N*/` before every fifth element of a tuple sharding; its lexer skips comments.
    return parse_hlo_sharding(_strip_comments(raw) if "/*" in raw else raw)


# The tokens of a `literal=` value: an array shape (with its layout, which may follow a space), a scalar, the
# elided `...`, and punctuation. The shape and scalar spellings are the grammar's (grammars/hlo.lark).
_LITERAL_TOKEN = re.compile(
    r"\s*(?:/\*.*?\*/\s*)*(?:"
    r"(?P<shape>[a-zA-Z][a-zA-Z0-9]*\[[^\]\n]*\](?:\{[^{}\n]*\}|[ \t]+\{(?:\d+(?:,\d+)*)?(?::[^{}\n]*)?\})?)"
    r"|(?P<scalar>-?(?:inf|nan(?:\(0x[0-9a-fA-F]+\))?|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)|true|false)"
    r"|(?P<dots>\.\.\.)|(?P<op>[{}(),]))", re.S)


class _LitTok(str):
    """A literal token where the literal checks (analyzer.hlo.verifier) expect a positioned token."""

    line = 1
    column = 1


def parse_literal_attribute(raw: str) -> tuple[Shape, ...]:
    """A custom-call's `literal=` value: `s32[2]{0} {1, 2}`, `f32[] 0.1`, or a tuple `( s32[] 1, pred[] 0 )` of
    such. Checked as XLA's parser checks it: every element has its shape first, a layout is a permutation of the
    dims, the values fit the shape (count, nesting, kind and range); commas between values are optional.

    Returns:
      The shape of each literal (one unless the value is a tuple).

    Example:
      >>> [str(s) for s in parse_literal_attribute("( s32[4]{0} {4, 128, 128, 3}, pred[] 1 )")]
      ['s32[4]', 'pred[]']
    """
    from analyzer.errors import HloSyntaxError

    toks: list[tuple[str, str]] = []
    pos, text = 0, raw.strip()
    while pos < len(text):
        m = _LITERAL_TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            if not text[pos:].strip():
                break
            raise ValueError(f"unexpected `{text[pos:].strip()[:20]}` in the literal")
        pos = m.end()
        toks.append((m.lastgroup or "op", m.group(m.lastgroup or "op")))
    i = 0

    def peek() -> tuple[str, str]:
        return toks[i] if i < len(toks) else ("end", "")

    def take() -> tuple[str, str]:
        nonlocal i
        tok = peek()
        if tok[0] == "end":
            raise ValueError("the literal ends early")
        i += 1
        return tok

    def value() -> tuple:  # (text, kind, items) as the grammar's literal callbacks build it
        kind, t = take()
        if kind == "scalar":
            return (t, "s", _LitTok(t))
        if kind == "dots":
            return (t, "e", _LitTok(t))
        if t == "{":
            items = []
            while peek() != ("op", "}"):
                if peek() == ("op", ","):
                    take()
                    continue
                items.append(value())
            take()
            return ("{...}", "a", tuple(items))
        if t == "(":  # a complex value
            items = [value()]
            if take() != ("op", ","):
                raise ValueError("expected `,` after the real part of a complex value")
            items.append(value())
            if take() != ("op", ")"):
                raise ValueError("expected `)` after the imaginary part of a complex value")
            return ("(...)", "p", tuple(items))
        raise ValueError(f"expected a value, got `{t}`")

    def shaped(out: list[Shape]) -> None:
        kind, t = take()
        if (kind, t) == ("op", "("):  # a tuple: each element a shaped literal, commas optional
            while peek() != ("op", ")"):
                if peek() == ("op", ","):
                    take()
                    continue
                shaped(out)
            take()
            return
        if kind != "shape":
            raise ValueError(f"expected a shape like `s32[2]{{0}}` before the value, got `{t}`")
        shape = decode_shape(t)
        if shape.is_token or shape.element_type == "opaque":
            raise ValueError(f"a {shape.element_type} has no literal")
        if shape.layout is not None and sorted(shape.layout.minor_to_major) != list(range(shape.rank)):
            raise ValueError(f"the layout of {t} is not a permutation of its dimensions")
        try:
            check_literal(value(), shape, _LitTok(t))
        except HloSyntaxError as e:
            raise ValueError(e.message) from None
        out.append(shape)

    shapes: list[Shape] = []
    shaped(shapes)
    if i < len(toks):
        raise ValueError(f"unexpected `{toks[i][1]}` after the literal")
    return tuple(shapes)


_ALIASING_ITEM = re.compile(r"\s*\{\s*(-?\d+(?:\s*,\s*-?\d+)*)?\s*\}\s*:\s*\(\s*(-?\d+)\s*,\s*"
                            r"\{\s*(-?\d+(?:\s*,\s*-?\d+)*)?\s*\}\s*\)\s*,?")


def parse_output_to_operand_aliasing(raw: str) -> tuple[tuple[tuple[int, ...], int, tuple[int, ...]], ...]:
    """`{ {0}: (0, {}), {1}: (1, {0}) }` -> ((output index, operand number, operand index), ...).

    Example:
      >>> parse_output_to_operand_aliasing("{{1}: (0, {0})}")
      (((1,), 0, (0,)),)
    """
    body = _braced(raw, "aliasing like `{ {0}: (0, {}) }`")
    out = []
    pos = 0
    while body[pos:].strip():
        m = _ALIASING_ITEM.match(body, pos)
        if m is None:
            raise ValueError(f"expected `{{output index}}: (operand number, {{operand index}})`, got "
                             f"{body[pos:].strip()[:40]!r}")
        out.append((_ints(m.group(1) or ""), int(m.group(2)), _ints(m.group(3) or "")))
        pos = m.end()
    return tuple(out)


# The tokens of an `origin=` value as XLA's lexer splits them: spaces and comments between any two; a quoted string
# (double or single quotes), an integer, a word, one punctuation character.
_ORIGIN_TOKEN = re.compile(r"""\s+|/\*(?:[^*]|\*(?!/))*\*/|//[^\n]*|("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')"""
                           r"""|(-?\d+(?![\w.]))|([^\s{}()\[\],"'/]+|.)""", re.S | re.A)


class OriginError(ValueError):
    """A malformed `origin=` value; `offset`: where in the value (0-based) the bad token starts."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


def parse_origin(raw: str) -> tuple[tuple[tuple[int, ...], str, tuple[int, ...]], ...] | str:
    """`origin=` (an instruction's original value) as XLA's parser reads it: `{[synthetic_call]}`, or `{...}` holding
    a tuple tree of original arrays, each `{"name"}` or `{"name" {shape index}}` (or `{}`: none), where `(` opens a
    tuple level, `,` moves to the next element and `)` closes the level. XLA's reader takes any order of these
    (`{({"a"}(}` parses), so this does; what it fails on is an error here: a token that is none of these, and two
    spellings where XLA's reader steps outside its index: a `,` outside any `(` (it increments the last level of
    an empty index: XLA aborts, but for a `{(...),}` it may survive), and an array after a `)` that closed no `(`
    (it popped an empty index; the array then fails, a `)` with nothing after it passes, as XLA's does).

    Returns:
      `"synthetic_call"`, or the arrays as `(leaf index, instruction name, shape index)` in the order written.

    Raises:
      OriginError: what XLA expected, with the offset of the token in `raw`.

    Example:
      >>> parse_origin('{({"a"}, {"b" {1}})}')
      (((0,), 'a', ()), ((1,), 'b', (1,)))
    """
    toks: list[tuple[int, str, int]] = []  # (kind: 0 punctuation or word, 1 string, 2 integer; text; offset)
    for m in _ORIGIN_TOKEN.finditer(raw):
        if m.lastindex:
            toks.append((m.lastindex if m.lastindex < 3 else 0, m.group(m.lastindex), m.start()))
    toks.append((0, "", len(raw)))  # the end
    pos = 0

    def take(text: str | None, why: str) -> tuple[int, str, int]:
        nonlocal pos
        tok = toks[pos]
        if text is not None and (tok[0] != 0 or tok[1] != text):
            raise OriginError(f"{why}, found {_origin_found(tok)}", tok[2])
        pos += 1
        return tok

    take("{", "expected `{` to start the original value")
    if toks[pos][1] == "[" and toks[pos][0] == 0:
        pos += 1
        take("synthetic_call", "expected `synthetic_call` after `[`")
        take("]", "expected `]` to end `[synthetic_call]`")
        take("}", "expected `}` to end the original value after `[synthetic_call]`")
        out: Any = "synthetic_call"
    else:
        index: list[int] = []
        broken = None  # the offset of a `)` that closed no `(`
        arrays = []
        while True:
            kind, text, at = take(None, "")
            if kind == 0 and text == "}":
                break
            if kind == 0 and text == "(":
                index.append(0)
            elif kind == 0 and text == ")":
                if index:
                    index.pop()
                elif broken is None:
                    broken = at
            elif kind == 0 and text == ",":
                if index:
                    index[-1] += 1
                elif broken is None:  # (XLA increments the last of no index levels: it aborts)
                    raise OriginError("`,` outside any `(` of the tuple tree", at)
            elif kind == 0 and text == "{":
                if broken is not None:
                    raise OriginError("an original array after a `)` that closes no `(` (XLA fails there: the "
                                      "tree index is empty)", at)
                name, shape_index = None, ()
                if toks[pos][0] == 1:
                    name = unquote(take(None, "")[1])
                    if toks[pos][1] == "{" and toks[pos][0] == 0:
                        shape_index = _origin_shape_index(toks, pos)
                        pos = shape_index[1]
                        shape_index = shape_index[0]
                take("}", 'expected `}` to end the original array `{"name" {shape index}}`')
                if name is not None:
                    arrays.append((tuple(index), name, shape_index))
            else:
                raise OriginError("expected `[synthetic_call]` or a tuple tree of original arrays like "
                                  f'`({{"a"}}, {{"b" {{1}}}})`, found {_origin_found((kind, text, at))}', at)
        out = tuple(arrays)
    if pos < len(toks) - 1:
        raise OriginError(f"unexpected {_origin_found(toks[pos])} after the original value", toks[pos][2])
    return out


def _origin_found(tok: tuple[int, str, int]) -> str:
    return f"`{tok[1][:20]}`" if tok[1] else "the end of the value"


def _origin_shape_index(toks: list[tuple[int, str, int]], pos: int) -> tuple[tuple[int, ...], int]:
    """`{1, 2}` at `toks[pos]` (a trailing comma allowed, as XLA's ParseShapeIndex takes it) -> (index, next pos)."""
    pos += 1
    out: list[int] = []
    while not (toks[pos][0] == 0 and toks[pos][1] == "}"):
        kind, text, at = toks[pos]
        if kind != 2 or not -2**63 <= int(text) < 2**63:
            raise OriginError(f"expected an integer in the shape index, found {_origin_found(toks[pos])}", at)
        out.append(int(text))
        pos += 1
        if toks[pos][0] == 0 and toks[pos][1] == ",":
            pos += 1
        elif not (toks[pos][0] == 0 and toks[pos][1] == "}"):
            raise OriginError(f"expected `,` or `}}` in the shape index, found {_origin_found(toks[pos])}",
                              toks[pos][2])
    return tuple(out), pos + 1


def parse_outfeed_shape(raw: str) -> Shape:
    """`outfeed_shape=(u32[3]{0}, pred[])`: a shape (a tuple's element layouts are checked, as XLA does)."""
    text = raw.strip()
    try:
        return decode_shape(text)
    except ValueError as e:
        raise ValueError(f"expected a shape like `(u32[3]{{0}}, pred[])`: {e}") from None


def parse_domain(raw: str) -> tuple[str, Any, Any]:
    """`{kind="sharding", entry={maximal device=0}, exit={maximal device=1}}` -> (kind, entry, exit shardings).

    XLA takes the three keys, each once, and only the sharding kind.
    """
    body = _braced(raw, 'a domain like `{kind="sharding", entry={...}, exit={...}}`')
    fields: dict[str, str] = {}
    for item in split_top(body):
        key, eq, val = item.partition("=")
        key = key.strip()
        if not eq or key not in ("kind", "entry", "exit"):
            raise ValueError(f"expected kind=, entry= or exit= in a domain, got {item.strip()[:30]!r}")
        if key in fields:
            raise ValueError(f"the domain sets {key} twice")
        fields[key] = val.strip()
    for key in ("kind", "entry", "exit"):
        if key not in fields:
            raise ValueError(f"the domain has no {key}=")
    kind = fields["kind"]
    if not (len(kind) >= 2 and kind[0] == kind[-1] == '"'):
        raise ValueError(f"expected a quoted domain kind like \"sharding\", got {kind[:20]!r}")
    if unquote(kind) != "sharding":
        raise ValueError(f"unsupported domain kind {unquote(kind)!r}; XLA takes \"sharding\"")
    entry, exit_ = (_domain_sharding(fields[k], k) for k in ("entry", "exit"))
    return "sharding", entry, exit_


def _domain_sharding(raw: str, key: str) -> Any:
    from analyzer.hlo.sharding import parse_hlo_sharding

    try:
        return parse_hlo_sharding(_strip_comments(raw) if "/*" in raw else raw)
    except AnalyzerError as e:
        raise ValueError(f"bad {key}= sharding: {getattr(e, 'message', e)}") from None


def _parse_backend_config(raw: str) -> Any:
    import json

    text = raw
    if text.startswith('"'):
        text = unquote(text)
        if not text:
            return {}
    try:
        return json.loads(text)
    except ValueError:
        return raw


_DIM_LABELS = re.compile(r"^([0-9bf?]{2,})_([0-9io?]{2,})->([0-9bf?]{2,})$")


def parse_dim_labels(raw: str) -> tuple[str, str, str]:
    """`b01f_01io->b01f` -> ('b01f', '01io', 'b01f'), checked the way XLA's parser checks convolution labels.

    Each part names every label at most once (`?` dims aside); its spatial labels are digits below the part's
    length; the three parts have as many spatial dims. The batch and feature labels (`b`, `f`, `i`, `o`) may be
    missing: XLA's parser then takes dimension 0 (its verifier, which `hlo_module_from_text` does not run,
    is stricter).

    Example:
      >>> parse_dim_labels("bf_io->bf")
      ('bf', 'io', 'bf')
    """
    m = _DIM_LABELS.match(raw.strip())
    if not m:
        raise ValueError(f"expected dim labels like `b01f_01io->b01f`, got {raw[:40]!r}")
    parts = m.groups()
    spatial = []
    for part, special, what in zip(parts, ("bf", "io", "bf"), ("lhs", "rhs", "output")):
        named = [c for c in part if c != "?"]
        if len(set(named)) != len(named):
            raise ValueError(f"dim labels {part!r}: expects unique {what} dimension labels")
        for c in part:
            if c.isdigit() and int(c) >= len(part):
                raise ValueError(f"dim labels {part!r}: expects [0-{len(part) - 1}{special}?] in the {what} labels")
        spatial.append(sum(1 for c in named if c not in special))
    if len(set(spatial)) != 1:
        raise ValueError(f"dim labels {raw!r}: input, kernel and output must have same number of spatial dimensions, "
                         f"got {spatial[0]}, {spatial[1]}, {spatial[2]}")
    return parts  # type: ignore[return-value]


_WINDOW_KEYS = ("size", "stride", "pad", "lhs_dilate", "rhs_dilate", "rhs_reversal")


def parse_window(raw: str) -> dict[str, tuple]:
    """`{size=3x3 stride=2x2 pad=1_1x1_1}` -> {'size': (3, 3), 'stride': (2, 2), 'pad': ((1, 1), (1, 1))}.

    Example:
      >>> parse_window("{size=2x3 pad=0_1x1_0}")["pad"]
      ((0, 1), (1, 0))
    """
    body = _braced(raw, "a window like `{size=3x3 pad=1_1x1_1}`")
    out: dict[str, tuple] = {}
    for item in body.split():
        key, eq, val = item.partition("=")
        if not eq or key not in _WINDOW_KEYS:
            raise ValueError(f"expected one of {', '.join(k + '=' for k in _WINDOW_KEYS)} in a window, got {item!r}")
        if key in out:
            raise ValueError(f"window sets {key} twice")
        parts = val.split("x")
        try:
            if key == "pad":
                pads = []
                for p in parts:
                    lo_hi = _signed_ints(p, "_")
                    if len(lo_hi) != 2:
                        raise ValueError(f"window pad {p!r}: expects padding_low and padding_high separated by '_'")
                    pads.append(lo_hi)
                out[key] = tuple(pads)
            else:
                out[key] = tuple(int(p) for p in parts)
        except ValueError as e:
            if "padding_low" in str(e):
                raise
            raise ValueError(f"window {key}={val!r}: expected numbers separated by 'x'") from None
    ranks = {len(v) for v in out.values()}
    if len(ranks) > 1:
        raise ValueError(f"window {raw!r}: every field needs one entry per window dimension")
    return out


def _signed_ints(text: str, sep: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.split(r"(?<=\d)" + sep, text))


def parse_padding(raw: str) -> tuple[tuple[int, ...], ...]:
    """`0_0x1_1_0` -> ((0, 0), (1, 1, 0)): low, high and optional interior padding per dimension.

    Example:
      >>> parse_padding("0_-1x2_2_1")
      ((0, -1), (2, 2, 1))
    """
    out = []
    for dim in raw.strip().split("x"):
        try:
            v = _signed_ints(dim, "_")
        except ValueError:
            v = ()
        if len(v) not in (2, 3):
            raise ValueError(f"expected padding like `1_1` or `0_0_1` per dimension, got {dim!r}")
        out.append(v)
    return tuple(out)


_SLICE_DIM = re.compile(r"^\[\s*(-?\d+)\s*:\s*(-?\d+)\s*(?::\s*(-?\d+)\s*)?\]$")


def parse_slice(raw: str) -> tuple[tuple[int, int, int], ...]:
    """`{[0:8:1], [0:4]}` -> ((0, 8, 1), (0, 4, 1)).

    Example:
      >>> parse_slice("{[0:3], [0:4:2]}")
      ((0, 3, 1), (0, 4, 2))
    """
    body = _braced(raw, "slice bounds like `{[0:8:1], [0:4]}`")
    out = []
    for item in split_top(body) if body else []:
        m = _SLICE_DIM.match(item)
        if not m:
            raise ValueError(f"expected a slice bound like `[0:8]` or `[0:8:2]`, got {item!r}")
        out.append((int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)))
    return tuple(out)


def parse_name_list(raw: str) -> tuple[str, ...]:
    """`{%a, %b}` -> ('a', 'b') (control-predecessors).

    Example:
      >>> parse_name_list("{%recv, %send}")
      ('recv', 'send')
    """
    body = _braced(raw, "a list of instruction names like `{%a, %b}`")
    out = []
    for item in split_top(body) if body else []:
        if not _COMP_NAME.match(item):
            raise ValueError(f"expected an instruction name like `%a`, got {item[:40]!r}")
        out.append(item[1:] if item[0] == "%" else item.rstrip(":"))
    return tuple(out)


_API_VERSIONS = ("API_VERSION_ORIGINAL", "API_VERSION_STATUS_RETURNING", "API_VERSION_STATUS_RETURNING_UNIFIED",
                 "API_VERSION_TYPED_FFI")


def parse_api_version(raw: str) -> str:
    """A custom-call `api_version=`, one of XLA's valid CustomCallApiVersion names.

    Example:
      >>> parse_api_version("API_VERSION_TYPED_FFI")
      'API_VERSION_TYPED_FFI'
    """
    if raw not in _API_VERSIONS:
        from analyzer.errors import valid_choices

        raise ValueError(f"unknown api_version {raw!r}; " + valid_choices(raw, _API_VERSIONS, what="api versions"))
    return raw


# XLA's PrecisionConfig::Algorithm (dot) and RandomAlgorithm (rng-bit-generator) values, as its parser reads them
# (case-insensitively, without the `ALG_` / enum prefix).
_ALGORITHMS = (
    "unset", "dot_any_f8_any_f8_f32", "dot_any_f8_any_f8_f32_fast_accum", "dot_f16_f16_f16", "dot_f16_f16_f32",
    "dot_bf16_bf16_bf16", "dot_bf16_bf16_f32", "dot_bf16_bf16_f32_x3", "dot_bf16_bf16_f32_x6", "dot_bf16_bf16_f32_x9",
    "dot_tf32_tf32_f32", "dot_tf32_tf32_f32_x3", "dot_f32_f32_f32", "dot_f64_f64_f64",
    "rng_default", "rng_three_fry", "rng_philox",
)


def parse_algorithm(raw: str) -> str:
    """A dot's or rng-bit-generator's `algorithm=`, lower-cased.

    Example:
      >>> parse_algorithm("DOT_BF16_BF16_F32_X3")
      'dot_bf16_bf16_f32_x3'
    """
    value = raw.lower()
    if value not in _ALGORITHMS:
        from analyzer.errors import valid_choices

        raise ValueError(f"unknown algorithm {raw!r}; " + valid_choices(value, _ALGORITHMS, what="algorithms"))
    return value


def _enum(name: str, values: tuple[str, ...]) -> Callable[[str], str]:
    """A decoder for an attribute whose value is one of `values`, spelled exactly so (XLA's parser is
    case-sensitive for these)."""
    def parse(raw: str) -> str:
        if raw not in values:
            from analyzer.errors import valid_choices

            raise ValueError(f"unknown {name} {raw!r}; " + valid_choices(raw, values, what=f"{name} values"))
        return raw
    parse.__name__ = f"parse_{name}"
    return parse


_SPARSITY_SIDE = re.compile(r"\s*([A-Za-z_][\w.\-]*)=\s*\{([^{}]*)\}\s*")
_SPARSITY_FIELD = re.compile(r"\s*([A-Za-z_][\w.\-]*)=\s*(\S*)\s*")


def parse_sparsity_config(raw: str) -> dict[str, dict[str, Any]]:
    """A convolution's `sparsity_config={lhs={sparsity=2x4 dimension=2 stride=1 idx=3} rhs={...}}` -> {"lhs": {...}}.

    As XLA's parser reads it (measured with jaxlib 0.10.2's and 0.12.0.1's): sides `lhs`/`rhs` and fields separated by
    spaces (no commas), `key=` with no space before `=`; `sparsity=NxM` (digits), `dimension`, `stride` integers
    within int64; `idx` an integer from jaxlib 0.12 on (`XLA_CHANGES["sparsity_idx"]`); a key given again wins.

    Example:
      >>> parse_sparsity_config("{lhs={sparsity=2x4 dimension=2 stride=1}}")
      {'lhs': {'sparsity': (2, 4), 'dimension': 2, 'stride': 1}}
    """
    text = raw.strip()
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError(f"expected `{{lhs={{sparsity=2x4 dimension=1}} rhs={{...}}}}`, got {raw[:60]!r}")
    fields = ("sparsity", "dimension", "stride") + (("idx",) if xla_does("sparsity_idx") else ())
    out: dict[str, dict[str, Any]] = {}
    body, pos = text[1:-1], 0
    while pos < len(body) and not body[pos:].isspace():
        m = _SPARSITY_SIDE.match(body, pos)
        if m is None or m.group(1) not in ("lhs", "rhs"):
            raise ValueError(f"expected `lhs={{...}}` or `rhs={{...}}` separated by spaces, got {body[pos:pos + 40]!r}")
        side: dict[str, Any] = {}
        inner, at = m.group(2), 0
        while at < len(inner) and not inner[at:].isspace():
            f = _SPARSITY_FIELD.match(inner, at)
            if f is None or f.group(1) not in fields:
                raise ValueError(f"expected a field of {', '.join(fields)} like `sparsity=2x4` (separated by spaces), "
                                 f"got {inner[at:at + 40]!r}")
            key, value = f.groups()
            if key == "sparsity":
                nm = re.fullmatch(r"(\d+)x(\d+)", value)
                if nm is None:
                    raise ValueError(f"expected sparsity=N x M like `2x4` (num_non_zero x block_size), got {value!r}")
                side[key] = (int(nm.group(1)), int(nm.group(2)))
            else:
                if re.fullmatch(r"-?\d+", value) is None or not -(1 << 63) <= int(value) < (1 << 63):
                    raise ValueError(f"expected an integer (int64) for {key}, got {value!r}")
                side[key] = int(value)
            at = f.end()
        out.setdefault(m.group(1), {}).update(side)
        pos = m.end()
    return out


_STAT_ITEM = re.compile(r"\s*([A-Za-z_][\w.\-]*)\s*=\s*(-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*")


def parse_statistics(raw: str) -> dict[str, float]:
    """`statistics={visualizing_index=1,stat-1=33,stat-2=44}` -> {'visualizing_index': 1.0, ...}.

    Example:
      >>> parse_statistics("{visualizing_index=1,stat-1=33.5}")
      {'visualizing_index': 1.0, 'stat-1': 33.5}
    """
    body = _braced(raw, "statistics like `{visualizing_index=1,stat-1=33}`")
    out: dict[str, float] = {}
    for item in body.split(",") if body.strip() else []:
        m = _STAT_ITEM.fullmatch(item)
        if m is None:
            raise ValueError(f"expected `name=number` in statistics, got {item.strip()[:40]!r}")
        out[m.group(1)] = float(m.group(2))
    return out


def parse_shape_list(raw: str) -> tuple:
    """`{f32[2]{0}, (s32[], f32[3]{0})}` -> shapes (custom-call `operand_layout_constraints`).

    Example:
      >>> [str(s) for s in parse_shape_list("{f32[2]{0}, s32[]}")]
      ['f32[2]', 's32[]']
    """
    body = _braced(raw, "a list of shapes like `{f32[2]{0}, s32[]}`")
    return tuple(decode_shape(x) for x in split_top(body)) if body else ()


# key -> decoder. Each decoder takes the raw text and returns the typed value or raises ValueError with a
# message in HLO terms. Keys absent here stay raw text.
# Device groups are decoded from the same few texts over and over (every collective of a layer repeats
# them, and rules query them per instruction); their decoders are pure and return tuples, so they are memoised
# for the call that reads the module (`analyzer.hlo.memo`).
DECODERS: Mapping[str, Callable[[str], Any]] = {
    "replica_groups": memoised(parse_replica_groups),
    "source_target_pairs": memoised(parse_source_target_pairs),
    "dimensions": parse_int_list,
    "channel_id": _parse_int,
    "index": _parse_int,
    "use_global_device_ids": _parse_bool,
    "constrain_layout": _parse_bool,
    "is_host_transfer": _parse_bool,
    "metadata": parse_metadata,
    "frontend_attributes": parse_frontend_attributes,
    "lhs_contracting_dims": parse_int_list,
    "rhs_contracting_dims": parse_int_list,
    "lhs_batch_dims": parse_int_list,
    "rhs_batch_dims": parse_int_list,
    "slice_sizes": parse_int_list_or_lists,
    "dynamic_slice_sizes": parse_int_list,
    "offset_dims": parse_int_list,
    "collapsed_slice_dims": parse_int_list,
    "start_index_map": parse_int_list,
    "update_window_dims": parse_int_list,
    "inserted_window_dims": parse_int_list,
    "scatter_dims_to_operand_dims": parse_int_list,
    "split_dimension": _parse_int,
    "concat_dimension": _parse_int,
    "iota_dimension": _parse_int,
    "backend_config": _parse_backend_config,
    "dim_labels": parse_dim_labels,
    "convolution_kind": _enum("convolution kind", ("fprop", "dgrad", "wgrad")),
    "sparsity_config": parse_sparsity_config,
    "window": parse_window,
    "padding": parse_padding,
    "slice": parse_slice,
    "control-predecessors": parse_name_list,
    "api_version": parse_api_version,
    "algorithm": parse_algorithm,
    "type": _enum("comparison type", ("FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED")),
    "transpose_a": _enum("transpose_a", ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT")),
    "statistics": parse_statistics,
    **{k: _parse_bool for k in ("is_associative", "is_reverse", "indices_are_sorted", "unique_indices", "is_stable",
                                "largest", "lower", "left_side", "unit_diagonal", "is_composite",
                                "custom_call_has_side_effect")},
    "operand_layout_constraints": parse_shape_list,
    "parameter_replication": parse_bool_list,
    "result_accuracy": parse_result_accuracy,
    "sharding": _parse_sharding,
    "literal": parse_literal_attribute,
    "output_to_operand_aliasing": parse_output_to_operand_aliasing,
    "origin": parse_origin,
    "outfeed_shape": parse_outfeed_shape,
    "domain": parse_domain,
    **{k: parse_computation_list for k in CALL_KEYS},
}

# Decoders a full parse runs to reject malformed values (the backend config is free-form: checked on access).
_VALIDATED = frozenset(DECODERS) - {"backend_config"}
# Where XLA's parser takes less than the analysis needs (the rest is its HLO verifier's, which its
# `hlo_module_from_text` does not run), a parse checks only what XLA's parser checks; the decoder still
# reports the rest, with the attribute's position, when the analysis reads the value.
_PARSE_CHECKS: Mapping[str, Callable[[str], Any]] = {
    "replica_groups": check_replica_groups,
    "sharding": _check_sharding,
}


# Cheap whole-value checks that accept exactly what the decoder accepts for the common spellings; when one
# does not match, the decoder runs and either accepts the value or says what is wrong with it.
_QUICK = {
    # (a bare value here is an integer; any other goes to the decoder, which checks the integer fields)
    # (ASCII classes: a parse has rejected any other character outside a quoted string, and `\w` over ASCII is a
    # table lookup, not a Unicode category test per character)
    "metadata": re.compile(r'\{(?:\s*[A-Za-z_][\w.\-]*\s*=\s*(?:"[^"\\]*(?:\\.[^"\\]*)*"|\{[^{}]*\}|-?\d+(?=[\s,}]))\s*,?)*\s*\}',
                           re.A),
    "dimensions": re.compile(r"\{(?:-?\d+(?:,-?\d+)*)?\}", re.A),
    "origin": re.compile(r'\{\{"[^"\\]*"(?: \{\d+(?:,\d+)*\})?\}\}', re.A),  # `{{"name"}}`, `{{"name" {1}}}`
    "channel_id": re.compile(r"-?\d+", re.A),
    "index": re.compile(r"-?\d+", re.A),
    **{k: re.compile(r"%?[A-Za-z_][\w.\-]*", re.A) for k in ("to_apply", "calls", "body", "condition", "select",
                                                             "scatter", "true_computation", "false_computation")},
}


def valid_values() -> dict[str, set[str]]:
    """The attribute values this call already found valid, by key (the keys `validate` checks). Values repeat (a
    third or less of a dump's attribute text is unique, and the parser keeps one string per distinct value), so each
    distinct value is checked once a call (`analyzer.hlo.memo.state`: dropped when the call returns)."""
    return memo_state(_valid_sets)


def _valid_sets() -> dict[str, set[str]]:
    return {k: set() for k in _VALIDATED}


def known_valid(key: str, raw: str) -> bool:
    """Whether `key=raw` was already found valid (see `validate`)."""
    seen = valid_values().get(key)
    return seen is not None and raw in seen


def validate(inst: Instruction) -> None:
    """Decode every known attribute of `inst` once; raise ValueError (with `.attribute`) on a bad one."""
    valid = valid_values()
    for key in inst.attribute_keys:
        if key in _VALIDATED:
            raw = inst.attr(key)
            seen = valid[key]
            if raw in seen:
                continue
            quick = _QUICK.get(key)
            if quick is not None and quick.fullmatch(raw):
                seen.add(raw)
                continue
            try:
                (_PARSE_CHECKS.get(key) or DECODERS[key])(raw)
                seen.add(raw)
            except ValueError as e:
                e.attribute = inst.attribute(key)  # type: ignore[attr-defined]
                raise
            except AnalyzerError as e:  # the sharding parser's own errors (analyzer.hlo.sharding)
                err = ValueError(getattr(e, "message", str(e)))
                err.attribute = inst.attribute(key)  # type: ignore[attr-defined]
                raise err from None


def _decode(inst: Instruction, key: str, a: Any = None, decoder: Callable[[str], Any] | None = None) -> Any:
    if a is None:
        a = inst.attribute(key)
        if a is None:
            return None
    try:
        return (decoder or DECODERS[key])(a.raw)
    except (ValueError, AnalyzerError) as e:  # AnalyzerError: the sharding parser's own (analyzer.hlo.sharding)
        from analyzer.errors import HloSyntaxError

        pos = a.position
        raise HloSyntaxError(f"attribute {key} of {inst.name!r}: {getattr(e, 'message', e)}",
                             line=pos.line if pos else None, column=pos.column if pos else None) from None


def replica_groups(inst: Instruction) -> tuple[tuple[int, ...], ...] | None:
    """The explicit device-id groups of `inst`, or None without `replica_groups`. `{}` gives `()`."""
    return _decode(inst, "replica_groups")


def expand_replica_groups(inst: Instruction, module: HloModule) -> tuple[tuple[int, ...], ...] | None:
    """Like `replica_groups`, but `{}` becomes one group of every participant of the module.

    Participants follow XLA's collective-op group modes: with `use_global_device_ids=true` the ids are
    global device ids (replica_count * num_partitions); with a `channel_id` they are partitions; otherwise
    replicas.
    """
    groups = replica_groups(inst)
    if groups is None or groups:
        return groups
    if inst.use_global_device_ids:
        n = module.replica_count * module.num_partitions
    elif inst.attr("channel_id") is not None:
        n = module.num_partitions
    else:
        n = module.replica_count
    return (tuple(range(n)),)


def source_target_pairs(inst: Instruction) -> tuple[tuple[int, int], ...] | None:
    return _decode(inst, "source_target_pairs")


def int_list(inst: Instruction, key: str) -> tuple[int, ...] | None:
    """The integer list attribute `key` (`dimensions={0,1}` -> (0, 1)), or None when absent."""
    a = inst.attribute(key)
    if a is None:
        return None
    try:
        return parse_int_list(a.raw)
    except ValueError as e:
        from analyzer.errors import HloSyntaxError

        pos = a.position
        raise HloSyntaxError(f"attribute {key} of {inst.name!r}: {e}", line=pos.line if pos else None,
                             column=pos.column if pos else None) from None


def names_callee(inst: Instruction) -> bool:
    """Whether `inst` has an attribute that names called computations (one of `CALL_KEYS`)."""
    return not _CALL_KEY_SET.isdisjoint(inst.attribute_keys)


def called_computations(inst: Instruction) -> tuple[str, ...]:
    """Every computation `inst` calls, in attribute order (to_apply, calls, body, condition, branches...)."""
    keys = inst.attribute_keys
    if _CALL_KEY_SET.isdisjoint(keys):  # (most instructions call nothing)
        return ()
    calling = [key for key in keys if key in _CALL_KEY_SET]
    out: list[str] = []
    for key in calling if len(calling) == 1 else [key for key in CALL_KEYS if key in calling]:
        raw = inst.attr(key)
        if _ONE_NAME.fullmatch(raw):  # the common `to_apply=%add`: no decoder needed
            out.append(raw[1:] if raw[0] == "%" else raw)
        else:
            out.extend(_decode(inst, key))
    return tuple(out)


# The analysis reads an instruction's metadata many times (op names, source lines, remat and repeat checks)
# and many instructions share one metadata text: decoded once per text in a call (`analyzer.hlo.memo`). Not in
# DECODERS, so a parse's own checks do not read it. The Metadata is shared: callers must not change its `extra`.
_metadata_memo = memoised(parse_metadata)


def metadata(inst: Instruction) -> Metadata | None:
    return _decode(inst, "metadata", decoder=_metadata_memo)


def frontend_attributes(inst: Instruction) -> Mapping[str, str]:
    return _decode(inst, "frontend_attributes") or {}


def sharding(inst: Instruction) -> Any:
    return _decode(inst, "sharding")
