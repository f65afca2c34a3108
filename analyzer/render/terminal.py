"""The terminal report: rich tables of the plan, the collectives, the totals and the findings.

`render(report)` returns the text (plain, or with ANSI colour); `print_report(report, console)` writes to a
rich Console. The section builders (`collectives_table`, `totals_table`, `findings_renderables`) are public
so other commands (`check`, `diff`, `demo`) compose the same pieces.

Every string that comes from the input (program, file and axis names, source lines, messages) goes through
`printable` and rich's markup escape: a file named with `ESC[2J` cannot clear the screen and one named
`[red]x` is shown as written. Piped output (CI logs) is `PIPE_WIDTH` columns wide, not rich's 80, unless
COLUMNS says otherwise.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

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
)
from analyzer.render._escape import printable
from analyzer.units import format_seconds

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from analyzer.diagnostics import Diagnostic
    from analyzer.analysis.report import Report
    from analyzer.workflows.sweep import SweepResult
    from analyzer.workflows.whatif import WhatIf

__all__ = [
    "render",
    "print_report",
    "plan_table",
    "collectives_table",
    "totals_table",
    "step_table",
    "findings_renderables",
    "fit_columns",
    "sweep_table",
    "whatif_table",
    "SEVERITY_STYLE",
    "PIPE_WIDTH",
    "printable",
    "console_for",
]

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}

# Columns of output that is not a terminal (a pipe, a CI log): wide enough for the collectives table.
PIPE_WIDTH = 160


def console_for(file=None) -> Console:
    """A rich Console on `file` (default stdout): the terminal's width on a terminal, else COLUMNS or
    `PIPE_WIDTH` (rich's 80 would wrap the tables in a CI log)."""
    import sys

    from rich.console import Console

    stream = file or sys.stdout
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    columns = os.environ.get("COLUMNS", "")
    width = None if tty or columns.isdigit() else PIPE_WIDTH
    return Console(file=file, width=width)


def plan_table(report: Report):
    """Target, hardware, topology and mesh as a two-column grid."""
    from rich.table import Table

    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for label, value in plan_lines(report):
        grid.add_row(_escape(label), _escape(value))
    return grid


# The collectives table's columns: header, justify, and priority (the lowest is hidden first when the
# terminal is too narrow; the collective, its time per step and the user's line are never hidden). The axes
# go first: the notation's subscripts name them too.
_COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("collective", "left", 100), ("axes", "left", 1), ("bytes", "right", 4), ("count", "right", 6),
    ("each", "right", 3), ("per step", "right", 100), ("share", "right", 5), ("regime", "left", 2),
    ("source", "left", 100),
)
_NOTATION_MIN = 24  # the collective column folds down to this many characters before columns are hidden


def _cells(r) -> dict[str, tuple[str, str]]:
    """(plain text, rich markup) of each column of one row."""
    sites = f" ({r.sites} sites)" if r.sites > 1 else ""
    notation = (r.label or r.notation or r.kind)
    overlapped = " (overlapped)" if r.overlapped else ""
    return {
        "collective": (notation + overlapped + sites,
                       _escape(notation) + (" [dim](overlapped)[/]" if r.overlapped else "")
                       + (f" [dim]({r.sites} sites)[/]" if sites else "")),
        "axes": (r.axes, _escape(r.axes)), "bytes": (r.bytes, r.bytes), "count": (r.count, r.count),
        "each": (r.seconds, r.seconds), "per step": (r.total_seconds, f"[bold]{r.total_seconds}[/]"),
        "share": (r.share, r.share),
        "regime": (r.regime, f"[magenta]{r.regime}[/]" if r.regime == "latency" else r.regime),
        "source": (r.source or r.op_name, _escape(r.source or r.op_name)),
    }


def fit_columns(widths: dict[str, int], width: int | None) -> list[str]:
    """The columns to hide so that a table with these natural column widths fits in `width` characters,
    lowest priority first (none when it fits, or `width` is None).

    Example:
        >>> widths = {"collective": 50, "axes": 10, "bytes": 9, "count": 5, "each": 8, "per step": 8,
        ...           "share": 5, "regime": 9, "source": 20}
        >>> fit_columns(widths, 80)
        ['axes', 'regime', 'each', 'bytes']
        >>> fit_columns(widths, 200)
        []
    """
    if width is None:
        return []
    shown = [name for name, _, _ in _COLUMNS if name in widths]

    def need(cols: list[str]) -> int:
        # rich's SIMPLE_HEAD table: one space of padding each side of a cell, one separator between columns
        # and one edge each side (so 3 per column + 1); counting 2 per column cropped the last (source) column
        return sum(min(widths[c], _NOTATION_MIN) if c == "collective" else widths[c] for c in cols) \
            + 3 * len(cols) + 1

    hidden: list[str] = []
    for name, _, priority in sorted(_COLUMNS, key=lambda c: c[2]):
        if need(shown) <= width or priority >= 100:
            break
        shown.remove(name)
        hidden.append(name)
    return hidden


def collectives_table(report: Report, *, limit: int | None = 30, width: int | None = None):
    """The collectives grouped by (notation, user line), costliest per step first.

    Args:
      report: the analysed report.
      limit: show at most this many rows (a last line says how many were left out); None shows all.
      width: the terminal's width: columns that do not fit are hidden, least useful first, and the caption
        says which (the collective, its time per step and the user's line always stay; a path is never
        split across lines). None shows every column.
    """
    from rich import box
    from rich.table import Table

    rows = collective_groups(report)
    shown = rows if limit is None else rows[:limit]
    cells = [_cells(r) for r in shown]
    widths = {name: max([len(name)] + [len(c[name][0]) for c in cells]) for name, _, _ in _COLUMNS}
    hidden = fit_columns(widths, width)
    sites = sum(r.sites for r in rows)
    title = "Collectives (per step, costliest first" + (f"; {sites} grouped by notation and line)" if sites > len(rows)
                                                       else ")")
    table = Table(title=title, title_justify="left", expand=False, box=box.SIMPLE_HEAD, title_style="bold",
                  caption_justify="left")
    for name, justify, _ in _COLUMNS:
        if name in hidden:
            continue
        if name == "collective":
            table.add_column(name, overflow="fold", min_width=min(_NOTATION_MIN, widths[name]))
        elif name in ("source", "axes"):
            table.add_column(name, no_wrap=True, min_width=widths[name])
        else:
            table.add_column(name, justify=justify, no_wrap=True)
    for c in cells:
        table.add_row(*(c[name][1] for name, _, _ in _COLUMNS if name not in hidden))
    captions = []
    if len(shown) < len(rows):
        rest = rows[len(shown):]
        more = sum(r.sites for r in rest)
        captions.append(f"{more} more collectives not shown" + (f" ({len(rest)} rows)" if more != len(rest) else "")
                        + " (use --json for all)")
    if hidden:
        captions.append(f"columns hidden to fit {width} characters: {', '.join(hidden)} (widen the terminal, "
                        "or use --json or the HTML report for every column)")
    if captions:
        table.caption = "\n".join(captions)
    return table


def totals_table(report: Report):
    """Headline figures, then seconds per step by collective kind and by mesh axis."""
    from rich import box
    from rich.table import Table

    t = report.totals
    table = Table(title="Totals (per step)", title_justify="left", show_header=False, expand=False,
                  box=box.SIMPLE, title_style="bold")
    table.add_column(style="bold")
    table.add_column(justify="right")
    for label, value in headline(report):
        table.add_row(label, value)
    if t.by_kind:
        table.add_section()
        for kind, seconds in sorted(t.by_kind.items(), key=lambda kv: -kv[1]):
            table.add_row(_escape(f"{kind}"), format_seconds(seconds))
    if t.by_axis:
        table.add_section()
        for axis, seconds in sorted(t.by_axis.items(), key=lambda kv: -kv[1]):
            table.add_row(_escape(f"over {axis or '—'}"), format_seconds(seconds))
    memory = memory_lines(report)
    if memory:
        table.add_section()
        for label, value in memory:
            table.add_row(_escape(f"memory: {label}"), value)
    return table


def step_table(report: Report):
    """The predicted step, part by part (`_common.step_rows`); None without a step prediction."""
    from rich import box
    from rich.table import Table

    rows = step_rows(report)
    if not rows:
        return None
    table = Table(title="The step, part by part", title_justify="left", box=box.SIMPLE, title_style="bold")
    table.add_column("part")
    table.add_column("per step", justify="right")
    table.add_column("share of the step", justify="right")
    for label, seconds, share in rows:
        if label == "predicted step":
            table.add_section()
            table.add_row(label, seconds, share, style="bold")
            table.add_section()
        else:
            table.add_row(label, seconds, share)
    return table


def findings_renderables(diagnostics: Sequence[Diagnostic], *, per_rule: int | None = None) -> list[RenderableType]:
    """One block per finding: `severity CODE name at location`, the message, the change and its saving.

    Args:
      diagnostics: the findings, in any order (printed most severe first).
      per_rule: print at most this many findings of one rule, then a line saying how many more; None: all.
    """
    from rich.text import Text

    from analyzer.render._common import where

    out: list[RenderableType] = []
    shown: dict[str, int] = {}
    hidden: dict[str, int] = {}
    for d in sorted_diagnostics(diagnostics):
        if per_rule is not None and shown.get(d.code, 0) >= per_rule:
            hidden[d.code] = hidden.get(d.code, 0) + 1
            continue
        shown[d.code] = shown.get(d.code, 0) + 1
        sev = getattr(d.severity, "value", str(d.severity))
        head = Text()
        head.append(f"{sev:<7} ", style=SEVERITY_STYLE.get(sev, ""))
        head.append(f"{d.code} ", style="bold")
        head.append(printable(d.name), style="dim")
        head.append(f"  {printable(where(d))}")
        out.append(head)
        out.append(Text("    " + printable(d.message)))
        if d.notation:
            out.append(Text(f"    collective: {printable(d.notation)}", style="dim"))
        if d.alternative:
            alt = f"    instead: {printable(d.alternative)}"
            if d.alternative_seconds is not None and d.seconds is not None:
                alt += f"  (communication {format_seconds(d.seconds)} -> {format_seconds(d.alternative_seconds)})"
            out.append(Text(alt))
        if d.fix:
            out.append(Text(f"    fix: {printable(d.fix)}", style="green"))
        if d.saving_seconds:
            out.append(Text(f"    saves {format_seconds(d.saving_seconds)} per step", style="bold green"))
        if verified_text(d):  # `analyze --verify-fixes`
            out.append(Text(f"    {printable(verified_text(d) or '')}", style="cyan"))
    for code, n in hidden.items():
        out.append(Text(f"... and {n} more {code} finding{'s' if n != 1 else ''} (all of them in the HTML, "
                        "Markdown and JSON reports)", style="dim"))
    return out


def sweep_table(sweep: SweepResult):
    """The ranking of a sweep, best first."""
    from rich import box
    from rich.table import Table

    from analyzer.units import format_bytes

    table = Table(title=f"Sweep ranking on {sweep.hardware}", title_justify="left", caption=sweep.combine,
                  caption_justify="left", box=box.SIMPLE_HEAD, title_style="bold")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("strategy", no_wrap=True)
    table.add_column("mesh", no_wrap=True)
    for name in ("step", "exposed", "MFU", "comm", "compute", "memory/device"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("fits", no_wrap=True)
    table.add_column("findings", justify="right", no_wrap=True)
    table.add_column("note", overflow="fold")
    for e in sweep.entries:
        if not e.ok:
            table.add_row(str(e.rank), _escape(e.plan), e.mesh, "[red]failed[/]", "", "", "", "", "", "", "",
                          _escape(e.error or ""))
            continue
        fits = {True: "[green]yes[/]", False: "[red]no[/]", None: "?"}[e.fits]
        mem = format_bytes(e.memory_bytes) if e.memory_bytes is not None else "—"
        style = "bold" if e.rank == 1 else ""
        note = "; ".join(x for x in (f"same as #{e.same_as}" if e.same_as else "", f"tie with #{e.tied_with}" if e.tied_with else "", e.note) if x)
        findings = f"{e.findings}" + (f" ({e.errors} error{'s' if e.errors != 1 else ''})" if e.errors else "")
        table.add_row(str(e.rank), _escape(e.plan), e.mesh, format_seconds(e.step_seconds),
                      format_seconds(e.exposed_comm_seconds), mfu_text(e.mfu), format_seconds(e.comm_seconds),
                      format_seconds(e.compute_seconds), mem, fits, findings, _escape(note), style=style)
    return table


def whatif_table(whatif: Sequence[WhatIf]):
    """The same plan repriced on other hardware, one row each, the report's own first."""
    from rich import box
    from rich.table import Table


    table = Table(title="What-if: the same plan on other hardware (not recompiled)", title_justify="left",
                  box=box.SIMPLE_HEAD, title_style="bold")
    for name, justify in (("hardware", "left"), ("topology", "left"), ("step", "right"), ("exposed", "right"),
                          ("MFU", "right"), ("comm", "right"), ("compute", "right"), ("vs this", "right"),
                          ("findings", "right")):
        table.add_column(name, justify=justify)
    for r in whatif_rows(whatif):
        table.add_row(_escape(r["hardware"]) + (" (this)" if r["baseline"] else ""), _escape(r["topology"]), r["step"],
                      r["exposed"], r["mfu"], r["comm"], r["compute"], r["relative"], str(r["findings"]),
                      style="bold" if r["baseline"] else "")
    return table


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(printable(text))


def print_report(report: Report, console: Console | None = None, *, sweep: SweepResult | None = None,
                 whatif: Sequence[WhatIf] | None = None, limit: int | None = 30, per_rule: int | None = 3) -> None:
    """Write the whole report to a rich Console (stdout by default).

    Args:
      limit: most collectives to list; None lists all.
      per_rule: most findings of one rule to print; None prints all.
    """
    from rich.rule import Rule
    from rich.text import Text

    console = console or console_for()
    console.print(Rule(Text("hlo-analyzer report", style="bold"), align="left"))
    console.print(plan_table(report))
    console.print()
    for warning in report.warnings:
        console.print(Text(f"Warning: {printable(warning)}", style="bold yellow"))
        console.print()
    todo = what_to_do(report)
    if todo:
        console.print(Text(printable(todo), style="bold green"))
        console.print()
    if report.collectives is not None and len(report.collectives):
        console.print(collectives_table(report, limit=limit, width=console.width))
    else:
        console.print("No collectives: XLA inserted no communication into this program.")
    console.print()
    console.print(totals_table(report))
    sentence = step_sentence(report)
    if sentence:
        console.print(_escape(sentence))
    breakdown = step_table(report)
    if breakdown is not None:
        console.print(breakdown)
    console.print()
    n = len(report.diagnostics)
    console.print(Text(f"Findings ({n})", style="bold") if n else Text("No findings.", style="bold green"))
    for block in findings_renderables(report.diagnostics, per_rule=per_rule):
        console.print(block)
    if sweep is not None:
        console.print()
        console.print(sweep_table(sweep))
    if whatif:
        console.print()
        console.print(whatif_table(whatif))
    if report.notes:
        console.print()
        console.print(Text("Notes", style="bold"))
        for note in report.notes:
            console.print(Text(f"  - {printable(note)}", style="dim"))


def render(report: Report, *, width: int = 140, color: bool = False, sweep: SweepResult | None = None,
           whatif: Sequence[WhatIf] | None = None, limit: int | None = 30, per_rule: int | None = 3) -> str:
    """The terminal report as a string.

    Args:
      report: the analysed report.
      width: line width of the tables.
      color: keep ANSI colour codes.
      sweep: a sweep ranking to append.
      whatif: the plan repriced on other hardware, to append.
      limit: most collectives to list.
      per_rule: most findings of one rule to print.

    Example:
      >>> text = render(report, width=100)
      >>> text.splitlines()[1].split()
      ['Program', 'jit_train_step_fsdp_tp']
    """
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=color, color_system="standard" if color else None,
                      no_color=not color, highlight=False)
    print_report(report, console, sweep=sweep, whatif=whatif, limit=limit, per_rule=per_rule)
    return buffer.getvalue()
