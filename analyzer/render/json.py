"""The machine-readable report: a plain dict and its JSON text.

The shape is a versioned contract, written as a JSON Schema in `docs/report-schema.json`; its
`schema_version` is `analyzer.analysis.schema.REPORT_SCHEMA_VERSION`. Add optional fields freely; renaming,
removing or retyping a field means bumping the version and the schema together.

Every value is converted to plain JSON: numpy and pandas scalars to Python numbers, tuples to lists, NaN and
infinities to null (JSON has neither), enums to their values.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from analyzer.analysis.schema import COLLECTIVE_COLUMNS, DOT_COLUMNS, REPORT_SCHEMA_VERSION

if TYPE_CHECKING:
    from analyzer.analysis.report import Report
    from analyzer.workflows.sweep import SweepResult
    from analyzer.workflows.whatif import WhatIf

__all__ = ["report_to_dict", "render", "to_jsonable"]


def to_jsonable(value: Any) -> Any:
    """Convert one value to plain JSON types.

    Args:
      value: anything a report holds: numbers (Python, numpy, pandas), strings, tuples, mappings,
        dataclasses, enums, None.

    Returns:
      The same data in dict/list/str/int/float/bool/None, with NaN and infinities as None.

    Example:
      >>> to_jsonable({"axes": ("X", "Y"), "t": float("nan")})
      {'axes': ['X', 'Y'], 't': None}
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    item = getattr(value, "item", None)  # numpy / pandas scalars
    if callable(item) and getattr(value, "ndim", 0) == 0:
        return to_jsonable(item())
    tolist = getattr(value, "tolist", None)  # numpy arrays
    if callable(tolist):
        return to_jsonable(tolist())
    if _is_pandas_missing(value):
        return None
    return str(value)


def _is_pandas_missing(value: Any) -> bool:
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is a base dependency
        return False
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _rows(frame: Any, columns: tuple[str, ...]) -> list[dict[str, Any]]:
    """DataFrame rows as dicts holding exactly `columns` (missing ones as None)."""
    if frame is None or len(frame) == 0:
        return []
    present = [c for c in columns if c in frame.columns]
    rows = []
    for record in frame[present].to_dict(orient="records"):
        rows.append({c: to_jsonable(record.get(c)) for c in columns})
    return rows


def _totals(report: Report) -> dict[str, Any]:
    t = report.totals
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


def _mesh(report: Report) -> dict[str, Any] | None:
    m = report.mesh
    if m is None:
        return None
    return {
        "axis_names": list(m.axis_names),
        "axis_sizes": [int(s) for s in m.axis_sizes],
        "device_ids": [int(d) for d in m.device_ids],
        "axis_types": list(m.axis_types),
    }


def _diagnostic(d: Any) -> dict[str, Any]:
    data = d.to_dict() if hasattr(d, "to_dict") else dataclasses.asdict(d)
    data = to_jsonable(data)
    data["location"] = {k: data.get("location", {}).get(k) for k in ("file", "line", "computation", "instruction", "hlo_line")}
    return data


def report_to_dict(report: Report, *, sweep: SweepResult | None = None,
                   whatif: Sequence[WhatIf] | None = None) -> dict[str, Any]:
    """The report as plain JSON data following `docs/report-schema.json`.

    Args:
      report: an analysed `Report`.
      sweep: the ranking of a sweep whose best candidate `report` is; stored under `"sweep"`.
      whatif: the plan repriced on other hardware (`analyzer.workflows.whatif.compare`); stored under `"what_if"`.

    Returns:
      A dict with `schema_version`, `tool`, the run's identity (name, target, hardware, topology, mesh),
      `totals`, `collectives`, `dots`, `diagnostics`, `notes`, `memory`; `arguments` (the argument shardings
      in notation) when the report knows them; `sweep` and `what_if` when given.

    Example:
      >>> data = report_to_dict(report)
      >>> data["schema_version"], data["collectives"][0]["notation"]
      ('1', 'AllReduce_XY: []{U_XY} -> []')
    """
    from analyzer.version import __version__

    data: dict[str, Any] = {
        "schema_version": REPORT_SCHEMA_VERSION,
        "tool": {"name": "hlo-analyzer", "version": __version__},
        "name": report.name or "",
        "target": report.target,
        "hardware": report.hardware,
        "topology": report.topology,
        "mesh": _mesh(report),
        "totals": _totals(report),
        "collectives": _rows(report.collectives, COLLECTIVE_COLUMNS),
        "dots": _rows(report.dots, DOT_COLUMNS),
        "diagnostics": [_diagnostic(d) for d in report.diagnostics],
        "notes": [str(n) for n in report.notes],
        "memory": None if report.memory is None else {str(k): int(v) for k, v in report.memory.items()},
    }
    from analyzer.render._common import argument_rows

    arguments = argument_rows(report)
    if arguments:
        data["arguments"] = to_jsonable(arguments)
    if report.warnings:
        data["warnings"] = [str(w) for w in report.warnings]
    if sweep is not None:
        data["sweep"] = sweep.to_dict()
    if whatif:
        data["what_if"] = [w.to_dict() for w in whatif]
    return data


def render(report: Report, indent: int | None = 2, *, sweep: SweepResult | None = None,
           whatif: Sequence[WhatIf] | None = None) -> str:
    """The report as JSON text (`report_to_dict` serialised; strict JSON, no NaN).

    Example:
      >>> text = render(report, indent=None)
      >>> json.loads(text)["name"]
      'jit_train_step_fsdp_tp'
    """
    return json.dumps(report_to_dict(report, sweep=sweep, whatif=whatif), indent=indent, ensure_ascii=False, allow_nan=False)
