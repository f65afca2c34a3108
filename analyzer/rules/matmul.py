"""Matmul rules: communication that a dot waits for, weighed against the dot's own FLOPs (sharding.md,
"Computation with sharded arrays", cases 2 and 3; Problems 4 and 9; training.md rooflines)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from analyzer.diagnostics import Diagnostic, Severity
from analyzer.hlo.ir import Computation, Instruction
from analyzer.rules.common import axes_text, dot_location, fmt_b, fmt_s
from analyzer.rules.context import RuleContext
from analyzer.rules.facts import ELEMENT_BYTES, Coll
from analyzer.rules.hlo_walk import (
    contracting_dims,
    dot_flops,
    dot_producer,
    dot_uses,
    sliced_by_partition,
    users_map,
    uniform_over,
)
from analyzer.rules.registry import Option, rule

__all__ = ["HA101", "HA102", "attached_collectives"]

_FEEDING = ("all-gather", "all-to-all", "collective-permute")
_REDUCING = ("all-reduce", "reduce-scatter")


def attached_collectives(ctx: RuleContext) -> dict[tuple[str, str], tuple[Instruction, list[tuple[Coll, Any]]]]:
    """Each dot (computation, name) -> (the dot, the collectives it waits for or that reduce its output).

    A gather (all-gather, all-to-all, permute) is attached to the dots that read its result through
    transparent ops; a reduction (all-reduce, reduce-scatter) to the dot whose partial sums it reduces.
    Where this walk finds nothing, the analysis's own record (`Collective.dot`, e.g. a dot inside a TPU
    fusion) is used.
    """
    out: dict[tuple[str, str], tuple[Instruction, list[tuple[Coll, Any]]]] = {}
    users_cache: dict[str, Any] = {}

    def add(comp_name: str, dot: Instruction, c: Coll, use: Any) -> None:
        out.setdefault((comp_name, dot.name), (dot, []))[1].append((c, use))

    for c in ctx.facts.collectives:
        if c.inst is None or c.comp is None:
            continue
        found = False
        if c.kind in _FEEDING:
            users = users_cache.setdefault(c.comp.name, users_map(c.comp))
            dims = c.inst.dimensions
            dim = dims[0] if dims else None
            for use in dot_uses(c.comp, c.inst, dim if c.kind == "all-gather" else None, users, ctx.facts.module):
                add(c.comp.name, use.dot, c, use)
                found = True
        elif c.kind in _REDUCING:
            dot = dot_producer(c.comp, c.inst)
            if dot is not None:
                add(c.comp.name, dot, c, None)
                found = True
        record_dot = getattr(c.record, "dot", None) if c.record is not None else None
        if not found and record_dot is not None and getattr(record_dot, "opcode", "") in ("dot", "convolution"):
            add(f"{c.comp.name}>", record_dot, c, None)
    # A reduction after a chain of two matmuls with no collective between them (Megatron's W_in then W_out,
    # all-reduced once) is weighed against both, as the chapter's tensor-parallel roofline does.
    for (comp_name, _), (dot, pairs) in list(out.items()):
        for c, use in pairs:
            if use is not None or c.kind not in _REDUCING or c.comp is None or c.comp.name != comp_name:
                continue
            first = _upstream_dot(c.comp, dot)
            if first is not None and (comp_name, first.name) not in out:
                add(comp_name, first, c, None)
    return out


def _upstream_dot(comp: Computation, dot: Instruction) -> Instruction | None:
    """A dot feeding `dot`'s operands through element-wise and transparent ops only (no collective between)."""
    from analyzer.rules.hlo_walk import ELEMENTWISE, TRANSPARENT

    stack = [(comp.by_name.get(n), 0) for n in dot.operand_names]
    seen: set[str] = set()
    while stack:
        cur, depth = stack.pop()
        if cur is None or cur.name in seen or depth > 12:
            continue
        seen.add(cur.name)
        if cur.opcode in ("dot", "convolution"):
            return cur
        if cur.opcode in TRANSPARENT or cur.opcode in ELEMENTWISE:
            stack.extend((comp.by_name.get(n), depth + 1) for n in cur.operand_names)
    return None


# Bytes a collective costs relative to an AllGather of the same array (sharding chapter summary table).
_TRAFFIC = {"all-reduce": 2.0, "all-to-all": 0.25}


def _elements(c: Coll) -> float:
    """Elements the collective effectively moves: V / bytes per element, x2 for an AllReduce (RS + AG)."""
    return _TRAFFIC.get(c.kind, 1.0) * c.bytes / ELEMENT_BYTES.get(c.dtype, 2)


@rule(
    code="HA101",
    name="comm-bound-matmul",
    severity=Severity.WARNING,
    summary="A matmul whose collectives take longer than its FLOPs on the target.",
    options=(
        Option("margin", 0.0, "Fire only when communication exceeds compute by more than this fraction."),
        Option("min_saving_seconds", 1e-7, "Ignore dots whose exposed communication per step is below this."),
    ),
)
def HA101(ctx: RuleContext) -> Iterator[Diagnostic]:
    """## What it does
    Finds dots (matmuls) whose communication (the all-gathers they wait for, and the reduce-scatter or
    all-reduce of their partial sums) takes longer on the target than the dot's FLOPs. The message gives
    the per-chip batch (rows each chip multiplies per element moved) against the chip's C / W_ici
    threshold (2550 on TPU v5p, about 2200 on v5e).

    ## Why is this bad?
    A sharded matmul overlaps its communication with its FLOPs at best, so its time is
    `max(T_math, T_comms)`. When `T_comms > T_math` the chips idle waiting for the network. For FSDP,
    `T_math = 2 B D F / (X C)` against `T_comms = 2 D F / W_ici` per gathered weight: it is comm-bound
    when the per-chip batch `B / X < C / W_ici`. For Megatron tensor parallelism the same test reads
    `F / Y < C / W_ici`, i.e. more than about `F / 2550`-way model sharding on v5p.

    ## Example
    FSDP over 256 chips with 256k tokens per step: 1024 tokens per chip, below 2550 on v5p:

    ```python
    mesh = jax.make_mesh((256,), ("data",))
    w = NamedSharding(mesh, P("data", None))     # W[D_data, F]
    x = NamedSharding(mesh, P("data", None))     # In[B_data, D]
    ```

    ## Use instead
    Raise the per-chip batch above the threshold: fewer FSDP shards (move devices to a tensor-parallel
    axis: FSDP+TP needs only about `2550^2 / 2F` tokens per chip), or a larger batch; for tensor
    parallelism, shard at most `F / 2550` ways on that axis.

    ```python
    mesh = jax.make_mesh((64, 4), ("data", "model"))
    w = NamedSharding(mesh, P("data", "model"))  # W[D_data, F_model]
    ```

    ## References
    "How to Scale Your Model", sharding chapter, Problem 4 (`B < C / W_ici = 2550`); training chapter,
    FSDP and tensor-parallel rooflines.
    """
    facts = ctx.facts
    chip = facts.chip
    margin = float(ctx.option("margin"))
    min_saving = float(ctx.option("min_saving_seconds"))
    for colls, dots in _components(attached_collectives(ctx)):
        colls = [c for c in colls if c.regime != "latency"]  # latency-bound ones are HA301's
        if not colls:
            continue
        comp = colls[0].comp
        assert comp is not None
        flops = 0.0
        t_math = 0.0
        for dot in dots:
            f = dot_flops(dot)
            dtype = dot.operands[0].shape.element_type if dot.operands and dot.operands[0].shape else "bf16"
            flops += f
            t_math += f / chip.flops_for(dtype)
        if t_math <= 0:
            continue
        t_comm = sum(c.seconds for c in colls)
        count = max(c.count for c in colls)
        if t_comm <= t_math * (1 + margin) or (t_comm - t_math) * count < min_saving:
            continue
        moved = sum(_elements(c) for c in colls)
        batch = flops / (2 * moved) if moved else 0.0
        needed = batch * t_comm / t_math
        main = max(colls, key=lambda c: c.seconds)
        first = min(dots, key=lambda d: d.position.line if d.position else 0)
        loc, dot_notation = dot_location(ctx.report, facts.module, comp, first, main.location())
        # The user's line is the matmul's; the HLO instruction is the collective that costs most.
        loc = replace(loc, computation=main.computation or loc.computation, instruction=main.instruction,
                      hlo_line=main.hlo_line)
        listing = "; ".join(f"{c.notation or c.kind} {fmt_s(c.seconds)}" for c in colls)
        axes = sorted({a for c in colls for a in c.axes})
        sizes = {a: facts.axes[a].size for a in axes if a in facts.axes}
        fewer = ", ".join(f"'{a}' {max(1, int(sizes[a] * batch / needed))}-way instead of {sizes[a]}"
                          for a in sizes) or "fewer shards"
        what = "matmul is" if len(dots) == 1 else f"{len(dots)} matmuls sharing these collectives are"
        if all(c.kind in _FEEDING for c in colls):
            label = "per-chip batch"  # rows each chip multiplies against each gathered element
        elif all(c.kind in _REDUCING for c in colls):
            label = "per-chip contracting size"  # Problem 4, strategy 2: D / X against C / W_ici
        else:
            label = "FLOPs per element moved / 2"
        yield ctx.diagnostic(
            f"{what} communication-bound: collectives take {fmt_s(t_comm)} per call against "
            f"{fmt_s(t_math)} of FLOPs ({t_comm / t_math:.1f}x); {label} {batch:,.0f} is below "
            f"C/W_ici = {chip.ridge:,.0f} on {chip.name} (about {needed:,.0f} needed on this topology). "
            f"Collectives: {listing}.",
            location=loc,
            notation=main.notation or None,
            seconds=t_comm * count,
            alternative=f"a compute-bound plan for {dot_notation or 'this matmul'}: per-chip batch >= {needed:,.0f}",
            alternative_seconds=t_math * count,
            saving_seconds=(t_comm - t_math) * count,
            fix=f"raise the {label} {needed / batch:.1f}x: shard over mesh axis {fewer} (move the "
                "other devices to another axis, e.g. FSDP+TP)"
                + (", or grow the batch per chip" if label == "per-chip batch" else ""),
            details={"per_chip_batch": batch, "threshold": chip.ridge, "threshold_topology": needed,
                     "t_math": t_math, "t_comm": t_comm, "count": count, "dots": [d.name for d in dots],
                     "dot_notation": dot_notation,
                     "collectives": [c.instruction for c in colls]},
        )


def _components(attached: dict[tuple[str, str], tuple[Instruction, list[tuple[Coll, Any]]]]
                ) -> list[tuple[list[Coll], list[Instruction]]]:
    """Group dots and collectives that share each other (a gathered weight read by two dots) so that no
    collective is weighed twice: connected components of the dot-collective graph."""
    import networkx as nx

    g = nx.Graph()
    dots: dict[str, Instruction] = {}
    colls: dict[str, Coll] = {}
    for (comp_name, dot_name), (dot, pairs) in attached.items():
        dkey = f"d:{comp_name}/{dot_name}"
        dots[dkey] = dot
        g.add_node(dkey)
        for c, _ in pairs:
            ckey = f"c:{c.row}"
            colls[ckey] = c
            g.add_edge(dkey, ckey)
    out = []
    for nodes in sorted(nx.connected_components(g), key=lambda n: sorted(n)):
        out.append(([colls[n] for n in sorted(nodes) if n in colls], [dots[n] for n in sorted(nodes) if n in dots]))
    return out


@rule(
    code="HA102",
    name="gathered-larger-operand",
    severity=Severity.WARNING,
    summary="XLA gathered a matmul operand where reducing the (smaller) output would move fewer bytes.",
    options=(
        Option("min_ratio", 1.25, "Fire when the chosen collective moves at least this many times the other's bytes.",
               minimum=1.0),
        Option("min_saving_seconds", 1e-7, "Ignore findings that save less than this per step."),
    ),
)
def HA102(ctx: RuleContext) -> Iterator[Diagnostic]:
    """## What it does
    Looks at every matmul where one operand is sharded along its contracting dimension and the other is
    replicated over the same mesh axes (case 2 of the chapter). XLA can either all-gather the sharded
    operand and multiply (moving the operand: `N x M` for `A[N, M]`), or multiply the local shards
    (slicing the replicated operand for free) and reduce-scatter the output (moving `N x K`). It flags
    the plan that moves more bytes: the gather when `M > K`, or the reduction when `K > M`.

    ## Why is this bad?
    Both plans cost the bytes they move over the same links (`V / W_ici` for an AllGather or a
    ReduceScatter). Their ratio is `M / K` (Problem 9): gathering a wide operand to make a narrow output,
    or reducing a wide output of a narrow operand, wastes that factor. The local plan also divides the
    FLOPs by the axis size instead of repeating them on every device.

    ## Example
    ```python
    # A[N, M_X] . B[M, K] with M = 8192, K = 1024: XLA gathers A (N x 8192 elements)
    a = NamedSharding(mesh, P(None, "X"))
    b = NamedSharding(mesh, P())            # replicated
    ```

    ## Use instead
    ```python
    b = NamedSharding(mesh, P("X", None))   # B[M_X, K]: multiply locally
    out = NamedSharding(mesh, P("X", None)) # C[N_X, K]: reduce-scatter N x K elements
    ```

    ## References
    "How to Scale Your Model", sharding chapter, case 2 and Problems 4 and 9 (ratio `M / K`).
    """
    facts = ctx.facts
    min_ratio = float(ctx.option("min_ratio"))
    min_saving = float(ctx.option("min_saving_seconds"))
    for (comp_name, dot_name), (dot, attached) in sorted(attached_collectives(ctx).items(), key=lambda kv: kv[0]):
        for c, use in attached:
            comp = c.comp
            assert comp is not None and c.inst is not None
            if comp.by_name.get(dot_name) is not dot:
                continue  # a dot inside a fusion: its operands are not this computation's values
            groups = c.inst.replica_groups or ()
            entry = comp is (facts.module.entry if facts.module else None)
            if c.kind == "all-gather" and use is not None and use.contracting:
                other = _operand(comp, dot, 1 - use.operand)
                if other is None:
                    continue
                # The other operand must be replicated over the axes (its contracting dim can then be sliced
                # for free), possibly already sliced per device on another dim for the output's sharding.
                whole = sliced_by_partition(comp, other) or other
                if not uniform_over(comp, whole, groups, entry, facts.module):
                    continue
                widen = whole.shape.byte_size / max(other.shape.byte_size, 1) if whole is not other else 1.0
                v_out = dot.shape.byte_size * widen
                if c.bytes < min_ratio * v_out:
                    continue
                alt = facts.price_like(c, "reduce-scatter", v_out, c.axes)
                spec = _contracting_spec(comp, dot, 1 - use.operand, whole, c.axes)
                yield from _emit(ctx, c, dot, comp, alt, min_saving, gathered=True, v_other=v_out, spec=spec)
            elif c.kind in _REDUCING and use is None:
                for k in (0, 1):
                    src = _operand(comp, dot, k)
                    whole = sliced_by_partition(comp, src) if src is not None else None
                    if whole is None or not uniform_over(comp, whole, groups, entry, facts.module):
                        continue
                    other = _operand(comp, dot, 1 - k)
                    if other is None or not other.shape.is_array:
                        continue
                    v_gather = other.shape.byte_size * max(c.group_size, 1)
                    v_reduce = c.bytes
                    if v_reduce < min_ratio * v_gather:
                        continue
                    alt = facts.price_like(c, "all-gather", v_gather, c.axes)
                    yield from _emit(ctx, c, dot, comp, alt, min_saving, gathered=False, v_other=v_gather)
                    break


def _operand(comp: Computation, dot: Instruction, k: int) -> Instruction | None:
    if k >= len(dot.operands):
        return None
    return comp.by_name.get(dot.operands[k].name)


def _contracting_spec(comp: Computation, dot: Instruction, k: int, whole: Instruction,
                      axes: tuple[str, ...]) -> str:
    """`name: P(None, 'X')`: the PartitionSpec that shards operand k's contracting dim over `axes`.

    Only when the operand is the dot's input unchanged (same rank), so the dim index is the argument's.
    """
    dims = contracting_dims(dot, k)
    if len(dims) != 1 or not whole.shape.is_array or whole.shape.rank != len(dot.operands[k].shape.dims or ()):
        return ""
    entries = ["None"] * whole.shape.rank
    entries[dims[0]] = repr(axes[0]) if len(axes) == 1 else "(" + ", ".join(repr(a) for a in axes) + ")"
    while entries and entries[-1] == "None":
        entries.pop()
    md = whole.metadata
    name = md.op_name if whole.opcode == "parameter" and md is not None and md.op_name else "the replicated operand"
    return f"{name}: P({', '.join(entries)})"


def _emit(ctx: RuleContext, c: Coll, dot: Instruction, comp: Computation, alt: float, min_saving: float, *,
          gathered: bool, v_other: float, spec: str = "") -> Iterator[Diagnostic]:
    saving = (c.seconds - alt) * c.count
    if saving < min_saving or alt >= c.seconds:
        return
    loc, dot_notation = dot_location(ctx.report, ctx.facts.module, comp, dot, c.location())
    loc = replace(loc, computation=c.computation or loc.computation, instruction=c.instruction, hlo_line=c.hlo_line)
    axes = axes_text(c.axes)
    if gathered:
        what = (f"the plan all-gathers the contracting operand ({fmt_b(c.bytes)}) before the matmul; multiplying "
                f"the local shards and reduce-scattering the output over {axes} moves {fmt_b(v_other)} "
                f"(ratio {c.bytes / v_other:.1f}, the M/K of Problem 9)")
        alternative = f"local matmul, then ReduceScatter_{axes} of the output ({fmt_b(v_other)})"
        fix = ((f"shard {spec}" if spec else
                f"shard the replicated operand's contracting dim over {axes} as well (e.g. P('{c.axes[0]}', None) "
                "for a [M, K] weight)") + f" so each device multiplies its own shards, and let the output be "
               f"sharded over {axes} (out_shardings) so XLA reduce-scatters it")
    else:
        what = (f"the plan multiplies a sliced replicated operand and reduces the output ({fmt_b(c.bytes)}) over "
                f"{axes}; all-gathering the sharded operand ({fmt_b(v_other)}) and multiplying moves "
                f"{c.bytes / v_other:.1f}x fewer bytes")
        alternative = f"AllGather_{axes} of the sharded operand ({fmt_b(v_other)}), then a local matmul"
        fix = f"keep the output replicated over {axes} and leave the other operand unsharded on its contracting dim"
    yield ctx.diagnostic(
        f"{what}: {fmt_s(c.seconds)} -> {fmt_s(alt)} per call"
        + (f" for {dot_notation}" if dot_notation else "") + ".",
        location=loc,
        notation=c.notation or None,
        seconds=c.seconds * c.count,
        alternative=alternative,
        alternative_seconds=alt * c.count,
        saving_seconds=(c.seconds - alt) * c.count,
        fix=fix,
        details={"bytes": c.bytes, "alternative_bytes": v_other, "ratio": c.bytes / v_other if v_other else None,
                 "dot": dot.name, "count": c.count},
    )
