"""What-if: the same analysed plan priced on other hardware or topologies, side by side, without recompiling.

`analyzer.pipeline.reprice` does the repricing (one report at a time); this module runs it over a list of
alternatives and keeps the figures a comparison table needs, for the `report --what-if` option and the
report renderers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from analyzer.errors import AnalyzerError

if TYPE_CHECKING:
    from analyzer.analysis.report import Report

__all__ = ["WhatIf", "parse_alternative", "compare"]


@dataclass(frozen=True)
class WhatIf:
    """One plan priced on one hardware/topology.

    Attributes:
      hardware: hardware spec name.
      topology: the slice the mesh was laid on, in words (first line of `Report.topology`).
      comm_seconds, compute_seconds: predicted per step.
      predicted_step_seconds, exposed_comm_seconds, mfu: the step model's step, the communication it waits for
        and the MFU (`Totals`); nan when no step was predicted.
      findings: number of rule findings on this hardware; `saving_seconds` their summed predicted saving.
      baseline: True for the report's own hardware (the row the others compare against).
    """

    hardware: str
    topology: str
    comm_seconds: float
    compute_seconds: float
    findings: int = 0
    saving_seconds: float = 0.0
    baseline: bool = False
    predicted_step_seconds: float = float("nan")
    exposed_comm_seconds: float = float("nan")
    mfu: float = float("nan")
    step_low: float = float("nan")
    step_high: float = float("nan")

    @property
    def step_seconds(self) -> float:
        """The predicted step, or compute + communication (no overlap) when none was predicted."""
        if self.predicted_step_seconds == self.predicted_step_seconds and self.predicted_step_seconds > 0:
            return self.predicted_step_seconds
        return self.comm_seconds + self.compute_seconds

    def to_dict(self) -> dict[str, Any]:
        from analyzer.analysis.serialize import to_jsonable

        return to_jsonable({
            "hardware": self.hardware, "topology": self.topology, "comm_seconds": self.comm_seconds,
            "compute_seconds": self.compute_seconds, "step_seconds": self.step_seconds,
            "exposed_comm_seconds": self.exposed_comm_seconds, "mfu": self.mfu,
            "findings": self.findings, "saving_seconds": self.saving_seconds, "baseline": self.baseline,
        })


def parse_alternative(text: str) -> tuple[str, str | None]:
    """`HARDWARE` or `HARDWARE@TOPOLOGY` (e.g. `tpu-v5p@v5p:2x2x2`) -> (hardware, topology or None).

    Example:
      >>> parse_alternative("tpu-v5p@v5p:2x2x2")
      ('tpu-v5p', 'v5p:2x2x2')
    """
    hardware, _, topology = text.strip().partition("@")
    if not hardware:
        raise AnalyzerError(f"what-if {text!r}: write HARDWARE or HARDWARE@TOPOLOGY, e.g. 'tpu-v5p' or "
                            "'tpu-v5p@v5p:2x2x2'")
    return hardware, topology or None


def _row(report: Report, baseline: bool) -> WhatIf:
    return WhatIf(
        hardware=report.hardware,
        topology=report.topology.splitlines()[0].split(": ")[0] if report.topology else "",
        comm_seconds=float(report.totals.comm_seconds), compute_seconds=float(report.totals.compute_seconds),
        findings=len(report.diagnostics),
        saving_seconds=float(sum(d.saving_seconds or 0.0 for d in report.diagnostics if (d.saving_seconds or 0) > 0)),
        baseline=baseline,
        **step_fields(report),
    )


def step_fields(report: Report) -> dict[str, float]:
    """The step model's figures of a report (`Totals`), or none when it predicted no step (what-ifs and sweep
    entries both carry them)."""
    t = report.totals
    if not float(t.step_seconds or 0.0) > 0:
        return {}
    bars = {"step_low": float(t.step_low), "step_high": float(t.step_high)} if t.step_high > 0 else {}
    return {"predicted_step_seconds": float(t.step_seconds), "exposed_comm_seconds": float(t.exposed_comm_seconds),
            "mfu": float(t.mfu), **bars}


def compare(report: Report, alternatives: Iterable[str | tuple[str, str | None]]) -> tuple[WhatIf, ...]:
    """The report's plan on its own hardware and on each alternative, repriced without recompiling.

    Args:
      report: a report from `analyze` (it carries its HLO module in `report.analysis`).
      alternatives: `HARDWARE`, `HARDWARE@TOPOLOGY` strings or (hardware, topology) pairs.

    Returns:
      The baseline row first, then one row per alternative in the order given.

    Example:
      >>> rows = compare(report, ["tpu-v5p", "h100@h100:8"])
      >>> [r.hardware for r in rows]
      ['tpu-v5e', 'tpu-v5p', 'h100']
      >>> rows[1].comm_seconds < rows[0].comm_seconds     # v5p's ICI links are faster than v5e's
      True
    """
    from analyzer.pipeline import reprice

    rows = [_row(report, baseline=True)]
    for alt in alternatives:
        hardware, topology = parse_alternative(alt) if isinstance(alt, str) else alt
        rows.append(_row(reprice(report, hardware=hardware, topology=topology), baseline=False))
    return tuple(rows)
