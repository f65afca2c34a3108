"""Finding the collectives of an HLO module: one record per logical collective, however XLA spelled it.

What counts as one collective (DESIGN.md, "collectives" and "What the TPU compiler prints"):
  - a sync op (`all-gather`, `all-reduce`, `reduce-scatter`, `all-to-all`, `collective-permute`,
    `collective-broadcast`, `ragged-all-to-all`);
  - an async pair: `all-gather-start`/`-done` (the `-done` adds nothing), an `async-start` wrapping one of the
    above in its called computation;
  - the TPU compiler's async collective fusions: `fusion(...), kind=kCustom` whose computation holds the
    collective plus a custom-call `AsyncCollectiveStart`; the continuation fusion(s) and the
    `AsyncCollectiveDone` fusion repeat the collective's text with the same `channel_id`: one collective;
  - `all-reduce-scatter` fusions (TPU): an all-reduce inside a fusion whose output is the scattered shard is
    a reduce-scatter;
  - an all-reduce whose result is only read through dynamic-slices indexed by the partition id is the
    reduce-scatter the partitioner meant (the CPU backend never forms reduce-scatters): reported as one,
    `original_ops="all-reduce + dynamic-slice"`;
  - tuple collectives made by combiners: one row per operand;
  - collective matmul (TPU): rings of `collective-permute`s whose op is a `dot_general`, linked by data flow,
    shifting by one along one mesh axis: the logical AllGather (the shards feed the partial dots) or
    ReduceScatter (partial results travel and accumulate), reported once, `overlapped=True`,
    `permute_steps` = the number of permutes.

`count` is executions per call of the entry computation: the multiplicity of the computation that runs the
op (loops multiplied through, conditional branches counted as if taken; `branch` says which).

`bytes` is the chapter's V: AllGather the gathered (output) array, ReduceScatter and AllReduce the unreduced
input, AllToAll the whole array over the group (per-device bytes times group size), collective-permute
and collective-broadcast the buffer each device sends. All per group of devices, as the chapter's formulas
take them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from analyzer.analysis.devices import device_count
from analyzer.analysis.graph import BranchKey, CallGraph
from analyzer.hlo.opcodes import (ASYNC_COLLECTIVE_DONES, ASYNC_COLLECTIVE_STARTS, COLLECTIVE_KINDS, COLLECTIVES,
                                  DATA_MOVEMENT, DOTS, PASS_THROUGH)

if TYPE_CHECKING:
    from analyzer.hlo.ir import Computation, HloModule, Instruction, Shape

__all__ = ["Collective", "extract_collectives"]

_ASYNC_STARTS = {f"{k}-start": k for k in COLLECTIVE_KINDS}
_COLLECTIVE_LIST = tuple(sorted(COLLECTIVES))
# What `_Builder._fusion` looks for inside a fusion: collectives and async collective starts.
_FUSED_COLLECTIVES = tuple(sorted(COLLECTIVES | ASYNC_COLLECTIVE_STARTS))
_ASYNC_DONES = ASYNC_COLLECTIVE_DONES | {"async-done", "async-update"}
_DOT_OP_LIST = tuple(sorted(DOTS))


@dataclass(frozen=True)
class Collective:
    """One logical collective.

    HLO side:
      kind: logical kind (one of `COLLECTIVE_KINDS`).
      computation: the computation that runs it (for fused forms: the computation holding the fusion).
      instruction: the HLO instruction of the collective op itself (inside a fusion for TPU forms).
      instructions: names of every instruction that makes it up (start, continuation, done, slice...).
      sync: False for async forms.
      operand_shape, result_shape: per-device shapes of this operand (tuple collectives: one element).
      operand_index: which operand of a tuple collective, else None.
      dimension: the gathered / scattered / all-to-all dimension of the result, when there is one.
      groups: expanded device groups (mesh positions); for permutes the cycles of the permutation.
      pairs: source-target pairs of a permute.
      count: executions per call of the program; branch: the conditional branches on its call path.
      overlapped: the compiler overlaps it with compute (async fusions with a continuation, collective matmul).
      permute_steps: collective-permutes that implement it (collective matmul), else 0.
      original_ops: what the HLO spelled when the row was recognised from a pattern, else "".
      dot, dot_relation: the dot/convolution it feeds ("feeds") or whose result it reduces ("from").
      only_used_sharded: its result is only read through dynamic-slices by partition id.
    Filled in by the analysis (analyzer.pipeline):
      axes, axis_sizes, regular, notation, before, after, source, pass_, cost, global_shape.
    """

    kind: str
    computation: str
    instruction: Instruction
    instructions: tuple[str, ...]
    sync: bool
    operand_shape: Shape
    result_shape: Shape
    groups: tuple[tuple[int, ...], ...]
    count: float
    operand_index: int | None = None
    dimension: int | None = None
    pairs: tuple[tuple[int, int], ...] | None = None
    branch: BranchKey = ()
    overlapped: bool = False
    permute_steps: int = 0
    original_ops: str = ""
    dot: Instruction | None = None
    dot_relation: str = ""
    only_used_sharded: bool = False
    scatter_dims: tuple[int, ...] = ()
    a2a_dims: tuple[int, int] | None = None  # (dim that was sharded, dim that becomes sharded) for all-to-all
    site: Instruction | None = None  # the instruction of `computation` that runs it (fusion, start), if not itself
    # mapped
    axes: tuple[str, ...] = ()
    axis_sizes: tuple[int, ...] = ()
    regular: bool = True
    notation: str = ""
    before: tuple[tuple[str, ...], ...] = ()
    after: tuple[tuple[str, ...], ...] = ()
    unreduced: tuple[str, ...] = ()
    global_shape: tuple[int, ...] = ()
    source: str = ""
    pass_: str = ""
    cost: Any = None
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    # ---------------------------------------------------------------- derived figures
    @property
    def dtype(self) -> str:
        return self.operand_shape.element_type

    @property
    def group_size(self) -> int:
        if self.kind == "collective-permute" and self.permute_steps == 0:
            return max((len(g) for g in self.groups), default=1)
        return max((len(g) for g in self.groups), default=1)

    @property
    def num_groups(self) -> int:
        return len(self.groups)

    @property
    def per_device_bytes(self) -> int:
        """Bytes of the shard each device holds or sends (AllGather input, ReduceScatter output)."""
        if self.kind == "reduce-scatter":
            return self.result_shape.byte_size
        return self.operand_shape.byte_size

    @property
    def bytes(self) -> int:
        """V of the chapter for this collective (see the module docstring)."""
        if self.kind == "all-gather":
            return self.result_shape.byte_size
        if self.kind in ("reduce-scatter", "all-reduce", "collective-permute", "collective-broadcast"):
            return self.operand_shape.byte_size
        if self.kind in ("all-to-all", "ragged-all-to-all"):
            return self.operand_shape.byte_size * self.group_size
        return self.operand_shape.byte_size

    @property
    def op_name(self) -> str:
        """The jax op that caused it: the instruction's own op_name, else the one of the value it moves
        (collectives the partitioner adds to reshard a result carry no metadata of their own)."""
        md = self.instruction.metadata
        own = (md.op_name or "") if md is not None else ""
        if not own and self.site is not None and self.site.metadata is not None:
            own = self.site.metadata.op_name or ""
        return own or self.extra.get("inherited_op_name", "")

    @property
    def hlo_line(self) -> int | None:
        pos = self.instruction.position
        return pos.line if pos is not None else None


# ---------------------------------------------------------------------- small helpers
def _array_leaves(shape: Shape) -> list[Shape]:
    return [s for s in shape.leaves() if s.is_array]


def _groups(inst: Instruction, num_devices: int) -> tuple[tuple[int, ...], ...]:
    """Expanded device groups; an absent or empty list means one group of every device."""
    try:
        groups = inst.replica_groups
    except Exception:  # noqa: BLE001 - undecodable groups: treat as all devices, noted by the caller
        groups = None
    if not groups:
        return (tuple(range(num_devices)),)
    return tuple(tuple(g) for g in groups)


def _permutation_cycles(pairs: Sequence[tuple[int, int]]) -> tuple[tuple[int, ...], ...]:
    """The cycles (or chains) of a source->target permutation, each listed from its smallest id."""
    nxt = dict(pairs)
    seen: set[int] = set()
    cycles = []
    for start in sorted(nxt):
        if start in seen:
            continue
        cyc = [start]
        seen.add(start)
        cur = nxt.get(start)
        while cur is not None and cur not in seen:
            cyc.append(cur)
            seen.add(cur)
            cur = nxt.get(cur)
        cycles.append(tuple(cyc))
    return tuple(cycles)


def _fused_instructions(module: HloModule, inst: Instruction, depth: int = 0) -> Iterable[tuple[Computation, Instruction]]:
    """Every instruction inside the computations a fusion calls, nested fusions included."""
    if depth > 8:
        return
    for name in inst.called_computations:
        comp = module.by_name.get(name)
        if comp is None:
            continue
        for i in comp.instructions:
            yield comp, i
            if i.opcode == "fusion":
                yield from _fused_instructions(module, i, depth + 1)


def _fused_select(module: HloModule, inst: Instruction, opcodes: tuple[str, ...],
                  depth: int = 0) -> Iterable[tuple[Computation, Instruction]]:
    """The instructions of `opcodes` inside the computations a fusion calls, nested fusions included, in the
    order `_fused_instructions` gives them; the bodies of a lazily parsed module are only `select`ed."""
    if depth > 8:
        return
    want = opcodes if "fusion" in opcodes else (*opcodes, "fusion")
    holding = module.holding(*want)  # (most bodies hold none: not asked one by one)
    for name in inst.called_computations:
        if name not in holding:
            continue
        comp = module.by_name[name]
        for i in comp.select(*want):
            if i.opcode in opcodes:
                yield comp, i
            if i.opcode == "fusion":
                yield from _fused_select(module, i, opcodes, depth + 1)


def _has_dot(module: HloModule, inst: Instruction) -> Instruction | None:
    """The dot/convolution an instruction is or holds (fusions), else None."""
    if inst.opcode in DOTS:
        return inst
    if inst.opcode == "fusion":
        for _, i in _fused_select(module, inst, _DOT_OP_LIST):
            return i
    return None


def _custom_targets(module: HloModule, inst: Instruction) -> set[str]:
    out = set()
    for _, i in _fused_select(module, inst, ("custom-call",)):
        if i.opcode == "custom-call":
            t = (i.attr("custom_call_target") or "").strip('"')
            out.add(t)
    return out


# ---------------------------------------------------------------------- data-flow questions
def _feeds_dot(g: CallGraph, comp: str, name: str, depth: int = 0) -> Instruction | None:
    """The dot (or dot-holding fusion) that consumes `name`, through data-movement ops."""
    if depth > 6:
        return None
    for u in g.users(comp, name):
        d = _has_dot(g.module, u)
        if d is not None:
            return d
        if u.opcode in PASS_THROUGH or u.opcode in _ASYNC_DONES or (u.opcode == "fusion" and is_movement_fusion(g.module, u)):
            found = _feeds_dot(g, comp, u.name, depth + 1)
            if found is not None:
                return found
    return None


def _from_dot(g: CallGraph, comp: str, inst: Instruction, depth: int = 0) -> Instruction | None:
    """The dot whose result `inst` carries (through data-movement ops and adds), else None."""
    if depth > 6:
        return None
    d = _has_dot(g.module, inst)
    if d is not None:
        return d
    if inst.opcode in PASS_THROUGH or inst.opcode in ("add", "fusion") or inst.opcode in _ASYNC_DONES:
        for op in g.operands(comp, inst):
            found = _from_dot(g, comp, op, depth + 1)
            if found is not None:
                return found
    return None




def is_movement_fusion(module: HloModule, inst: Instruction) -> bool:
    """Whether a fusion only moves data (its body holds nothing but `DATA_MOVEMENT` ops)."""
    if _written_within(module, inst, DATA_MOVEMENT):
        return True  # (what a lazily parsed module's bodies write as opcodes says so without a parse)
    ops = {i.opcode for _, i in _fused_instructions(module, inst)}
    return bool(ops) and ops <= DATA_MOVEMENT


def _written_within(module: HloModule, inst: Instruction, allowed: frozenset[str] | set[str],
                    depth: int = 0) -> bool:
    """Whether every computation `inst` calls (nested fusions too) has instructions (one at least) with no opcode
    outside `allowed` (`Computation.written`: a lazily parsed module's body reads them from its lines, no
    parse)."""
    names = inst.called_computations
    if not names or depth > 8:
        return False
    for name in names:
        comp = module.by_name.get(name)
        written = comp.written if comp is not None else None
        if not written or not written <= allowed:
            return False
        if "fusion" in written and not all(_written_within(module, i, allowed, depth + 1)
                                           for i in comp.select("fusion")):
            return False
    return True


def _depends_on_partition_id(g: CallGraph, comp: str, inst: Instruction, seen: set[tuple[str, str]] | None = None) -> bool:
    """Whether a value is computed from `partition-id` / `replica-id`, following loop state into callers."""
    seen = set() if seen is None else seen
    stack = [(comp, inst)]
    while stack:
        c, i = stack.pop()
        if (c, i.name) in seen or len(seen) > 400:
            continue
        seen.add((c, i.name))
        if i.opcode in ("partition-id", "replica-id"):
            return True
        if i.opcode == "parameter":
            # Follow into the callers: a while body's state, a fusion's / call's operand.
            for site in g.call_sites(c):
                caller = g.module.by_name[site.caller]
                call = caller.by_name.get(site.instruction)
                if call is None:
                    continue
                n = i.parameter_number or 0
                if site.role in ("body", "condition") and call.operands:
                    stack.append((site.caller, caller.by_name[call.operands[0].name]))
                elif n < len(call.operands):
                    stack.append((site.caller, caller.by_name[call.operands[n].name]))
            continue
        if i.opcode == "fusion":
            for _ in _fused_select(g.module, i, ("partition-id", "replica-id")):
                return True
        for op in g.operands(c, i):
            stack.append((c, op))
    return False


def _literal_values(inst: Instruction) -> list[int] | None:
    """The integers of a constant literal (`5`, `{0, 64, 0, 64}`), or None."""
    if inst.literal is None:
        return None
    text = inst.literal.replace("{", " ").replace("}", " ").replace(",", " ")
    try:
        return [int(float(v)) for v in text.split()]
    except ValueError:
        return None


_ARITH = {
    "add": lambda a, b: a + b, "subtract": lambda a, b: a - b, "multiply": lambda a, b: a * b,
    "divide": lambda a, b: int(a / b) if b else None, "remainder": lambda a, b: a - b * int(a / b) if b else None,
    "maximum": max, "minimum": min,
}


def _eval_index(g: CallGraph, comp: str, inst: Instruction | None, pid: int, depth: int = 0) -> int | None:
    """The value of a scalar index expression on partition `pid`: constants, `partition-id`, lookups of
    constant tables by it (`dynamic-slice`), reshapes, converts and integer arithmetic. None otherwise."""
    if inst is None or depth > 24:
        return None
    op = inst.opcode
    if op in ("partition-id", "replica-id"):
        return pid
    if op == "constant":
        vals = _literal_values(inst)
        return vals[0] if vals and len(vals) == 1 else None
    ops = [g.producer(comp, o.name) for o in inst.operands]
    if op in ("reshape", "convert", "bitcast", "copy", "bitcast-convert") and ops:
        return _eval_index(g, comp, ops[0], pid, depth + 1)
    if op == "dynamic-slice" and len(ops) == 2 and ops[0] is not None and ops[0].opcode == "constant":
        table = _literal_values(ops[0])
        k = _eval_index(g, comp, ops[1], pid, depth + 1)
        if table is None or k is None:
            return None
        return table[max(0, min(k, len(table) - 1))]
    if op in _ARITH and len(ops) == 2:
        a = _eval_index(g, comp, ops[0], pid, depth + 1)
        b = _eval_index(g, comp, ops[1], pid, depth + 1)
        return _ARITH[op](a, b) if a is not None and b is not None else None
    return None


def _slices_match_groups(g: CallGraph, comp: str, users: list[Instruction], groups: Sequence[Sequence[int]],
                         dims: Sequence[int]) -> bool:
    """False when the slices' offsets can be computed and some group's devices do not take distinct shards
    (then the slice picks by another mesh axis than the all-reduce's: no reduce-scatter). True otherwise."""
    for u in users:
        if u.opcode != "dynamic-slice":
            continue
        offsets = [g.producer(comp, o.name) for o in u.operands[1:]]
        for grp in groups:
            seen = set()
            for pid in grp:
                key = tuple(_eval_index(g, comp, offsets[d], pid) if d < len(offsets) else 0 for d in dims)
                if any(k is None for k in key):
                    return True  # cannot tell: keep the structural answer
                seen.add(key)
            if len(seen) != len(grp):
                return False
    return True


def _sliced_by_partition(g: CallGraph, comp: str, value: Instruction) -> tuple[list[Instruction], Shape] | None:
    """If every user of `value` is a dynamic-slice (or a fusion around one) whose offsets come from the
    partition id, return those users and the slice shape; else None."""
    users = g.users(comp, value.name)
    if not users:
        return None
    out_shape = None
    for u in users:
        if u.opcode == "dynamic-slice" and u.operands and u.operands[0].name == value.name:
            offsets = [g.producer(comp, o.name) for o in u.operands[1:]]
            shape = u.shape
        elif u.opcode == "fusion":
            shape = _fused_slice_shape(g.module, u, [k for k, o in enumerate(u.operands) if o.name == value.name])
            if shape is None:
                return None
            offsets = [g.producer(comp, o.name) for o in u.operands if o.name != value.name]
        else:
            return None
        if not any(o is not None and _depends_on_partition_id(g, comp, o) for o in offsets):
            return None
        if out_shape is not None and tuple(shape.dims) != tuple(out_shape.dims):
            return None
        out_shape = shape
    assert out_shape is not None
    return users, out_shape


def _fused_slice_shape(module: HloModule, fusion: Instruction, params: list[int]) -> Shape | None:
    """Inside a fusion, the shape of the dynamic-slice that reads fusion operand(s) `params` (through
    bitcasts and copies) when every use of them is such a slice; else None."""
    names = fusion.called_computations
    comp = module.by_name.get(names[0]) if names else None
    if comp is None or not params or comp.name not in module.holding("dynamic-slice"):
        return None  # (without a dynamic-slice the walk below finds no shape: an unparsed body stays text)
    users: dict[str, list[Instruction]] = {}
    for i in comp.instructions:
        for o in i.operand_names:
            users.setdefault(o, []).append(i)
    frontier = [i for i in comp.instructions if i.opcode == "parameter" and i.parameter_number in params]
    shape = None
    seen = 0
    while frontier and seen < 32:
        seen += 1
        node = frontier.pop()
        for u in users.get(node.name, []):
            if u.opcode in ("bitcast", "copy", "convert"):
                frontier.append(u)
            elif u.opcode == "dynamic-slice" and u.operand_names[0] == node.name:
                if shape is not None and tuple(shape.dims) != tuple(u.shape.dims):
                    return None
                shape = u.shape
            else:
                return None
    return shape


def _scatter_dims(full: Shape, shard: Shape, group: int) -> tuple[int, ...] | None:
    """Dims that shrink from `full` to `shard`, when their shrink factors multiply to `group`."""
    if full.rank != shard.rank or group < 2:
        return None
    dims, factor = [], 1
    for d, (a, b) in enumerate(zip(full.dims, shard.dims)):
        if a != b:
            if b == 0 or a % b:
                return None
            dims.append(d)
            factor *= a // b
    return tuple(dims) if dims and factor == group else None


# ---------------------------------------------------------------------- extraction
@dataclass
class _Builder:
    g: CallGraph
    num_devices: int
    rows: list[Collective] = field(default_factory=list)
    async_fusion_channels: dict[tuple[str, int | None], int] = field(default_factory=dict)

    @property
    def module(self) -> HloModule:
        return self.g.module

    def add_op(self, comp: str, op: Instruction, *, result_holder: Instruction, names: tuple[str, ...],
               sync: bool, count: float, branch: BranchKey, overlapped: bool = False,
               fusion_output: Shape | None = None, inner: str | None = None) -> None:
        """Rows for one collective op `op` (possibly inside a fusion); `result_holder` is the instruction of
        `comp` whose value is the collective's result (the op itself, the start, or the fusion)."""
        kind = op.opcode.removesuffix("-start")
        groups = _groups(op, self.num_devices)
        pairs = None
        if kind == "collective-permute":
            try:
                pairs = tuple(tuple(p) for p in (op.source_target_pairs or ()))  # type: ignore[misc]
            except Exception:  # noqa: BLE001
                pairs = ()
            groups = _permutation_cycles(pairs)  # type: ignore[arg-type]
        operand_shapes = [o.shape for o in op.operands if o.shape is not None]
        result_leaves = self._result_leaves(op, kind)
        if kind == "ragged-all-to-all":
            # operands: input, output buffer, then offsets and sizes: only the input is the data sent
            operand_shapes, result_leaves = operand_shapes[:1], [op.shape] if op.shape.is_array else result_leaves[:1]
        elif kind == "all-to-all" and len(operand_shapes) > 1 and op.dimensions is None:
            # tuple form: operand i goes to the i-th device of the group; the device's buffer is all of them
            first = operand_shapes[0]
            whole = replace(first, dims=(first.dims[0] * len(operand_shapes), *first.dims[1:]) if first.dims
                            else (len(operand_shapes),), dynamic=(), layout=None)
            operand_shapes, result_leaves = [whole], [whole]
        n_ops = max(1, len(operand_shapes))
        dims = op.dimensions
        for k in range(n_ops):
            operand = operand_shapes[k] if k < len(operand_shapes) else result_leaves[k]
            result = result_leaves[k] if k < len(result_leaves) else operand
            index = k if n_ops > 1 else None
            row = Collective(
                kind=kind, computation=comp, instruction=op, instructions=names, sync=sync,
                operand_shape=operand, result_shape=result, groups=groups, count=count, operand_index=index,
                dimension=dims[0] if dims else None, pairs=pairs, branch=branch, overlapped=overlapped,
                site=result_holder if result_holder is not op else None,
            )
            if inner is not None and kind == "all-reduce":
                # TPU all-reduce-scatter fusions: the slice by partition id is inside the fusion.
                fused = self._maybe_reduce_scatter(inner, op, row, index)
                if fused.kind == "reduce-scatter":
                    row = replace(fused, instructions=row.instructions,
                                  original_ops=f"all-reduce-scatter fusion ({fused.original_ops})")
                    self.rows.append(self._with_dot(comp, result_holder, row, index))
                    continue
            if fusion_output is not None and kind == "all-reduce":
                scat = _scatter_dims(operand, fusion_output, row.group_size)
                if scat is not None:
                    row = replace(row, kind="reduce-scatter", result_shape=fusion_output, scatter_dims=scat,
                                  dimension=scat[0], original_ops="all-reduce-scatter fusion")
            elif kind == "all-reduce":
                row = self._maybe_reduce_scatter(comp, result_holder, row, index)
            self.rows.append(self._with_dot(comp, result_holder, row, index))

    def _result_leaves(self, op: Instruction, kind: str) -> list[Shape]:
        shape = op.shape
        if op.opcode.endswith("-start") and shape.is_tuple:
            # all-gather-start: ((operands), (results)); collective-permute-start: (in, out, ctx...)
            parts = shape.tuple_shapes
            if kind == "collective-permute":
                return [parts[1]] if len(parts) > 1 else [parts[0]]
            if len(parts) >= 2 and parts[1].is_tuple:
                return _array_leaves(parts[1])
            if len(parts) >= 2:
                return [parts[1]]
            return _array_leaves(shape)
        return _array_leaves(shape)

    def _maybe_reduce_scatter(self, comp: str, holder: Instruction, row: Collective, index: int | None) -> Collective:
        value: Instruction | None = holder
        if index is not None:
            value = next(iter(self.g.elements(comp, holder.name, index)), None)
        if value is not None and value.opcode.endswith("-start"):
            value = next((u for u in self.g.users(comp, value.name) if u.opcode in _ASYNC_DONES), None)
        if value is None:
            return row
        sliced = _sliced_by_partition(self.g, comp, value)
        if sliced is None:
            return row
        users, shard = sliced
        scat = _scatter_dims(row.operand_shape, shard, row.group_size)
        if scat is None or not _slices_match_groups(self.g, comp, users, row.groups, scat):
            return replace(row, only_used_sharded=True)
        return replace(row, kind="reduce-scatter", result_shape=shard, scatter_dims=scat, dimension=scat[0],
                       only_used_sharded=True, instructions=row.instructions + tuple(u.name for u in users),
                       original_ops="all-reduce + dynamic-slice")

    def _with_dot(self, comp: str, holder: Instruction, row: Collective, index: int | None) -> Collective:
        if row.kind in ("all-gather", "all-to-all", "collective-permute"):
            d = _feeds_dot(self.g, comp, holder.name)
            if d is not None:
                return replace(row, dot=d, dot_relation="feeds")
        ops = self.g.operands(comp, holder)
        src = ops[index] if index is not None and index < len(ops) else (ops[0] if ops else None)
        if src is not None:
            d = _from_dot(self.g, comp, src)
            if d is not None:
                return replace(row, dot=d, dot_relation="from")
        d = _feeds_dot(self.g, comp, holder.name)
        if d is not None:
            return replace(row, dot=d, dot_relation="feeds")
        return row

    # -------------------------------------------------------------- one computation
    def scan(self, comp_name: str) -> None:
        comp = self.module.by_name[comp_name]
        for key, count in self.g.branch_counts(comp_name).items():
            self._scan(comp, count, key)

    def _scan(self, comp: Computation, count: float, branch: BranchKey) -> None:
        for inst in comp.instructions:
            op = inst.opcode
            if op in COLLECTIVES:
                self.add_op(comp.name, inst, result_holder=inst, names=(inst.name,), sync=True, count=count,
                            branch=branch)
            elif op in _ASYNC_STARTS:
                done = [u.name for u in self.g.users(comp.name, inst.name) if u.opcode in _ASYNC_DONES]
                self.add_op(comp.name, inst, result_holder=inst, names=(inst.name, *done), sync=False, count=count,
                            branch=branch)
            elif op == "async-start":
                for _, inner in _fused_select(self.module, inst, _COLLECTIVE_LIST):
                    if inner.opcode in COLLECTIVES:
                        done = [u.name for u in self.g.users(comp.name, inst.name) if u.opcode in _ASYNC_DONES]
                        self.add_op(comp.name, inner, result_holder=inst, names=(inst.name, *done), sync=False,
                                    count=count, branch=branch)
                        break
            elif op == "fusion":
                self._fusion(comp, inst, count, branch)

    @cached_property
    def _fused_holders(self) -> frozenset[str]:
        """The computations a fusion's collectives can be in: those with one, or with a nested fusion."""
        return self.module.holding(*_FUSED_COLLECTIVES, "fusion")

    def _fusion(self, comp: Computation, inst: Instruction, count: float, branch: BranchKey) -> None:
        holders = self._fused_holders
        if not any(name in holders for name in inst.called_computations):
            return  # (most fusions: no collective inside, and the module is asked once, not per fusion)
        found = list(_fused_select(self.module, inst, _FUSED_COLLECTIVES))
        inner = [i for _, i in found]
        inner_comp = {i.name: c.name for c, i in found}
        if not inner:
            return
        targets = _custom_targets(self.module, inst)
        called = " ".join(inst.called_computations)
        for op in inner:
            channel = op.channel_id
            key = (op.opcode, channel)
            if "AsyncCollectiveStart" in targets:
                # The start of a start/continuation/done chain: the one row; the others join it below.
                self.async_fusion_channels[key] = len(self.rows)
                self.add_op(comp.name, op, result_holder=inst, names=(inst.name,), sync=False, count=count,
                            branch=branch)
                continue
            if channel is not None and key in self.async_fusion_channels:
                i = self.async_fusion_channels[key]
                row = self.rows[i]
                continuation = "AsyncCollectiveDone" not in targets
                self.rows[i] = replace(row, instructions=row.instructions + (inst.name,),
                                       overlapped=row.overlapped or continuation)
                continue
            if channel is not None and ("AsyncCollectiveDone" in targets or "async_collective" in called):
                # A continuation or done seen before its start (the start is in a later computation):
                # remember it; the start, if found, will not be joined, so record it once here.
                self.async_fusion_channels[key] = len(self.rows)
                self.add_op(comp.name, op, result_holder=inst, names=(inst.name,), sync=False, count=count,
                            branch=branch, overlapped=True)
                continue
            self.add_op(comp.name, op, result_holder=inst, names=(inst.name,), sync=True, count=count,
                        branch=branch, fusion_output=inst.shape if inst.shape.is_array else None,
                        inner=inner_comp.get(op.name))


def _collective_matmuls(g: CallGraph, rows: list[Collective]) -> list[Collective]:
    """Merge rings of dot_general collective-permutes into the logical AllGather / ReduceScatter."""
    candidates = _ring_candidates(rows)
    if not candidates:
        return rows
    rings = _Rings(g, rows, candidates)
    merged: set[int] = set()
    logical: dict[int, Collective] = {}  # (each ring's row takes the place of its first permute's)
    for members in rings.groups():
        members.sort()
        logical[members[0]] = _ring_collective(rows, members, any(m in rings.accumulates for m in members))
        merged.update(members)
    return [logical.get(i, r) for i, r in enumerate(rows) if i in logical or i not in merged]


def _ring_candidates(rows: list[Collective]) -> list[int]:
    """The rows that may be a step of a collective matmul: single collective-permutes around a ring, of a dot."""
    from analyzer.analysis.mapping import op_label

    return [i for i, r in enumerate(rows) if r.kind == "collective-permute" and r.permute_steps == 0
            and op_label(r.op_name) in ("dot_general", "dot", "einsum", "conv_general_dilated")
            and _is_ring(r.pairs or ())]


class _Rings:
    """The candidate permutes (`_ring_candidates`) grouped into rings: union-find over permutes linked by data flow
    (one's result reaches another's operand) or a shared source; and those whose travelling buffer is accumulated
    into (a dot's partial result, zeros, a compute fusion in the chain), which make a ReduceScatter."""

    def __init__(self, g: CallGraph, rows: list[Collective], candidates: list[int]) -> None:
        self.g, self.rows, self.candidates = g, rows, candidates
        self.parent = {i: i for i in candidates}
        self.by_holder = {(rows[i].computation, name): i for i in candidates for name in rows[i].instructions}
        self.sources: dict[tuple[str, str], int] = {}
        self.accumulates: set[int] = set()
        for i in candidates:
            self._walk(i)

    def find(self, i: int) -> int:
        parent = self.parent
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def _join(self, i: int, j: int) -> None:
        self.parent[self.find(i)] = self.find(j)

    def groups(self) -> list[list[int]]:
        out: dict[int, list[int]] = {}
        for i in self.candidates:
            out.setdefault(self.find(i), []).append(i)
        return list(out.values())

    def _walk(self, i: int) -> None:
        """Up from permute `i`'s operand through what passes its buffer on, to another permute, a dot or a source."""
        r = self.rows[i]
        start = self.g.producer(r.computation, r.instructions[0])
        if start is None or not start.operands:
            return
        stack = [self.g.producer(r.computation, start.operands[0].name)]
        depth = 0
        while stack and depth < 64:
            depth += 1
            node = stack.pop()
            if node is not None:
                stack.extend(self._visit(i, r.computation, node))

    def _visit(self, i: int, comp: str, node: Instruction) -> list[Instruction | None]:
        """What `_walk` learns at `node` (links, accumulation) and the operands it goes on to."""
        g, key = self.g, (comp, node.name)
        if key in self.by_holder and self.by_holder[key] != i:
            self._join(i, self.by_holder[key])
            return []
        if node.opcode in DOTS or (node.opcode == "fusion" and _has_dot(g.module, node) is not None):
            self.accumulates.add(i)
            return []
        if node.opcode == "broadcast" and all(
                (p := g.producer(comp, o.name)) is not None and p.opcode == "constant" for o in node.operands):
            self.accumulates.add(i)
        if node.opcode in PASS_THROUGH or node.opcode in _ASYNC_DONES or node.opcode in ("fusion", "add"):
            # a compute fusion in the chain: the travelling buffer is being accumulated into
            if (node.opcode == "fusion" and not is_movement_fusion(g.module, node)
                    and any((comp, o.name) in self.by_holder for o in node.operands)):
                self.accumulates.add(i)
            return [g.producer(comp, o.name) for o in node.operands]
        if key in self.sources:
            self._join(i, self.sources[key])
        else:
            self.sources[key] = i
        return []


def _ring_collective(rows: list[Collective], members: list[int], reduces: bool) -> Collective:
    """The logical AllGather (or, when the ring `reduces`, ReduceScatter) that the ring of permutes `members`
    (row indices, sorted) carries out."""
    first = rows[members[0]]
    ring = max(len(c) for c in first.groups)
    names = tuple(n for m in members for n in rows[m].instructions)
    dot = first.dot or next((rows[m].dot for m in members if rows[m].dot is not None), None)
    if reduces:
        kind, relation = "reduce-scatter", "from"
        operand = _scaled(first.operand_shape, ring)
        result = first.operand_shape
    else:
        kind, relation = "all-gather", "feeds"
        operand = first.operand_shape
        result = _scaled(first.operand_shape, ring)
    groups = tuple(tuple(sorted(c)) for c in first.groups)
    return replace(first, kind=kind, instructions=names, operand_shape=operand, result_shape=result,
                   groups=groups, dimension=None, overlapped=True, permute_steps=len(members), sync=False,
                   original_ops=f"{len(members)} collective-permutes around partial dots (collective matmul)",
                   dot=dot, dot_relation=relation if dot is not None else "")


def _scaled(shape: Shape, factor: int) -> Shape:
    """`shape` with its leading non-unit dim multiplied by `factor` (the whole array of a ring of shards)."""
    dims = list(shape.dims)
    for d, v in enumerate(dims):
        if v != 1:
            dims[d] = v * factor
            break
    else:
        if dims:
            dims[0] *= factor
    return replace(shape, dims=tuple(dims), dynamic=(False,) * len(dims), layout=None)


def _is_ring(pairs: Sequence[tuple[int, int]]) -> bool:
    """Source-target pairs that form cycles of equal length >= 2 covering every source once."""
    if not pairs:
        return False
    cycles = _permutation_cycles(pairs)
    lengths = {len(c) for c in cycles}
    srcs = [s for s, _ in pairs]
    nxt = dict(pairs)
    closed = all(nxt.get(c[-1]) == c[0] for c in cycles)
    return len(lengths) == 1 and min(lengths) >= 2 and len(set(srcs)) == len(srcs) and closed


def _reducer(g: CallGraph, inst: Instruction) -> str:
    """The opcode of a reduction's scalar computation root (`add`, `maximum`...), or "" when unknown."""
    name = inst.attr("to_apply")
    comp = g.module.by_name.get(name.lstrip("%")) if name else None
    if comp is None:
        return ""
    head = comp.line_head()  # (a lazily parsed module's reducer: from its ROOT line, no parse)
    return head.opcode if head is not None else ""


def _value_name(g: CallGraph, r: Collective) -> str | None:
    """The instruction of `r.computation` whose value is the collective's (sliced, unpacked) result."""
    if r.site is not None:
        return None
    if r.original_ops == "all-reduce + dynamic-slice":
        return r.instructions[-1] if len(r.instructions) == 2 else None
    name = r.instruction.name
    if r.instruction.opcode.endswith("-start"):
        done = [u for u in g.users(r.computation, name) if u.opcode in _ASYNC_DONES]
        if len(done) != 1:
            return None
        name = done[0].name
    if r.operand_index is not None:
        gte = g.elements(r.computation, name, r.operand_index)
        return gte[0].name if len(gte) == 1 else None
    return name


def _dedupe_identical(g: CallGraph, rows: list[Collective]) -> list[Collective]:
    """Identical collectives of the same value in the same computation are one: XLA's CSE keeps one (the
    post-partitioning HLO still shows both)."""
    seen: dict[tuple, int] = {}
    out: list[Collective] = []
    for r in rows:
        if r.site is not None or r.permute_steps:
            out.append(r)
            continue
        key = (r.computation, r.branch, r.instruction.opcode, r.kind, r.instruction.operand_names, r.operand_index,
               r.groups, r.dimension, r.pairs, str(r.result_shape), r.original_ops)
        if key in seen:
            i = seen[key]
            first = out[i]
            note = "identical collectives of one value (XLA's CSE keeps one)"
            out[i] = replace(first, instructions=first.instructions + r.instructions,
                             original_ops=f"{first.original_ops}; {note}" if first.original_ops else note)
            continue
        seen[key] = len(out)
        out.append(r)
    return out


def _reassociate(g: CallGraph, rows: list[Collective]) -> list[Collective]:
    """`add(AllReduce(a), AllReduce(b))` is one AllReduce of `a + b` (XLA's all-reduce-reassociate and
    reduce-scatter-reassociate passes, which TPU and GPU compilers run after partitioning): merge rows
    whose results meet only in a tree of adds."""
    values: dict[tuple[str, str], int] = {}
    for i, r in enumerate(rows):
        if r.kind not in ("all-reduce", "reduce-scatter") or r.permute_steps:
            continue
        v = _value_name(g, r)
        if v is None or _reducer(g, r.instruction) != "add":  # add(max(a), max(b)) is no max of a sum
            continue
        users = g.users(r.computation, v)
        if len(users) == 1 and users[0].opcode == "add":
            values[(r.computation, v)] = i
    if len(values) < 2:
        return rows
    comps = {c for c, _ in values}
    groups: list[list[int]] = []
    for comp in comps:
        computation = g.module.by_name[comp]
        memo: dict[str, list[int] | None] = {}

        def reducible(inst: Instruction, comp: str = comp, memo: dict = memo) -> list[int] | None:
            if inst.name in memo:
                return memo[inst.name]
            memo[inst.name] = None
            members: list[int] = []
            for op in inst.operand_names:
                if (comp, op) in values:
                    members.append(values[(comp, op)])
                    continue
                child = g.producer(comp, op)
                if child is None or child.opcode != "add" or len(g.users(comp, child.name)) != 1:
                    return None
                sub = reducible(child, comp, memo)
                if sub is None:
                    return None
                members.extend(sub)
            key = {(rows[m].kind, rows[m].groups, str(rows[m].result_shape), rows[m].branch) for m in members}
            memo[inst.name] = members if len(key) == 1 else None
            return memo[inst.name]

        found = [set(m) for inst in computation.instructions if inst.opcode == "add"
                 and (m := reducible(inst)) is not None and len(m) >= 2]
        for s in found:
            if not any(s < t for t in found) and sorted(s) not in groups:
                groups.append(sorted(s))
    if not groups:
        return rows
    drop: set[int] = set()
    merged: dict[int, Collective] = {}
    for members in groups:
        first = rows[members[0]]
        names = tuple(n for m in members for n in rows[m].instructions)
        title = "all-reduce" if first.kind == "all-reduce" else "reduce-scatter"
        note = (f"{len(members)} {title}s whose results are summed: one {title} of the sum, as XLA's "
                f"{title}-reassociate pass makes it")
        merged[members[0]] = replace(first, instructions=names,
                                     original_ops=f"{first.original_ops}; {note}" if first.original_ops else note)
        drop.update(members[1:])
    return [merged.get(i, r) for i, r in enumerate(rows) if i not in drop]


def _combined_groups(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], ...]:
    """Groups of an all-reduce over `a`'s groups followed by one over `b`'s: the connected components."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for grp in list(a) + list(b):
        for d in grp[1:]:
            parent[find(d)] = find(grp[0])
        if grp:
            find(grp[0])
    comps: dict[int, list[int]] = {}
    for d in parent:
        comps.setdefault(find(d), []).append(d)
    return tuple(sorted(tuple(sorted(c)) for c in comps.values()))


def _fold_nested(g: CallGraph, rows: list[Collective]) -> list[Collective]:
    """`AllReduce_Y(AllReduce_X(x))` is one AllReduce over X and Y (XLA's all-reduce-folder pass)."""
    by_name = {(r.computation, r.instruction.name): i for i, r in enumerate(rows)
               if r.kind == "all-reduce" and r.site is None and r.sync and r.operand_index is None}
    drop: set[int] = set()
    out = list(rows)
    for i, r in enumerate(rows):
        if i in drop or (r.computation, r.instruction.name) not in by_name:
            continue
        users = g.users(r.computation, r.instruction.name)
        if len(users) != 1 or (r.computation, users[0].name) not in by_name:
            continue
        j = by_name[(r.computation, users[0].name)]
        outer = rows[j]
        if str(outer.operand_shape) != str(r.operand_shape) or j in drop:
            continue
        if _reducer(g, r.instruction) != _reducer(g, outer.instruction) or not _reducer(g, r.instruction):
            continue
        groups = _combined_groups(r.groups, outer.groups)
        note = "an all-reduce of an all-reduce: one all-reduce over both (XLA's all-reduce-folder pass)"
        out[i] = replace(r, groups=groups, instructions=r.instructions + outer.instructions,
                         original_ops=f"{r.original_ops}; {note}" if r.original_ops else note)
        drop.add(j)
    return [r for i, r in enumerate(out) if i not in drop]


def extract_collectives(module: HloModule, graph: CallGraph | None = None,
                        num_devices: int | None = None) -> list[Collective]:
    """Every logical collective of `module`, in the order the computations run (callers first).

    Args:
      module: a parsed module.
      graph: its `CallGraph` (built when None).
      num_devices: devices the module runs on (default: `analyzer.analysis.devices.device_count`).
    Returns:
      `Collective` records, not yet mapped to mesh axes or priced.
    """
    g = graph or CallGraph.build(module)
    if num_devices is None:
        num_devices = device_count(module).devices
    b = _Builder(g, max(1, num_devices))
    inside: set[str] = set()
    for comp in module.computations:
        for inst in g.calling[comp.name]:  # (an instruction that calls nothing adds nothing)
            if inst.opcode in ("fusion", "async-start", "async-update", "async-done"):
                inside.update(inst.called_computations)
    for name in g.executed():
        if name in inside:
            continue
        b.scan(name)
    rows = _dedupe_identical(g, b.rows)
    rows = _reassociate(g, rows)
    rows = _fold_nested(g, rows)
    return _collective_matmuls(g, rows)
