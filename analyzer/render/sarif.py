"""SARIF 2.1.0: findings in the format code-scanning services read (GitHub code scanning, VS Code's viewer).

One run with `tool.driver.rules` built from the rule docs (analyzer.rules) and one result per finding, at
the user's file and line. The object model follows the OASIS standard "Static Analysis Results Interchange
Format (SARIF) Version 2.1.0" (Errata 01): sections 3.13 (sarifLog), 3.14 (run), 3.19 (toolComponent), 3.27
(result), 3.28 (location), 3.49 (reportingDescriptor). Tests validate the output against the standard's
JSON schema.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analyzer.diagnostics import Diagnostic, Severity

if TYPE_CHECKING:
    from analyzer.analysis.report import Report
    from analyzer.workflows.check import CheckResult
    from analyzer.workflows.sweep import SweepResult
    from analyzer.workflows.whatif import WhatIf

__all__ = ["RuleInfo", "SARIF_SCHEMA_URI", "to_sarif", "render", "render_check", "render_report", "rule_infos"]

SARIF_SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
_FINGERPRINT_KEY = "hloAnalyzerFingerprint/v1"
_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
_SRCROOT = "%SRCROOT%"


@dataclass(frozen=True)
class RuleInfo:
    """What SARIF needs to know about one rule (a `reportingDescriptor`)."""

    code: str
    name: str
    summary: str
    doc: str = ""
    severity: Severity = Severity.WARNING


def rule_infos() -> dict[str, RuleInfo]:
    """Every registered rule, by code, from the rule registry's docs.

    Returns:
      code -> `RuleInfo`; empty when no rules are registered.
    """
    from analyzer.rules.registry import all_rules  # loaded only when SARIF is asked for

    infos = {}
    for rule in all_rules():
        infos[rule.code] = RuleInfo(
            code=rule.code,
            name=rule.name,
            summary=rule.summary or _first_sentence(rule.doc) or rule.name,
            doc=rule.doc,
            severity=Severity(rule.severity),
        )
    return infos


def _first_sentence(doc: str) -> str:
    """The first sentence of a rule doc's body, skipping Markdown headings."""
    body = " ".join(line.strip() for line in doc.splitlines() if line.strip() and not line.lstrip().startswith("#"))
    head, dot, _ = body.partition(". ")
    return head + ("." if dot or not head.endswith(".") else "") if head else ""


def _section(doc: str, title: str) -> str:
    """The text of one `## title` section of a rule doc, joined into one paragraph."""
    lines = doc.splitlines()
    try:
        start = next(i for i, ln in enumerate(lines) if ln.strip().lstrip("#").strip() == title) + 1
    except StopIteration:
        return ""
    body = []
    for ln in lines[start:]:
        if ln.lstrip().startswith("## "):
            break
        body.append(ln.strip())
    return " ".join(x for x in body if x)


def _descriptor(info: RuleInfo) -> dict[str, Any]:
    """A SARIF reportingDescriptor (section 3.49) for one rule."""
    descriptor: dict[str, Any] = {
        "id": info.code,
        "name": info.name,
        "shortDescription": {"text": info.summary},
        "defaultConfiguration": {"level": _LEVEL[info.severity]},
    }
    if info.doc:
        what = _section(info.doc, "What it does")
        if what:
            descriptor["fullDescription"] = {"text": what}
        descriptor["help"] = {"text": info.doc, "markdown": info.doc}
    return descriptor


def _artifact(file: str, root: Path | None) -> dict[str, Any]:
    """An artifactLocation (section 3.4): relative to %SRCROOT% when under the root, else an absolute URI."""
    path = Path(file)
    if root is not None:
        try:
            return {"uri": path.resolve().relative_to(root.resolve()).as_posix(), "uriBaseId": _SRCROOT}
        except ValueError:
            pass
    if path.is_absolute():
        return {"uri": path.as_uri()}
    return {"uri": path.as_posix(), "uriBaseId": _SRCROOT}


def _result(
    d: Diagnostic, rule_index: Mapping[str, int], root: Path | None, baseline: str | None = None
) -> dict[str, Any]:
    """A SARIF result (section 3.27) for one finding; `baseline` names the baseline file that holds it."""
    text = d.message + (f" Fix: {d.fix}" if d.fix else "")
    result: dict[str, Any] = {
        "ruleId": d.code,
        "level": _LEVEL[Severity(d.severity)],
        "message": {"text": text},
        "partialFingerprints": {_FINGERPRINT_KEY: d.fingerprint()},
    }
    if d.code in rule_index:
        result["ruleIndex"] = rule_index[d.code]
    loc = d.location
    location: dict[str, Any] = {}
    if loc.file:
        physical: dict[str, Any] = {"artifactLocation": _artifact(loc.file, root)}
        if loc.line:
            physical["region"] = {"startLine": int(loc.line)}
        location["physicalLocation"] = physical
    if loc.instruction:
        location["logicalLocations"] = [
            {
                "name": loc.instruction,
                "fullyQualifiedName": f"{loc.computation}/{loc.instruction}" if loc.computation else loc.instruction,
                "kind": "instruction",
            }
        ]
    if location:
        result["locations"] = [location]
    from analyzer.analysis.serialize import to_jsonable  # numpy scalars to numbers, NaN and infinities to null

    properties = {
        key: to_jsonable(value)
        for key, value in (
            ("notation", d.notation),
            ("seconds", d.seconds),
            ("alternative", d.alternative),
            ("alternativeSeconds", d.alternative_seconds),
            ("savingSeconds", d.saving_seconds),
            ("fix", d.fix),
            ("hloLine", loc.hlo_line),
        )
        if value is not None
    }
    if d.details:
        properties["details"] = to_jsonable(d.details)
    if properties:
        result["properties"] = properties
    if baseline is not None:
        # Kept visible and auditable as a suppressed result (sections 3.27.23 and 3.35): "external" because
        # the suppression lives outside the source, in the baseline file.
        result["suppressions"] = [
            {"kind": "external", "status": "accepted", "justification": f"listed in the baseline {baseline}"}
        ]
    return result


def to_sarif(
    diagnostics: Sequence[Diagnostic],
    *,
    rules: Mapping[str, RuleInfo] | None = None,
    root: Path | None = None,
    errors: Iterable[str] = (),
    baselined: Sequence[Diagnostic] = (),
    baseline_name: str = "file",
    version: str | None = None,
) -> dict[str, Any]:
    """The SARIF log as a JSON-ready dict.

    Args:
      diagnostics: the findings.
      rules: rule docs by code (default: every registered rule, `rule_infos()`). Every code that a finding
        uses is described; a code the registry lacks gets a descriptor from the finding's own name.
      root: the repository root: file locations are written relative to it, under `%SRCROOT%`.
      errors: messages of inputs that could not be analysed (reported as tool execution notifications).
      baselined: findings a baseline tolerates: written as suppressed results, so they stay auditable.
      baseline_name: the baseline file, for the suppressions' justification.
      version: the tool version (default: `analyzer.version.__version__`).

    Returns:
      a dict with `version`, `$schema` and one run.
    """
    if rules is None:
        rules = rule_infos()
    if version is None:
        from analyzer.version import __version__ as version
    infos = dict(rules)
    for d in (*diagnostics, *baselined):  # findings from rules the registry does not list still get a descriptor
        infos.setdefault(d.code, RuleInfo(d.code, d.name, d.name.replace("-", " "), severity=Severity(d.severity)))
    ordered = sorted(infos.values(), key=lambda info: info.code)
    rule_index = {info.code: i for i, info in enumerate(ordered)}
    errors = list(errors)
    results = [_result(d, rule_index, root) for d in diagnostics]
    if baselined:  # with suppressions in the run, an empty list says "not suppressed" (3.27.23)
        for r in results:
            r["suppressions"] = []
        results += [_result(d, rule_index, root, baseline=baseline_name) for d in baselined]
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "hlo-analyzer",
                "version": version,
                "semanticVersion": version,
                "rules": [_descriptor(info) for info in ordered],
            }
        },
        "invocations": [
            {
                "executionSuccessful": not errors,
                "toolExecutionNotifications": [{"level": "error", "message": {"text": e}} for e in errors],
            }
        ],
        "results": results,
        "columnKind": "unicodeCodePoints",
    }
    if root is not None:
        run["originalUriBaseIds"] = {_SRCROOT: {"uri": root.resolve().as_uri() + "/"}}
    return {"$schema": SARIF_SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def render(
    diagnostics: Sequence[Diagnostic],
    *,
    rules: Mapping[str, RuleInfo] | None = None,
    root: Path | None = None,
    errors: Iterable[str] = (),
    baselined: Sequence[Diagnostic] = (),
    baseline_name: str = "file",
) -> str:
    """`to_sarif` as indented JSON text."""
    log = to_sarif(diagnostics, rules=rules, root=root, errors=errors, baselined=baselined,
                   baseline_name=baseline_name)
    return json.dumps(log, indent=2, allow_nan=False) + "\n"


def render_check(result: CheckResult, *, show_baselined: bool = False) -> str:
    """`check`'s result as a SARIF log: its findings, baselined ones as suppressed results (always, so
    `show_baselined` changes nothing), entry points that could not be checked as tool notifications."""
    name = result.baseline_path.name if result.baseline_path else "file"
    return render(result.findings, root=result.root, errors=result.errors, baselined=result.baselined,
                  baseline_name=name)


def render_report(report: Report, *, sweep: SweepResult | None = None,
                  whatif: Sequence[WhatIf] | None = None) -> str:
    """A report's findings as a SARIF log (the `sarif` format of a report file: `maxtext -o x.sarif`). SARIF
    holds findings only: a sweep's ranking and a what-if table are not part of it."""
    return render(report.diagnostics)
