"""The findings of `hlo-analyzer check` as text (one line per finding, like a linter) and as JSON.

Text, for people and pre-commit logs:

    model/train.py:41: HA201 gathered-larger-operand [warning] AllGather_model: [D_model, F] -> [D, F] ...
        fix: shard W as P(None, 'model') ...
    model/train.py:12: 1 finding in model.train:train_step (3 baselined); predicted saving 1.20 ms/step

JSON follows a versioned schema, `docs/check-output-schema.json` (`CHECK_SCHEMA_VERSION`): add optional
fields freely; renaming, removing or retyping one bumps the version and the schema together.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from analyzer.diagnostics import Diagnostic
from analyzer.render._escape import printable
from analyzer.units import format_seconds

if TYPE_CHECKING:
    from analyzer.workflows.check import CheckResult

__all__ = ["CHECK_SCHEMA_VERSION", "line", "render_text", "to_dict", "render_json"]

CHECK_SCHEMA_VERSION = "1"


def line(d: Diagnostic) -> str:
    """One finding as `file:line: CODE name [severity] message`, then its fix and saving, indented; control
    characters of file names and messages shown as escapes (`printable`), as the terminal report shows them.

    Example:
        >>> line(Diagnostic("HA901", "comm-budget", "12 ms/step over the 10 ms budget"))
        '<module>: HA901 comm-budget [warning] 12 ms/step over the 10 ms budget'
    """
    context = f" ({d.location.context})" if d.location.context else ""
    out = f"{d.location}: {d.code} {d.name} [{d.severity.value}] {d.message}{context}"
    extra = []
    if d.fix:
        extra.append(f"fix: {d.fix}")
    if d.saving_seconds:
        extra.append(f"saves {format_seconds(d.saving_seconds)}/step")
    if extra:
        out += "\n    " + "; ".join(extra)
    return printable(out)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def render_text(result: CheckResult, *, show_baselined: bool = False) -> str:
    """The check's findings, errors and a closing summary line, as plain text.

    Args:
      result: a `CheckResult`.
      show_baselined: also list the findings the baseline tolerates.

    Returns:
      newline-terminated text, control characters of file names and messages shown as escapes.
    """
    out: list[str] = []
    for outcome in result.outcomes:
        for d in outcome.findings:
            out.append(line(d))
        if show_baselined:
            out += [line(d) + "  (baselined)" for d in outcome.baselined]
        if outcome.error:
            where = outcome.entry.file.relative_to(result.root).as_posix() if _under(outcome.entry.file, result.root) \
                else (str(outcome.entry.file) if outcome.entry.file else outcome.entry.name)
            at = f"{where}:{outcome.entry.line}" if outcome.entry.line else where
            said = outcome.error if outcome.entry.name in outcome.error else \
                f"entry point {outcome.entry.name}: {outcome.error}"
            out.append(f"{at}: error: {said}")
    n_failing = len(result.failing)
    n_other = len(result.findings) - n_failing
    checked = len(result.outcomes)
    summary = [f"checked {_plural(checked, 'entry point')}"]
    if result.skipped:
        summary.append(f"{len(result.skipped)} not affected by the given files")
    summary.append(_plural(n_failing, "finding") + (f" at or above {result.fail_on}" if n_other else ""))
    if n_other:
        summary.append(f"{n_other} below {result.fail_on}")
    if result.baselined:
        name = result.baseline_path.name if result.baseline_path else "the baseline"
        summary.append(f"{len(result.baselined)} baselined in {name}")
    if result.errors:
        summary.append(_plural(len(result.errors), "error"))
    saving = sum(d.saving_seconds or 0.0 for d in result.findings)
    if saving > 0:
        summary.append(f"predicted saving {format_seconds(saving)}/step")
    out += [f"note: {n}" for n in result.notes]
    out.append("hlo-analyzer: " + ", ".join(summary) + ".")
    return printable("\n".join(out)) + "\n"


def _under(path: Any, root: Any) -> bool:
    try:
        path.relative_to(root)
        return True
    except (ValueError, AttributeError):
        return False


def _diagnostic(d: Diagnostic) -> dict[str, Any]:
    from analyzer.analysis.serialize import to_jsonable

    data = to_jsonable(d.to_dict())
    data["fingerprint"] = d.fingerprint()
    return data


def to_dict(result: CheckResult) -> dict[str, Any]:
    """The check result as JSON data following `docs/check-output-schema.json`.

    Returns:
      `{"schema_version", "tool", "root", "config", "baseline", "fail_on", "exit_code", "entry_points": [...],
      "skipped": [...], "summary": {...}}`; each entry point has its status, findings, baselined findings,
      error and predicted totals.
    """
    from analyzer.version import __version__
    from analyzer.analysis.serialize import to_jsonable

    entries = []
    for o in result.outcomes:
        status = "error" if o.error else ("findings" if o.findings else "clean")
        totals = None
        if o.report is not None:
            t = o.report.totals
            totals = to_jsonable(
                {"comm_seconds": float(t.comm_seconds), "compute_seconds": float(t.compute_seconds),
                 "comm_bytes": int(t.comm_bytes), "collectives": int(len(o.report.collectives))}
            )
        entries.append(
            {
                "name": o.entry.name,
                "file": _rel(o.entry.file, result.root),
                "line": o.entry.line,
                "status": status,
                "error": o.error,
                "totals": totals,
                "findings": [_diagnostic(d) for d in o.findings],
                "baselined": [_diagnostic(d) for d in o.baselined],
            }
        )
    return {
        "schema_version": CHECK_SCHEMA_VERSION,
        "tool": {"name": "hlo-analyzer", "version": __version__},
        "root": str(result.root),
        "config": str(result.config_path) if result.config_path else None,
        "baseline": str(result.baseline_path) if result.baseline_path else None,
        "fail_on": result.fail_on,
        "exit_code": result.exit_code,
        "entry_points": entries,
        "skipped": [e.name for e in result.skipped],
        "notes": list(result.notes),
        "summary": {
            "findings": len(result.findings),
            "failing": len(result.failing),
            "baselined": len(result.baselined),
            "errors": len(result.errors),
            "saving_seconds": to_jsonable(sum(d.saving_seconds or 0.0 for d in result.findings)),
        },
    }


def _rel(path: Any, root: Any) -> str | None:
    if path is None:
        return None
    return path.relative_to(root).as_posix() if _under(path, root) else str(path)


def render_json(result: CheckResult, indent: int | None = 2, *, show_baselined: bool = False) -> str:
    """`to_dict` as strict JSON text. Baselined findings are always there (each entry point's `baselined`), so
    `show_baselined`, which the check renderers share (analyzer/formats.py), changes nothing."""
    return json.dumps(to_dict(result), indent=indent, ensure_ascii=False, allow_nan=False) + "\n"
