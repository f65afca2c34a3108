"""Lark callbacks that turn HLO parse events into the IR of `analyzer.hlo.ir`, with no parse tree built.

The parser passes an instance of :class:`HloTransformer` to Lark (`transformer=`), so each grammar rule is
reduced straight into a dataclass or a small tuple. The transformer holds no state: everything a rule
needs arrives in its children. It only builds: names are resolved (an operand must be defined before its
user, names are unique) because the IR cannot be built otherwise, and shapes left out are inferred. Every
other rule of what XLA accepts lives in `analyzer.hlo.verifier`, which these callbacks call at the point
where the pieces it checks are at hand (like XLA's HloVerifier, kept apart from its parser).
"""

from __future__ import annotations

import operator
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from lark import Token, Transformer

from analyzer.errors import HloSemanticError, HloSyntaxError
from analyzer.hlo import attributes, verifier
from analyzer.hlo.ir import (Attribute, Computation, Frame, HloModule, Instruction, Operand, Position, Shape,
                             new_instruction, new_operand, operand_fields, packed)
from analyzer.hlo.shapes import bad_element_layout, decode_array_shape

__all__ = ["HloTransformer", "decode_array_shape", "build_computation", "finish_computation", "build_single",
           "build_module", "frames", "Unnamed", "single_instruction_mode", "callee_table", "CALLEES", "DroppedModule",
           "InlineComputations", "inline_computations", "NeedsModuleParse"]

# While one instruction is parsed on its own (XLA's single-instruction texts), a shape written without a name is
# an operand of its own (a parameter of the module made around it); in a module XLA drops it.
_SINGLE: ContextVar[bool] = ContextVar("hlo_single_instruction", default=False)
# The computations read so far (name -> Computation), so an instruction written without its shape that calls
# one (conditional, call, while) gets the shape XLA infers from its callees. None outside a module parse.
CALLEES: ContextVar[dict | None] = ContextVar("hlo_callees", default=None)


# The computations written inline in attributes (`calls={ ... }`) during a grammar parse of a module or of one
# instruction, with the module's own in the order each was finished (callees first). None elsewhere: an inline
# body then raises `NeedsModuleParse`, and `parse_hlo` reads the text with the grammar.
INLINE: ContextVar[InlineComputations | None] = ContextVar("hlo_inline_computations", default=None)
# How an attribute value is parsed from a grammar rule (`parser.parse_value`, set by analyzer.hlo.parser: the
# transformer cannot import the parser that imports it).
parse_value = None


class InlineComputations:
    """The computations of one parse in the order they were finished: `order` holds the module's written ones and
    the inline ones (`count` of them, named `_.1`, `_.2`, ... as XLA's parser names them), each inline one before
    the computation whose attribute holds it."""

    __slots__ = ("order", "count")

    def __init__(self) -> None:
        self.order: list[Computation] = []
        self.count = 0


@contextmanager
def inline_computations() -> Iterator[InlineComputations]:
    made = InlineComputations()
    token = INLINE.set(made)
    try:
        yield made
    finally:
        INLINE.reset(token)


class NeedsModuleParse(HloSyntaxError):
    """A computation written inline in an attribute where a computation is read on its own (the line scanner's
    path): only a parse of the whole module by the grammar can add it to the module."""


class DroppedModule(dict):
    """The callee table of a lazily parsed computation whose module was dropped before it was read: empty, and
    `_infer_from_callees` says why a callee is missing (keep the module while its computations are read)."""


@contextmanager
def single_instruction_mode() -> Iterator[None]:
    token = _SINGLE.set(True)
    try:
        yield
    finally:
        _SINGLE.reset(token)


@contextmanager
def callee_table(table: dict) -> Iterator[dict]:
    """Within the block, computations built register themselves in `table` and shape inference reads it."""
    token = CALLEES.set(table)
    try:
        yield table
    finally:
        CALLEES.reset(token)


class Unnamed:
    """An operand written as a shape alone (`add(f32[2], f32[2])`), with where it was written."""

    __slots__ = ("shape", "line", "column")

    def __init__(self, shape: Shape, line: int, column: int) -> None:
        self.shape, self.line, self.column = shape, line, column


def _name(tok: Token) -> str:
    return tok[1:] if tok.startswith("%") else str(tok)


def _syntax(msg: str, tok: Token, offset: int = 0) -> HloSyntaxError:
    return HloSyntaxError(msg, line=tok.line, column=tok.column + offset)


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

    def buffer_shape(self, children):
        return Shape("buffer", tuple_shapes=(children[1],))

    def tuple_shape(self, children):
        elements = tuple(c for c in children if type(c) is Shape)
        if not elements:
            return Shape("tuple")
        bad = bad_element_layout(elements)
        if bad is not None:
            raise _syntax(bad + " (XLA validates the layouts of tuple elements)", children[0])
        return Shape("tuple", tuple_shapes=elements)

    # ------------------------------------------------------------------ literals
    # Each literal rule gives (text, kind, items): kind "s" scalar, "a" {array}, "p" (tuple or complex),
    # "t" shape-prefixed, "e" the elided `...`. `text` is the normalised spelling kept on the instruction.
    def scalar_literal(self, children):
        tok = children[0]
        return (str(tok), "s", tok)

    def array_literal(self, children):
        if not children:
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

    def shape_operand(self, children):
        return Unnamed(children[0], 0, 0)  # placed by `instruction`, which sees the opcode token

    def number_operand(self, children):
        return children[0]

    def nested_operand(self, children):
        # ("nested", children of an `instruction` rule without name and ROOT, opcode token)
        opcode = next(c for c in children if isinstance(c, Token) and c.type == "NAME")
        return ("nested", children, opcode)

    def nested_constant(self, children):
        return ("nested_constant", children, children[1])

    def attribute(self, children):
        tok = children[0]
        key, _, raw = tok.partition("=")
        key = sys.intern(key)
        stripped = raw.lstrip()
        if stripped[:1] == "{" and key in attributes.CALL_KEY_SET:
            raw = stripped = _inline_callees(key, tok, raw, stripped)
        if len(stripped) != len(raw):  # `key= value`: XLA skips the space; keep the value's own column
            return Attribute(key, stripped, None)
        return Attribute(key, sys.intern(raw), packed(tok.line, tok.column + len(key) + 1))

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
        if opcode[:1] == "%":  # a name where the opcode goes: say so now (the verifier checks the spelling)
            verifier.check_opcode(opcode)
        operands = []
        attrs = []
        parameter = None
        rest = children[i + 3:]
        if any(type(c) is Unnamed for c in rest):
            rest = self._unnamed(rest, opcode)
        for c in rest:
            if c is None:
                continue
            if type(c) is Attribute:
                if c.key == "device_ids" and attrs and attrs[-1].raw.startswith("mesh"):
                    # `replica_groups=mesh[...], device_ids=(...) {...}` is one value that contains a comma.
                    prev = attrs[-1]
                    attrs[-1] = Attribute(prev.key, f"{prev.raw}, device_ids={c.raw}", prev.at)
                    continue
                attrs.append(c)
            elif type(c) is tuple or type(c) is Unnamed:
                operands.append(c)
            else:  # a bare number: parameter(N)
                if opcode != "parameter" or parameter is not None or operands:
                    raise _syntax(f"expected an operand name like `%x`, got the number {c}; only "
                                  "`parameter(N)` takes a number", c)
                parameter = int(c)
        verifier.check_instruction(opcode, len(operands), parameter, attrs, shape)
        return (is_root, name, shape, sys.intern(str(opcode)), operands, tuple(attrs), parameter, None)

    @staticmethod
    def _unnamed(rest: list, opcode: Token) -> list:
        """Operands written as a shape alone: kept (with a position) when one instruction is parsed on its own;
        in a module dropped as XLA drops them, except in the last slot, where XLA wants a name."""
        slots = [k for k, c in enumerate(rest) if type(c) is not Attribute]
        out = list(rest)
        for k in slots:
            c = rest[k]
            if type(c) is not Unnamed:
                continue
            c.line, c.column = opcode.line, opcode.column + len(opcode) + 1
            if _SINGLE.get():
                continue
            if k == slots[-1]:
                raise _syntax(f"expected an operand name after the shape {c.shape} (XLA drops a shape written "
                              "without a name only when a `,` follows it)", opcode, len(opcode) + 1)
            out[k] = None
        return out

    def callee(self, children):
        c = children[0]
        return c if type(c) is str else _name(c)

    def callees(self, children):
        return [c for c in children if c is not None]

    def inline_computation(self, children):
        """`{ instruction* }` in an attribute: a computation of the module named `_.N` (N counting the inline ones
        in the order they are finished, as XLA's parser builds and its module uniquifies them; no signature), with
        every check of a written one; its name, as the attribute's value now."""
        opened = children[0]
        made = INLINE.get()
        if made is None:
            raise NeedsModuleParse("a computation written inline in an attribute (XLA's canonical print of one "
                                   "instruction) is read by a parse of the whole module: parse_hlo(text) without "
                                   "lazy=True", line=opened.line, column=opened.column)
        made.count += 1
        name = f"_.{made.count}"
        comp = build_computation(Token("NAME", "%" + name, line=opened.line, column=opened.column), False, None,
                                 list(children[1:-1]))
        made.order.append(comp)
        return name

    def single_instruction(self, children):
        return children[0]

    def unnamed_instruction(self, children):
        # `f32[2] add(...)`: XLA names the instruction `_`, like the module it makes around it.
        i = 1 if type(children[0]) is Token and children[0].type == "ROOT" else 0
        opcode = children[i + 1]
        return self.instruction(children[:i] + [Token("NAME", "_", line=opcode.line, column=opcode.column)]
                                + children[i:])

    def unnamed_constant(self, children):
        i = 1 if type(children[0]) is Token and children[0].type == "ROOT" else 0
        opened = children[i + 1]
        return self.constant_instruction(children[:i] + [Token("NAME", "_", line=opened.line, column=opened.column)]
                                         + children[i:])

    def constant_instruction(self, children):
        is_root = False
        i = 0
        if children[0].type == "ROOT":
            is_root = True
            i = 1
        name, shape, opened, literal = children[i], children[i + 1], children[i + 2], children[i + 3]
        attrs = tuple(c for c in children[i + 4:] if c is not None)
        verifier.check_constant(name, shape, literal, opened)
        return (is_root, name, shape, "constant", [], attrs, None, literal[0])

    # ------------------------------------------------------------------ computations
    def param(self, children):
        tok, shape = children
        return ((tok[:-1] if tok.type == "PARAM_NAME" else str(tok)).lstrip("%"), shape)

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
        comp = build_computation(name_tok, is_entry, sig, rest, attrs)
        made = INLINE.get()
        if made is not None:
            made.order.append(comp)
        return comp

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
        if name in verifier.RESERVED_NAMES:  # XLA's lexer reads `s2`, `true`, `ROOT` as keywords: "expects name"
            raise HloSyntaxError(f"`{name}` is a keyword of HLO and cannot name the module; rename it",
                                 line=name.line, column=name.column)
        return ("header", name, [c for c in children[1:] if c is not None])

    def module(self, children):
        return build_module(children)



# A list key's value holds more than names (`branch_computations={ {...}, %g }`).
_LIST_KEYS = frozenset({"branch_computations", "called_computations"})


def _inline_callees(key: str, tok: Token, raw: str, stripped: str) -> str:
    """The value of a call attribute (`key=raw`, `raw` led by `{`) with each computation written inline replaced by
    its name, as XLA's ParseHloComputation reads it: for a key naming one computation, `{` opens an instruction
    list (a computation, checked as any); for a list key, each `{` item does. A list of names stays as written."""
    if key in _LIST_KEYS:
        if "{" not in stripped[1:]:
            return stripped
        start = "callees"
    else:
        start = "callee"
    at = len(key) + 1 + len(raw) - len(stripped)  # (the value's `{` in the token's text)
    line = tok.line + tok.count("\n", 0, at)
    column = at - tok.rfind("\n", 0, at) if line > tok.line else tok.column + at
    token = _SINGLE.set(False)  # (an undefined operand in the body is an error, as in any computation)
    try:
        names = parse_value(stripped, start, line, column)
    finally:
        _SINGLE.reset(token)
    if start == "callee":
        return "%" + names
    return "{" + ", ".join("%" + n for n in names) + "}"


def build_computation(name_tok: Token, is_entry: bool, sig, pending: list, comp_attrs: tuple = ()) -> Computation:
    """Resolve operands against earlier instructions, infer left-out shapes, verify; return the Computation.

    Args:
      name_tok: the computation's name token (gives the position).
      is_entry: whether `ENTRY` preceded it.
      sig: `(params, result_shape)` from the signature, or None when it was omitted.
      pending: the instruction tuples made by `HloTransformer.instruction` (name token second) or by the fast
        path (`fastpath.LineReader.instruction`: name text and packed position), in any mix; or an iterator of the
        fast path's form, each built as it comes (what a 200,000-line computation needs to stay in bounded memory).
      comp_attrs: attributes printed after the closing brace (`execution_thread="..."`).

    Returns:
      The `Computation`.

    Raises:
      HloSemanticError: undefined or later-defined operand, duplicate instruction name, an empty
        computation, and whatever `verifier.verify_computation` rejects.
    """
    name = _name(name_tok)
    if name_tok[0] != "%":
        verifier.check_name(name_tok, "a computation")
    if isinstance(pending, list) and any(len(p) == 8 for p in pending):
        pending = _fast_form(pending)
    # Each defined name's Operand, shared by all its users (a large module has millions of operand slots).
    defined: dict[str, Operand] = {}
    insts: list[Instruction] = []
    reserved = verifier.RESERVED_NAMES
    sig_params = sig[0] if sig is not None else ()
    n_sig = len(sig_params)
    for is_root, iname, at, shape, opcode, operands, attrs, parameter, literal in pending:
        if iname[0] == "%":
            iname = iname[1:]
        elif iname in reserved:
            verifier.check_name(Token("NAME", iname, line=at >> _SHIFT, column=at & _COLUMN), "an instruction")
        if iname in defined:
            raise HloSemanticError(f"instruction name {iname!r} is already defined in computation {name!r}",
                                   line=at >> _SHIFT, column=at & _COLUMN)
        if not operands:
            ops = ()
            if parameter is not None and 0 <= parameter < n_sig and sig_params[parameter][0] == iname:
                iname = sig_params[parameter][0]  # the signature's string: one per parameter name, not two
        elif type(operands) is tuple:  # the fast path's (names, line, column, text): no shape to compare
            try:
                ops = tuple([defined[o] for o in operands[0]])
            except KeyError:
                ops = _resolve(name, iname, operand_places(operands), defined)  # raises, naming the operand
        else:
            ops = _resolve(name, iname, operands, defined)
        if shape is None:
            shape = _infer_shape(iname, Position(at >> _SHIFT, at & _COLUMN), opcode, ops, attrs)
        defined[iname] = new_operand(iname, shape)
        names, shapes = operand_fields(ops)
        insts.append(new_instruction(iname, opcode, shape, names, shapes, attrs, is_root, at, parameter, literal))
    # What the last line made (a 200,000-operand tuple's list) and the names go before the checks that follow.
    if not _ELEMENT_TYPES.isdisjoint(defined):
        verifier.check_instruction_names(insts)
    defined = operands = ops = None
    return finish_computation(name, name_tok, is_entry, sig, insts, comp_attrs)


_ELEMENT_TYPES = frozenset(verifier.ELEMENT_BITS)


def finish_computation(name: str, name_tok, is_entry: bool, sig, insts: list, comp_attrs: tuple = (),
                       shared=tuple) -> Computation:
    """The Computation of built instructions `insts`: its signature (from the parameters when none was written),
    the whole-computation checks (`verifier.verify_computation`), and its place in the callee table. `shared`:
    what gives the tuple of the parameters' shapes (`fastpath.LineReader.shared`: one tuple for the computations
    whose parameters have the same shapes).

    Raises:
      HloSemanticError: an empty computation, and whatever `verifier.verify_computation` rejects.
    """
    if not insts:
        raise HloSemanticError(f"computation {name!r} has no instructions", line=name_tok.line,
                               column=name_tok.column)
    insts = tuple(insts)
    params, result = sig if sig is not None else ((), None)
    comp = Computation(name, insts, tuple([p[0] for p in params]), shared(tuple([p[1] for p in params])), result,
                       is_entry, packed(name_tok.line, name_tok.column), comp_attrs)
    verifier.verify_computation(comp, signed=sig is not None)
    if sig is None:
        # The parameters by number, once the checks have found them numbered 0..N-1 (no dict by number).
        params = [i for i in insts if i.parameter_number is not None]
        params.sort(key=_parameter_number)
        object.__setattr__(comp, "parameter_names", tuple([i.name for i in params]))
        object.__setattr__(comp, "parameter_types", shared(tuple([i.shape for i in params])))
        object.__setattr__(comp, "result_shape", comp.root.shape)
    table = CALLEES.get()
    if table is not None:
        table.setdefault(name, comp)
    return comp


_SHIFT = Position._SHIFT
_COLUMN = Position._COLUMN


def _parameter_number(inst: Instruction) -> int:
    return inst.parameter_number


# An operand's name after its `%`, in an operand list as the fast path's line pattern takes it (`fastpath._LINE`: a
# `/*...*/` comment only straight before a `%name`). The comment is matched with its name, so that a scan never
# starts inside one: `add(/*%x*/%b, %a)` names `b` and `a`, not `x` too.
OPERAND_NAME = re.compile(r"(?:/\*[^*\n]*+\*/)?%([A-Za-z_][\w.\-]*)", re.A)


class OperandNames:
    """The operand names of an operand list's text, found again each time they are iterated: what the fast path
    keeps of a list of thousands (a list of 200,000 names is 11 MB for the few moments it is needed)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __iter__(self) -> Iterator[str]:
        return map(_FIRST_GROUP, OPERAND_NAME.finditer(self.text))

    def __len__(self) -> int:
        return sum(1 for _ in OPERAND_NAME.finditer(self.text))


_FIRST_GROUP = operator.methodcaller("group", 1)


def operand_places(operands: tuple) -> list[tuple[str, None, int, int]]:
    """The fast path's operands `(names, line, column of the first, text or None)` as `(name, None, line, column)`
    each, the column that of its `%`: counted from the first (`, %` between names) or, when the text had comments
    between them, found in that text."""
    names, line, column, text = operands
    if text is not None:
        return [(o.group(1), None, line, column + o.start(1) - 1) for o in OPERAND_NAME.finditer(text)]
    out = []
    for name in names:
        out.append((name, None, line, column))
        column += len(name) + 3
    return out


def _resolve(comp: str, iname: str, operands: list, defined: dict[str, Operand]) -> tuple[Operand, ...]:
    """Each operand's Operand (defined earlier in computation `comp`), checking a shape written with it.

    Raises:
      HloSemanticError: at an operand not defined before `iname`, or written with a shape its definition lacks.
    """
    ops = []
    for o in operands:
        # (token, shape prefix or None) from the grammar; (name, None, line, column) from the fast path
        if len(o) == 4:
            oname, oshape = o[0], None
        else:
            otok, oshape = o
            oname = _name(otok)
        ref = defined.get(oname)
        if ref is None or (oshape is not None and not verifier.compatible(oshape, ref.shape)):
            line, column = (o[2], o[3]) if len(o) == 4 else (o[0].line, o[0].column)
            if ref is None:
                raise HloSemanticError(f"operand {oname!r} of {iname!r} is not defined before it in computation "
                                       f"{comp!r}", line=line, column=column)
            raise HloSemanticError(f"operand {oname!r} of {iname!r} is written with shape {oshape}, but {oname!r} "
                                   f"has shape {ref.shape}", line=line, column=column)
        ops.append(ref)
    return tuple(ops)


def _fast_form(pending: list) -> list:
    """Pending instructions as the fast path makes them, `(is_root, name as written, packed position, shape,
    opcode, operands, attributes, parameter, literal)`, from the grammar callbacks' 8-tuples (name token second),
    nested operands flattened into instructions of their own."""
    if any(len(p) == 8 and any(len(o) == 3 for o in p[4]) for p in pending):
        pending = _flatten_nested(pending)
    out = []
    for p in pending:
        if len(p) == 8:
            tok = p[1]
            p = (p[0], str(tok), packed(tok.line, tok.column)) + p[2:]
        out.append(p)
    return out


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
    taken = {(p[1][1:] if p[1][0] == "%" else str(p[1])) for p in pending}  # (either form: the name is second)
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
            if type(o) is not tuple or len(o) != 3:
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
        if len(p) == 9:  # the fast path's form: no nested operands
            out.append(p)
            continue
        operands = expand(p[4]) if any(type(o) is tuple and len(o) == 3 for o in p[4]) else p[4]
        out.append(p[:4] + (operands,) + p[5:])
    return out


def _infer_shape(iname: str, tok, opcode: str, ops: list, attrs: tuple) -> Shape:
    """The shape XLA infers for an instruction written without one (the cases its parser's tests use): the rule of
    its opcode in `_INFERENCE`, as XLA's ShapeInference picks one by opcode."""
    def fail(why: str = "") -> HloSyntaxError:
        return HloSyntaxError(f"cannot infer the shape of `{opcode}` {iname!r}{why}; write it, e.g. "
                              f"`%{iname} = f32[2] {opcode}(...)`", line=tok.line, column=tok.column)

    shapes = [o.shape for o in ops]
    if any(s is None for s in shapes):
        raise fail()
    rule = _INFERENCE.get(opcode)
    shape = rule(opcode, shapes, attrs, fail) if rule is not None else None
    if shape is None:
        raise fail()
    return shape


# Each rule of `_INFERENCE`: (opcode, the operands' shapes, the attributes, `fail`) -> the shape, or None when the
# operands do not fit it (then "cannot infer"); `fail(why)` makes the error that says why.

def _same_as_operands(opcode: str, shapes: list, attrs: tuple, fail) -> Shape | None:
    """Elementwise ops: the operands' common shape."""
    if not shapes:
        return None
    if any(s.dims != shapes[0].dims or s.is_tuple != shapes[0].is_tuple for s in shapes[1:]):
        raise fail(": its operands' shapes differ")
    return shapes[0]


def _pred_like_operand(opcode: str, shapes: list, attrs: tuple, fail) -> Shape | None:
    """compare, is-finite: pred of the first operand's dims."""
    return Shape("pred", shapes[0].dims, shapes[0].dynamic) if shapes else None


def _like_second_operand(opcode: str, shapes: list, attrs: tuple, fail) -> Shape | None:
    """select, clamp (three operands): the second's shape."""
    return shapes[1] if len(shapes) == 3 else None


def _real_part(opcode: str, shapes: list, attrs: tuple, fail) -> Shape | None:
    """real, imag of a complex array: the float type of its parts."""
    if shapes and shapes[0].element_type in ("c64", "c128"):
        return Shape("f32" if shapes[0].element_type == "c64" else "f64", shapes[0].dims, shapes[0].dynamic)
    return None


def _tuple_element(opcode: str, shapes: list, attrs: tuple, fail) -> Shape | None:
    """get-tuple-element: the element at `index` of its tuple operand."""
    if not shapes or not shapes[0].is_tuple:
        return None
    a = next((x for x in attrs if x.key == "index"), None)
    if a is not None and a.raw.isdigit() and int(a.raw) < len(shapes[0].tuple_shapes):
        return shapes[0].tuple_shapes[int(a.raw)]
    raise fail(": its index is missing or out of range")


def _dot_result(opcode: str, shapes: list, attrs: tuple, fail) -> Shape | None:
    """dot: the batch dims, then the lhs's and the rhs's free dims, in the lhs's element type."""
    if len(shapes) < 2:
        return None

    def dims(key: str) -> tuple[int, ...]:
        a = next((x for x in attrs if x.key == key), None)
        return attributes.parse_int_list(a.raw) if a is not None else ()
    lhs, rhs = shapes[0], shapes[1]
    lb, lc, rb, rc = dims("lhs_batch_dims"), dims("lhs_contracting_dims"), dims("rhs_batch_dims"), \
        dims("rhs_contracting_dims")
    if (len(lb) != len(rb) or len(lc) != len(rc) or any(not 0 <= d < lhs.rank for d in lb + lc)
            or any(not 0 <= d < rhs.rank for d in rb + rc)
            or any(lhs.dims[x] != rhs.dims[y] for x, y in zip(lb + lc, rb + rc))):
        raise fail(": its dimension numbers do not fit the operands")
    try:
        out = [lhs.dims[d] for d in lb]
        out += [n for d, n in enumerate(lhs.dims) if d not in lb and d not in lc]
        out += [n for d, n in enumerate(rhs.dims) if d not in rb and d not in rc]
    except IndexError:
        raise fail(": its dimension numbers do not fit the operands") from None
    return Shape(lhs.element_type, tuple(out))


def build_single(pending: tuple) -> Computation:
    """The entry computation XLA makes around one instruction parsed on its own: every operand not defined
    before it (written with its shape, or a shape alone, then named `_N`) becomes a parameter, numbered in the
    order written; nested instructions come before their user; the instruction is the ROOT.

    Raises:
      HloSemanticError: an undefined operand written without a shape (XLA: "Operand had no shape in HLO
        text; cannot create param"), and whatever `build_computation` rejects.
    """
    flat = _flatten_nested([pending])
    params: list = []
    defined: set[str] = set()
    out = []
    for p in flat:
        ops = []
        for o in p[4]:
            if type(o) is Unnamed:
                tok = Token("NAME", f"_{len(params)}", line=o.line, column=o.column)
                params.append((False, tok, o.shape, "parameter", [], (), len(params), None))
                defined.add(str(tok))
                ops.append((tok, None))
                continue
            otok, oshape = o
            oname = otok[1:] if otok[0] == "%" else str(otok)
            if oname not in defined:
                if oshape is None:
                    raise HloSemanticError(f"operand {oname!r} is not defined; in an instruction read on its own, XLA "
                                           f"makes an operand a parameter only when its shape is written, like "
                                           f"`f32[2] {oname}`", line=otok.line, column=otok.column)
                tok = Token("NAME", oname, line=otok.line, column=otok.column)
                params.append((False, tok, oshape, "parameter", [], (), len(params), None))
                defined.add(oname)
            ops.append(o)
        defined.add(_name(p[1]))
        out.append(p[:4] + (ops,) + p[5:])
    out[-1] = (True,) + out[-1][1:]
    return build_computation(Token("NAME", "_", line=1, column=1), True, None, params + out)


def _infer_from_callees(opcode: str, shapes: list, attrs: tuple, fail) -> Shape:
    """XLA's ShapeInference for the ops whose shape is their callees': conditional (every branch takes its
    operand and all return one shape), call (to_apply's result) and while (the init's shape, kept by body)."""
    table = CALLEES.get()

    def program(key: str, raw: str) -> Computation:
        name = raw.strip()
        name = name[1:] if name.startswith("%") else name
        comp = table.get(name) if table is not None else None
        if comp is None and isinstance(table, DroppedModule):
            raise fail(f": its {key} {name!r} is in the module this computation was parsed lazily from, which was "
                       "dropped before the computation was read; keep the module (what parse_hlo returned) while "
                       "its computations are read")
        if comp is None:
            raise fail(f": its {key} {name!r} is not a computation defined before it")
        return comp

    def fits(a: Shape | None, b: Shape | None) -> bool:
        return a is None or b is None or verifier.compatible(a, b)

    def one_param(comp: Computation, operand: Shape, what: str) -> None:
        params = comp.parameter_shapes
        if len(params) != 1 or not fits(params[0][1], operand):
            raise fail(f": {what} {comp.name!r} must take one parameter of the operand's shape {operand}")

    by_key = {a.key: a.raw for a in attrs}
    if opcode == "call":
        if "to_apply" not in by_key:
            raise fail(": it has no to_apply")
        comp = program("to_apply", by_key["to_apply"])
        params = comp.parameter_shapes
        if len(params) != len(shapes) or not all(fits(p[1], o) for p, o in zip(params, shapes)):
            raise fail(f": to_apply {comp.name!r} does not take its operands' shapes")
        return comp.result_shape
    if opcode == "while":
        if len(shapes) != 1 or "condition" not in by_key or "body" not in by_key:
            raise fail(": while takes one operand, a condition and a body")
        init = shapes[0]
        cond, body = program("condition", by_key["condition"]), program("body", by_key["body"])
        one_param(cond, init, "the condition")
        one_param(body, init, "the body")
        r = cond.result_shape
        if r is not None and (r.is_tuple or r.dims or r.element_type != "pred"):
            raise fail(f": its condition {cond.name!r} must return pred[], not {r}")
        if not fits(body.result_shape, init):
            raise fail(f": its body {body.name!r} must return the operand's shape {init}")
        return init
    if "branch_computations" in by_key:
        try:
            names = attributes.parse_name_list(by_key["branch_computations"])
        except ValueError:
            raise fail(": its branch_computations are not a list of names") from None
        branches = [program("branch", n) for n in names]
    elif "true_computation" in by_key and "false_computation" in by_key:
        branches = [program("true_computation", by_key["true_computation"]),
                    program("false_computation", by_key["false_computation"])]
    else:
        raise fail(": it has neither branch_computations nor true_computation and false_computation")
    if not branches or len(shapes) != len(branches) + 1:
        raise fail(f": it has {len(branches)} branches, so it takes {len(branches) + 1} operands")
    for k, (comp, operand) in enumerate(zip(branches, shapes[1:])):
        one_param(comp, operand, f"branch {k}")
    result = branches[0].result_shape
    for k, comp in enumerate(branches[1:], 1):
        if not fits(comp.result_shape, result):
            raise fail(f": branch {k} {comp.name!r} returns {comp.result_shape}, branch 0 returns {result}")
    if result is None:
        raise fail()
    return result


# The shape inference rule of each opcode an instruction may be written without a shape for.
_INFERENCE: dict[str, Callable[[str, list, tuple, Callable[..., HloSyntaxError]], Shape | None]] = {
    **dict.fromkeys(_SAME_SHAPE_OPS, _same_as_operands),
    "compare": _pred_like_operand, "is-finite": _pred_like_operand,
    "select": _like_second_operand, "clamp": _like_second_operand,
    "real": _real_part, "imag": _real_part,
    "after-all": lambda opcode, shapes, attrs, fail: Shape("token"),
    "tuple": lambda opcode, shapes, attrs, fail: Shape("tuple", tuple_shapes=tuple(shapes)),
    "get-tuple-element": _tuple_element,
    "conditional": _infer_from_callees, "call": _infer_from_callees, "while": _infer_from_callees,
    "dot": _dot_result,
}

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
                verifier.check_module_attribute(a)
                if a.key in attrs:
                    raise HloSyntaxError(f"attribute {a.key} appears twice in the module header; XLA takes each once",
                                         line=a.position.line if a.position else None,
                                         column=max(1, a.position.column - len(a.key) - 1) if a.position else None)
                attrs[a.key] = a.raw
        elif type(c) is tuple:
            tables.setdefault(c[0], []).extend(c[1])
        elif c is not None:
            comps.append(c)
    made = INLINE.get()
    if made is not None and made.count:  # the inline computations, each before the one that holds it
        comps = list(made.order)
    entry = verifier.check_computations(comps)
    if name_tok is not None:
        name = _name(name_tok)
    else:
        name = "module_" + (entry or comps[-1]).name if comps else "module"  # XLA's name for a header-less module
    return HloModule(name, tuple(comps), attrs, frames(tables))


def frames(tables: dict[str, list], notes: list[str] | None = None) -> dict[int, Frame]:
    """Resolve StackFrames through FileLocations, FileNames and FunctionNames (ids are 1-based).

    With `notes` (a lenient parse), a row field this XLA version does not know, a field given twice or text
    that is not `key=number` is noted there and left out, instead of raising.
    """
    locs: dict[int, dict[str, int]] = {}
    for i, text, tok in tables.get("FileLocations", ()):
        locs[i] = _int_fields(text, tok, verifier.FILE_LOCATION_FIELDS, notes)
    if "StackFrames" not in tables:
        return {}
    files = {i: s for i, s, _ in tables.get("FileNames", ())}
    funcs = {i: s for i, s, _ in tables.get("FunctionNames", ())}
    frames: dict[int, Frame] = {}
    new, slots = object.__new__, _FRAME_SLOTS
    for i, text, tok in tables["StackFrames"]:
        f = _int_fields(text, tok, verifier.STACK_FRAME_FIELDS, notes)
        # XLA accepts a frame whose location is missing from the table; it resolves to an unknown place.
        loc = locs.get(f.get("file_location_id", -1), {})
        parent = f.get("parent_frame_id", 0)
        # Frame(id, file, function, line, column, end_line, end_column, parent), set through its slots (the frozen
        # dataclass's __init__ with keywords was a fifth of reading the tables)
        frame = new(Frame)
        for set_slot, value in zip(slots, (
                i, files.get(loc.get("file_name_id", -1), ""), funcs.get(loc.get("function_name_id", -1), ""),
                loc.get("line", 0), loc.get("column", 0), loc.get("end_line"), loc.get("end_column"),
                # XLA prints the parent one higher than its id; 0 (and so 1) means no parent.
                parent - 1 if parent > 1 else None)):
            set_slot(frame, value)
        frames[i] = frame
    return frames


_FRAME_SLOTS = tuple(getattr(Frame, f).__set__ for f in (
    "id", "file", "function", "line", "column", "end_line", "end_column", "parent"))


_KV = re.compile(r"([A-Za-z_]\w*)=(-?\d+)")


# A row as XLA prints it, its fields in XLA's order: read by one match (the general reading below gives the same).
_CANONICAL_ROWS = {
    verifier.FILE_LOCATION_FIELDS: (re.compile(r"\{file_name_id=(\d+) function_name_id=(\d+) line=(\d+) "
                                               r"end_line=(\d+) column=(\d+) end_column=(\d+)\}"),
                                    ("file_name_id", "function_name_id", "line", "end_line", "column", "end_column")),
    verifier.STACK_FRAME_FIELDS: (re.compile(r"\{file_location_id=(\d+) parent_frame_id=(\d+)\}"),
                                  ("file_location_id", "parent_frame_id")),
}


def _int_fields(text: str, tok: Token, allowed: frozenset[str], notes: list[str] | None = None) -> dict[str, int]:
    canonical = _CANONICAL_ROWS.get(allowed)
    if canonical is not None:
        m = canonical[0].fullmatch(text)
        if m is not None:
            return dict(zip(canonical[1], map(int, m.groups())))
    body = text[1:-1].strip()
    pairs = _KV.findall(body)
    out = {k: int(v) for k, v in pairs}
    try:
        if len(out) != len(pairs) or not allowed.issuperset(out):
            verifier.check_fields(pairs, allowed, text, tok)
        if _KV.sub("", body).strip():
            raise HloSyntaxError(f"expected `key=number` pairs inside {text}", line=tok.line, column=tok.column)
    except HloSyntaxError as e:
        if notes is None:
            raise
        notes.append(f"{tok.line}:{tok.column}: {e.message}; read the known fields only")
        out = {}
        for k, v in pairs:
            if k in allowed:
                out.setdefault(k, int(v))
    return out
