"""Reduction rules: an all-reduce whose result each device only reads a shard of (sharding.md, "More about
the ReduceScatter")."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

from analyzer.diagnostics import Diagnostic, Severity
from analyzer.rules.common import axes_text
from analyzer.rules.context import RuleContext
from analyzer.analysis.dataflow import only_used_sliced
from analyzer.rules.messages import Message
from analyzer.rules.registry import Option, rule

__all__ = ["all_reduce_not_reduce_scatter"]


@dataclass(frozen=True)
class CollectiveCouldScatter(Message):
    """HA103: an all-reduce whose result each device only reads its shard of."""

    axes: str
    seconds: float
    alternative_seconds: float
    count: float

    template: ClassVar[str] = (
        "all-reduce over {axes} whose result each device only reads its shard of: a reduce-scatter moves half as "
        "much ({seconds:time} -> {alternative_seconds:time} per call, x{count:g} per step)."
    )


@rule(
    code="HA103",
    name="all-reduce-not-reduce-scatter",
    severity=Severity.WARNING,
    summary="An all-reduce whose result is only ever used sharded: a reduce-scatter costs half.",
    options=(Option("min_saving_seconds", 1e-7, "Ignore findings that save less than this per step."),),
)
def all_reduce_not_reduce_scatter(ctx: RuleContext) -> Iterator[Diagnostic]:
    """## What it does
    Finds all-reduces whose result every device only reads a shard of: every use ends, through
    element-wise ops, in a slice at the device's own offset.

    ## Why is this bad?
    An AllReduce is a ReduceScatter followed by an AllGather and costs `2 V / W_ici`. When each device
    keeps only its shard, the AllGather half is wasted: `ReduceScatter_X: [A, B]{U_X} -> [A_X, B]` costs
    `V / W_ici`, and the element-wise work runs on the shard too.

    ## Example
    ```python
    y = jax.lax.psum(partial, "X")              # AllReduce_X
    y = jax.nn.gelu(y)
    mine = jax.lax.dynamic_slice_in_dim(y, jax.lax.axis_index("X") * n, n)
    ```

    ## Use instead
    ```python
    mine = jax.nn.gelu(jax.lax.psum_scatter(partial, "X", tiled=True))   # ReduceScatter_X
    ```
    With `jit` shardings: give the result the sharded layout (`out_shardings` or
    `with_sharding_constraint(y, P("X", ...))`) right after the reduction.

    ## References
    "How to Scale Your Model", sharding chapter, "More about the ReduceScatter" and Problem 9 part 2.
    """
    facts = ctx.facts
    min_saving = float(ctx.option("min_saving_seconds"))
    for c in facts.collectives:
        if c.kind != "all-reduce" or c.inst is None or c.comp is None:
            continue
        marked = getattr(c.record, "only_used_sharded", None) if c.record is not None else None
        if not (marked or only_used_sliced(c.comp, c.inst, facts.users(c.comp))):
            continue
        alt = facts.price_like(c, "reduce-scatter", c.bytes, c.axes)
        step = facts.step_saving([(c, alt)])
        if step.seconds < min_saving:
            continue
        axes = axes_text(c.axes)
        yield ctx.diagnostic(
            CollectiveCouldScatter(axes=axes, seconds=c.seconds, alternative_seconds=alt, count=c.count),
            location=c.location(),
            notation=c.notation or None,
            seconds=c.seconds * c.count,
            alternative=f"ReduceScatter_{axes} (then the element-wise ops on the shard)",
            alternative_seconds=alt * c.count,
            step=step,
            fix=f"reduce-scatter instead: jax.lax.psum_scatter(x, {c.axes[0]!r}, tiled=True) in shard_map, or "
                f"constrain the result to the sharded layout right after the reduction",
            details={"bytes": c.bytes, "count": c.count},
        )
