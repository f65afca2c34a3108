"""Where a collective's data comes from and where it goes, and the row that says so.

`map_collective` states one `Collective` (from `analyzer.analysis.collectives.extract_collectives`) in the mesh's
terms: its mesh axes, its notation (`AllGather_Y: [E_Y, F] -> [E, F]`) with the program's own letters for the
dimensions, the global shape, the user's source line and the pass. What it needs to know of the program it reads
off the data flow around the collective, with the questions below:
  - what the operand is: the program argument it is (sliced, reshaped, carried through loops), with that
    argument's sharding and pytree path (`_trace_to_argument`), or the op that made it (`_metadata_origin`);
    the `with_sharding_constraint` it was forced into (`_declared_at`);
  - what the result goes to: the dot that consumes it (`analyzer.analysis.dataflow.consuming_dot`), whose einsum
    names the dimensions (`_dim_letters`) and whose line an inserted all-gather takes
    (`analyzer.analysis.dataflow.cause_metadata`);
  - for an all-to-all: which dimension it splits and which it concatenates, from the reshapes around it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from analyzer.analysis.collectives import is_movement_fusion
from analyzer.analysis.dataflow import cause_metadata, consuming_dot, nearest
from analyzer.analysis.mapping import (AxisSpan, collective_notation, einsum_subscripts, groups_to_axes,
                                       names_of_array, pairs_to_axes, pass_of, source_frames, user_frame)
from analyzer.hlo.opcodes import ELEMENTWISE, MOVING_COLLECTIVES, RELABEL, VIEWS
from analyzer.theory.mesh import MeshInfo

if TYPE_CHECKING:
    from analyzer.analysis.collectives import Collective
    from analyzer.analysis.graph import CallGraph
    from analyzer.hlo.ir import HloModule, Instruction

__all__ = ["map_collective"]

# Ops whose result has the operand's dimensions, in the same order and (but for a slice) the same sizes.
_SAME_DIMS = (RELABEL - VIEWS - {"transpose"}) | {"dynamic-slice", "slice"}  # (no dimension moves or merges)


def map_collective(c: Collective, module: HloModule, g: CallGraph, mesh: MeshInfo,
                   declared: Mapping[str, tuple[str, ...]] | None = None,
                   unpartitioned: HloModule | None = None) -> Collective:
    """Axes, notation, global shape, source line and pass of one collective.

    A reshard that a `with_sharding_constraint` forced (no matmul needs it; the constraint's layout is the one it
    produces) takes the constraint's line, with the constraint whose layout it starts from as its context
    (`_constraint_source`); `unpartitioned` (the program jax handed XLA) finds them when the module read has lost the
    constraints (the TPU compiler's final HLO).

    The notation's letters are the program's names for the dimensions: the logical axis names declared for
    the argument it moves (`declared`, `analyzer.analysis.mapping.logical_names`), else the einsum subscripts
    of the dot it feeds or reduces, else I, J, K... by position."""
    span, extra = _span(c, mesh)
    shape, dims, a2a = _moved_shape(c, g)
    base = _argument_spec(g, c, mesh) if c.kind == "all-gather" and span.regular else None
    array = _argument_name(g, c)
    # the dot an all-gather feeds (c.dot: also a dot in a fusion), through a second gather (FSDP + TP weights)
    dot = c.dot
    if dot is None and c.kind == "all-gather":
        dot = consuming_dot(lambda name: g.users(c.computation, name), c.instructions[-1])
    letters = names_of_array(array, declared) if array and declared else None
    if letters is None or len(letters) != len(shape):
        letters = _dim_letters(g, c, dot, len(shape))
    notation, before, after, unreduced = collective_notation(c.kind, span.axes, len(shape), dims=dims, a2a=a2a,
                                                             base=base, letters=letters)
    if base is not None and before == tuple(tuple(b) for b in base):
        # the other dims are sharded too: the notation's letters then stand for the whole array
        shape = tuple(n * _axes_size(axes, mesh) for n, axes in zip(shape, after))
    md = _source_metadata(g, c, dot, extra)
    frames = source_frames(module, md.stack_frame_id if md else None, md.source_file if md else None,
                           md.source_line if md else None)
    extra["context"] = frames.context
    extra["array"] = array
    extra["declared"] = _declared_at(g, c, module)
    if dot is None and c.kind in MOVING_COLLECTIVES:
        frames = _constraint_source(g, c, module, unpartitioned, frames, extra)
    return replace(c, axes=span.axes, axis_sizes=span.sizes, regular=span.regular, notation=notation,
                   before=before, after=after, unreduced=unreduced, global_shape=shape, source=frames.user,
                   pass_=pass_of(c.op_name) or pass_of(md.op_name if md else None), a2a_dims=a2a, extra=extra)


def _span(c: Collective, mesh: MeshInfo) -> tuple[AxisSpan, dict[str, Any]]:
    """The mesh axes a collective spans, and its `extra` (with the hops of a permute that shifts along them)."""
    if c.kind == "collective-permute" and c.pairs is not None and not c.permute_steps:
        span, hops = pairs_to_axes(c.pairs, mesh)
        return span, dict(c.extra, hops=hops)
    return groups_to_axes(c.groups, mesh), dict(c.extra)


def _moved_shape(c: Collective, g: CallGraph
                 ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, int] | None]:
    """The shape the notation states (the gathered result, the reduced operand, ...), the dims the collective
    gathers or scatters, and an all-to-all's (split, concatenated) dims."""
    if c.kind == "all-gather":
        return tuple(c.result_shape.dims), ((c.dimension,) if c.dimension is not None else ()), None
    if c.kind == "reduce-scatter":
        dims = c.scatter_dims or ((c.dimension,) if c.dimension is not None else ())
        return tuple(c.operand_shape.dims), dims, None
    if c.kind in ("all-to-all", "ragged-all-to-all"):
        a2a, shape = _a2a_dims(c, g)
        return shape, (), a2a
    return tuple(c.operand_shape.dims), (), None


def _named(md: Any) -> bool:
    """Whether metadata names an op or a source frame."""
    return md is not None and bool(md.op_name or md.stack_frame_id is not None)


def _source_metadata(g: CallGraph, c: Collective, dot: Instruction | None, extra: dict[str, Any]) -> Any:
    """The metadata that gives a collective its line: its own, else its async site's, else that of the op that
    made its operand (a reshard the partitioner added: `extra` then says whose); for an all-gather the
    partitioner inserted, that of the dot it gathers for (`cause_metadata`)."""
    md = c.instruction.metadata
    if not _named(md) and c.site is not None:
        md = c.site.metadata
    if not _named(md):
        origin = _metadata_origin(g, c)
        if origin is not None:
            md, producer = origin
            extra["inherited_op_name"] = md.op_name or ""
            if producer.opcode == "parameter" or "/" not in (md.op_name or "/"):  # an argument, not an op
                extra["op"] = f"reshard of {md.op_name or 'argument ' + str(producer.parameter_number)}"
    if c.kind == "all-gather":  # (jax 0.11+ gives an inserted gather its operand's metadata, or none)
        md = cause_metadata(g.module.by_name[c.computation], c.instruction, dot, md)
    return md


# ---------------------------------------------------------------------- all-to-all
def _reshaping(g: CallGraph, inst: Any) -> bool:
    """Ops that only move data (reshape, transpose, bitcast, copy, or a fusion of such with one operand)."""
    if inst.opcode in ("reshape", "transpose", "bitcast", "copy"):
        return True
    return inst.opcode == "fusion" and len(inst.operands) == 1 and is_movement_fusion(g.module, inst)


def _trace_shape(g: CallGraph, comp: str, name: str, forward: bool) -> Any:
    """Follow reshapes/transposes/bitcasts/copies from an instruction (backwards through operands, or forwards
    through single users) and return the last shape reached."""
    inst = g.producer(comp, name)
    if inst is None:
        return None
    shape = inst.shape
    for _ in range(8):
        if forward:
            users = g.users(comp, inst.name)
            if len(users) != 1 or not _reshaping(g, users[0]):
                break
            inst = users[0]
        else:
            if not _reshaping(g, inst) or not inst.operands:
                break
            nxt = g.producer(comp, inst.operands[0].name)
            if nxt is None:
                break
            inst = nxt
        shape = inst.shape
    return shape


def _a2a_dims(c: Collective, g: CallGraph) -> tuple[tuple[int, int] | None, tuple[int, ...]]:
    """(sharded-before dim, sharded-after dim) of an all-to-all, read off the reshapes around it, and the
    global (per group) shape; (None, operand dims) when the pattern is not the plain reshard."""
    n = c.group_size
    src = _trace_shape(g, c.computation, c.instruction.operands[0].name, forward=False) if c.instruction.operands else None
    dst = _trace_shape(g, c.computation, c.instructions[-1], forward=True)
    if src is None or dst is None or not src.is_array or not dst.is_array or src.rank != dst.rank or n < 2:
        return None, tuple(c.operand_shape.dims)
    grow = [d for d in range(src.rank) if dst.dims[d] == src.dims[d] * n]
    shrink = [d for d in range(src.rank) if src.dims[d] == dst.dims[d] * n]
    same = all(src.dims[d] == dst.dims[d] for d in range(src.rank) if d not in grow + shrink)
    if len(grow) == 1 and len(shrink) == 1 and same:
        glob = list(dst.dims)
        glob[shrink[0]] *= n
        return (grow[0], shrink[0]), tuple(glob)
    return None, tuple(c.operand_shape.dims)


# ---------------------------------------------------------------------- where the operand comes from
def _metadata_origin(g: CallGraph, c: Collective) -> Any:
    """The metadata of the nearest producer of a collective's operand that has some (for collectives the
    partitioner adds to reshard a value: the op that made the value)."""
    inst = c.instruction
    comp = c.computation if inst.name in g.module.by_name[c.computation].by_name else None
    if comp is None:
        return None
    for _ in range(8):
        if not inst.operands:
            return None
        nxt = g.producer(comp, inst.operands[0].name)
        if nxt is None:
            return None
        md = nxt.metadata
        if md is not None and (md.op_name or md.stack_frame_id is not None):
            return md, nxt
        inst = nxt
    return None


def _axes_size(axes: Sequence[str], mesh: MeshInfo) -> int:
    """Devices along mesh axes or sub-axes (`X`, `X:(2)4`)."""
    n = 1
    for a in axes:
        if ":" in a:
            n *= int(a.rsplit(")", 1)[-1])
        else:
            n *= mesh.shape.get(a, 1)
    return n


def _squeeze_map(src: Any, dst: Any) -> list[int | None] | None:
    """For a reshape that only adds or removes size-1 dims: for each dim of `dst`, the dim of `src` it is
    (None for an added 1); None for any other reshape."""
    a = [d for d, v in enumerate(src.dims) if v != 1]
    b = [d for d, v in enumerate(dst.dims) if v != 1]
    if [src.dims[d] for d in a] != [dst.dims[d] for d in b]:
        return None
    out: list[int | None] = [None] * dst.rank
    for i, d in enumerate(b):
        out[d] = a[i]
    return out


def _argument_spec(g: CallGraph, c: Collective, mesh: MeshInfo) -> tuple[tuple[str, ...], ...] | None:
    """How the operand of a collective is sharded, dimension by dimension, when it is an argument of the
    program sliced and reshaped (a scanned layer's weight): read off the argument's `sharding=` (else, as jax
    0.11+ prints the partitioned program without it, the same parameter's in the program before partitioning,
    `HloModule.argument_shardings`). None when the operand is computed, or the trail is not that simple."""
    from analyzer.theory.notation import Notation

    if c.site is not None:
        return None
    found = _trace_to_argument(g, c)
    if found is None:
        return None
    inst, dim_map = found
    raw = inst.attr("sharding")
    if raw is None and inst.parameter_number is not None:  # (`found` is an entry parameter)
        raw = g.module.argument_shardings.get(inst.parameter_number)
    if raw is None:
        return None
    try:
        from analyzer.hlo.sharding import parse_hlo_sharding

        sh = parse_hlo_sharding(raw)
        if sh.is_tuple or not sh.is_tiled:
            return None
        tiles = sh.data_tile_dims
        shape = [d * t for d, t in zip(inst.shape.dims, tiles)]
        note = Notation.from_hlo_sharding(sh, shape, dict(zip(mesh.axis_names, mesh.axis_sizes)))
    except Exception:  # noqa: BLE001 - a sharding the notation cannot express: keep the simple form
        return None
    return tuple(tuple(note.dims[d].axes) if d is not None else () for d in dim_map)


def _argument_name(g: CallGraph, c: Collective) -> str:
    """The program argument a collective moves, as jax names it in the parameter's metadata: the pytree path
    (`params['mlp']['w_in']`, `x`); "" when the operand is computed or the trail is not that simple."""
    found = _trace_to_argument(g, c, follow=frozenset({"all-gather"}))
    if found is None:
        return ""
    md = found[0].metadata
    return (md.op_name or "") if md is not None else ""


def _declared_at(g: CallGraph, c: Collective, module: HloModule) -> str:
    """`file:line` of the `with_sharding_constraint` whose layout the collective's operand was forced into,
    when the operand comes (through data movement) from one; else ""."""
    comp = c.computation
    if comp not in g.module.by_name or c.instruction.name not in g.module.by_name[comp].by_name:
        return ""
    inst = c.instruction
    for _ in range(8):
        if not inst.operands:
            return ""
        nxt = g.producer(comp, inst.operands[0].name)
        if nxt is None:
            return ""
        md = nxt.metadata
        if md is not None and (md.op_name or "").rstrip("/").endswith("sharding_constraint"):
            return user_frame(module, md.stack_frame_id, md.source_file, md.source_line)
        if nxt.opcode not in _SAME_DIMS | {"reshape", "bitcast", "transpose", "custom-call"}:
            return ""
        inst = nxt
    return ""


# Ops a layout flows through unchanged (sharding propagation carries it from operand to result, and back).
_LAYOUT_FLOWS = ELEMENTWISE | RELABEL | _SAME_DIMS | {"custom-call"}
_CONSTRAINT = "sharding_constraint"


def _is_constraint(inst: Any) -> bool:
    """A `with_sharding_constraint`: jax's `Sharding` custom-call before partitioning, the copy it becomes after."""
    md = inst.metadata
    return md is not None and (md.op_name or "").rstrip("/").endswith(_CONSTRAINT) and inst.opcode in (
        "custom-call", "copy")


def _constraints_around(comp: Any, first: Any, last: Any) -> tuple[Any, Any]:
    """(the constraint downstream of `last`, the constraint upstream of `first`), each None when there is none."""
    def passes(inst: Any) -> bool:
        return inst.opcode in _LAYOUT_FLOWS and inst.shape.is_array

    return (nearest(comp, last, True, _is_constraint, passes, limit=48),
            nearest(comp, first, False, _is_constraint, passes, limit=48))


def _same_site(inst: Any, op_name: str, line: str, before: HloModule) -> bool:
    md = inst.metadata
    return (md is not None and md.op_name == op_name
            and user_frame(before, md.stack_frame_id, md.source_file, md.source_line) == line)


def _constraints_before_partitioning(c: Collective, module: HloModule, before: HloModule) -> tuple[Any, Any]:
    """The constraints around the ops of the program before partitioning that have the collective's op_name and
    user line (the TPU compiler's final HLO keeps neither the constraints nor the ops between them): the one
    downstream when all such ops agree on it, and the one upstream when those ops agree on that; else None."""
    md = c.instruction.metadata if _named(c.instruction.metadata) else (c.site.metadata if c.site else None)
    if md is None or not md.op_name:
        return None, None
    line = user_frame(module, md.stack_frame_id, md.source_file, md.source_line)
    if not line:
        return None, None
    comp = before.entry
    around = [_constraints_around(comp, inst, inst) for inst in comp.instructions
              if _same_site(inst, md.op_name, line, before)]
    downs = {d.name: d for d, _ in around if d is not None}
    if len(downs) != 1:
        return None, None
    ups = {u.name: u for _, u in around if u is not None}
    return next(iter(downs.values())), (next(iter(ups.values())) if len(ups) == 1 else None)


def _constraint_source(g: CallGraph, c: Collective, module: HloModule, before: HloModule | None,
                       frames: Any, extra: dict[str, Any]) -> Any:
    """The source of a reshard a `with_sharding_constraint` forced: the frames of the constraint downstream of it
    (whose layout it produces), with the constraint upstream (whose layout it starts from) in `extra`'s context
    and the forcing one in `extra["declared"]`; `frames` unchanged when no constraint forced it."""
    comp = g.module.by_name.get(c.computation)
    if comp is None or c.instructions[-1] not in comp.by_name:
        return frames
    first = comp.by_name.get(c.instructions[0], c.instruction)
    down, up = _constraints_around(comp, first, comp.by_name[c.instructions[-1]])
    where = module
    if down is None and before is not None and not any(_is_constraint(i) for i in comp.instructions):
        down, up = _constraints_before_partitioning(c, module, before)
        where = before
    if down is None:
        return frames
    md = down.metadata
    forced = source_frames(where, md.stack_frame_id, md.source_file, md.source_line)
    if not forced.user:
        return frames
    context = [forced.context] if forced.context else []
    if up is not None:
        umd = up.metadata
        start = user_frame(where, umd.stack_frame_id, umd.source_file, umd.source_line)
        if start and start != forced.user:
            same_file = start.rpartition(":")[0] == forced.user.rpartition(":")[0]
            context.append(f"from the layout of the with_sharding_constraint at "
                           f"{'line ' + start.rpartition(':')[2] if same_file else start}")
    if frames.user and frames.user not in (forced.user,) and not up:
        context.append(f"reshards the value made at {frames.user}")
    extra["context"] = "; ".join(context)
    extra["declared"] = forced.user
    extra["op"] = "reshard for with_sharding_constraint"
    return forced


def _trace_to_argument(g: CallGraph, c: Collective, follow: frozenset[str] = frozenset()
                       ) -> tuple[Any, list[int | None]] | None:
    """The entry parameter a collective's operand is (sliced, reshaped, carried through loops), and for each
    operand dim the parameter dim it is (None for an added size-1 dim); None when the operand is computed.
    `follow`: opcodes that keep the array's identity to follow too (an all-gather of an all-gather moves the
    same argument), dims kept as they are."""
    if not c.instruction.operands:
        return None
    comp = c.computation
    inst = g.producer(comp, c.instruction.operands[0].name)
    if inst is None or not inst.shape.is_array:
        return None
    dim_map: list[int | None] = list(range(inst.shape.rank))  # operand dim -> dim of `inst`
    for _ in range(64):
        if inst.opcode == "parameter" and comp == g.entry:
            return inst, dim_map
        step = _step_back(g, comp, inst, dim_map, follow)
        if step is None:
            return None
        comp, nxt, dim_map = step
        if nxt is None or not nxt.shape.is_array and nxt.opcode != "parameter":
            return None
        inst = nxt
    return None


def _step_back(g: CallGraph, comp: str, inst: Instruction, dim_map: list[int | None], follow: frozenset[str]
               ) -> tuple[str, Instruction | None, list[int | None]] | None:
    """One step of `_trace_to_argument`: the value `inst` is (computation, instruction) and the operand dims
    carried over to it; None when `inst` computes it (or the step is not one the trail follows)."""
    if not inst.operands:
        return None
    if inst.opcode in _SAME_DIMS or inst.opcode in follow:
        return comp, g.producer(comp, inst.operands[0].name), dim_map
    if inst.opcode in VIEWS:  # (reshape, bitcast: only size-1 dims added or removed)
        nxt = g.producer(comp, inst.operands[0].name)
        if nxt is None or not nxt.shape.is_array:
            return None
        m = _squeeze_map(nxt.shape, inst.shape)
        if m is None:
            return None
        return comp, nxt, [m[d] if d is not None else None for d in dim_map]
    if inst.opcode == "get-tuple-element":
        found = _tuple_element(g, comp, inst)
        return None if found is None else (found[0], found[1], dim_map)
    return None


def _tuple_element(g: CallGraph, comp: str, gte: Instruction) -> tuple[str, Instruction | None] | None:
    """What a `get-tuple-element` takes: the element of a tuple built in `comp`, the value a loop carries into
    its body unchanged (in the loop's caller), or a tuple parameter of the entry; None otherwise."""
    index = int(gte.attr("index") or 0)
    nxt = g.producer(comp, gte.operands[0].name)
    if nxt is not None and nxt.opcode == "tuple":
        return comp, g.producer(comp, nxt.operands[index].name)
    if nxt is not None and nxt.opcode == "parameter" and comp != g.entry:
        return _loop_carried(g, comp, gte, nxt, index)
    if nxt is None or nxt.opcode != "parameter":
        return None
    return comp, nxt


def _loop_carried(g: CallGraph, body: str, gte: Instruction, param: Instruction, index: int
                  ) -> tuple[str, Instruction | None] | None:
    """A loop-carried value (element `index` of the body's parameter `param`, read by `gte`), followed out of
    the loop to what the caller puts into the loop's state, when the body passes it through unchanged."""
    sites = [s for s in g.call_sites(body) if s.role == "body"]
    root = g.module.by_name[body].root
    if len(sites) != 1 or root.opcode != "tuple" or index >= len(root.operands):
        return None
    through = g.producer(body, root.operands[index].name)
    if through is None or through.name != gte.name and not (
            through.opcode == "get-tuple-element" and through.attr("index") == str(index)
            and through.operands[0].name == param.name):
        return None
    caller = sites[0].caller
    loop = g.producer(caller, sites[0].instruction)
    state = g.producer(caller, loop.operands[0].name) if loop is not None and loop.operands else None
    if state is None or state.opcode != "tuple":
        return None
    return caller, g.producer(caller, state.operands[index].name)


# ---------------------------------------------------------------------- the program's letters
def _dim_letters(g: CallGraph, c: Collective, dot: Instruction | None, rank: int) -> str | None:
    """The program's own letters for the dimensions of the array a collective moves, from the einsum spec jax
    writes into the op_name of `dot`, the dot it feeds (that operand's subscripts) or whose partial sums it
    reduces (the output's): `bd,df->bf` names an all-gathered `df` weight `[D, F]`. None when there is no such
    dot, the dot is of the backward pass, or the shapes do not line up (the notation then uses I, J, K...)."""
    if dot is None or c.site is not None or dot.metadata is None:
        return None
    spec = einsum_subscripts(dot.metadata.op_name)
    if spec is None:
        return None
    operands, _ = spec
    if c.dot_relation == "from":
        letters = _dot_output_letters(dot, operands)
    else:
        letters = _operand_letters(g, c, dot, operands)
    return letters if letters is not None and len(letters) == rank else None


def _operand_letters(g: CallGraph, c: Collective, dot: Instruction, operands: Sequence[str]) -> str | None:
    """The subscripts of the operand of `dot` that reads the collective's result (through ops that keep its
    dims, and further all-gathers); None when no operand does."""
    comp = c.computation
    mine = set(c.instructions)
    for k, op in enumerate(dot.operands[:len(operands)]):
        inst = g.producer(comp, op.name)
        for _ in range(6):
            if inst is None or inst.name in mine:
                break
            if inst.opcode not in _SAME_DIMS | {"bitcast", "all-gather"} or not inst.operands:
                inst = None
                break
            inst = g.producer(comp, inst.operands[0].name)
        if inst is not None and inst.name in mine:
            return operands[k]
    return None


def _dot_output_letters(dot: Any, operands: Sequence[str]) -> str | None:
    """The letters of a dot's result as XLA lays it out: batch dims, then the left operand's free dims, then
    the right's (jax transposes to the einsum's output order afterwards). None unless the sizes the operands
    give each letter reproduce the dot's shape."""
    if len(operands) != 2 or len(dot.operands) != 2 or not dot.shape.is_array:
        return None
    lhs, rhs = operands
    sizes: dict[str, int] = {}
    for letters, op in zip(operands, dot.operands):
        shape = op.shape
        if shape is None or not shape.is_array or len(shape.dims) != len(letters):
            return None
        for letter, n in zip(letters, shape.dims):
            if sizes.setdefault(letter, n) != n:
                return None
    batch = [a for a in lhs if a in rhs and a not in _contracting(dot, lhs)]
    order = batch + [a for a in lhs if a not in rhs] + [b for b in rhs if b not in lhs]
    if [sizes[a] for a in order] != list(dot.shape.dims):
        return None
    return "".join(order)


def _contracting(dot: Any, lhs: str) -> set[str]:
    """The letters of the left operand a dot contracts (from `lhs_contracting_dims={...}`)."""
    raw = str(dot.attr("lhs_contracting_dims") or "").strip("{}")
    out = set()
    for part in raw.split(","):
        if part.strip().isdigit() and int(part) < len(lhs):
            out.add(lhs[int(part)])
    return out
