"""HA104: compute a plan repeats on several chips (a batch replicated over a mesh axis that could split it).

The model's FLOPs (`analyzer.analysis.dots.model_flops`, counted on the program jax handed XLA) are the work
of the model; the partitioned module's dots times the chips are the work of the chips. Where an op's chips do
more than its model FLOPs (remat aside), several chips compute the same part of it. The rule traces the
op's forward dots in the program before partitioning to the arguments they read: the left operand's
argument is the activation (the batch: `x @ w`, `einsum('bsd,df->bsf', x, w)`, Flax's Dense), the right
operand's is the weight. The mesh axes no weight uses are the batch's (data-parallel) axes; the finding
names the batch argument by its pytree path, its PartitionSpec now and the one to write (its leading dim
over those axes), the redundant FLOPs and the compute the change removes from each chip's step. Where the
dots' operands trace to no argument (the first layer's activation is computed from an embedding lookup and a layer
norm, as in a Hugging Face model), the batch and the weights are the program's arguments by role
(`analyzer.analysis.roles.Arguments`: the token ids, the right operands of forward dots).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from analyzer.analysis.roles import argument_name, entry_argument, sharding_axes
from analyzer.diagnostics import Diagnostic, Location, Severity
from analyzer.rules.messages import Message
from analyzer.rules.registry import Option, rule

if TYPE_CHECKING:
    from analyzer.hlo.ir import Instruction
    from analyzer.rules.context import RuleContext

__all__ = ["RepeatedWork", "redundant_compute", "repeated_work", "spec_text"]


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

    template: ClassVar[str] = (
        "the chips repeat each other's work: the matmuls of {ops} source line(s) run up to {repeat:.1f}x their "
        "model FLOPs, "
        "{redundant_flops:.3g} FLOPs per step computed more than once ({share:.0%} of the model's "
        "{model_flops:.3g}); the batch is not split over {where}. Change {change}: each chip then computes its "
        "own part, {saved_seconds:time} less compute per chip per step (the matmuls alone; the change's "
        "own collectives, such as the gradients' reduction over the batch axes, are not priced here)."
    )

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
    and the one to write (its leading dim over the mesh axes no weight uses), the redundant FLOPs and the
    compute the change removes from each chip's step. The report's "HFU (repeated work)" line and the dots'
    `redundancy` column show the same repeat.

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
    saved = sum(seconds[key] * (1 - model / done) for key, done, model in ops)
    repeat = max(done / model for _, done, model in ops)
    first = work.where[max(ops, key=lambda o: o[1] - o[2])[0]]
    name, now, proposed = work.argument, work.now, work.proposed
    data_axes = work.data_axes
    fix = (f"{name}: {now} -> {proposed}" if name else
           f"split the batch over {', '.join(repr(a) for a in data_axes) or 'the mesh axes no weight uses'}")
    yield ctx.diagnostic(
        RedundantCompute(ops=len(ops), repeat=repeat, redundant_flops=redundant, model_flops=work.model_flops,
                         saved_seconds=saved, change=fix, axes=", ".join(repr(a) for a in data_axes)),
        location=_op_location(report.analysis.module, first), seconds=sum(seconds[key] for key, _, _ in ops),
        alternative=f"each chip computes its own {1 / repeat:.0%} of these matmuls" if repeat > 0 else None,
        alternative_seconds=sum(seconds[key] for key, _, _ in ops) - saved, saving_seconds=saved, fix=fix,
        details={"redundant_flops": redundant, "repeat": repeat, "argument": name, "partition_spec": now,
                 "proposed_partition_spec": proposed, "data_axes": list(data_axes),
                 "ops": [key for key, _, _ in ops]},
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
    """

    ops: Mapping[str, tuple[float, float]]
    seconds: Mapping[str, float]
    where: Mapping[str, Any]
    argument: str
    now: str
    proposed: str
    data_axes: tuple[str, ...]
    model_flops: float

    def repeat(self, key: str) -> float:
        """How many times its model FLOPs op `key` runs on the chips (1.0 for an op under the threshold)."""
        done, model = self.ops.get(key, (1.0, 1.0))
        return done / model

    @property
    def change(self) -> str:
        """`batch['x']: P(None, None, None) -> P('data', None, None)`, "" when it cannot be written."""
        return f"{self.argument}: {self.now} -> {self.proposed}" if self.argument else ""


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
    data_axes = _data_axes(report.mesh, weights, extra)
    name, now, proposed = _batch_spec(batch, data_axes, dict(zip(report.mesh.axis_names, report.mesh.axis_sizes)))
    return RepeatedWork(ops=ops, seconds={k: seconds[k] for k in ops}, where={k: where[k] for k in ops},
                        argument=name, now=now, proposed=proposed, data_axes=data_axes, model_flops=mf.total)


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


def _arguments(mf: Any, keys: Sequence[str]) -> tuple[Instruction | None, list[Instruction]]:
    """The batch argument (the entry parameter the left operand of the ops' dots reads; token ids before an
    embedding lookup) and the weight arguments (those their right operands read), in the program before
    partitioning; a scanned layer's dots read them through its loop (`roles.entry_argument`)."""
    from analyzer.analysis.dataflow import callers
    from analyzer.analysis.mapping import pass_of

    module = mf.module
    callers_of = callers(module)
    lhs: dict[str, tuple[int, Instruction]] = {}
    rhs: dict[str, Instruction] = {}
    for key in keys:
        for d in mf.dots.get(key, ()):
            md = d.instruction.metadata
            comp = module.by_name.get(d.computation)
            if comp is None or pass_of(md.op_name if md else None) == "backward":
                continue  # the forward dots: activation on the left, weight on the right
            # (in the entry, or a scanned layer's loop body: a stacked weight's slice, the carried activations)
            found = [entry_argument(module, comp, comp.by_name.get(o.name), callers_of)
                     for o in d.instruction.operands[:2]]
            if len(found) == 2 and found[0] is not None and found[1] is not None and found[0] is not found[1]:
                a, w = found
                n, _ = lhs.get(a.name, (0, a))
                lhs[a.name] = (n + 1, a)
                rhs[w.name] = w
    candidates = [a for n, a in sorted(lhs.values(), key=lambda v: -v[0]) if a.name not in rhs]
    weights = [w for k, w in rhs.items() if k not in lhs]
    return (candidates[0] if candidates else None), weights
