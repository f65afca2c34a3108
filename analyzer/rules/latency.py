"""Latency rules: collectives too small to use the links' bandwidth (sharding.md, "A note on ICI latency";
inference.md appendix C)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

from analyzer.diagnostics import Diagnostic, Severity
from analyzer.rules.common import axes_text, fmt_b
from analyzer.rules.context import RuleContext
from analyzer.rules.facts import Coll
from analyzer.rules.messages import Message
from analyzer.rules.registry import Option, rule
from analyzer.theory.roofline import latency_threshold_bytes

__all__ = ["latency_bound_collectives"]



# The jax primitives of collectives a user writes (shard_map, pmap): an op_name ending in one of them.
_USER_COLLECTIVES = ("psum", "pmax", "pmin", "pmean", "all_gather", "psum_scatter", "reduce_scatter", "all_to_all",
                     "ppermute", "pbroadcast", "ragged_all_to_all")


def user_collective(op_name: str | None) -> bool:
    """Whether the user wrote the collective (`jax.lax.psum` and kin), not XLA (a gradient's reduction).

    Example:
        >>> user_collective("jit(f)/shard_map/psum_invariant"), user_collective("jit(f)/transpose(jvp())/dot_general")
        (True, False)
    """
    from analyzer.analysis.mapping import op_label

    label = op_label(op_name)
    return any(label == p or label.startswith(p + "_") for p in _USER_COLLECTIVES)

@dataclass(frozen=True)
class LatencyBoundGroup(Message):
    """HA301, several: latency-bound collectives of one kind over the same axes that could be one."""

    members: int
    kind: str
    axes: str
    threshold_bytes: float
    hardware: str
    seconds: float
    total_bytes: float
    alternative_seconds: float
    count: float
    before_combiners: bool
    inserted: bool = False  # XLA inserted them (gradient reductions): information, no code of the user's to change

    template: ClassVar[str] = (
        "{members} latency-bound {kind}s over {axes} in one computation (chunks under {threshold_bytes:bytes} per "
        "hop on {hardware}): {seconds:time} per call where one combined {kind} of {total_bytes:bytes} takes "
        "{alternative_seconds:time} (x{count:g} per step){tail}"
    )

    @property
    def tail(self) -> str:
        who = " XLA inserted them (no psum of yours), for information." if self.inserted else ""
        return (" (read before XLA's combiners, which may merge independent ones on TPU and GPU)." + who
                if self.before_combiners else "." + who)


@dataclass(frozen=True)
class LatencyBoundRepeated(Message):
    """HA301, one: a latency-bound collective run many times per step."""

    kind: str
    axes: str
    count: float
    chunk_bytes: float
    threshold_bytes: float
    hardware: str
    seconds: float
    bandwidth_seconds: float

    template: ClassVar[str] = (
        "latency-bound {kind} over {axes} run {count:g} times per step: {chunk_bytes:bytes} per device is under "
        "the {threshold_bytes:bytes} per-hop threshold on {hardware}, so each call costs {seconds:time} where its "
        "bytes alone take {bandwidth_seconds:time} at full bandwidth."
    )


@rule(
    code="HA301",
    name="latency-bound-collectives",
    severity=Severity.WARNING,
    summary="Collectives whose per-hop chunks are under the latency threshold (about 45 kB on v5e).",
    options=(
        Option("min_group", 2, "Fire on this many latency-bound collectives of one kind and axes in one computation."),
        Option("min_count", 8, "Also report (as info) a single latency-bound collective run this many times per step."),
        Option("min_saving_seconds", 1e-7, "Ignore findings that save less than this per step."),
    ),
)
def latency_bound_collectives(ctx: RuleContext) -> Iterator[Diagnostic]:
    """## What it does
    Finds collectives whose per-hop chunk (the shard each device forwards) is smaller than one-way link
    bandwidth x hop latency (4.5e10 B/s x 1 us = 45 kB on TPU v5e), so they cost about `T_min` per hop
    whatever their size. Several of one kind over the same axes in one computation could travel as one;
    a single one repeated many times per step (in a loop) is reported for information. Reductions XLA
    inserted (a gradient's sums, no `psum` of the user's) are information too: there is no call to combine,
    and the compiler's combiners may merge them; the advice to write one `psum(tree)` is for collectives the
    user wrote.

    ## Why is this bad?
    `T = max(T_min X / 2, V / W_ici)`: below the threshold, bytes are free and hops cost. N small
    collectives pay N latency floors where one combined collective pays one.

    ## Example
    ```python
    for g in grads:                       # 64 small psums, each ~3 us of latency
        g = jax.lax.psum(g, "X")
    ```

    ## Use instead
    ```python
    grads = jax.lax.psum(grads, "X")      # one collective over the whole pytree
    ```
    Or choose a layout whose collectives are bigger or cross fewer hops (a smaller axis).

    ## References
    "How to Scale Your Model", sharding chapter, "A note on ICI latency" and Problem 3; inference
    chapter, appendix C (latency-bound collectives).
    """
    facts = ctx.facts
    chip = facts.hardware
    threshold = latency_threshold_bytes(chip)
    min_group = int(ctx.option("min_group"))
    min_count = int(ctx.option("min_count"))
    min_saving = float(ctx.option("min_saving_seconds"))
    groups: dict[tuple[str, str, tuple[str, ...], float], list[Coll]] = {}
    for c in facts.collectives:
        if not c.axes or c.seconds <= 0:
            continue
        chunk = c.bytes / max(c.group_size, 1)
        if c.regime == "latency" or chunk < threshold:
            groups.setdefault((c.computation, c.kind, c.axes, c.count), []).append(c)
    # Rows split from one combined (tuple) collective already travel together: one unit per instruction.
    for key, members in list(groups.items()):
        units: dict[str, Coll] = {}
        for m in members:
            units.setdefault(m.instruction or str(m.row), m)
        groups[key] = list(units.values())
    for (_comp, kind, axes, count), members in sorted(groups.items(), key=lambda kv: str(kv[0])):
        if len(members) >= min_group:
            total = sum(m.bytes for m in members)
            alt = facts.price_like(members[0], kind, total, axes)
            current = sum(m.seconds for m in members)
            # one combined collective: each member's share of it, by its own time
            step = facts.step_saving([(m, m.seconds * alt / current if current > 0 else 0.0) for m in members])
            if step.seconds < min_saving:
                continue
            main = max(members, key=lambda m: m.seconds)
            written = any(user_collective(m.op_name) for m in members)
            yield ctx.diagnostic(
                LatencyBoundGroup(members=len(members), kind=kind, axes=axes_text(axes), threshold_bytes=threshold,
                                  hardware=chip.name, seconds=current, total_bytes=total, alternative_seconds=alt,
                                  count=count, before_combiners=ctx.report.target == "cpu",
                                  inserted=not written),
                severity=None if written else Severity.INFO,
                location=main.location(),
                notation=main.notation or None,
                seconds=current * count,
                alternative=f"one {kind} over {axes_text(axes)} of {fmt_b(total)}",
                alternative_seconds=alt * count,
                step=step,
                fix=("combine them: reduce the whole pytree in one call (jax.lax.psum(tree, axis)) or concatenate "
                     "the arrays before the collective; or pick a layout with fewer, larger collectives") if written
                else (f"no code of yours to change: XLA inserted these reductions (no psum of yours); shard fewer "
                      f"small arrays over {axes_text(axes)} (keep biases and norm scales replicated) for fewer of them"),
                details={"members": [m.instruction for m in members], "threshold_bytes": threshold,
                         "inserted_by_xla": not written},
            )
        else:
            for m in members:
                if m.count < min_count:
                    continue
                # What the same bytes cost at full bandwidth, with no hop latency (the chapter's V / W forms).
                bandwidth_only = facts.price(kind, m.bytes, axes).bandwidth_seconds
                overhead = max(0.0, m.seconds - bandwidth_only)
                step = facts.step_saving([(m, m.seconds - overhead)])
                if step.seconds < min_saving:
                    continue
                yield ctx.diagnostic(
                    LatencyBoundRepeated(kind=kind, axes=axes_text(axes), count=m.count,
                                         chunk_bytes=m.bytes / max(m.group_size, 1), threshold_bytes=threshold,
                                         hardware=chip.name, seconds=m.seconds,
                                         bandwidth_seconds=m.seconds - overhead),
                    severity=Severity.INFO,
                    location=m.location(),
                    notation=m.notation or None,
                    seconds=m.seconds * m.count,
                    alternative="the same bytes moved at full bandwidth (batched, or over fewer hops)",
                    alternative_seconds=(m.seconds - overhead) * m.count,
                    step=step,
                    fix="batch the work so each collective carries more (e.g. several layers or micro-batches at "
                        "once), or shard this dimension over a smaller axis (fewer hops)",
                    details={"threshold_bytes": threshold, "count": m.count},
                )
