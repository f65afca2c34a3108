"""A diff of two analyses (analyzer/workflows/diff.py) as text and as JSON.

    step: 1 added, 1 changed, 6 unchanged; comm 1.20 ms -> 1.45 ms per step (+250 µs, +20.8%)
      + all-gather     AllGather_data: [D_data, F] -> [D, F]        4.00 MiB x24            +120 µs  model.py:42
      ~ all-reduce     AllReduce_model: [B, D]{U_model} -> [B, D]   2.00 -> 4.00 MiB x24     +80 µs  model.py:57
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from analyzer.render._escape import printable
from analyzer.units import format_bytes, format_seconds

if TYPE_CHECKING:
    from analyzer.workflows.diff import Change, Diff, Threshold

__all__ = ["DIFF_SCHEMA_VERSION", "render_text", "to_dict", "render_json"]

DIFF_SCHEMA_VERSION = "1"
_MARK = {"added": "+", "removed": "-", "changed": "~"}


def _signed(seconds: float) -> str:
    return ("+" if seconds > 0 else "") + format_seconds(seconds) if seconds else "±0 s"


def _percent(old: float, new: float) -> str:
    if old <= 0:
        return "new" if new > 0 else "±0%"
    return f"{(new - old) / old * 100:+.1f}%"


def _size(c: Change) -> str:
    o, n = c.old, c.new
    if o is not None and n is not None:
        b = format_bytes(n.get("bytes")) if o.get("bytes") == n.get("bytes") else \
            f"{format_bytes(o.get('bytes'))} -> {format_bytes(n.get('bytes'))}"
        k = f"x{n.get('count')}" if o.get("count") == n.get("count") else f"x{o.get('count')} -> x{n.get('count')}"
        return f"{b} {k}"
    row = c.row
    return f"{format_bytes(row.get('bytes'))} x{row.get('count')}"


def _notation(c: Change) -> str:
    o, n = c.old, c.new
    if o is not None and n is not None and o.get("notation") != n.get("notation"):
        return f"{o.get('notation')}  =>  {n.get('notation')}"
    return str(c.row.get("notation") or c.row.get("kind"))


def render_text(diff: Diff, *, threshold: Threshold | None = None) -> str:
    """The diff for people: per program, a summary line then one line per added/removed/changed collective.
    Control characters of names, notations and source paths are shown as escapes (`printable`).

    Args:
      diff: the `Diff`.
      threshold: the regression limit, to say whether each program is over it.
    """
    out = [f"--- {diff.old_label}", f"+++ {diff.new_label}"]
    for p in diff.programs:
        counts = ", ".join(f"{p.count(s)} {s}" for s in ("added", "removed", "changed") if p.count(s))
        line = (f"{p.name}: {counts or 'no change'}, {p.unchanged} unchanged; comm "
                f"{format_seconds(p.old_seconds)} -> {format_seconds(p.new_seconds)} per step "
                f"({_signed(p.delta_seconds)}, {_percent(p.old_seconds, p.new_seconds)})")
        if threshold is not None and threshold.exceeded(p.old_seconds, p.new_seconds):
            line += f"  REGRESSION over {threshold}"
        out.append(line)
        for c in p.changes:
            source = c.row.get("source") or ""
            out.append(f"  {_MARK[c.status]} {c.row.get('kind', ''):<18} {_notation(c)}   {_size(c)}   "
                       f"{_signed(c.delta_seconds)}/step" + (f"   {source}" if source else ""))
            if c.why:
                out.append(f"      changed in the plan: {c.why}")
    for name in diff.only_old:
        out.append(f"{name}: only in {diff.old_label}")
    for name in diff.only_new:
        out.append(f"{name}: only in {diff.new_label}")
    return printable("\n".join(out)) + "\n"


def _change(c: Change) -> dict[str, Any]:
    from analyzer.analysis.serialize import to_jsonable

    out = {"status": c.status, "old": to_jsonable(c.old), "new": to_jsonable(c.new),
           "delta_seconds": to_jsonable(c.delta_seconds)}
    if c.why:
        out["why"] = c.why
    return out


def to_dict(diff: Diff, *, threshold: Threshold | None = None) -> dict[str, Any]:
    """The diff as JSON data following `docs/diff-output-schema.json`: `{"schema_version", "old", "new",
    "threshold", "programs": [...], "only_old", "only_new"}`; each program has its per-step seconds on both
    sides and its changes (old/new rows)."""
    from analyzer.analysis.serialize import to_jsonable

    programs = []
    for p in diff.programs:
        programs.append({
            "name": p.name,
            "old_seconds": to_jsonable(p.old_seconds),
            "new_seconds": to_jsonable(p.new_seconds),
            "delta_seconds": to_jsonable(p.delta_seconds),
            "added": p.count("added"), "removed": p.count("removed"), "changed": p.count("changed"),
            "unchanged": p.unchanged,
            "over_threshold": bool(threshold and threshold.exceeded(p.old_seconds, p.new_seconds)),
            "changes": [_change(c) for c in p.changes],
        })
    return {
        "schema_version": DIFF_SCHEMA_VERSION,
        "old": diff.old_label,
        "new": diff.new_label,
        "threshold": None if threshold is None else {"value": threshold.value, "relative": threshold.relative},
        "programs": programs,
        "only_old": list(diff.only_old),
        "only_new": list(diff.only_new),
    }


def render_json(diff: Diff, *, threshold: Threshold | None = None) -> str:
    """`to_dict` as strict JSON text."""
    return json.dumps(to_dict(diff, threshold=threshold), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
