"""The whole step: every instruction on the executed path gets a time, collectives overlap compute where the
schedule (or the overlap model) lets them, and the step is the compute stream's critical path.

    step = predict_step(module, graph, collectives, dots, hardware, topology)
    step.step_seconds, step.exposed_comm_seconds, step.mfu

Times of one instruction (no second FLOPs count, no second price):
  - dots, convolutions and fusions that hold them: the roofline, max(FLOPs / peak, HBM bytes / HBM bandwidth);
    the FLOPs are those of `analyzer.analysis.dots` (the `Dot` records);
  - other fusions and ops: the HBM bytes they read and write / HBM bandwidth. A final (fused) module is
    counted fusion by fusion. An unfused module (the cpu target's after-SPMD HLO) is counted as if every chain
    of elementwise ops were one fusion: an op pays for the operands it reads from a non-elementwise producer
    and for its result when a non-elementwise op (or the root) reads it. Slices pay for the slice, dynamic
    update slices for the update (in place);
  - collectives: the seconds of their row in `Report.collectives` (analyzer.theory.cost), on the link of
    their mesh axes (one track per axis set, ICI or DCN);
  - loops: their body times the trip count; conditionals: their costliest branch; calls: their callee.
Remat recompute is included because it is in the HLO.

Overlap (docs/step.md says why):
  - scheduled modules (`is_scheduled=true`, the TPU target's final HLO): the printed order is the execution
    order. An async collective (`*-start`/`*-done`, `async-start`/`async-done`, async collective fusions,
    collective-matmul permute rings) occupies its link from its first instruction to its last; compute
    scheduled in between runs meanwhile; the done waits. A sync collective blocks the compute stream.
  - unscheduled modules (cpu target, after-SPMD dumps): the latency-hiding scheduler is modelled as the TPU
    compiler schedules scanned layers. A collective is issued at the start of the last dot before its first
    use (a weight gathered behind the previous matmul), no earlier than its operands are ready (a loop-invariant
    operand, a weight sliced by the loop counter, is ready at the iteration's start), and is waited for just
    before its first consumer; one whose result only flows to the computation's outputs (gradients scattered
    behind) is waited for at the end. Collectives run one after another, whatever their link: XLA's
    latency-hiding scheduler keeps one collective in flight by default (`parallel_collective_overlap_limit`
    1), and libtpu's final HLO for the chapter's steps never has two asynchronous collectives in flight and
    leaves the others synchronous. Inside a loop body, a collective whose result only flows to outputs the
    next iteration does not compute with (stacked gradients, not the carried activation) finishes under the
    next iteration: the loop runs at max(body, the collective stream's busy time) per iteration plus the last
    iteration's drain. Nothing is fetched an iteration ahead: the TPU compiler
    gathers a layer's weights inside that layer's iteration (its final HLO for the chapter's steps on
    v5e:2x4, and collective matmuls at larger sizes). A collective on the data path between two dots
    (an activation all-reduce) waits where it is used, also across iterations.

The step is the compute stream's end (every wait included). `exposed_comm_seconds` = step - compute: the time
the compute stream waits for links; each wait is charged to the collective(s) waited for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from analyzer.analysis.dataflow import users_map
from analyzer.analysis.graph import branch_sum
from analyzer.hlo.opcodes import COLLECTIVES, DOTS, LINK, NOP, RELABEL, SLICING, UNFUSED, VIEWS

if TYPE_CHECKING:
    from analyzer.analysis.collectives import Collective
    from analyzer.analysis.dots import Dot, ModelFlops
    from analyzer.analysis.graph import CallGraph
    from analyzer.hlo.ir import Computation, HloModule, Instruction
    from analyzer.theory.hardware import HardwareSpec

__all__ = ["COMPUTE_TRACK", "Span", "StepPrediction", "predict_step", "instruction_hbm_bytes"]

COMPUTE_TRACK = "compute"
_STREAM = "collectives"  # the one collective stream of an unscheduled module's overlap model

# Custom-calls that run no kernel: the SPMD partitioner's and layout markers, host-offload and buffer annotations.
_CUSTOM_FREE = ("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "LayoutConstraint",
                "MoveToHost", "MoveToDevice", "AllocateBuffer")
# The instructions `_Walker.flops_in` adds up: dots (the opcodes `extract_dots` takes) and what calls code.
_FLOPS_OPS = tuple(sorted(DOTS | {"fusion", "call"}))


@dataclass(frozen=True)
class Span:
    """One stretch of the predicted step on one track.

    Attributes:
      track: "compute", or the link of a collective ("ICI X", "ICI X,Y", "DCN data").
      start, seconds: where it starts on the step's clock and how long it runs.
      name: the HLO instruction; computation: where it is.
      kind: "matmul" (FLOPs-bound), "memory" (HBM-bound), "collective", or "wait" (compute stream idle).
      row: the collective's row in `Report.collectives`, else None.
      instruction: the HLO instruction (for source lines; not serialised).
    """

    track: str
    start: float
    seconds: float
    name: str
    computation: str
    kind: str
    row: int | None = None
    instruction: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class StepPrediction:
    """The predicted step.

    Attributes:
      step_seconds: the compute stream's end, every wait for a link included.
      compute_seconds: all compute (dots, fusions, elementwise, copies), run back to back.
      matmul_seconds: the dots' FLOPs / peak (the compute of the old totals).
      memory_bound_seconds: the part of `compute_seconds` spent in instructions bound by HBM bandwidth.
      exposed_comm_seconds: step - compute: the time the compute stream waits for communication.
      exposed_by_axis: exposed seconds by mesh axis set (the keys of `Totals.by_axis`).
      busy: seconds each track is busy per step (compute and every link).
      exposed_rows: exposed seconds per collective row (all executions of the step), in row order.
      model_flops, executed_flops: FLOPs per step over all chips: the model's (its dots at global size, once
        per program, remat left out: `analyzer.analysis.dots.model_flops`), and every dot each chip runs (remat
        recompute and a plan's redundant compute included).
      mfu, hfu: model_flops / (step x peak x chips), executed_flops / (same). hfu / mfu above 1 is work the
        plan or remat repeats.
      overlap: "schedule" (the module's own schedule) or "model" (the overlap model of an unscheduled module).
      spans: the timeline (every instruction that takes time, every collective, loops unrolled).
      windows: (label, start, end) of one layer, for the timeline plot: one iteration of each loop whose body
        holds dots (`forward layer`, `backward layer`, or `layer` when the op names do not say); in a model
        without such loops (unrolled), one repeat of the forward and of the backward dots' sequence.
      chips: devices the step runs on; peak_flops: per chip.
      bubble_seconds: the part of `step_seconds` a pipeline's stages spend on no microbatch (filling and
        draining), counted in the loop's iterations, which run whatever they carry (docs/step.md, "Pipeline
        bubble"); 0 without a pipeline loop.
      pipelines: one (loop, stages, iterations, bubble seconds, loop seconds) per pipeline loop execution.
    """

    step_seconds: float
    compute_seconds: float
    matmul_seconds: float
    memory_bound_seconds: float
    exposed_comm_seconds: float
    exposed_by_axis: Mapping[str, float]
    busy: Mapping[str, float]
    exposed_rows: tuple[float, ...]
    model_flops: float
    executed_flops: float
    mfu: float
    hfu: float
    overlap: str
    chips: int
    peak_flops: float
    spans: tuple[Span, ...] = field(default=(), repr=False)
    windows: tuple[tuple[str, float, float], ...] = ()
    track_axes: Mapping[str, str] = field(default_factory=dict)
    bubble_seconds: float = 0.0
    pipelines: tuple[tuple[str, int, int, float, float], ...] = ()


# ---------------------------------------------------------------------- bytes
def _bytes(shape: Any) -> int:
    if shape is None:
        return 0
    try:
        return int(shape.byte_size)
    except ValueError:
        return 0


def instruction_hbm_bytes(inst: Instruction, module: HloModule | None = None, *,
                          not_plain: tuple[frozenset[str], frozenset[str]] | None = None) -> int:
    """HBM bytes one execution of `inst` reads and writes, as one kernel: its operands and its result, except
    that a slice reads only the slice, a dynamic-update-slice writes the update in place, an async slice or
    copy (`slice-start`/`copy-start`) moves its data once (the `-done` moves nothing more), and a fusion reads
    of a parameter only what its slicing ops take and writes of an output that updates a buffer in place only
    the update (both followed through views and nested fusions, see `_fusion_bytes`). `not_plain`: what a
    fusion's pricing asks of `module` (`_not_plain`), when the caller prices many and asked it once.

    Example:
        f32[8,128] add(f32[8,128], f32[8,128]) -> 3 x 4096 = 12288
    """
    op = inst.opcode
    if op in SLICING:
        return 2 * _bytes(inst.shape)
    if op == "dynamic-update-slice":
        upd = inst.operands[1].shape if len(inst.operands) > 1 else None
        return 2 * _bytes(upd)
    if op in ("slice-start", "copy-start"):
        # ((operand), result, context) for slice-start; (result, operand, context) for copy-start
        parts = inst.shape.tuple_shapes if inst.shape is not None and inst.shape.is_tuple else ()
        moved = parts[1] if op == "slice-start" and len(parts) > 1 else (parts[0] if parts else inst.shape)
        return 2 * _bytes(moved)
    if op in ("slice-done", "copy-done"):
        return 0
    if op == "fusion" and module is not None:
        return _fusion_bytes(inst, module, not_plain)
    return sum(_bytes(o.shape) for o in inst.operands) + _bytes(inst.shape)


# Collectives inside a fusion (async collective fusions, collective matmuls) move their data on the link (`LINK`): it
# is priced with the collective, not as HBM traffic of the fusion.


def _is_link(inst: Instruction) -> bool:
    """A collective, or the AsyncCollectiveStart/Done custom-call of an async collective fusion."""
    return inst.opcode in LINK or (inst.opcode == "custom-call" and "AsyncCollective" in (
        inst.attr("custom_call_target") or ""))


# Ops a fusion reads through without touching memory of its own: what their users take of the value is what
# is read of their operand (a convert reads the source elements at the source's width).
_THROUGH = RELABEL | {"get-tuple-element"}


def _elements(shape: Any) -> int:
    if shape is None:
        return 0
    if shape.is_tuple or shape.is_buffer:
        return sum(_elements(s) for s in shape.tuple_shapes)
    return shape.num_elements


def _users_in(comp: Computation, cache: dict[str, Mapping[str, tuple[tuple[Instruction, int], ...]]]
              ) -> Mapping[str, tuple[tuple[Instruction, int], ...]]:
    """`analyzer.analysis.dataflow.users_map` of `comp`, built once per fusion walk."""
    users = cache.get(comp.name)
    if users is None:
        users = cache[comp.name] = users_map(comp)
    return users


def _elements_read(comp: Computation, name: str, module: HloModule, cache: dict, depth: int = 0) -> int | None:
    """Elements of the value `name` inside fusion computation `comp` that its users read from memory, or None
    when some user reads all of it. Slicing ops (dynamic-slice, slice, gather) read their result's elements;
    a dynamic-update-slice's base is updated in place (nothing read); views and nested fusions are followed."""
    if depth > 16:
        return None
    users = _users_in(comp, cache).get(name, ())
    if not users:
        return None
    total = 0
    for u, _ in users:
        op = u.opcode
        first = bool(u.operand_names) and u.operand_names[0] == name
        if op in SLICING and first and name not in u.operand_names[1:]:
            total += _elements(u.shape)
        elif op == "dynamic-update-slice" and first and name not in u.operand_names[1:]:
            continue
        elif _is_link(u):
            continue  # moved by the link, priced with the collective
        elif op == "tuple" and u.is_root:
            continue  # passed through to an output (aliased, not read)
        elif op in _THROUGH:
            sub = _elements_read(comp, u.name, module, cache, depth + 1)
            if sub is None:
                return None
            total += sub
        elif op == "fusion":
            inner = module.by_name.get(u.called_computations[0]) if u.called_computations else None
            if inner is None:
                return None
            params = {i.parameter_number: i for i in inner.instructions if i.opcode == "parameter"}
            for k, o in enumerate(u.operand_names):
                if o != name:
                    continue
                p = params.get(k)
                sub = _elements_read(inner, p.name, module, cache, depth + 1) if p is not None else None
                if sub is None:
                    return None
                total += sub
        else:
            return None
    return total


def _bytes_written(comp: Computation, inst: Instruction, module: HloModule, depth: int = 0) -> int:
    """Bytes a fusion output produced by `inst` writes to memory: a dynamic-update-slice writes its update (the
    buffer is updated in place), followed through views, tuples and nested fusions; anything else its result."""
    op = inst.opcode
    if op == "parameter" or _is_link(inst):
        return 0  # a buffer passed through (aliased), or written by the link
    if depth <= 16:
        if op == "dynamic-update-slice" and len(inst.operands) > 1:
            return int(_elements(inst.operands[1].shape) * _element_bytes(inst.shape))
        if op == "tuple":
            return sum(_bytes_written(comp, comp.by_name[o], module, depth + 1) if o in comp.by_name
                       else _bytes(s.shape) for o, s in zip(inst.operand_names, inst.operands))
        if op in ("bitcast", "reshape") and inst.operand_names and inst.operand_names[0] in comp.by_name:
            return _bytes_written(comp, comp.by_name[inst.operand_names[0]], module, depth + 1)
        if op == "fusion" and inst.called_computations and inst.called_computations[0] in module.by_name:
            inner = module.by_name[inst.called_computations[0]]
            return _bytes_written(inner, inner.root, module, depth + 1)
    return _bytes(inst.shape)


def _element_bytes(shape: Any) -> float:
    n = _elements(shape)
    return _bytes(shape) / n if n else 0.0


# What can make a fusion's bytes differ from its operands' plus its output's: the opcodes `_elements_read` and
# `_bytes_written` treat apart (slices, in-place updates, links, nested fusions; `AsyncCollective` custom-calls
# are looked for in the text), and a tuple at the root. A root view (bitcast, reshape) writes what its operand
# writes: nothing for a parameter passed through.
_NOT_PLAIN = tuple(sorted(SLICING | LINK | {"dynamic-update-slice", "fusion"}))


def _not_plain(module: HloModule) -> tuple[frozenset[str], frozenset[str]]:
    """The computations that hold one of `_NOT_PLAIN` or a custom-call, and those that hold one of `_NOT_PLAIN`:
    what `_plain_written` asks of the module (a caller that prices many fusions asks it once: `_Walker`)."""
    return module.holding(*_NOT_PLAIN, "custom-call"), module.holding(*_NOT_PLAIN)


def _plain_written(comp: Computation, module: HloModule,
                   not_plain: tuple[frozenset[str], frozenset[str]] | None = None) -> int | None:
    """For a fusion body not parsed yet (a lazily parsed module) that holds none of the ops that make
    `_fusion_bytes` read less than its operands (`_NOT_PLAIN`): the bytes its output writes (`_bytes_written`
    of the root, the root and the views under it read from their lines); else None (then the body is read).
    `not_plain`: `_not_plain(module)`, when the caller has it."""
    if comp.is_parsed:
        return None
    with_custom, held = not_plain if not_plain is not None else _not_plain(module)
    if comp.name in with_custom and (comp.name in held or "AsyncCollective" in comp.text):  # type: ignore[attr-defined]
        return None
    head = comp.line_head()  # type: ignore[attr-defined]
    for _ in range(8):
        if head is None or head[0] not in VIEWS:
            break
        head = comp.line_head(head[2]) if head[2] is not None else None  # type: ignore[attr-defined]
    if head is None or head[0] in VIEWS or head[0] == "tuple":
        return None
    return 0 if head[0] == "parameter" else _bytes(head[1])


def _fusion_bytes(inst: Instruction, module: HloModule,
                  not_plain: tuple[frozenset[str], frozenset[str]] | None = None) -> int:
    """HBM bytes of one fusion: per operand, what its fused computation reads of it (slices only the slice,
    an in-place updated buffer nothing; through bitcasts, reshapes, copies, converts, transposes,
    get-tuple-elements and nested fusions), capped at the operand's size; per output, the update of an
    in-place dynamic-update-slice, nothing for a parameter passed through or a collective's result, else the
    output. Operands only a collective reads are the link's, not HBM traffic of the fusion."""
    called = [module.by_name[c] for c in inst.called_computations if c in module.by_name]
    if not called:
        return sum(_bytes(o.shape) for o in inst.operands) + _bytes(inst.shape)
    comp = called[0]
    written = _plain_written(comp, module, not_plain)
    if written is not None:  # every operand read whole: the body need not be parsed
        return sum(_bytes(o.shape) for o in inst.operands) + written
    cache: dict[str, Mapping[str, tuple[tuple[Instruction, int], ...]]] = {}
    params = {i.parameter_number: i for i in comp.instructions if i.opcode == "parameter"}
    total = 0
    for k, operand in enumerate(inst.operands):
        whole = _bytes(operand.shape)
        p = params.get(k)
        read = _elements_read(comp, p.name, module, cache) if p is not None else None
        total += whole if read is None else min(whole, int(read * _element_bytes(operand.shape)))
    return total + _bytes_written(comp, comp.root, module)


# ---------------------------------------------------------------------- the walk
@dataclass
class _Timeline:
    """One execution of a computation, on a clock starting at 0."""

    duration: float = 0.0
    compute: float = 0.0
    matmul: float = 0.0
    memory: float = 0.0
    busy: dict[str, float] = field(default_factory=dict)
    exposed: dict[int, float] = field(default_factory=dict)  # row -> seconds waited for it
    spans: list[tuple] = field(default_factory=list)  # (track, start, seconds, name, comp, kind, row, inst)
    windows: list[tuple[str, float, float]] = field(default_factory=list)
    has_dots: bool = False
    bubble: float = 0.0  # seconds of pipeline loops' fill and drain iterations
    pipelines: list[tuple[str, int, int, float, float]] = field(default_factory=list)

    def add_child(self, other: _Timeline, offset: float, times: float = 1.0) -> None:
        self.compute += other.compute * times
        self.bubble += other.bubble * times
        self.pipelines.extend(other.pipelines)
        self.matmul += other.matmul * times
        self.memory += other.memory * times
        self.has_dots = self.has_dots or other.has_dots
        for k, v in other.busy.items():
            self.busy[k] = self.busy.get(k, 0.0) + v * times
        for k, v in other.exposed.items():
            self.exposed[k] = self.exposed.get(k, 0.0) + v * times


class _Walker:
    def __init__(self, module: HloModule, graph: CallGraph, collectives: Sequence[Collective],
                 dots: Sequence[Dot], hw: HardwareSpec, topology: Any, max_spans: int):
        self.module = module
        self.graph = graph
        self.hw = hw
        self.bw = float(hw.hbm_bandwidth)
        self.scheduled = module.attributes.get("is_scheduled", "false") == "true"
        # (a fusion names its body with `calls=`: the call graph's calling instructions have every one)
        self.fused = self.scheduled or any(i.opcode == "fusion" for insts in graph.calling.values() for i in insts)
        self.max_spans = max_spans
        self.memo: dict[str, _Timeline] = {}
        self.track_axes: dict[str, str] = {}
        # dots by place
        self.dot_flops: dict[tuple[str, str], tuple[float, str]] = {}
        for d in dots:
            self.dot_flops[(d.computation, d.instruction.name)] = (d.flops, d.dtype)
        # The dtype of each computation's first dot (in `dot_flops` order), looked up once per fusion by
        # `op_time`: a scan of `dot_flops` per lookup made the step model quadratic in the number of dots.
        self.first_dot_dtype: dict[str, str] = {}
        for (c, _), (_, dtype) in self.dot_flops.items():
            self.first_dot_dtype.setdefault(c, dtype)
        self.comp_flops: dict[str, float] = {}
        # The MXU's terms per dot (analyzer.theory.matmul; hardware with an [mxu] table): (padding factor, HBM
        # bytes its tile passes re-read beyond one read of each operand, fill-and-drain seconds), and their sums
        # per computation (`mxu_in`).
        self.dot_mxu: dict[tuple[str, str], tuple[float, float, float]] = {}
        if hw.mxu is not None:
            for d in dots:
                terms = _mxu_terms(d, hw)
                if terms is not None:
                    self.dot_mxu[(d.computation, d.instruction.name)] = terms
        self.comp_mxu: dict[str, tuple[float, float, float]] = {}
        self.with_flops = module.holding(*_FLOPS_OPS)  # (the computations `flops_in` reads: those with a dot or call)
        self.not_plain = _not_plain(module)  # (what pricing each fusion's bytes asks of the module: asked once)
        # holds_dot per instruction, by id (the instruction kept alongside so the id stays its own): _first_use
        # asks it of the same instructions once per collective it follows (100,000 times on the 22 MB synthetic
        # module, each decoding the called computations again).
        self._holds_dot: dict[int, tuple[Instruction, bool]] = {}
        # collectives by place: (comp, inst) -> [(row, role)]
        self.coll: dict[tuple[str, str], list[tuple[int, str]]] = {}
        self.rows = list(collectives)
        self.row_seconds = [float(c.cost.seconds) if getattr(c, "cost", None) is not None else 0.0
                            for c in collectives]
        self.row_track = [self._track(c, topology) for c in collectives]
        for r, c in enumerate(collectives):
            comp = module.by_name.get(c.computation)
            if comp is None:
                continue
            names = [n for n in c.instructions if n in comp.by_name]
            if not self.scheduled:
                own = c.instruction.name if c.instruction.name in comp.by_name else (names[0] if names else None)
                if own is not None:
                    self.coll.setdefault((c.computation, own), []).append((r, "sync"))
                # the other instructions of a row (collectives a combiner would merge) are its, not compute
                for n in names:
                    if n != own and comp.by_name[n].opcode in LINK:
                        self.coll.setdefault((c.computation, n), []).append((r, "marker"))
                continue
            if c.site is not None and c.site.name in comp.by_name and c.site.name not in names:
                names.insert(0, c.site.name)
            if not names:
                continue
            pos = {i.name: k for k, i in enumerate(comp.instructions)}
            names = sorted(set(names), key=lambda n: pos[n])
            if len(names) == 1 or (c.sync and not c.overlapped and not c.permute_steps):
                for n in names[:1]:
                    self.coll.setdefault((c.computation, n), []).append((r, "sync"))
                for n in names[1:]:
                    self.coll.setdefault((c.computation, n), []).append((r, "marker"))
                continue
            self.coll.setdefault((c.computation, names[0]), []).append((r, "issue"))
            self.coll.setdefault((c.computation, names[-1]), []).append((r, "wait"))
            for n in names[1:-1]:
                inst = comp.by_name[n]
                if inst.opcode != "fusion" or _holds_collective(module, inst):
                    self.coll.setdefault((c.computation, n), []).append((r, "marker"))

    # -------------------------------------------------------------- tracks
    def queue(self, track: str) -> str:
        """What a collective on `track` waits for before it starts: its link in a scheduled module (the schedule
        says what is in flight), one collective stream for all links in an unscheduled one (XLA's
        latency-hiding scheduler keeps one collective in flight; see the module doc)."""
        return track if self.scheduled else _STREAM

    def _track(self, c: Collective, topology: Any) -> str:
        axes = tuple(getattr(c, "axes", ()) or ())
        key = ",".join(axes) if axes else "(none)"
        net = "ICI"
        if topology is not None and axes:
            try:
                nets = {topology.axis_info(a).network for a in axes}
            except Exception:  # an axis the topology cannot place (sub-axes of odd shapes): say ICI
                nets = {"ici"}
            net = ("DCN" if "dcn" in nets else "scale-out" if "scale-out" in nets else "NVLink" if "nvlink" in nets
                   else "ICI")
        label = f"{net} {key}"
        self.track_axes[label] = key
        return label

    # -------------------------------------------------------------- one instruction
    def flops_in(self, comp_name: str) -> float:
        if comp_name not in self.comp_flops:
            self.comp_flops[comp_name] = 0.0  # guards recursion
            total = 0.0
            if comp_name in self.with_flops:  # (then only those lines of a lazy module's body)
                for i in self.module.by_name[comp_name].select(*_FLOPS_OPS):
                    f = self.dot_flops.get((comp_name, i.name))
                    if f is not None:
                        total += f[0]
                    elif i.opcode in ("fusion", "call"):
                        total += sum(self.flops_in(c) for c in i.called_computations)
            self.comp_flops[comp_name] = total
        return self.comp_flops[comp_name]

    def holds_dot(self, inst: Instruction) -> bool:
        """A dot, or a fusion/call whose computations hold one."""
        op = inst.opcode
        if op in DOTS:
            return True
        if op != "fusion" and op != "call":
            return False
        known = self._holds_dot.get(id(inst))
        if known is None:
            known = (inst, any(self.flops_in(c) for c in inst.called_computations))
            self._holds_dot[id(inst)] = known
        return known[1]

    def mxu_in(self, comp_name: str) -> tuple[float, float, float]:
        """(padded FLOPs, re-read bytes, fill seconds) of the dots in a computation and what it calls (the
        `dot_mxu` terms summed; padded FLOPs are the dot's FLOPs times its padding factor)."""
        if comp_name not in self.comp_mxu:
            self.comp_mxu[comp_name] = (0.0, 0.0, 0.0)  # guards recursion
            pf = extra = fill = 0.0
            if comp_name in self.with_flops:
                for i in self.module.by_name[comp_name].select(*_FLOPS_OPS):
                    f = self.dot_flops.get((comp_name, i.name))
                    if f is not None:
                        pad, e, fl = self.dot_mxu.get((comp_name, i.name), (1.0, 0.0, 0.0))
                        pf += f[0] * pad
                        extra += e
                        fill += fl
                    elif i.opcode in ("fusion", "call"):
                        for c in i.called_computations:
                            a, b, c2 = self.mxu_in(c)
                            pf, extra, fill = pf + a, extra + b, fill + c2
            self.comp_mxu[comp_name] = (pf, extra, fill)
        return self.comp_mxu[comp_name]

    def _dot_dtype(self, comp_name: str) -> str:
        return self.first_dot_dtype.get(comp_name, "bf16")

    def op_time(self, comp: Computation, inst: Instruction, cheap: Mapping[str, bool] | None,
                users: Mapping[str, tuple[str, ...]] | None) -> tuple[float, str]:
        """Seconds of one execution of a non-collective, non-control instruction, and whether FLOPs or bytes
        bound it ("matmul" / "memory"); (0, "") for free ops."""
        op = inst.opcode
        if op in NOP or (op == "custom-call" and any(t in (inst.attr("custom_call_target") or "")
                                                        for t in _CUSTOM_FREE)):
            return 0.0, ""
        flops, dtype = 0.0, "bf16"
        if op in DOTS:
            flops, dtype = self.dot_flops.get((comp.name, inst.name), (0.0, "bf16"))
        elif op == "fusion":
            called = inst.called_computations
            flops = sum(self.flops_in(c) for c in called)
            if flops:
                dtype = self._dot_dtype(called[0]) if called else "bf16"
        if flops:
            nbytes = instruction_hbm_bytes(inst, self.module, not_plain=self.not_plain)
            padded, extra, fill = flops, 0.0, 0.0
            if self.dot_mxu:  # the MXU's padding, tile passes and fill (analyzer.theory.matmul)
                if op in DOTS:
                    pad, extra, fill = self.dot_mxu.get((comp.name, inst.name), (1.0, 0.0, 0.0))
                    padded = flops * pad
                else:
                    terms = [self.mxu_in(c) for c in inst.called_computations]
                    padded = max(flops, sum(a for a, _, _ in terms))
                    extra, fill = sum(b for _, b, _ in terms), sum(f for _, _, f in terms)
            t_flops = padded / self.hw.flops_per_second(dtype)
            t_mem = (nbytes + extra) / self.bw
            return (t_flops + fill, "matmul") if t_flops >= t_mem else (t_mem + fill, "memory")
        if self.fused or cheap is None or op in UNFUSED:
            return instruction_hbm_bytes(inst, self.module, not_plain=self.not_plain) / self.bw, "memory"
        # Unfused module: the op is one of a chain XLA would fuse; pay only at the chain's edges.
        if op in VIEWS:
            return 0.0, ""
        nbytes = 0
        for k, o in enumerate(inst.operands):
            if cheap.get(o.name, False) or o.name not in comp.by_name:
                continue
            producer = comp.by_name[o.name]
            if producer.opcode == "constant":
                continue
            if k == 0 and op in SLICING:
                nbytes += _bytes(inst.shape)
            elif k == 0 and op == "dynamic-update-slice":
                continue
            else:
                nbytes += _bytes(o.shape)
        outs = users.get(inst.name, ()) if users is not None else ()
        if inst.is_root or any(not cheap.get(u, False) for u in outs):
            if op == "dynamic-update-slice" and len(inst.operands) > 1:
                nbytes += _bytes(inst.operands[1].shape)
            else:
                nbytes += _bytes(inst.shape)
        return nbytes / self.bw, "memory"

    # -------------------------------------------------------------- one computation
    def timeline(self, comp_name: str) -> _Timeline:
        if comp_name in self.memo:
            return self.memo[comp_name]
        self.memo[comp_name] = _Timeline()  # guards recursion
        comp = self.module.by_name[comp_name]
        tl = self._walk(comp)
        self.memo[comp_name] = tl
        return tl

    def _cheap_map(self, comp: Computation) -> tuple[dict[str, bool], dict[str, tuple[str, ...]]]:
        users = dict(self.graph.flow(comp.name).users)
        cheap: dict[str, bool] = {}
        for i in comp.instructions:
            op = i.opcode
            cheap[i.name] = not (op in NOP or op in UNFUSED or op in DOTS or (comp.name, i.name) in self.coll
                                 or op.endswith(("-start", "-done")))
        return cheap, users

    def _walk(self, comp: Computation, loop: bool = False) -> _Timeline:
        tl = _Timeline()
        cheap = users = None
        if not self.fused:
            cheap, users = self._cheap_map(comp)
        order, waits_at, trailing = self._plan(comp, loop, users)
        t = 0.0
        queue_free: dict[str, float] = {}
        end_of: dict[int, float] = {}
        runs: list[tuple[float, float, int]] = []  # (start, end, row) of every collective issued here
        ready_at: dict[str, float] = {}
        spans = tl.spans
        keep = len(spans) < self.max_spans

        def issue(rows: list[int], at: float, name: str, inst: Any) -> None:
            start = max([at] + [ready_at[o] for o in inst.operand_names if o in ready_at])
            for r in rows:
                track = self.row_track[r]
                queue = self.queue(track)
                s = max(start, queue_free.get(queue, 0.0))
                d = self.row_seconds[r]
                end_of[r] = s + d
                runs.append((s, s + d, r))
                queue_free[queue] = s + d
                ready_at[name] = max(ready_at.get(name, 0.0), s + d)
                tl.busy[track] = tl.busy.get(track, 0.0) + d
                if d > 0:
                    spans.append((track, s, d, name, comp.name, "collective", r, inst))

        def wait(rows: list[int]) -> None:
            nonlocal t
            rows = [r for r in rows if r in end_of]
            if not rows:
                return
            end = max(end_of[r] for r in rows)
            if end > t:
                stall = end - t
                _charge(tl, stall, t, end, rows, runs, self.row_seconds)
                spans.append((COMPUTE_TRACK, t, stall, "wait for " + ", ".join(
                    sorted({self.rows[r].kind for r in rows})), comp.name, "wait", rows[0], None))
                t = end

        for inst in order:
            name = inst.name
            for rows in waits_at.get(name, ()):
                wait(rows)
            roles = self.coll.get((comp.name, name))
            if roles:
                sync = [r for r, role in roles if role == "sync"]
                issued = [r for r, role in roles if role == "issue"]
                waited = [r for r, role in roles if role == "wait"]
                if issued:
                    issue(issued, t, name, inst)
                if sync:
                    issue(sync, t, name, inst)
                    if self.scheduled:
                        wait(sync)
                if waited:
                    wait(waited)
                if inst.opcode != "fusion":
                    continue
                # an async collective fusion or a collective's fused epilogue: its own compute runs on the
                # compute stream (its collective's data is the link's, see _fusion_bytes)
            op = inst.opcode
            if op == "while":
                body, cond = _loop_parts(inst)
                trip = self.graph.trip_count(comp.name, name).n
                t = self._loop(tl, t, body, cond, trip, inst, comp)
                continue
            if op == "conditional":
                branches = [self.timeline(c) for c in inst.called_computations if c in self.module.by_name]
                if branches:
                    best = max(branches, key=lambda b: b.duration)
                    self._place(tl, best, t)
                    t += best.duration
                continue
            if op == "call" or (op == "async-start" and not (comp.name, name) in self.coll):
                for c in inst.called_computations:
                    if c in self.module.by_name:
                        sub = self.timeline(c)
                        self._place(tl, sub, t)
                        t += sub.duration
                continue
            seconds, kind = self.op_time(comp, inst, cheap, users)
            if seconds <= 0:
                continue
            tl.compute += seconds
            if op in DOTS or op == "fusion":
                flops = (self.dot_flops.get((comp.name, name), (0.0, ""))[0] if op in DOTS
                         else sum(self.flops_in(c) for c in inst.called_computations))
                if flops:
                    tl.has_dots = True
                    tl.matmul += flops / self.hw.peak_flops
            if kind == "memory":
                tl.memory += seconds
            if keep:
                spans.append((COMPUTE_TRACK, t, seconds, name, comp.name, kind, None, inst))
            t += seconds
        # the end: wait for what the computation's result needs (not the trailing collectives of a loop body)
        rest = [r for r in end_of if r not in trailing]
        wait(rest)
        tl.duration = t
        tl.trailing_end = {r: end_of[r] for r in trailing if r in end_of}  # type: ignore[attr-defined]
        tl.trailing_runs = [x for x in runs if x[2] in trailing]  # type: ignore[attr-defined]
        return tl

    def _place(self, tl: _Timeline, sub: _Timeline, offset: float) -> None:
        tl.add_child(sub, offset)
        if len(tl.spans) < self.max_spans:
            tl.spans.extend((s[0], s[1] + offset, *s[2:]) for s in sub.spans)
        tl.windows.extend((lab, a + offset, b + offset) for lab, a, b in sub.windows)

    def _loop(self, tl: _Timeline, t: float, body: str | None, cond: str | None, trip: int, inst: Any,
              comp: Computation) -> float:
        if body is None or body not in self.module.by_name:
            return t
        if body in self.memo:
            b = self.memo[body]
        else:
            self.memo[body] = _Timeline()
            b = self._walk(self.module.by_name[body], loop=True)
            self.memo[body] = b
        c = self.timeline(cond) if cond and cond in self.module.by_name else _Timeline()
        own = b.duration + c.duration
        # what bounds an iteration from below besides its own walk: the busiest queue (a link, or in an
        # unscheduled module the one collective stream, busy for the sum of every link's time)
        queues: dict[str, float] = {}
        for k, v in b.busy.items():
            queues[self.queue(k)] = queues.get(self.queue(k), 0.0) + v
        busiest = max(queues.items(), key=lambda kv: kv[1], default=("", 0.0))
        iteration = max(own, busiest[1])
        trailing_end = getattr(b, "trailing_end", {})
        drain = max((e - b.duration for e in trailing_end.values()), default=0.0)
        drain = max(0.0, drain)
        n = max(0, trip)
        # exposure: the link-bound excess per iteration, and the last iteration's drain
        tl.add_child(b, t, n)
        tl.add_child(c, t, n)
        excess = iteration - own
        if excess > 0 and n:
            on = [r for r in range(len(self.rows)) if self.queue(self.row_track[r]) == busiest[0] and
                  self.rows[r].computation == body]
            share = sum(self.row_seconds[r] for r in on) or 1.0
            for r in on:
                tl.exposed[r] = tl.exposed.get(r, 0.0) + excess * n * self.row_seconds[r] / share
        if drain > 0 and n:
            last = max(trailing_end.items(), key=lambda kv: kv[1])[0]
            _charge(tl, drain, b.duration, b.duration + drain, [last], getattr(b, "trailing_runs", []),
                    self.row_seconds)
        start = t
        for k in range(n):
            offset = start + k * iteration
            if len(tl.spans) < self.max_spans:
                tl.spans.extend((s[0], s[1] + offset, *s[2:]) for s in b.spans)
                tl.spans.extend((s[0], s[1] + offset + b.duration, *s[2:]) for s in c.spans)
                if excess > 0:
                    tl.spans.append((COMPUTE_TRACK, offset + own, excess, f"wait for {busiest[0]} ({inst.name})",
                                     comp.name, "wait", None, None))
        if b.has_dots and n:
            label = _loop_label(self.module.by_name[body], self.holds_dot)
            tl.windows.append((f"{label} ({inst.name}, iteration 1 of {n})", start, start + iteration))
        tl.windows.extend((lab, a + start, e + start) for lab, a, e in b.windows[:4])
        total = n * iteration + (drain if n else 0.0)
        stages = _pipeline_stages(self, body, n) if b.has_dots else 0
        if stages:  # stages - 1 of the n iterations fill and drain the pipeline (docs/step.md)
            tl.bubble += (stages - 1) * iteration
            tl.pipelines.append((inst.name, stages, n, (stages - 1) * iteration, total))
        if drain > 0 and n:
            tl.spans.append((COMPUTE_TRACK, start + n * iteration, drain,
                             f"wait for the last iteration's collectives ({inst.name})", comp.name, "wait", None, None))
        return t + total

    # -------------------------------------------------------------- the overlap model of unscheduled modules
    def _plan(self, comp: Computation, loop: bool, users: Mapping[str, tuple[str, ...]] | None):
        """Execution order and where each collective is issued and waited for.

        Returns (order, waits_at {instruction: [[rows], ...]}, trailing rows). Scheduled modules keep their order
        and their own waits."""
        insts = list(comp.instructions)
        if self.scheduled or self.fused and not any((comp.name, i.name) in self.coll for i in insts):
            return insts, {}, set()
        if users is None:
            users = dict(self.graph.flow(comp.name).users)
        pos = {i.name: k for k, i in enumerate(insts)}
        heavy = [k for k, i in enumerate(insts) if self.holds_dot(i) or i.opcode in ("while", "call", "conditional")]
        invariant = self._invariant(comp) if loop else set()
        carried = self._carried(comp, users, pos) if loop else frozenset()
        moves: dict[int, list[Instruction]] = {}
        moved: set[str] = set()
        waits_at: dict[str, list[list[int]]] = {}
        trailing: set[int] = set()
        end_name = comp.root.name
        import bisect

        for k, inst in enumerate(insts):
            roles = self.coll.get((comp.name, inst.name))
            if not roles:
                continue
            rows = [r for r, _ in roles]
            first_use, reaches_heavy = self._first_use(comp, inst.name, users, pos, carried)
            if not reaches_heavy:
                trailing.update(rows) if loop else None
                waits_at.setdefault(end_name, []).append(rows)
            elif first_use is not None:
                waits_at.setdefault(insts[first_use].name, []).append(rows)
            # issue: at the start of the last heavy op before the first use, once its operands exist
            use = first_use if first_use is not None else len(insts)
            j = bisect.bisect_left(heavy, use) - 1
            gate = heavy[j] if j >= 0 else 0
            # a parameter or constant is there from the start, wherever the printer lists it (jit lists a
            # weight's parameter just before its gather, after the matmul that could hide it), and so is a
            # loop-invariant operand (a weight sliced by the counter can be sliced at the iteration's start)
            ready = max((pos[o] + 1 for o in inst.operand_names if o in pos and o not in invariant
                         and comp.by_name[o].opcode not in ("parameter", "constant")), default=0)
            target = max(gate, ready)
            if target != k and target < len(insts):
                moves.setdefault(target, []).append(inst)
                moved.add(inst.name)
        if not moves:
            return insts, waits_at, trailing
        order: list[Instruction] = []
        for k, inst in enumerate(insts):
            if k in moves:
                order.extend(moves[k])
            if inst.name not in moved:
                order.append(inst)
        return order, waits_at, trailing

    def _first_use(self, comp: Computation, name: str, users: Mapping[str, tuple[str, ...]],
                   pos: Mapping[str, int], carried: frozenset[int] = frozenset()) -> tuple[int | None, bool]:
        """Position of the first user of `name`, and whether its value reaches a heavy op (dot, loop) before
        the computation's result, or reaches the result at a tuple index in `carried` (a loop body's outputs
        that the next iteration feeds to a heavy op). A collective on the way stops the search: a value only
        collectives consume (a reduce-scatter feeding a cross-slice all-reduce) makes no compute wait; the
        consuming collective runs after it on the collective stream and is waited for where its result is used."""
        direct = users.get(name, ())
        first = min((pos[u] for u in direct if u in pos), default=None)
        seen: set[str] = set()
        stack = [(u, name) for u in direct]
        steps = 0
        root = comp.root
        while stack and steps < 20000:
            steps += 1
            u, via = stack.pop()
            if carried and u == root.name and root.opcode == "tuple" and any(
                    o == via and k in carried for k, o in enumerate(root.operand_names)):
                return first, True
            if u in seen:
                continue
            seen.add(u)
            inst = comp.by_name.get(u)
            if inst is None:
                continue
            op = inst.opcode
            if self.holds_dot(inst) or op in ("while", "call", "conditional"):
                return first, True
            if (comp.name, u) in self.coll:
                # a collective consuming it: issued after it on the one collective stream, and waited for where
                # its own result is used; compute does not wait for this one there
                continue
            stack.extend((v, u) for v in users.get(u, ()))
        return first, False

    def _carried(self, body: Computation, users: Mapping[str, tuple[str, ...]],
                 pos: Mapping[str, int]) -> frozenset[int]:
        """Tuple indices of a loop body's result that the next iteration feeds to a heavy op (the activation
        carried from layer to layer, not the stacked residuals or gradients the body only writes into)."""
        param = next((i for i in body.instructions if i.opcode == "parameter"), None)
        if param is None or body.root.opcode != "tuple":
            return frozenset()
        out = set()
        for i in body.instructions:
            if i.opcode == "get-tuple-element" and i.operand_names and i.operand_names[0] == param.name:
                idx = i.attr("index")
                if idx is not None and idx.isdigit() and self._first_use(body, i.name, users, pos)[1]:
                    out.add(int(idx))
        return frozenset(out)

    def _invariant(self, body: Computation) -> set[str]:
        """Values of a loop body that do not change from one iteration's data to the next: the parameter's
        elements passed through unchanged, the counter, constants, and what is computed from these only."""
        root = body.root
        param = next((i for i in body.instructions if i.opcode == "parameter"), None)
        if param is None or root.opcode != "tuple":
            return set()
        passthrough: set[int] = set()
        for idx, o in enumerate(root.operands):
            src = body.by_name.get(o.name)
            if src is None or src.opcode != "get-tuple-element" or src.operand_names[0] != param.name:
                # the counter: index + constant
                if src is not None and src.opcode == "add" and any(
                        body.by_name.get(n) is not None and body.by_name[n].opcode == "constant"
                        for n in src.operand_names):
                    passthrough.add(idx)
                continue
            if src.attr("index") == str(idx):
                passthrough.add(idx)
        out: set[str] = set()
        for i in body.instructions:
            op = i.opcode
            if op == "constant" or op in ("partition-id", "replica-id", "iota"):
                out.add(i.name)
            elif op == "get-tuple-element" and i.operand_names and i.operand_names[0] == param.name:
                idx = i.attr("index")
                if idx is not None and idx.isdigit() and int(idx) in passthrough:
                    out.add(i.name)
            elif op not in DOTS and op not in ("parameter", "while", "call", "custom-call", "rng",
                                                    "rng-bit-generator") and (
                    (self.fused is False and (body.name, i.name) not in self.coll) or op in SLICING) and \
                    i.operands and all(o in out for o in i.operand_names):
                out.add(i.name)
        return out


def _pipeline_stages(w: _Walker, body: str, trip: int) -> int:
    """The stages of a pipeline loop, else 0: a loop with dots whose body (or what it calls, not nested loops)
    passes a value to its neighbour along one mesh axis of S > 1 devices (a collective-permute over that axis
    alone) and runs more than S iterations. Such a loop is a pipeline of S stages run as SPMD: every device runs
    its stage each iteration, so M microbatches take M + S - 1 iterations. A ring over S devices (ring attention,
    collective matmuls) takes at most S iterations and is not one."""
    seen, todo = set(), [body]
    while todo:
        name = todo.pop()
        if name in seen or name not in w.module.by_name:
            continue
        seen.add(name)
        for inst in w.module.by_name[name].instructions:
            if inst.opcode != "while":
                todo.extend(inst.called_computations)
    sizes = {int(c.axis_sizes[0]) for c in w.rows if c.kind == "collective-permute" and c.computation in seen
             and len(getattr(c, "axes", ()) or ()) == 1 and len(getattr(c, "axis_sizes", ()) or ()) == 1}
    stages = max(sizes, default=0)
    return stages if stages > 1 and trip > stages else 0


def _charge(tl: _Timeline, stall: float, t0: float, t1: float, waited: Sequence[int],
            runs: Sequence[tuple[float, float, int]], row_seconds: Sequence[float]) -> None:
    """Charge a compute stall over [t0, t1] to the collectives that ran in it, each the part of the stall it was
    itself running (so a collective is never charged more than its own time): the waited one's own exposure,
    and the queue wait (the collectives ahead of it on the stream) to those collectives. What no collective
    covers (a gap in the stream) goes to the waited rows in proportion to their time."""
    parts = [(r, min(e, t1) - max(s, t0)) for s, e, r in runs if min(e, t1) > max(s, t0)]
    covered = sum(p for _, p in parts)
    scale = stall / covered if covered > stall else 1.0  # links running at once (a scheduled module's tracks)
    for r, p in parts:
        tl.exposed[r] = tl.exposed.get(r, 0.0) + p * scale
    rest = stall - covered * scale
    if rest > 1e-15:
        share = sum(row_seconds[r] for r in waited)
        for r in waited:
            w = row_seconds[r] / share if share > 0 else 1.0 / len(waited)
            tl.exposed[r] = tl.exposed.get(r, 0.0) + rest * w


def _mxu_terms(d: Dot, hw: HardwareSpec) -> tuple[float, float, float] | None:
    """(padding factor, re-read bytes, fill seconds) of one dot on the MXU (analyzer.theory.matmul), from its
    operands' shapes and dimension numbers; a convolution too where it is the TPU compiler's spelling of a dot (its
    FLOPs are a matmul's, 2 x batch x m x k x n), so the same dot costs the same on the cpu and TPU targets; None
    for a real convolution or a dot whose shapes are not known."""
    from analyzer.analysis.dots import batch_dims, contracting_dims
    from analyzer.theory.matmul import matmul_time

    inst = d.instruction
    if inst.opcode not in ("dot", "convolution") or len(inst.operands) < 2 or any(
            o.shape is None or o.shape.is_tuple for o in inst.operands[:2]):
        return None
    lhs, rhs = inst.operands[0].shape, inst.operands[1].shape
    try:
        lc, rc = set(contracting_dims(inst, 0)), set(contracting_dims(inst, 1))
        lb, rb = set(batch_dims(inst, 0)), set(batch_dims(inst, 1))
        ld, rd = list(lhs.dims), list(rhs.dims)
    except (AttributeError, TypeError, ValueError):
        return None

    def prod(xs) -> int:
        out = 1
        for x in xs:
            out *= int(x)
        return out

    b = prod(ld[i] for i in lb if i < len(ld))
    k = prod(ld[i] for i in lc if i < len(ld))
    m = prod(x for i, x in enumerate(ld) if i not in lc and i not in lb)
    n = prod(x for i, x in enumerate(rd) if i not in rc and i not in rb)
    if min(b, k, m, n) <= 0 or abs(2.0 * b * m * k * n - d.flops) > 1e-6 * max(d.flops, 1.0):
        return None  # (not a matmul's FLOPs: a real convolution, or dims read otherwise than the FLOPs were)
    in_bytes = _element_bytes(lhs) or 2.0
    out_bytes = _element_bytes(inst.shape) or in_bytes
    t = matmul_time(hw, b=b, m=m, k=k, n=n, in_bytes=in_bytes, out_bytes=out_bytes)
    once = b * ((m * k + k * n) * in_bytes + m * n * out_bytes)
    return t.padded_flops / t.useful_flops, max(0.0, t.hbm_bytes - once), t.fill_seconds


def _holds_collective(module: HloModule, inst: Instruction) -> bool:
    for c in inst.called_computations:
        if c in module.holding(*COLLECTIVES):
            return True
    return False


def _loop_parts(inst: Instruction) -> tuple[str | None, str | None]:
    body, cond = inst.attr("body"), inst.attr("condition")
    return (body.lstrip("%") if body else None), (cond.lstrip("%") if cond else None)


def _loop_label(body: Computation, holds_dot: Any) -> str:
    """`backward layer` when a dot of the body (or a fusion holding one) was transposed by autodiff,
    `forward layer` when its dots are only differentiated, else `layer`. A backward body may recompute
    forward dots (remat), so any transposed dot makes it backward."""
    from analyzer.analysis.mapping import pass_of

    passes = {pass_of((i.metadata.op_name if i.metadata else None)) for i in body.instructions if holds_dot(i)}
    if "backward" in passes:
        return "backward layer"
    if "forward" in passes:
        return "forward layer"
    return "layer"


def _repeat_windows(spans: Sequence[tuple], holds_dot: Any) -> list[tuple[str, float, float]]:
    """One repeat of each pass of an unrolled model: (label, start, end) on the step's clock.

    The dots of each pass (forward, backward: `mapping.pass_of`), in the order they run, are keyed by their
    source (stack frame, file, line) and op. One layer is the shortest run of dots, starting at one of the
    pass's first dots, that the next dots repeat exactly and that holds every key occurring more than once
    in the pass (so two dots from one helper line are not taken for two layers). Only a prefix must repeat:
    XLA may defer a backward pass's last weight gradients to its end. The window runs from the run's first
    dot to the first dot of its repeat.

    Example:
        dot keys a b c a b c a b c d (forward)  ->  one window, from the first a to the second a
    """
    from analyzer.analysis.mapping import op_label, pass_of

    seqs: dict[str, list[tuple[tuple, float]]] = {"forward": [], "backward": []}
    for s in spans:
        inst = s[7]
        if s[0] != COMPUTE_TRACK or s[5] == "wait" or inst is None or not holds_dot(inst):
            continue
        md = inst.metadata
        pass_ = pass_of(md.op_name if md is not None else None)
        if pass_ in seqs:
            key = ((md.stack_frame_id, md.source_file, md.source_line, op_label(md.op_name))
                   if md is not None else (None, None, None, inst.opcode))
            seqs[pass_].append((key, s[1]))
    out = []
    for pass_, seq in seqs.items():
        keys = [k for k, _ in seq]
        counts: dict[tuple, int] = {}
        for k in keys:
            counts[k] = counts.get(k, 0) + 1
        repeated = {k for k, c in counts.items() if c > 1}
        found = _first_repeat(keys, repeated)
        if found is not None:
            first, period = found
            out.append((f"{pass_} layer (unrolled: {period} dots repeated, the first repeat)",
                        seq[first][1], seq[first + period][1]))
    return out


def _first_repeat(keys: Sequence[tuple], repeated: set, max_offset: int = 8) -> tuple[int, int] | None:
    """(first, period) of the earliest, shortest run keys[first:first+period] equal to the next `period` keys
    and holding every key of `repeated`; None when there is none.

    Example:
        >>> _first_repeat(list("xabcabcabd"), set("abc"))
        (1, 3)
    """
    n = len(keys)
    for first in range(min(max_offset, n)):
        # a repeat starts where the run's first key comes back: only those periods can match
        for j in range(first + max(1, len(repeated)), n):
            period = j - first
            if j + period > n:
                break
            if keys[j] == keys[first] and all(keys[first + i] == keys[j + i] for i in range(period)) and \
                    repeated <= set(keys[first:j]):
                return first, period
    return None


# ---------------------------------------------------------------------- entry point
def predict_step(module: HloModule, graph: CallGraph, collectives: Sequence[Collective], dots: Sequence[Dot],
                 hardware: HardwareSpec, topology: Any, *, chips: int | None = None,
                 max_spans: int = 200_000, model: ModelFlops | None = None) -> StepPrediction:
    """The predicted step of `module` on `hardware` (see the module doc for the model).

    Args:
      module, graph: the parsed module and its call graph.
      collectives: the priced collectives (`Collective.cost` set), in `Report.collectives` row order.
      dots: the module's dots (`analyzer.analysis.dots.extract_dots`), in `Report.dots` row order.
      hardware: the hardware spec; topology: the `Topology` the collectives were priced on (for link names).
      chips: devices the step runs on (default: the module's partitions x replicas).
      max_spans: stop recording timeline spans past this many (the figures are unaffected).
      model: the model's FLOPs counted on the program before partitioning (`analyzer.analysis.dots.model_flops`);
        without it the partitioned module's FLOPs (remat left out) times the chips stand in, which counts a
        plan's redundant compute as model work.

    Returns:
      `StepPrediction`.

    Example:
        >>> step = report.analysis.step          # what analyze() computed with this function
        >>> busiest = max(step.busy.values())   # compute, or the busiest link
        >>> busiest <= step.step_seconds <= step.compute_seconds + report.totals.comm_seconds
        True
    """
    from analyzer.analysis.mapping import pass_of  # noqa: F401  (documented dependency of _loop_label)

    w = _Walker(module, graph, collectives, dots, hardware, topology, max_spans)
    tl = w.timeline(module.entry.name)
    n = chips if chips is not None else max(1, module.num_partitions * max(1, module.replica_count))
    peak = float(hardware.peak_flops)
    from analyzer.analysis.dots import is_remat

    executed = branch_sum([(d.branch, d.flops * d.count) for d in dots]) * n
    model_total = (model.total if model is not None else
                   branch_sum([(d.branch, d.flops * d.count) for d in dots if not is_remat(d)]) * n)
    step = tl.duration
    exposed_rows = tuple(float(tl.exposed.get(r, 0.0)) for r in range(len(collectives)))
    by_axis: dict[str, float] = {}
    for r, c in enumerate(collectives):
        key = ",".join(c.axes) if c.axes else "(none)"
        by_axis[key] = by_axis.get(key, 0.0) + exposed_rows[r]
    busy = {COMPUTE_TRACK: tl.compute, **tl.busy}
    spans = tuple(Span(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]) for s in tl.spans)
    windows = tuple(tl.windows) or tuple(_repeat_windows(tl.spans, w.holds_dot))
    denom = step * peak * n
    return StepPrediction(
        step_seconds=step, compute_seconds=tl.compute, matmul_seconds=tl.matmul, memory_bound_seconds=tl.memory,
        exposed_comm_seconds=max(0.0, step - tl.compute), exposed_by_axis=by_axis, busy=busy,
        exposed_rows=exposed_rows, model_flops=model_total, executed_flops=executed,
        mfu=model_total / denom if denom > 0 else 0.0, hfu=executed / denom if denom > 0 else 0.0,
        overlap="schedule" if w.scheduled else "model", chips=n, peak_flops=peak, spans=spans,
        windows=windows, track_axes=dict(w.track_axes), bubble_seconds=tl.bubble, pipelines=tuple(tl.pipelines),
    )

