"""Budget rules: predicted communication per step against limits the user configured."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

from analyzer.diagnostics import Diagnostic, Location, Severity
from analyzer.rules.common import fmt_s
from analyzer.rules.context import RuleContext
from analyzer.rules.messages import Message
from analyzer.rules.registry import rule

__all__ = ["comm_budget_exceeded", "comm_compute_ratio_exceeded"]


def _top(ctx: RuleContext, n: int = 3) -> tuple[str, Location]:
    colls = sorted(ctx.facts.collectives, key=lambda c: -c.total_seconds)[:n]
    text = "; ".join(f"{c.notation or c.kind} {fmt_s(c.total_seconds)}" for c in colls)
    return text, colls[0].location() if colls else Location()


@dataclass(frozen=True)
class CommBudgetExceeded(Message):
    """HA501."""

    comm_seconds: float
    budget: float
    largest: str = ""

    template: ClassVar[str] = "predicted communication {comm_seconds:time} per step is over the budget of {budget:time}{top}."

    @property
    def top(self) -> str:
        return f"; largest: {self.largest}" if self.largest else ""


@rule(code="HA501", name="comm-budget-exceeded", severity=Severity.ERROR,
      summary="Predicted communication per step is over `budgets.comm-seconds-per-step`.", predicts_saving=False)
def comm_budget_exceeded(ctx: RuleContext) -> Iterator[Diagnostic]:
    """## What it does
    Compares the predicted communication time per call of the function (every collective, times its
    executions) with `comm-seconds-per-step` under `[tool.hlo-analyzer.budgets]`.

    ## Why is this bad?
    A team sets the budget from its step-time target; going over means the step is slower than planned,
    before any profile shows it. The finding names the collectives that cost most.

    ## Example
    ```toml
    [tool.hlo-analyzer.budgets]
    comm-seconds-per-step = 0.002
    ```
    with a plan that predicts 3.1 ms of communication.

    ## Use instead
    Apply the other findings (each has its saving), or raise the budget on purpose.

    ## References
    "How to Scale Your Model", sharding chapter, collective costs; training chapter, step time.
    """
    budget = ctx.config.budgets.comm_seconds_per_step
    totals = ctx.report.totals
    if budget is None or totals is None or totals.comm_seconds <= budget:
        return
    top, loc = _top(ctx)
    yield ctx.diagnostic(
        CommBudgetExceeded(comm_seconds=totals.comm_seconds, budget=budget, largest=top or ""),
        location=loc,
        seconds=totals.comm_seconds,
        alternative=f"a plan within {fmt_s(budget)}",
        alternative_seconds=budget,
        saving_seconds=totals.comm_seconds - budget,
        fix="apply the other findings' fixes, or raise budgets.comm-seconds-per-step",
        details={"budget": budget, "comm_seconds": totals.comm_seconds},
    )


@dataclass(frozen=True)
class CommComputeRatioExceeded(Message):
    """HA502."""

    comm_seconds: float
    compute_seconds: float
    budget: float
    largest: str = ""

    template: ClassVar[str] = (
        "predicted communication is {ratio:.2f}x compute per step ({comm_seconds:time} against "
        "{compute_seconds:time}), over the budget of {budget:g}x{top}."
    )

    @property
    def ratio(self) -> float:
        return self.comm_seconds / self.compute_seconds

    @property
    def top(self) -> str:
        return f"; largest: {self.largest}" if self.largest else ""


@rule(code="HA502", name="comm-compute-ratio-exceeded", severity=Severity.ERROR,
      summary="Predicted communication / compute per step is over `budgets.comm-compute-ratio`.", predicts_saving=False)
def comm_compute_ratio_exceeded(ctx: RuleContext) -> Iterator[Diagnostic]:
    """## What it does
    Compares predicted communication seconds over compute seconds (the dots' FLOPs at the chip's peak)
    per step with `comm-compute-ratio` under `[tool.hlo-analyzer.budgets]`.

    ## Why is this bad?
    Communication that is a large fraction of compute cannot all hide behind it; above 1 the step is
    communication-bound: the chips wait on the network.

    ## Example
    ```toml
    [tool.hlo-analyzer.budgets]
    comm-compute-ratio = 0.5
    ```

    ## Use instead
    Raise the per-chip batch, use fewer shards on the busiest axis, or apply the other findings.

    ## References
    "How to Scale Your Model", training chapter, rooflines (`T_comms` against `T_math`).
    """
    budget = ctx.config.budgets.comm_compute_ratio
    totals = ctx.report.totals
    if budget is None or totals is None or totals.compute_seconds <= 0:
        return
    ratio = totals.comm_seconds / totals.compute_seconds
    if ratio <= budget:
        return
    top, loc = _top(ctx)
    allowed = budget * totals.compute_seconds
    yield ctx.diagnostic(
        CommComputeRatioExceeded(comm_seconds=totals.comm_seconds, compute_seconds=totals.compute_seconds,
                                 budget=budget, largest=top or ""),
        location=loc,
        seconds=totals.comm_seconds,
        alternative=f"communication within {budget:g}x compute ({fmt_s(allowed)})",
        alternative_seconds=allowed,
        saving_seconds=totals.comm_seconds - allowed,
        fix="apply the other findings' fixes, or raise budgets.comm-compute-ratio",
        details={"budget": budget, "ratio": ratio},
    )
