"""GitHub Actions workflow commands: one `::error file=...,line=...::message` annotation per finding.

GitHub shows these lines in the pull request, on the changed line, when a workflow step prints them
(https://docs.github.com/en/actions/reference/workflow-commands-for-github-actions, "Setting an error
message"). The message and property values are escaped as the runner's command parser expects: `%`, CR
and LF everywhere, and also `:` and `,` inside properties.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from analyzer.diagnostics import Diagnostic, Severity

if TYPE_CHECKING:
    from analyzer.workflows.check import CheckResult

__all__ = ["render", "render_check", "annotation", "escape_data", "escape_property"]

_COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def escape_data(text: str) -> str:
    """Escape the message part of a workflow command.

    Example:
        >>> escape_data("50%\\nmore")
        '50%25%0Amore'
    """
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escape a property value (`file=`, `title=`) of a workflow command.

    Example:
        >>> escape_property("a:b,c")
        'a%3Ab%2Cc'
    """
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _relative(file: str, root: Path | None) -> str:
    """`file` relative to `root` when it lies under it (GitHub wants repository-relative paths)."""
    if root is None:
        return file
    try:
        return Path(file).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return file


def annotation(diagnostic: Diagnostic, *, root: Path | None = None) -> str:
    """One workflow command line for one finding.

    Args:
      diagnostic: the finding.
      root: the repository root; files under it are written relative to it.

    Returns:
      e.g. `::warning file=model.py,line=12,title=HA103 all-reduce-not-reduce-scatter::AllReduce_X ...`

    Example:
        >>> from analyzer.diagnostics import Location
        >>> annotation(Diagnostic("HA900", "comm-budget", "over budget", Severity.ERROR, Location("m.py", 3)))
        '::error file=m.py,line=3,title=HA900 comm-budget::over budget'
    """
    loc = diagnostic.location
    props = []
    if loc.file:
        props.append(f"file={escape_property(_relative(loc.file, root))}")
        if loc.line:
            props.append(f"line={loc.line}")
    props.append(f"title={escape_property(f'{diagnostic.code} {diagnostic.name}')}")
    message = diagnostic.message
    if diagnostic.fix:
        message += f"\nfix: {diagnostic.fix}"
    return f"::{_COMMAND[Severity(diagnostic.severity)]} {','.join(props)}::{escape_data(message)}"


def render(
    diagnostics: Sequence[Diagnostic],
    *,
    root: Path | None = None,
    errors: Sequence[str | tuple[str | None, int | None, str]] = (),
) -> str:
    """All findings as workflow commands, then one `::error` per entry point that could not be checked.

    Args:
      diagnostics: the findings to annotate.
      root: the repository root (paths are made relative to it).
      errors: entry points that failed to analyse: a message, or (file, line, message) to place it.

    Returns:
      the lines, newline-terminated ("" when there is nothing to say).
    """
    lines = [annotation(d, root=root) for d in diagnostics]
    for error in errors:
        file, line, message = error if isinstance(error, tuple) else (None, None, error)
        props = [f"file={escape_property(_relative(file, root))}"] if file else []
        if file and line:
            props.append(f"line={line}")
        props.append("title=hlo-analyzer")
        lines.append(f"::error {','.join(props)}::{escape_data(message)}")
    return "".join(line + "\n" for line in lines)


def render_check(result: CheckResult, *, show_baselined: bool = False) -> str:
    """`check`'s result as annotations: its findings, then the entry points that could not be checked, placed
    on their `def` lines. Baselined findings are never annotated (`show_baselined` changes nothing)."""
    return render(result.findings, root=result.root, errors=result.located_errors)
