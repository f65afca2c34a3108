"""Resharding rules: communication that exists only because a producer and its consumer disagree on a
sharding (sharding.md, "Our final communication primitive: the AllToAll"; case 4)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import ClassVar

from analyzer.diagnostics import Diagnostic, Location, Severity
from analyzer.rules.common import axes_text, is_explicit_collective, partition_spec, sides
from analyzer.rules.context import RuleContext
from analyzer.analysis.dataflow import dot_uses, only_used_sliced
from analyzer.rules.messages import Message
from analyzer.rules.registry import Option, rule
from analyzer.hlo.opcodes import MOVING_COLLECTIVES, RELABEL

__all__ = ["resharding_traffic", "full_rematerialization", "constraint_reshard", "constraint_changes"]


def _location(c) -> Location:
    """Where a reshard's finding points: its row's line (a with_sharding_constraint's, when one forced it), with
    the row's context (the library frame, the constraint whose layout it starts from)."""
    extra = getattr(c.record, "extra", None) or {}
    return replace(c.location(), context=str(extra.get("context") or "") or None)


def _forced_by(c) -> str:
    """`file:line` of the with_sharding_constraint that forced a reshard, or ""."""
    extra = getattr(c.record, "extra", None) or {}
    return str(extra.get("declared") or "") if extra.get("op") == "reshard for with_sharding_constraint" else ""


def _argument_layout(c, facts, after: str) -> tuple[str, str, str]:
    """(the program argument a reshard moves, its PartitionSpec now, the consumer's layout `after` as its spec) when
    the collective moves an argument unchanged (its row's `array`; the same rank as `after`), so the change is that
    argument's in-sharding (`batch['y']: P(None, None, 'data') -> P('data')`); ("", "", "") otherwise."""
    import re

    from analyzer.rules.common import _split_axes
    from analyzer.rules.compute import spec_text

    extra = getattr(c.record, "extra", None) or {}
    name = str(extra.get("array") or "") or _moved_parameter(c, facts)
    dims = facts.arguments.specs.get(name) if name else None
    m = re.match(r"\s*\[([^\]]*)\]", after or "")
    if not dims or not m:
        return "", "", ""
    wanted = []
    for dim in (d.strip() for d in m.group(1).split(",") if d.strip()):
        sub = dim.partition("_")[2].strip("{}")
        wanted.append(tuple(_split_axes(sub, facts.mesh_axes)) if sub else ())
    if len(wanted) != len(dims) or [tuple(d) for d in dims] == wanted:
        return "", "", ""
    return name, spec_text(dims), spec_text(wanted)


def _reshard_fix(forced: str, before: str, spec: str, mesh_axes: tuple[str, ...], argument: tuple[str, str, str]
                 ) -> str:
    """HA302's fix: the argument's PartitionSpec (`argument`: name, now, wanted), else the constraint that forced
    it (`forced`), else the producer's output."""
    name, now, wanted = argument
    held = partition_spec(before, mesh_axes) if forced and before and spec else ""
    if name:
        return f"{name}: {now} -> {wanted}: the argument arrives in the layout its consumer reads, so no reshard is needed"
    if held:
        return (f"write {held} (the layout the value already has) in the with_sharding_constraint at {forced}, "
                f"or give the value {spec} where it is made, so no reshard is needed between them")
    if spec:
        return (f"shard the producer's output as {spec} (with_sharding_constraint / out_shardings), "
                f"or make the consumer accept {before}")
    return "give producer and consumer the same PartitionSpec, with the mesh axes in the same order"


def _moved_parameter(c, facts) -> str:
    """The argument (its pytree path) whose value a collective of the entry computation moves through views alone
    (a reshape that splits the dim the all-to-all exchanges, a transpose), "" for a computed value."""
    from analyzer.analysis.roles import argument_name

    if c.comp is None or c.comp is not facts.entry or c.inst is None or not c.inst.operands:
        return ""
    inst = c.comp.by_name.get(c.inst.operands[0].name)
    for _ in range(8):
        if inst is None or inst.opcode == "parameter":
            break
        inst = c.comp.by_name.get(inst.operands[0].name) if inst.opcode in RELABEL and inst.operands else None
    return argument_name(inst) if inst is not None and inst.opcode == "parameter" else ""


def _rematerialized(c, facts) -> bool:
    return (c.kind == "all-gather" and c.inst is not None and c.comp is not None
            and only_used_sliced(c.comp, c.inst, facts.users(c.comp)))


@dataclass(frozen=True)
class ReshardingCollective(Message):
    """HA302: a collective that only changes the layout of an array."""

    kind: str
    change: str
    nbytes: float
    seconds: float
    count: float

    template: ClassVar[str] = "{kind} {change} ({nbytes:bytes}, {seconds:time} per call, x{count:g} per step)."


@rule(
    code="HA302",
    name="resharding-traffic",
    severity=Severity.WARNING,
    summary="An all-to-all, permute or all-gather caused by a sharding mismatch, not by a contraction.",
    options=(Option("min_saving_seconds", 1e-7, "Ignore collectives whose change saves less than this per step."),),
)
def resharding_traffic(ctx: RuleContext) -> Iterator[Diagnostic]:
    """## What it does
    Finds all-to-alls, collective-permutes and all-gathers that no matmul needs: the value is not
    contracted afterwards; it only changes layout because the producer emits one sharding and the
    consumer (an op, an `out_shardings`, a `with_sharding_constraint`) asks for another. Both shardings
    are shown in notation. Collectives the user wrote (`psum`, `all_to_all`, `ppermute` in `shard_map`)
    and the compiler's collective matmuls are left alone.

    ## Why is this bad?
    `AllToAll_X: [I_X, J] -> [I, J_X]` costs `V / (4 W_ici)`; an AllGather `V / W_ici`. Neither buys any
    computation: with matching shardings the bytes would not move at all.

    ## Example
    ```python
    y = f(x)                                        # produces [I_X, J]
    y = jax.lax.with_sharding_constraint(y, P(None, "X"))  # consumer wants [I, J_X]
    ```

    ## Use instead
    Give the producer the consumer's sharding (or the consumer the producer's), so no reshard is needed:
    ```python
    x = jax.device_put(x, NamedSharding(mesh, P(None, "X")))
    ```
    When the value resharded is a program argument, the fix is its PartitionSpec (`y: P(None, 'X') -> P('X',
    None)`, `details.fix_spec`), which `--verify-fixes` applies and recompiles; a reshard of the activations'
    layout whose cause is an embedding table's spec takes that table's change (analyzer.rules.rootcause).

    ## References
    "How to Scale Your Model", sharding chapter, "Our final communication primitive: the AllToAll" and
    case 4.
    """
    facts = ctx.facts
    min_saving = float(ctx.option("min_saving_seconds"))
    for c in facts.collectives:
        if c.kind not in MOVING_COLLECTIVES or c.overlapped or is_explicit_collective(c.op_name):
            continue
        step = facts.step_saving([(c, 0.0)])
        if step.seconds < min_saving:
            continue  # hidden behind compute (or under the threshold): removing it saves no step time
        if c.inst is None or c.comp is None:
            continue  # without the HLO a reshard cannot be told from a matmul's gather
        if c.record is not None and getattr(c.record, "dot", None) is not None:
            continue  # the analysis tied it to a matmul
        users = facts.users(c.comp)
        if dot_uses(c.comp, c.inst, None, users, facts.module):  # type: ignore[arg-type]
            continue  # feeds a matmul: contraction traffic (the matmul rules weigh it)
        if _rematerialized(c, facts):
            continue  # HA303 reports it, as an error
        before, after = sides(c.notation)
        spec = partition_spec(after, facts.mesh_axes) if after and after != before else ""
        if before and before == after:
            change = (f"moves whole shards {before} between devices over {axes_text(c.axes)}: the producer and "
                      "its consumer place the same blocks on different devices (a mesh-axis order mismatch)")
        else:
            change = (f"only changes the layout {before or '?'} -> {after or '?'} over {axes_text(c.axes)}: the "
                      "producer and its consumer disagree on the sharding")
        forced = _forced_by(c)
        name, now, wanted = ("", "", "") if forced or not spec else _argument_layout(c, facts, after)
        fix = _reshard_fix(forced, before, spec, facts.mesh_axes, (name, now, wanted))
        yield ctx.diagnostic(
            ReshardingCollective(kind=c.kind, change=change, nbytes=c.bytes, seconds=c.seconds, count=c.count),
            location=_location(c),
            notation=c.notation or None,
            seconds=c.seconds * c.count,
            alternative=f"produce {after or 'the consumer layout'} directly (no collective)",
            alternative_seconds=0.0,
            step=step,
            fix=fix,
            details={"before": before, "after": after, "bytes": c.bytes, "count": c.count,
                     **({"forced_by": forced} if forced else {}),
                     # the argument's PartitionSpec to write, for `--verify-fixes` (analyzer.workflows.verify)
                     **({"argument": name, "partition_spec": now, "proposed_partition_spec": wanted,
                         "fix_spec": {"arguments": {name: wanted}}} if name else {})},
        )


@dataclass(frozen=True)
class FullRematerialization(Message):
    """HA303: an all-gather whose result each device immediately slices."""

    axes: str
    nbytes: float
    seconds: float
    alternative_seconds: float
    count: float

    template: ClassVar[str] = (
        "all-gather over {axes} of {nbytes:bytes} whose result each device immediately slices: full "
        "rematerialization to reshard ({seconds:time} per call where an all-to-all takes "
        "{alternative_seconds:time}, x{count:g} per step)."
    )


@rule(
    code="HA303",
    name="full-rematerialization",
    severity=Severity.ERROR,
    summary="An array all-gathered only to be sliced again: full rematerialization to reshard.",
    options=(Option("min_saving_seconds", 1e-7, "Ignore collectives whose change saves less than this per step."),),
)
def full_rematerialization(ctx: RuleContext) -> Iterator[Diagnostic]:
    """## What it does
    Finds all-gathers whose result each device only slices its own piece out of: XLA rematerialized the
    whole array on every device to change its sharding.

    ## Why is this bad?
    Gathering costs `V / W_ici` and makes every device hold the whole array (memory too), only to throw
    most of it away. An AllToAll does the same reshard for `V / (4 W_ici)` on a bidirectional ring, and
    a matching sharding needs no communication at all.

    ## Example
    ```python
    # [I_X, J_Y] -> [I_Y, J_X] with no direct collective: XLA gathers then slices
    y = jax.lax.with_sharding_constraint(x, P("Y", "X"))
    ```

    ## Use instead
    Keep one sharding through producer and consumer, or reshard one axis at a time so each step is an
    AllToAll (`[I_X, J] -> [I, J_X]`).

    ## References
    "How to Scale Your Model", sharding chapter, "Our final communication primitive: the AllToAll".
    """
    facts = ctx.facts
    min_saving = float(ctx.option("min_saving_seconds"))
    for c in facts.collectives:
        if c.kind != "all-gather" or not _rematerialized(c, facts):
            continue
        alt = facts.price_like(c, "all-to-all", c.bytes, c.axes)
        step = facts.step_saving([(c, alt)])
        if step.seconds < min_saving:
            continue
        before, after = sides(c.notation)
        yield ctx.diagnostic(
            FullRematerialization(axes=axes_text(c.axes), nbytes=c.bytes, seconds=c.seconds, alternative_seconds=alt,
                                  count=c.count),
            location=_location(c),
            notation=c.notation or None,
            seconds=c.seconds * c.count,
            alternative=f"AllToAll_{axes_text(c.axes)} (or matching shardings: no collective)",
            alternative_seconds=alt * c.count,
            step=step,
            fix="keep the producer's and consumer's shardings equal, or reshard one mesh axis at a time "
                "(each step an all-to-all)",
            details={"before": before, "after": after, "bytes": c.bytes, "count": c.count,
                     **({"forced_by": _forced_by(c)} if _forced_by(c) else {})},
        )


@dataclass(frozen=True)
class ConstraintReshard(Message):
    """HA304: a with_sharding_constraint whose layout is not the one its value has, and the collectives it forces."""

    now: str
    natural: str
    axes: str
    collectives: int
    seconds: float

    template: ClassVar[str] = (
        "with_sharding_constraint asks for {now} where its value comes {natural} from its operands (the arguments' "
        "PartitionSpecs through the matmuls that make it): XLA reshards it over {axes} on the way in and out, "
        "{collectives} collective(s) at the matmuls around it, {seconds:time} per step."
    )


def constraint_changes(facts) -> list[tuple[object, str, list]]:
    """[(the constraint, the PartitionSpec to write there, the collectives it forces)] for each with_sharding_constraint
    (`analyzer.analysis.constraints`) whose spec differs from its value's own layout: the collectives over the mesh
    axes it moves, at the matmuls that make or use its value (forward and backward: the lines they share), a weight
    gradient's reduction aside (the weights' own, whatever the activations' layout)."""
    from analyzer.analysis.constraints import constraints
    from analyzer.analysis.roles import dot_role
    from analyzer.rules.compute import spec_text

    if facts.model_flops is None:
        return []
    out = []
    for k in constraints(facts.model_flops, facts.arguments.specs):
        moved = k.moved_axes
        if not moved or k.natural is None:
            continue
        lines = k.lines | {k.line}
        forced = []
        for c in facts.collectives:
            loc = c.location()
            if f"{loc.file}:{loc.line}" not in lines or not {a.split(":(")[0] for a in c.axes} & moved:
                continue
            dot = getattr(c.record, "dot", None) if c.record is not None else None
            if (c.kind not in MOVING_COLLECTIVES and dot is not None and c.comp is not None
                    and dot_role(facts.module, c.comp, dot, facts.arguments) == "weight gradient"):
                continue
            forced.append(c)
        if forced:
            out.append((k, spec_text(k.natural), forced))
    return out


@rule(
    code="HA304",
    name="constraint-reshard",
    severity=Severity.WARNING,
    summary="A with_sharding_constraint whose layout differs from its value's own: XLA reshards around it.",
    options=(Option("min_saving_seconds", 1e-7, "Ignore constraints whose change saves less than this per step."),),
)
def constraint_reshard(ctx: RuleContext) -> Iterator[Diagnostic]:
    """## What it does
    Reads each `jax.lax.with_sharding_constraint` of the program jax handed XLA and the layout its value has
    without it: the arguments' PartitionSpecs followed through the ops and matmuls that make the value
    (`relu(x @ w_in)` with `x: P('data')` and `w_in: P(None, 'model')` is `P('data', None, 'model')`). Where the
    constraint asks for another layout, XLA reshards the value on the way in and out: the collectives over the
    mesh axes the constraint moves, at the matmuls that make or use the value (forward and backward), are the
    constraint's. The finding points at the constraint's own line and names the PartitionSpec to write there;
    the other findings of those collectives (HA101, HA302, HA303, HA201) take the same change
    (analyzer.rules.rootcause), and `--verify-fixes` rewrites the constraint and recompiles.

    ## Why is this bad?
    A constraint that drops the batch's axis (`P(None, None, 'model')` on activations split over 'data') makes
    every chip of a 'data' group gather the whole batch and repeat the layer's matmuls; one that puts 'data' on
    the features moves every activation twice per layer. Neither buys anything the value's own layout lacks.

    ## Example
    ```python
    z = jax.nn.relu(x @ w_in)                                              # [B_data, S, F_model]
    z = jax.lax.with_sharding_constraint(z, NamedSharding(mesh, P(None, None, "model")))  # gathers B
    ```

    ## Use instead
    ```python
    z = jax.lax.with_sharding_constraint(z, NamedSharding(mesh, P("data", None, "model")))
    ```

    ## References
    "How to Scale Your Model", sharding chapter, "Our final communication primitive: the AllToAll"; JAX's
    "Distributed arrays and automatic parallelization" (with_sharding_constraint).
    """
    from analyzer.diagnostics import short_source
    from analyzer.rules.compute import spec_text

    facts = ctx.facts
    min_saving = float(ctx.option("min_saving_seconds"))
    for k, spec, forced in constraint_changes(facts):
        step = facts.step_saving([(c, 0.0) for c in forced])
        if step.seconds < min_saving:
            continue
        now = spec_text(k.spec)
        file, _, line = k.line.rpartition(":")
        axes = sorted(k.moved_axes)
        yield ctx.diagnostic(
            ConstraintReshard(now=now, natural=f"as {spec}", axes=", ".join(f"'{a}'" for a in axes),
                              collectives=len(forced), seconds=sum(c.seconds * c.count for c in forced)),
            location=Location(file, int(line)),
            notation=max(forced, key=lambda c: c.seconds).notation or None,
            seconds=sum(c.seconds * c.count for c in forced),
            alternative=f"the constraint as {spec}: no reshard around it",
            alternative_seconds=0.0,
            step=step,
            fix=(f"write {spec} in the with_sharding_constraint at {short_source(k.line)} (today {now}): the layout "
                 "its value already has, so XLA reshards nothing around it"),
            details={"constraint": k.line, "partition_spec": now, "constraint_spec": spec,
                     "axes": axes, "collectives": [c.instruction for c in forced],
                     "lines": sorted(k.lines), "fix_spec": {"constraints": {k.line: spec}}},
        )
