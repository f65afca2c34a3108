"""Sweeps: compile each candidate plan (mesh shape x strategy), predict its step time and memory, rank them.

Data first (`SweepEntry`, `SweepResult`, `rank_entries`: pure, cheap to import, used by the renderers),
then `run_sweep`, which compiles candidates in worker processes.

How a step time is predicted: `step_seconds = compute_seconds + comm_seconds`, i.e. no overlap of
communication with compute, an upper bound. `overlap_step_seconds = max(compute, comm)` is the lower bound
if every collective overlapped perfectly; both are reported, candidates are ranked by the upper bound
(ties broken by the lower bound). A candidate whose per-device memory exceeds the chip's HBM ranks after
every candidate that fits, whatever its speed; one that failed to compile ranks last with its error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["COMBINE_RULE", "SweepEntry", "SweepResult", "rank_entries"]

COMBINE_RULE = (
    "step time = compute + communication (no overlap assumed: an upper bound); "
    "max(compute, communication) is the lower bound with perfect overlap. "
    "Candidates that do not fit in HBM rank after those that do."
)


@dataclass(frozen=True)
class SweepEntry:
    """One candidate plan and what the analysis predicts for it.

    Attributes:
      strategy: `dp`, `fsdp`, `tp`, `fsdp+tp` or `ep`.
      mesh: the mesh as `name=size,...` (e.g. `data=4,model=2`).
      comm_seconds: predicted communication seconds per step.
      compute_seconds: predicted compute (roofline of the dots) seconds per step.
      memory_bytes: predicted per-device bytes (arguments + outputs + temporaries), None when unknown.
      hbm_bytes: HBM per chip of the hardware, None when unknown.
      findings: number of rule findings; `errors` of them at severity error.
      error: why the candidate could not be analysed; None when it was.
      rank: 1-based position after ranking (0 before).
    """

    strategy: str
    mesh: str
    comm_seconds: float = float("nan")
    compute_seconds: float = float("nan")
    memory_bytes: int | None = None
    hbm_bytes: int | None = None
    findings: int = 0
    errors: int = 0
    error: str | None = None
    rank: int = 0
    by_kind: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def step_seconds(self) -> float:
        """compute + communication: no overlap assumed."""
        return self.compute_seconds + self.comm_seconds

    @property
    def overlap_step_seconds(self) -> float:
        """max(compute, communication): perfect overlap."""
        return max(self.compute_seconds, self.comm_seconds)

    @property
    def fits(self) -> bool | None:
        """Whether the per-device memory fits in HBM; None when either is unknown."""
        if self.memory_bytes is None or self.hbm_bytes is None:
            return None
        return self.memory_bytes <= self.hbm_bytes

    @property
    def label(self) -> str:
        return f"{self.strategy} @ {self.mesh}"

    def to_dict(self) -> dict[str, Any]:
        from analyzer.render.json import to_jsonable

        return to_jsonable({
            "rank": self.rank, "strategy": self.strategy, "mesh": self.mesh,
            "step_seconds": self.step_seconds if self.ok else None,
            "overlap_step_seconds": self.overlap_step_seconds if self.ok else None,
            "comm_seconds": self.comm_seconds if self.ok else None,
            "compute_seconds": self.compute_seconds if self.ok else None,
            "memory_bytes": self.memory_bytes, "hbm_bytes": self.hbm_bytes, "fits": self.fits,
            "findings": self.findings, "errors": self.errors, "error": self.error, "by_kind": self.by_kind,
        })


def _sort_key(e: SweepEntry) -> tuple:
    if not e.ok:
        return (2, 0.0, 0.0, e.label)
    return (1 if e.fits is False else 0, e.step_seconds, e.overlap_step_seconds, e.label)


def rank_entries(entries: Sequence[SweepEntry]) -> tuple[SweepEntry, ...]:
    """Order candidates best first and number them.

    Args:
      entries: analysed (or failed) candidates in any order.

    Returns:
      The entries sorted by: fits in HBM (or unknown) first, then predicted step time (compute + comm),
      then the perfect-overlap time; failed candidates last. `rank` is set 1..n.

    Example:
      >>> ranked = rank_entries([SweepEntry("tp", "data=1,model=8", 2e-3, 1e-3),
      ...                        SweepEntry("fsdp", "data=8,model=1", 1e-3, 1e-3)])
      >>> [e.strategy for e in ranked]
      ['fsdp', 'tp']
    """
    ordered = sorted(entries, key=_sort_key)
    return tuple(replace(e, rank=i + 1) for i, e in enumerate(ordered))


@dataclass(frozen=True)
class SweepResult:
    """The ranking of a sweep, best first.

    Attributes:
      entries: ranked `SweepEntry`s.
      hardware: hardware the candidates were priced on.
      combine: how step time was predicted from compute and communication (`COMBINE_RULE`).
    """

    entries: tuple[SweepEntry, ...]
    hardware: str
    combine: str = COMBINE_RULE

    @property
    def best(self) -> SweepEntry | None:
        ok = [e for e in self.entries if e.ok]
        return ok[0] if ok else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "hardware": self.hardware,
            "combine": self.combine,
            "best": self.best.label if self.best else None,
            "entries": [e.to_dict() for e in self.entries],
        }
