"""Renderers: one per output format, each a pure function of a `Report` (and optionally a sweep ranking).

    from analyzer.render import render, format_for_path
    text = render(report, "html")            # or "text", "markdown", "json"
    fmt = format_for_path("audit.md")        # -> "markdown"

Modules: `terminal` (rich tables), `json` (versioned schema, docs/report-schema.json), `markdown`,
`html` (one self-contained file: inline CSS and SVG plots), `plots` (matplotlib figures as SVG text),
`units` (how numbers print). Renderers never analyse: what they show comes from the report.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from analyzer.errors import AnalyzerError, valid_choices

if TYPE_CHECKING:
    from analyzer.analysis.report import Report
    from analyzer.workflows.sweep import SweepResult
    from analyzer.workflows.whatif import WhatIf

__all__ = ["FORMATS", "EXTENSIONS", "render", "format_for_path", "write"]

# Format name -> renderer module.
FORMATS: dict[str, str] = {
    "text": "analyzer.render.terminal",
    "json": "analyzer.render.json",
    "markdown": "analyzer.render.markdown",
    "html": "analyzer.render.html",
}

# File extension -> format name.
EXTENSIONS: dict[str, str] = {
    ".html": "html", ".htm": "html", ".md": "markdown", ".markdown": "markdown", ".json": "json", ".txt": "text",
}


def render(report: Report, fmt: str = "text", *, sweep: SweepResult | None = None,
           whatif: Sequence[WhatIf] | None = None) -> str:
    """The report in one format.

    Args:
      report: an analysed `Report`.
      fmt: `text`, `json`, `markdown` or `html`.
      sweep: a sweep ranking to include.
      whatif: the plan repriced on other hardware (`analyzer.workflows.whatif.compare`), to include.

    Returns:
      The rendered text.

    Example:
      >>> text = render(report, "markdown")
      >>> text.splitlines()[0]
      '# hlo-analyzer report: jit_train_step_fsdp_tp'
    """
    module = FORMATS.get(fmt)
    if module is None:
        raise AnalyzerError(f"unknown report format {fmt!r}; {valid_choices(fmt, FORMATS, what='formats')}")
    return importlib.import_module(module).render(report, sweep=sweep, whatif=whatif)


def format_for_path(path: str | Path) -> str:
    """The format a file name asks for, from its extension.

    Example:
      >>> format_for_path("report.md")
      'markdown'
    """
    suffix = Path(path).suffix.lower()
    fmt = EXTENSIONS.get(suffix)
    if fmt is None:
        shown = suffix or "(no extension)"
        raise AnalyzerError(
            f"cannot tell the report format of {str(path)!r} from its extension {shown}; "
            f"{valid_choices(suffix, EXTENSIONS, what='extensions')}"
        )
    return fmt


def write(report: Report, path: str | Path, *, sweep: SweepResult | None = None,
          whatif: Sequence[WhatIf] | None = None) -> Path:
    """Render the report in the format its file name asks for and write it (UTF-8), whole or not at all.

    Returns:
      The path written.
    """
    from analyzer.fileio import write_atomic

    path = Path(path)
    text = render(report, format_for_path(path), sweep=sweep, whatif=whatif)
    return write_atomic(path, text, what="report")
