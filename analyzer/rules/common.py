"""Small helpers the rule modules share: formatting figures, locating dots, reading notation."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from analyzer.diagnostics import Location
from analyzer.hlo.ir import Computation, HloModule, Instruction
# The rule messages print figures the way every renderer does (analyzer.units), under their short names.
from analyzer.units import format_bytes as fmt_b
from analyzer.units import format_seconds as fmt_s

__all__ = ["fmt_s", "fmt_b", "dot_location", "partition_spec", "sides", "axes_text", "is_explicit_collective"]

# jax primitives a user writes inside shard_map: the collective is theirs, not a sharding mismatch.
_EXPLICIT = ("psum", "pmean", "pmax", "pmin", "all_gather", "all_to_all", "ppermute", "psum_scatter",
             "reduce_scatter", "pbroadcast", "ragged_all_to_all", "pshuffle", "pswapaxes")


def axes_text(axes: Sequence[str]) -> str:
    return ",".join(axes) if axes else "(no axis)"


def is_explicit_collective(op_name: str) -> bool:
    """Whether the jax op that made a collective is an explicit collective primitive (psum, all_to_all...)."""
    last = op_name.rsplit("/", 1)[-1]
    return any(last == p or last.startswith(p + "[") or last.startswith(p + ".") for p in _EXPLICIT)


def dot_location(report: Any, module: HloModule | None, comp: Computation | None, dot: Instruction,
                 fallback: Location, cache: dict[Any, Any] | None = None) -> tuple[Location, str]:
    """The user `file:line` of a dot and its notation, from the report's dots table (or the fallback).

    Args:
      cache: a dict kept by the caller across calls on one report (`Facts.dot_rows`): the dots table is then
        indexed by instruction name once, not filtered once per call (hundreds of calls on an unrolled step).
    """
    dots = getattr(report, "dots", None)
    notation = ""
    if dots is not None and len(dots) and "instruction" in dots:
        index = _dot_index(dots, cache)
        rows = index.get(dot.name, [])
        if comp is not None and "computation" in dots and len(rows) > 1:
            rows = [r for r in rows if r[0] == comp.name]
        if rows:
            _, notation, source = rows[0]
            file, _, line = source.rpartition(":")
            if file and line.isdigit():
                return Location(file=file, line=int(line), computation=comp.name if comp else None,
                                instruction=dot.name, hlo_line=dot.position.line if dot.position else None), notation
    return Location(file=fallback.file, line=fallback.line, computation=comp.name if comp else None,
                    instruction=dot.name, hlo_line=dot.position.line if dot.position else None), notation


def _dot_index(dots: Any, cache: dict[Any, Any] | None) -> dict[str, list[tuple[Any, str, str]]]:
    """The dots table by instruction name: `(computation, notation, source)` of each row, in table order."""
    key = ("dot_index", id(dots))
    if cache is not None and key in cache:
        return cache[key][1]
    n = len(dots)
    comps = dots["computation"].tolist() if "computation" in dots else [None] * n
    notations = dots["notation"].tolist() if "notation" in dots else [""] * n
    sources = dots["source"].tolist() if "source" in dots else [""] * n
    index: dict[str, list[tuple[Any, str, str]]] = {}
    for name, c, nt, src in zip(dots["instruction"].tolist(), comps, notations, sources):
        index.setdefault(name, []).append((c, str(nt or ""), str(src or "")))
    if cache is not None:
        cache[key] = (dots, index)  # holds the frame so its id stays its own while the entry lives
    return index


_DIM = re.compile(r"([A-Za-z][A-Za-z0-9]*)(?:_\{?([^,\]\}]+)\}?)?")


def sides(notation: str) -> tuple[str, str]:
    """The array before and after a collective in notation: `'[I_X, J]'`, `'[I, J_X]'` ('' when absent)."""
    arrays = re.findall(r"\[[^\[\]]*\](?:\{[^}]*\})?", notation)
    if len(arrays) >= 2:
        return arrays[0], arrays[-1]
    if arrays:
        return arrays[0], ""
    return "", ""


def partition_spec(array: str, mesh_axes: Sequence[str]) -> str:
    """`[I, J_XY]` -> `P(None, ('X', 'Y'))`, with the subscript split into the mesh's own axis names.

    Returns '' when the text is not an array in notation.
    """
    m = re.match(r"\s*\[([^\]]*)\]", array or "")
    if not m:
        return ""
    parts = []
    for dim in (d.strip() for d in m.group(1).split(",") if d.strip()):
        _, _, sub = dim.partition("_")
        sub = sub.strip("{}")
        axes = _split_axes(sub, mesh_axes) if sub else []
        if not axes:
            parts.append("None")
        elif len(axes) == 1:
            parts.append(repr(axes[0]))
        else:
            parts.append("(" + ", ".join(repr(a) for a in axes) + ")")
    while parts and parts[-1] == "None":
        parts.pop()
    return "P(" + ", ".join(parts) + ")"


def _split_axes(sub: str, mesh_axes: Sequence[str]) -> list[str]:
    """Split a subscript (`XY`, `data,model`, `data model`) into mesh axis names."""
    if any(sep in sub for sep in (",", " ")):
        return [a for a in re.split(r"[,\s]+", sub) if a]
    names = sorted(mesh_axes, key=len, reverse=True)
    out: list[str] = []
    rest = sub
    while rest:
        hit = next((n for n in names if rest.startswith(n)), None)
        if hit is None:
            return [sub]
        out.append(hit)
        rest = rest[len(hit):]
    return out
