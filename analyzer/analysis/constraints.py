"""The user's `jax.lax.with_sharding_constraint`s and the layout their values have without them (issue 26 item 6).

A constraint asks XLA for a layout; when the value arrives in another one, XLA inserts the collectives that
reshard it on the way in and out, at the matmuls around it. Which layout the value has on its own is read from the
program jax handed XLA (`ModelFlops.module`), where every constraint is a `Sharding` custom-call that still names
its line: the value's dims are followed back through elementwise ops, casts, broadcasts, transposes, calls (a
`jax.nn.relu` is a nested jit) and matmuls (a dot's output dims are its batch dims, the left operand's free dims
and the right operand's) to the program's arguments, whose PartitionSpecs say which mesh axes each dim carries:
`relu(x @ w_in)` with `x: P('data')` and `w_in: P(None, 'model')` is `P('data', None, 'model')` on its own. A matmul
that contracts a split dim leaves partial sums, whose layout (reduce-scattered or all-reduced) is the constraint's
to choose: its value's layout is unknown. Another line's constraint upstream is the layout the user declared
there (an expert layer's routed tokens `P('expert', 'data')`), so it is read as written; one of the same line (the
same constraint in an earlier layer) is looked through. A dim no argument reaches is
unknown, and so is the whole layout then: `natural` is only given when every mesh axis it places is found.

`constraints(model_flops, specs)` -> one `Constraint` per source line (the forward constraint and the one jax's
transpose adds for the backward pass share it), with the lines of the matmuls that make its value and use it,
where its reshards land.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from analyzer.hlo.opcodes import ELEMENTWISE, RELABEL

__all__ = ["Constraint", "constraints", "constraint_axes"]

_PER_VALUE = re.compile(r"<@[\w.]+, \[(.*?)\]>")
_GROUP = re.compile(r"\{([^{}]*)\}")
# ops whose result dims are their (same-shaped) operands' dims
_SAME = ELEMENTWISE | {"convert", "copy", "call", "custom-call", "select", "clamp", "reduce-precision"}


@dataclass(frozen=True)
class Constraint:
    """One with_sharding_constraint line of the program.

    Attributes:
      line: its user frame, `file:line`.
      spec: the mesh axes each dim is constrained to (as written).
      natural: the mesh axes each dim carries from the arguments with no constraint; None when not all are known.
      lines: the user lines of the matmuls that make the constrained value and of those that use it.
      shape: the constrained value's global shape.
    """

    line: str
    spec: tuple[tuple[str, ...], ...]
    natural: tuple[tuple[str, ...], ...] | None
    lines: frozenset[str]
    shape: tuple[int, ...]

    @property
    def moved_axes(self) -> frozenset[str]:
        """The mesh axes the constraint places on other dims than the value has them (or drops, or adds)."""
        if self.natural is None:
            return frozenset()
        out = set()
        for want, have in zip(self.spec, self.natural):
            out |= set(want) ^ set(have)
        return frozenset(out)


def constraint_axes(inst: Any) -> tuple[tuple[str, ...], ...] | None:
    """The mesh axes of each dim a `Sharding` custom-call constrains its value to: its Shardy attribute as jax 0.10
    writes it (`#sdy.sharding_per_value<[<@mesh, [{}, {}, {"model"}]>]>`) or the named sharding jax 0.11+'s XLA
    prints (`{mesh['data'=4,'model'=2], [{}, {}, {'model'}]}`); None for another form.

    Example:
        `#sdy.sharding_per_value<[<@mesh, [{"data"}, {}]>]>` -> (("data",), ())
    """
    text = inst.frontend_attributes.get("xla.sdy.sharding", "")
    m = _PER_VALUE.search(text) if text else None
    if m is not None:
        return tuple(tuple(re.findall(r'\\?"([^"\\]+)\\?"', g)) for g in _GROUP.findall(m.group(1)))
    from analyzer.hlo.sharding import named_axes

    named = named_axes(inst.attr("sharding") or "")
    if named is not None and not named and inst.shape.dims:
        return tuple(() for _ in inst.shape.dims)
    return named


def _is_constraint(inst: Any) -> bool:
    md = inst.metadata
    return (inst.opcode == "custom-call" and md is not None
            and (md.op_name or "").rstrip("/").endswith("sharding_constraint"))


def constraints(model_flops: Any, specs: Mapping[str, tuple[tuple[str, ...], ...]]) -> list[Constraint]:
    """The program's with_sharding_constraints, one per line (see the module docstring).

    Args:
      model_flops: the report's `ModelFlops` (its `module` is the program jax handed XLA).
      specs: each argument's mesh axes by dim (`analyzer.analysis.roles.Arguments.specs`).
    """
    from analyzer.analysis.mapping import user_frame
    from analyzer.analysis.roles import argument_name

    module = getattr(model_flops, "module", None)
    if module is None or module.entry is None:
        return []

    def line_of(inst: Any) -> str:
        md = inst.metadata
        return user_frame(module, md.stack_frame_id, md.source_file, md.source_line) if md is not None else ""

    found: dict[str, Constraint] = {}
    for comp in module.computations:
        users: dict[str, list[Any]] = {}
        for inst in comp.instructions:
            for name in inst.operand_names:
                users.setdefault(name, []).append(inst)
        for inst in comp.instructions:
            if not _is_constraint(inst) or not inst.shape.is_array:
                continue
            line = line_of(inst)
            reader = _Layouts(comp, specs, argument_name, lambda i, line=line: line_of(i) == line)
            spec = constraint_axes(inst)
            if not line or spec is None or len(spec) != len(inst.shape.dims):
                continue
            natural = reader.layout(comp.by_name.get(inst.operand_names[0])) if inst.operand_names else None
            complete = natural is not None and all(d is not None for d in natural)
            lines = {line_of(d) for d in reader.dots_before(inst) + _dots_after(inst, users)} - {""}
            old = found.get(line)
            if old is not None and (old.natural is not None or not complete):
                found[line] = Constraint(line, old.spec, old.natural, old.lines | lines, old.shape)
                continue
            found[line] = Constraint(line, spec, tuple(tuple(d) for d in natural) if complete else None,
                                     frozenset(lines | (old.lines if old else set())), tuple(inst.shape.dims))
    return list(found.values())


def _dots_after(inst: Any, users: Mapping[str, list[Any]], limit: int = 32) -> list[Any]:
    """The matmuls the constrained value reaches through elementwise ops and relabellings."""
    out, frontier, seen = [], [inst], {inst.name}
    while frontier and len(seen) < limit:
        nxt = []
        for cur in frontier:
            for u in users.get(cur.name, ()):
                if u.name in seen:
                    continue
                seen.add(u.name)
                if u.opcode == "dot":
                    out.append(u)
                elif u.opcode in _SAME or u.opcode in RELABEL:
                    nxt.append(u)
        frontier = nxt
    return out


class _Layouts:
    """The mesh axes each dim of a value of one computation carries from the arguments (memoised per value)."""

    def __init__(self, comp: Any, specs: Mapping[str, tuple[tuple[str, ...], ...]], name_of: Any,
                 judged: Any) -> None:
        self.comp, self.specs, self.name_of, self.judged = comp, specs, name_of, judged
        self.memo: dict[str, list[tuple[str, ...] | None] | None] = {}
        self.dots: dict[str, list[Any]] = {}

    def dots_before(self, inst: Any) -> list[Any]:
        """The matmuls whose output the constrained value is (through the ops `layout` follows)."""
        out: list[Any] = []
        frontier, seen = [inst], {inst.name}
        while frontier and len(seen) < 64:
            nxt = []
            for cur in frontier:
                for name in cur.operand_names:
                    op = self.comp.by_name.get(name)
                    if op is None or op.name in seen or not op.shape.is_array:
                        continue
                    seen.add(op.name)
                    if op.opcode == "dot":
                        out.append(op)
                    elif op.opcode in _SAME and op.shape.dims == inst.shape.dims:
                        nxt.append(op)
            frontier = nxt
        return out

    def layout(self, inst: Any, depth: int = 0) -> list[tuple[str, ...] | None] | None:
        if inst is None or not inst.shape.is_array or depth > 48:
            return None
        if inst.name not in self.memo:
            self.memo[inst.name] = None  # (a cycle reads as unknown)
            self.memo[inst.name] = self._layout(inst, depth)
        return self.memo[inst.name]

    def _operand(self, inst: Any, k: int, depth: int) -> list[tuple[str, ...] | None] | None:
        return self.layout(self.comp.by_name.get(inst.operand_names[k]), depth + 1) \
            if k < len(inst.operand_names) else None

    def _layout(self, inst: Any, depth: int) -> list[tuple[str, ...] | None] | None:
        rank = len(inst.shape.dims)
        op = inst.opcode
        if op == "parameter":
            spec = self.specs.get(self.name_of(inst))
            return [tuple(d) for d in spec] if spec is not None and len(spec) == rank else None
        if op == "dot":
            return self._dot(inst, depth)
        if _is_constraint(inst) and not self.judged(inst):  # another line's: the layout declared there
            spec = constraint_axes(inst)
            return [tuple(d) for d in spec] if spec is not None and len(spec) == rank else None
        if op == "transpose":
            perm = [int(x) for x in re.findall(r"\d+", inst.attr("dimensions") or "")]
            src = self._operand(inst, 0, depth)
            return [src[p] for p in perm] if src is not None and len(perm) == rank else None
        if op == "broadcast":
            dims = [int(x) for x in re.findall(r"\d+", inst.attr("dimensions") or "")]
            src = self._operand(inst, 0, depth)
            if src is None or len(dims) != len(src):
                return None
            out: list[tuple[str, ...] | None] = [None] * rank
            for i, d in enumerate(dims):
                out[d] = src[i]
            return out
        if op in _SAME or op in RELABEL and all(
                (o := self.comp.by_name.get(n)) is not None and o.shape.is_array and o.shape.dims == inst.shape.dims
                for n in inst.operand_names[:1]):
            return self._merged(inst, depth)
        return None

    def _merged(self, inst: Any, depth: int) -> list[tuple[str, ...] | None] | None:
        """An elementwise op: each dim's axes from the first of its same-shaped operands that knows them."""
        out: list[tuple[str, ...] | None] = [None] * len(inst.shape.dims)
        known = False
        for k, name in enumerate(inst.operand_names):
            o = self.comp.by_name.get(name)
            if o is None or not o.shape.is_array or o.shape.dims != inst.shape.dims:
                continue
            src = self._operand(inst, k, depth)
            if src is None:
                continue
            known = True
            out = [_either(a, b) for a, b in zip(out, src)]
        return out if known else None

    def _dot(self, dot: Any, depth: int) -> list[tuple[str, ...] | None] | None:
        """A dot's output dims: its batch dims, the left operand's free dims, the right operand's."""
        from analyzer.analysis.dots import batch_dims, contracting_dims

        sides = [self._operand(dot, k, depth) for k in (0, 1)]
        ranks = [len(self.comp.by_name[n].shape.dims) if n in self.comp.by_name else 0
                 for n in dot.operand_names[:2]]
        for k in (0, 1):  # a contraction over a split dim leaves partial sums: where they go is the user's choice
            if sides[k] is not None and any(sides[k][d] for d in contracting_dims(dot, k) if d < len(sides[k])):
                return None
        out: list[tuple[str, ...] | None] = []
        for i, b in enumerate(batch_dims(dot, 0)):
            rb = batch_dims(dot, 1)[i] if i < len(batch_dims(dot, 1)) else None
            lhs = sides[0][b] if sides[0] is not None else None
            rhs = sides[1][rb] if sides[1] is not None and rb is not None else None
            out.append(_either(lhs, rhs))
        for k in (0, 1):
            skip = set(batch_dims(dot, k)) | set(contracting_dims(dot, k))
            for d in range(ranks[k]):
                if d not in skip:
                    out.append(sides[k][d] if sides[k] is not None else None)
        if len(out) != len(dot.shape.dims) or all(d is None for d in out):
            return None
        return _deduplicated(out)


def _either(a: tuple[str, ...] | None, b: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """One dim's axes from two operands: the first that splits it, else the first known."""
    return a if a else (b if b else (a if a is not None else b))


def _deduplicated(dims: list[tuple[str, ...] | None]) -> list[tuple[str, ...] | None]:
    """Each mesh axis on one dim only (the first that carries it): a value cannot be split twice over one axis."""
    seen: set[str] = set()
    out: list[tuple[str, ...] | None] = []
    for d in dims:
        if d is None:
            out.append(None)
            continue
        out.append(tuple(a for a in d if a not in seen))
        seen |= set(d)
    return out
