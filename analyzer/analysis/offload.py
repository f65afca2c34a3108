"""Host offload: what a program moves between a chip's HBM and its host's memory, and how long the host link takes.

A remat policy that offloads checkpointed activations (jax's `save_and_offload_only_these_names(...,
offload_src="device", offload_dst="pinned_host")`; MaxText's `remat_policy=custom` with `NAME=offload`,
`qkv_proj_offloaded`, `minimal_offloaded`) makes the forward pass copy each named activation to host memory and
the backward pass copy it back. jax writes each copy into the program it hands XLA as an `annotate_device_placement`
custom call: `_xla_buffer_placement="pinned_host"` (to the host) or `"device"` (back to HBM). XLA's host-offloading
passes turn them into asynchronous copies to and from the host memory space, which the TPU runs on its DMA engines
over the host link (PCIe) while the core computes.

The cpu target's partitioned program has none of it (XLA:CPU drops the annotations before SPMD partitioning), so the
transfers are read here from the program before partitioning (`Lowered.global_hlo`, global shapes), when jax lowered
them there (on the cpu target jax does so only when asked: `analyzer.integrations.maxtext` does), and priced as:

  - bytes per chip: the annotated value's global bytes over the shards of its sharding (the `sharding=` of the value
    or of the sharding constraint it passes through, jax 0.11+'s named form or the device form); a value with no
    sharding in reach is taken as split over every chip (the note says how many were);
  - executions: the computation's executions per step (loop trip counts, `CallGraph.multiplicity`);
  - time: bytes / the host link's bandwidth per chip and direction (`HardwareSpec.pcie_bandwidth_per_chip`; PCIe is
    full duplex, so the copies to the host and back use their own direction);
  - overlap: the copies run beside compute (DMA engines, not the core). In a loop body (a scanned layer) an iteration
    cannot finish faster than its copies: `analyzer.analysis.step` times an iteration as max(its own time, its
    copies' time on the busier direction of the link). Copies outside any loop bound the whole step the same way.
    Not charged: the first copy of a loop that cannot start before the loop does, and the last that can end after it
    (one iteration's worth); the HBM bandwidth the DMA takes from compute (the host link is 2% of HBM's on v6e).

`host_offload(...)` returns None when the program moves nothing to or from host memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from analyzer.hlo.opcodes import RELABEL, SLICING  # (RELABEL: a value passes them unchanged in size and shards)

if TYPE_CHECKING:
    from analyzer.analysis.graph import CallGraph
    from analyzer.hlo.ir import Computation, HloModule, Instruction
    from analyzer.theory.hardware import HardwareSpec

__all__ = ["HOST_TRACK", "HostOffload", "HostTransfer", "host_offload", "host_transfers"]

HOST_TRACK = "host link (PCIe)"  # the step's track for the transfers (and `exposed_by_axis`'s key for their waits)
_ANNOTATE = "annotate_device_placement"
_HOST_PLACEMENTS = ("pinned_host", "unpinned_host")


@dataclass(frozen=True)
class HostTransfer:
    """One copy between HBM and host memory in the program before partitioning.

    Attributes:
      name, computation: the `annotate_device_placement` instruction and where it is.
      direction: "to_host" or "to_device".
      bytes: per chip, one execution (global bytes / shards).
      shards: the chips the value is split over (from its sharding; every chip when none was found).
      sharded: whether `shards` was read from a sharding (False: assumed split over every chip).
      executions: per step (loop trip counts).
      op_name: jax's op name of the copy (its place in the program: `.../jvp()/while/body/...`).
      global_bytes: the value's bytes before partitioning; key: its dtype and global dims (a value copied back
        is matched to its copy out by it, for the shards).
    """

    name: str
    computation: str
    direction: str
    bytes: float
    shards: int
    sharded: bool
    executions: float
    op_name: str = ""
    global_bytes: int = 0
    key: tuple = ()


@dataclass(frozen=True)
class HostOffload:
    """The program's host transfers, priced on one hardware spec and placed on the partitioned program's loops.

    Attributes:
      transfers: every copy (`HostTransfer`).
      bandwidth: the host link's bytes/s per chip and direction.
      per_iteration: for a loop body of the partitioned program (computation name), the seconds one iteration's
        copies take on the busier direction of the link.
      outside_seconds: copies not inside a loop matched in the partitioned program, seconds per step on the busier
        direction (they bound the whole step).
      unmatched: loops of the program before partitioning whose copies could not be placed on a loop of the
        partitioned program (their copies are in `outside_seconds`).
    """

    transfers: tuple[HostTransfer, ...]
    bandwidth: float
    per_iteration: Mapping[str, float] = field(default_factory=dict)
    outside_seconds: float = 0.0
    unmatched: tuple[str, ...] = ()

    def bytes_per_step(self, direction: str) -> float:
        """Bytes per chip per step in `direction` ("to_host" or "to_device")."""
        return sum(t.bytes * t.executions for t in self.transfers if t.direction == direction)

    @property
    def seconds(self) -> float:
        """The link's busy time per step: each direction at `bandwidth`, the busier direction (full duplex)."""
        return max(self.bytes_per_step("to_host"), self.bytes_per_step("to_device")) / self.bandwidth

    def note(self, exposed: float | None = None) -> str:
        """The report's sentence on the transfers (and on `exposed`, the step's waits for them, when given)."""
        out, back = self.bytes_per_step("to_host"), self.bytes_per_step("to_device")
        guessed = [t for t in self.transfers if not t.sharded]
        text = (f"Host offload: the program copies {out / 1e9:.3g} GB per chip per step to host memory and "
                f"{back / 1e9:.3g} GB back ({len(self.transfers)} copies in the program, e.g. a remat policy's "
                f"offloaded activations), priced on the host link at {self.bandwidth / 1e9:.3g} GB/s per chip and "
                f"direction: {self.seconds:.3g} s of transfers per step, run beside compute on the DMA engines; a "
                f"loop iteration takes at least its own copies' time")
        if exposed is not None:
            text += f" ({exposed:.3g} s of the step waits for them)"
        text += "."
        if guessed:
            text += (f" {len(guessed)} of the copied values carry no sharding the analysis could read: taken as "
                     f"split over every chip.")
        if self.unmatched:
            text += (f" Copies in {', '.join(self.unmatched)} could not be placed on a loop of the partitioned "
                     f"program and bound the whole step instead.")
        return text


# ---------------------------------------------------------------------- reading the program before partitioning
def _placement(inst: Instruction) -> str | None:
    if inst.opcode != "custom-call" or _ANNOTATE not in (inst.attr("custom_call_target") or ""):
        return None
    return inst.frontend_attributes.get("_xla_buffer_placement")


def _is_sharding_call(inst: Instruction) -> bool:
    """A sharding constraint (`custom_call_target="Sharding"`): the value passes it unchanged."""
    return (inst.opcode == "custom-call" and bool(inst.operand_names)
            and (inst.attr("custom_call_target") or "").strip('"') == "Sharding")


def _shards_of(inst: Instruction, sizes: Mapping[str, int]) -> int | None:
    """The shards of `inst`'s own `sharding=` (named or device form), or None without one."""
    raw = inst.attr("sharding")
    if not raw:
        return None
    from analyzer.hlo.sharding import named_axes, parse_hlo_sharding

    named = named_axes(raw)
    if named is not None:
        n = 1
        for axes in named:
            for a in axes:
                n *= int(sizes.get(a, 1))
        return n
    try:
        s = parse_hlo_sharding(raw)
    except Exception:  # noqa: BLE001 - a sharding this reader does not know: look further
        return None
    if s.kind == "tiled":
        n = 1
        for d in s.data_tile_dims:
            n *= d
        return n
    return 1 if s.kind in ("replicated", "maximal") else None


def _value_shards(comp: Computation, inst: Instruction, sizes: Mapping[str, int]) -> int | None:
    """The shards of the value an annotation copies: its operand's sharding, through value-preserving ops and
    sharding constraints; else a sharding constraint of the same shape that reads the operand."""
    seen = 0
    cur = comp.by_name.get(inst.operand_names[0]) if inst.operand_names else None
    first = cur
    while cur is not None and seen < 8:
        n = _shards_of(cur, sizes)
        if n is not None:
            return n
        if cur.opcode not in RELABEL and not _is_sharding_call(cur):
            break
        cur = comp.by_name.get(cur.operand_names[0]) if cur.operand_names else None
        seen += 1
    if first is not None:
        for user, _ in comp.users_of(first.name):
            if user is not inst and _is_sharding_call(user) and user.shape == first.shape:
                n = _shards_of(user, sizes)
                if n is not None:
                    return n
    return None


def _is_output(comp: Computation, inst: Instruction) -> bool:
    """A "device" placement jit writes on an output (`out_shardings`' memory kind): read only by its computation's
    root tuple, or the root itself (jax 0.12 writes them in the `main` the entry calls). A value copied back from
    the host is read by the computation that needs it."""
    todo, seen = [inst], 0
    while todo and seen < 64:  # through reshapes and sharding annotations of the output, to the root
        cur = todo.pop()
        seen += 1
        if cur.is_root:
            continue
        for u, _ in comp.users_of(cur.name):  # (a value nothing reads is dead: XLA removes it, it moves nothing)
            if u.is_root:
                continue
            if u.opcode in RELABEL or _is_sharding_call(u):
                todo.append(u)
            else:
                return False
    return not todo


def host_transfers(before: HloModule, axis_sizes: Mapping[str, int], chips: int,
                   graph: CallGraph | None = None) -> list[HostTransfer]:
    """Every copy between HBM and host memory jax wrote into the program before partitioning (global shapes).

    Args:
      before: the program jax handed XLA (`Lowered.global_hlo`, parsed).
      axis_sizes: the mesh's axis sizes by name (for named shardings).
      chips: the devices the step runs on (a value with no sharding in reach is split over them).
      graph: `before`'s call graph, if built.

    Returns:
      The `HostTransfer`s, in program order (empty when the program moves nothing to or from the host; a "device"
      placement jit writes on an output is no copy).
    """
    from analyzer.analysis.graph import CallGraph

    g = graph or CallGraph.build(before)
    out: list[HostTransfer] = []
    for comp in before.computations:
        if not comp.mentions("custom-call"):
            continue
        executions = g.multiplicity(comp.name)
        if executions <= 0:
            continue
        for inst in comp.select("custom-call"):
            where = _placement(inst)
            if where is None or (where == "device" and _is_output(comp, inst)):
                continue
            direction = "to_host" if where in _HOST_PLACEMENTS else "to_device" if where == "device" else None
            if direction is None:
                continue
            shards = _value_shards(comp, inst, axis_sizes)
            n = shards if shards is not None else max(1, chips)
            md = inst.metadata
            out.append(HostTransfer(inst.name, comp.name, direction, inst.shape.byte_size / n, n,
                                    shards is not None, executions, (md.op_name or "") if md is not None else "",
                                    inst.shape.byte_size, (inst.shape.element_type, tuple(inst.shape.dims))))
    out = _shards_from_copies_out(out)
    # a program that copies to device only what is already there (no copy to host, no host argument) moves nothing
    return out if any(t.direction == "to_host" for t in out) or _host_arguments(before) else []


def places_on_host(before: HloModule) -> bool:
    """Whether the program before partitioning puts anything in host memory: a copy there, or an argument that lives
    there (cheap: its custom calls and entry parameters only)."""
    return _any_host_placement(before) or _host_arguments(before)


def _any_host_placement(before: HloModule) -> bool:
    """Whether any instruction is placed in host memory (cheap: the program's custom calls only)."""
    return any(_placement(i) in _HOST_PLACEMENTS for c in before.computations if c.mentions("custom-call")
               for i in c.select("custom-call"))


def _shards_from_copies_out(transfers: list[HostTransfer]) -> list[HostTransfer]:
    """A value copied back from the host (read from the stacked host buffer by a dynamic slice, no sharding in
    reach) has the shards of the value of its dtype and dims that was copied out, when one was read."""
    from dataclasses import replace

    known = {t.key: t.shards for t in transfers if t.direction == "to_host" and t.sharded}
    return [replace(t, bytes=t.global_bytes / known[t.key], shards=known[t.key], sharded=True)
            if not t.sharded and t.key in known else t for t in transfers]


def _host_arguments(before: HloModule) -> bool:
    """Whether an entry parameter lives in host memory (jit's `in_shardings` with a host memory kind)."""
    for p in before.entry.select("parameter"):
        kinds = p.frontend_attributes.get("mhlo.memory_kind", "") + (p.attr("sharding") or "")
        if any(h in kinds for h in _HOST_PLACEMENTS):
            return True
    return False


# ---------------------------------------------------------------------- placing them on the partitioned program
def _loops(module: HloModule, graph: CallGraph) -> list[tuple[tuple[str, int], str, str]]:
    """((op_name, trip count), body, while instruction) of every while loop, in program order."""
    out = []
    for comp in module.computations:
        for inst in graph.calling.get(comp.name, ()):
            if inst.opcode != "while":
                continue
            body = inst.attr("body")
            md = inst.metadata
            key = ((md.op_name or "") if md is not None else "", graph.trip_count(comp.name, inst.name).n)
            out.append((key, (body or "").lstrip("%"), inst.name))
    return out


def _enclosing_body(graph: CallGraph, comp: str, bodies: set[str]) -> str | None:
    """The innermost loop body `comp` runs in (itself, or a computation calling it), or None outside loops."""
    seen = {comp}
    todo = [comp]
    while todo:
        c = todo.pop()
        if c in bodies:
            return c
        for site in graph.call_sites(c):
            if site.caller not in seen:
                seen.add(site.caller)
                todo.append(site.caller)
    return None


def host_offload(before: HloModule | None, module: HloModule, graph: CallGraph, hw: HardwareSpec,
                 axis_sizes: Mapping[str, int], chips: int, before_graph: CallGraph | None = None) -> HostOffload | None:
    """The program's host transfers, priced on `hw`'s host link and placed on the loops of `module` (the partitioned
    program the step is walked on); None when there are none, or when `hw` has no host link in its spec.

    A loop of the program before partitioning is matched to the loop of `module` with the same jax op name
    (`.../jvp()/while`, `.../transpose(jvp())/while`) and trip count, the k-th with that key to the k-th.
    """
    if before is None or not hw.pcie_bandwidth_per_chip or not places_on_host(before):
        return None
    from analyzer.analysis.graph import CallGraph

    bg = before_graph or CallGraph.build(before)
    transfers = host_transfers(before, axis_sizes, chips, bg)
    if not transfers:
        return None
    bw = float(hw.pcie_bandwidth_per_chip)
    before_loops = _loops(before, bg)
    after_loops = _loops(module, graph)
    by_key: dict[tuple[str, int], list[str]] = {}
    for key, body, _ in after_loops:
        by_key.setdefault(key, []).append(body)
    match: dict[str, str] = {}
    taken: dict[tuple[str, int], int] = {}
    for key, body, _ in before_loops:
        k = taken.get(key, 0)
        taken[key] = k + 1
        if k < len(by_key.get(key, [])):
            match[body] = by_key[key][k]
    bodies = {body for _, body, _ in before_loops}
    per_dir: dict[str, dict[str, float]] = {}  # partitioned body (or "" outside loops) -> direction -> bytes
    unmatched: list[str] = []
    for t in transfers:
        body = _enclosing_body(bg, t.computation, bodies)
        target = match.get(body, "") if body is not None else ""
        if body is not None and not target and body not in unmatched:
            unmatched.append(body)
        if target:  # per iteration: the executions of one pass through the body
            count = t.executions / max(bg.multiplicity(body), 1.0)
        else:
            count = t.executions
        d = per_dir.setdefault(target, {})
        d[t.direction] = d.get(t.direction, 0.0) + t.bytes * count
    per_iteration = {body: max(d.values()) / bw for body, d in per_dir.items() if body}
    outside = max(per_dir.get("", {}).values(), default=0.0) / bw
    return HostOffload(tuple(transfers), bw, per_iteration, outside, tuple(unmatched))


# ------------------------------------------------------------------------------- what lives in host memory
def _stack_op(module: HloModule, inst: Instruction, opcode: str) -> bool:
    """`inst` is `opcode` (dynamic-update-slice, dynamic-slice), or a call of a computation whose root is (jax's
    `dynamic_update_index_in_dim` and `dynamic_index_in_dim` before partitioning)."""
    if inst.opcode == opcode:
        return True
    if inst.opcode != "call":
        return False
    callee = module.by_name.get((inst.attr("to_apply") or "").lstrip("%"))
    root = callee.root if callee is not None else None
    while root is not None and root.opcode in RELABEL and root.operand_names:  # (a reshape dropping the index dim)
        root = callee.by_name.get(root.operand_names[0])
    return root is not None and root.opcode == opcode


def _returned(module: HloModule, by: Mapping[str, Instruction], inst: Instruction) -> Instruction | None:
    """For `get-tuple-element(call(...))`, the instruction of the callee's root tuple it reads; else None."""
    call = by.get(inst.operand_names[0]) if inst.opcode == "get-tuple-element" and inst.operand_names else None
    if call is None or call.opcode != "call":
        return None
    callee = module.by_name.get((call.attr("to_apply") or "").lstrip("%"))
    root = callee.root if callee is not None else None
    k = int(inst.attr("index") or 0)
    if root is None or root.opcode != "tuple" or k >= len(root.operand_names):
        return None
    return callee.by_name.get(root.operand_names[k])


def _host_elements(module: HloModule, body: Computation) -> frozenset[int]:
    """The loop-state elements of a loop body (the program before partitioning) that live in host memory: an element
    the body writes from a copy to `pinned_host` (the forward loop stacking what the remat policy offloads), or
    one it reads only to copy back to the device (the backward loop taking the stack apart)."""
    by = body.by_name
    users: dict[str, list[Instruction]] = {}
    for inst in body.instructions:
        for o in inst.operand_names:
            users.setdefault(o, []).append(inst)

    def passes(inst: Instruction) -> bool:  # the value passes unchanged (or is written into / sliced from a stack)
        return (_is_sharding_call(inst) or inst.opcode in RELABEL or inst.opcode in SLICING
                or _stack_op(module, inst, "dynamic-update-slice") or _stack_op(module, inst, "dynamic-slice"))

    def reaches(start: Instruction, placement: str, forward: bool) -> bool:
        seen, todo = {start.name}, [start]
        while todo:
            inst = todo.pop()
            if _placement(inst) == placement:
                return True
            nxt = users.get(inst.name, []) if forward else [by[o] for o in inst.operand_names[:2] if o in by]
            if not forward:  # a value a call returns: the callee's root element (jax 0.10 wraps a checkpointed layer)
                nxt = [_returned(module, by, n) or n for n in nxt]
            for n in nxt:
                if n.name not in seen and (passes(n) or _placement(n) == placement):
                    seen.add(n.name)
                    todo.append(n)
        return False

    out = set()
    root = body.root
    if root is not None and root.opcode == "tuple":
        for k, name in enumerate(root.operand_names):
            inst = by.get(name)
            if inst is not None and _stack_op(module, inst, "dynamic-update-slice") and \
                    reaches(inst, "pinned_host", False):
                out.add(k)
    for inst in body.instructions:
        if inst.opcode == "get-tuple-element" and inst.operand_names and \
                by.get(inst.operand_names[0]) is not None and by[inst.operand_names[0]].opcode == "parameter":
            readers = [r for r in users.get(inst.name, []) if r is not root]  # (the root passes it on)
            if readers and all(_stack_op(module, r, "dynamic-slice") and reaches(r, "device", True) for r in readers):
                out.add(int(inst.attr("index") or 0))
    return frozenset(out)


def host_loop_state(before: HloModule | None, module: HloModule, graph: CallGraph,
                    before_graph: CallGraph | None = None) -> dict[str, frozenset[int]]:
    """For each while loop of `module` (the partitioned program), the elements of its state that live in host
    memory. A loop that writes what it offloads (`_host_elements`) is matched to the loop before partitioning with
    the same jax op name and trip count, the k-th to the k-th (as `host_offload` places copies), its elements
    kept where the partitioned loop's element has the same rank and leading dimension (the layers); a loop the
    partitioned program hands such an element to (the backward loop) holds it in host memory too. Empty when the
    program offloads nothing."""
    if before is None or not _any_host_placement(before):
        return {}
    from analyzer.analysis.graph import CallGraph

    bg = before_graph or CallGraph.build(before)
    by_key: dict[tuple[str, int], list[str]] = {}
    for key, _, name in _loops(module, graph):
        by_key.setdefault(key, []).append(name)
    loops = {i.name: (c, i) for c in module.computations for i in c.instructions if i.opcode == "while"}
    taken: dict[tuple[str, int], int] = {}
    out: dict[str, set[int]] = {}
    for key, body, name in _loops(before, bg):
        k = taken.get(key, 0)
        taken[key] = k + 1
        comp = before.by_name.get(body)
        if comp is None or k >= len(by_key.get(key, [])) or by_key[key][k] not in loops:
            continue
        was = next((i for i in comp.instructions if i.opcode == "parameter"), None)
        now = loops[by_key[key][k]][1]
        if was is None or not was.shape.is_tuple or not now.shape.is_tuple:
            continue
        old, new = was.shape.tuple_shapes, now.shape.tuple_shapes
        host = {e for e in _host_elements(before, comp) if e < len(old) and e < len(new) and _same_stack(old[e], new[e])}
        if host:
            out.setdefault(now.name, set()).update(host)
    for name, elements in list(out.items()):  # the loops the stacks are handed to
        for loop, element in _handed_to(loops[name][0], name, elements):
            out.setdefault(loop, set()).add(element)
    return {name: frozenset(e) for name, e in out.items()}


def _same_stack(before: Any, after: Any) -> bool:
    """A loop-state element before and after partitioning is the same stack: same element type, rank and leading
    dimension (the layers), each other dimension the global one or a whole share of it."""
    return (before.is_array and after.is_array and before.element_type == after.element_type
            and len(before.dims) == len(after.dims) >= 2 and before.dims[0] == after.dims[0]
            and all(a and b % a == 0 for b, a in zip(before.dims[1:], after.dims[1:])))


def _handed_to(comp: Computation, loop: str, elements: set[int]) -> list[tuple[str, int]]:
    """(while, element) of the loops in `comp` whose initial state takes `loop`'s result element from `elements`
    (through get-tuple-element, relabelling ops and the state's tuple)."""
    out = []
    for inst in comp.instructions:
        if inst.opcode != "get-tuple-element" or list(inst.operand_names[:1]) != [loop] or \
                int(inst.attr("index") or -1) not in elements:
            continue
        todo, seen = [inst.name], {inst.name}
        while todo:
            value = todo.pop()
            for user in comp.instructions:
                if value not in user.operand_names or user.name in seen:
                    continue
                if user.opcode in RELABEL or _is_sharding_call(user):
                    seen.add(user.name)
                    todo.append(user.name)
                elif user.opcode == "tuple":
                    for w in comp.instructions:
                        if w.opcode == "while" and list(w.operand_names[:1]) == [user.name]:
                            out.extend((w.name, k) for k, o in enumerate(user.operand_names) if o == value)
    return out
