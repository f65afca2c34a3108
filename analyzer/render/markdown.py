"""The Markdown report (GitHub-flavoured): for pull requests, wikis and design docs.

Same content and order as the terminal and HTML reports (`analyzer.render._common` decides what is shown);
only the markup differs. Table cells are escaped so notation such as `[B_X, D]{U_Y}` and `|` survive.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from analyzer.render._common import (
    step_rows,
    mfu_text,
    step_sentence,
    whatif_rows,
    argument_rows,
    collective_groups,
    headline,
    memory_lines,
    plan_lines,
    sorted_diagnostics,
    what_to_do,
    where,
)
from analyzer.units import format_bytes, format_seconds

if TYPE_CHECKING:
    from analyzer.analysis.report import Report
    from analyzer.workflows.sweep import SweepResult
    from analyzer.workflows.whatif import WhatIf

__all__ = ["render", "table", "findings_section", "sweep_section", "whatif_section"]


def _cell(text: object) -> str:
    """A table cell: pipes escaped, line breaks as `<br>` (GitHub renders them inside tables)."""
    lines = [line.strip() for line in str(text).replace("|", "\\|").splitlines()]
    return "<br>".join(line for line in lines if line)


def _code(text: str) -> str:
    """Inline code that survives backticks inside the text."""
    if not text:
        return ""
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def table(header: Sequence[str], rows: Sequence[Sequence[object]], align: str | None = None) -> str:
    """A GitHub table.

    Args:
      header: column titles.
      rows: cells (converted with str and escaped).
      align: one letter per column, `l` or `r`; default all left.

    Example:
      >>> print(table(["a", "b"], [[1, 2]], align="lr"))
      | a | b |
      |:--|--:|
      | 1 | 2 |
    """
    align = align or "l" * len(header)
    rule = ["--:" if a == "r" else ":--" for a in align]
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def findings_section(report: Report) -> str:
    """`## Findings`: one entry per finding, most severe first."""
    diags = sorted_diagnostics(report.diagnostics)
    if not diags:
        return "## Findings\n\nNo findings."
    parts = [f"## Findings ({len(diags)})"]
    for d in diags:
        sev = getattr(d.severity, "value", str(d.severity))
        lines = [f"### {sev.upper()} {d.code} `{d.name}` at {_code(where(d))}", "", d.message, ""]
        if d.notation:
            lines.append(f"- Collective: {_code(d.notation)}" + (f" ({format_seconds(d.seconds)})" if d.seconds else ""))
        if d.alternative:
            alt = f"- Instead: {_code(d.alternative)}"
            if d.alternative_seconds is not None:
                alt += f" ({format_seconds(d.alternative_seconds)})"
            lines.append(alt)
        if d.fix:
            lines.append(f"- Fix: {d.fix}")
        if d.saving_seconds:
            lines.append(f"- **Saves {format_seconds(d.saving_seconds)} per step**")
        parts.append("\n".join(lines).rstrip())
    return "\n\n".join(parts)


def sweep_section(sweep: SweepResult) -> str:
    """`## Sweep ranking`: candidates best first."""
    rows = []
    for e in sweep.entries:
        if not e.ok:
            rows.append([e.rank, e.plan, e.mesh, "failed", "", "", "", "", "", "", "", e.error or ""])
            continue
        fits = {True: "yes", False: "**no**", None: "?"}[e.fits]
        note = "; ".join(x for x in (f"same as #{e.same_as}" if e.same_as else "", e.note) if x)
        rows.append([e.rank, e.plan, e.mesh, format_seconds(e.step_seconds), format_seconds(e.exposed_comm_seconds),
                     mfu_text(e.mfu), format_seconds(e.comm_seconds), format_seconds(e.compute_seconds),
                     format_bytes(e.memory_bytes) if e.memory_bytes is not None else "—", fits, e.findings, note])
    body = table(["#", "strategy", "mesh", "step", "exposed comm", "MFU", "comm", "compute", "memory/device", "fits",
                  "findings", "note"], rows, align="rllrrrrrrlrl")
    warning = ("\n\n**No candidate fits in HBM**: the ranking is by step time alone." if sweep.none_fit else "")
    return f"## Sweep ranking on {sweep.hardware}\n\n{body}\n\n_{sweep.combine}_{warning}"


def whatif_section(whatif: Sequence[WhatIf]) -> str:
    """`## What-if`: the same plan repriced on other hardware."""

    rows = [[("**" + r["hardware"] + "** (this report)") if r["baseline"] else r["hardware"], r["topology"], r["step"],
             r["exposed"], r["mfu"], r["comm"], r["compute"], r["relative"], r["findings"]] for r in whatif_rows(whatif)]
    body = table(["hardware", "topology", "step", "exposed comm", "MFU", "comm", "compute", "vs this", "findings"],
                 rows, align="llrrrrrrr")
    return ("## What-if: the same plan on other hardware\n\nThe compiled program is unchanged; only the pricing "
            "differs. Step = the predicted step (compute plus the communication it waits for, docs/step.md).\n\n"
            + body)


def render(report: Report, *, sweep: SweepResult | None = None, whatif: Sequence[WhatIf] | None = None) -> str:
    """The whole report as Markdown.

    Example:
      >>> text = render(report)
      >>> text.splitlines()[0]
      '# hlo-analyzer report: jit_train_step_fsdp_tp'
    """
    title = f"# hlo-analyzer report: {report.name}" if report.name else "# hlo-analyzer report"
    parts = [title]
    parts.extend(f"> **Warning:** {w}" for w in report.warnings)
    todo = what_to_do(report)
    if todo:
        parts.append(f"**{todo}**")
    parts.append(table(["", ""], [[f"**{k}**", v] for k, v in plan_lines(report)]))
    parts.append("## Summary\n\n" + table(["per step", ""], [[k, v] for k, v in headline(report)], align="lr"))
    sentence = step_sentence(report)
    if sentence:
        parts.append(sentence)
    breakdown_rows = step_rows(report)
    if breakdown_rows:
        parts.append("### The step, part by part\n\n" + table(
            ["part", "per step", "share of the step"],
            [[f"**{a}**" if a == "predicted step" else a, b, c] for a, b, c in breakdown_rows], align="lrr"))
    arguments = argument_rows(report)
    if arguments:
        parts.append("## Arguments, as sharded\n\nDimension letters I, J, K, ... in order; `J_data` is split over "
                     "mesh axis `data`.\n\n" + table(
                         ["argument", "shape", "sharding", "per device"],
                         [[_code(a["name"]), _code(a["shape"]), _code(a["notation"]),
                           format_bytes(a["bytes_per_device"]) if a["bytes_per_device"] is not None else "—"]
                          for a in arguments], align="lllr"))
    rows = collective_groups(report)
    if rows:
        coll = table(
            ["collective", "axes", "bytes", "count", "each", "per step", "share", "regime", "source"],
            [[_code(r.label or r.notation or r.kind) + (" (overlapped)" if r.overlapped else "")
              + (f" ({r.sites} sites)" if r.sites > 1 else ""), r.axes, r.bytes, r.count,
              r.seconds, r.total_seconds, r.share, r.regime, _code(r.source or r.op_name)] for r in rows],
            align="llrrrrrll",
        )
        sites = sum(r.sites for r in rows)
        grouped = (f" The {sites} collectives are grouped by notation and source line ({len(rows)} rows): "
                   "`count` and `per step` add up a group's sites; `≤` marks the largest where they differ."
                   if sites > len(rows) else "")
        parts.append("## Collectives\n\nCostliest per step first. `each` is one execution; `count` the executions "
                     "per step." + grouped + "\n\n" + coll)
    else:
        parts.append("## Collectives\n\nXLA inserted no communication into this program.")
    t = report.totals
    if t.by_kind or t.by_axis:
        breakdown = [[k, format_seconds(v)] for k, v in sorted(t.by_kind.items(), key=lambda kv: -kv[1])]
        breakdown += [[f"over `{k or '—'}`", format_seconds(v)] for k, v in sorted(t.by_axis.items(), key=lambda kv: -kv[1])]
        parts.append("### Communication per step by kind and mesh axis\n\n" + table(["", "seconds"], breakdown, align="lr"))
    memory = memory_lines(report)
    if memory:
        parts.append("### Memory per device\n\n" + table(["", "bytes"], memory, align="lr"))
    parts.append(findings_section(report))
    if sweep is not None:
        parts.append(sweep_section(sweep))
    if whatif:
        parts.append(whatif_section(whatif))
    if report.notes:
        parts.append("## Notes and assumptions\n\n" + "\n".join(f"- {n}" for n in report.notes))
    return "\n\n".join(parts) + "\n"
