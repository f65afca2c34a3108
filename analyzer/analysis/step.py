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

from analyzer.analysis.costs import ProgramCosts
from analyzer.analysis.graph import branch_sum
from analyzer.analysis.offload import HOST_TRACK, HostOffload
from analyzer.compile.xlaflags import OverlapFlags, overlap_flags
from analyzer.hlo.opcodes import COLLECTIVES, DOTS, LINK, NOP, PASS_THROUGH, SLICING, UNFUSED

if TYPE_CHECKING:
    from analyzer.analysis.collectives import Collective
    from analyzer.analysis.dots import Dot, ModelFlops
    from analyzer.analysis.graph import CallGraph
    from analyzer.hlo.ir import Computation, HloModule, Instruction
    from analyzer.theory.hardware import HardwareSpec

__all__ = ["COMPUTE_TRACK", "Span", "StepPrediction", "predict_step"]

COMPUTE_TRACK = "compute"
_STREAM = "collectives"  # the one collective stream of an unscheduled module's overlap model



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
      memory_bound_seconds: the part of `compute_seconds` spent in instructions bound by HBM bandwidth.
      exposed_comm_seconds: step - compute: the time the compute stream waits for communication.
      exposed_by_axis: exposed seconds by mesh axis set (the keys of `Totals.by_axis`), and under `HOST_TRACK`
        the waits for host-offload copies (analyzer.analysis.offload), when the program makes any.
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
      flags_note: which of the user's XLA flags the overlap model applied and which not (None without flags).
      axes_note: what the sub-axis labels of the collectives and their tracks (`fsdp:(1)4`, `ICI data:(1)2`)
        mean, for the report's notes (None when no collective runs over part of an axis).
    """

    step_seconds: float
    compute_seconds: float
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
    flags_note: str | None = None
    axes_note: str | None = None


# ---------------------------------------------------------------------- the walk
@dataclass
class _Timeline:
    """One execution of a computation, on a clock starting at 0."""

    duration: float = 0.0
    compute: float = 0.0
    memory: float = 0.0
    busy: dict[str, float] = field(default_factory=dict)
    exposed: dict[int, float] = field(default_factory=dict)  # row -> seconds waited for it
    spans: list[tuple] = field(default_factory=list)  # (track, start, seconds, name, comp, kind, row, inst)
    windows: list[tuple[str, float, float]] = field(default_factory=list)
    bubble: float = 0.0  # seconds of pipeline loops' fill and drain iterations
    pipelines: list[tuple[str, int, int, float, float]] = field(default_factory=list)
    has_dots: bool = False
    # a loop body's collectives that only feed its outputs (finished under the next iteration, `_loop`): their ends
    # and their (start, end, row) runs
    trailing_end: dict[int, float] = field(default_factory=dict)
    trailing_runs: list[tuple[float, float, int]] = field(default_factory=list)
    host_wait: float = 0.0  # seconds the compute stream waits for host-offload copies (analyzer.analysis.offload)

    def add_child(self, other: _Timeline, offset: float, times: float = 1.0) -> None:
        self.compute += other.compute * times
        self.host_wait += other.host_wait * times
        self.bubble += other.bubble * times
        self.pipelines.extend(other.pipelines)
        self.has_dots = self.has_dots or other.has_dots
        self.memory += other.memory * times
        for k, v in other.busy.items():
            self.busy[k] = self.busy.get(k, 0.0) + v * times
        for k, v in other.exposed.items():
            self.exposed[k] = self.exposed.get(k, 0.0) + v * times


class _Walker:
    def __init__(self, module: HloModule, graph: CallGraph, collectives: Sequence[Collective],
                 dots: Sequence[Dot], hw: HardwareSpec, topology: Any, max_spans: int,
                 costs: ProgramCosts | None = None, flags: OverlapFlags | None = None,
                 host: HostOffload | None = None):
        self.module = module
        # seconds of host-offload copies per iteration of a loop body (analyzer.analysis.offload)
        self.host = dict(host.per_iteration) if host is not None else {}
        self.flags = flags if flags is not None else OverlapFlags()
        self.graph = graph
        self.scheduled = module.attributes.get("is_scheduled", "false") == "true"
        # (a fusion names its body with `calls=`: the call graph's calling instructions have every one)
        self.fused = self.scheduled or any(i.opcode == "fusion" for insts in graph.calling.values() for i in insts)
        self.max_spans = max_spans
        self.memo: dict[str, _Timeline] = {}
        self.track_axes: dict[str, str] = {}
        # what each instruction costs (FLOPs, bytes, bound, seconds): asked of the program's costs, never here
        self.costs = costs if costs is not None else ProgramCosts(module, dots, hw)
        self.holds_dot = self.costs.holds_dot
        # collectives by place: (comp, inst) -> [(row, role)]
        self.coll: dict[tuple[str, str], list[tuple[int, str]]] = {}
        self.rows = list(collectives)
        self.row_seconds = [float(c.cost.seconds) if getattr(c, "cost", None) is not None else 0.0
                            for c in collectives]
        self.row_track = [self._track(c, topology) for c in collectives]
        # a collective the user's flags make synchronous blocks the compute stream where it stands (the TPU
        # target's scheduled HLO says itself which are)
        self.blocking = [self.scheduled or c.kind in self.flags.synchronous_kinds for c in collectives]
        for r, c in enumerate(collectives):
            comp = module.by_name.get(c.computation)
            if comp is not None:
                for name, role in self._roles(c, comp):
                    self.coll.setdefault((c.computation, name), []).append((r, role))

    def _roles(self, c: Collective, comp: Computation) -> list[tuple[str, str]]:
        """(instruction, role) of the instructions that make up collective `c` in `comp`: "sync" (runs and blocks
        where it stands), "issue" and "wait" (an async one's first and last), "marker" (part of it, not compute).
        Unscheduled modules run every collective as sync at its own instruction (the overlap model places it)."""
        names = [n for n in c.instructions if n in comp.by_name]
        if not self.scheduled:
            own = c.instruction.name if c.instruction.name in comp.by_name else (names[0] if names else None)
            # the other instructions of a row (collectives a combiner would merge) are its, not compute
            return ([(own, "sync")] if own is not None else []) + [
                (n, "marker") for n in names if n != own and comp.by_name[n].opcode in LINK]
        if c.site is not None and c.site.name in comp.by_name and c.site.name not in names:
            names.insert(0, c.site.name)
        if not names:
            return []
        pos = {i.name: k for k, i in enumerate(comp.instructions)}
        names = sorted(set(names), key=lambda n: pos[n])
        if len(names) == 1 or (c.sync and not c.overlapped and not c.permute_steps):
            return [(names[0], "sync")] + [(n, "marker") for n in names[1:]]
        inner = [(n, "marker") for n in names[1:-1]
                 if comp.by_name[n].opcode != "fusion" or _holds_collective(self.module, comp.by_name[n])]
        return [(names[0], "issue"), (names[-1], "wait"), *inner]

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
        order, waits_at, trailing, windowed = self._plan(comp, loop, users)
        t = 0.0
        start_of: dict[int, float] = {}
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
                start_of[r] = s
                end_of[r] = s + d
                runs.append((s, s + d, r))
                queue_free[queue] = s + d
                ready_at[name] = max(ready_at.get(name, 0.0), s + d)
                tl.busy[track] = tl.busy.get(track, 0.0) + d
                if d > 0:
                    spans.append((track, s, d, name, comp.name, "collective", r, inst))

        def wait(rows: list[int], until: Mapping[int, float] | None = None) -> None:
            nonlocal t
            rows = [r for r in rows if r in end_of]
            if not rows:
                return
            end = max((until or end_of)[r] for r in rows)
            if end > t:
                stall = end - t
                _charge(tl, stall, t, end, rows, runs, self.row_seconds)
                spans.append((COMPUTE_TRACK, t, stall, "wait for " + ", ".join(
                    sorted({self.rows[r].kind for r in rows})), comp.name, "wait", rows[0], None))
                t = end

        for inst in order:
            name = inst.name
            gathered = windowed.get(("into", name), [])
            for rows in waits_at.get(name, ()):
                wait(rows)
            if gathered:  # collective matmul: the dot starts once the first shard is there (docs/step.md)
                wait(gathered, self._first_shards(gathered, start_of, end_of))
            roles = self.coll.get((comp.name, name))
            if roles:
                sync = [r for r, role in roles if role == "sync"]
                issued = [r for r, role in roles if role == "issue"]
                waited = [r for r, role in roles if role == "wait"]
                if issued:
                    issue(issued, t, name, inst)
                if sync:
                    issue(sync, t, name, inst)
                    wait([r for r in sync if self.blocking[r]])
                if waited:
                    wait(waited)
                if inst.opcode != "fusion":
                    continue
                # an async collective fusion or a collective's fused epilogue: its own compute runs on the
                # compute stream (its collective's data is the link's, see _fusion_bytes)
            op = inst.opcode
            if op in ("while", "conditional", "call") or (op == "async-start" and (comp.name, name) not in self.coll):
                t = self._control(tl, t, comp, inst)
            else:
                t = self._compute(tl, t, comp, inst, cheap, users, keep)
            if gathered:  # the rest of the ring runs during the dot; what it outlasts the dot is waited for
                wait(gathered)
            for r in windowed.get(("from", name), ()):
                self._last_shard_after(r, t, end_of, runs, queue_free, ready_at)
        # the end: wait for what the computation's result needs (not the trailing collectives of a loop body)
        rest = [r for r in end_of if r not in trailing]
        wait(rest)
        tl.duration = t
        tl.trailing_end = {r: end_of[r] for r in trailing if r in end_of}
        tl.trailing_runs = [x for x in runs if x[2] in trailing]
        return tl

    def _control(self, tl: _Timeline, t: float, comp: Computation, inst: Instruction) -> float:
        """Place what a loop, conditional, call or async computation runs at `t`; the time it ends."""
        if inst.opcode == "while":
            body, cond = _loop_parts(inst)
            trip = self.graph.trip_count(comp.name, inst.name).n
            return self._loop(tl, t, body, cond, trip, inst, comp)
        subs = [self.timeline(c) for c in inst.called_computations if c in self.module.by_name]
        if inst.opcode == "conditional":  # (its costliest branch)
            subs = [max(subs, key=lambda b: b.duration)] if subs else []
        for sub in subs:
            self._place(tl, sub, t)
            t += sub.duration
        return t

    def _compute(self, tl: _Timeline, t: float, comp: Computation, inst: Instruction,
                 cheap: Mapping[str, bool] | None, users: Mapping[str, tuple[str, ...]] | None, keep: bool) -> float:
        """Run one instruction on the compute stream at `t` (its time asked of the program's costs); its end."""
        seconds, kind = self.costs.op_time(comp, inst, cheap, users)
        if seconds <= 0:
            return t
        tl.compute += seconds
        if not tl.has_dots and (inst.opcode in DOTS or inst.opcode == "fusion") and self.costs.flops_of(comp, inst):
            tl.has_dots = True
        if kind == "memory":
            tl.memory += seconds
        if keep:
            tl.spans.append((COMPUTE_TRACK, t, seconds, inst.name, comp.name, kind, None, inst))
        return t + seconds

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
        # host-offload copies run on the DMA engines beside compute: an iteration lasts at least as long as they do
        transfer = self.host.get(body, 0.0)
        host_wait = max(0.0, transfer - iteration)
        trailing_end = b.trailing_end
        drain = max((e - b.duration for e in trailing_end.values()), default=0.0)
        drain = max(0.0, drain)
        n = max(0, trip)
        # exposure: the link-bound excess per iteration, and the last iteration's drain
        tl.add_child(b, t, n)
        tl.add_child(c, t, n)
        excess = iteration - own
        iteration += host_wait
        if transfer > 0 and n:
            tl.busy[HOST_TRACK] = tl.busy.get(HOST_TRACK, 0.0) + transfer * n
            tl.host_wait += host_wait * n
        if excess > 0 and n:
            on = [r for r in range(len(self.rows)) if self.queue(self.row_track[r]) == busiest[0] and
                  self.rows[r].computation == body]
            share = sum(self.row_seconds[r] for r in on) or 1.0
            for r in on:
                tl.exposed[r] = tl.exposed.get(r, 0.0) + excess * n * self.row_seconds[r] / share
        if drain > 0 and n:
            last = max(trailing_end.items(), key=lambda kv: kv[1])[0]
            _charge(tl, drain, b.duration, b.duration + drain, [last], b.trailing_runs,
                    self.row_seconds)
        start = t
        self._unroll(tl, b, c, start, n, iteration, excess, f"wait for {busiest[0]} ({inst.name})", comp.name,
                     (transfer, host_wait))
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

    def _unroll(self, tl: _Timeline, body: _Timeline, cond: _Timeline, start: float, n: int, iteration: float,
                excess: float, wait_label: str, comp_name: str, host: tuple[float, float] = (0.0, 0.0)) -> None:
        """The spans of `n` iterations of a loop from `start` (while spans are kept), each body then condition, and
        the wait for the busiest link (`excess` per iteration) at each iteration's end; with `host` (seconds of
        host-offload copies per iteration, the wait for them) their span on the host link and that wait."""
        own = body.duration + cond.duration
        for k in range(n):
            if len(tl.spans) >= self.max_spans:
                return
            offset = start + k * iteration
            tl.spans.extend((s[0], s[1] + offset, *s[2:]) for s in body.spans)
            tl.spans.extend((s[0], s[1] + offset + body.duration, *s[2:]) for s in cond.spans)
            if excess > 0:
                tl.spans.append((COMPUTE_TRACK, offset + own, excess, wait_label, comp_name, "wait", None, None))
            if host[0] > 0:
                tl.spans.append((HOST_TRACK, offset, host[0], "host-offload copies", comp_name, "transfer", None,
                                 None))
            if host[1] > 0:
                tl.spans.append((COMPUTE_TRACK, offset + own + max(excess, 0.0), host[1],
                                 "wait for the host-offload copies", comp_name, "wait", None, None))

    # -------------------------------------------------------------- the overlap model of unscheduled modules
    def _plan(self, comp: Computation, loop: bool, users: Mapping[str, tuple[str, ...]] | None):
        """Execution order and where each collective is issued and waited for.

        Returns (order, waits_at {instruction: [[rows], ...]}, trailing rows, windowed), where windowed maps
        ("into", dot) to the all-gathers a collective matmul runs during that dot and ("from", dot) to the
        reduce-scatters of its result run during it (the user's `xla_tpu_enable_windowed_einsum_for_*` flags).
        Scheduled modules keep their order and their own waits."""
        insts = list(comp.instructions)
        windowed: dict[tuple[str, str], list[int]] = {}
        if self.scheduled or self.fused and not any((comp.name, i.name) in self.coll for i in insts):
            return insts, {}, set(), windowed
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
        for k, inst in enumerate(insts):
            roles = self.coll.get((comp.name, inst.name))
            if not roles:
                continue
            rows = [r for r, _ in roles]
            first_use, reaches_heavy = self._first_use(comp, inst.name, users, pos, carried)
            if not reaches_heavy:
                if loop:  # drains under the next iteration; a DCN one only with the data-parallel pipelining flag
                    trailing.update(r for r in rows if self.flags.dcn_pipelined
                                    or not self.row_track[r].startswith("DCN"))
                waits_at.setdefault(comp.root.name, []).append(rows)
            elif first_use is not None:
                waits_at.setdefault(insts[first_use].name, []).append(rows)
            if any(self.blocking[r] for r in rows):
                continue  # synchronous (a flag says so): runs where it stands
            target = self._issue_at(comp, inst, rows, insts, first_use, heavy, pos, invariant, windowed)
            if target != k and target < len(insts):
                moves.setdefault(target, []).append(inst)
                moved.add(inst.name)
        _split_windowed_waits(waits_at, windowed)
        if not moves:
            return insts, waits_at, trailing, windowed
        order: list[Instruction] = []
        for k, inst in enumerate(insts):
            if k in moves:
                order.extend(moves[k])
            if inst.name not in moved:
                order.append(inst)
        return order, waits_at, trailing, windowed

    def _issue_at(self, comp: Computation, inst: Instruction, rows: Sequence[int], insts: Sequence[Instruction],
                  first_use: int | None, heavy: Sequence[int], pos: Mapping[str, int], invariant: set[str],
                  windowed: dict[tuple[str, str], list[int]]) -> int:
        """Where (a position in `insts`) an asynchronous collective is issued: with the dot a collective matmul
        runs it in (recorded in `windowed`); else at the start of the last heavy op before its first use, once
        its operands exist, or as soon as they exist with async collective fusion over multiple steps."""
        import bisect

        into, source = self._collective_matmul(comp, inst, rows, insts, first_use)
        if into is not None:
            windowed.setdefault(("into", into), []).extend(rows)
        if source is not None:  # issued with the dot whose result it scatters
            windowed.setdefault(("from", insts[source].name), []).extend(rows)
            return source
        use = first_use if first_use is not None else len(insts)
        j = bisect.bisect_left(heavy, use) - 1
        gate = heavy[j] if j >= 0 else 0
        # a parameter or constant is there from the start, wherever the printer lists it (jit lists a weight's
        # parameter just before its gather, after the matmul that could hide it), and so is a loop-invariant
        # operand (a weight sliced by the counter can be sliced at the iteration's start)
        ready = max((pos[o] + 1 for o in inst.operand_names if o in pos and o not in invariant
                     and comp.by_name[o].opcode not in ("parameter", "constant")), default=0)
        # over multiple steps (xla_tpu_enable_async_collective_fusion_multiple_steps) a collective may span several
        # compute ops: issued as soon as its operands exist; otherwise it overlaps the last dot before its use
        return ready if self.flags.multiple_steps else max(gate, ready)

    def _first_shards(self, rows: Sequence[int], start_of: Mapping[int, float],
                      end_of: Mapping[int, float]) -> dict[int, float]:
        """When the first shard of each all-gather a collective matmul runs is there: one ring step in."""
        return {r: min(end_of[r], start_of[r] + self.row_seconds[r] / self._shards(r)) for r in rows if r in end_of}

    def _last_shard_after(self, r: int, t: float, end_of: dict[int, float], runs: list[tuple[float, float, int]],
                          queue_free: dict[str, float], ready_at: dict[str, float]) -> None:
        """A reduce-scatter a collective matmul ran during the dot that ended at `t`: its last shard is sent after
        the dot's last step, so it ends no earlier than `t` + one ring step (its run, its queue and its result
        move with it)."""
        if r not in end_of:
            return
        late = max(end_of[r], t + self.row_seconds[r] / self._shards(r))
        queue = self.queue(self.row_track[r])
        if queue_free.get(queue) == end_of[r]:
            queue_free[queue] = late
        runs[:] = [(a, late if (b, q) == (end_of[r], r) else b, q) for a, b, q in runs]
        end_of[r] = late
        own = self.rows[r].instruction.name
        if own in ready_at:
            ready_at[own] = max(ready_at[own], late)

    def _shards(self, r: int) -> int:
        """The devices of collective row `r`'s group (a collective matmul's ring has that many steps)."""
        sizes = getattr(self.rows[r], "axis_sizes", ()) or ()
        n = 1
        for x in sizes:
            n *= int(x)
        return max(1, n)

    def _collective_matmul(self, comp: Computation, inst: Instruction, rows: Sequence[int],
                           insts: Sequence[Instruction], first_use: int | None) -> tuple[str | None, int | None]:
        """Where the user's collective-matmul flags run collective `inst` during a dot: (the dot an all-gather
        feeds, when its first use is that dot and `xla_tpu_enable_windowed_einsum_for_all_gather` is on; the
        position of the dot whose result a reduce-scatter scatters, through ops that only reshape, with
        `..._for_reduce_scatter`). (None, None) otherwise."""
        kinds = {self.rows[r].kind for r in rows}
        if kinds == {"all-gather"} and self.flags.windowed_all_gather and first_use is not None:
            user = insts[first_use]
            if self.holds_dot(user) and inst.name in user.operand_names:
                return user.name, None
        if kinds == {"reduce-scatter"} and self.flags.windowed_reduce_scatter and inst.operand_names:
            name = inst.operand_names[0]
            for _ in range(4):
                src = comp.by_name.get(name)
                if src is None:
                    break
                if self.holds_dot(src):
                    return None, next((k for k, i in enumerate(insts) if i.name == src.name), None)
                if src.opcode not in PASS_THROUGH or not src.operand_names:
                    break
                name = src.operand_names[0]
        return None, None

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
        param = next((i for i in body.instructions if i.opcode == "parameter"), None)
        if param is None or body.root.opcode != "tuple":
            return set()
        passthrough = _carried_unchanged(body, param)
        out: set[str] = set()
        for i in body.instructions:
            op = i.opcode
            if op == "constant" or op in ("partition-id", "replica-id", "iota"):
                out.add(i.name)
            elif op == "get-tuple-element" and i.operand_names and i.operand_names[0] == param.name:
                idx = i.attr("index")
                if idx is not None and idx.isdigit() and int(idx) in passthrough:
                    out.add(i.name)
            elif self._computed_from(body, i, out):
                out.add(i.name)
        return out

    def _computed_from(self, body: Computation, i: Instruction, invariant: set[str]) -> bool:
        """Whether `i` is computed from `invariant` values only, by an op that gives the same result each time:
        no dot, call or random numbers, and in an unfused module no collective; slices always."""
        op = i.opcode
        if op in DOTS or op in ("parameter", "while", "call", "custom-call", "rng", "rng-bit-generator"):
            return False
        if not (op in SLICING or (self.fused is False and (body.name, i.name) not in self.coll)):
            return False
        return bool(i.operands) and all(o in invariant for o in i.operand_names)


def _split_windowed_waits(waits_at: dict[str, list[list[int]]], windowed: Mapping[tuple[str, str], list[int]]) -> None:
    """Take the all-gathers a collective matmul runs during their dot out of that dot's plain waits: the walk
    waits for their first shard before the dot and for the rest after it."""
    for (role, name), rows in windowed.items():
        if role == "into" and name in waits_at:
            waits_at[name] = [[r for r in group if r not in rows] for group in waits_at[name]]


def _carried_unchanged(body: Computation, param: Instruction) -> set[int]:
    """The indices of a loop body's result tuple that carry the parameter's element of the same index unchanged,
    and the counter's (an index plus a constant)."""
    out: set[int] = set()
    for idx, o in enumerate(body.root.operands):
        src = body.by_name.get(o.name)
        if src is None or src.opcode != "get-tuple-element" or src.operand_names[0] != param.name:
            if src is not None and src.opcode == "add" and any(
                    body.by_name.get(n) is not None and body.by_name[n].opcode == "constant"
                    for n in src.operand_names):
                out.add(idx)  # the counter: index + constant
            continue
        if src.attr("index") == str(idx):
            out.add(idx)
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
                 max_spans: int = 200_000, model: ModelFlops | None = None,
                 costs: ProgramCosts | None = None, xla_flags: Mapping[str, Any] | None = None,
                 host: HostOffload | None = None) -> StepPrediction:
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
      costs: the program's `ProgramCosts` on `hardware` (analyzer.analysis.costs), when the caller has them;
        built here otherwise.
      xla_flags: the user's XLA flags ({name: value}, `Report.analysis.xla_flags`): what they change in the
        overlap model of unscheduled modules (`analyzer.compile.xlaflags.overlap_flags`; docs/step.md, "The
        user's XLA flags"); `StepPrediction.flags_note` says which were modelled.
      host: the program's host-offload copies (`analyzer.analysis.offload.host_offload`; unscheduled modules): a
        loop iteration lasts at least its copies' time on the host link, copies outside loops bound the step;
        the waits are `exposed_by_axis[HOST_TRACK]` (docs/step.md, "Host offload").

    Returns:
      `StepPrediction`.

    Example:
        >>> step = report.analysis.step          # what analyze() computed with this function
        >>> busiest = max(step.busy.values())   # compute, or the busiest link
        >>> busiest <= step.step_seconds <= step.compute_seconds + report.totals.comm_seconds
        True
    """
    from analyzer.analysis.mapping import pass_of  # noqa: F401  (documented dependency of _loop_label)

    flags = overlap_flags(xla_flags)
    w = _Walker(module, graph, collectives, dots, hardware, topology, max_spans, costs, flags, host)
    tl = w.timeline(module.entry.name)
    if host is not None and host.outside_seconds > 0:  # copies outside loops: the step lasts at least as long
        tl.busy[HOST_TRACK] = tl.busy.get(HOST_TRACK, 0.0) + host.outside_seconds
        if host.outside_seconds > tl.duration:
            tl.host_wait += host.outside_seconds - tl.duration
            tl.duration = host.outside_seconds
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
    if tl.host_wait > 0:
        by_axis[HOST_TRACK] = tl.host_wait
    busy = {COMPUTE_TRACK: tl.compute, **tl.busy}
    spans = tuple(Span(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]) for s in tl.spans)
    windows = tuple(tl.windows) or tuple(_repeat_windows(tl.spans, w.holds_dot))
    denom = step * peak * n
    return StepPrediction(
        step_seconds=step, compute_seconds=tl.compute, memory_bound_seconds=tl.memory,
        exposed_comm_seconds=max(0.0, step - tl.compute), exposed_by_axis=by_axis, busy=busy,
        exposed_rows=exposed_rows, model_flops=model_total, executed_flops=executed,
        mfu=model_total / denom if denom > 0 else 0.0, hfu=executed / denom if denom > 0 else 0.0,
        overlap="schedule" if w.scheduled else "model", chips=n, peak_flops=peak, spans=spans,
        windows=windows, track_axes=dict(w.track_axes), bubble_seconds=tl.bubble, pipelines=tuple(tl.pipelines),
        flags_note=flags.note() if not w.scheduled else _scheduled_flags_note(flags),
        axes_note=subaxis_note([getattr(c, "axes", ()) or () for c in collectives], topology),
    )


def subaxis_note(axes: Sequence[Sequence[str]], topology: Any) -> str | None:
    """A sentence explaining each sub-axis label among the collectives' axes (`X:(pre)size`, XLA's spelling, also
    in the trace's track names such as `ICI fsdp:(8)4`), or None when there is none.

    Example:
        >>> class T: axis_names, axis_sizes = ("data", "fsdp"), (8, 32)
        >>> print(subaxis_note([("fsdp:(8)4",), ("data:(1)2",), ("fsdp",)], T()))  # doctest: +NORMALIZE_WHITESPACE
        Sub-axes: a label X:(pre)size (XLA's spelling, also in the trace's track names, e.g. ICI X:(pre)size) is
        the part of mesh axis X its group runs over: X's devices split, major to minor, into pre x size x the
        rest, and the group is the size devices of the middle factor, so its members are (X's size) / (pre x
        size) positions apart along X. Here: data:(1)2 is 2 of data's 8 (1 x 2 x 4: the major factor: 2
        positions 4 apart); fsdp:(8)4 is 4 of fsdp's 32 (8 x 4 x 1: 4 neighbouring positions, 1 apart).
    """
    from analyzer.theory.notation import sub_axes_note

    # (one explanation of the label, in analyzer.theory.notation, for every place that shows one)
    mesh = list(zip(getattr(topology, "axis_names", ()) or (), getattr(topology, "axis_sizes", ()) or ()))
    return sub_axes_note(axes, mesh)


def _scheduled_flags_note(flags: OverlapFlags) -> str | None:
    """A scheduled module's flags: the compiler already applied them; its schedule is read as it is."""
    given = [*flags.modelled, *flags.not_modelled, *flags.unknown]
    if not given:
        return None
    return ("XLA flags " + ", ".join(given) + ": the module was scheduled by the compiler they were given to, so "
            "the step follows its schedule; the overlap model does not apply them again.")

