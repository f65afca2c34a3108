"""HA104: compute a plan repeats on several chips (a batch replicated over a mesh axis that could split it).

The model's FLOPs (`analyzer.analysis.dots.model_flops`, counted on the program jax handed XLA) are the work
of the model; the partitioned module's dots times the chips are the work of the chips. Where an op's chips do
more than its model FLOPs (remat aside), several chips compute the same part of it. The rule traces the
op's forward dots in the program before partitioning to the arguments they read: the left operand's
argument is the activation (the batch: `x @ w`, `einsum('bsd,df->bsf', x, w)`, Flax's Dense), the right
operand's is the weight. The mesh axes no weight uses are the batch's (data-parallel) axes; the finding
names the batch argument by its pytree path, its PartitionSpec now and the one to write (its leading dim
over those axes), the redundant FLOPs and the compute the change removes from each chip's step, with the
collectives it takes away (`removed_comm`: a batch split over data axes on a feature dim, the plan's collectives
over those axes alone), less the collectives the change brings (`change_comm`: an output's gather, the weight
gradients' reduction), offered as a fix only where that net is a saving. Where the
dots' operands trace to no argument (the first layer's activation is computed from an embedding lookup and a layer
norm, as in a Hugging Face model), the batch and the weights are the program's arguments by role
(`analyzer.analysis.roles.Arguments`: the token ids, the right operands of forward dots). Where the repeated matmuls
run in a shard_map body whose in_specs leave the batch whole, the change is those in_specs with the argument's spec
(the argument's alone would gather the batch into the same body): code, which `--verify-fixes` cannot apply, so the
finding carries no structured spec (`details.in_specs`, `details.proposed_in_specs` say what to write).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from analyzer.analysis.roles import argument_name, entry_argument, sharding_axes
from analyzer.diagnostics import Diagnostic, Location, Severity
from analyzer.errors import AnalyzerError
from analyzer.rules.messages import Message
from analyzer.rules.registry import Option, rule
from analyzer.units import format_bytes, format_seconds

if TYPE_CHECKING:
    from analyzer.hlo.ir import Instruction
    from analyzer.rules.context import RuleContext

__all__ = ["RepeatedWork", "change_comm", "dot_pass", "redundant_compute", "removed_comm", "repeated_work",
           "spec_text"]


def spec_text(dims: Sequence[Sequence[str]]) -> str:
    """A PartitionSpec as the user writes it: `P('data', None)`, `P(('data', 'model'))`, `P()`.

    Example:
        >>> spec_text([("data",), (), ()])
        "P('data', None, None)"
    """
    parts = [("None" if not d else repr(d[0]) if len(d) == 1 else "(" + ", ".join(map(repr, d)) + ")")
             for d in dims]
    return "P(" + ", ".join(parts) + ")"


@dataclass(frozen=True)
class RedundantCompute(Message):
    """HA104: chips computing the same part of the model."""

    ops: int
    repeat: float
    redundant_flops: float
    model_flops: float
    saved_seconds: float
    change: str
    axes: str
    comm_seconds: float = 0.0
    brings: str = "none found"
    net_seconds: float = 0.0
    removed_seconds: float = 0.0
    removes: str = ""

    template: ClassVar[str] = (
        "the chips repeat each other's work: the matmuls of {ops} source line(s) run up to {repeat:.1f}x their "
        "model FLOPs, {redundant_flops:.3g} FLOPs per step computed more than once ({share:.0%} of the model's "
        "{model_flops:.3g}); the batch is not split over {where}. {outcome}"
    )

    @property
    def outcome(self) -> str:
        """The change with its net: the compute it saves less the collectives it brings (HA104 offers it only when
        that is a saving)."""
        saved, comm, net = (format_seconds(x) for x in (self.saved_seconds, self.comm_seconds, self.net_seconds))
        gone = (f" and {format_seconds(self.removed_seconds)} of the collectives it takes away ({self.removes})"
                if self.removed_seconds > 0 else "")
        if self.net_seconds > 0:
            return (f"Change {self.change}: each chip then computes its own part, {saved} less compute per chip per "
                    f"step{gone}, less {comm} of the collectives the change brings ({self.brings}): {net} saved.")
        return (f"Splitting it ({self.change}) would take {saved} of compute off each chip{gone} but bring {comm} of "
                f"collectives ({self.brings}): no saving on this plan, so no change is offered.")

    @property
    def share(self) -> float:
        return self.redundant_flops / self.model_flops if self.model_flops > 0 else 0.0

    @property
    def where(self) -> str:
        return self.axes or "every mesh axis it could use"


@rule(
    code="HA104",
    name="redundant-compute",
    severity=Severity.WARNING,
    summary="Chips compute the same part of the model: a batch replicated over a mesh axis that could split it.",
    options=(Option("min_redundancy", 1.25, "Fire for ops whose chips run at least this many times their model "
                                             "FLOPs (remat recompute aside).", minimum=1.0),),
)
def redundant_compute(ctx: RuleContext) -> Iterator[Diagnostic]:
    """## What it does
    Compares each matmul's FLOPs on all chips with its model FLOPs (the same dot at global size in the
    program jax handed XLA, once per program). Where the chips do more, several of them compute the same
    rows: the batch (or another activation dimension) is replicated over a mesh axis, or split on a dimension
    that does not divide the work. It names the batch argument by its pytree path with its PartitionSpec now
    and the one to write (its leading dim over the mesh axes no weight uses), the redundant FLOPs and what the
    change saves: the compute it removes from each chip's step and the collectives it takes away (where the batch
    splits a feature dim over data axes, the plan's collectives over those axes alone), less the collectives it
    brings, priced with the report's cost model on its topology (an output wanted whole over a data axis is
    gathered over it; a weight's gradient, now a partial sum per chip, is all-reduced over the data axes). Where
    that net is no saving, the
    repeat is reported as information with its figures and no change is offered. Where the repeated matmuls run
    in a shard_map body whose in_specs leave the batch whole, the change names those in_specs too (the argument's
    spec alone would gather the batch into the same body); that part is code, which `--verify-fixes` cannot apply.
    The report's "HFU (repeated work)" line and the dots' `redundancy` column show the same repeat.

    ## Why is this bad?
    A chip that computes another chip's tokens spends its FLOPs on nothing: MFU falls by the repeat factor,
    and the step is longer by the repeated matmuls. Data parallelism exists to split the batch; leaving it
    whole (or splitting its features instead) keeps every chip of a 'data' group busy with the same work.

    ## Example
    ```python
    batch = {"x": NamedSharding(mesh, P())}                  # every chip holds and computes the whole batch
    params = {"w_in": NamedSharding(mesh, P(None, "model"))}
    ```

    ## Use instead
    ```python
    batch = {"x": NamedSharding(mesh, P("data"))}            # each 'data' group computes its own tokens
    ```

    ## References
    "How to Scale Your Model", training chapter (data parallelism: each chip a slice of the batch) and
    sharding chapter (a replicated operand means repeated work).
    """
    report = ctx.report
    work = repeated_work(report, ctx.facts, float(ctx.option("min_redundancy")))
    if work is None:
        return
    ops = [(key, done, model) for key, (done, model) in work.ops.items()]
    seconds = work.seconds
    redundant = sum(done - model for _, done, model in ops)
    repeat = max(done / model for _, done, model in ops)
    first = work.where[max(ops, key=lambda o: o[1] - o[2])[0]]
    name, now, proposed = work.argument, work.now, work.proposed
    data_axes = work.data_axes
    fix = (work.change if name else
           f"split the batch over {', '.join(repr(a) for a in data_axes) or 'the mesh axes no weight uses'}")
    total = sum(seconds[key] for key, _, _ in ops)
    brings = "; ".join(work.collectives) or "none found"
    details = {"redundant_flops": redundant, "repeat": repeat, "argument": name, "partition_spec": now,
               # (for `--verify-fixes`: "" where part of the change is a shard_map's in_specs, code it cannot rewrite)
               "proposed_partition_spec": work.arguments.get(name, ""), "data_axes": list(data_axes),
               **({"in_specs": work.in_specs[0], "proposed_in_specs": work.in_specs[1]} if work.in_specs else {}),
               "ops": [key for key, _, _ in ops], "compute_saved_seconds": work.compute_saved,
               "change_comm_seconds": work.comm_seconds, "change_collectives": list(work.collectives),
               "removed_comm_seconds": work.removed_seconds, "removed_collectives": list(work.removed)}
    message = RedundantCompute(ops=len(ops), repeat=repeat, redundant_flops=redundant, model_flops=work.model_flops,
                               saved_seconds=work.compute_saved, change=fix,
                               axes=", ".join(repr(a) for a in data_axes), comm_seconds=work.comm_seconds,
                               brings=brings, net_seconds=work.net_saving, removed_seconds=work.removed_seconds,
                               removes="; ".join(work.removed))
    if work.net_saving <= 0:  # the change's collectives cost more than the compute it saves: no fix to offer
        yield ctx.diagnostic(message, location=_op_location(report.analysis.module, first), seconds=total,
                             severity=Severity.INFO, details={**details, "proposed_partition_spec": "",
                                                              "considered_partition_spec": proposed})
        return
    yield ctx.diagnostic(
        message, location=_op_location(report.analysis.module, first), seconds=total,
        alternative=f"each chip computes its own {1 / repeat:.0%} of these matmuls" if repeat > 0 else None,
        alternative_seconds=total - work.net_saving, saving_seconds=work.net_saving, fix=fix, details=details,
    )


@dataclass(frozen=True)
class RepeatedWork:
    """The ops whose chips repeat each other's work, and the batch change that splits it (HA104's reading, which
    HA101 asks too: a matmul whose tokens every chip of a 'data' group multiplies is the batch's cost first).

    Attributes:
      ops: op key (`analyzer.analysis.dots.op_key`) -> (FLOPs all chips execute per step, its model FLOPs), for
        the ops at or above the repeat threshold.
      seconds: op key -> seconds its dots take per chip per step at the peak of their dtype.
      where: op key -> its first `Dot` record.
      argument, now, proposed: the batch argument's path, its PartitionSpec now and the one to write ("" when
        the change cannot be written: no batch argument, no data axis, a leading dim that does not divide).
      data_axes: the mesh axes no weight uses (the batch's).
      model_flops: the model's FLOPs per step.
      compute_saved: seconds per chip per step the change takes off these matmuls (their repeats).
      comm_seconds: seconds per step of the collectives the change brings (`change_comm`): an output the user
        wants whole over some of the data axes gathered over them, a weight's gradient reduced over them.
      collectives: those collectives in words (`AllGather_Y of 8.00 MiB: 373 µs`).
      removed_seconds: seconds per step of the collectives the change takes away (`removed_comm`): where the batch
        is split over data axes on a feature dim, the plan's collectives over those axes alone, which the batch
        split on its leading dim over them no longer needs.
      removed: those collectives in words.
    """

    ops: Mapping[str, tuple[float, float]]
    seconds: Mapping[str, float]
    where: Mapping[str, Any]
    argument: str
    now: str
    proposed: str
    data_axes: tuple[str, ...]
    model_flops: float
    compute_saved: float = 0.0
    comm_seconds: float = 0.0
    collectives: tuple[str, ...] = ()
    in_specs: tuple[str, str] | None = None
    removed_seconds: float = 0.0
    removed: tuple[str, ...] = ()

    @property
    def net_saving(self) -> float:
        """The compute the change saves and the communication it takes away, less the communication it brings,
        per chip per step."""
        return self.compute_saved + self.removed_seconds - self.comm_seconds

    @property
    def offered(self) -> bool:
        """Whether the change can be written and saves time once its collectives are priced."""
        return bool(self.argument) and self.net_saving > 0

    def repeat(self, key: str) -> float:
        """How many times its model FLOPs op `key` runs on the chips (1.0 for an op under the threshold)."""
        done, model = self.ops.get(key, (1.0, 1.0))
        return done / model

    @property
    def change(self) -> str:
        """`batch['x']: P(None, None, None) -> P('data', None, None)`, "" when it cannot be written; where a
        shard_map's body does the repeated matmuls, its in_specs for the batch too (`in_specs`)."""
        if not self.argument:
            return ""
        text = f"{self.argument}: {self.now} -> {self.proposed}"
        if self.in_specs:  # (as the user writes them: no trailing None; code first: the verifier cannot apply it)
            old, new = (_as_written(spec) for spec in self.in_specs)
            text = f"the shard_map's in_specs and out_specs for {self.argument}: {old} -> {new}, and {text}"
        return text

    @property
    def arguments(self) -> dict[str, str]:
        """The change as argument -> PartitionSpec, for `--verify-fixes`: {} when it cannot be written or part of it
        is code (a shard_map's in_specs, which the verifier cannot rewrite: the argument's spec alone would gather
        the batch into the same body)."""
        return {self.argument: self.proposed} if self.argument and not self.in_specs else {}


def repeated_work(report: Any, facts: Any, threshold: float) -> RepeatedWork | None:
    """The ops the chips run at least `threshold` times their model FLOPs (remat recompute aside), with the batch
    change that splits them (see `RepeatedWork`); None when none does, or the report has no program before
    partitioning, no predicted step or a mesh of one device. `facts`: the report's `Facts` (its costs are asked
    only when there is work to weigh)."""
    analysis = report.analysis
    mf = getattr(analysis, "model_flops", None)
    step = getattr(analysis, "step", None)
    if mf is None or mf.module is None or step is None or report.mesh is None or report.mesh.size <= 1:
        return None
    executed, seconds, where = _work_by_op(analysis, step.chips, facts.costs)
    ops = {key: (done, mf.by_op.get(key, 0.0)) for key, done in executed.items()}
    ops = {key: (done, model) for key, (done, model) in ops.items() if model > 0 and done >= threshold * model}
    if not ops:
        return None
    batch, weights = _arguments(mf, list(ops))
    extra: set[str] = set()
    if batch is None or not weights:  # the repeated ops' activations are computed (an embedding lookup, a norm)
        batch, extra = _by_role(mf.module, facts.arguments, batch, weights)
        weights = weights or _role_weights(mf.module, facts.arguments)  # (their gradients, for `change_comm`)
    data_axes = _data_axes(report.mesh, weights, extra)
    sizes = dict(zip(report.mesh.axis_names, report.mesh.axis_sizes))
    name, now, proposed = _batch_spec(batch, data_axes, sizes)
    in_specs = _shard_map_specs(mf, list(ops), batch, data_axes) if name else None
    saved = sum(seconds[key] * (1 - model / done) for key, (done, model) in ops.items())
    comm, said = change_comm(report, facts, ops, weights, data_axes, sizes) if data_axes else (0.0, [])
    # the data axes the batch now holds on a feature dim: the collectives over them alone are that split's
    feature_axes = tuple(a for dims in (sharding_axes(batch) or ())[1:] for a in dims if a in data_axes) \
        if name and batch is not None else ()
    removed, gone = removed_comm(facts, feature_axes) if feature_axes else (0.0, [])
    return RepeatedWork(ops=ops, seconds={k: seconds[k] for k in ops}, where={k: where[k] for k in ops},
                        argument=name, now=now, proposed=proposed, data_axes=data_axes, model_flops=mf.total,
                        compute_saved=saved, comm_seconds=comm, collectives=tuple(said), in_specs=in_specs,
                        removed_seconds=removed, removed=tuple(gone))


def removed_comm(facts: Any, feature_axes: tuple[str, ...]) -> tuple[float, list[str]]:
    """(seconds per step, the collectives in words) that moving the batch's `feature_axes` (data axes it now splits
    a feature dim over) to its leading dim takes away, as the report prices them now: the step time the compute
    waits for them (`Facts.step_saving`; each is listed with its seconds x executions per step). The plan's
    collectives over those axes alone go. No weight uses them, so every collective over them alone
    comes from the features split over them (the batch gathered, partial sums over the features reduced); on the
    changed plan the only collectives over them are the ones `change_comm` prices (a weight gradient's reduction,
    an output's gather) and a scalar's reduction (the loss's mean over the tokens), which stays and is not
    counted. A plan whose batch holds no data axis on a feature dim (replicated, or split on its leading dim)
    takes nothing away here."""
    gone, said = [], []
    for c in facts.collectives:
        if not c.axes or not set(c.axes) <= set(feature_axes) or c.inst is None or not c.inst.shape.dims:
            continue
        gone.append((c, 0.0))
        said.append(f"{c.notation.split(':')[0] or c.kind} of {format_bytes(c.bytes)}"
                    f"{f' x{c.count:g}' if c.count != 1 else ''}: {format_seconds(c.seconds * c.count)}")
    # what the step waits for them (`Facts.step_saving`: a collective hidden behind compute saves nothing)
    return (facts.step_saving(gone).seconds if gone else 0.0), said


def change_comm(report: Any, facts: Any, ops: Mapping[str, tuple[float, float]], weights: Sequence[Instruction],
                data_axes: tuple[str, ...], sizes: Mapping[str, int]) -> tuple[float, list[str]]:
    """(seconds per step, the collectives in words) that splitting the batch over `data_axes` brings, priced with
    the report's cost model on its topology (`Facts.price`):
      - a program output a repeated forward matmul makes, which each chip then computes 1/repeat of while the
        user's output sharding keeps more of it per chip: an AllGather of the output over the data axes its
        sharding does not split (the output's per-chip size read from the partitioned program's result);
      - a repeated backward matmul whose result is a weight's gradient (a weight argument's shape): each chip
        then sums its own tokens only, so the gradient is all-reduced over the data axes.
    A report whose topology cannot price (rebuilt from JSON) brings nothing it can say: (0, [])."""
    from analyzer.analysis.dataflow import callers

    mf = report.analysis.model_flops
    chips = report.analysis.step.chips
    callers_of = callers(mf.module)
    repeat_of = {d.instruction.name: (done / model, d) for key, (done, model) in ops.items()
                 for d in mf.dots.get(key, ())}
    found = _output_gathers(report, repeat_of, data_axes, sizes, chips)  # (kind, bytes, axes, times per step)
    # weight gradients: a repeated backward matmul of a weight's shape, or of its per-chip piece (a shard_map
    # body's); the weight's split is what each chip holds of a global-shape gradient, 1 of a piece
    # (a dot may write the gradient transposed; a scanned layer's is one layer's slice of the stacked weight)
    shapes: dict[tuple[int, ...], float] = {}
    for w in weights:
        axes = sharding_axes(w) or ()
        split = math.prod(sizes.get(a, 1) for dims in axes for a in dims)
        local = tuple(n // math.prod(sizes.get(a, 1) for a in dims) if dims else n
                      for n, dims in zip(w.shape.dims, (*axes, *([()] * len(w.shape.dims)))))
        for dims, ways in ((w.shape.dims, split), (local, 1.0)):
            for d in (dims, dims[1:] if len(dims) > 2 else dims):
                shapes.setdefault(tuple(sorted(d)), ways)
    for _, record in repeat_of.values():
        ways = shapes.get(tuple(sorted(record.instruction.shape.dims)))
        if ways is None or dot_pass(callers_of, record) != "backward":
            continue
        found.append(("all-reduce", record.instruction.shape.byte_size / ways, data_axes, float(record.count)))
    total, said = 0.0, []
    for kind, nbytes, axes, times in found:
        try:
            price = facts.price(kind, nbytes, axes)
        except AnalyzerError:
            return 0.0, []
        total += price.seconds * times
        name = f"{'AllGather' if kind == 'all-gather' else 'AllReduce'}_{','.join(axes)} of {format_bytes(nbytes)}"
        said.append(f"less the {name} made already: -{format_seconds(price.seconds)}" if times < 0 else
                    f"{name}{f' x{times:g}' if times != 1 else ''}: {format_seconds(price.seconds * times)}")
    return total, said


def dot_pass(callers_of: Mapping[str, Any], record: Any) -> str:
    """The pass of a `Dot` record (`analyzer.analysis.mapping.pass_of`): its op_name's, else (a shard_map body's
    dot is named `dot_general` alone) that of the call that runs its computation, up the one-caller chain."""
    from analyzer.analysis.mapping import pass_of

    md = record.instruction.metadata
    found, name = pass_of(md.op_name if md else None), record.computation
    for _ in range(16):
        sites = callers_of.get(name, ())
        if found or len(sites) != 1:
            break
        caller, call = sites[0]
        found, name = pass_of(call.metadata.op_name if call.metadata else None), caller.name
    return found


def _output_gathers(report: Any, repeat_of: Mapping[str, tuple[float, Any]], data_axes: tuple[str, ...],
                    sizes: Mapping[str, int], chips: int) -> list[tuple[str, float, tuple[str, ...], float]]:
    """The AllGathers (kind, bytes, axes, times per step; -1: one made already, which the change replaces) that
    bring a repeated forward matmul's program output, computed 1/repeat as much per chip after the change, back to
    what the user's output sharding holds per chip (see `change_comm`)."""
    from analyzer.analysis.dataflow import callers

    module = report.analysis.model_flops.module
    callers_of = callers(module)
    part = getattr(report.analysis, "module", None)
    found: list[tuple[str, float, tuple[str, ...], float]] = []
    # outputs: the entry's result, element by element, in the program before partitioning and after
    if part is not None and part.entry is not None and module.entry is not None:
        outs = _outputs(module.entry)
        held = list(part.entry.root.shape.leaves())
        for i, inst in enumerate(outs if len(outs) == len(held) else []):
            dot = _producer_dot(module.entry, inst)
            if dot is None or dot.name not in repeat_of:
                continue
            repeat, record = repeat_of[dot.name]
            if dot_pass(callers_of, record) == "backward":
                continue
            out_ways = inst.shape.byte_size / max(held[i].byte_size, 1)  # how many ways the output is split
            # each chip's part of it now (the repeated chips hold the same part) and after the change; the user's
            # output holds `held`: the part a chip computes is gathered up to it (over the axes that make the ways)
            now_ways, new_ways = chips / repeat, float(chips)
            after = _axes_for(data_axes, sizes, new_ways / out_ways)
            if after:
                found.append(("all-gather", held[i].byte_size, after, 1.0))
                before = _axes_for(data_axes, sizes, now_ways / out_ways)
                if before:  # gathered already before the change: only the difference is the change's
                    found.append(("all-gather", held[i].byte_size, before, -1.0))
    return found


def _outputs(entry: Any) -> list[Any]:
    """The entry's result, one instruction per array (a tuple's elements; a tuple element read back by
    get-tuple-element, as jax 0.10's program before partitioning writes it, is the element)."""
    by_name = entry.by_name
    root = entry.root
    while root.opcode == "get-tuple-element" and root.operands:
        tup = by_name.get(root.operands[0].name)
        if tup is None or tup.opcode != "tuple":
            break
        root = by_name[tup.operands[int(root.attr("index") or 0)].name]
    return [by_name[o.name] for o in root.operands] if root.opcode == "tuple" else [root]


def _producer_dot(entry: Any, inst: Any, depth: int = 0) -> Any:
    """The dot whose result `inst` is, through ops of one operand that keep its elements (a cast, a copy, a
    reshape, jax's sharding annotations), else None."""
    while depth < 16 and inst is not None:
        if inst.opcode == "dot":
            return inst
        if len(inst.operands) != 1 or inst.operands[0].shape.num_elements != inst.shape.num_elements:
            return None
        inst, depth = entry.by_name.get(inst.operands[0].name), depth + 1
    return None


def _axes_for(data_axes: Sequence[str], sizes: Mapping[str, int], ways: float) -> tuple[str, ...]:
    """The minor-most data axes whose sizes multiply to `ways` (the group a collective over `ways` devices runs
    over), () when `ways` is 1 or less."""
    if ways <= 1.0 + 1e-9:
        return ()
    axes: list[str] = []
    n = 1
    for a in reversed(data_axes):
        if n >= ways - 1e-9:
            break
        axes.insert(0, a)
        n *= sizes[a]
    return tuple(axes)


def _work_by_op(analysis: Any, chips: int, costs: Any) -> tuple[dict[str, float], dict[str, float], dict[str, Any]]:
    """Per op (`analyzer.analysis.dots.op_key`), remat recompute aside: the FLOPs all chips execute per step,
    the seconds its dots take per chip at the peak of their dtype, and its first `Dot` record."""
    from analyzer.analysis.dots import is_remat, op_key

    executed: dict[str, float] = {}
    seconds: dict[str, float] = {}
    where: dict[str, Any] = {}
    for d in analysis.dots:
        if is_remat(d):
            continue
        key = op_key(d, analysis.module)
        executed[key] = executed.get(key, 0.0) + d.flops * d.count * chips
        seconds[key] = seconds.get(key, 0.0) + costs.dot_cost(d).peak_seconds * d.count
        where.setdefault(key, d)
    return executed, seconds, where


def _data_axes(mesh: Any, weights: Sequence[Instruction], extra: set[str] | frozenset[str] = frozenset()
               ) -> tuple[str, ...]:
    """The mesh axes (of more than one device) no weight is sharded over (`extra`: more weights' axes): the
    batch's."""
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))
    weight_axes = {a for w in weights for dims in (sharding_axes(w) or ()) for a in dims} | set(extra)
    return tuple(a for a in mesh.axis_names if a not in weight_axes and sizes[a] > 1)


def _by_role(module: Any, args: Any, batch: Instruction | None, weights: Sequence[Instruction]
             ) -> tuple[Instruction | None, set[str]]:
    """Where the repeated matmuls' operands trace to no argument (the first layer's activations come from an
    embedding lookup and a layer norm: a Hugging Face model's), the program's arguments by role
    (`analyzer.analysis.roles.Arguments`): (the batch argument, its token ids as the report's per-chip batch reads
    them, when `batch` is None; the mesh axes the weights are sharded over, when `weights` is empty)."""
    if batch is None and args.batch_name and module is not None and module.entry is not None:
        batch = next((p for p in module.entry.instructions if p.opcode == "parameter"
                      and argument_name(p) == args.batch_name), None)
    axes = set() if weights else {a for w in args.weights for dims in args.specs.get(w, ()) for a in dims}
    return batch, axes


def _role_weights(module: Any, args: Any) -> list[Instruction]:
    """The entry parameters of the weights read by role (`analyzer.analysis.roles.Arguments.weights`)."""
    if module is None or module.entry is None:
        return []
    return [p for p in module.entry.instructions if p.opcode == "parameter" and argument_name(p) in args.weights]


def _op_location(module: Any, first: Any) -> Location:
    """Where a finding about the op of `Dot` record `first` points: the user's line its metadata leads to."""
    from analyzer.analysis.mapping import source_frames

    md = first.instruction.metadata
    frames = source_frames(module, md.stack_frame_id if md else None, md.source_file if md else None,
                           md.source_line if md else None)
    file, _, line = frames.user.rpartition(":")
    return Location(file=file or None, line=int(line) if line.isdigit() else None, context=frames.context or None,
                    computation=first.computation, instruction=first.instruction.name,
                    hlo_line=first.instruction.position.line if first.instruction.position else None)


def _batch_spec(batch: Instruction | None, data_axes: tuple[str, ...], sizes: dict[str, int]) -> tuple[str, str, str]:
    """(the batch argument's name, its PartitionSpec now, the one with its leading dim over `data_axes`), or
    three "" when there is no batch argument, no data axis, its leading dim does not divide, or it is so already."""
    if batch is None or not data_axes:
        return "", "", ""
    dims = list(sharding_axes(batch) or [() for _ in batch.shape.dims])
    ways = math.prod(sizes[a] for a in data_axes)
    if not batch.shape.dims or batch.shape.dims[0] % ways != 0:
        return "", "", ""
    new = [tuple(a for a in d if a not in data_axes) for d in dims]
    new[0] = tuple(data_axes) + new[0]
    if new == [tuple(d) for d in dims]:
        return "", "", ""
    return argument_name(batch), spec_text(dims), spec_text(new)


def _as_written(spec: str) -> str:
    """A PartitionSpec as users write it, without trailing Nones; a None before a split dim stays.

    Example:
        >>> _as_written("P(None, 'data', None)"), _as_written("P(None, None)"), _as_written("P('data', None)")
        ("P(None, 'data')", 'P()', "P('data')")
    """
    while spec.endswith(", None)"):
        spec = spec[:-len(", None)")] + ")"
    return "P()" if spec == "P(None)" else spec


def _shard_map_specs(mf: Any, keys: Sequence[str], batch: Instruction | None, data_axes: tuple[str, ...]
                     ) -> tuple[str, str] | None:
    """(the in_specs now, the in_specs to write) of the shard_map operand that hands the batch to the body where
    the ops' forward dots run, when they run in a shard_map body and read the batch through its operand; None
    otherwise (the batch's argument spec is then the whole change)."""
    from analyzer.analysis.dataflow import callers
    from analyzer.analysis.dots import MANUAL_BODY, manual_operand_axes

    module = mf.module
    if batch is None or module is None:
        return None
    callers_of = callers(module)
    for key in keys:
        for d in mf.dots.get(key, ()):
            if not d.computation.startswith(MANUAL_BODY) or dot_pass(callers_of, d) == "backward":
                continue
            for operand in d.instruction.operands[:2]:
                piece = _body_piece(callers_of, module.by_name.get(d.computation), operand.name)
                if piece is None:
                    continue
                caller, g2l, index = piece
                dims = manual_operand_axes(caller, g2l, index)
                source = caller.by_name.get(g2l.operand_names[index])
                if dims is None or entry_argument(module, caller, source, callers_of) is not batch:
                    continue
                new = [tuple(a for a in dim if a not in data_axes) for dim in dims]
                if not new:
                    return None
                new[0] = tuple(data_axes) + new[0]
                return spec_text(dims), spec_text(new)
    return None


def _body_piece(callers_of: Mapping[str, Any], comp: Any, name: str) -> tuple[Any, Any, int] | None:
    """(the caller, its `GlobalToLocalShape`, the operand's index) of the shard_map piece that value `name` of body
    `comp` is (a body parameter, through relabellings), else None."""
    from analyzer.analysis.dots import is_global_to_local
    from analyzer.hlo.opcodes import RELABEL

    inst = comp.by_name.get(name) if comp is not None else None
    for _ in range(16):
        if inst is None or inst.opcode != "parameter" and not (inst.opcode in RELABEL and inst.operand_names):
            return None
        if inst.opcode == "parameter":
            break
        inst = comp.by_name.get(inst.operand_names[0])
    sites = callers_of.get(comp.name, ())
    number = inst.parameter_number or 0 if inst is not None else 0
    if inst is None or len(sites) != 1 or number >= len(sites[0][1].operand_names):
        return None
    caller, call = sites[0]
    gte = caller.by_name.get(call.operand_names[number])
    if gte is None or gte.opcode != "get-tuple-element" or not gte.operand_names:
        return None
    g2l = caller.by_name.get(gte.operand_names[0])
    return (caller, g2l, int(gte.attr("index") or 0)) if is_global_to_local(g2l) else None


def _arguments(mf: Any, keys: Sequence[str]) -> tuple[Instruction | None, list[Instruction]]:
    """The batch argument (the entry parameter the left operand of the ops' dots reads; token ids before an
    embedding lookup) and the weight arguments (those their right operands read, whether the left operand is an
    argument or a computed activation: a later layer's input, an expert's tokens after the dispatch; never an
    argument some dot reads on the left), in the program before partitioning; a scanned layer's dots read them through its loop (`roles.entry_argument`)."""
    from analyzer.analysis.dataflow import callers

    module = mf.module
    callers_of = callers(module)
    lhs: dict[str, tuple[int, Instruction]] = {}
    rhs: dict[str, Instruction] = {}
    alone: dict[str, Instruction] = {}
    for key in keys:
        for d in mf.dots.get(key, ()):
            comp = module.by_name.get(d.computation)
            if comp is None or dot_pass(callers_of, d) == "backward":
                continue  # the forward dots: activation on the left, weight on the right
            # (in the entry, or a scanned layer's loop body: a stacked weight's slice, the carried activations)
            found = [entry_argument(module, comp, comp.by_name.get(o.name), callers_of)
                     for o in d.instruction.operands[:2]]
            if len(found) == 2 and found[0] is not None and found[1] is not None and found[0] is not found[1]:
                a, w = found
                n, _ = lhs.get(a.name, (0, a))
                lhs[a.name] = (n + 1, a)
                rhs[w.name] = w
            elif len(found) == 2 and found[0] is None and found[1] is not None:
                alone[found[1].name] = found[1]  # a computed activation times an argument: a later layer's weight
    candidates = [a for n, a in sorted(lhs.values(), key=lambda v: -v[0]) if a.name not in rhs]
    weights = [w for k, w in {**alone, **rhs}.items() if k not in lhs]
    return (candidates[0] if candidates else None), weights
