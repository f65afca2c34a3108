"""The HTML audit report: one self-contained file a user can hand to others.

Rendered from the jinja2 template `analyzer/templates/report.html.j2`; CSS is inline, plots are inline SVG
drawn with matplotlib (`analyzer.render.plots`), nothing is fetched from the network. Every string from
the report is escaped by the template engine; rule docs (Markdown) are converted with markdown-it with raw
HTML disabled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from analyzer.analysis.arguments import argument_rows
from analyzer.render._common import (
    verified_text,
    mfu_text,
    whatif_rows,
    collective_groups,
    dot_label,
    short_source,
    headline,
    step_breakdown,
    step_rows,
    step_sentence,
    memory_lines,
    plan_lines,
    sorted_diagnostics,
    what_to_do,
    where,
)
from analyzer.units import format_bytes, format_count, format_flops, format_seconds

if TYPE_CHECKING:
    from analyzer.diagnostics import Diagnostic
    from analyzer.analysis.report import Report
    from analyzer.workflows.sweep import SweepResult
    from analyzer.workflows.whatif import WhatIf

__all__ = ["render", "TEMPLATE"]

TEMPLATE = "report.html.j2"


@dataclass(frozen=True)
class _Finding:
    """A diagnostic with everything the template prints, formatted."""

    severity: str
    code: str
    name: str
    location: str
    message: str
    notation: str
    seconds: str
    alternative: str
    alternative_seconds: str
    saving: str
    fix: str
    summary: str
    doc_html: str
    verified: str = ""  # `analyze --verify-fixes`: the step after the change (render._common.verified_text)


def _rule_info(code: str) -> tuple[str, str]:
    """(summary, doc as HTML) for a rule code, or empty strings when the rule registry does not know it."""
    from analyzer.errors import AnalyzerError

    try:
        from analyzer.rules.registry import get_rule

        rule = get_rule(code)
    except (ImportError, AnalyzerError):
        return "", ""
    return rule.summary, _markdown(rule.doc)


def _markdown(text: str) -> str:
    """Markdown to HTML, raw HTML in the text escaped (markdown-it-py, which rich already depends on)."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table")
    # Demote headings so a rule doc's `## What it does` sits under the finding's own heading.
    return md.render(text).replace("<h2>", "<h4>").replace("</h2>", "</h4>").replace("<h1>", "<h4>").replace(
        "</h1>", "</h4>")


def _inline(text: str) -> str:
    """One line of Markdown (inline code, emphasis) to HTML, raw HTML escaped."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).renderInline(text)


def _findings(diagnostics: Sequence[Diagnostic]) -> list[_Finding]:
    out = []
    docs: dict[str, tuple[str, str]] = {}
    for d in sorted_diagnostics(diagnostics):
        if d.code not in docs:
            docs[d.code] = _rule_info(d.code)
        summary, doc_html = docs[d.code]
        out.append(_Finding(
            severity=getattr(d.severity, "value", str(d.severity)), code=d.code, name=d.name,
            location=where(d), message=_inline(d.message), notation=d.notation or "",
            seconds=format_seconds(d.seconds) if d.seconds is not None else "",
            alternative=d.alternative or "",
            alternative_seconds=format_seconds(d.alternative_seconds) if d.alternative_seconds is not None else "",
            saving=format_seconds(d.saving_seconds) if d.saving_seconds else "", fix=_inline(d.fix) if d.fix else "",
            summary=summary, doc_html=doc_html, verified=verified_text(d) or "",
        ))
    return out


@dataclass(frozen=True)
class _FindingGroup:
    """The findings of one rule: shown as one card, the first few open, the rest folded."""

    severity: str
    code: str
    name: str
    summary: str
    doc_html: str
    saving: str
    shown: tuple[_Finding, ...]
    folded: tuple[_Finding, ...]

    @property
    def count(self) -> int:
        return len(self.shown) + len(self.folded)


def _finding_groups(diagnostics: Sequence[Diagnostic], open_per_rule: int = 3) -> list[_FindingGroup]:
    """Findings grouped by rule, most severe rule first, then by the rule's largest predicted saving."""
    order = {"error": 2, "warning": 1, "info": 0}
    by_code: dict[str, list[tuple[Diagnostic, _Finding]]] = {}
    for d, f in zip(sorted_diagnostics(diagnostics), _findings(diagnostics)):
        by_code.setdefault(f.code, []).append((d, f))
    groups = []
    for code, items in by_code.items():
        saving = max((d.saving_seconds or 0.0 for d, _ in items), default=0.0)  # savings overlap: never summed
        sev = max((f.severity for _, f in items), key=lambda s: order.get(s, 0))
        first = items[0][1]
        fs = tuple(f for _, f in items)
        groups.append((order.get(sev, 0), saving, _FindingGroup(
            severity=sev, code=code, name=first.name, summary=first.summary, doc_html=first.doc_html,
            saving=format_seconds(saving) if saving else "", shown=fs[:open_per_rule], folded=fs[open_per_rule:])))
    groups.sort(key=lambda t: (-t[0], -t[1], t[2].code))
    return [g for _, _, g in groups]


def _mesh_axes(report: Report) -> list[dict[str, Any]]:
    """Mesh axes with their size and the communication over each (per step)."""
    if report.mesh is None:
        return []
    by_axis = report.totals.by_axis
    axes = []
    for name, size in zip(report.mesh.axis_names, report.mesh.axis_sizes):
        seconds = sum(v for k, v in by_axis.items() if name in str(k).split(","))
        axes.append({"name": name, "size": size, "comm": format_seconds(seconds) if seconds else "—"})
    return axes


def _plan(report: Report) -> dict[str, list[dict[str, str]]]:
    """The plan in notation, by pass: identical collectives (same notation, dtype and time) merged into one
    line with their executions added up, costliest first."""
    frame = report.collectives
    if frame is None or len(frame) == 0:
        return {}
    names = {"forward": "Forward pass", "backward": "Backward pass", "": "Outside the passes"}
    merged: dict[tuple, dict[str, Any]] = {}
    for rec in frame.to_dict(orient="records"):
        pass_ = str(rec.get("pass_") or "")
        seconds = float(rec.get("seconds") or 0.0)
        key = (pass_, str(rec.get("notation") or rec.get("kind")), str(rec.get("dtype") or ""), round(seconds, 12),
               bool(rec.get("overlapped")))
        slot = merged.setdefault(key, {"kind": str(rec.get("kind") or ""), "count": 0, "sites": 0})
        slot["count"] += int(rec.get("count") or 1)
        slot["sites"] += 1
    groups: dict[str, list[tuple[float, dict[str, str]]]] = {}
    for (pass_, notation, _dtype, seconds, overlapped), slot in merged.items():
        total = seconds * slot["count"]
        groups.setdefault(names.get(pass_, pass_.title()), []).append((total, {
            "notation": notation, "kind": slot["kind"], "count": format_count(slot["count"]), "each": format_seconds(seconds),
            "total": format_seconds(total), "overlapped": "overlapped" if overlapped else "",
            "sites": f"{slot['sites']} sites" if slot["sites"] > 1 else "",
        }))
    ordered = {k: groups[k] for k in names.values() if k in groups}
    ordered.update({k: v for k, v in groups.items() if k not in ordered})
    return {k: [item for _, item in sorted(v, key=lambda t: -t[0])] for k, v in ordered.items()}


def _arguments(report: Report) -> list[dict[str, str]]:
    """Argument shardings in notation, formatted (empty for dumps)."""
    return [{"name": r["name"], "shape": r["shape"], "notation": r["notation"] or "(sharding unknown)",
             "per_device": format_bytes(r["bytes_per_device"]) if r["bytes_per_device"] is not None else "—"}
            for r in argument_rows(report.analysis, report.mesh)]


def _dots(report: Report, limit: int = 12) -> list[dict[str, str]]:
    frame = report.dots
    if frame is None or len(frame) == 0:
        return []
    rows = []
    for rec in frame.to_dict(orient="records"):
        seconds, count = rec.get("seconds"), rec.get("count") or 1
        total = float(seconds) * float(count) if seconds is not None and seconds == seconds else 0.0
        rows.append((total, {
            "notation": dot_label(rec),
            "flops": format_flops(rec.get("flops")), "count": format_count(count),
            "total": format_seconds(total), "source": short_source(str(rec.get("source") or "")),
        }))
    rows.sort(key=lambda t: -t[0])
    return [r for _, r in rows[:limit]]


def _step_parts(report: Report) -> list[dict[str, str]]:
    """The step breakdown (`_common.step_breakdown`) formatted: the parts on the step with their share of it,
    then the hidden communication (no share: it is not part of the step)."""
    from analyzer.render.plots import part_colors

    parts = step_breakdown(report)  # on-step parts first, then hidden: step_rows' order, less its total row
    cells = [(p.part, color) for p, color in zip(parts, part_colors(parts))]
    cells.insert(sum(1 for p in parts if p.on_step), ("total", ""))  # between those on the step and the hidden
    return [{"label": label, "seconds": seconds, "share": share, "part": part, "color": color}
            for (label, seconds, share), (part, color) in zip(step_rows(report, parts), cells)]


def _sweep(sweep: SweepResult | None) -> list[dict[str, Any]]:
    if sweep is None:
        return []
    rows = []
    for e in sweep.entries:
        rows.append({
            "rank": e.rank, "strategy": e.plan, "mesh": e.mesh, "ok": e.ok, "error": e.error or "",
            "step": format_seconds(e.step_seconds) if e.ok else "",
            "exposed": format_seconds(e.exposed_comm_seconds) if e.ok else "",
            "mfu": mfu_text(e.mfu) if e.ok else "",
            "comm": format_seconds(e.comm_seconds) if e.ok else "",
            "compute": format_seconds(e.compute_seconds) if e.ok else "",
            "memory": format_bytes(e.memory_bytes) if e.memory_bytes is not None else "—",
            "fits": {True: "yes", False: "no", None: "unknown"}[e.fits], "findings": e.findings, "errors": e.errors,
            "note": "; ".join(x for x in (f"same as #{e.same_as}" if e.same_as else "", f"tie with #{e.tied_with}" if e.tied_with else "", e.note) if x),
        })
    return rows


def _whatif(whatif: Sequence[WhatIf] | None) -> list[dict[str, Any]]:
    if not whatif:
        return []

    return whatif_rows(whatif)


def _short_topology(text: str) -> str:
    """The slice alone (`tpu-v5e slice v5e:4x2`), without the explanation the plan section shows in full."""
    return text.splitlines()[0].split(": ")[0] if text else text


# Rows of the collectives table shown open; the rest are folded under one <details>, so that a deep model's
# report stays a few screens tall (issue 11: a 12-layer model printed 552 rows, 33,000 px).
COLLECTIVES_OPEN = 20
# Lines of each pass in the plan shown open (costliest first); the rest fold under a <details> (a 12-layer
# Llama's backward pass has 25 distinct collectives: with a folded rest its page stays under 8,000 px).
PLAN_OPEN = 12
DOTS_OPEN = 6  # the largest matmuls shown open, of the 12 listed


def _environment():
    from jinja2 import Environment, PackageLoader, StrictUndefined

    return Environment(loader=PackageLoader("analyzer", "templates"), autoescape=True, undefined=StrictUndefined,
                       trim_blocks=True, lstrip_blocks=True)


def render(report: Report, *, sweep: SweepResult | None = None, whatif: Sequence[WhatIf] | None = None) -> str:
    """The report as one self-contained HTML document.

    Args:
      report: the analysed report.
      sweep: a sweep ranking to show above the plan (the report is then the best candidate's).
      whatif: the plan repriced on other hardware (`analyzer.workflows.whatif.compare`), shown as a table.

    Returns:
      HTML text with inline CSS and SVG plots; no external resources.

    Example:
      >>> html = render(report)
      >>> html.startswith("<!DOCTYPE html>"), html.count("<svg") > 0
      (True, True)
    """
    from markupsafe import Markup

    from analyzer.version import __version__
    from analyzer.render import plots
    from analyzer.analysis.schema import REPORT_SCHEMA_VERSION

    def svg(text: str | None) -> Markup | None:
        return Markup(text) if text else None

    groups = collective_groups(report)
    counts = {"error": 0, "warning": 0, "info": 0}
    for d in report.diagnostics:
        sev = getattr(d.severity, "value", str(d.severity))
        counts[sev] = counts.get(sev, 0) + 1
    figures = {
        "kind": svg(plots.kind_plot(report)),
        "axis": svg(plots.axis_plot(report)),
        "layer": svg(plots.layer_plot(report)),
        "breakdown": svg(plots.breakdown_plot(report)),
        "timeline": svg(plots.timeline_plot(report)),
        "sweep": svg(plots.sweep_plot(sweep)) if sweep is not None else None,
    }
    context = {
        "title": report.name or "hlo-analyzer report",
        "plan_lines": [(k, _short_topology(v) if k == "Topology" else v) for k, v in plan_lines(report)],
        "topology": report.topology,
        "headline": headline(report),
        "step_sentence": step_sentence(report),
        "step_parts": _step_parts(report),
        "what_to_do": what_to_do(report),
        "counts": counts,
        "mesh_axes": _mesh_axes(report),
        "plan": _plan(report),
        "dots": _dots(report),
        "arguments": _arguments(report),
        "collectives": groups,
        "collective_sites": sum(g.sites for g in groups),
        "collectives_open": COLLECTIVES_OPEN,
        "plan_open": PLAN_OPEN,
        "dots_open": DOTS_OPEN,
        "findings": _findings(report.diagnostics),
        "finding_groups": _finding_groups(report.diagnostics),
        "memory": memory_lines(report),
        "notes": list(report.notes),
        "warnings": list(report.warnings),
        "figures": figures,
        "sweep": sweep,
        "sweep_rows": _sweep(sweep),
        "whatif_rows": _whatif(whatif),
        "version": __version__,
        "schema_version": REPORT_SCHEMA_VERSION,
        "hardware": report.hardware,
        "kind_colors": plots.KIND_COLORS,
    }
    return _environment().get_template(TEMPLATE).render(**context)
