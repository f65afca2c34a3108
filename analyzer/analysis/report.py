"""The result of an analysis: what `analyzer.analyze` and `analyzer.analyze_hlo` return.

A `Report` is data. Analysis code builds it (analyzer.pipeline), rules add diagnostics to it
(analyzer.rules), renderers turn it into text, JSON, Markdown, HTML and SARIF (analyzer.render). It never
analyses anything itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from analyzer.analysis.context import AnalysisContext
from analyzer.analysis.schema import COLLECTIVE_COLUMNS, DOT_COLUMNS, REPORT_SCHEMA_VERSION
from analyzer.theory.mesh import MeshInfo

if TYPE_CHECKING:  # pandas and the IR are heavy or circular to import here
    import pandas as pd

    from analyzer.diagnostics import Diagnostic
    from analyzer.hlo.ir import HloModule

__all__ = ["report_from_dict", "COLLECTIVE_COLUMNS", "DOT_COLUMNS", "Totals", "Report", "REPORT_SCHEMA_VERSION"]

@dataclass(frozen=True)
class Totals:
    """Per-step totals. Seconds are predicted on the report's hardware and topology.

    Attributes:
      comm_seconds: every collective priced alone and summed (what the links carry, overlapped or not).
      compute_seconds: all compute of the step (dots by the roofline, every other instruction by its HBM
        bytes), run back to back; see analyzer.analysis.step.
      by_kind, by_axis: comm_seconds by collective kind and by mesh axis set.
      comm_bytes: bytes the collectives move per step; flops: the dots' FLOPs per device per step.
      step_seconds: the predicted step: compute plus the communication it waits for (analyzer.analysis.step).
      exposed_comm_seconds: step_seconds - compute_seconds: communication not hidden behind compute.
      exposed_by_axis: exposed_comm_seconds by mesh axis set (the keys of by_axis).
      matmul_seconds: the dots' FLOPs / peak (what compute_seconds meant before the step model).
      memory_bound_seconds: the part of compute_seconds bound by HBM bandwidth.
      model_flops: the model's FLOPs of one step, whatever the plan: the dots of the program before
        partitioning at global size, once per program, remat recompute left out
        (`analyzer.analysis.dots.model_flops`).
      mfu: model_flops / (step_seconds x peak x chips); hfu: the same with every FLOP the chips execute (a
        plan's redundant compute and remat included): hfu / mfu above 1 is repeated work.
      bubble_seconds: the part of step_seconds a pipeline spends filling and draining its stages (stages - 1
        iterations of each pipeline loop, analyzer.analysis.step); 0 without a pipeline.
      step_low, step_high, mfu_low, mfu_high: the range of the predicted step and MFU that the step model's
        residuals on its calibration runs give (`analyzer.analysis.calibration`; `range_basis` says it in
        words); 0 without a step.
    """

    comm_seconds: float
    compute_seconds: float
    by_kind: Mapping[str, float] = field(default_factory=dict)
    by_axis: Mapping[str, float] = field(default_factory=dict)
    comm_bytes: int = 0
    flops: float = 0.0
    step_seconds: float = 0.0
    exposed_comm_seconds: float = 0.0
    exposed_by_axis: Mapping[str, float] = field(default_factory=dict)
    matmul_seconds: float = 0.0
    memory_bound_seconds: float = 0.0
    model_flops: float = 0.0
    mfu: float = 0.0
    hfu: float = 0.0
    bubble_seconds: float = 0.0
    step_low: float = 0.0
    step_high: float = 0.0
    mfu_low: float = 0.0
    mfu_high: float = 0.0
    range_basis: str = ""

    @property
    def comm_compute_ratio(self) -> float:
        return self.comm_seconds / self.compute_seconds if self.compute_seconds > 0 else float("inf")


@dataclass(frozen=True)
class Report:
    """One analysed program.

    Attributes:
      collectives: pandas DataFrame, one row per logical collective, columns `COLLECTIVE_COLUMNS`.
      dots: pandas DataFrame, one row per dot, columns `DOT_COLUMNS`.
      totals: `Totals`.
      hlo: the parsed `HloModule` the collectives were read from.
      mesh: `MeshInfo`, or None for a dump read without a mesh.
      hardware: name of the hardware spec used (e.g. "tpu-v5e").
      topology: how the mesh was laid on the hardware, in words (e.g. "v5e:4x2, X->x (ring 4, no wrap)").
      target: "cpu", "tpu:v5e:2x4", or "dump".
      diagnostics: findings of the rules (empty until rules ran).
      notes: sentences the reader needs (assumptions, e.g. the topology chosen for the cpu target).
      warnings: what may make the figures wrong, shown first in every format (e.g. only the backend's
        final module was read, whose collectives the backend may have rewritten).
      memory: per-device bytes from `compiled.memory_analysis()` when known.
      analysis: the live objects the rules, `reprice` and the renderers need (`AnalysisContext`: module,
        call graph, hardware spec, topology, collective and dot records, ...); not serialised, not compared.
    """

    collectives: pd.DataFrame
    dots: pd.DataFrame
    totals: Totals
    hlo: HloModule | None
    mesh: MeshInfo | None
    hardware: str
    topology: str
    target: str
    diagnostics: Sequence[Diagnostic] = ()
    notes: Sequence[str] = ()
    memory: Mapping[str, int] | None = None
    warnings: Sequence[str] = ()
    name: str = ""
    analysis: AnalysisContext = field(default_factory=AnalysisContext, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        from analyzer.render import json as render_json

        return render_json.report_to_dict(self)

    def to_json(self, indent: int | None = 2) -> str:
        from analyzer.render import json as render_json

        return render_json.render(self, indent=indent)

    def to_markdown(self) -> str:
        from analyzer.render import markdown

        return markdown.render(self)

    def to_html(self) -> str:
        from analyzer.render import html

        return html.render(self)

    def to_text(self) -> str:
        from analyzer.render import terminal

        return terminal.render(self)


def report_from_dict(data: Mapping[str, Any]) -> Report:
    """A `Report` rebuilt from its JSON form (`report_to_dict`), for rendering without recompiling.

    The rebuilt report has no HLO module and no topology (its `analysis` holds only the argument table), so it
    can be rendered (every format) but not repriced or re-checked: `reprice` and the rules that price
    alternatives raise an `AnalyzerError` that says so. Sweeps use it to bring the best candidate's report back from a worker process.

    Args:
      data: a dict following docs/report-schema.json.

    Returns:
      The `Report`.

    Raises:
      AnalyzerError: the data is not a report of this schema version, or a collective row has a field of the
        wrong type (naming the row and the field).

    Example:
      >>> again = report_from_dict(report.to_dict())
      >>> again.totals == report.totals
      True
    """
    import pandas as pd

    from analyzer.diagnostics import Diagnostic, Location, Severity
    from analyzer.errors import AnalyzerError

    version = data.get("schema_version") if isinstance(data, Mapping) else None
    if version != REPORT_SCHEMA_VERSION:
        raise AnalyzerError(f"not a hlo-analyzer report of schema version {REPORT_SCHEMA_VERSION} (got "
                            f"{version!r}); see docs/report-schema.json")
    from analyzer.analysis.schema import check_collective_row

    collectives = data.get("collectives", [])
    if not isinstance(collectives, list):
        raise AnalyzerError(f"report 'collectives' must be a list of rows, got {type(collectives).__name__}")
    for i, r in enumerate(collectives):
        check_collective_row(r, where=str(data.get("name") or "report"), index=i)
    rows = [dict(r, axes=tuple(r.get("axes") or ())) for r in collectives]
    for r in rows:
        if isinstance(r.get("global_shape"), list):
            r["global_shape"] = tuple(r["global_shape"])
    t = data["totals"]
    totals = Totals(comm_seconds=float(t["comm_seconds"]), compute_seconds=float(t["compute_seconds"]),
                    by_kind=dict(t.get("by_kind", {})), by_axis=dict(t.get("by_axis", {})),
                    comm_bytes=int(t.get("comm_bytes", 0)), flops=float(t.get("flops", 0.0)),
                    step_seconds=float(t.get("step_seconds", 0.0)),
                    exposed_comm_seconds=float(t.get("exposed_comm_seconds", 0.0)),
                    exposed_by_axis=dict(t.get("exposed_by_axis", {})),
                    matmul_seconds=float(t.get("matmul_seconds", 0.0)),
                    memory_bound_seconds=float(t.get("memory_bound_seconds", 0.0)),
                    model_flops=float(t.get("model_flops", 0.0)), mfu=float(t.get("mfu", 0.0)),
                    bubble_seconds=float(t.get("bubble_seconds", 0.0)),
                    step_low=float(t.get("step_range", (0.0, 0.0))[0]),
                    step_high=float(t.get("step_range", (0.0, 0.0))[1]),
                    mfu_low=float(t.get("mfu_range", (0.0, 0.0))[0]),
                    mfu_high=float(t.get("mfu_range", (0.0, 0.0))[1]), range_basis=str(t.get("range_basis", "")),
                    hfu=float(t.get("hfu", 0.0)))
    m = data.get("mesh")
    mesh = None if m is None else MeshInfo(tuple(m["axis_names"]), tuple(m["axis_sizes"]), tuple(m["device_ids"]),
                                           tuple(m.get("axis_types", ())))
    diagnostics = []
    for d in data.get("diagnostics", []):
        loc = d.get("location") or {}
        diagnostics.append(Diagnostic(
            code=d["code"], name=d["name"], message=d["message"], severity=Severity(d["severity"]),
            location=Location(**{k: loc.get(k) for k in ("file", "line", "computation", "instruction", "hlo_line", "context")}),
            notation=d.get("notation"), seconds=d.get("seconds"), alternative=d.get("alternative"),
            alternative_seconds=d.get("alternative_seconds"), saving_seconds=d.get("saving_seconds"),
            fix=d.get("fix"), details=dict(d.get("details") or {})))
    return Report(
        collectives=pd.DataFrame(rows, columns=list(COLLECTIVE_COLUMNS)),
        dots=pd.DataFrame(data.get("dots", []), columns=list(DOT_COLUMNS)), totals=totals, hlo=None, mesh=mesh,
        hardware=data["hardware"], topology=data.get("topology", ""), target=data["target"],
        diagnostics=tuple(diagnostics), notes=tuple(data.get("notes", [])), warnings=tuple(data.get("warnings", [])),
        memory=None if data.get("memory") is None else dict(data["memory"]), name=data.get("name", ""),
        analysis=AnalysisContext(argument_rows=tuple(dict(a) for a in data["arguments"]) if data.get("arguments")
                                 else None),
    )
