"""The Markdown report (GitHub-flavoured): for pull requests, wikis and design docs.

Same content and order as the terminal and HTML reports (`analyzer.render._common` decides what is shown);
only the markup differs. Table cells are escaped so notation such as `[B_X, D]{U_Y}` and `|` survive.

Every string taken from the input (program, file, axis and op names, messages that quote them) is escaped
for Markdown and HTML before it is placed (`text`, `_code`): a CommonMark renderer that allows raw HTML shows
`<script>` in a file name as those characters, never runs it, and `*`, `_`, `[...]( ...)` or a leading `#`
in a name do not become markup.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from analyzer.analysis.arguments import argument_rows
from analyzer.render._common import (
    verified_text,
    step_rows,
    mfu_text,
    step_sentence,
    whatif_rows,
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

__all__ = ["render", "table", "text", "findings_section", "sweep_section", "whatif_section"]

# What Markdown or HTML would read as markup anywhere in a line, and at the start of one.
_INLINE = re.compile(r"([\\`*\[\]{}#!|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")  # a_b is no emphasis
_LINE_START = re.compile(r"^(\s*)(\d*)([-+=.)])(?=[\s=-]|$)", re.MULTILINE)
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def text(value: object) -> str:
    """Plain text for a Markdown document: HTML special characters as entities, Markdown punctuation
    backslash-escaped, control characters dropped, so that what an input says is shown and never rendered.

    Example:
        >>> text("<img src=x onerror=alert(1)> *model*.py")
        '&lt;img src=x onerror=alert(1)&gt; \\\\*model\\\\*.py'
    """
    out = _CONTROL.sub("", str(value))
    out = _INLINE.sub(r"\\\1", out)
    out = "".join(_HTML.get(c, c) for c in out)
    return _LINE_START.sub(lambda m: m.group(1) + m.group(2) + "\\" + m.group(3), out)


def _cell(text: object) -> str:
    """A table cell: pipes escaped, line breaks as `<br>` (GitHub renders them inside tables)."""
    lines = [line.strip() for line in str(text).replace("|", "\\|").splitlines()]
    return "<br>".join(line for line in lines if line)


def _code(text: str) -> str:
    """Inline code that survives backticks inside the text (a fence longer than any run of them; code spans
    show HTML as written)."""
    if not text:
        return ""
    text = _CONTROL.sub("", " ".join(str(text).splitlines()))
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if longest or text.startswith(" ") or text.endswith(" ") else ""
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
        lines = [f"### {sev.upper()} {d.code} {_code(d.name)} at {_code(where(d))}", "", text(d.message), ""]
        if d.notation:
            lines.append(f"- Collective: {_code(d.notation)}" + (f" ({format_seconds(d.seconds)})" if d.seconds else ""))
        if d.alternative:
            alt = f"- Instead: {_code(d.alternative)}"
            if d.alternative_seconds is not None:
                alt += f" ({format_seconds(d.alternative_seconds)})"
            lines.append(alt)
        if d.fix:
            lines.append(f"- Fix: {text(d.fix)}")
        if d.saving_seconds:
            lines.append(f"- **Saves {format_seconds(d.saving_seconds)} per step**")
        if verified_text(d):  # `analyze --verify-fixes`
            said = verified_text(d) or ""
            lines.append(f"- {said[:1].upper()}{text(said[1:])}")
        parts.append("\n".join(lines).rstrip())
    return "\n\n".join(parts)


def sweep_section(sweep: SweepResult) -> str:
    """`## Sweep ranking`: candidates best first."""
    rows = []
    for e in sweep.entries:
        if not e.ok:
            rows.append([e.rank, text(e.plan), text(e.mesh), "failed", "", "", "", "", "", "", "", text(e.error or "")])
            continue
        fits = {True: "yes", False: "**no**", None: "?"}[e.fits]
        note = "; ".join(x for x in (f"same as #{e.same_as}" if e.same_as else "", f"tie with #{e.tied_with}" if e.tied_with else "", e.note) if x)
        rows.append([e.rank, text(e.plan), text(e.mesh), format_seconds(e.step_seconds), format_seconds(e.exposed_comm_seconds),
                     mfu_text(e.mfu), format_seconds(e.comm_seconds), format_seconds(e.compute_seconds),
                     format_bytes(e.memory_bytes) if e.memory_bytes is not None else "—", fits, e.findings, text(note)])
    body = table(["#", "strategy", "mesh", "step", "exposed comm", "MFU", "comm", "compute", "memory/device", "fits",
                  "findings", "note"], rows, align="rllrrrrrrlrl")
    warning = ("\n\n**No candidate fits in HBM**: the ranking is by step time alone." if sweep.none_fit else "")
    return f"## Sweep ranking on {text(sweep.hardware)}\n\n{body}\n\n_{sweep.combine}_{warning}"


def whatif_section(whatif: Sequence[WhatIf]) -> str:
    """`## What-if`: the same plan repriced on other hardware."""

    rows = [[("**" + text(r["hardware"]) + "** (this report)") if r["baseline"] else text(r["hardware"]), text(r["topology"]), r["step"],
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
    parts = _head(report)
    parts += [s for s in (_arguments_section(report), _collectives_section(report), _by_kind_section(report),
                          _memory_section(report)) if s]
    parts.append(findings_section(report))
    if sweep is not None:
        parts.append(sweep_section(sweep))
    if whatif:
        parts.append(whatif_section(whatif))
    if report.notes:
        parts.append("## Notes and assumptions\n\n" + "\n".join(f"- {text(n)}" for n in report.notes))
    return "\n\n".join(parts) + "\n"


def _head(report: Report) -> list[str]:
    """The title, warnings, what to do, the plan, the summary and the step part by part."""
    title = f"# hlo-analyzer report: {text(report.name)}" if report.name else "# hlo-analyzer report"
    parts = [title]
    parts.extend(f"> **Warning:** {text(w)}" for w in report.warnings)
    todo = what_to_do(report)
    if todo:
        parts.append(f"**{text(todo)}**")
    parts.append(table(["", ""], [[f"**{text(k)}**", text(v)] for k, v in plan_lines(report)]))
    parts.append("## Summary\n\n" + table(["per step", ""], [[text(k), text(v)] for k, v in headline(report)],
                                             align="lr"))
    sentence = step_sentence(report)
    if sentence:
        parts.append(sentence)
    breakdown_rows = step_rows(report)
    if breakdown_rows:
        parts.append("### The step, part by part\n\n" + table(
            ["part", "per step", "share of the step"],
            [[f"**{a}**" if a == "predicted step" else text(a), b, c] for a, b, c in breakdown_rows], align="lrr"))
    return parts


def _arguments_section(report: Report) -> str | None:
    arguments = argument_rows(report.analysis, report.mesh)
    if not arguments:
        return None
    return ("## Arguments, as sharded\n\nDimension letters I, J, K, ... in order; `J_data` is split over "
            "mesh axis `data`.\n\n" + table(
                ["argument", "shape", "sharding", "per device"],
                [[_code(a["name"]), _code(a["shape"]), _code(a["notation"]),
                  format_bytes(a["bytes_per_device"]) if a["bytes_per_device"] is not None else "—"]
                 for a in arguments], align="lllr"))


def _collectives_section(report: Report) -> str:
    rows = collective_groups(report)
    if not rows:
        return "## Collectives\n\nXLA inserted no communication into this program."
    coll = table(
        ["collective", "axes", "bytes", "count", "each", "per step", "share", "regime", "source"],
        [[_code(r.label or r.notation or r.kind) + (" (overlapped)" if r.overlapped else "")
          + (f" ({r.sites} sites)" if r.sites > 1 else ""), text(r.axes), text(r.bytes), text(r.count),
          text(r.seconds), text(r.total_seconds), text(r.share), text(r.regime), _code(r.source or r.op_name)]
         for r in rows],
        align="llrrrrrll",
    )
    sites = sum(r.sites for r in rows)
    grouped = (f" The {sites} collectives are grouped by notation and source line ({len(rows)} rows): "
               "`count` and `per step` add up a group's sites; `≤` marks the largest where they differ."
               if sites > len(rows) else "")
    return ("## Collectives\n\nCostliest per step first. `each` is one execution; `count` the executions "
            "per step." + grouped + "\n\n" + coll)


def _by_kind_section(report: Report) -> str | None:
    t = report.totals
    if not (t.by_kind or t.by_axis):
        return None
    breakdown = [[text(k), format_seconds(v)] for k, v in sorted(t.by_kind.items(), key=lambda kv: -kv[1])]
    breakdown += [[f"over {_code(k or '—')}", format_seconds(v)] for k, v in sorted(t.by_axis.items(), key=lambda kv: -kv[1])]
    return "### Communication per step by kind and mesh axis\n\n" + table(["", "seconds"], breakdown, align="lr")


def _memory_section(report: Report) -> str | None:
    memory = memory_lines(report)
    if not memory:
        return None
    return "### Memory per device\n\n" + table(["", "bytes"], [[text(k), v] for k, v in memory], align="lr")
