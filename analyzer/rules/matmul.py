"""Matmul rules: communication that a dot waits for, weighed against the dot's own FLOPs (sharding.md,
"Computation with sharded arrays", cases 2 and 3; Problems 4 and 9; training.md rooflines)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from analyzer.analysis.dataflow import (
    callers,
    dot_producer,
    dot_uses,
    free_size,
    is_program_argument,
    sliced_by_partition,
    uniform_over,
    upstream_dot,
)
from analyzer.analysis.dots import batch_dims, contracting_dims
from analyzer.analysis.roles import Arguments, argument_name, dot_role
from analyzer.analysis.roles import _traced as _argument_of
from analyzer.diagnostics import Diagnostic, Severity
from analyzer.hlo.ir import Computation, Instruction
from analyzer.hlo.opcodes import DOTS, MOVING_COLLECTIVES, REDUCING_COLLECTIVES
from analyzer.rules.common import axes_text, dot_location, fmt_b, fmt_s, is_explicit_collective
from analyzer.rules.compute import RepeatedWork
from analyzer.rules.context import RuleContext
from analyzer.rules.facts import Coll, StepSaving
from analyzer.rules.messages import Message
from analyzer.rules.registry import Option, rule
from analyzer.theory.notation import axis_size as _size_in
from analyzer.theory.notation import dtype_bytes

__all__ = ["comm_bound_matmul", "gathered_larger_operand", "attached_collectives", "roofline_fix", "roofline_change",
           "RooflineFix", "collective_listing"]




def attached_collectives(ctx: RuleContext) -> dict[tuple[str, str], tuple[Instruction, list[tuple[Coll, Any]]]]:
    """Each dot (computation, name) -> (the dot, the collectives it waits for or that reduce its output).

    A gather (all-gather, all-to-all, permute) is attached to the dots that read its result through
    transparent ops; a reduction (all-reduce, reduce-scatter) to the dot whose partial sums it reduces.
    Where this walk finds nothing, the analysis's own record (`Collective.dot`, e.g. a dot inside a TPU
    fusion) is used.
    """
    out: dict[tuple[str, str], tuple[Instruction, list[tuple[Coll, Any]]]] = {}

    def add(comp_name: str, dot: Instruction, c: Coll, use: Any) -> None:
        out.setdefault((comp_name, dot.name), (dot, []))[1].append((c, use))

    for c in ctx.facts.collectives:
        if c.inst is None or c.comp is None:
            continue
        found = False
        if c.kind in MOVING_COLLECTIVES:
            users = ctx.facts.users(c.comp)
            dims = c.inst.dimensions
            dim = dims[0] if dims else None
            for use in dot_uses(c.comp, c.inst, dim if c.kind == "all-gather" else None, users, ctx.facts.module):
                add(c.comp.name, use.dot, c, use)
                found = True
        elif c.kind in REDUCING_COLLECTIVES:
            dot = dot_producer(c.comp, c.inst)
            if dot is not None:
                add(c.comp.name, dot, c, None)
                found = True
        record_dot = getattr(c.record, "dot", None) if c.record is not None else None
        if not found and record_dot is not None and getattr(record_dot, "opcode", "") in DOTS:
            add(f"{c.comp.name}>", record_dot, c, None)
    # A reduction after a chain of two matmuls with no collective between them (Megatron's W_in then W_out,
    # all-reduced once) is weighed against both, as the chapter's tensor-parallel roofline does.
    for (comp_name, _), (dot, pairs) in list(out.items()):
        for c, use in pairs:
            if use is not None or c.kind not in REDUCING_COLLECTIVES or c.comp is None or c.comp.name != comp_name:
                continue
            first = upstream_dot(c.comp, dot)
            if first is not None and (comp_name, first.name) not in out:
                add(comp_name, first, c, None)
    return out


# Bytes a collective costs relative to an AllGather of the same array (sharding chapter summary table).
_TRAFFIC = {"all-reduce": 2.0, "all-to-all": 0.25}


def _elements(c: Coll) -> float:
    """Elements the collective effectively moves: V / bytes per element, x2 for an AllReduce (RS + AG)."""
    return _TRAFFIC.get(c.kind, 1.0) * c.bytes / dtype_bytes(c.dtype or "bf16")


@dataclass(frozen=True)
class CommBoundMatmul(Message):
    """HA101. `quantity` is what the chapter's roofline compares with C/W (FLOPs / (2 x elements moved):
    the per-chip batch of FSDP, F/Y of Megatron); `threshold` is its compute-bound value on this slice's
    links, `ridge` the chip's C/W_ici."""

    matmuls: int
    roofline: str
    quantity_name: str
    quantity: float
    per_element: str
    axes: str
    threshold: float
    ridge: float
    hardware: str
    t_comm: float
    t_math: float
    listing: str
    all_reduced_contraction: float = 0.0  # F/Y of the one matmul whose output an AllReduce reduces, else 0
    batch_axes: str = ""  # set when the activations it moves are sharded over the batch's own mesh axes
    role: str = ""  # the dot's role (analyzer.analysis.roles): "weight gradient", "moe dispatch/combine", ...
    per_chip_tokens: float = 0.0  # the report's per-chip batch in tokens (one figure per report), 0 unknown
    batch_argument: str = ""  # set when the collective moves the batch argument itself (split on a feature dim)
    repeat: float = 0.0  # set when its chips run the matmuls this many times their model FLOPs (the batch not split)
    data_axes: str = ""  # the mesh axes the batch is not split over, with `repeat`

    template: ClassVar[str] = (
        "{what} communication-bound on the {roofline} roofline{role_text}: {quantity_name} = {quantity:,.0f} "
        "{per_element} '{axes}'{contraction}, below {threshold_text}{tokens_text}. Its collectives take "
        "{t_comm:time} per call against {t_math:time} of FLOPs ({ratio:.1f}x): {listing}.{layout}{repeated}"
    )

    @property
    def repeated(self) -> str:
        if not self.repeat:
            return ""
        return (f" The chips run {'this matmul' if self.matmuls == 1 else 'these matmuls'} {self.repeat:.1f}x "
                f"{'its' if self.matmuls == 1 else 'their'} model FLOPs: the batch is not split over "
                f"'{self.data_axes}', so every chip of a '{self.data_axes}' group multiplies the same tokens and these "
                "collectives move them all; the batch's layout is the cause to fix first.")

    @property
    def role_text(self) -> str:
        return f" ({self.role})" if self.role else ""

    @property
    def tokens_text(self) -> str:
        """The per-chip batch, where the quantity is not it (FSDP's quantity is the per-chip batch only when the
        collective meets one matmul per token)."""
        if not self.per_chip_tokens or (self.quantity_name.startswith("per-chip batch")
                                        and abs(self.quantity - self.per_chip_tokens) <= 0.01 * self.per_chip_tokens):
            return ""
        return f" (the per-chip batch is {self.per_chip_tokens:,.0f} tokens)"

    @property
    def layout(self) -> str:
        if self.batch_argument and self.role == "attention":
            return (f" The batch argument {self.batch_argument} is split over '{self.batch_axes}' on a dimension other "
                    f"than its batch dimension (the sequence), so attention moves the keys and values (and their "
                    f"gradients) over '{self.batch_axes}': the batch's layout is the cause, not the split between the "
                    "two strategies.")
        if self.batch_argument:
            return (f" The collective moves the batch argument {self.batch_argument} itself, split over "
                    f"'{self.batch_axes}' on a feature dimension: the batch's layout is the cause, not the split "
                    "between the two strategies.")
        if not self.batch_axes:
            return ""
        return (f" The activations it moves are sharded over '{self.batch_axes}' on a feature dimension, though "
                f"'{self.batch_axes}' is the axis the batch is sharded over: the activations' layout is the cause, not "
                "the split between the two strategies.")

    @property
    def what(self) -> str:
        return "matmul is" if self.matmuls == 1 else f"{self.matmuls} matmuls sharing these collectives are"

    @property
    def ratio(self) -> float:
        return self.t_comm / self.t_math

    @property
    def contraction(self) -> str:
        if not self.all_reduced_contraction:
            return ""
        return (f" (F/Y = {self.all_reduced_contraction:,.0f} features contracted per chip; an AllReduce moves each "
                "element twice)")

    @property
    def threshold_text(self) -> str:
        if abs(self.threshold - self.ridge) <= 0.01 * self.ridge:
            return f"C/W_ici = {self.ridge:,.0f} on {self.hardware}"
        return (f"{self.threshold:,.0f}, its compute-bound value on this slice's links (C/W_ici = {self.ridge:,.0f} "
                f"on {self.hardware} with every link in use)")


@rule(
    code="HA101",
    name="comm-bound-matmul",
    severity=Severity.WARNING,
    summary="A matmul whose collectives take longer than its FLOPs on the target.",
    options=(
        Option("margin", 0.0, "Fire only when communication exceeds compute by more than this fraction."),
        Option("min_saving_seconds", 1e-7,
               "Ignore dots whose fix saves less than this per step (exposed communication it removes)."),
    ),
)
def comm_bound_matmul(ctx: RuleContext) -> Iterator[Diagnostic]:
    """## What it does
    Finds dots (matmuls) whose communication (the all-gathers they wait for, and the reduce-scatter or
    all-reduce of their partial sums) takes longer on the target than the dot's FLOPs, and says which of
    the chapter's rooflines it is on, from what the costliest collective moves:

    - a program argument (a weight, or a scanned layer's slice of one) gathered: **FSDP**, the quantity is
      the per-chip batch `B/X` (rows each chip multiplies per weight element gathered); a weight gradient
      reduced (a matmul that reads no weight): FSDP's gradient reduce-scatter, the same quantity;
    - activations gathered for a matmul with a weight, or a matmul's partial sums reduced (W_out):
      **tensor parallelism (Megatron)**, the quantity is `F/Y` (weight columns per chip).

    Each dot's role comes first (`analyzer.analysis.roles`: forward, activation or weight gradient,
    attention, MoE dispatch/combine, embedding), read from the program before partitioning, where the left
    operand of a forward matmul is the batch and the right one a weight: a weight gradient's reduction is
    FSDP's even where it reads the batch argument itself; the batch argument gathered (split on a feature
    dim) is the batch's layout, whose fix is its PartitionSpec (`batch['x']: P(None, None, 'data') ->
    P('data', None, None)`), and so is attention's keys and values moved over an axis the token ids hold on their
    sequence dim (`batch['input_ids']: P(None, 'data') -> P('data', None)`); an all-to-all at an expert's matmuls
    (batched over the experts), or tokens sent to an expert's stacked weights, is expert parallelism's cost, with
    its own advice and no move of devices between data and model (an all-to-all into a plain layer's matmul is a
    reshard, read from the operands as a gather is); the FSDP
    quantity of an expert's weights (stacked over experts: a batched dot) is the tokens each expert multiplies
    per chip, named so, not the per-chip batch. Every finding
    of a report states one per-chip batch, in tokens (`details.per_chip_batch`: the batch argument's tokens
    over the mesh axes that split them); the roofline's quantity is `details.quantity_value`. F is named
    only when it is a dimension of the model, and a dimension no sharding makes compute-bound is said so
    ("no sharding of this dimension is compute-bound"), never as a fraction of a way.

    The quantity is compared with the chip's `C / W_ici` (2550 on TPU v5p, about 2190 on v5e) and with the
    threshold on the slice's own links (higher on a line without wraparound). The fix is derived from the
    roofline: the quantity falls as 1 / (axis size) with the chips fixed, so the largest size of the
    collective's mesh axis that is compute-bound is `size x quantity / threshold` (rounded down to a
    divisor, the freed factor moved to the mesh's other axis, whose own roofline is checked too). When no
    size above 1 works, it says what has to change instead, with the numbers: move the axis's devices to
    the other strategy (when that one is compute-bound), a bigger batch per chip, or wider layers.

    Where the chips repeat the matmuls (the batch replicated over a mesh axis no weight uses, or split on a
    feature dim: HA104's reading), the batch's change comes first and is the finding's change
    (`batch['x']: P() -> P('data', None, None)`, the same root cause as HA104's): its collectives then carry
    1/repeat of the tokens, and that is the saving promised. No mesh change is offered on such a plan: moving
    devices between the axes would leave the batch whole on every chip (folding 'model' into 'data' made the
    replicated-batch step slower, verified); the roofline is weighed again on the plan with the batch split.

    It judges exposed time: only dots whose collectives the predicted step waits for are flagged (a weight
    gathered while the previous layer's matmul runs is hidden, docs/step.md), and the saving is what the fix
    removes from the step: the collectives' exposed time, at most `(T_comms - T_math) x calls` (docs/rules.md,
    "Savings in step time").

    Megatron traffic over the mesh axes that shard the batch (the axes of the token ids' leading dim) is
    not tensor parallelism: the activations carry the batch's axis on a feature dimension (an embedding
    table's d_model sharded on `data`). Then the fix is that layout, the finding belongs to the activations'
    layout root cause, and no mesh change is offered.

    ## Why is this bad?
    A sharded matmul overlaps its communication with its FLOPs at best, so its time is
    `max(T_math, T_comms)`. When `T_comms > T_math` the chips idle waiting for the network. For FSDP,
    `T_math = 2 B D F / (X C)` against `T_comms = 2 D F / W_ici` per gathered weight: it is comm-bound
    when the per-chip batch `B / X < C / W_ici`. For Megatron tensor parallelism the same test reads
    `F / Y < C / W_ici`, i.e. more than about `F / 2550`-way model sharding on v5p.

    ## Example
    FSDP over 256 chips with 512k tokens per step: 2048 tokens per chip, below 2550 on v5p:

    ```python
    mesh = jax.make_mesh((256,), ("data",))
    w = NamedSharding(mesh, P("data", None))     # W[D_data, F]
    x = NamedSharding(mesh, P("data", None))     # In[B_data, D]
    ```

    The finding (F = 16,384): per-chip batch B/X = 2,048 rows multiplied per weight element gathered over
    'data', below C/W_ici = 2,550; fix: shrink 'data' from 256 to 128 ways and give the factor 2 to a new
    'model' axis: per-chip batch 4,096 and F/Y = 8,192, compute-bound together
    (2550/4096 + 2550/8192 = 0.93 <= 1).

    ## Use instead
    Raise the per-chip batch above the threshold: fewer FSDP shards (move devices to a tensor-parallel
    axis: FSDP+TP needs only about `2550^2 / 2F` tokens per chip), or a larger batch; for tensor
    parallelism, shard at most `F / 2550` ways on that axis (attention with `H K = 2048` is comm-bound
    even 2-way on v5e: give those devices to FSDP instead).

    ```python
    mesh = jax.make_mesh((128, 2), ("data", "model"))
    w = NamedSharding(mesh, P("data", "model"))  # W[D_data, F_model]
    ```

    ## References
    "How to Scale Your Model", sharding chapter, Problem 4 (`B < C / W_ici = 2550`); training chapter,
    FSDP and tensor-parallel rooflines.
    """
    scope = _Scope.of(ctx)
    for colls, dots in _components(scope.attached):
        finding = _weigh(ctx, scope, colls, dots)
        if finding is not None:
            yield finding


@dataclass(frozen=True)
class _Scope:
    """What HA101 reads once per report, for every group of dots and collectives it weighs.

    Attributes:
      attached: `attached_collectives` of the report.
      uses: each collective row's (dot, use) pairs (how each dot reads what it moves).
      callers_of: the module's callers map (`dataflow.callers`), for telling program arguments in loop bodies.
      batch_axes: the mesh axes the tokens are sharded over (`analyzer.rules.arguments.batch_axes`).
      args: the batch and weight arguments and the per-chip batch in tokens (one per report).
      widest: the model's widest dimension: a width the fix names (F) is one the model has, else it is unnamed.
      repeated: the ops whose chips repeat each other's work and the batch change that splits them (HA104's
        reading, `analyzer.rules.compute.repeated_work`, at HA104's `min_redundancy`), None when no op repeats.
    """

    attached: dict[tuple[str, str], tuple[Instruction, list[tuple[Coll, Any]]]]
    margin: float
    min_saving: float
    uses: Mapping[int, list[tuple[Instruction, Any]]]
    callers_of: Any
    batch_axes: tuple[str, ...]
    args: Arguments
    widest: int
    repeated: RepeatedWork | None = None

    @staticmethod
    def of(ctx: RuleContext) -> _Scope:
        from analyzer.rules.arguments import batch_axes
        from analyzer.rules.compute import repeated_work

        facts = ctx.facts
        attached = attached_collectives(ctx)
        uses: dict[int, list[tuple[Instruction, Any]]] = {}
        for dot, pairs in attached.values():
            for c, use in pairs:
                uses.setdefault(c.row, []).append((dot, use))
        graph = getattr(getattr(ctx.report, "analysis", None), "graph", None)
        callers_of = callers(facts.module, graph if graph is not None and graph.module is facts.module else None) \
            if facts.module is not None else {}
        return _Scope(attached=attached, margin=float(ctx.option("margin")),
                      min_saving=float(ctx.option("min_saving_seconds")), uses=uses, callers_of=callers_of,
                      batch_axes=batch_axes(facts.argument_arrays), args=facts.arguments,
                      widest=max((d for a in facts.argument_arrays for d in a.shape), default=0),
                      repeated=repeated_work(ctx.report, facts,
                                             float(ctx.config.option("HA104", "min_redundancy", 1.25))))


def _math(facts: Any, dots: Sequence[Instruction]) -> tuple[float, float]:
    """(FLOPs, seconds) of one execution of `dots` at the peak of each one's dtype, from the analysis's `Dot`
    records (a dot with no record never runs: it adds nothing)."""
    flops = t_math = 0.0
    for dot in dots:
        record = facts.dot_record(dot)
        if record is not None:
            flops += record.flops
            t_math += facts.costs.dot_cost(record).peak_seconds
    return flops, t_math


def _weigh(ctx: RuleContext, scope: _Scope, colls: list[Coll], dots: list[Instruction]) -> Diagnostic | None:
    """HA101's finding for one group of dots and the collectives they share, or None when they are not
    comm-bound, or the fix would win back less than `min_saving_seconds` of the step."""
    facts = ctx.facts
    colls = [c for c in colls if c.regime != "latency"]  # latency-bound ones are HA301's
    if not colls:
        return None
    flops, t_math = _math(facts, dots)
    if t_math <= 0:
        return None
    t_comm = sum(c.seconds for c in colls)
    if t_comm <= t_math * (1 + scope.margin):
        return None
    # The roofline says comm-bound; the step says whether it costs anything: the fix takes the collectives
    # down to the FLOPs' time, which removes from the step at most the time the compute waits for them.
    to_math = t_math / t_comm
    step = facts.step_saving([(c, c.seconds * to_math) for c in colls])
    if step.seconds < scope.min_saving:
        return None  # hidden behind other compute (or under the threshold): nothing exposed to win back
    return _finding(ctx, scope, colls, dots, flops=flops, t_math=t_math, t_comm=t_comm, step=step)


def _finding(ctx: RuleContext, scope: _Scope, colls: list[Coll], dots: list[Instruction], *, flops: float,
             t_math: float, t_comm: float, step: StepSaving) -> Diagnostic | None:
    """HA101's finding for a comm-bound group: its roofline and quantity, the fix, where it points; None when its
    chips repeat the matmuls (the batch not split) and splitting the batch takes too little off its collectives."""
    facts = ctx.facts
    main = max(colls, key=lambda c: c.seconds)
    # The roofline quantity of the collective that costs most: FLOPs per element it moves / 2 (the
    # per-chip batch of FSDP, F/Y of Megatron), and its threshold on this slice's links. The others
    # (e.g. FSDP's weight gathers next to Megatron's activation gather) are listed with their times.
    batch = flops / (2 * _elements(main)) if _elements(main) else 0.0
    # The threshold is where all these collectives together take the FLOPs' time (they move the same
    # elements per FLOP whatever the batch), so it is above `batch` whenever the rule fires: measuring it
    # from the costliest collective alone printed "2,048 ... below 1,313" when several shared the dot.
    needed = batch * t_comm / t_math
    roof = _roofline(facts.module, main, scope.uses.get(main.row, []), scope.callers_of, scope.args)
    reducer = _reducer(main)
    quantity, all_reduced, features = _quantity(roof, main, reducer, batch)
    size, others = _axis_sizes(ctx, main)
    # The fix speaks of F/Y itself: with an AllReduce of one matmul's output, F/Y and its threshold are both
    # twice the per-element quantity (the same roofline, so the same plan passes).
    scale = 2.0 if all_reduced else 1.0
    if roof.strategy == "megatron":
        features = _named_width(features, batch * scale, size, scope.widest)
    change = roofline_change(roof.strategy, batch * scale, needed * scale, main.axes,
                             size, others, roof.other, facts.ridge, features=features, per_expert=roof.per_expert)
    # Megatron traffic (activations gathered, partial sums reduced) over the axes that shard the batch: the
    # activations carry the batch's axis on a feature dim. Fixing that layout removes the collective; a
    # mesh change would not (issue 11: the embedding's d_model on `data`).
    layout = (roof.strategy == "megatron" and bool(main.axes) and set(main.axes) <= set(scope.batch_axes)
              and not _moved_array(main))
    change = _layout_fix(roof, main, scope.args, layout) or change
    # The chips repeat these matmuls (the batch whole on every chip of a 'data' group): the batch's change comes
    # first, and is this finding's change; a mesh change weighed on this plan would not split the batch either.
    first_batch = None if layout or roof.strategy in ("layout", "expert") else _batch_first(facts, scope, dots,
                                                                                             roof, colls)
    deferred: dict[str, Any] = {}
    if first_batch is not None:
        found = _deferred(facts, roof, colls, change, *first_batch)
        if found[1].seconds < scope.min_saving:
            return None  # the batch's own finding (HA104) is the change; this one would add nothing to it
        change, step, deferred = found
    # The user's line is the matmul's: for a reduction, the one whose partial sums it reduces (W_out,
    # not the matmul before it in the chain); the HLO instruction is the collective that costs most.
    first = reducer if reducer is not None and any(reducer is d for d in dots) else \
        min(dots, key=lambda d: d.position.line if d.position else 0)
    loc, dot_notation = dot_location(ctx.report, facts.module, colls[0].comp, first, main.location(), facts.dot_rows)
    loc = replace(loc, computation=main.computation or loc.computation, instruction=main.instruction,
                  hlo_line=main.hlo_line)
    count = max(c.count for c in colls)
    tokens = scope.args.per_chip_tokens
    return ctx.diagnostic(
        CommBoundMatmul(matmuls=len(dots), roofline=_STRATEGY[roof.strategy], quantity_name=quantity[0],
                        quantity=batch, per_element=quantity[1], axes=axes_text(main.axes), threshold=needed,
                        ridge=facts.ridge, hardware=facts.hardware.name, t_comm=t_comm, t_math=t_math,
                        listing=collective_listing(colls), all_reduced_contraction=all_reduced,
                        batch_axes=axes_text(main.axes) if layout or roof.argument else "", role=roof.role,
                        per_chip_tokens=tokens or 0.0, batch_argument=roof.argument,
                        repeat=float(deferred.get("repeat", 0.0)),
                        data_axes=axes_text(first_batch[1].data_axes) if first_batch else ""),
        location=loc,
        notation=main.notation or None,
        seconds=t_comm * count,
        alternative=(f"{dot_notation or 'this matmul'} on batch-sharded activations: no collective over "
                     f"'{axes_text(main.axes)}'" if layout else
                     f"a compute-bound plan for {dot_notation or 'this matmul'}: {quantity[0]} >= {needed:,.0f}"),
        alternative_seconds=t_math * count,
        step=step,
        fix=change.text,
        # per_chip_batch: the report's one per-chip batch in tokens; quantity_value: the roofline's quantity
        details={"per_chip_batch": tokens, "quantity_value": batch, "role": roof.role,
                 "threshold": facts.ridge, "threshold_topology": needed,
                 "roofline": roof.strategy, "quantity": quantity[0], "other_quantity": roof.other,
                 "t_math": t_math, "t_comm": t_comm, "count": count, "dots": [d.name for d in dots],
                 "dot_notation": dot_notation,
                 "collectives": [c.instruction for c in colls],
                 # the plan the fix leads to, for analyzer.rules.fit's memory estimate
                 "fix_mesh": dict(change.mesh), "fix_batch_factor": change.batch_factor,
                 **_cause_details(main, roof, change, layout), **deferred},
    )


def _cause_details(main: Coll, roof: _Roof, change: RooflineFix, layout: bool) -> dict[str, Any]:
    """The details that name a finding's root cause and its change, where known."""
    return {
        # the root cause is the activations' layout over these axes (analyzer.rules.rootcause)
        **({"layout_axis": main.axes[0]} if layout else {}),
        # the batch argument the collective moves: its spec is the root cause (with HA104's)
        **({"argument": roof.argument} if roof.argument else {}),
        # the argument's PartitionSpec to write, for `--verify-fixes` (analyzer.workflows.verify)
        **({"fix_spec": {"arguments": dict(change.arguments)}} if change.arguments else {}),
        # (with `deferred`: the batch is not split (HA104), its change is this finding's, grouped with the batch's;
        # the roofline's own change waits for the plan with the batch split)
    }


def _deferred(facts: Any, roof: _Roof, colls: Sequence[Coll], change: RooflineFix, repeat: float,
              work: RepeatedWork) -> tuple[RooflineFix, StepSaving, dict[str, Any]]:
    """(the batch's change as this finding's, what it takes off the step, the details saying so) for a comm-bound
    matmul the chips run `repeat` times its model FLOPs: with the batch split, the collectives that carry its tokens
    move 1/repeat of them; the roofline's own `change` is kept in the details, not offered."""
    shrunk = [(c, c.seconds / repeat if _carries_tokens(roof, c, work) else c.seconds) for c in colls]
    details = {"repeat": repeat, "deferred_fix": change.text, "deferred_fix_mesh": dict(change.mesh),
               "argument": work.argument, "partition_spec": work.now}
    fix = RooflineFix(
        f"{work.change} first, the batch's change (HA104's): each chip then multiplies and moves 1/{repeat:g} of "
        f"these tokens, which takes that much off these collectives; no mesh change is offered on this plan: "
        f"with the batch whole on every chip of a '{axes_text(work.data_axes)}' group, moving devices between the "
        "mesh axes would not split it either (the roofline is weighed again when the plan is analysed with the "
        "batch split)", arguments=work.arguments)
    return fix, facts.step_saving(shrunk), details


def _batch_first(facts: Any, scope: _Scope, dots: Sequence[Instruction], roof: _Roof,
                 colls: Sequence[Coll]) -> tuple[float, RepeatedWork] | None:
    """(how many times their model FLOPs the chips run `dots`, the repeated work) when every one of them is
    repeated (the batch not split over the mesh axes no weight uses), the batch's change can be written and saves
    time once its own collectives are priced (`RepeatedWork.offered`), and it shrinks some of `colls` (a weight
    gradient's reduction carries no tokens: the batch's change leaves it as it is, and the roofline stands); None
    otherwise. The repeat is the smallest of the dots' (each by its op, `analyzer.analysis.dots.op_key`)."""
    from analyzer.analysis.dots import op_key

    work = scope.repeated
    if work is None or not work.offered or facts.module is None or \
            not any(_carries_tokens(roof, c, work) for c in colls):
        return None
    repeats = []
    for dot in dots:
        record = facts.dot_record(dot)
        if record is not None:
            repeats.append(work.repeat(op_key(record, facts.module)))
    repeat = min(repeats, default=1.0)
    return (repeat, work) if repeat > 1.0 else None


def _carries_tokens(roof: _Roof, c: Coll, work: RepeatedWork) -> bool:
    """Whether collective `c` moves the repeated tokens (so splitting the batch divides its bytes by the repeat):
    activations or partial sums over mesh axes the batch is not split over; not a weight's gather or a weight
    gradient's reduction (FSDP's), whose bytes are the weight's whatever the batch."""
    bases = {a.split(":(")[0] for a in c.axes}
    return roof.strategy != "fsdp" and not bases & set(work.data_axes)


def _reducer(main: Coll) -> Instruction | None:
    """The matmul whose partial sums the costliest collective reduces, None for a gather."""
    if main.kind not in REDUCING_COLLECTIVES or main.inst is None:
        return None
    return dot_producer(main.comp, main.inst)


def _quantity(roof: _Roof, main: Coll, reducer: Instruction | None, batch: float
              ) -> tuple[tuple[str, str], float, float | None]:
    """(the quantity's name and what it counts per element moved, F of the one matmul whose output an AllReduce
    reduces (else 0), Megatron's F/Y when it is the reducing matmul's own contraction (else None))."""
    quantity = _QUANTITY[(roof.strategy, main.kind in MOVING_COLLECTIVES)]
    if roof.strategy == "fsdp" and roof.per_expert:
        quantity = _PER_EXPERT[main.kind in MOVING_COLLECTIVES]
    if roof.strategy != "megatron" or main.kind not in REDUCING_COLLECTIVES or reducer is None:
        return quantity, 0.0, None
    # "F/Y features contracted per chip" only when it is: the reducing matmul's own contraction
    # (an AllReduce moves each element twice, so one matmul alone gives half its F/Y).
    all_reduced = 0.0
    contracted = math.prod(reducer.operands[0].shape.dims[d] for d in contracting_dims(reducer, 0)
                           if reducer.operands[0].shape is not None)
    if abs(contracted - batch) > 0.01 * contracted:
        halved = main.kind == "all-reduce" and abs(contracted / 2 - batch) <= 0.01 * contracted
        quantity = ("F/Y / 2", "per output element all-reduced over") if halved else _QUANTITY[("", False)]
        all_reduced = contracted if halved else 0.0
    features = contracted if abs(contracted - batch) <= 0.01 * contracted or all_reduced else None
    return quantity, all_reduced, features


def _named_width(features: float | None, per_chip: float, size: int, widest: int) -> float | None:
    """Megatron's F, when it is a dimension the model has: the reducing matmul's contraction times the ways
    (`features` per chip), else F/Y x ways (`per_chip` x `size`) where the model has a dimension that wide."""
    width = features * size if features else per_chip * size
    return width if width <= widest or features else None


def _axis_sizes(ctx: RuleContext, main: Coll) -> tuple[int, list[tuple[str, int]]]:
    """(the product of the sizes of the costliest collective's mesh axes, the mesh's other axes (name, size)).
    Sizes from the mesh, sub-axes (`X:(1)2`, a collective over part of an axis) included."""
    mesh = ctx.report.mesh
    if mesh is None:
        return math.prod(ctx.facts.axes[a].size for a in main.axes if a in ctx.facts.axes), []
    bases = {a.split(":(")[0] for a in main.axes}
    return (math.prod(_size_in(mesh.axis_names, mesh.axis_sizes, a) for a in main.axes),
            [(n, s) for n, s in zip(mesh.axis_names, mesh.axis_sizes) if n not in bases])


def _layout_fix(roof: _Roof, main: Coll, args: Arguments, layout: bool) -> RooflineFix | None:
    """The fix when the cause is a layout, not the split between strategies: the batch argument's spec (the
    batch moved on a feature dim), or the activations' (Megatron traffic over the batch's own axes); else None."""
    quoted = axes_text(main.axes)
    if roof.strategy == "layout":
        # attention's case: every batch argument split so (the labels beside the token ids) moves with them
        names = [roof.argument, *(n for n in _batch_off_its_dim(args, main.axes, every=True)
                                  if roof.role == "attention" and n != roof.argument)]
        fixes = [_batch_spec_fix(args.specs.get(n), n, main.axes) for n in names]
        text = "; ".join(t for t, _ in fixes if t)
        return RooflineFix(text or f"keep {roof.argument} split over '{quoted}' on its batch dimension only",
                           arguments={n: new for n, (_, new) in zip(names, fixes) if new})
    if layout:
        return RooflineFix(
            f"keep the activations sharded over '{quoted}' on their batch dimension only, as the tokens are: find "
            f"the argument or with_sharding_constraint that puts '{quoted}' on a feature dimension (the activations' "
            "layout findings point at it); the collective then goes away")
    return None


def collective_listing(colls: Sequence[Coll], shown: int = 4) -> str:
    """The collectives of a comm-bound matmul in words, costliest first: identical ones (notation and time per
    call) once with their count, at most `shown` kinds, the rest counted with their summed time per call (a
    vocabulary projection shares its collectives with a hundred matmuls: issue 11's page was 8,000 px tall).

    Example:
        >>> from types import SimpleNamespace as C
        >>> colls = [C(notation="AllGather_data: [I_data, J] -> [I, J]", kind="all-gather", seconds=6e-4)] * 3 + [
        ...     C(notation="AllReduce_model: [I, J]{U_model} -> [I, J]", kind="all-reduce", seconds=2e-4),
        ...     C(notation="", kind="all-to-all", seconds=1e-6)]
        >>> collective_listing(colls, shown=1)
        'AllGather_data: [I_data, J] -> [I, J] 600 µs x3; and 2 more (201 µs per call together)'
    """
    kinds: dict[tuple[str, str], list[Any]] = {}
    for c in colls:
        kinds.setdefault((c.notation or c.kind, fmt_s(c.seconds)), []).append(c)
    ranked = sorted(kinds.items(), key=lambda kv: -sum(c.seconds for c in kv[1]))
    parts = [f"{name} {each}" + (f" x{len(members)}" if len(members) > 1 else "")
             for (name, each), members in ranked[:shown]]
    rest = [c for _, members in ranked[shown:] for c in members]
    if rest:
        parts.append(f"and {len(rest)} more ({fmt_s(sum(c.seconds for c in rest))} per call together)")
    return "; ".join(parts)


def _moved_array(c: Coll) -> str:
    """The program argument a collective moves (its row's `array`), "" for a computed value."""
    extra = getattr(c.record, "extra", None)
    return str(extra.get("array") or "") if isinstance(extra, dict) else ""


@dataclass(frozen=True)
class _Roof:
    """Which of the chapter's rooflines a comm-bound matmul is on.

    Attributes:
      strategy: "fsdp" (a weight is gathered, or a weight gradient reduced: the quantity is the per-chip
        batch), "megatron" (activations are gathered, or partial activations reduced: the quantity is the
        weight's output features per chip, F/Y), or "" when the data flow does not say.
      other: the other roofline's quantity per chip today, when known: for "fsdp" the weight's output
        features on this chip (what F/Y becomes if devices move to tensor parallelism), for "megatron" the
        tokens each chip holds after the gather (what the per-chip batch becomes if devices move to FSDP).
    """

    strategy: str
    other: float | None = None
    role: str = ""  # the dot's role (analyzer.analysis.roles)
    argument: str = ""  # "layout": the batch argument the collective moves
    per_expert: bool = False  # "fsdp" of a weight stacked over experts: the quantity is tokens per expert per chip


_STRATEGY = {"fsdp": "FSDP (data-parallel)", "megatron": "tensor-parallel (Megatron)", "": "chapter's",
             "expert": "expert-parallel (MoE token all-to-all)", "layout": "batch layout's"}
# (roofline, is a gather) -> (the quantity in the chapter's letters, what it counts per element moved).
_QUANTITY = {
    ("fsdp", True): ("per-chip batch B/X", "rows multiplied per weight element gathered over"),
    ("fsdp", False): ("per-chip batch B/X", "tokens contracted per weight-gradient element reduced over"),
    ("megatron", True): ("F/Y", "weight columns per chip for each activation element gathered over"),
    ("megatron", False): ("F/Y", "features contracted per chip for each output element reduced over"),
    ("", True): ("FLOPs / (2 x elements moved)", "for each element gathered over"),
    ("expert", True): ("FLOPs / (2 x elements moved)", "for each token element sent to its expert over"),
    ("expert", False): ("FLOPs / (2 x elements moved)", "for each token element sent to its expert over"),
    ("layout", True): ("FLOPs / (2 x elements moved)", "for each batch element gathered over"),
    ("layout", False): ("FLOPs / (2 x elements moved)", "for each batch element reduced over"),
    ("", False): ("FLOPs / (2 x elements moved)", "for each element reduced over"),
}
# FSDP's quantity for a weight stacked over experts (is a gather): the tokens each expert multiplies on a chip,
# which is not the per-chip batch (a token goes to its experts, each expert gets its capacity's worth).
_PER_EXPERT = {
    True: ("tokens per expert per chip", "rows multiplied per expert weight element gathered over"),
    False: ("tokens per expert per chip", "tokens contracted per expert weight-gradient element reduced over"),
}


def _roofline(module: Any, main: Coll, uses: list[tuple[Instruction, Any]], callers_of: Any,
              args: Arguments | None = None) -> _Roof:
    """The roofline of the collective that costs most, from what it moves (sharding chapter, training chapter).

    A gather of a program argument (a weight, a stacked layer's slice of one) is FSDP's: each gathered
    element meets the per-chip batch. A gather of a computed value whose matmul partner is an argument is
    Megatron's: each element of activations meets F/Y weight columns. A reduction of a matmul that reads a
    weight is Megatron's (W_out's partial sums); of a weight gradient (the tokens contracted), FSDP's.

    The dot's role (analyzer.analysis.roles) comes first: the batch argument is not a weight (a gather of it
    is the batch's layout, split on a feature dim; a weight gradient that reads it is still FSDP's), and an
    all-to-all is expert parallelism's token exchange. Megatron's other quantity is the report's per-chip batch.
    """
    comp = main.comp
    if comp is None:
        return _Roof("")
    args = args or Arguments()

    def batch_arg(dot: Instruction, k: int) -> str:
        """The batch argument operand k is (a view of), "" for a weight or a computed value."""
        if module is None or comp is not module.entry or k >= len(dot.operands):
            return ""
        p = _argument_of(comp, comp.by_name.get(dot.operands[k].name))
        name = argument_name(p) if p is not None else ""
        return name if name in args.batch else ""

    def arg(dot: Instruction, k: int) -> bool:
        inst = comp.by_name.get(dot.operands[k].name) if k < len(dot.operands) else None
        return inst is not None and is_program_argument(module, comp, inst, callers_of) and not batch_arg(dot, k)

    def is_arg(c: Any, inst: Any) -> bool:
        return is_program_argument(module, c, inst, callers_of)

    def role(dot: Instruction, a2a: bool = False) -> str:
        return dot_role(module, comp, dot, args, moved_by_all_to_all=a2a, is_argument=is_arg) if module else ""

    local = [(dot, use) for dot, use in uses if comp.by_name.get(dot.name) is dot]  # not inside a fusion
    first = _by_role(main, local, role, arg, args)
    if first is not None:
        return first
    for dot, use in local:
        if main.kind in MOVING_COLLECTIVES and use is not None and role(dot) == "moe dispatch/combine":
            return _Roof("expert", role="moe dispatch/combine")  # tokens moved to or from their experts
        if main.kind in MOVING_COLLECTIVES and use is not None:
            k = use.operand
            name = batch_arg(dot, k)
            if name:
                return _Roof("layout", role=role(dot), argument=name)
            if arg(dot, k):  # a weight gathered; stacked over experts (a batched dot): each expert's tokens meet it
                return _Roof("fsdp", free_size(dot, k), role=role(dot), per_expert=bool(batch_dims(dot)))
            if arg(dot, 1 - k):
                if batch_dims(dot):  # an expert's FFN (its weight stacked over experts): tokens sent to it
                    return _Roof("expert", role=role(dot))
                return _Roof("megatron", args.per_chip_tokens or free_size(dot, k), role=role(dot))
            return _Roof("megatron", role=role(dot))
        if main.kind in REDUCING_COLLECTIVES and use is None:
            r = role(dot)
            weights = [k for k in (0, 1) if arg(dot, k)]
            if weights and r != "weight gradient":
                return _Roof("megatron", args.per_chip_tokens or free_size(dot, 1 - weights[0]), role=r)
            # an expert's weight gradient (a batched dot: its weights stacked over experts) contracts the tokens
            # sent to that expert, not the per-chip batch
            return _Roof("fsdp" if r in ("weight gradient", "forward", "") else "", role=r,
                         per_expert=r == "weight gradient" and bool(batch_dims(dot)))
    return _Roof("", role=role(local[0][0]) if local else "")  # no roofline of the chapter, the role still said


def _by_role(main: Coll, local: Sequence[tuple[Instruction, Any]], role: Any, arg: Any, args: Arguments
             ) -> _Roof | None:
    """The roofline the dots' roles decide before their operands do: an all-to-all at an expert's matmuls (batched
    over the experts: their FFN, or the dispatch/combine) is expert parallelism's token exchange, while one that
    feeds a plain matmul reshards its operand (a layout's cost, read from the operands as a gather's is); attention's
    keys and values moved over an axis the batch holds on its sequence dim are the batch's layout. None otherwise."""
    if main.kind == "all-to-all" and (not local or any(_at_an_expert(dot, role, arg) for dot, _ in local)):
        return _Roof("expert", role=role(local[0][0], True) if local else "moe dispatch/combine")
    for dot, _ in local:
        seq = _batch_off_its_dim(args, main.axes) if role(dot) == "attention" else ""
        if seq:
            return _Roof("layout", role="attention", argument=seq)
    return None


def _batch_off_its_dim(args: Arguments, axes: Sequence[str], every: bool = False) -> Any:
    """The batch argument that holds one of `axes` on a dim other than its leading (batch) dim: token ids split
    over 'data' on their sequence dim, whose attention then gathers keys and values over 'data' (and reduces their
    gradients); "" when none does. `every`: the list of all such arguments (the labels beside the ids)."""
    bases = {a.split(":(")[0] for a in axes}
    found = [name for name in sorted(args.batch)
             if any(bases & {a.split(":(")[0] for a in d} for d in (args.specs.get(name) or ())[1:])]
    return found if every else (found[0] if found else "")


def _at_an_expert(dot: Instruction, role: Any, arg: Any) -> bool:
    """Whether a dot is an expert's: batched (over the experts) and reading a weight stacked over them (their FFN),
    or routing tokens to or from one (`dot_role`'s "moe dispatch/combine"). Attention's batched dots and a plain
    layer's matmul are not."""
    return bool(batch_dims(dot)) and (arg(dot, 0) or arg(dot, 1) or role(dot) == "moe dispatch/combine")


def _batch_spec_fix(spec: Sequence[Sequence[str]] | None, name: str, axes: Sequence[str]) -> tuple[str, str]:
    """(`batch['x']: P(None, None, 'data') -> P('data', None, None)`, `P('data', None, None)`): the batch argument
    with `axes` moved off its other dims onto its leading (batch) dim; ("", "") when the argument's spec is not
    known, or is so already."""
    from analyzer.rules.compute import spec_text

    if not spec:
        return "", ""
    bases = {a.split(":(")[0] for a in axes}
    dims = [tuple(d) for d in spec]
    new = [tuple(x for x in d if x not in bases) for d in dims]
    new[0] = tuple(dict.fromkeys(list(dims[0]) + sorted(bases)))
    return ("", "") if new == dims else (f"{name}: {spec_text(dims)} -> {spec_text(new)}", spec_text(new))


@dataclass(frozen=True)
class RooflineFix:
    """The change `roofline_change` proposes: its `text`, the mesh it leads to (`mesh`: the new size of each
    mesh axis it resizes, a new axis included; empty when the mesh stays) and `batch_factor`, what the global
    batch is multiplied by (1 when the batch stays); `arguments`, the PartitionSpec to write for each argument it
    changes (`details.fix_spec` for `--verify-fixes`). `analyzer.rules.fit` estimates the plan's memory from them."""

    text: str
    mesh: Mapping[str, int] = field(default_factory=dict)
    batch_factor: float = 1.0
    arguments: Mapping[str, str] = field(default_factory=dict)  # argument path -> the PartitionSpec to write


def roofline_fix(strategy: str, q: float, needed: float, axes: tuple[str, ...], size: int,
                 others: list[tuple[str, int]], other: float | None, ridge: float,
                 features: float | None = None) -> str:
    """The text of `roofline_change`: the change that makes a comm-bound matmul compute-bound.

    Example:
        >>> roofline_fix("fsdp", 2048, 2550, ("data",), 256, [], 16384, 2550)
        "shrink 'data' from 256 to 128 ways and give the factor 2 to a new 'model' axis of 2: per-chip batch = 4,096, F/Y = 8,192, compute-bound together (C/W over each quantity, summed = 0.93 <= 1)"
    """
    return roofline_change(strategy, q, needed, axes, size, others, other, ridge, features=features).text


def roofline_change(strategy: str, q: float, needed: float, axes: tuple[str, ...], size: int,
                    others: list[tuple[str, int]], other: float | None, ridge: float, *,
                    features: float | None = None, per_expert: bool = False) -> RooflineFix:
    """The change that makes a comm-bound matmul compute-bound, derived from its roofline.

    With the chips fixed, the quantity `q` (per-chip batch for FSDP, F/Y for Megatron) grows as the
    collective's axes shrink (`q * size / d` on `d` ways), and the freed factor `size / d` moves to the
    mesh's other axis, where the other strategy's quantity shrinks (`other * d / size`). Both collectives
    overlap with the same FLOPs (training chapter, FSDP + tensor parallelism), so the plan is compute-bound
    when `needed / q_this + C/W_ici / q_other <= 1` (a strategy with one way has no collective). The fix
    is the largest divisor `d` of `size` that passes; when none does, it says what has to change with the
    numbers (a bigger batch per chip, wider layers), never a plan that drops the sharding.

    Args:
      strategy: "fsdp", "megatron" or "" (see `_Roof`).
      q: the quantity today; needed: its compute-bound threshold on this slice's links.
      axes, size: the mesh axes of the costliest collective and the product of their sizes.
      others: the mesh's other axes (name, size).
      other: the other strategy's quantity per chip today (see `_Roof.other`), or None when unknown.
      ridge: C / W_ici of the chip.
      features: Megatron's F (the sharded dimension at global size) when it is a dimension of the model; None
        leaves F unnamed (F/Y x ways of several matmuls is no dimension the model has).
      per_expert: FSDP of a weight stacked over experts: `q` is the tokens each expert multiplies per chip, and
        the advice says so (a larger batch or capacity, or fewer experts), never "the per-chip batch".

    An "expert" roofline (a MoE's token all-to-all) gets expert parallelism's advice, never a move of devices
    between data and model: the all-to-all's bytes per token do not change with that split.

    Example:
        >>> change = roofline_change("fsdp", 2048, 2550, ("data",), 256, [], 16384, 2550)
        >>> dict(change.mesh), change.batch_factor
        ({'data': 128, 'model': 2}, 1.0)
    """
    r = _Resize(strategy, q, needed, tuple(axes), size, list(others), other, ridge, per_expert)
    if strategy == "expert":
        return _expert_fix(r)
    if strategy in ("fsdp", "megatron"):
        both = _split_fix(r)
        if both is not None:
            return both
    if strategy == "fsdp":
        return _fsdp_fix(r)
    if strategy == "megatron":
        return _megatron_fix(r, features)
    own = [d for d in r.divisors if d > 1 and q * size / d >= needed]
    if own:
        return RooflineFix(f"shrink {r.quoted} from {size} to {own[0]} ways (FLOPs per element moved / 2 = "
                           f"{q * size / own[0]:,.0f} >= {needed:,.0f}) and give the factor {size // own[0]} to "
                           f"{r.moved_to(own[0])}", r.mesh_for(own[0]))
    # a bigger batch is one of the two ways named; the memory estimate takes it (wider layers grow it too)
    return RooflineFix(f"raise the FLOPs per element moved {r.ratio:.1f}x (a bigger batch per chip, or wider layers): "
                       f"at {q:,.0f} no size of {r.quoted} above 1 is compute-bound", {}, r.ratio)


@dataclass(frozen=True)
class _Resize:
    """`roofline_change`'s question: the comm-bound roofline's quantity `q` today and its threshold `needed`, on the
    mesh axes `axes` of `size` devices, with the mesh's `others` and the other strategy's quantity `other`."""

    strategy: str
    q: float
    needed: float
    axes: tuple[str, ...]
    size: int
    others: list[tuple[str, int]]
    other: float | None
    ridge: float
    per_expert: bool = False

    @property
    def batch_name(self) -> str:
        """FSDP's quantity in words: the per-chip batch, or an expert's tokens per chip."""
        return "tokens per expert per chip" if self.per_expert else "per-chip batch"

    @property
    def quoted(self) -> str:
        return "'" + axes_text(self.axes) + "'"

    @property
    def ratio(self) -> float:
        """How many times the quantity must grow to be compute-bound."""
        return self.needed / self.q if self.q else float("inf")

    @property
    def target(self) -> str:
        """The mesh axis the freed devices go to: the mesh's other axis, else a new one for the other strategy."""
        return self.others[0][0] if self.others else ("model" if self.strategy == "fsdp" else "data")

    @property
    def divisors(self) -> list[int]:
        """The sizes this axis can shrink to, largest first."""
        return [d for d in range(self.size - 1, 0, -1) if self.size % d == 0] or [1]

    def load(self, d: int) -> float:
        """needed / q_this + ridge / q_other on d ways of this axis (the rest moved to the other)."""
        mine = self.needed / (self.q * self.size / d) if d > 1 else 0.0
        if self.other is None or d == self.size and not self.others:
            return mine
        moved = self.size // d > 1 or self.others
        theirs = self.ridge / (self.other * d / self.size) if self.other and moved else 0.0
        return mine + theirs

    def moved_to(self, d: int) -> str:
        freed = self.size // d
        return (f"'{self.target}' ({self.others[0][1]} -> {self.others[0][1] * freed})" if self.others
                else f"a new '{self.target}' axis of {freed}")

    def mesh_for(self, d: int) -> dict[str, int]:
        """The mesh after giving the factor size/d of this axis to the target (empty: the axes are not one
        plain mesh axis, so the resize cannot be written as mesh sizes)."""
        if len(self.axes) != 1 or ":" in self.axes[0] or "{" in self.axes[0]:
            return {}
        return {self.axes[0]: d, self.target: (self.others[0][1] if self.others else 1) * (self.size // d)}


def _expert_fix(r: _Resize) -> RooflineFix:
    """A MoE's token all-to-all: expert parallelism's advice, never a move of devices between data and model."""
    return RooflineFix(
        f"this is expert parallelism's cost, not a split between data and model: each token's activations cross "
        f"{r.quoted} to its expert's chips and back, the same bytes per token whatever the other axes, so no mesh "
        f"change between them removes it. It is compute-bound when the experts do {r.needed:,.0f} FLOPs / 2 per "
        f"element sent (today {r.q:,.0f}): give each expert {r.ratio:.1f}x the work per token (wider experts, or "
        f"fewer, larger ones), keep {r.quoted} within the fastest links (a wrapped ICI axis), or overlap the "
        "dispatch with compute that does not wait for it (the shared layers, the next micro-batch)", {}, 1.0)


def _split_fix(r: _Resize) -> RooflineFix | None:
    """The largest size of this axis whose split with the other strategy is compute-bound together, or None.
    Folding the axis away entirely (d = 1) is only a claim when the other roofline's quantity is known."""
    this_name, other_name = (r.batch_name, "F/Y") if r.strategy == "fsdp" else ("F/Y", "per-chip batch")
    fits = [d for d in r.divisors if r.load(d) <= 1.0 and (d > 1 or r.other is not None)]
    if not fits:
        return None
    d = fits[0]
    parts = [f"{this_name} = {r.q * r.size / d:,.0f}"] if d > 1 else []
    if r.other is not None:
        parts.append(f"{other_name} = {r.other * d / r.size:,.0f}")
    change = (f"shrink {r.quoted} from {r.size} to {d} ways and give the factor {r.size // d} to {r.moved_to(d)}"
              if d > 1 else f"fold {r.quoted} ({r.size} ways) into {r.moved_to(d)}")
    return RooflineFix(f"{change}: {', '.join(parts)}, compute-bound together (C/W over each quantity, "
                       f"summed = {r.load(d):.2f} <= 1)", r.mesh_for(d))


def _fsdp_fix(r: _Resize) -> RooflineFix:
    """FSDP with no compute-bound split: a bigger batch per chip (or, with the other quantity unknown, fewer FSDP
    ways given to tensor parallelism)."""
    bigger = (f"raise the tokens each expert multiplies per chip {r.ratio:.1f}x (tokens per expert per chip >= "
              f"{r.needed:,.0f}: a larger batch or capacity factor, or fewer experts)" if r.per_expert else
              f"raise the batch per chip {r.ratio:.1f}x (per-chip batch >= {r.needed:,.0f})")
    if r.other is None:
        own = [d for d in r.divisors if d > 1 and r.q * r.size / d >= r.needed]
        if not own:
            return RooflineFix(bigger, {}, r.ratio)
        return RooflineFix(
            f"shrink {r.quoted} from {r.size} to {own[0]} ways ({r.batch_name} {r.q * r.size / own[0]:,.0f}) and give "
            f"the factor {r.size // own[0]} to tensor parallelism, {r.moved_to(own[0])}; or {bigger}",
            r.mesh_for(own[0]))
    return RooflineFix(f"{bigger}: no split of the {r.size} devices of {r.quoted} between FSDP and tensor parallelism "
                       f"is compute-bound here (the weight has F/Y = {r.other:,.0f} columns per chip today)",
                       {}, r.ratio)


def _megatron_fix(r: _Resize, width: float | None) -> RooflineFix:
    """Megatron with no compute-bound split: the fewest ways the chapter's bound allows (or none), the devices
    given to FSDP, and the batch per chip FSDP then needs. `width`: F, when it is a dimension of the model."""
    d = [d for d in r.divisors if d == 1 or r.q * r.size / d >= r.needed][0]
    features = r.q * r.size
    if d > 1:
        head = (f"shrink {r.quoted} from {r.size} to {d} ways (F/Y = {features / d:,.0f}; the chapter's bound is at "
                f"most {int(features // r.needed)} ways, F/Y >= {r.needed:,.0f}) and give the factor {r.size // d} to "
                f"{r.moved_to(d)}")
    else:
        named = f" (F = {width:,.0f} over {r.size} ways)" if width else ""
        head = (f"F/Y = {r.q:,.0f}{named} is below {r.needed:,.0f}: no sharding of this dimension over {r.quoted} is "
                f"compute-bound (2 ways need F/Y >= {r.needed:,.0f}"
                + (f", F >= {2 * r.needed:,.0f}" if width else "") + f"): give the {r.size} devices of {r.quoted} to "
                f"{r.moved_to(d)} (FSDP) for this layer")
    if r.other is None:
        return RooflineFix(head, r.mesh_for(d))
    spare = 1.0 - (r.needed / (features / d) if d > 1 else 0.0)
    want = r.ridge / spare if spare > 0 else float("inf")
    have = r.other * d / r.size
    return RooflineFix(f"{head}, and raise the batch per chip {want / have:.1f}x so FSDP there stays compute-bound "
                       f"(per-chip batch {r.other:,.0f} today, {have:,.0f} after the move -> {want:,.0f})",
                       r.mesh_for(d), want / have)


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


@dataclass(frozen=True)
class GatherCouldBeLocal(Message):
    """HA102, gather side: the contracting operand is all-gathered where a local matmul and a reduce-scatter
    of the output would move fewer bytes."""

    gathered_bytes: float
    output_bytes: float
    axes: str
    seconds: float
    alternative_seconds: float
    dot: str

    template: ClassVar[str] = (
        "the plan all-gathers the contracting operand ({gathered_bytes:bytes}) before the matmul; multiplying the "
        "local shards and reduce-scattering the output over {axes} moves {output_bytes:bytes} (ratio {ratio:.1f}, "
        "the M/K of Problem 9): {seconds:time} -> {alternative_seconds:time} per call{for_dot}."
    )

    @property
    def ratio(self) -> float:
        return self.gathered_bytes / self.output_bytes

    @property
    def for_dot(self) -> str:
        return f" for {self.dot}" if self.dot else ""


@dataclass(frozen=True)
class ReductionCouldBeGather(Message):
    """HA102, reduction side: a sliced replicated operand multiplied and the output reduced, where gathering
    the sharded operand moves fewer bytes."""

    reduced_bytes: float
    gathered_bytes: float
    axes: str
    seconds: float
    alternative_seconds: float
    dot: str

    template: ClassVar[str] = (
        "the plan multiplies a sliced replicated operand and reduces the output ({reduced_bytes:bytes}) over {axes}; "
        "all-gathering the sharded operand ({gathered_bytes:bytes}) and multiplying moves {ratio:.1f}x fewer bytes: "
        "{seconds:time} -> {alternative_seconds:time} per call{for_dot}."
    )

    @property
    def ratio(self) -> float:
        return self.reduced_bytes / self.gathered_bytes

    @property
    def for_dot(self) -> str:
        return f" for {self.dot}" if self.dot else ""


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
def gathered_larger_operand(ctx: RuleContext) -> Iterator[Diagnostic]:
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

    The fix is an argument's PartitionSpec where the operand is one (`details.fix_spec`, for `--verify-fixes`):
    for the gather, the replicated operand's contracting dim sharded too (its other axes kept); for the
    reduction, the sharded operand's contracting dim whole. A reduction the user wrote (a `psum` in a
    `shard_map` body) is changed in the body's in_specs, said in words.

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
            entry = comp is facts.entry
            if c.kind == "all-gather" and use is not None and use.contracting:
                other = _operand(comp, dot, 1 - use.operand)
                if other is None:
                    continue
                # The other operand must be replicated over the axes (its contracting dim can then be sliced
                # for free), possibly already sliced per device on another dim for the output's sharding.
                whole = sliced_by_partition(comp, other) or other
                if not uniform_over(comp, whole, groups, entry, facts.module, facts.uniformity):
                    continue
                widen = whole.shape.byte_size / max(other.shape.byte_size, 1) if whole is not other else 1.0
                v_out = dot.shape.byte_size * widen
                if c.bytes < min_ratio * v_out:
                    continue
                alt = facts.price_like(c, "reduce-scatter", v_out, c.axes)
                spec = _contracting_spec(comp, dot, 1 - use.operand, whole, c.axes, facts.arguments.specs)
                yield from _emit(ctx, c, dot, comp, alt, min_saving, gathered=True, v_other=v_out, spec=spec)
            elif c.kind in REDUCING_COLLECTIVES and use is None:
                for k in (0, 1):
                    src = _operand(comp, dot, k)
                    whole = sliced_by_partition(comp, src) if src is not None else None
                    if whole is None or not uniform_over(comp, whole, groups, entry, facts.module, facts.uniformity):
                        continue
                    other = _operand(comp, dot, 1 - k)
                    if other is None or not other.shape.is_array:
                        continue
                    v_gather = other.shape.byte_size * max(c.group_size, 1)
                    v_reduce = c.bytes
                    if v_reduce < min_ratio * v_gather:
                        continue
                    alt = facts.price_like(c, "all-gather", v_gather, c.axes)
                    # the operand's in-sharding is the change, unless the user wrote the reduction (a psum in a
                    # shard_map body: its in_specs, not the argument's sharding, decide what each device holds)
                    spec = ("", "", "") if is_explicit_collective(c.op_name) else _contracting_spec(
                        comp, dot, 1 - k, other, c.axes, facts.arguments.specs, drop=True)
                    yield from _emit(ctx, c, dot, comp, alt, min_saving, gathered=False, v_other=v_gather,
                                     spec=spec)
                    break


def _operand(comp: Computation, dot: Instruction, k: int) -> Instruction | None:
    if k >= len(dot.operands):
        return None
    return comp.by_name.get(dot.operands[k].name)


def _contracting_spec(comp: Computation, dot: Instruction, k: int, whole: Instruction,
                      axes: tuple[str, ...], specs: Mapping[str, Sequence[Sequence[str]]], *,
                      drop: bool = False) -> tuple[str, str, str]:
    """(the argument's name, its PartitionSpec now, the one to write) to shard operand k's contracting dim over
    `axes`: the axes it has on its other dims kept (a `[M, K_model]` weight becomes `P('X', 'model')`, never
    `P('X')`), `axes` taken off any other dim (a mesh axis shards one dim) and added to the contracting dim after
    the axes it has; ("", "", "") unless the operand is an argument read unchanged (same rank, so the dim index is
    the argument's).

    `specs`: each argument's spec by dim (`analyzer.analysis.roles.Arguments.specs`, from the program before
    partitioning); an argument it lacks is read off its own sharding, else taken as replicated. `drop`: the
    opposite change, `axes` taken off the contracting dim (HA102's reduction side: the operand arrives whole on
    it, so the matmul needs no reduction of its output), the other dims as they are.
    """
    from analyzer.analysis.roles import sharding_axes
    from analyzer.rules.compute import spec_text

    dims = contracting_dims(dot, k)
    if (len(dims) != 1 or whole.opcode != "parameter" or not whole.shape.is_array
            or whole.shape.rank != len(dot.operands[k].shape.dims or ())):
        return "", "", ""
    name = argument_name(whole)
    now = [tuple(d) for d in (specs.get(name) or sharding_axes(whole) or [() for _ in whole.shape.dims])]
    if len(now) != whole.shape.rank:
        return "", "", ""
    bases = tuple(a.split(":(")[0] for a in axes)  # a sub-axis collective (`X:(1)2`): the spec names the axis
    if drop:
        new = list(now)
        new[dims[0]] = tuple(a for a in now[dims[0]] if a not in bases)
    else:
        new = [tuple(a for a in d if a not in bases) for d in now]
        new[dims[0]] = tuple(dict.fromkeys(new[dims[0]] + bases))
    if new == now:
        return "", "", ""
    return name, spec_text(now), spec_text(new)


def _emit(ctx: RuleContext, c: Coll, dot: Instruction, comp: Computation, alt: float, min_saving: float, *,
          gathered: bool, v_other: float, spec: tuple[str, str, str] = ("", "", "")) -> Iterator[Diagnostic]:
    step = ctx.facts.step_saving([(c, alt)])
    if step.seconds < min_saving or alt >= c.seconds:
        return
    loc, dot_notation = dot_location(ctx.report, ctx.facts.module, comp, dot, c.location(),
                                      ctx.facts.dot_rows)
    loc = replace(loc, computation=c.computation or loc.computation, instruction=c.instruction, hlo_line=c.hlo_line)
    axes = axes_text(c.axes)
    if gathered:
        message: GatherCouldBeLocal | ReductionCouldBeGather = GatherCouldBeLocal(
            gathered_bytes=c.bytes, output_bytes=v_other, axes=axes, seconds=c.seconds, alternative_seconds=alt,
            dot=dot_notation)
        alternative = f"local matmul, then ReduceScatter_{axes} of the output ({fmt_b(v_other)})"
        name, now, proposed = spec
        fix = ((f"{name}: {now} -> {proposed}, its contracting dim over {axes} as well" if name else
                f"shard the replicated operand's contracting dim over {axes} as well (e.g. P('{c.axes[0]}', None) "
                "for a [M, K] weight)") + f", so each device multiplies its own shards, and let the output be "
               f"sharded over {axes} (out_shardings) so XLA reduce-scatters it")
    else:
        message = ReductionCouldBeGather(reduced_bytes=c.bytes, gathered_bytes=v_other, axes=axes, seconds=c.seconds,
                                         alternative_seconds=alt, dot=dot_notation)
        alternative = f"AllGather_{axes} of the sharded operand ({fmt_b(v_other)}), then a local matmul"
        name, now, proposed = spec
        fix = (f"{name}: {now} -> {proposed}, its contracting dim whole (not split over {axes}), so each device "
               f"multiplies it without reducing the output; keep the output replicated over {axes}" if name else
               f"keep the output replicated over {axes} and leave the other operand unsharded on its contracting dim")
    yield ctx.diagnostic(
        message,
        location=loc,
        notation=c.notation or None,
        seconds=c.seconds * c.count,
        alternative=alternative,
        alternative_seconds=alt * c.count,
        step=step,
        fix=fix,
        details={"bytes": c.bytes, "alternative_bytes": v_other, "ratio": c.bytes / v_other if v_other else None,
                 "dot": dot.name, "count": c.count,
                 # the argument's spec to write, for `--verify-fixes` (analyzer.workflows.verify); the output's
                 # out_shardings half of the fix is the user's to make
                 **({"fix_argument": spec[0], "partition_spec": spec[1], "proposed_partition_spec": spec[2],
                     "fix_spec": {"arguments": {spec[0]: spec[2]}}} if spec[0] else {})},
    )
