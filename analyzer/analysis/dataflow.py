"""Data-flow questions about the HLO IR: who uses a value, which dot it feeds or reduces, whether only a
slice of it is ever read, whether it depends on the partition id, whether it is a program argument.
Pure functions over `analyzer.hlo.ir` objects; the rules ask these questions here and never walk the HLO
themselves (FLOPs and dimension numbers of dots: `analyzer.analysis.dots`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from analyzer.analysis.dots import batch_dims, contracting_dims
from analyzer.hlo.ir import Computation, HloModule, Instruction
from analyzer.hlo.opcodes import (ASYNC_COPIES, COLLECTIVE_KINDS, DEVICE_VARYING, DOTS, ELEMENTWISE, MOVING_COLLECTIVES,
                                  RELABEL)

if TYPE_CHECKING:
    from analyzer.analysis.graph import CallGraph
    from analyzer.hlo.sharding import HloSharding

__all__ = [
    "DotUse",
    "users_map",
    "dot_uses",
    "dot_producer",
    "upstream_dot",
    "replicated_parameters",
    "partition_dependent",
    "only_used_sliced",
    "contracting_dims",
        "is_program_argument",
    "free_size",
    "cause_metadata",
    "consuming_dot",
    "MOVING_PRIMITIVES",
]



@dataclass(frozen=True)
class DotUse:
    """A dot that reads a value (through transparent ops).

    Attributes:
      dot: the dot instruction.
      operand: 0 for lhs, 1 for rhs.
      dim: the value's dimension as the dot sees it (after transposes), or None when a reshape hid it.
      contracting: whether `dim` is one of the dot's contracting dims for that operand (None: unknown).
    """

    dot: Instruction
    operand: int
    dim: int | None
    contracting: bool | None


def users_map(comp: Computation) -> Mapping[str, tuple[tuple[Instruction, int], ...]]:
    """For each instruction name, its users in `comp` with the operand index they read it at."""
    out: dict[str, list[tuple[Instruction, int]]] = {}
    for inst in comp.instructions:
        for k, name in enumerate(inst.operand_names):
            out.setdefault(name, []).append((inst, k))
    return {k: tuple(v) for k, v in out.items()}


def nearest(comp: Computation, start: Instruction, forward: bool, found: Callable[[Instruction], bool],
            passes: Callable[[Instruction], bool], limit: int = 64) -> Instruction | None:
    """The nearest instruction from `start` along the data flow (forward: through its users; backward: through its
    operands) for which `found` holds, breadth first, going on only through instructions `passes` lets through
    and looking at no more than `limit` instructions; None when there is none.

    Example:
        >>> nearest(body, dot, True, is_constraint, lambda i: i.opcode in ("copy", "add"))  # doctest: +SKIP
    """
    users = users_map(comp) if forward else {}
    seen = {start.name}
    frontier = [start]
    while frontier and len(seen) < limit:
        step = []
        for inst in frontier:
            near = ([u for u, _ in users.get(inst.name, ())] if forward else
                    [comp.by_name[n] for n in inst.operand_names if n in comp.by_name])
            for other in near:
                if other.name in seen:
                    continue
                seen.add(other.name)
                if found(other):
                    return other
                if passes(other):
                    step.append(other)
        frontier = step
    return None


# jax primitives (the last part of an op_name) that only move or relabel the data of one value: an all-gather whose
# metadata names one of them was inserted to gather that value, not asked for by it.
MOVING_PRIMITIVES = frozenset({"squeeze", "reshape", "broadcast_in_dim", "dynamic_slice", "slice", "transpose",
                               "convert_element_type", "copy"})


def cause_metadata(comp: Computation, inst: Instruction, dot: Instruction | None = None, md: Any = None) -> Any:
    """The metadata that names the user's line that made `inst`: its own (or `md`, what stands for it: an async
    collective's site), except for an all-gather that only carries the metadata of the value it gathers, which
    takes that of the dot it gathers for (`dot`, else `consuming_dot`: the nearest that reads it through ops that
    move data; its own when there is none).

    From jax 0.11 on, the partitioner gives an all-gather it inserts (marked `frontend_attributes=
    {is_spmd_generated="true"}`) the metadata of its operand (a scanned weight's `dynamic_index_in_dim` squeeze,
    whose user line is the `lax.scan`; an activation's norm or sharding constraint; a gradient's add_any), where
    jax 0.10's gave that of the dot that needed it; the TPU compiler keeps the operand's metadata and not always
    the mark, so an op_name that names a data-moving primitive counts too."""
    md = inst.metadata if md is None else md
    if inst.opcode not in ("all-gather", "all-gather-start"):
        return md
    if md is not None and md.op_name:  # (none at all: jax 0.12 prints some inserted gathers without metadata)
        marked = 'is_spmd_generated="true"' in (inst.attr("frontend_attributes") or "")
        if not (marked or md.op_name.rsplit("/", 1)[-1] in MOVING_PRIMITIVES):
            return md
    if dot is None:
        users = users_map(comp)
        dot = consuming_dot(lambda name: (user for user, _ in users.get(name, ())), inst.name)
    return dot.metadata if dot is not None and dot.metadata is not None and dot.metadata.op_name else md


# What a value passes through on its way to the dot that consumes it: ops that relabel it (the same data in another
# shape or type), slice it, or gather it again (a weight gathered over the data axis, then over the model axis).
_TOWARDS_A_DOT = RELABEL | {"all-gather", "dynamic-slice", "slice"}


def consuming_dot(users: Callable[[str], Iterable[Instruction]], name: str) -> Instruction | None:
    """The dot that consumes the value `name`: the nearest (breadth first, each value's users in program order)
    dot or convolution that reads it through ops that relabel, slice or gather it again; None when none does.
    `users(name)`: the instructions of its computation that read `name` (`CallGraph.users`, `users_map`).
    The dot an all-gather gathers for: its line (`cause_metadata`), its einsum's letters (`analyzer.analysis.origins`)."""
    todo, seen = deque([name]), {name}
    while todo:
        for user in users(todo.popleft()):
            if user.name in seen:
                continue
            seen.add(user.name)
            if user.opcode in DOTS:
                return user
            if user.opcode in _TOWARDS_A_DOT:
                todo.append(user.name)
    return None


def _follow_dim(inst: Instruction, dim: int | None) -> int | None:
    """Where dimension `dim` of inst's operand 0 lands in inst's output, for transparent ops."""
    if dim is None:
        return None
    if inst.opcode != "reshape" and inst.opcode != "bitcast" and inst.shape.is_array and dim >= inst.shape.rank:
        return None
    if inst.opcode == "transpose":
        perm = inst.dimensions or ()
        return perm.index(dim) if dim in perm else None
    if inst.opcode in ("copy", "convert", "bitcast-convert", "optimization-barrier"):
        return dim
    if inst.opcode in ("reshape", "bitcast"):
        src = inst.operands[0].shape if inst.operands else None
        dst = inst.shape
        if src is None or not dst.is_array or not src.is_array or dim >= len(src.dims):
            return None
        # Unchanged leading dims keep their index when the sizes before them match.
        before = 1
        for d in range(dim):
            before *= src.dims[d]
        acc = 1
        for j, size in enumerate(dst.dims):
            if acc == before and size == src.dims[dim]:
                return j
            acc *= size
        return None
    return None


_COLLECTIVE_OPS = COLLECTIVE_KINDS  # (a prefix of every collective opcode: `all-gather-start` starts with one too)
_DOTS_OR_FUSION = tuple(sorted(DOTS | {"fusion"}))


def _is_async_wrapper(user: Instruction, module: HloModule | None) -> bool:
    """`-done` ops and fusions/async wrappers that hold a collective: the value passes through them."""
    if user.opcode.endswith("-done") or user.opcode in ("get-tuple-element", "copy-start", "copy-done"):
        return True
    if module is None or user.opcode not in ("fusion", "async-start", "async-update", "async-done"):
        return False
    for name in user.called_computations:
        called = module.by_name.get(name)  # (`written`: a lazily parsed module's body from its lines, no parse)
        if called is not None and any(op.startswith(_COLLECTIVE_OPS) for op in called.written):
            return True
    return False


def dot_uses(comp: Computation, inst: Instruction | str, dim: int | None = None,
             users: Mapping[str, tuple[tuple[Instruction, int], ...]] | None = None,
             module: HloModule | None = None, depth: int = 0) -> tuple[DotUse, ...]:
    """The dots that read `inst`'s value through transparent ops, and whether `dim` is contracted.

    With `module`, dots inside fusions count (the TPU compiler fuses them), and async `-done` ops and
    collective wrapper fusions are followed.

    Args:
      comp: the computation holding `inst`.
      inst: the producer (e.g. an all-gather), or its name.
      dim: a dimension of `inst`'s output to track (e.g. the gathered dim), or None.
      users: `users_map(comp)`, when the caller has it.
      module: the module, to look inside fusions.
    """
    # (`users_of`: a fusion body of a lazily parsed module reads only the lines that may name the value, no parse)
    users_of = comp.users_of if users is None else (lambda name: users.get(name, ()))
    found: list[DotUse] = []
    stack: list[tuple[str, int | None]] = [(inst if isinstance(inst, str) else inst.name, dim)]
    seen: set[str] = set()
    reaching: frozenset[str] | None = None  # (`module.holding` of a dot or a fusion: asked once, where first needed)
    while stack:
        name, d = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        for user, k in users_of(name):
            if user.opcode in DOTS and k < 2:
                contracting = None if d is None else d in contracting_dims(user, k)
                found.append(DotUse(user, k, d, contracting))
            elif user.opcode in RELABEL and k == 0:
                stack.append((user.name, _follow_dim(user, d)))
            elif user.opcode in ELEMENTWISE and user.shape.is_array and user.shape.dims == _dims_of(comp, name):
                stack.append((user.name, d))  # e.g. a norm's scale or an activation between gather and matmul
            elif _is_async_wrapper(user, module):
                stack.append((user.name, d if user.opcode != "get-tuple-element" else d))
            elif module is not None and user.opcode == "fusion" and depth < 3:
                if reaching is None:
                    reaching = module.holding(*_DOTS_OR_FUSION)
                for called_name in user.called_computations:
                    called = module.by_name.get(called_name)
                    if called is None or called_name not in reaching:
                        continue  # no dot can be reached in there (a lazy module's body stays text)
                    param = called.parameter_name(k)  # (a lazy module's body: from its index, no line read)
                    if param is not None:
                        found.extend(dot_uses(called, param, d, None, module, depth + 1))
    return tuple(found)


def upstream_dot(comp: Computation, dot: Instruction) -> Instruction | None:
    """A dot feeding `dot`'s operands through element-wise and transparent ops only (no collective between):
    the first matmul of a chain like Megatron's W_in then W_out, whose output is reduced once."""
    stack = [(comp.by_name.get(n), 0) for n in dot.operand_names]
    seen: set[str] = set()
    while stack:
        cur, depth = stack.pop()
        if cur is None or cur.name in seen or depth > 12:
            continue
        seen.add(cur.name)
        if cur.opcode in DOTS:
            return cur
        if cur.opcode in RELABEL or cur.opcode in ELEMENTWISE:
            stack.extend((comp.by_name.get(n), depth + 1) for n in cur.operand_names)
    return None


def dot_producer(comp: Computation, inst: Instruction) -> Instruction | None:
    """The dot whose (partial-sum) output `inst` reduces, looking back through transparent ops."""
    by_name = comp.by_name
    cur = inst
    for _ in range(16):
        if not cur.operands:
            return None
        prev = by_name.get(cur.operands[0].name)
        if prev is None:
            return None
        if prev.opcode in DOTS:
            return prev
        if prev.opcode not in RELABEL:
            return None
        cur = prev
    return None


def partition_dependent(comp: Computation, inst: Instruction, depth: int = 24) -> bool:
    """Whether `inst`'s value depends on the partition (or replica) id: a per-device offset."""
    by_name = comp.by_name
    stack = [(inst, 0)]
    seen: set[str] = set()
    while stack:
        cur, d = stack.pop()
        if cur.name in seen or d > depth:
            continue
        seen.add(cur.name)
        if cur.opcode in ("partition-id", "replica-id"):
            return True
        for name in cur.operand_names:
            prev = by_name.get(name)
            if prev is not None:
                stack.append((prev, d + 1))
    return False


def only_used_sliced(comp: Computation, inst: Instruction,
                     users: Mapping[str, tuple[tuple[Instruction, int], ...]] | None = None) -> bool:
    """Whether every use of `inst`'s value ends, through element-wise and transparent ops, in a
    dynamic-slice with per-device offsets (each device keeps only its own shard).

    Values that reach the computation's root or any other op are used whole, and give False.
    """
    users = users if users is not None else users_map(comp)
    stack = [inst.name]
    seen: set[str] = set()
    slices = 0
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if comp.by_name[name].is_root:
            return False
        uses = users.get(name, ())
        if not uses:
            return False
        for user, k in uses:
            if user.opcode == "dynamic-slice" and k == 0:
                offsets = [comp.by_name.get(n) for n in user.operand_names[1:]]
                if any(o is not None and partition_dependent(comp, o) for o in offsets):
                    slices += 1
                    continue
                return False
            if user.opcode in RELABEL:
                stack.append(user.name)
                continue
            if user.opcode in ELEMENTWISE and user.shape.is_array and user.shape.dims == _array_dims(comp, name):
                stack.append(user.name)
                continue
            if user.opcode == "broadcast" and k == 0 and not user.dimensions:
                stack.append(user.name)  # a scalar broadcast (e.g. a constant operand) stays element-wise
                continue
            return False
    return slices > 0


def _dims_of(comp: Computation, name: str) -> tuple[int, ...] | None:
    head = comp.line_head(name)  # (a lazily parsed module's body: from the defining line, no parse)
    return head.shape.dims if head is not None and head.shape.is_array else None


def _array_dims(comp: Computation, name: str) -> tuple[int, ...]:
    shape = comp.by_name[name].shape
    return shape.dims if shape.is_array else ()


def tile_coords(sharding: HloSharding | None, device: int) -> tuple[int, ...] | None:
    """The data-tile coordinates device `device` holds under an HLO sharding (None: unknown/maximal).

    Replicated shardings give `()` for every device.
    """
    kind = sharding.kind if sharding is not None else None
    if kind == "replicated":
        return ()
    if sharding is None or kind != "tiled":
        return None
    ids = sharding.device_ids
    dims = sharding.tile_dims
    k = len(sharding.data_tile_dims)
    try:
        flat = ids.index(device)
    except ValueError:
        return None
    coords = []
    for size in reversed(dims):
        coords.append(flat % size)
        flat //= size
    coords.reverse()
    return tuple(coords[:k])


def _same_within(values: list[object]) -> bool:
    return all(v is not None and v == values[0] for v in values)


_MAX_DEPTH = 6


def callers(module: HloModule, graph: CallGraph | None = None) -> Mapping[str, tuple[tuple[Computation, Instruction], ...]]:
    """Computation name -> the (computation, instruction) pairs that call it (while, call, fusion...).

    Read from `graph`'s calling instructions when given, else from each computation (of a lazily parsed module,
    an unparsed computation reads only its call lines: `Computation.call_instructions`)."""
    out: dict[str, list[tuple[Computation, Instruction]]] = {}
    for comp in module.computations:
        if graph is not None:
            insts = graph.calling[comp.name]
        else:
            insts = comp.call_instructions()
        for inst in insts:
            for name in inst.called_computations:
                out.setdefault(name, []).append((comp, inst))
    return {k: tuple(v) for k, v in out.items()}


def _varies_inside(module: HloModule, comp_name: str, depth: int = 0) -> bool:
    """Whether a called computation reads the partition id, draws random numbers or communicates."""
    comp = module.by_name.get(comp_name)
    if comp is None or depth > _MAX_DEPTH:
        return True
    for i in comp.instructions:
        if i.opcode in DEVICE_VARYING or i.opcode.startswith(
                ("all-", "reduce-scatter", "collective-", "ragged-all-to-all")):
            return True
        if any(_varies_inside(module, c, depth + 1) for c in i.called_computations):
            return True
    return False


@dataclass
class _Uniformity:
    """Memoised evaluation of `uniform_over` across computations (loop bodies and calls included)."""

    groups: tuple[tuple[int, ...], ...]
    module: HloModule | None
    memo: dict[tuple[str, str, bool], bool]
    calls: Mapping[str, tuple[tuple[Computation, Instruction], ...]] | None = None

    def callers_of(self, comp: Computation) -> tuple[tuple[Computation, Instruction], ...]:
        if self.module is None:
            return ()
        if self.calls is None:
            self.calls = callers(self.module)
        return self.calls.get(comp.name, ())

    def value(self, comp: Computation, inst: Instruction, depth: int = 0, init_only: bool = False) -> bool:
        """Uniformity of `inst`. `init_only`: loop-carried values count as uniform when their initial value is
        (the optimistic step of a fixpoint; the caller then checks the loop's update under that assumption)."""
        key = (comp.name, inst.name, init_only)
        if key in self.memo:
            return self.memo[key]
        # Evaluate this computation's operands bottom-up first, so the recursion below stays shallow on long
        # chains of ops (a transformer's entry computation has thousands).
        order: list[Instruction] = []
        stack: list[tuple[Instruction, bool]] = [(inst, False)]
        seen: set[str] = set()
        while stack:
            cur, done = stack.pop()
            if done:
                order.append(cur)
                continue
            if cur.name in seen or (comp.name, cur.name, init_only) in self.memo:
                continue
            seen.add(cur.name)
            stack.append((cur, True))
            for name in cur.operand_names:
                o = comp.by_name.get(name)
                if o is not None and o.name not in seen:
                    stack.append((o, False))
        for cur in order:
            k = (comp.name, cur.name, init_only)
            if k not in self.memo:
                self.memo[k] = False  # provisional: cycles (none in HLO data flow) count as not uniform
                self.memo[k] = self._compute(comp, cur, depth, init_only)
        return self.memo[key]

    def _compute(self, comp: Computation, inst: Instruction, depth: int, init_only: bool) -> bool:
        if depth > _MAX_DEPTH:
            return False
        known = self._argument(comp, inst, depth, init_only)
        if known is None:
            known = self._leaf(comp, inst)
        if known is None:
            known = self._collective(comp, inst, depth, init_only)
        if known is not None:
            return known
        if inst.called_computations:
            if self.module is None or any(_varies_inside(self.module, c) for c in inst.called_computations):
                return False
        return self._operands(comp, inst, depth, init_only)

    def _operands(self, comp: Computation, inst: Instruction, depth: int, init_only: bool) -> bool:
        """Whether every operand of `inst` is uniform."""
        for name in inst.operand_names:
            o = comp.by_name.get(name)
            if o is None or not self.value(comp, o, depth, init_only):
                return False
        return True

    def _argument(self, comp: Computation, inst: Instruction, depth: int, init_only: bool) -> bool | None:
        """A parameter (or an element of one of a called computation): an entry parameter by its `sharding=`,
        one of a called computation by its callers (`_parameter`); None for any other instruction."""
        if inst.opcode == "parameter":
            if comp.is_entry or self.module is None:
                s = inst.sharding if self.module is None else self.module.parameter_sharding(inst)
                if s is None:
                    return False
                return all(_same_within([tile_coords(s, d) for d in g]) for g in self.groups)
            return self._parameter(comp, inst, None, depth, init_only)
        if inst.opcode == "get-tuple-element" and inst.operands:
            src = comp.by_name.get(inst.operands[0].name)
            if src is not None and src.opcode == "parameter" and not comp.is_entry and self.module is not None:
                idx = inst.attr("index")
                return self._parameter(comp, src, int(idx) if idx is not None else None, depth, init_only)
        return None

    def _leaf(self, comp: Computation, inst: Instruction) -> bool | None:
        """Values not made from others: constants and iotas are uniform, ops that read the device or draw random
        numbers are not, and a small integer computed per device (`per_device_scalar`) is when it takes one value
        in each group; None for anything else."""
        if inst.opcode in ("constant", "iota"):
            return True
        if inst.shape.is_array and inst.shape.num_elements == 1 and inst.shape.element_type.startswith(("s", "u")):
            n = self.module.num_partitions if self.module is not None else 1 + max(max(g) for g in self.groups)
            vals = per_device_scalar(comp, inst, n)
            if vals is not None:
                return all(len({vals[d] for d in g if d < len(vals)}) <= 1 for g in self.groups)
        if inst.opcode in DEVICE_VARYING:
            return False
        return None

    def _collective(self, comp: Computation, inst: Instruction, depth: int, init_only: bool) -> bool | None:
        """A collective: an all-gather or all-reduce over groups that hold ours makes its result uniform; another
        over mesh-aligned groups is when its input is; a permute is not; None for anything else."""
        op = inst.opcode
        if op in ("all-gather", "all-reduce") and inst.replica_groups is not None:
            if {frozenset(g) for g in self.groups} <= {frozenset(g) for g in inst.replica_groups}:
                return True
        if op.startswith(("all-", "reduce-scatter", "ragged-all-to-all")) or op.endswith("-done"):
            # A collective over mesh-aligned groups maps replicas to replicas: if its input is the same on
            # the devices of each group here, so is its output (async -done ops pass their value through).
            return self._operands(comp, inst, depth, init_only)
        if op.startswith("collective-"):
            return False
        return None

    def _parameter(self, comp: Computation, param: Instruction, index: int | None, depth: int,
                   init_only: bool) -> bool:
        """A parameter (or one tuple element of it) of a called computation: uniform when every caller passes
        a uniform value and, for loop bodies, the loop's update keeps it uniform."""
        sites = self.callers_of(comp)
        if not sites:
            return False
        k = param.parameter_number or 0
        for caller, site in sites:
            if site.opcode == "while":  # (the condition sees the same tuple as the body)
                uniform = self._loop_state(caller, site, index, depth, init_only)
            elif site.opcode in ("call", "fusion", "async-start", "custom-call") or site.opcode.endswith("-start"):
                # (a tuple argument: uniform as a whole covers its elements)
                arg = caller.by_name.get(site.operand_names[k]) if k < len(site.operands) else None
                uniform = arg is not None and self.value(caller, arg, depth + 1, init_only)
            else:
                uniform = False  # conditional branches, reducers: not tracked
            if not uniform:
                return False
        return True

    def _loop_state(self, caller: Computation, loop: Instruction, index: int | None, depth: int,
                    init_only: bool) -> bool:
        """Whether the loop's state (element `index` of it) starts uniform and, unless `init_only`, the loop's
        update keeps it so."""
        init = caller.by_name.get(loop.operand_names[0]) if loop.operands else None
        if init is None:
            return False
        if index is None:
            if not self.value(caller, init, depth + 1):
                return False
        elif init.opcode == "tuple" and index < len(init.operands):
            elem = caller.by_name.get(init.operand_names[index])
            if elem is None or not self.value(caller, elem, depth + 1):
                return False
        else:
            return False
        return init_only or self._update_keeps(loop, index, depth)

    def _update_keeps(self, loop: Instruction, index: int | None, depth: int) -> bool:
        """Whether the loop body's update of element `index` of its state is uniform when the state it starts
        from is (the optimistic step of the fixpoint); an element carried unchanged is."""
        body = self.module.by_name.get(loop.attr("body") or "") if self.module else None
        if body is None:
            return False
        root = body.root
        if index is None or root.opcode != "tuple" or index >= len(root.operands):
            return False
        update = body.by_name.get(root.operand_names[index])
        if update is None:
            return False
        if update.opcode == "get-tuple-element" and update.attr("index") == str(index) and \
                body.by_name.get(update.operand_names[0]) is not None and \
                body.by_name[update.operand_names[0]].opcode == "parameter":
            return True  # carried unchanged
        return self.value(body, update, depth + 1, init_only=True)


_ARITH = {
    "add": lambda a, b: a + b, "subtract": lambda a, b: a - b, "multiply": lambda a, b: a * b,
    "divide": lambda a, b: int(a / b) if b else 0, "remainder": lambda a, b: a - b * int(a / b) if b else 0,
    "maximum": max, "minimum": min,
}


def per_device_scalar(comp: Computation, inst: Instruction, n: int, depth: int = 0) -> tuple[int, ...] | None:
    """The value of a small integer computation on each of `n` devices, when it is built only from the
    partition id, constant tables and arithmetic (the offsets SPMD partitioning computes); else None.

    Example: `dynamic-slice(constant({0, 0, 512, 512}), partition-id)` gives (0, 0, 512, 512).
    """
    if depth > 32 or n <= 0:
        return None
    op = inst.opcode
    if op in ("partition-id", "replica-id"):
        return tuple(range(n))
    if op == "constant":
        vals = _literal_ints(inst.literal)
        if vals is None:
            return None
        return tuple([vals[0]] * n) if len(vals) == 1 else None
    ops = [comp.by_name.get(x) for x in inst.operand_names]
    if any(o is None for o in ops):
        return None
    if op in ("reshape", "bitcast", "convert", "copy") and ops:
        return per_device_scalar(comp, ops[0], n, depth + 1)  # type: ignore[arg-type]
    if op == "dynamic-slice" and len(ops) == 2 and ops[0].opcode == "constant":  # type: ignore[union-attr]
        table = _literal_ints(ops[0].literal)  # type: ignore[union-attr]
        idx = per_device_scalar(comp, ops[1], n, depth + 1)  # type: ignore[arg-type]
        if table is None or idx is None:
            return None
        return tuple(table[min(max(i, 0), len(table) - 1)] for i in idx)
    if op in _ARITH and len(ops) == 2:
        a = per_device_scalar(comp, ops[0], n, depth + 1)  # type: ignore[arg-type]
        b = per_device_scalar(comp, ops[1], n, depth + 1)  # type: ignore[arg-type]
        if a is None or b is None:
            return None
        return tuple(_ARITH[op](x, y) for x, y in zip(a, b))
    if op == "clamp" and len(ops) == 3:
        lo, x, hi = (per_device_scalar(comp, o, n, depth + 1) for o in ops)  # type: ignore[arg-type]
        if lo is None or x is None or hi is None:
            return None
        return tuple(min(max(v, a), b) for a, v, b in zip(lo, x, hi))
    return None


def _literal_ints(text: str | None) -> list[int] | None:
    if text is None:
        return None
    body = text.strip().strip("{}").strip()
    if not body:
        return None
    try:
        return [int(float(x)) for x in body.replace("{", "").replace("}", "").split(",") if x.strip()]
    except ValueError:
        return None


def uniform_over(comp: Computation, inst: Instruction, groups: tuple[tuple[int, ...], ...],
                 entry: bool = True, module: HloModule | None = None,
                 cache: dict[Any, Any] | None = None) -> bool:
    """Whether every device of each group holds the same value of `inst` (it is replicated over them).

    Entry parameters decide by their `sharding=`; constants and iotas are uniform; partition ids are not;
    an all-gather or all-reduce over the same groups makes its result uniform; anything else is uniform
    when all its operands are. With `module`, parameters of loop bodies and called computations follow
    their callers (a loop-carried value must start uniform and stay so under the loop's update); without
    it they count as not uniform.

    Args:
      comp: the computation holding `inst`.
      inst: the value.
      groups: device-id groups (e.g. a collective's replica groups, or the devices along a mesh axis).
      entry: whether `comp` is the entry computation (kept for callers without the module).
      module: the module, to follow values into loops and calls.
      cache: a dict kept by the caller across calls on one module (e.g. `Facts.uniformity`): the
        evaluation of each value under each set of groups is then done once, not once per query.
    """
    if not groups:
        return True
    if not entry and module is None:
        if inst.opcode == "parameter":
            return False
    key = (tuple(tuple(g) for g in groups), id(module))
    u = cache.get(key) if cache is not None else None
    if u is None:
        u = _Uniformity(groups=tuple(groups), module=module, memo={})
        if cache is not None:
            cache[key] = u
    return u.value(comp, inst)


def sliced_by_partition(comp: Computation, inst: Instruction) -> Instruction | None:
    """The value `inst` was cut from by a per-device dynamic-slice (through transparent ops), or None."""
    by_name = comp.by_name
    cur = inst
    for _ in range(16):
        if cur.opcode == "dynamic-slice":
            offsets = [by_name.get(n) for n in cur.operand_names[1:]]
            if any(o is not None and partition_dependent(comp, o) for o in offsets):
                return by_name.get(cur.operand_names[0])
            return None
        if cur.opcode not in RELABEL or not cur.operands:
            return None
        nxt = by_name.get(cur.operand_names[0])
        if nxt is None:
            return None
        cur = nxt
    return None


def mesh_axis_groups(axis_sizes: tuple[int, ...], device_ids: tuple[int, ...], axis: int
                     ) -> tuple[tuple[int, ...], ...]:
    """The device-id groups along mesh axis number `axis` (all other coordinates fixed)."""
    import numpy as np

    grid = np.asarray(device_ids, dtype=np.int64).reshape(axis_sizes)
    moved = np.moveaxis(grid, axis, -1).reshape(-1, axis_sizes[axis])
    return tuple(tuple(int(d) for d in row) for row in moved)


# Ops through which a value keeps its identity as "this argument" (a slice of a stacked layer's weight,
# a gathered or moved copy of it).
_SAME_ARRAY = RELABEL | MOVING_COLLECTIVES | ASYNC_COPIES | {"dynamic-slice", "slice", "all-gather-start",
                                                             "all-gather-done"}


def is_program_argument(module: HloModule | None, comp: Computation, inst: Instruction,
                        callers_of: Mapping[str, tuple[tuple[Computation, Instruction], ...]] | None = None) -> bool:
    """Whether `inst` is (a slice, reshape or gathered copy of) an argument of the program: a weight, as
    opposed to a value computed from the inputs (activations, gradients).

    Follows transparent ops, slices and gathers back to an entry `parameter`; through a `while` loop only
    along a tuple element the body passes through unchanged (loop-invariant, e.g. the stacked weights a
    `lax.scan` over layers slices per iteration), and through `call`s to the caller's operand.

    Example:
        >>> is_program_argument(module, body, body.by_name["all-gather.3"].operands[0])  # doctest: +SKIP
        True
    """
    if module is None:
        return False
    callers_of = callers_of if callers_of is not None else callers(module)
    cur: Instruction | None = inst if isinstance(inst, Instruction) else comp.by_name.get(getattr(inst, "name", ""))
    index: int | None = None  # the tuple element being followed, after a get-tuple-element
    for _ in range(96):
        if cur is None:
            return False
        op = cur.opcode
        if op in _SAME_ARRAY and cur.operand_names:
            cur = comp.by_name.get(cur.operand_names[0])
        elif op == "get-tuple-element" and cur.operand_names and index is None:
            index = int(cur.attr("index") or 0)
            cur = comp.by_name.get(cur.operand_names[0])
        elif op == "tuple" and index is not None and index < len(cur.operand_names):
            cur, index = comp.by_name.get(cur.operand_names[index]), None
        elif op == "parameter" and comp is module.entry:
            return True  # (an element of a tuple argument is an argument too)
        elif op == "parameter":
            passed = _passed_in(callers_of, comp, cur, index)
            if passed is None:
                return False
            comp, cur = passed
        else:
            return False
    return False


def _passed_in(callers_of: Mapping[str, tuple[tuple[Computation, Instruction], ...]], comp: Computation,
               param: Instruction, index: int | None) -> tuple[Computation, Instruction | None] | None:
    """What the one caller of `comp` passes as its parameter `param` (element `index` of it, when following one):
    a `while` loop's initial state, when the body passes that element through unchanged (loop-invariant); a
    `call`'s operand. None for anything else (a carry the loop changes, several callers, other callers)."""
    sites = callers_of.get(comp.name, ())
    if len(sites) != 1:
        return None
    caller, call = sites[0]
    number = param.parameter_number or 0
    if call.opcode == "while":
        root = comp.root
        if index is None or root is None or root.opcode != "tuple" or index >= len(root.operand_names):
            return None
        back = comp.by_name.get(root.operand_names[index])
        if back is None or back.opcode != "get-tuple-element" or int(back.attr("index") or 0) != index \
                or back.operand_names[0] != param.name:
            return None  # the loop changes this element: a carry, not an argument
        init = caller.by_name.get(call.operand_names[0]) if call.operand_names else None
        return caller, init
    if call.opcode == "call" and number < len(call.operand_names):
        return caller, caller.by_name.get(call.operand_names[number])
    return None


def free_size(dot: Instruction, operand: int) -> float:
    """Product of an operand's dims that are neither contracting nor batch dims of `dot` (its rows or
    columns of the output): the rows a weight meets per element, or a weight's output features."""
    if operand >= len(dot.operands) or not dot.operands[operand].shape or not dot.operands[operand].shape.dims:
        return 0.0
    skip = set(contracting_dims(dot, operand)) | set(batch_dims(dot, operand))
    n = 1.0
    for k, d in enumerate(dot.operands[operand].shape.dims):
        if k not in skip:
            n *= d
    return n


def replicated_parameters(module: HloModule, devices: int) -> list[tuple[Instruction, float, int]]:
    """Entry parameters held whole by several devices, from their `sharding=`: (instruction, per-device
    bytes, how many devices hold each element). A replicated parameter is held by all `devices`."""
    out = []
    for inst in module.entry.instructions:
        if inst.opcode != "parameter" or not inst.shape.is_array:
            continue
        s = module.parameter_sharding(inst)
        if s is None:
            continue
        if s.kind == "replicated":
            rep = devices
        elif s.kind == "tiled":
            rep = s.replication
        else:
            continue
        if rep > 1:
            out.append((inst, float(inst.shape.byte_size), rep))
    return out
