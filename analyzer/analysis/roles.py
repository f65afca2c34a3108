"""Each dot's role in the model, read before its roofline (issue 26): which arguments are the batch and which the
weights, the per-chip batch in tokens, and what a dot of the partitioned program does.

The program jax handed XLA (`ModelFlops.module`) says which arguments are the batch: the left operand of its
forward dots (`x @ w`, `einsum('bsd,df->bsf', x, w)`, Flax's Dense; token ids through an embedding gather) and
every integer argument (token ids, labels); the right operands are the weights. The partitioned module's entry
parameters carry the same names (their op_name is the argument's pytree path), so a dot there is read as:

  - "embedding": it reads an argument that an embedding lookup (a `gather`) also reads (a tied LM head);
  - "moe dispatch/combine": it reads no weight and an all-to-all moves its operand or its output, or (with batch
    dims) its result reaches an expert's FFN matmul or an operand comes from one (`_next_to_an_expert`): the
    tokens' way to their experts and back, whichever collectives (all-to-all, permutes) move them;
  - "attention": it reads no weight and has batch dimensions (`QK^T`, `PV`), unless it is a backward dot whose
    result has a weight's dims: an expert FFN's batched weight gradient (the experts its batch dim);
  - "weight gradient": it reads no weight, in the backward pass (`x^T dy`: the tokens contracted);
  - "activation gradient": it reads a weight, in the backward pass (`dy W^T`);
  - "forward": it reads a weight (a layer's matmul; an expert's FFN).

HA101 reads its roofline from the role: a weight gradient's reduction is FSDP's, never Megatron's (whatever
argument feeds it); the batch gathered is the batch's layout, not FSDP; an all-to-all over an expert axis is
expert parallelism's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from analyzer.analysis.dots import is_global_to_local
from analyzer.hlo.opcodes import ELEMENTWISE, MOVING_COLLECTIVES, RELABEL

__all__ = ["Arguments", "arguments", "argument_name", "dot_role", "entry_argument", "sharding_axes", "ROLES"]

ROLES = ("forward", "activation gradient", "weight gradient", "attention", "moe dispatch/combine", "embedding")
# (a value keeps its role through relabellings, the collectives that move it, slices and broadcasts)
_THROUGH = RELABEL | MOVING_COLLECTIVES | {"dynamic-slice", "slice", "broadcast"}


@dataclass(frozen=True)
class Arguments:
    """The program's arguments by role.

    Attributes:
      batch: pytree paths of the batch's arguments (`batch['x']`, token ids).
      weights: pytree paths of the weights (right operands of forward dots, never a left one).
      tables: pytree paths of arguments an embedding lookup (`gather`) reads.
      per_chip_tokens: tokens each chip holds of the batch (its dims but the feature dim, over the mesh axes
        that split them); None when no batch argument is found.
      tokens: the batch's tokens (global).
      batch_name: the argument `per_chip_tokens` is read from.
    """

    batch: frozenset[str] = frozenset()
    weights: frozenset[str] = frozenset()
    tables: frozenset[str] = frozenset()
    per_chip_tokens: float | None = None
    tokens: float | None = None
    batch_name: str = ""
    specs: Mapping[str, tuple[tuple[str, ...], ...]] = field(default_factory=dict)  # each argument's spec by dim


def argument_name(param: Any) -> str:
    """The pytree path of an entry parameter (its op_name), else its HLO name."""
    md = param.metadata
    return (md.op_name if md is not None and md.op_name else param.name).replace("\\'", "'")


_SDY = re.compile(r'xla\.sdy\.sharding="?#sdy\.sharding<@\w+, \[(.*)\]')
_GROUP = re.compile(r"\{([^{}]*)\}")


def sharding_axes(inst: Any) -> tuple[tuple[str, ...], ...] | None:
    """The mesh axes each dim of an entry parameter is split over, from its Shardy sharding as jax 0.10 writes it
    (`frontend_attributes={xla.sdy.sharding="#sdy.sharding<@mesh, [{"data"}, {}]>"}`) or as jax 0.11+'s XLA prints
    it (`sharding={mesh['data'=4,'model'=2], [{'data'}, {}]}`); None when it carries neither.

    Example:
        `[{"data", "model"}, {}]` -> (("data", "model"), ())
    """
    text = inst.frontend_attributes.get("xla.sdy.sharding", "")
    m = _SDY.search(f'xla.sdy.sharding="{text}') if text else None
    if m is None:
        from analyzer.hlo.sharding import named_axes

        named = named_axes(inst.attr("sharding") or "")
        if named is not None and not named and inst.shape.dims:  # `{mesh[...], replicated}`
            return tuple(() for _ in inst.shape.dims)
        return named
    dims = []
    for group in _GROUP.findall(m.group(1)):
        names = re.findall(r'\\?"([^"\\]+)\\?"', group)
        dims.append(tuple(names))
    return tuple(dims)


def _traced(comp: Any, inst: Any, depth: int = 0) -> Any:
    """The entry parameter `inst` reads through views, casts, gathers and slices (an embedding lookup's ids
    for a `gather`), or None."""
    if inst is None or depth > 12:
        return None
    if inst.opcode == "parameter":
        return inst
    if not inst.operands:
        return None
    if inst.opcode in _THROUGH or (inst.opcode == "custom-call" and len(inst.operands) == 1):
        return _traced(comp, comp.by_name.get(inst.operands[0].name), depth + 1)
    return None


def entry_argument(module: Any, comp: Any, inst: Any, callers_of: Mapping[str, Any] | None = None) -> Any:
    """The entry parameter `inst` reads, followed through views, casts, slices and gathers (an embedding lookup's
    ids), `call`s (jax 0.12's `jit(dynamic_index_in_dim)` of a stacked weight), a shard_map body's pieces (the
    operand its `GlobalToLocalShape` cuts up) and loops: a loop body's tuple
    element is what the loop starts from, so a scanned layer's weight slice reads the stacked weight and its
    activations the batch the first layer is given. None for a computed value.

    Args:
      callers_of: `analyzer.analysis.dataflow.callers(module)`, when the caller has it.
    """
    if module is None or comp is None or inst is None:
        return None
    if callers_of is None:
        from analyzer.analysis.dataflow import callers

        callers_of = callers(module)
    cur, index = inst, None  # `index`: the tuple element followed, after a get-tuple-element
    for _ in range(128):
        if cur is None:
            return None
        op = cur.opcode
        if op == "parameter":
            if comp is module.entry:
                return cur if index is None else None
            step = _caller_operand(callers_of, comp, cur)
            if step is None:
                return None
            comp, cur = step
        elif op == "get-tuple-element" and index is None and cur.operand_names:
            index = int(cur.attr("index") or 0)
            cur = comp.by_name.get(cur.operand_names[0])
        elif op == "tuple" and index is not None and index < len(cur.operand_names):
            cur, index = comp.by_name.get(cur.operand_names[index]), None
        elif op == "gather" and len(cur.operand_names) > 1:
            cur = comp.by_name.get(cur.operand_names[1])  # the ids of an embedding lookup: the batch
        elif op == "call" and index is None:
            cur = _call_operand(module, comp, cur)
        elif index is not None and is_global_to_local(cur) and index < len(cur.operand_names):
            cur, index = comp.by_name.get(cur.operand_names[index]), None  # a shard_map's piece: what it cuts up
        elif (op in _THROUGH or op == "custom-call" and len(cur.operand_names) == 1) and cur.operand_names:
            cur = comp.by_name.get(cur.operand_names[0])
        else:
            return None
    return None


def _caller_operand(callers_of: Mapping[str, Any], comp: Any, param: Any) -> tuple[Any, Any] | None:
    """(the caller, what it passes as `param`): a `while`'s initial state (a body's or condition's parameter), a
    `call`'s operand; None for several callers or other callers."""
    sites = callers_of.get(comp.name, ())
    if len(sites) != 1:
        return None
    caller, call = sites[0]
    number = param.parameter_number or 0
    if call.opcode == "while" and call.operand_names:
        return caller, caller.by_name.get(call.operand_names[0])
    if call.opcode == "call" and number < len(call.operand_names):
        return caller, caller.by_name.get(call.operand_names[number])
    return None


def _call_operand(module: Any, comp: Any, call: Any) -> Any:
    """The operand of `call` that its callee's result is a view or slice of (`jit(dynamic_index_in_dim)`), or None."""
    callees = [module.by_name.get(n) for n in call.called_computations]
    if len(callees) != 1 or callees[0] is None or callees[0].root is None:
        return None
    callee, cur = callees[0], callees[0].root
    for _ in range(16):
        if cur is None:
            return None
        if cur.opcode == "parameter":
            number = cur.parameter_number or 0
            return comp.by_name.get(call.operand_names[number]) if number < len(call.operand_names) else None
        if not (cur.opcode in _THROUGH or cur.opcode == "custom-call" and len(cur.operand_names) == 1) \
                or not cur.operand_names:
            return None
        cur = callee.by_name.get(cur.operand_names[0])
    return None


def arguments(model_flops: Any, axis_sizes: Mapping[str, int], partitioned: Any = None) -> Arguments:
    """The batch and weight arguments from the program before partitioning, and the per-chip batch in tokens.

    Args:
      model_flops: the report's `ModelFlops` (its `module` is the program jax handed XLA).
      axis_sizes: the mesh's axis sizes.
      partitioned: the partitioned module: its entry parameters' per-device shapes give the per-chip batch
        directly (jax 0.12 hands XLA no Shardy attribute to read the spec from).
    """
    module = getattr(model_flops, "module", None)
    if module is None or module.entry is None:
        return Arguments()
    entry = module.entry
    params, tables, lhs = _entry_arguments(entry)
    rhs = _forward_operands(model_flops, entry, lhs)
    integer = {n for n, p in params.items() if p.shape.is_array and p.shape.element_type.startswith(("s", "u"))
               and p.shape.element_type != "pred"}
    batch = ({n for n in lhs if n not in rhs} | integer) - tables
    ranked = sorted(batch, key=lambda n: (n not in integer, -lhs.get(n, 0), n))
    batch |= _per_token(params, ranked, rhs - set(lhs) - tables)
    weights = ((rhs - set(lhs)) | tables) - batch
    tokens, per_chip, name = _per_chip_batch(ranked, params, integer, axis_sizes, partitioned)
    specs = {n: tuple(tuple(d) for d in (sharding_axes(p) or [() for _ in p.shape.dims]))
             for n, p in params.items() if p.shape.is_array}
    return Arguments(frozenset(batch), frozenset(weights), frozenset(tables), per_chip, tokens, name, specs)


def _per_token(params: Mapping[str, Any], ranked: list[str], candidates: set[str]) -> set[str]:
    """The arguments read as right operands that hold one entry per token: their leading dims are the batch
    argument's token dims (all but its features, at least two of them), such as a MoE's dispatch mask
    `[G, S, E, C]` beside the tokens `[G, S, D]`; they are batch, not weights."""
    first = next((params[n] for n in ranked if n in params and params[n].shape.is_array), None)
    if first is None or len(first.shape.dims) < 3:
        return set()
    tokens = list(first.shape.dims[:-1])
    return {n for n in candidates if n in params and params[n].shape.is_array
            and list(params[n].shape.dims[:len(tokens)]) == tokens and len(params[n].shape.dims) > len(tokens)}


def _entry_arguments(entry: Any) -> tuple[dict[str, Any], set[str], dict[str, int]]:
    """The entry's parameters by name, the arguments an embedding lookup (`gather`) reads as its table, and
    how many lookups read each argument as their ids (counted as left operands: the ids are the batch)."""
    params: dict[str, Any] = {}
    tables: set[str] = set()
    lhs: dict[str, int] = {}
    for inst in entry.instructions:
        if inst.opcode == "parameter":
            params[argument_name(inst)] = inst
        elif inst.opcode == "gather" and len(inst.operands) > 1:
            table = _traced(entry, entry.by_name.get(inst.operands[0].name))
            ids = _traced(entry, entry.by_name.get(inst.operands[1].name))
            if table is not None:
                tables.add(argument_name(table))
            if ids is not None:
                lhs[argument_name(ids)] = lhs.get(argument_name(ids), 0) + 1
    return params, tables, lhs


def _forward_operands(model_flops: Any, entry: Any, lhs: dict[str, int]) -> set[str]:
    """The arguments the forward dots (the entry's, and a scanned layer's in its loop body) read as their right
    operand (the weights, `h @ w_out` too); each argument read as a left operand is counted into `lhs`."""
    from analyzer.analysis.mapping import pass_of

    from analyzer.analysis.dataflow import callers

    module = model_flops.module
    callers_of = callers(module)
    rhs: set[str] = set()
    for dots in model_flops.dots.values():
        for d in dots:
            md = d.instruction.metadata
            comp = module.by_name.get(d.computation)
            if comp is None or pass_of(md.op_name if md else None) == "backward":
                continue  # (a scanned layer's dots too: their operands are followed out of the loop)
            found = [entry_argument(module, comp, comp.by_name.get(o.name), callers_of)
                     for o in d.instruction.operands[:2]]
            if len(found) != 2 or found[1] is None or found[0] is found[1]:
                continue
            rhs.add(argument_name(found[1]))  # the right operand is a weight (`h @ w_out` too)
            if found[0] is not None:
                lhs[argument_name(found[0])] = lhs.get(argument_name(found[0]), 0) + 1
    return rhs


def _per_chip_batch(ranked: list[str], params: Mapping[str, Any], integer: set[str], axis_sizes: Mapping[str, int],
                    partitioned: Any) -> tuple[float | None, float | None, str]:
    """(the batch's tokens, the tokens each chip holds, the argument read) from the first batch argument in
    `ranked` that is an array: its dims but the feature dim (all of an integer one's) over the mesh axes that split
    them, or its per-device shape in the partitioned module; (None, None, "") when none is."""
    for n in ranked:
        p = params.get(n)
        if p is None or not p.shape.is_array or not p.shape.dims:
            continue
        dims = list(p.shape.dims)
        kept = dims if n in integer else dims[:-1]  # an activation's last dim is its features
        if not kept:
            continue
        axes = list(sharding_axes(p) or [() for _ in dims])
        split = math.prod(int(axis_sizes.get(a, 1)) for k in range(len(kept)) if k < len(axes) for a in axes[k])
        tokens = float(math.prod(kept))
        per_chip = tokens / max(split, 1)
        local = _local_shape(partitioned, n)
        if local is not None and len(local) == len(dims):
            per_chip = float(math.prod(local[:len(kept)]))
        return tokens, per_chip, n
    return None, None, ""


def _local_shape(module: Any, name: str) -> tuple[int, ...] | None:
    """The per-device shape of the partitioned module's entry parameter named `name`, or None."""
    entry = getattr(module, "entry", None)
    for inst in (entry.instructions if entry is not None else ()):
        if inst.opcode == "parameter" and argument_name(inst) == name and inst.shape.is_array:
            return tuple(inst.shape.dims)
    return None


def dot_role(module: Any, comp: Any, dot: Any, args: Arguments, *, moved_by_all_to_all: bool = False,
             is_argument: Any = None) -> str:
    """One of `ROLES` for a dot of the partitioned module (see the module docstring).

    Args:
      args: the program's `Arguments`.
      moved_by_all_to_all: an all-to-all feeds the dot or moves its output.
      is_argument: (comp, inst) -> bool for operands the entry's names cannot reach (a loop body's weight
        slice): counted as weights, as `dataflow.is_program_argument` says.
    """
    from analyzer.analysis.mapping import pass_of

    entry = module.entry if module is not None else None
    names: list[str | None] = []
    weight = False
    for o in dot.operands[:2]:
        inst = comp.by_name.get(o.name)
        p = _traced(comp, inst) if inst is not None else None
        if p is not None and comp is entry:
            n = argument_name(p)
            names.append(n)
            weight = weight or n not in args.batch
        else:
            names.append(None)
            if inst is not None and is_argument is not None and is_argument(comp, inst):
                weight = True
    if any(n in args.tables for n in names if n):
        return "embedding"
    backward = pass_of(dot.metadata.op_name if dot.metadata else None) == "backward"
    from analyzer.analysis.dots import batch_dims as batch_dims_of

    batch_dims = bool(batch_dims_of(dot))
    if not weight:
        if moved_by_all_to_all:
            return "moe dispatch/combine"
        if not batch_dims or backward and _shaped_like_a_weight(module, dot, args):
            return "weight gradient" if backward else "forward"
        reads_weight = _weight_test(comp, entry, args, is_argument)
        if _next_to_an_expert(comp, dot, reads_weight):
            return "moe dispatch/combine"
        return "attention"
    return "activation gradient" if backward else "forward"


def _shaped_like_a_weight(module: Any, dot: Any, args: Arguments) -> bool:
    """Whether a dot's result has the dims of a weight argument (in any order; a stacked weight's also without its
    layer dim, for a scanned layer's gradient) as the partitioned module holds it: a batched weight gradient, such
    as an expert FFN's `dW_in[e, d, f] = routed[e, g, c, d]^T dh[e, g, c, f]` (the experts its batch dim), not
    attention's `QK^T`/`PV`, whose results are activations."""
    entry = getattr(module, "entry", None)
    if entry is None or not dot.shape.is_array:
        return False
    out = sorted(dot.shape.dims)
    for inst in entry.instructions:
        if inst.opcode != "parameter" or not inst.shape.is_array:
            continue
        if args.weights and argument_name(inst) not in args.weights:
            continue  # (a dump has no program before partitioning to tell weights: any argument's dims then)
        dims = list(inst.shape.dims)
        if sorted(dims) == out or (len(dims) > 2 and sorted(dims[1:]) == out):
            return True
    return False


def _weight_test(comp: Any, entry: Any, args: Arguments, is_argument: Any) -> Any:
    """inst -> whether `inst` is (a view of) a weight argument, as `dot_role` reads a dot's operands."""
    def test(inst: Any) -> bool:
        if inst is None:
            return False
        p = _traced(comp, inst)
        if p is not None and comp is entry:
            return argument_name(p) not in args.batch
        return bool(is_argument is not None and is_argument(comp, inst))
    return test


# (what a token's value passes through between a dispatch and its expert: moves, casts, activations, constraints)
_TO_EXPERT = _THROUGH | ELEMENTWISE | {"custom-call", "copy"}


def _is_expert_matmul(comp: Any, inst: Any, reads_weight: Any) -> bool:
    """An expert's FFN matmul: a dot with batch dims (the experts) that reads a weight (stacked over experts)."""
    from analyzer.analysis.dots import batch_dims as batch_dims_of

    return (inst.opcode == "dot" and bool(batch_dims_of(inst))
            and any(reads_weight(comp.by_name.get(o.name)) for o in inst.operands[:2]))


def _next_to_an_expert(comp: Any, dot: Any, reads_weight: Any, limit: int = 64) -> bool:
    """Whether a batched dot that reads no weight routes tokens to or from experts: its result reaches an expert's
    FFN matmul (the dispatch; the combine's backward), or one of its operands comes from one (the combine), through
    moves, casts and elementwise ops only. Attention's `QK^T` and `PV` do neither."""
    from analyzer.analysis.dataflow import nearest

    def expert(inst: Any) -> bool:
        return _is_expert_matmul(comp, inst, reads_weight)

    def passes(inst: Any) -> bool:
        return inst.opcode in _TO_EXPERT

    return any(nearest(comp, dot, forward, expert, passes, limit) is not None for forward in (True, False))
