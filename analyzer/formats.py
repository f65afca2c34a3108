"""Every output format hlo-analyzer writes, in one table: the one place a renderer is loaded by name.

A format is data: its name, what it is (for help texts), its media type, the file suffixes that ask for it, and,
for each kind of result it renders, the renderer as "module:function". Every command reads this table:
`report -o`, `sweep -o`, `maxtext -o` and `demo` pick the format of a file by its suffix (`for_path`),
`check --output-format` offers the formats that render a check result, `analyze`/`inspect --json`/`--csv` and
`diff --json` render through it, and so do `Report.to_json`/`to_markdown`/`to_html`/`to_text`. A renderer
module is imported when its format is first used (`renderer`), so this module stays at the bottom of the
layers (docs/analysis.md, "Layers") and costs nothing to import.

Adding a format is one `OutputFormat` entry below plus its renderer module under analyzer/render/.

The kinds of result, and the call each renderer answers:

  report  fn(report: Report, *, sweep=None, whatif=None) -> str    a whole report (audit files, `Report.to_*`)
  table   fn(report: Report) -> str                               a report's collectives table alone
  check   fn(result: CheckResult, *, show_baselined: bool) -> str   `check`'s output
  diff    fn(diff: Diff, *, threshold: Threshold | None) -> str     `diff`'s output
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analyzer.errors import AnalyzerError, valid_choices

__all__ = ["KINDS", "OutputFormat", "FORMATS", "names", "get", "suffixes", "for_path", "renderer", "choices_text"]

KINDS = ("report", "table", "check", "diff")


@dataclass(frozen=True)
class OutputFormat:
    """One output format.

    Attributes:
      name: what options and `render(report, name)` call it ("markdown").
      media_type: its IANA media type ("text/markdown").
      suffixes: file suffixes (lower case, with the dot) that ask for it when a file is written; the first is
        the one to write. Empty: never chosen by a file name.
      note: a few words for help texts ("SARIF 2.1.0"); "" when the name says it.
      report, table, check, diff: the renderer of that kind of result, "module:function"; None when the format
        does not render that kind (see the module docstring for each kind's call).
    """

    name: str
    media_type: str
    suffixes: tuple[str, ...] = ()
    note: str = ""
    report: str | None = None
    table: str | None = None
    check: str | None = None
    diff: str | None = None

    def renders(self, kind: str) -> bool:
        return getattr(self, kind) is not None


FORMATS: tuple[OutputFormat, ...] = (
    OutputFormat("text", "text/plain", (".txt",), report="analyzer.render.terminal:render",
                 check="analyzer.render.findings:render_text", diff="analyzer.render.diff:render_text"),
    OutputFormat("json", "application/json", (".json",), report="analyzer.render.json:render",
                 check="analyzer.render.findings:render_json", diff="analyzer.render.diff:render_json"),
    OutputFormat("markdown", "text/markdown", (".md", ".markdown"), report="analyzer.render.markdown:render"),
    OutputFormat("html", "text/html", (".html", ".htm"), note="one self-contained file with plots",
                 report="analyzer.render.html:render"),
    OutputFormat("csv", "text/csv", (".csv",), note="the collectives table", table="analyzer.render.csv:render"),
    OutputFormat("github", "text/plain", note="workflow annotations", check="analyzer.render.github:render_check"),
    OutputFormat("sarif", "application/sarif+json", (".sarif",), note="SARIF 2.1.0",
                 report="analyzer.render.sarif:render_report", check="analyzer.render.sarif:render_check"),
)

_BY_NAME = {f.name: f for f in FORMATS}


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown kind of output {kind!r}; one of {', '.join(KINDS)}")


def names(kind: str) -> tuple[str, ...]:
    """The formats that render `kind`, in the table's order.

    Example:
      >>> names("check")
      ('text', 'json', 'github', 'sarif')
    """
    _check_kind(kind)
    return tuple(f.name for f in FORMATS if f.renders(kind))


def get(name: str, kind: str) -> OutputFormat:
    """The format called `name`, which must render `kind`.

    Raises:
      AnalyzerError: no such format for that kind (naming the valid ones).
    """
    fmt = _BY_NAME.get(name)
    if fmt is None or not fmt.renders(kind):
        raise AnalyzerError(f"unknown {kind} format {name!r}; {valid_choices(name, names(kind), what='formats')}")
    return fmt


def suffixes(kind: str = "report") -> dict[str, str]:
    """File suffix -> format name, for the formats that render `kind`.

    Example:
      >>> suffixes()[".md"]
      'markdown'
    """
    _check_kind(kind)
    return {s: f.name for f in FORMATS if f.renders(kind) for s in f.suffixes}


def for_path(path: str | Path, kind: str = "report") -> str:
    """The format a file name asks for, from its suffix (case-insensitive).

    Raises:
      AnalyzerError: the suffix names no format of that kind (naming the valid suffixes).

    Example:
      >>> for_path("audit/R.HTML")
      'html'
    """
    known = suffixes(kind)
    suffix = Path(path).suffix.lower()
    fmt = known.get(suffix)
    if fmt is None:
        shown = suffix or "(no extension)"
        raise AnalyzerError(f"cannot tell the {kind} format of {str(path)!r} from its extension {shown}; "
                            f"{valid_choices(suffix, known, what='extensions')}")
    return fmt


def renderer(name: str, kind: str) -> Callable[..., str]:
    """The function that renders `kind` in format `name`, its module imported now.

    Example:
      >>> renderer("markdown", "report").__module__
      'analyzer.render.markdown'
    """
    module, _, function = getattr(get(name, kind), kind).partition(":")
    found: Any = getattr(importlib.import_module(module), function)
    return found


def choices_text(kind: str, default: str) -> str:
    """The formats of `kind` for a help text, each with its note: "text (default), json, github (workflow
    annotations) or sarif (SARIF 2.1.0)".
    """
    parts = []
    for name in names(kind):
        fmt = _BY_NAME[name]
        notes = [n for n in ("default" if name == default else "", fmt.note) if n]
        parts.append(f"{name} ({'; '.join(notes)})" if notes else name)
    return ", ".join(parts[:-1]) + " or " + parts[-1] if len(parts) > 1 else "".join(parts)
