"""What every human-facing renderer shows, computed once: sorted rows, headline figures, grouped findings.

Renderers (terminal, Markdown, HTML) differ only in markup; the selection and order of what they show
comes from here, so the three formats never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from analyzer.diagnostics import short_source  # re-exported for the renderers
from analyzer.units import format_bytes, format_count, format_ratio, format_seconds

if TYPE_CHECKING:
    from analyzer.diagnostics import Diagnostic
    from analyzer.analysis.report import Report
    from analyzer.workflows.whatif import WhatIf

__all__ = ["StepPart", "step_breakdown", "step_rows", "what_to_do", "top_cause", "where", "whatif_rows", "short_source", "dot_label", "CollectiveRow", "collective_rows", "collective_groups", "named", "common_name", "headline", "sorted_diagnostics", "axes_label", "plan_lines",
           "total_saving", "memory_lines"]


@dataclass(frozen=True)
class CollectiveRow:
    """One collective (or one group of identical ones) as the reports print it (already formatted).

    `label` is the notation with the array it moves named (`AllGather_data: params['w'][I_data, J] -> [I, J]`);
    `sites` how many collectives of the program the row stands for (`collective_groups`), `members` those rows.
    """

    kind: str
    axes: str
    notation: str
    dtype: str
    bytes: str
    count: str
    seconds: str
    total_seconds: str
    share: str
    regime: str
    source: str
    op_name: str
    pass_: str
    overlapped: bool
    total_value: float
    label: str = ""
    array: str = ""
    context: str = ""
    sites: int = 1
    members: tuple[CollectiveRow, ...] = ()


def named(notation: str, array: str) -> str:
    """The notation with the array it moves named before its first shape.

    Example:
      >>> named("AllGather_data: [I_data, J_model] -> [I, J_model]", "w_in")
      'AllGather_data: w_in[I_data, J_model] -> [I, J_model]'
    """
    if not array or ": [" not in notation:
        return notation
    head, _, rest = notation.partition(": [")
    return f"{head}: {array}[{rest}"


def common_name(names: Sequence[str]) -> str:
    """One name for several arrays: the name they share, with `*` where they differ; "" when they share none.

    Example:
      >>> common_name(["params['layers_0']['w']", "params['layers_11']['w']"])
      "params['layers_*']['w']"
    """
    import os

    names = [n for n in names if n]
    if not names:
        return ""
    if all(n == names[0] for n in names):
        return names[0]
    head = os.path.commonprefix(names)
    tail = os.path.commonprefix([n[len(head):][::-1] for n in names])[::-1]
    return f"{head}*{tail}" if head or tail else ""


def where(d: Diagnostic) -> str:
    """A finding's place as the reports print it: the user's line, then the library frame it called into.

    Example:
      >>> from analyzer.diagnostics import Diagnostic, Location
      >>> where(Diagnostic("HA302", "n", "m", location=Location("train.py", 41, context="in flax's linear.py:263")))
      "train.py:41 (in flax's linear.py:263)"
    """
    loc = d.location
    text = short_source(str(loc))
    context = getattr(loc, "context", None)
    return f"{text} ({context})" if context else text


def verified_text(d: Diagnostic) -> str | None:
    """What `--verify-fixes` found for a finding (analyzer.workflows.verify), in one line; None when it did not run.

    Example:
      >>> from analyzer.diagnostics import Diagnostic
      >>> verified_text(Diagnostic("HA104", "n", "m", saving_seconds=7e-5, details={
      ...     "verified_change": "batch['x'] -> P('data')", "verified_step_before_seconds": 2.5e-4,
      ...     "verified_step_seconds": 7e-5, "verified_saving_seconds": 1.8e-4}))
      "verified: saved 180 µs of the promised 70.0 µs (recompiled with batch['x'] -> P('data'): predicted step 250 µs -> 70.0 µs)"
    """
    details = d.details or {}
    if "verified_saving_seconds" in details:
        saved = float(details["verified_saving_seconds"])
        promised = f" of the promised {format_seconds(d.saving_seconds)}" if d.saving_seconds else ""
        head = (f"saved {format_seconds(saved)}{promised}" if saved >= 0 else
                f"the step grows by {format_seconds(-saved)}" + (f", against a promised saving of "
                                                                 f"{format_seconds(d.saving_seconds)}"
                                                                 if d.saving_seconds else ""))
        n = int(details.get("verified_findings") or 1)
        return (f"verified: {head} (recompiled with {details.get('verified_change', 'the change')}: predicted step "
                f"{format_seconds(float(details.get('verified_step_before_seconds', 0.0)))} -> "
                f"{format_seconds(float(details['verified_step_seconds']))}"
                + (f"; one change for {n} findings, each promising its own part" if n > 1 else "") + ")"
                + _after_text(details))
    if "unverified_reason" in details:
        return f"not verified: {details['unverified_reason']}"
    return None


def _after_text(details: Any) -> str:
    """`; after the top fix (batch['x'] -> P('data')) too: saved 20.3 µs`: a smaller root cause's change verified on
    top of the largest one's (analyzer.workflows.verify), else ""."""
    if "verified_after_saving_seconds" not in details:
        return ""
    after = float(details["verified_after_saving_seconds"])
    said = f"saved {format_seconds(after)}" if after >= 0 else f"the step grows by {format_seconds(-after)}"
    return f"; after the top fix ({details.get('verified_after_change', '')}) too: {said}"


def dot_label(record: dict) -> str:
    """How a matmul is named in a report: its notation, else the einsum of its op_name and its local shapes."""
    notation = str(record.get("notation") or "")
    if notation:
        return notation
    op_name = str(record.get("op_name") or "")
    einsum = next((part for part in reversed(op_name.split("/")) if "->" in part), "")
    shapes = " x ".join(str(record.get(k)) for k in ("lhs_shape", "rhs_shape") if record.get(k))
    return " ".join(x for x in (einsum, shapes) if x) or str(record.get("instruction") or "dot")


def axes_label(axes: Any) -> str:
    """Mesh axes as the reports print them: `data,model`, or `—` when none are known.

    Example:
      >>> axes_label(("data", "model"))
      'data,model'
    """
    if axes is None:
        return "—"
    if isinstance(axes, str):
        return axes or "—"
    try:
        items = [str(a) for a in axes]
    except TypeError:
        return str(axes)
    return ",".join(items) or "—"


def _value(row: dict, key: str, default: Any = None) -> Any:
    v = row.get(key, default)
    try:
        import pandas as pd

        if not isinstance(v, (tuple, list)) and pd.isna(v):
            return default
    except (TypeError, ValueError):
        pass
    return v


def collective_rows(report: Report) -> list[CollectiveRow]:
    """The collectives, costliest per step first, formatted for display.

    Returns:
      One `CollectiveRow` per row of `report.collectives`, sorted by `total_seconds` descending.
    """
    return [row for row, _ in _rows(report)]


def _rows(report: Report) -> list[tuple[CollectiveRow, dict]]:
    frame = report.collectives
    if frame is None or len(frame) == 0:
        return []
    comm = float(report.totals.comm_seconds) or 0.0
    records = frame.to_dict(orient="records")
    for r in records:
        total = _value(r, "total_seconds")
        if total is None:
            seconds, count = _value(r, "seconds"), _value(r, "count", 1)
            total = float(seconds) * float(count) if seconds is not None else 0.0
        r["_total"] = float(total)
    records.sort(key=lambda r: -r["_total"])
    rows = []
    for r in records:
        share = f"{100 * r['_total'] / comm:.0f}%" if comm > 0 else "—"
        notation = str(_value(r, "notation", "") or "")
        array = str(_value(r, "array", "") or "")
        rows.append((CollectiveRow(
            kind=str(_value(r, "kind", "")),
            axes=axes_label(_value(r, "axes")),
            notation=notation,
            dtype=str(_value(r, "dtype", "") or ""),
            bytes=format_bytes(_value(r, "bytes")),
            count=format_count(_value(r, "count")),
            seconds=format_seconds(_value(r, "seconds")),
            total_seconds=format_seconds(r["_total"]),
            share=share,
            regime=str(_value(r, "regime", "") or ""),
            source=short_source(str(_value(r, "source", "") or "")),
            op_name=str(_value(r, "op_name", "") or ""),
            pass_=str(_value(r, "pass_", "") or ""),
            overlapped=bool(_value(r, "overlapped", False)),
            total_value=r["_total"],
            label=named(notation, array),
            array=array,
            context=str(_value(r, "context", "") or ""),
        ), r))
    return rows


def collective_groups(report: Report) -> list[CollectiveRow]:
    """The collectives grouped by (notation, user line): one row per group, costliest per step first.

    A 12-layer model repeats each layer's collectives at the same line; the group row carries their number
    (`sites`), the executions and seconds per step summed, the share of the step's communication, and the
    member rows themselves (`members`, costliest first) for the reports that unfold them. Figures that
    differ between members (bytes, time of one execution) are shown as the largest, with `≤`.

    Example:
      >>> [(g.sites, g.count) for g in collective_groups(report)]        # doctest: +SKIP
      [(12, '24'), (1, '1')]
    """
    comm = float(report.totals.comm_seconds) or 0.0
    groups: dict[tuple[str, str], list[tuple[CollectiveRow, dict]]] = {}
    for row, rec in _rows(report):
        key = (row.notation or row.kind, str(_value(rec, "source", "") or "") or row.op_name)
        groups.setdefault(key, []).append((row, rec))
    out = []
    for members in groups.values():
        first, _ = members[0]
        if len(members) == 1:
            out.append(first)
            continue
        recs = [rec for _, rec in members]
        total = sum(rec["_total"] for rec in recs)
        count = sum(float(_value(rec, "count", 1) or 0) for rec in recs)

        def most(key: str, fmt: Any, recs: list[dict] = recs) -> str:
            values = [_value(rec, key) for rec in recs]
            if any(v is None for v in values):
                return fmt(values[0])
            top = max(values)
            return fmt(top) if all(v == top for v in values) else f"≤ {fmt(top)}"

        array = common_name([m.array for m, _ in members])
        out.append(replace(
            first, bytes=most("bytes", format_bytes), seconds=most("seconds", format_seconds),
            count=format_count(int(count) if float(count).is_integer() else count),
            total_seconds=format_seconds(total), total_value=total,
            share=f"{100 * total / comm:.0f}%" if comm > 0 else "—",
            regime="/".join(sorted({m.regime for m, _ in members if m.regime})),
            overlapped=all(m.overlapped for m, _ in members), array=array, label=named(first.notation, array),
            sites=len(members), members=tuple(m for m, _ in members)))
    out.sort(key=lambda g: -g.total_value)
    return out


def headline(report: Report) -> list[tuple[str, str]]:
    """The figures a reader wants first, as (label, value) pairs."""
    t = report.totals
    n = 0 if report.collectives is None else len(report.collectives)
    pairs = []
    if t.step_seconds > 0:
        # The predicted step (analyzer.analysis.step): compute back to back plus the time it waits for links.
        step, mfu = format_seconds(t.step_seconds), mfu_text(t.mfu)
        if t.step_high > 0:  # the calibration runs' range (analyzer.analysis.calibration; step_sentence says so)
            step += f" ({format_seconds(t.step_low)} to {format_seconds(t.step_high)})"
            mfu += f" ({mfu_text(t.mfu_low)} to {mfu_text(t.mfu_high)})"
        pairs += [
            ("Predicted step", step),
            ("Exposed communication / step", format_seconds(t.exposed_comm_seconds)),
            ("MFU (predicted)", mfu),
        ]
        if t.mfu > 0 and t.hfu > 1.01 * t.mfu:
            # chips repeating work (a replicated batch, remat): the hardware's FLOPs over the model's
            pairs.append(("HFU (repeated work)", f"{mfu_text(t.hfu)}: the chips run {t.hfu / t.mfu:.2f}x "
                                                 "the model's FLOPs"))
    pairs += [
        ("Communication / step", format_seconds(t.comm_seconds)),
        ("Compute / step", format_seconds(t.compute_seconds)),
        ("Comm / compute", format_ratio(t.comm_compute_ratio)),
        ("Bytes moved / step", format_bytes(t.comm_bytes)),
        ("Collectives (call sites)", str(n)),
    ]
    top = top_cause(report)
    if top is not None:
        # The root cause to fix first (analyzer.rules.rootcause): its findings' savings summed, each collective
        # once; budget overages are not savings and never count.
        pairs.append(("Top fix saves / step", format_seconds(top.saving_seconds)))
    return pairs


def step_sentence(report: Report) -> str | None:
    """How the predicted step relates to compute and communication, in one sentence; None without a step.

    Every figure is a field of `report.totals` (see docs/step.md for the overlap rules).
    """
    t = report.totals
    if t.step_seconds <= 0:
        return None
    hidden = max(0.0, t.comm_seconds - t.exposed_comm_seconds)
    return (f"Predicted step {format_seconds(t.step_seconds)} = compute {format_seconds(t.compute_seconds)} + "
            f"{format_seconds(t.exposed_comm_seconds)} waiting for communication; of the "
            f"{format_seconds(t.comm_seconds)} the collectives take, {format_seconds(hidden)} runs behind compute "
            f"or on another link at the same time (docs/step.md)."
            + (f" The range {format_seconds(t.step_low)} to {format_seconds(t.step_high)}: {t.range_basis}."
               if t.step_high > 0 and t.range_basis else ""))


@dataclass(frozen=True)
class StepPart:
    """One part of the predicted step (or of the communication hidden behind it).

    Attributes:
      label: what the reader sees, e.g. `compute, bound by HBM bandwidth`, `communication exposed over data`.
      seconds: per step.
      part: "flops" (compute bound by FLOPs), "memory" (compute bound by HBM bandwidth), "exposed"
        (communication the compute stream waits for) or "hidden" (communication that runs behind compute or
        on another link meanwhile: not part of the step).
      axis: the mesh axis set of a communication part, else "".
    """

    label: str
    seconds: float
    part: str
    axis: str = ""

    @property
    def on_step(self) -> bool:
        return self.part != "hidden"


def step_breakdown(report: Report) -> list[StepPart]:
    """The predicted step split into parts that add up to `Totals.step_seconds`, then the hidden
    communication per axis; empty without a step prediction.

    The parts on the step: compute bound by FLOPs (`compute_seconds - memory_bound_seconds`), compute bound by
    HBM bandwidth (`memory_bound_seconds`), and the exposed communication of each axis set
    (`exposed_by_axis`). Since `exposed_comm_seconds = step_seconds - compute_seconds`, they add up to the
    step; any exposed time the model could not charge to an axis is its own part. Hidden per axis:
    `by_axis - exposed_by_axis`.

    Example:
        >>> parts = step_breakdown(report)
        >>> abs(sum(p.seconds for p in parts if p.on_step) - report.totals.step_seconds) < 1e-12
        True
    """
    t = report.totals
    if t.step_seconds <= 0:
        return []
    memory = max(0.0, min(t.memory_bound_seconds, t.compute_seconds))
    parts = [StepPart("compute, bound by FLOPs (matmuls)", t.compute_seconds - memory, "flops"),
             StepPart("compute, bound by HBM bandwidth", memory, "memory")]
    exposed = {k: float(v) for k, v in t.exposed_by_axis.items() if v > 0}
    for axis, seconds in sorted(exposed.items(), key=lambda kv: -kv[1]):
        parts.append(StepPart(f"communication exposed over {axis or '—'}", seconds, "exposed", axis))
    rest = t.step_seconds - t.compute_seconds - sum(exposed.values())
    if abs(rest) > 1e-6 * t.step_seconds:  # float noise is no part
        parts.append(StepPart("communication exposed, not charged to an axis", rest, "exposed"))
    hidden = {k: float(v) - exposed.get(k, 0.0) for k, v in t.by_axis.items()}
    for axis, seconds in sorted(hidden.items(), key=lambda kv: -kv[1]):
        if seconds > 1e-6 * t.step_seconds:
            parts.append(StepPart(f"communication hidden over {axis or '—'}", seconds, "hidden", axis))
    return parts


def step_rows(report: Report, parts: Sequence[StepPart] | None = None) -> list[tuple[str, str, str]]:
    """The step breakdown as (part, per step, share of the step) text rows for the tables of every renderer:
    the parts on the step, a `predicted step` total, then the hidden communication (share `—`). `parts`: the
    report's `step_breakdown` when the caller already has it."""
    parts = step_breakdown(report) if parts is None else parts
    if not parts:
        return []
    step = report.totals.step_seconds
    rows = [(p.label, format_seconds(p.seconds), f"{100 * p.seconds / step:.1f}%") for p in parts if p.on_step]
    rows.append(("predicted step", format_seconds(step), "100%"))
    rows += [(f"{p.label} (not on the step)", format_seconds(p.seconds), "—") for p in parts if not p.on_step]
    return rows


def top_cause(report: Report) -> Any:
    """The report's root cause with the largest summed saving (`analyzer.rules.rootcause.RootCause`), or None."""
    from analyzer.rules.rootcause import top_cause as _top

    return _top(report.diagnostics, report)


def what_to_do(report: Report) -> str | None:
    """The report's first sentence: the root cause to fix first, the change, and what it saves per step.

    Example:
      >>> what_to_do(report)                                      # doctest: +SKIP
      "Fix the sharding of params['layers_*']['w_in']['kernel'] first: 2 findings, 63.4 µs per step ..."
    """
    top = top_cause(report)
    if top is None:
        return None
    first = top.findings[0]
    n = len(top.findings)
    text = (f"Fix {top.title} first: {n} finding{'s' if n != 1 else ''} ({', '.join(sorted({d.code for d in top.findings}))}), "
            f"{format_seconds(top.saving_seconds)} per step to save")
    # an activation layout's change named by its root cause (rules.rootcause.layout_change), else the finding's
    named = str(first.details.get("root_cause_fix") or "")
    change = first.fix if not named or (first.fix and first.fix.startswith(named)) else named
    if change:
        text += f". Change: {change}"
    said = verified_text(first) if "verified_saving_seconds" in (first.details or {}) else None
    if said:  # `analyze --verify-fixes` recompiled it
        text += f". {said[:1].upper()}{said[1:]}"
    return text + "."


def total_saving(diagnostics: Sequence[Diagnostic]) -> float:
    """Sum of the findings' predicted savings per step. Fixes overlap (two rules may price the same
    collective), so this is not a saving anyone can bank; per-rule totals use it."""
    return float(sum(d.saving_seconds or 0.0 for d in diagnostics if d.saving_seconds and d.saving_seconds > 0))


def sorted_diagnostics(diagnostics: Sequence[Diagnostic]) -> list[Diagnostic]:
    """Findings, most severe first, then largest saving first, then by code."""
    return sorted(diagnostics, key=lambda d: (-_rank(d), -(d.saving_seconds or 0.0), d.code))


def _rank(d: Diagnostic) -> int:
    sev = d.severity
    return sev.rank if hasattr(sev, "rank") else {"info": 0, "warning": 1, "error": 2}.get(str(sev), 0)


def plan_lines(report: Report) -> list[tuple[str, str]]:
    """The run's identity: name, target, hardware, topology, mesh."""
    lines = []
    if report.name:
        lines.append(("Program", report.name))
    lines.append(("Target", report.target))
    lines.append(("Hardware", report.hardware))
    if report.topology:
        lines.append(("Topology", report.topology))
    if report.mesh is not None:
        lines.append(("Mesh", f"{report.mesh} ({report.mesh.size} device{'' if report.mesh.size == 1 else 's'})"))
    return lines


def memory_lines(report: Report) -> list[tuple[str, str]]:
    """Per-device memory figures, formatted, in the order memory_analysis reports them."""
    if not report.memory:
        return []
    return [(k.replace("_", " "), format_bytes(v)) for k, v in report.memory.items()]


def mfu_text(mfu: float) -> str:
    """MFU as a percentage, or "—" when no step was predicted (nan).

    Example:
        >>> mfu_text(0.4797), mfu_text(float("nan"))
        ('48.0%', '—')
    """
    return f"{100 * mfu:.1f}%" if mfu == mfu else "—"


def whatif_rows(whatifs: Sequence[WhatIf]) -> list[dict[str, Any]]:
    """Formatted rows for the renderers, with each step time relative to the baseline."""
    base = next((w for w in whatifs if w.baseline), whatifs[0] if whatifs else None)
    rows = []
    for w in whatifs:
        rel = w.step_seconds / base.step_seconds if base and base.step_seconds > 0 else float("nan")
        rows.append({
            "hardware": w.hardware, "topology": w.topology, "comm": format_seconds(w.comm_seconds),
            "compute": format_seconds(w.compute_seconds), "step": format_seconds(w.step_seconds),
            "exposed": format_seconds(w.exposed_comm_seconds), "mfu": mfu_text(w.mfu),
            "relative": "—" if rel != rel else f"{rel:.2f}x", "findings": w.findings,
            "saving": format_seconds(w.saving_seconds) if w.saving_seconds else "—", "baseline": w.baseline,
        })
    return rows
