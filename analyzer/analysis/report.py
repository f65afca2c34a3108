"""The result of an analysis: what `analyzer.analyze` and `analyzer.analyze_hlo` return.

A `Report` is data. Analysis code builds it (analyzer.pipeline), rules add diagnostics to it
(analyzer.rules), renderers turn it into text, JSON, Markdown, HTML and SARIF (analyzer.render). It never
analyses anything itself. Its JSON form is its own (`report_to_dict`, `report_from_dict`: this layer, so that
workflows exchange reports without the renderers); `to_markdown`, `to_html` and `to_text` render it through
the one table of output formats, analyzer/formats.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from analyzer.analysis.context import AnalysisContext
from analyzer.analysis.schema import COLLECTIVE_COLUMNS, DOT_COLUMNS, REPORT_SCHEMA_VERSION
from analyzer.analysis.serialize import dumps, to_jsonable
from analyzer.formats import renderer
from analyzer.theory.mesh import MeshInfo

if TYPE_CHECKING:  # pandas and the IR are heavy or circular to import here
    import pandas as pd

    from analyzer.diagnostics import Diagnostic
    from analyzer.hlo.ir import HloModule

__all__ = ["report_to_dict", "report_from_dict", "COLLECTIVE_COLUMNS", "DOT_COLUMNS", "Totals", "Report", "REPORT_SCHEMA_VERSION"]

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
        """The report as plain JSON data (`report_to_dict`)."""
        return report_to_dict(self)

    def to_json(self, indent: int | None = 2) -> str:
        """The report as JSON text (`report_to_dict`, strict JSON: no NaN)."""
        return dumps(report_to_dict(self), indent=indent)

    def to_markdown(self) -> str:
        """The report as Markdown (the `markdown` output format, analyzer/formats.py)."""
        return renderer("markdown", "report")(self)

    def to_html(self) -> str:
        """The report as one self-contained HTML document (the `html` output format)."""
        return renderer("html", "report")(self)

    def to_text(self) -> str:
        """The report as the terminal prints it, without colour (the `text` output format)."""
        return renderer("text", "report")(self)


def report_to_dict(report: Report) -> dict[str, Any]:
    """The report as plain JSON data following `docs/report-schema.json` (what `Report.to_dict` returns).

    Returns:
      A dict with `schema_version`, `tool`, the run's identity (name, target, hardware, topology, mesh),
      `totals`, `collectives`, `dots`, `diagnostics`, `notes`, `memory`; `topology_spec` (the `Topology` the
      collectives were priced on, as typed fields: analyzer/analysis/topology_json.py) when the report has one;
      `arguments` (the argument shardings in notation) when the report knows them; `warnings` when it has any. (The JSON output format adds a
      sweep's ranking and a what-if table: analyzer/render/json.py.)

    Example:
      >>> data = report_to_dict(report)
      >>> data["schema_version"], data["collectives"][0]["notation"]
      ('1', 'AllReduce_XY: []{U_XY} -> []')
    """
    from analyzer.analysis.arguments import argument_rows
    from analyzer.analysis.topology_json import topology_to_dict
    from analyzer.version import __version__

    data: dict[str, Any] = {
        "schema_version": REPORT_SCHEMA_VERSION,
        "tool": {"name": "hlo-analyzer", "version": __version__},
        "name": report.name or "",
        "target": report.target,
        "hardware": report.hardware,
        "topology": report.topology,
        "mesh": _mesh_dict(report.mesh),
        "totals": _totals_dict(report.totals),
        "collectives": _rows(report.collectives, COLLECTIVE_COLUMNS),
        "dots": _rows(report.dots, DOT_COLUMNS),
        "diagnostics": [_diagnostic_dict(d) for d in report.diagnostics],
        "notes": [str(n) for n in report.notes],
        "memory": None if report.memory is None else {str(k): int(v) for k, v in report.memory.items()},
    }
    spec = topology_to_dict(report.analysis.topology)
    if spec is not None:  # the Topology itself, for pricing after a round trip (analyzer.analysis.topology_json)
        data["topology_spec"] = spec
    arguments = argument_rows(report.analysis, report.mesh)
    if arguments:
        data["arguments"] = to_jsonable(arguments)
    if report.warnings:
        data["warnings"] = [str(w) for w in report.warnings]
    return data


def _rows(frame: Any, columns: tuple[str, ...]) -> list[dict[str, Any]]:
    """DataFrame rows as dicts holding exactly `columns` (missing ones as None)."""
    if frame is None or len(frame) == 0:
        return []
    present = [c for c in columns if c in frame.columns]
    rows = []
    for record in frame[present].to_dict(orient="records"):
        rows.append({c: to_jsonable(record.get(c)) for c in columns})
    return rows


def _totals_dict(t: Totals) -> dict[str, Any]:
    return {
        "comm_seconds": to_jsonable(float(t.comm_seconds)),
        "compute_seconds": to_jsonable(float(t.compute_seconds)),
        "comm_compute_ratio": to_jsonable(float(t.comm_compute_ratio)),
        "comm_bytes": int(t.comm_bytes),
        "flops": to_jsonable(float(t.flops)),
        "by_kind": {str(k): to_jsonable(float(v)) for k, v in t.by_kind.items()},
        "by_axis": {str(k): to_jsonable(float(v)) for k, v in t.by_axis.items()},
        "step_seconds": to_jsonable(float(t.step_seconds)),
        "exposed_comm_seconds": to_jsonable(float(t.exposed_comm_seconds)),
        "exposed_by_axis": {str(k): to_jsonable(float(v)) for k, v in t.exposed_by_axis.items()},
        "matmul_seconds": to_jsonable(float(t.matmul_seconds)),
        "memory_bound_seconds": to_jsonable(float(t.memory_bound_seconds)),
        "model_flops": to_jsonable(float(t.model_flops)),
        "mfu": to_jsonable(float(t.mfu)),
        "hfu": to_jsonable(float(t.hfu)),
        # a pipeline's fill and drain, part of step_seconds: only where the program has a pipeline loop
        **({"bubble_seconds": to_jsonable(float(t.bubble_seconds))} if t.bubble_seconds > 0 else {}),
        # the range the calibration runs' residuals give (analyzer.analysis.calibration): only with a step
        **({"step_range": [to_jsonable(float(t.step_low)), to_jsonable(float(t.step_high))],
            "mfu_range": [to_jsonable(float(t.mfu_low)), to_jsonable(float(t.mfu_high))],
            "range_basis": t.range_basis} if t.step_high > 0 else {}),
    }


def _mesh_dict(m: MeshInfo | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {
        "axis_names": list(m.axis_names),
        "axis_sizes": [int(s) for s in m.axis_sizes],
        "device_ids": [int(d) for d in m.device_ids],
        "axis_types": list(m.axis_types),
    }


def _diagnostic_dict(d: Any) -> dict[str, Any]:
    data = d.to_dict() if hasattr(d, "to_dict") else asdict(d)
    data = to_jsonable(data)
    data["location"] = {k: data.get("location", {}).get(k) for k in ("file", "line", "computation", "instruction", "hlo_line")}
    return data


def report_from_dict(data: Mapping[str, Any]) -> Report:
    """A `Report` rebuilt from its JSON form (`report_to_dict`), for rendering without recompiling.

    The rebuilt report has no HLO module (its `analysis` holds the argument table and the `Topology` its
    `topology_spec` describes), so it can be rendered (every format) and checked by the rules, which price
    alternatives on that topology, but not repriced: `reprice` raises an `AnalyzerError` that says so, as the
    rules that price alternatives do for a report written without a `topology_spec`. Sweeps use it to bring the best candidate's report back from a worker process.

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

    from analyzer.analysis.topology_json import topology_from_dict
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
    spec = data.get("topology_spec")
    topology = topology_from_dict(spec, mesh.axis_names, mesh.axis_sizes) if spec is not None and mesh else None
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
                                 else None, topology=topology),
    )
