"""The matmuls of an HLO module and their FLOPs: every `dot` and `convolution`, inside fusions too.

The compute side of the roofline: `Report.dots` has one row per dot with its FLOPs per execution and how
many times it runs per step (loop trip counts multiplied in, like the collectives' `count`).

FLOPs of a dot: 2 x (elements of the result) x (product of the contracting dims). A convolution (the TPU
compiler writes many dots as convolutions, batch dims as spatial dims dilated so that each output position
reads one input position): 2 x (output batch x features) x (kernel input features) x (window taps that
land on real input), from dim_labels and window. `dot_flops` is the one FLOPs count of the analyzer.

Model FLOPs (`model_flops`): the work of the model, whatever the plan: the dots of the program as jax handed it
to XLA (`Lowered.global_hlo`, global shapes), counted once per program, remat recompute left out. A dot in a
shard_map body (Shardy's `xla.sdy.manual_computation_body`) has per-shard shapes: it counts once per distinct
shard, the product over the body's manual axes of the ways its operands are split over them (a `P()` batch
operand on every chip is one piece of data: the chips of 'data' compute the same values, the model's work once;
every shard where the operands' shardings cannot be read or the body reads its device's id). The partitioned
module's FLOPs times the chips is the hardware's work; where it is larger, the plan computes some dots on several
chips at once (a batch replicated over a mesh axis), and the ratio, per op, is the dot's redundancy
(`ModelFlops.redundancy`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from analyzer.analysis.graph import CallGraph
from analyzer.hlo.opcodes import DEVICE_VARYING, DOTS

if TYPE_CHECKING:
    from analyzer.hlo.ir import HloModule, Instruction

__all__ = ["Dot", "ModelFlops", "dot_flops", "extract_dots", "contracting_dims", "batch_dims", "is_remat",
           "model_flops", "executed_by_op", "op_key", "is_global_to_local", "manual_operand_axes", "MANUAL_BODY"]

_DOT_LIST = tuple(sorted(DOTS))  # (the TPU compiler spells many dots as convolutions)


@dataclass(frozen=True)
class Dot:
    """One dot or convolution: where it runs, its FLOPs per execution and executions per step."""

    instruction: Instruction
    computation: str
    flops: float
    count: float
    contracting: tuple[int, ...]
    branch: tuple[tuple[str, int], ...] = ()  # conditional branches on its call path

    @property
    def dtype(self) -> str:
        ops = [o.shape for o in self.instruction.operands if o.shape is not None]
        return ops[0].element_type if ops else self.instruction.shape.element_type


def _ints(raw: str | None) -> tuple[int, ...]:
    if not raw:
        return ()
    return tuple(int(p) for p in raw.strip("{} ").split(",") if p.strip())


def contracting_dims(dot: Instruction, operand: int = 0) -> tuple[int, ...]:
    """The contracting dims of a dot's operand (0 = lhs, 1 = rhs), from its dimension numbers.

    For a convolution (the TPU compiler's spelling of a dot): the input-feature dim (`f` of the lhs, `i` of
    the kernel) and the spatial dims the window covers whole (one output position).
    """
    if dot.opcode == "convolution":
        return _convolution_dims(dot, operand)[0]
    return _ints(dot.attr("lhs_contracting_dims" if operand == 0 else "rhs_contracting_dims"))


def batch_dims(dot: Instruction, operand: int = 0) -> tuple[int, ...]:
    """The batch dims of a dot's operand (0 = lhs, 1 = rhs), from its dimension numbers.

    For a convolution: the spatial dims that are not contracted (the TPU compiler's batch dims of a dot).
    """
    if dot.opcode == "convolution":
        return _convolution_dims(dot, operand)[1]
    return _ints(dot.attr("lhs_batch_dims" if operand == 0 else "rhs_batch_dims"))


def _labels(inst: Instruction) -> tuple[str, str, str] | None:
    """The lhs, kernel and output labels of a convolution's dim_labels (`0bf_0io->0bf`), or None."""
    raw = inst.attr("dim_labels") or ""
    try:
        lhs_l, rest = raw.split("_", 1)
        rhs_l, out_l = rest.split("->", 1)
    except ValueError:
        return None
    return lhs_l, rhs_l, out_l


def _convolution_dims(inst: Instruction, operand: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(contracting, batch) dims of a convolution's operand, from dim_labels and the shapes."""
    labels = _labels(inst)
    if labels is None or operand > 1 or len(inst.operands) < 2 or inst.operands[0].shape is None:
        return (), ()
    lhs_l, rhs_l, out_l = labels
    mine = lhs_l if operand == 0 else rhs_l
    lhs, out = inst.operands[0].shape, inst.shape
    if len(lhs_l) != lhs.rank or not out.is_array or len(out_l) != out.rank:
        return (), ()
    contracting = [mine.index("f" if operand == 0 else "i")] if ("f" if operand == 0 else "i") in mine else []
    batch = []
    for c in (c for c in mine if c.isdigit()):
        whole = out.dims[out_l.index(c)] == 1 and lhs.dims[lhs_l.index(c)] > 1
        (contracting if whole else batch).append(mine.index(c))
    return tuple(sorted(contracting)), tuple(sorted(batch))


def _valid_taps(n: int, k: int, m: int, stride: int, pad_lo: int, lhs_dilate: int, rhs_dilate: int) -> int:
    """How many (output position, window position) pairs of one spatial dimension read a real input element.

    The input of `n` elements is dilated by `lhs_dilate` (holes between elements) and padded by `pad_lo`
    in front; output position o with window position j reads index `o*stride + j*rhs_dilate - pad_lo` of
    the dilated input: a real element when it lies in `[0, (n-1)*lhs_dilate]` and is a multiple of
    `lhs_dilate`. The TPU compiler writes a dot's batch dims this way (window = batch, lhs_dilate = batch,
    so exactly one tap per output position); an ordinary convolution has every tap inside the input.
    """
    last = (n - 1) * lhs_dilate
    total = 0
    for j in range(k):
        base = j * rhs_dilate - pad_lo
        if lhs_dilate == 1:
            # o*stride + base in [0, last]: o in [ceil(-base/stride), floor((last-base)/stride)] within [0, m)
            lo = max(0, -(base // stride) if base < 0 else 0)
            while lo * stride + base < 0:
                lo += 1
            hi = min(m - 1, (last - base) // stride) if last - base >= 0 else -1
            total += max(0, hi - lo + 1)
        else:
            total += sum(1 for o in range(m) if 0 <= o * stride + base <= last and (o * stride + base) % lhs_dilate == 0)
    return total


def _convolution_flops(inst: Instruction) -> float:
    """2 x (multiply-adds that touch real data) of a convolution, from its dim_labels and window.

    Per output (batch, feature) pair, a convolution sums the kernel's input features (`i`, already divided
    by feature_group_count in the kernel's shape) over the window taps that land on real input elements.
    """
    shapes = [o.shape for o in inst.operands]
    out = inst.shape
    if len(shapes) < 2 or shapes[0] is None or shapes[1] is None or not out.is_array:
        return 0.0
    lhs, rhs = shapes[0], shapes[1]
    labels = _labels(inst)
    if labels is None:
        return 0.0
    lhs_l, rhs_l, out_l = labels
    if len(lhs_l) != lhs.rank or len(rhs_l) != rhs.rank or len(out_l) != out.rank:
        return 0.0
    window = {}
    if inst.attr("window"):
        from analyzer.hlo.attributes import parse_window

        window = parse_window(inst.attr("window") or "")
    spatial = sorted(c for c in out_l if c.isdigit())
    taps = 1
    for w, c in enumerate(spatial):
        n = lhs.dims[lhs_l.index(c)]
        k = rhs.dims[rhs_l.index(c)]
        m = out.dims[out_l.index(c)]
        stride = window.get("stride", (1,) * len(spatial))[w]
        pad_lo = window.get("pad", ((0, 0),) * len(spatial))[w][0]
        lhs_dilate = window.get("lhs_dilate", (1,) * len(spatial))[w]
        rhs_dilate = window.get("rhs_dilate", (1,) * len(spatial))[w]
        taps *= _valid_taps(n, k, m, stride, pad_lo, lhs_dilate, rhs_dilate)
    batch = out.dims[out_l.index("b")]
    features = out.dims[out_l.index("f")]
    per_feature = rhs.dims[rhs_l.index("i")]
    return 2.0 * batch * features * per_feature * taps


def dot_flops(inst: Instruction) -> tuple[float, tuple[int, ...]]:
    """FLOPs of one execution of a dot/convolution on one device, and its lhs contracting dims.

    A dot: 2 x (elements of the result) x (product of the lhs contracting dims). A convolution (the TPU
    compiler's spelling of many dots, batch dims as dilated spatial dims): 2 x (output batch x output
    features) x (kernel input features) x (window taps on real input), from its dim_labels and window.
    This is the one FLOPs count of the analyzer: the totals, the dots table and the rules use it.

    Example:
        f32[8,64] dot(f32[8,128], f32[128,64]), lhs_contracting_dims={1} -> (2*8*64*128, (1,))
    """
    out = inst.shape
    if inst.opcode in ("dot", "ragged-dot"):
        out_elems = sum(s.num_elements for s in out.leaves() if s.is_array)
        lhs = inst.operands[0].shape if inst.operands else None
        dims = contracting_dims(inst, 0)
        k = 1
        if lhs is not None:
            for d in dims:
                if d < lhs.rank:
                    k *= lhs.dims[d]
        return 2.0 * out_elems * k, dims
    if inst.opcode == "convolution":
        return _convolution_flops(inst), contracting_dims(inst, 0)
    return 0.0, ()


def extract_dots(module: HloModule, graph: CallGraph | None = None) -> list[Dot]:
    """Every dot/convolution that runs, with FLOPs and executions per call of the entry computation."""
    g = graph or CallGraph.build(module)
    out: list[Dot] = []
    holding = module.holding(*_DOT_LIST)
    for name in g.executed():
        if name not in holding:
            continue
        dots = None
        for branch, count in g.branch_counts(name).items():
            if count <= 0:
                continue
            if dots is None:  # (a fusion body of a lazily parsed module: only its dot lines are read)
                dots = module.by_name[name].select(*_DOT_LIST)
            for inst in dots:
                flops, contracting = dot_flops(inst)
                out.append(Dot(inst, name, flops, count, contracting, branch))
    return out


def is_remat(d: Dot) -> bool:
    """A dot that recomputes the forward pass for the backward pass. jax names that recomputation
    `.../checkpoint/rematted_computation/...`; the other dots of a checkpointed block (its forward pass and its
    backward pass) carry `checkpoint` too and are model FLOPs."""
    md = d.instruction.metadata
    name = (md.op_name or "") if md is not None else ""
    return "rematted_computation" in name


def op_key(d: Dot, module: HloModule) -> str:
    """What joins a dot of the partitioned module to its dots in the program jax handed XLA: the jax primitive
    and the user's source line (`dot_general at model.py:41`). The op_name alone does not: the program before
    partitioning names ops without the name stack XLA adds later (`jit(step)/transpose(jvp())/...`), so a
    forward dot and the backward dots of one line share the key."""
    from analyzer.analysis.mapping import op_label, user_frame

    md = d.instruction.metadata
    if md is None:
        return d.instruction.opcode
    label = op_label(md.op_name) or d.instruction.opcode
    return f"{label} at {user_frame(module, md.stack_frame_id, md.source_file, md.source_line) or '?'}"


@dataclass(frozen=True)
class ModelFlops:
    """The model's FLOPs per step, all chips together, independent of the plan.

    Attributes:
      total: FLOPs of one step of the model (every conditional by its costliest branch, remat left out).
      by_op: the same by `op_key` (the jax op_name), for the redundancy of each dot.
      source: "program" (counted on the program jax handed XLA) or "chips" (no such program: the partitioned
        module's FLOPs times the chips, which counts a plan's redundant compute as model work).
      module: the program counted (global shapes), for rules that trace a dot to the argument it reads.
      dots: that program's dots by `op_key`.
    """

    total: float
    by_op: Mapping[str, float] = field(default_factory=dict)
    source: str = "program"
    module: HloModule | None = field(default=None, compare=False, repr=False)
    dots: Mapping[str, tuple[Dot, ...]] = field(default_factory=dict, compare=False, repr=False)

    def redundancy(self, key: str, executed: float) -> float:
        """`executed` (FLOPs of the op on all chips) over the op's model FLOPs: 1.0 when each chip computes its
        own part, n when n chips compute the same; NaN when the program has no such op."""
        model = self.by_op.get(key, 0.0)
        return executed / model if model > 0 else float("nan")


MANUAL_BODY = "xla.sdy.manual_computation_body"
_MANUAL_AXES = re.compile(r'manual_axes\{([^}]*)\}')


def _manual_axes(graph: CallGraph, caller: str, inst: Instruction) -> tuple[str, ...] | None:
    """The manual axes of the shard_map that `inst` (a call of a manual computation body) runs: read from the
    `xla.sdy.GlobalToLocalShape` custom-call its operands come from, or the `LocalToGlobalShape` its result
    goes to; None when neither says."""
    near = list(graph.users(caller, inst.name))
    for op in graph.operands(caller, inst):
        near.append(op)
        near.extend(graph.operands(caller, op))
    for other in near:
        text = other.frontend_attributes.get("xla.sdy.manual_axes", "") if other.opcode == "custom-call" else ""
        m = _MANUAL_AXES.search(text)
        if m:
            return tuple(a.strip().strip('\\"') for a in m.group(1).split(",") if a.strip())
    return None


_G2L = "xla.sdy.GlobalToLocalShape"
# one value's sharding in jax 0.10's `xla.sdy.in_shardings` (`<@mesh, [{}, {\"model\"}]>`): its dims' axes
_SDY_VALUE = re.compile(r'<@[^,\[\]]+, \[([^\[\]]*)\]')
# an axis in it, a sub-axis with its size (`\"data\":(1)2`)
_SDY_AXIS = re.compile(r'\\?"([^"\\]+)\\?"(?::\(\d+\)(\d+))?')


def is_global_to_local(inst: Instruction | None) -> bool:
    """Whether `inst` is the `xla.sdy.GlobalToLocalShape` custom-call that hands a shard_map body its pieces."""
    return inst is not None and inst.opcode == "custom-call" and \
        inst.attr("custom_call_target") in (_G2L, f'"{_G2L}"')


def _global_to_local(graph: CallGraph, caller: str, inst: Instruction) -> Instruction | None:
    """The `xla.sdy.GlobalToLocalShape` custom-call whose pieces the shard_map body call `inst` reads (through the
    get-tuple-elements that take them apart), or None."""
    for op in graph.operands(caller, inst):
        for near in (op, *graph.operands(caller, op)):
            if is_global_to_local(near):
                return near
    return None


def manual_operand_axes(comp: Any, g2l: Instruction, index: int) -> tuple[tuple[str, ...], ...] | None:
    """The mesh axes each dim of operand `index` of a shard_map is split over (its in_specs as jax wrote them),
    read from the `xla.sdy.GlobalToLocalShape` custom-call `g2l` of computation `comp` that hands the pieces to the
    body: jax 0.10 writes them on it (`xla.sdy.in_shardings`), jax 0.11+ on each operand (`sharding={mesh[...],
    [{}, {'model'}]}`, a `Sharding` custom-call's); a sub-axis counts as its axis. None when they cannot be read.

    Example:
        `xla.sdy.in_shardings="#sdy.sharding_per_value<[<@mesh, [{}, {}]>, <@mesh, [{}, {\"model\"}]>]>"`,
        index 1 -> ((), ('model',))
    """
    text = g2l.frontend_attributes.get("xla.sdy.in_shardings", "")
    if text:
        values = _SDY_VALUE.findall(text)
        if index >= len(values):
            return None
        return tuple(tuple(a for a, _ in _SDY_AXIS.findall(d)) for d in re.findall(r"\{([^{}]*)\}", values[index]))
    from analyzer.hlo.sharding import named_axes

    names = g2l.operand_names
    op = comp.by_name.get(names[index]) if index < len(names) else None
    return named_axes(op.attr("sharding") or "") if op is not None else None


def _split_ways(graph: CallGraph, caller: str, g2l: Instruction, axis_sizes: Mapping[str, int]
                ) -> dict[str, int] | None:
    """Per mesh axis, how many ways the shard_map's operands (those `g2l` hands its body) are split over it (the
    most of any operand; `manual_operand_axes`). None when their shardings cannot be read."""
    ways: dict[str, int] = {}
    text = g2l.frontend_attributes.get("xla.sdy.in_shardings", "")
    if text:  # (jax 0.10: a sub-axis by its own size)
        for dims in _SDY_VALUE.findall(text):
            for axis, sub in _SDY_AXIS.findall(dims):
                ways[axis] = max(ways.get(axis, 1), int(sub) if sub else axis_sizes.get(axis, 1))
        return ways
    comp = graph.computation(caller)
    for i in range(len(g2l.operand_names)):
        dims = manual_operand_axes(comp, g2l, i)
        if dims is None:
            return None
        for axis in (a for d in dims for a in d):
            ways[axis] = axis_sizes.get(axis, 1)
    return ways


def _reads_device_id(graph: CallGraph, body: str) -> bool:
    """Whether the shard_map body `body` (or a computation it calls) reads its device's id (`axis_index`): its
    shards then differ whatever their operands."""
    seen, todo = set(), [body]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if any(i.opcode in DEVICE_VARYING and i.opcode != "custom-call" for i in graph.computation(name).instructions):
            return True
        todo.extend(site.callee for site in graph.callees(name))
    return False


def _distinct_shards(graph: CallGraph, caller: str, site: Any, axis_sizes: Mapping[str, int]) -> float:
    """How many distinct shards of the shard_map whose body `site` calls run: the product over its manual axes
    (every mesh axis where the program does not say) of the ways its operands are split over them. Shards that
    differ only over an axis no operand is split over compute the same values (a `P()` operand on every chip):
    that work is the model's once. Every shard of the manual axes where the operands' shardings cannot be read
    or the body reads its device's id."""
    inst = graph.computation(caller).by_name.get(site.instruction)
    axes = _manual_axes(graph, caller, inst) if inst is not None else None
    manual = tuple(axis_sizes) if axes is None else axes
    every = 1.0
    for a in manual:
        every *= axis_sizes.get(a, 1)
    g2l = _global_to_local(graph, caller, inst) if inst is not None else None
    ways = _split_ways(graph, caller, g2l, axis_sizes) if g2l is not None else None
    if ways is None or _reads_device_id(graph, site.callee):
        return every
    distinct = 1.0
    for a in manual:
        distinct *= min(ways.get(a, 1), axis_sizes.get(a, 1))
    return distinct


def _shard_factors(graph: CallGraph, axis_sizes: Mapping[str, int]) -> dict[str, float]:
    """Per computation, how many distinct shards of a shard_map run it (1 outside any shard_map)."""
    factors: dict[str, float] = {}
    for name in graph.executed():
        mine = factors.setdefault(name, 1.0)
        for site in graph.callees(name):
            f = mine
            if site.callee.startswith(MANUAL_BODY):
                f *= _distinct_shards(graph, name, site, axis_sizes)
            factors[site.callee] = max(factors.get(site.callee, 0.0), f)
    return factors


def model_flops(module: HloModule, axis_sizes: Mapping[str, int], graph: CallGraph | None = None) -> ModelFlops:
    """The model FLOPs of the program jax handed XLA (`Lowered.global_hlo`): every dot at its global size,
    once per step, remat recompute left out; a shard_map body's dots once per distinct shard of its
    manual axes (`_distinct_shards`).

    Args:
      module: the parsed program before partitioning (global shapes).
      axis_sizes: the mesh's axis sizes by name (for shard_map bodies).
      graph: its call graph, if built.

    Returns:
      `ModelFlops` (source "program").

    Example:
        f32[256,128] dot(f32[256,512], f32[512,128]) on any mesh -> total 2*256*128*512
    """
    from analyzer.analysis.graph import branch_sum  # each conditional by its costliest branch, as the totals

    g = graph or CallGraph.build(module)
    factors = _shard_factors(g, axis_sizes)
    items: list[tuple[tuple[tuple[str, int], ...], float]] = []
    by_op: dict[str, list[tuple[tuple[tuple[str, int], ...], float]]] = {}
    dots: dict[str, list[Dot]] = {}
    for d in extract_dots(module, g):
        if is_remat(d):
            continue
        v = d.flops * d.count * factors.get(d.computation, 1.0)
        items.append((d.branch, v))
        key = op_key(d, module)
        by_op.setdefault(key, []).append((d.branch, v))
        dots.setdefault(key, []).append(d)
    return ModelFlops(branch_sum(items), {k: branch_sum(v) for k, v in by_op.items()}, "program", module,
                      {k: tuple(v) for k, v in dots.items()})


def executed_by_op(dots: Sequence[Dot], module: HloModule, chips: int) -> dict[str, float]:
    """FLOPs per step of each op (`op_key`) on all chips of a partitioned module: its dots' FLOPs x chips."""
    from analyzer.analysis.graph import branch_sum

    by_op: dict[str, list[tuple[tuple[tuple[str, int], ...], float]]] = {}
    for d in dots:
        by_op.setdefault(op_key(d, module), []).append((d.branch, d.flops * d.count * chips))
    return {k: branch_sum(v) for k, v in by_op.items()}
