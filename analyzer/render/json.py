"""The JSON output format: a report's JSON form (`analyzer.analysis.report.report_to_dict`) as text, with a
sweep's ranking and a what-if table when given.

The shape is a versioned contract, written as a JSON Schema in `docs/report-schema.json`; its
`schema_version` is `analyzer.analysis.schema.REPORT_SCHEMA_VERSION`. Add optional fields freely; renaming,
removing or retyping a field means bumping the version and the schema together. Values are plain JSON
(`analyzer.analysis.serialize.to_jsonable`): no NaN, no infinities.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from analyzer.analysis.report import report_to_dict
from analyzer.analysis.serialize import dumps

if TYPE_CHECKING:
    from analyzer.analysis.report import Report
    from analyzer.workflows.sweep import SweepResult
    from analyzer.workflows.whatif import WhatIf

__all__ = ["render"]


def render(report: Report, indent: int | None = 2, *, sweep: SweepResult | None = None,
           whatif: Sequence[WhatIf] | None = None) -> str:
    """The report as JSON text: `report_to_dict`, plus `"sweep"` (the ranking of a sweep whose best candidate
    `report` is) and `"what_if"` (the plan repriced on other hardware, `analyzer.workflows.whatif.compare`)
    when given; strict JSON, no NaN.

    Example:
      >>> import json
      >>> text = render(report, indent=None)
      >>> json.loads(text)["name"]
      'jit_train_step_fsdp_tp'
    """
    data = report_to_dict(report)
    if sweep is not None:
        data["sweep"] = sweep.to_dict()
    if whatif:
        data["what_if"] = [w.to_dict() for w in whatif]
    return dumps(data, indent=indent)
