"""Lark callbacks that turn HLO parse events into the IR of `analyzer.hlo.ir`, with no parse tree built.

The parser passes an instance of :class:`HloTransformer` to Lark (`transformer=`), so each grammar rule is
reduced straight into a dataclass or a small tuple. The transformer holds no state: everything a rule
needs arrives in its children. Checks that need a whole computation (operands defined before use,
duplicate names, one ROOT) run when the computation rule is reduced; checks that need the whole module
(called computations, duplicate computation names, the stack-frame tables) when the module is.
"""

from __future__ import annotations

import re
from difflib import get_close_matches
from functools import lru_cache

from lark import Token, Transformer

from analyzer.errors import HloSemanticError, HloSyntaxError
from analyzer.hlo import attributes
from analyzer.hlo.opcodes import OPCODES, REQUIRED_ATTRIBUTES, base_opcode, fixed_arity, is_known_opcode
from analyzer.hlo.ir import ELEMENT_BITS, Attribute, Computation, Frame, HloModule, Instruction, Layout, Operand, Position, Shape

__all__ = ["HloTransformer", "decode_array_shape", "build_computation", "build_module"]

_DIMS_SPLIT = re.compile(r"\s*,\s*")
_LAYOUT_ITEM = re.compile(r"T\(([^)]*)\)|S\((\d+)\)|([A-Z#*]+\([^)]*\))")


def _pos(tok: Token) -> Position:
    return Position(tok.line, tok.column)


def _name(tok: Token) -> str:
    return tok[1:] if tok.startswith("%") else str(tok)


def _syntax(msg: str, tok: Token, offset: int = 0) -> HloSyntaxError:
    return HloSyntaxError(msg, line=tok.line, column=tok.column + offset)


@lru_cache(maxsize=8192)
def decode_array_shape(text: str) -> Shape:
    """Decode one array-shape terminal: `bf16[8,<=16]{1,0:T(8,128)S(1)}`, `f32[]`, `token[]`, `s32[?]`.

    Memoised: a module repeats a few hundred distinct shapes thousands of times, and `Shape` is immutable.

    Args:
      text: the terminal's text.

    Returns:
      The `Shape`.

    Raises:
      ValueError: with a message in HLO terms; the caller adds the position.

    Example:
      >>> decode_array_shape("f32[2,<=4]{1,0}").dynamic
      (False, True)
    """
    open_ = text.index("[")
    close = text.index("]", open_)
    etype = text[:open_]
    if etype not in ELEMENT_BITS:
        raise ValueError(f"unknown element type {etype!r}; expected one of pred, s8..s64, u8..u64, f16, bf16, "
                         "f32, f64, c64, c128, f8 types, token, opaque")
    body = text[open_ + 1:close].strip()
    dims: list[int] = []
    dynamic: list[bool] = []
    if body:
        for item in _DIMS_SPLIT.split(body):
            dyn = False
            if item.startswith("<="):
                item = item[2:].strip()
                dyn = True
            if item == "?":
                dims.append(-1)
                dynamic.append(True)
                continue
            if not item.isdigit():
                raise ValueError(f"expected a dimension size like `8`, `<=8` or `?`, got {item!r}")
            dims.append(int(item))
            dynamic.append(dyn)
    if etype == "token" and dims:
        raise ValueError("a token shape has no dimensions: `token[]`")
    layout = None
    if close + 1 < len(text):
        layout = _decode_layout(text[close + 2:-1], len(dims))
        if layout.minor_to_major or dims:
            if len(layout.minor_to_major) != len(dims):
                raise ValueError(f"the layout lists {len(layout.minor_to_major)} dimensions but the shape has "
                                 f"{len(dims)}: expected a minor-to-major order like "
                                 f"{{{','.join(str(d) for d in reversed(range(len(dims))))}}}")
    return Shape(etype, tuple(dims), tuple(dynamic) if any(dynamic) else (), layout)


def _decode_layout(body: str, rank: int) -> Layout:
    """`1,0:T(8,128)(2,1)S(1)` -> Layout. The part after ':' keeps unknown items verbatim in `extra`."""
    m2m_text, _, rest = body.partition(":")
    m2m_text = m2m_text.strip()
    try:
        m2m = tuple(int(x) for x in m2m_text.split(",")) if m2m_text else ()
    except ValueError:
        raise ValueError(f"expected a layout like `{{1,0}}` (minor-to-major dims), got `{{{body}}}`") from None
    tiles: list[tuple[int, ...]] = []
    memory_space = None
    extra: list[str] = []
    if rest:
        i = 0
        n = len(rest)
        while i < n:
            c = rest[i]
            if c == "T":
                i += 1
                while i < n and rest[i] == "(":
                    j = rest.index(")", i)
                    inner = rest[i + 1:j]
                    try:
                        tiles.append(tuple(-1 if x.strip() == "*" else int(x) for x in inner.split(",")) if inner else ())
                    except ValueError:
                        raise ValueError(f"expected a tile like `T(8,128)`, got `T({inner})`") from None
                    i = j + 1
            elif c == "S" and i + 1 < n and rest[i + 1] == "(":
                j = rest.index(")", i)
                memory_space = int(rest[i + 2:j])
                extra.append(rest[i:j + 1])  # kept in place too: XLA wants layout items in its order
                i = j + 1
            elif c.isspace():
                i += 1
            else:
                j = rest.find(")", i)
                if j < 0:
                    extra.append(rest[i:])
                    break
                extra.append(rest[i:j + 1])
                i = j + 1
    return Layout(m2m, tuple(tiles), memory_space, "".join(extra))


# An instruction before its operands are resolved against the computation.
# (is_root, name_token, shape, opcode, operand (name_token, shape|None) list, attributes, parameter, literal)
_Pending = tuple


class HloTransformer(Transformer):
    """Rule callbacks for grammars/hlo.lark. Stateless; safe to share."""

    __slots__ = ()

    # ------------------------------------------------------------------ shapes
    def shape(self, children):
        tok = children[0]
        try:
            return decode_array_shape(str(tok))
        except ValueError as e:
            raise _syntax(str(e), tok) from None

    def tuple_shape(self, children):
        if children == [None]:
            return Shape("tuple")
        return Shape("tuple", tuple_shapes=tuple(children))

    # ------------------------------------------------------------------ literals
    # Each literal rule gives (text, kind, items): kind "s" scalar, "a" {array}, "p" (tuple or complex),
    # "t" shape-prefixed, "e" the elided `...`. `text` is the normalised spelling kept on the instruction.
    def scalar_literal(self, children):
        tok = children[0]
        return (str(tok), "s", tok)

    def array_literal(self, children):
        if children == [None]:
            return ("{}", "a", ())
        return ("{" + ", ".join(c[0] for c in children) + "}", "a", tuple(children))

    def paren_literal(self, children):
        if children == [None]:
            return ("()", "p", ())
        return ("(" + ", ".join(c[0] for c in children) + ")", "p", tuple(children))

    def shaped_literal(self, children):
        shape_tok, lit = children
        return (f"{shape_tok} {lit[0]}", "t", (shape_tok, lit))

    def elided_literal(self, children):
        return ("...", "e", children[0])

    # ------------------------------------------------------------------ instructions
    def operand(self, children):
        if len(children) == 1:
            return (children[0], None)
        return (children[1], children[0])

    def number_operand(self, children):
        return children[0]

    def nested_operand(self, children):
        # ("nested", children of an `instruction` rule without name and ROOT, opcode token)
        opcode = next(c for c in children if isinstance(c, Token) and c.type == "NAME")
        return ("nested", [c for c in children if c is not None], opcode)

    def nested_constant(self, children):
        return ("nested_constant", children, children[1])

    def attribute(self, children):
        tok = children[0]
        key, _, raw = tok.partition("=")
        stripped = raw.lstrip()
        if len(stripped) != len(raw):  # `key= value`: XLA skips the space; keep the value's own column
            return Attribute(key, stripped, None)
        return Attribute(key, raw, Position(tok.line, tok.column + len(key) + 1))

    module_attr = attribute

    def instruction(self, children):
        is_root = False
        i = 0
        if children[0].type == "ROOT":
            is_root = True
            i = 1
        if type(children[i + 1]) is Shape:
            name, shape, opcode = children[i], children[i + 1], children[i + 2]
        else:  # no shape written: inferred from the operands when the computation is built
            name, shape, opcode = children[i], None, children[i + 1]
            i -= 1
        if not is_known_opcode(opcode):
            raise _syntax(_unknown_opcode(str(opcode)), opcode)
        operands = []
        attrs = []
        parameter = None
        for c in children[i + 3:]:
            if c is None:
                continue
            if type(c) is Attribute:
                if c.key == "device_ids" and attrs and attrs[-1].raw.startswith("mesh"):
                    # `replica_groups=mesh[...], device_ids=(...) {...}` is one value that contains a comma.
                    prev = attrs[-1]
                    attrs[-1] = Attribute(prev.key, f"{prev.raw}, device_ids={c.raw}", prev.position)
                    continue
                attrs.append(c)
            elif type(c) is tuple:
                operands.append(c)
            else:  # a bare number: parameter(N)
                if opcode != "parameter" or parameter is not None or operands:
                    raise _syntax(f"expected an operand name like `%x`, got the number {c}; only "
                                  "`parameter(N)` takes a number", c)
                parameter = int(c)
        if opcode == "parameter" and parameter is None:
            raise _syntax("expected a parameter number: `parameter(0)`", opcode, len(opcode) + 1)
        arity = fixed_arity(opcode)
        if arity is not None and len(operands) != arity:
            raise _syntax(f"`{opcode}` expects {arity} operand{'s' if arity != 1 else ''}, but has {len(operands)}",
                          opcode, len(opcode))
        _check_required(str(opcode), attrs, opcode)
        return (is_root, name, shape, str(opcode), operands, tuple(attrs), parameter, None)

    def constant_instruction(self, children):
        is_root = False
        i = 0
        if children[0].type == "ROOT":
            is_root = True
            i = 1
        name, shape, opened, literal = children[i], children[i + 1], children[i + 2], children[i + 3]
        attrs = tuple(c for c in children[i + 4:] if c is not None)
        for leaf in shape.leaves():
            if leaf.layout is not None and sorted(leaf.layout.minor_to_major) != list(range(leaf.rank)):
                raise _syntax(f"the layout of constant {leaf} is not a permutation of its dimensions", name)
        _check_literal(literal, shape, opened)
        return (is_root, name, shape, "constant", [], attrs, None, literal[0])

    # ------------------------------------------------------------------ computations
    def param(self, children):
        tok, shape = children
        return (tok[:-1].lstrip("%"), shape)

    def signature(self, children):
        *params, result = children
        return (tuple(p for p in params if p is not None), result)

    def computation(self, children):
        is_entry = False
        i = 0
        if isinstance(children[0], Token) and children[0].type == "ENTRY":
            is_entry = True
            i = 1
        name_tok = children[i]
        sig = None
        rest = children[i + 1:]
        if rest and type(rest[0]) is tuple and len(rest[0]) == 2 and type(rest[0][1]) is Shape:
            sig = rest[0]
            rest = rest[1:]
        attrs = tuple(c for c in rest if type(c) is Attribute)
        if attrs:
            rest = [c for c in rest if type(c) is not Attribute]
        return build_computation(name_tok, is_entry, sig, rest, attrs)

    def computation_head(self, children):
        is_entry = isinstance(children[0], Token) and children[0].type == "ENTRY"
        rest = children[1:] if is_entry else children
        return (rest[0], is_entry, rest[1] if len(rest) > 1 else None)

    # ------------------------------------------------------------------ module
    def string_entry(self, children):
        tok, s = children
        return (int(tok), attributes.unquote(str(s)), tok)

    def braced_entry(self, children):
        tok, b = children
        return (int(tok), str(b), b)

    def file_names(self, children):
        return ("FileNames", children)

    def function_names(self, children):
        return ("FunctionNames", children)

    def file_locations(self, children):
        return ("FileLocations", children)

    def stack_frames(self, children):
        return ("StackFrames", children)

    def header(self, children):
        return build_module(children)

    def module_header(self, children):
        name = children[0]
        if name.type == "PARAM_NAME":  # `HloModule m:`
            name = Token("NAME", name[:-1], line=name.line, column=name.column)
        return ("header", name, [c for c in children[1:] if c is not None])

    def module(self, children):
        return build_module(children)



def build_computation(name_tok: Token, is_entry: bool, sig, pending: list, comp_attrs: tuple = ()) -> Computation:
    """Resolve operands against earlier instructions and check names and ROOT; return the Computation.

    Args:
      name_tok: the computation's name token (gives the position).
      is_entry: whether `ENTRY` preceded it.
      sig: `(params, result_shape)` from the signature, or None when it was omitted.
      pending: the instruction tuples made by `HloTransformer.instruction`.
      comp_attrs: attributes printed after the closing brace (`execution_thread="..."`).

    Returns:
      The `Computation`.

    Raises:
      HloSemanticError: undefined or later-defined operand, duplicate instruction name, two ROOTs, an
        empty computation, duplicate parameter numbers.
    """
    name = _name(name_tok)
    if any(len(o) > 2 for p in pending for o in p[4]):
        pending = _flatten_nested(pending)
    shapes: dict[str, Shape] = {}
    insts: list[Instruction] = []
    root_tok = None
    params: dict[int, Token] = {}
    for is_root, tok, shape, opcode, operands, attrs, parameter, literal in pending:
        iname = tok[1:] if tok[0] == "%" else str(tok)
        if iname in shapes:
            raise HloSemanticError(f"instruction name {iname!r} is already defined in computation {name!r}",
                                   line=tok.line, column=tok.column)
        if is_root:
            if root_tok is not None:
                raise HloSemanticError(f"computation {name!r} has two ROOT instructions (the first is at "
                                       f"line {root_tok.line})", line=tok.line, column=tok.column)
            root_tok = tok
        if parameter is not None:
            if parameter in params:
                raise HloSemanticError(f"parameter number {parameter} is used twice in computation {name!r}",
                                       line=tok.line, column=tok.column)
            if parameter < 0:
                raise HloSemanticError(f"parameter number {parameter} is negative", line=tok.line,
                                       column=tok.column)
            params[parameter] = tok
        ops = []
        for otok, oshape in operands:
            oname = otok[1:] if otok[0] == "%" else str(otok)
            known = shapes.get(oname)
            if known is None:
                raise HloSemanticError(f"operand {oname!r} of {iname!r} is not defined before it in computation "
                                       f"{name!r}", line=otok.line, column=otok.column)
            if oshape is not None and not compatible(oshape, known):
                raise HloSemanticError(f"operand {oname!r} of {iname!r} is written with shape {oshape}, but {oname!r} "
                                       f"has shape {known}", line=otok.line, column=otok.column)
            ops.append(Operand(oname, known))
        if shape is None:
            shape = _infer_shape(iname, tok, opcode, ops, attrs)
        if opcode == "custom-call" and attrs:
            _check_layout_constraints(iname, ops, attrs)
        elif opcode == "conditional" and ops:
            _check_conditional(iname, tok, ops, attrs)
        elif opcode == "parameter" and attrs:
            _check_parameter_replication(iname, shape, attrs)
        shapes[iname] = shape
        insts.append(Instruction(iname, opcode, shape, tuple(ops), attrs, is_root, Position(tok.line, tok.column),
                                 parameter, literal))
    if not insts:
        raise HloSemanticError(f"computation {name!r} has no instructions", line=name_tok.line,
                               column=name_tok.column)
    for inst in insts:
        a = next((x for x in inst.attributes if x.key == "control-predecessors"), None) if inst.attributes else None
        if a is not None:
            try:
                preds = attributes.parse_name_list(a.raw)
            except ValueError as e:
                pos = a.position or inst.position
                raise HloSyntaxError(f"bad control-predecessors on {inst.name!r}: {e}", line=pos.line,
                                     column=pos.column) from None
            defined_before = {i.name for i in insts[: insts.index(inst)]}
            for p in preds:
                if p not in defined_before:
                    pos = a.position or inst.position
                    raise HloSemanticError(f"control predecessor {p!r} of {inst.name!r} is not defined before it in "
                                           f"computation {name!r}", line=pos.line, column=pos.column)
    if params and sorted(params) != list(range(len(params))):
        missing = next(i for i in range(len(params)) if i not in params)
        raise HloSemanticError(f"computation {name!r} has parameters {sorted(params)}, but parameter({missing}) is "
                               "missing: numbers must run 0..N-1", line=name_tok.line, column=name_tok.column)
    if sig is not None:
        sig_params, result = sig
        param_shapes = sig_params
        # XLA reads the signature's parameters for their names only; it checks just the result shape.
        root = next((i for i in insts if i.is_root), insts[-1])
        if not compatible(result, root.shape):
            raise HloSemanticError(f"shape of computation {name!r}, {result}, is not compatible with that of its root "
                                   f"instruction {root.name!r}, {root.shape}", line=root.position.line,
                                   column=root.position.column)
    else:
        by_num = {i.parameter_number: i for i in insts if i.parameter_number is not None}
        param_shapes = tuple((by_num[k].name, by_num[k].shape) for k in sorted(by_num))
        result = None
    comp = Computation(name, tuple(insts), param_shapes, result, is_entry, Position(name_tok.line, name_tok.column),
                       comp_attrs)
    if result is None:
        object.__setattr__(comp, "result_shape", comp.root.shape)
    return comp


_INT_TYPES = frozenset(t for t in ELEMENT_BITS if t[0] in "su")
_FLOAT_TYPES = frozenset(t for t in ELEMENT_BITS if t[0] in "fb")
_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$")


def _unknown_opcode(opcode: str) -> str:
    if opcode.startswith("%"):
        return f"expected an opcode like `add` after the shape, got the name `{opcode}`"
    close = get_close_matches(opcode, OPCODES, n=3)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else \
        " (XLA opcodes are like add, dot, fusion, all-gather, custom-call)"
    return f"unknown opcode `{opcode}`{hint}"


def _check_required(opcode: str, attrs: list[Attribute], tok: Token) -> None:
    """The attributes XLA requires of `opcode` are present (conditional: either branch form)."""
    keys = {a.key for a in attrs}
    need = REQUIRED_ATTRIBUTES.get(opcode)
    if need is None and opcode.endswith("-start"):
        need = REQUIRED_ATTRIBUTES.get(base_opcode(opcode)) if base_opcode(opcode) == "custom-call" else None
    for key in need or ():
        if key not in keys:
            raise _syntax(f"`{opcode}` needs the attribute `{key}=`", tok)
    if opcode == "conditional" and "branch_computations" not in keys and not (
            "true_computation" in keys and "false_computation" in keys):
        raise _syntax("`conditional` needs `branch_computations={...}` or `true_computation=` and "
                      "`false_computation=`", tok)
    if "use_global_device_ids" in keys and "channel_id" not in keys:
        for a in attrs:
            if a.key == "use_global_device_ids" and a.raw == "true":
                raise _syntax("use_global_device_ids=true needs a channel_id", tok)


_SAME_SHAPE_OPS = frozenset({
    "abs", "negate", "exponential", "exponential-minus-one", "log", "log-plus-one", "logistic", "tanh", "tan",
    "sqrt", "rsqrt", "cbrt", "cosine", "sine", "floor", "ceil", "copy", "sign", "not", "erf", "round-nearest-afz",
    "round-nearest-even", "popcnt", "count-leading-zeros", "atan2", "add", "subtract", "multiply", "divide",
    "maximum", "minimum", "power", "remainder", "and", "or", "xor", "shift-left", "shift-right-arithmetic",
    "shift-right-logical", "reduce-precision", "add-dependency", "opt-barrier",
})


def _flatten_nested(pending: list) -> list:
    """Turn nested operands (`add(f32[2] parameter(0), negate(x))`) into instructions of their own, named as
    XLA names them (`parameter.anon`, `parameter.anon.1`, ...), each placed just before its user."""
    transformer = HloTransformer()
    taken = {(p[1][1:] if p[1][0] == "%" else str(p[1])) for p in pending}
    counts: dict[str, int] = {}
    out: list = []

    def fresh(opcode: str) -> str:
        base = f"{opcode}.anon"
        while True:
            n = counts.get(base, 0)
            counts[base] = n + 1
            candidate = base if n == 0 else f"{base}.{n}"
            if candidate not in taken:
                taken.add(candidate)
                return candidate

    def expand(operands: list) -> list:
        resolved = []
        for o in operands:
            if len(o) == 2:
                resolved.append(o)
                continue
            kind, children, op_tok = o
            anon = Token("NAME", fresh(str(op_tok) if kind == "nested" else "constant"), line=op_tok.line,
                         column=op_tok.column)
            if kind == "nested":
                inner = transformer.instruction([anon] + children)
                inner = inner[:4] + (expand(inner[4]),) + inner[5:]
            else:
                inner = transformer.constant_instruction([anon] + children)
            out.append(inner)
            resolved.append((anon, None))
        return resolved

    for p in pending:
        operands = expand(p[4]) if any(len(o) > 2 for o in p[4]) else p[4]
        out.append(p[:4] + (operands,) + p[5:])
    return out


def _infer_shape(iname: str, tok, opcode: str, ops: list, attrs: tuple) -> Shape:
    """The shape XLA infers for an instruction written without one (the cases its parser's tests use)."""
    def fail(why: str = "") -> HloSyntaxError:
        return HloSyntaxError(f"cannot infer the shape of `{opcode}` {iname!r}{why}; write it, e.g. "
                              f"`%{iname} = f32[2] {opcode}(...)`", line=tok.line, column=tok.column)

    shapes = [o.shape for o in ops]
    if any(s is None for s in shapes):
        raise fail()
    if opcode in _SAME_SHAPE_OPS and shapes:
        return shapes[0]
    if opcode in ("compare", "is-finite") and shapes:
        return Shape("pred", shapes[0].dims, shapes[0].dynamic)
    if opcode in ("select", "clamp") and len(shapes) == 3:
        return shapes[1]
    if opcode in ("real", "imag") and shapes and shapes[0].element_type in ("c64", "c128"):
        return Shape("f32" if shapes[0].element_type == "c64" else "f64", shapes[0].dims, shapes[0].dynamic)
    if opcode == "tuple":
        return Shape("tuple", tuple_shapes=tuple(shapes))
    if opcode == "get-tuple-element" and shapes and shapes[0].is_tuple:
        a = next((x for x in attrs if x.key == "index"), None)
        if a is not None and a.raw.isdigit() and int(a.raw) < len(shapes[0].tuple_shapes):
            return shapes[0].tuple_shapes[int(a.raw)]
        raise fail(": its index is missing or out of range")
    if opcode == "dot" and len(shapes) >= 2:
        def dims(key: str) -> tuple[int, ...]:
            a = next((x for x in attrs if x.key == key), None)
            return attributes.parse_int_list(a.raw) if a is not None else ()
        lhs, rhs = shapes[0], shapes[1]
        lb, lc, rb, rc = dims("lhs_batch_dims"), dims("lhs_contracting_dims"), dims("rhs_batch_dims"), \
            dims("rhs_contracting_dims")
        try:
            out = [lhs.dims[d] for d in lb]
            out += [n for d, n in enumerate(lhs.dims) if d not in lb and d not in lc]
            out += [n for d, n in enumerate(rhs.dims) if d not in rb and d not in rc]
        except IndexError:
            raise fail(": its dimension numbers do not fit the operands") from None
        return Shape(lhs.element_type, tuple(out))
    raise fail()


def _check_conditional(iname: str, tok, ops: list, attrs: tuple) -> None:
    """XLA: the selector is a scalar; s32 with branch_computations, pred with true/false_computation."""
    sel = ops[0].shape
    keys = {a.key for a in attrs}
    want = "s32" if "branch_computations" in keys else "pred"
    if sel is not None and (sel.is_tuple or sel.dims or sel.element_type != want):
        raise HloSemanticError(f"the first operand of conditional {iname!r} must be a {want}[] scalar "
                               f"({'branch_computations' if want == 's32' else 'true/false_computation'}), "
                               f"got {sel}", line=tok.line, column=tok.column)


def _check_parameter_replication(iname: str, shape: Shape, attrs: tuple) -> None:
    """parameter_replication={...} has one entry per leaf buffer of the parameter."""
    a = next((x for x in attrs if x.key == "parameter_replication"), None)
    if a is None:
        return
    body = a.raw.strip()[1:-1].strip()
    n = len([x for x in body.split(",") if x.strip()]) if body else 0
    leaves = sum(1 for _ in shape.leaves())
    if n != leaves:
        raise HloSemanticError(f"parameter {iname!r} has {leaves} leaf buffers, but parameter_replication has {n} "
                               "elements", line=a.position.line if a.position else None,
                               column=a.position.column if a.position else None)


def _check_layout_constraints(iname: str, ops: list, attrs: tuple) -> None:
    """A custom-call's operand_layout_constraints: one shape per operand, each compatible with it."""
    a = next((x for x in attrs if x.key == "operand_layout_constraints"), None)
    if a is None:
        return
    try:
        shapes = attributes.parse_shape_list(a.raw)
    except ValueError as e:
        raise HloSyntaxError(f"bad operand_layout_constraints on {iname!r}: {e}", line=a.position.line if a.position
                             else None, column=a.position.column if a.position else None) from None
    where = dict(line=a.position.line, column=a.position.column) if a.position else {}
    if len(shapes) != len(ops):
        raise HloSemanticError(f"{iname!r} has {len(ops)} operands but operand_layout_constraints gives "
                               f"{len(shapes)} shapes", **where)
    for k, (want, op) in enumerate(zip(shapes, ops)):
        if op.shape is not None and not compatible(want, op.shape):
            raise HloSemanticError(f"operand_layout_constraints of {iname!r}: {want} is not compatible with operand "
                                   f"{k} ({op.name!r}, {op.shape})", **where)


def compatible(a: Shape, b: Shape) -> bool:
    """XLA's `ShapeUtil::Compatible`: same element types and dims (tuples element-wise), layouts ignored."""
    if a.is_tuple or b.is_tuple:
        return (a.is_tuple and b.is_tuple and len(a.tuple_shapes) == len(b.tuple_shapes)
                and all(compatible(x, y) for x, y in zip(a.tuple_shapes, b.tuple_shapes)))
    return a.element_type == b.element_type and a.dims == b.dims


def _check_literal(lit: tuple, shape: Shape, tok: Token) -> None:
    """Check that a literal's nesting, element counts and scalar kinds fit its shape, as XLA does.

    Raises:
      HloSyntaxError: at the literal, saying what the shape needs.
    """
    text, kind, items = lit
    if kind == "e" or (kind == "a" and len(items) == 1 and items[0][1] == "e"):
        return  # `{...}`: elided by the printer, XLA fills it in
    if kind == "t":
        shape_tok, inner = items
        try:
            declared = decode_array_shape(str(shape_tok))
        except ValueError as e:
            raise _syntax(str(e), shape_tok) from None
        if str(declared) != str(shape):
            raise _syntax(f"the literal's shape {declared} differs from the instruction's shape {shape}", shape_tok)
        _check_literal(inner, shape, tok)
        return
    if shape.is_tuple:
        if kind != "p" or len(items) != len(shape.tuple_shapes):
            raise _syntax(f"expected a tuple literal `( ... )` with {len(shape.tuple_shapes)} elements for shape "
                          f"{shape}", tok, len(tok))
        for item, sub in zip(items, shape.tuple_shapes):
            _check_literal(item, sub, tok)
        return
    if shape.is_token:
        raise _syntax("a token has no literal", tok, len(tok))
    _check_array_literal(lit, shape, 0, tok)


def _check_array_literal(lit: tuple, shape: Shape, level: int, tok: Token) -> None:
    text, kind, items = lit
    dims = shape.dims
    if level < len(dims):
        if kind != "a":
            raise _syntax(f"expected {{...}} for dimension {level} of shape {shape}, got `{text[:30]}`", tok, len(tok))
        if len(items) == 1 and items[0][1] == "e":
            return
        if len(items) != dims[level] and not shape.dynamic:
            raise _syntax(f"expected {dims[level]} elements in dimension {level} of shape {shape}, got {len(items)}",
                          tok, len(tok))
        for item in items:
            _check_array_literal(item, shape, level + 1, tok)
        return
    _check_scalar(lit, shape.element_type, tok)


# Largest finite value and the width of the last step below infinity (values at or past the midpoint
# round to infinity, which XLA's parser rejects as out of range), and the mantissa bits that bound a NaN
# payload (None: the type has no NaN payloads).
_FLOAT_LIMITS: dict[str, tuple[float, float, int | None]] = {
    "f16": (65504.0, 32.0, 10),
    "bf16": ((2 - 2**-7) * 2.0**127, 2.0**120, 7),
    "f32": ((2 - 2**-23) * 2.0**127, 2.0**104, 23),
    "f64": (1.7976931348623157e308, 0.0, 52),
}
_NO_NAN_PAYLOAD = frozenset({"f8e4m3fn", "f8e4m3b11fnuz", "f8e4m3fnuz", "f8e5m2fnuz", "f8e8m0fnu", "f4e2m1fn"})
_NAN_RE = re.compile(r"-?nan(?:\(0x([0-9a-fA-F]+)\))?$")


def _check_scalar(lit: tuple, etype: str, tok: Token) -> None:
    text, kind, value = lit
    if etype in ("c64", "c128"):
        part = "f32" if etype == "c64" else "f64"
        if kind == "p" and len(value) == 2 and all(v[1] == "s" for v in value):
            for v in value:
                _check_scalar(v, part, tok)
            return
        if kind == "s":
            _check_scalar(lit, part, tok)
            return
        raise _syntax(f"expected a complex value like `(1, 2)`, got `{text[:30]}`", tok, len(tok))
    if kind != "s":
        raise _syntax(f"expected a scalar {etype} value, got `{text[:30]}`", tok, len(tok))
    if etype == "pred":  # XLA takes true, false or an integer (non-zero is true)
        if text not in ("true", "false") and not re.fullmatch(r"-?\d+", text):
            raise _syntax(f"expected a pred value (true, false or an integer), got `{text}`", value)
        return
    if text in ("true", "false"):
        raise _syntax(f"expected a number for {etype}, got `{text}`", value)
    if etype in _INT_TYPES:
        if not re.fullmatch(r"-?\d+", text):
            raise _syntax(f"expected an integer for {etype}, got `{text}`", value)
        bits = ELEMENT_BITS[etype]
        v = int(text)
        if etype[0] == "s":
            lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        elif etype == "u64":  # XLA reads u64 through int64 and reinterprets: -1 is accepted
            lo, hi = -(1 << 63), (1 << 64) - 1
        else:
            lo, hi = 0, (1 << bits) - 1
        if not lo <= v <= hi:
            raise _syntax(f"{text} is out of range for {etype} [{lo}, {hi}]", value)
        return
    nan = _NAN_RE.match(text)
    if nan:
        if nan.group(1) is not None:
            payload = int(nan.group(1), 16)
            bits = _FLOAT_LIMITS.get(etype, (0, 0, None))[2]
            if etype in _NO_NAN_PAYLOAD or (bits is not None and payload >= (1 << bits)) or payload == 0:
                raise _syntax(f"NaN payload 0x{nan.group(1)} does not fit {etype}", value)
        return
    if text.lstrip("-") == "inf":
        return
    limits = _FLOAT_LIMITS.get(etype)
    if limits is not None:
        top, step, _ = limits
        v = abs(float(text))
        if v == float("inf") or (step and v >= top + step / 2) or (not step and v > top):
            raise _syntax(f"{text} is out of range for {etype} (largest finite value {top:g})", value)


def check_computations(comps: list[Computation]) -> Computation | None:
    """Module-level checks: unique computation names, at most one ENTRY, every called computation defined.

    Returns:
      The ENTRY computation, or None when none is marked.

    Raises:
      HloSemanticError: at the offending computation or attribute.
    """
    seen: dict[str, Computation] = {}
    entry = None
    for c in comps:
        if c.name in seen:
            raise HloSemanticError(f"computation name {c.name!r} is already defined at line {seen[c.name].position}",
                                   line=c.position.line, column=c.position.column)
        if c.is_entry:
            if entry is not None:
                raise HloSemanticError(f"two ENTRY computations: {entry.name!r} and {c.name!r}",
                                       line=c.position.line, column=c.position.column)
            entry = c
        for inst in c.instructions:
            for callee in attributes.called_computations(inst):
                if callee not in seen:  # XLA resolves calls as it reads: the callee must come first
                    where = ("defined after its caller; XLA needs it before" if any(x.name == callee for x in comps)
                             else "not defined")
                    a = _call_attr(inst, callee)
                    raise HloSemanticError(f"{inst.name!r} calls computation {callee!r}, which is {where}",
                                           line=a.line, column=a.column)
        seen[c.name] = c
    return entry

def build_module(children: list) -> HloModule:
    """Assemble the module: header attributes, frames from the tables, computations; module-level checks.

    Raises:
      HloSemanticError: duplicate computation names, a call to a computation that is not defined, two ENTRYs,
        a stack frame that refers to a missing table row.
    """
    name_tok = None
    attrs: dict[str, str] = {}
    tables: dict[str, list] = {}
    comps: list[Computation] = []
    for c in children:
        if type(c) is tuple and c[0] == "header":
            name_tok = c[1]
            for a in c[2]:
                _check_module_attribute(a)
                attrs[a.key] = a.raw
        elif type(c) is tuple:
            tables.setdefault(c[0], []).extend(c[1])
        elif c is not None:
            comps.append(c)
    entry = check_computations(comps)
    frames = _frames(tables)
    if name_tok is not None:
        name = _name(name_tok)
    else:
        name = "module_" + (entry or comps[-1]).name if comps else "module"  # XLA's name for a header-less module
    return HloModule(name, tuple(comps), attrs, frames)


_LAYOUT_SHAPE = re.compile(r"[A-Za-z][A-Za-z0-9]*\[[^\]]*\](?:\{[^{}]*\})?")


_SHAPE_INDEX = r"\{\s*(?:\d+\s*(?:,\s*\d+\s*)*)?\}"
_ALIAS_ITEM = re.compile(r"\s*" + _SHAPE_INDEX + r"\s*:\s*\(\s*\d+\s*,\s*" + _SHAPE_INDEX
                         + r"\s*(?:,\s*(?:must-alias|may-alias)\s*)?\)\s*")
_DONOR_ITEM = re.compile(r"\s*\(\s*\d+\s*,\s*" + _SHAPE_INDEX + r"\s*\)\s*")


def _check_items(a: Attribute, item: re.Pattern, example: str) -> None:
    body = a.raw.strip()
    ok = body.startswith("{") and body.endswith("}")
    if ok:
        inner = body[1:-1].strip()
        if inner:
            from analyzer.hlo.attributes import split_top

            try:
                ok = all(item.fullmatch(x) for x in split_top(inner))
            except ValueError:
                ok = False
    if not ok:
        raise HloSyntaxError(f"expected {a.key} like {example}", line=a.position.line if a.position else None,
                             column=a.position.column if a.position else None)


def _check_module_attribute(a: Attribute) -> None:
    """Check the header attributes whose syntax XLA checks: aliasing, buffer donors, the entry layout."""
    if a.key == "input_output_alias":
        _check_items(a, _ALIAS_ITEM, "`{ {0}: (0, {}, may-alias), {1}: (1, {0}) }`")
        return
    if a.key == "buffer_donor":
        _check_items(a, _DONOR_ITEM, "`{ (0, {0}), (1, {}) }`")
        return
    if a.key != "entry_computation_layout":
        return
    body = a.raw.strip()
    if not (body.startswith("{") and body.endswith("}") and "->" in body):
        raise HloSyntaxError("expected entry_computation_layout={(f32[2]{0}, ...)->f32[2]{0}}",
                             line=a.position.line if a.position else None,
                             column=a.position.column if a.position else None)
    for m in _LAYOUT_SHAPE.finditer(body):
        try:
            decode_array_shape(m.group())
        except ValueError as e:
            raise HloSyntaxError(f"entry_computation_layout: {e}", line=a.position.line if a.position else None,
                                 column=(a.position.column + m.start()) if a.position else None) from None
    from lark.exceptions import LarkError

    from analyzer.hlo.parser import _lark  # the compiled grammar (imported here: parser imports this module)

    try:
        _lark().parse(body, start="program_layout")
    except LarkError as e:
        col = getattr(e, "column", None)
        line = getattr(e, "line", None)
        raise HloSyntaxError("expected entry_computation_layout={(f32[2]{0}, ...)->f32[2]{0}}",
                             line=(a.position.line + (line or 1) - 1) if a.position else None,
                             column=(a.position.column + (col or 1) - 1) if a.position and line in (1, None)
                             else col) from None


def _call_attr(inst: Instruction, callee: str) -> Position:
    for a in inst.attributes:
        if callee in a.raw and a.position is not None:
            return a.position
    return inst.position or Position(1, 1)


def _frames(tables: dict[str, list]) -> dict[int, Frame]:
    """Resolve StackFrames through FileLocations, FileNames and FunctionNames (ids are 1-based)."""
    if "StackFrames" not in tables:
        return {}
    files = {i: s for i, s, _ in tables.get("FileNames", ())}
    funcs = {i: s for i, s, _ in tables.get("FunctionNames", ())}
    locs: dict[int, dict[str, int]] = {}
    for i, text, tok in tables.get("FileLocations", ()):
        locs[i] = _int_fields(text, tok)
    frames: dict[int, Frame] = {}
    for i, text, tok in tables["StackFrames"]:
        f = _int_fields(text, tok)
        # XLA accepts a frame whose location is missing from the table; it resolves to an unknown place.
        loc = locs.get(f.get("file_location_id", -1), {})
        parent = f.get("parent_frame_id", 0)
        frames[i] = Frame(
            id=i,
            file=files.get(loc.get("file_name_id", -1), ""),
            function=funcs.get(loc.get("function_name_id", -1), ""),
            line=loc.get("line", 0),
            column=loc.get("column", 0),
            end_line=loc.get("end_line"),
            end_column=loc.get("end_column"),
            # XLA prints the parent one higher than its id; 0 (and so 1) means no parent.
            parent=parent - 1 if parent > 1 else None,
        )
    return frames


_KV = re.compile(r"([A-Za-z_]\w*)=(-?\d+)")


def _int_fields(text: str, tok: Token) -> dict[str, int]:
    body = text[1:-1].strip()
    out = {k: int(v) for k, v in _KV.findall(body)}
    if _KV.sub("", body).strip():
        raise HloSyntaxError(f"expected `key=number` pairs inside {text}", line=tok.line, column=tok.column)
    return out
