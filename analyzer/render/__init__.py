"""Renderers: one module per output format, each a pure function of a `Report` (and optionally a sweep ranking
and a what-if table), of a check result or of a diff.

    from analyzer.render import render, write
    text = render(report, "html")            # or "text", "markdown", "json", "sarif"
    write(report, "audit.md")                # the format the file name asks for

Which module renders which format is said once, in analyzer/formats.py (the table of output formats every
command reads); `render` and `write` look the format up there. Modules: `terminal` (rich tables), `json`
(versioned schema, docs/report-schema.json), `markdown`, `html` (one self-contained file: inline CSS and SVG
plots), `plots` (matplotlib figures as SVG text), `csv` (the collectives table), `findings`, `github` and
`sarif` (`check`'s output), `diff`, `trace` (the predicted step as a Chrome trace). Renderers never analyse:
what they show comes from the report.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from analyzer.formats import for_path, renderer

if TYPE_CHECKING:
    from analyzer.analysis.report import Report
    from analyzer.workflows.sweep import SweepResult
    from analyzer.workflows.whatif import WhatIf

__all__ = ["render", "write"]


def render(report: Report, fmt: str = "text", *, sweep: SweepResult | None = None,
           whatif: Sequence[WhatIf] | None = None) -> str:
    """The report in one format.

    Args:
      report: an analysed `Report`.
      fmt: a format that renders a report (`analyzer.formats.names("report")`): `text`, `json`, `markdown`,
        `html` or `sarif`.
      sweep: a sweep ranking to include.
      whatif: the plan repriced on other hardware (`analyzer.workflows.whatif.compare`), to include.

    Returns:
      The rendered text.

    Raises:
      AnalyzerError: no such report format (naming the valid ones).

    Example:
      >>> text = render(report, "markdown")
      >>> text.splitlines()[0]
      '# hlo-analyzer report: jit_train_step_fsdp_tp'
    """
    return renderer(fmt, "report")(report, sweep=sweep, whatif=whatif)


def write(report: Report, path: str | Path, *, sweep: SweepResult | None = None,
          whatif: Sequence[WhatIf] | None = None) -> Path:
    """Render the report in the format its file name asks for (`analyzer.formats.for_path`) and write it
    (UTF-8), whole or not at all.

    Returns:
      The path written.
    """
    from analyzer.fileio import write_atomic

    path = Path(path)
    text = render(report, for_path(path), sweep=sweep, whatif=whatif)
    return write_atomic(path, text, what="report")
