"""A line-level fast path for the instructions XLA prints, falling back to the Lark grammar.

Most of a module's text is instruction lines in one canonical form:
`  [ROOT ]%name = <shape> <opcode>(%a, %b, ...)[, key=value]*`. This module matches such a line with one
regular expression (its attributes with one `findall` whose matches must tile the rest of the line) and makes
what the grammar's `HloTransformer` callbacks and checks make of it, so both paths build identical IR
(tests/hlo/test_fastpath.py compares them on every fixture and corpus module, positions included).
`build_lines` reads a computation's lines and builds the computation in one pass; what it declines or finds
wrong goes through the two-step path (`_line_instruction` per line, else the grammar for that line alone, then
`transformer.build_computation`), which says what is wrong; text not laid out one instruction per line goes
through the grammar whole. A lazy computation reads single lines with `_line_instruction` (`parser._Index`).
The grammar stays the definition of the language; this is only a shortcut for its commonest sentence.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence

from analyzer.hlo.attributes import unquote
from analyzer.hlo.ir import Attribute, Computation, Instruction, Operand, Position, new_attribute, packed
# (the builder twins `ir.new_instruction`/`new_operand`/`new_attribute` use: `build_lines` builds with them inline,
# 145,000 instructions and 400,000 attributes a large module)
from analyzer.hlo.ir import AttributeBuilder, InstructionBuilder, OperandBuilder
from analyzer.hlo.attributes import _VALID
from analyzer.hlo.shapes import ARRAY_PATTERN, Shape, decode_shape
from analyzer.hlo import verifier
from analyzer.hlo.transformer import (OPERAND_NAME as _OPERAND, HloTransformer, OperandNames,
                                      finish_computation)

# decode_shape lives in analyzer.hlo.shapes; it is re-exported here for the callers that knew it here.
__all__ = ["build_lines", "parse_head_fast", "decode_shape", "FastToken", "forget_read"]

Token = None  # replaced below by FastToken (kept as a name so the builders read like the grammar's)

# (Character classes spelled out: `[a-zA-Z0-9_.\-]` is what `[\w.\-]` is under re.A, but one table look-up a
# character where `\w` inside a class is a category test besides.)
_NAME = r"%?[A-Za-z_][a-zA-Z0-9_.\-]*"
_ARRAY = ARRAY_PATTERN  # the grammar's
# Possessive quantifiers throughout: a plain `(?:...)*` makes `re` keep a backtracking entry per repetition,
# which on one 200,000-element tuple line cost ~100 bytes per character of the line.
_TUPLE = r"\((?:[^()\n]++|\((?:[^()\n]++|\((?:[^()\n]++|\([^()\n]*+\))*+\))*+\))*+\)"

# One scalar literal (the grammar's SCALAR less the `nan(0x...)` payloads, which go to the grammar).
_SCALAR_TEXT = r"-?(?:inf|nan|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)|true|false"
# head of a canonical instruction line: indentation, ROOT, name, shape, opcode, simple operand list (names, a number,
# or a constant's flat array as XLA prints it, `{0, 1, 2}`)
_LINE = re.compile(
    r"[ \t]*(ROOT[ \t]+)?(" + _NAME + r")[ \t]*=[ \t]*(" + _ARRAY + "|" + _TUPLE + r")[ \t]+([a-z][a-z0-9\-]*)\("
    r"((?:(?:/\*[^*\n]*+\*/)?%[A-Za-z_][a-zA-Z0-9_.\-]*+(?:, (?:/\*[^*\n]*+\*/)?%[A-Za-z_][a-zA-Z0-9_.\-]*+)*+)"
    r"|[a-zA-Z0-9_.+\-]++"
    r"|\{(?:(?:" + _SCALAR_TEXT + r")(?:, (?:" + _SCALAR_TEXT + r"))*+)?\})?\)", re.A
)
# `[ENTRY ]%name (p0: shape, ...) -> shape {` with simple parameter names
_HEAD = re.compile(r"(ENTRY[ \t]+)?(" + _NAME + r")[ \t]*\((.*)\)[ \t]*->[ \t]*(" + _ARRAY + "|" + _TUPLE
                   + r")[ \t]*\{[ \t]*$", re.A)
_PARAM = re.compile(r"[ \t]*(?:/\*[^*\n]*\*/)?[ \t]*(" + _NAME + r"):[ \t]*(" + _ARRAY + "|" + _TUPLE + r")[ \t]*(?:,|$)",
                    re.A)


class FastToken(str):
    """A name as the grammar's tokens present it (`.type`, `.line`, `.column`), cheaper to make."""

    def __new__(cls, type_: str, value: str, line: int, column: int) -> FastToken:
        t = str.__new__(cls, value)
        t.type = type_
        t.line = line
        t.column = column
        return t
_SCALAR = re.compile(_SCALAR_TEXT)


Token = FastToken  # noqa: F811
_intern = sys.intern
_SHIFT = Position._SHIFT
# (opcode, operand count, no parameter number, *attribute keys) that passed `verifier.check_instruction`.
_CHECKED: set[tuple] = set()
# Those of them whose (opcode, *attribute keys) `verifier.signature_known` knows too (`build_lines` vets them).
_VETTED: set[tuple] = set()
_MAX_COLUMN = Position._COLUMN
# A shape text this long (a tuple of thousands) is decoded without `decode_shape`'s cache, which would keep the
# text alive after the module is gone (2.2 MB for a 200,000-element tuple); its elements still go through it.
_CACHED_SHAPE = 4096
# An operand list this long (a tuple of thousands) is not split into a list of names (`OperandNames`).
_LONG_OPERANDS = 4096
_decode_shape_once = decode_shape.__wrapped__


def parse_head_fast(line: str, lineno: int):
    """`[ENTRY ]%name (p: shape, ...) -> shape {` -> (name_token, is_entry, (params, result)), or None."""
    m = _HEAD.match(line)
    if m is None:
        return None
    params = []
    body = m.group(3)
    if body.rstrip().endswith(","):
        return None
    pos = 0
    while pos < len(body):
        p = _PARAM.match(body, pos)
        if p is None or p.end() == pos:
            return None
        try:
            params.append((p.group(1).lstrip("%"), decode_shape(p.group(2))))
        except ValueError:
            return None
        pos = p.end()
        if pos < len(body) and body[pos - 1] == ",":
            while pos < len(body) and body[pos] == " ":
                pos += 1
    try:
        result = decode_shape(m.group(4)) if len(m.group(4)) < _CACHED_SHAPE else _decode_shape_once(m.group(4))
    except ValueError:
        return None
    name_tok = Token("NAME", m.group(2), lineno, m.start(2) + 1)
    return (name_tok, m.group(1) is not None, (tuple(params), result))


def _line_instruction(line: str, lineno: int, attr_res: tuple[re.Pattern, re.Pattern], transformer: HloTransformer):
    """One canonical instruction line -> a pending-instruction tuple, or None.

    The common line gives the fast form `(is_root, name, at, shape, opcode, operands, attributes, parameter,
    literal)` (`name` as written, `%` included; `at` its packed position; `operands` empty or `(names, line,
    column of the first, text when comments sit between them)`); a constant gives the grammar callback's 8-tuple.
    `build_computation` takes either.
    """
    m = _LINE.match(line)
    if m is None:
        return None
    root, name, shape_text, opcode, ops = m.groups()
    opcode = _intern(opcode)  # one string per opcode, not one per instruction
    if name[0] != "%" and line[m.end(2):m.end(2) + 1] == "=":
        return None  # `c= ...`: XLA's lexer reads `c=` as an attribute name; the grammar reports it
    try:
        shape = decode_shape(shape_text) if len(shape_text) < _CACHED_SHAPE else _decode_shape_once(shape_text)
    except ValueError:
        return None
    # Operands as `(names, line, column of the first, the text when a comment sits between them)`: one tuple per
    # instruction, not one per operand (a 200,000-operand tuple line made 200,000); `build_computation` works out
    # an operand's column only to report it (`transformer.operand_places`).
    operands: tuple = ()
    n_operands = 0
    parameter = None
    is_constant = opcode == "constant"
    if is_constant:  # a scalar `constant(-inf)` or a flat array `constant({0, 1})`; others go to the grammar
        if not ops or (ops[0] != "{" and not _SCALAR.fullmatch(ops)):
            return None
    elif ops:
        if len(ops) >= _LONG_OPERANDS and ops[0] in "%/":  # thousands: each name read as it is resolved
            names = OperandNames(ops)
            operands = (names, lineno, m.start(5) + 1, ops)
            n_operands = len(names)
        elif ops[0] == "%" and "/" not in ops:  # `%a, %b`: a name holds no `, %`, so a split finds them all
            names = ops[1:].split(", %")
            operands = (names, lineno, m.start(5) + 1, None)
            n_operands = len(names)
        elif ops[0] == "%" or ops[0] == "/":
            names = _OPERAND.findall(ops)
            operands = (names, lineno, m.start(5) + 1, ops)
            n_operands = len(names)
        elif opcode == "parameter" and ops.isdigit():
            parameter = int(ops)
        else:
            return None
    pos = m.end()
    end = len(line)
    if line[-1].isspace():  # (the line ends in a name, `)` or `}` when printed by XLA: no copy to strip)
        end = len(line.rstrip())
    if end >= _MAX_COLUMN:
        return None  # a line longer than a packed column holds: the grammar path (it clamps) reads it
    at = lineno << _SHIFT
    attrs: list = []
    keys: list = []
    if pos < end:
        tiled = _tiled_attributes(line, pos, end, at, attr_res[1].findall)
        if tiled is not None:
            keys, attrs = tiled
        else:
            attrs = _attributes_slow(line, pos, end, lineno, attr_res[0], transformer)
            if attrs is None:
                return None
            keys = [a.key for a in attrs]
    if is_constant:
        children = ([Token("ROOT", "ROOT", lineno, m.start(1) + 1)] if root else []) + [
            Token("NAME", name, lineno, m.start(2) + 1), shape, Token("CONSTANT_OPEN", "constant(", lineno,
                                                                     m.start(4) + 1),
            _literal(ops, lineno, m.start(5) + 1)] + attrs
        return transformer.constant_instruction(children)
    # What `HloTransformer.instruction` makes of the same line, without its generic loop over children.
    attrs_t = tuple(attrs)
    _check_once(opcode, lineno, m.start(4) + 1, n_operands, parameter, keys, attrs_t, shape)
    return (root is not None, name, at + m.start(2) + 1, shape, opcode, operands, attrs_t, parameter, None)


def _literal(text: str, lineno: int, column: int) -> tuple:
    """A scalar or flat-array literal as the grammar's callbacks give it: `(text, "s", token)`, or
    `("{a, b}", "a", (item, ...))` with an item per element (the text as XLA prints it, `, ` between elements)."""
    if text[0] != "{":
        return (text, "s", Token("SCALAR", text, lineno, column))
    items = []
    if len(text) > 2:
        column += 1
        for item in text[1:-1].split(", "):
            items.append((item, "s", Token("SCALAR", item, lineno, column)))
            column += len(item) + 2
    return (text, "a", tuple(items))


_UNREAD = object()  # a line tail not read yet
_TAILS = 4096  # line tails `build_lines` keeps read at most (a computation's distinct tails are a few hundred)
# `_tiled_attributes`' reads of whole attribute texts (`_read_tail` of each), kept across computations and modules:
# at most `_TAILS` of them, each at most `_CACHED_TEXT` characters (about 1 MB in all).
_ATTRIBUTE_TEXTS: dict[str, tuple | None] = {}
_CACHED_TEXT = 256


def forget_read() -> None:
    """Empty `_ATTRIBUTE_TEXTS` (`parse_hlo` does at its start, as it empties the values found valid)."""
    _ATTRIBUTE_TEXTS.clear()


def _tiled_attributes(line: str, start: int, end: int, at: int, findall
                      ) -> tuple[list[str], list[Attribute]] | None:
    """The keys and attributes of `line[start:end]` read by one `findall` (the `, key=value` pattern of
    `parser._attr_regex`, through `_read_tail`), or None when its matches do not tile that text exactly (a gap,
    `key= value`, `device_ids`: then they are read one by one). When they tile it, each is what a match at its
    place gives (the first starts where the head ends, each next where the last ended). `at`: the line's packed
    position. (What follows `end` is the line's trailing whitespace, where no match starts: the cut text tiles
    exactly when the line does.)

    Values repeat (metadata of unrolled layers, backend configs, shardings): a third or less of the attribute
    text of real dumps is unique, so one string per distinct value, one per key. Whole attribute texts repeat
    too (8,057 dot lines of an unrolled model have 13): one of at most `_CACHED_TEXT` characters is read once
    (`_ATTRIBUTE_TEXTS`, bounded) and only placed here.
    """
    text = line[start:end]
    read = _ATTRIBUTE_TEXTS.get(text, _UNREAD) if len(text) <= _CACHED_TEXT else _UNREAD
    if read is _UNREAD:
        read = _read_tail(text, findall)
        if len(text) <= _CACHED_TEXT:
            if len(_ATTRIBUTE_TEXTS) >= _TAILS:
                _ATTRIBUTE_TEXTS.clear()
            _ATTRIBUTE_TEXTS[text] = read
    if read is None:
        return None
    keys: list[str] = []
    attrs: list[Attribute] = []
    base = at + start + 1
    for off, key, raw, _ in read:
        keys.append(key)
        attrs.append(new_attribute(key, raw, base + off))
    return keys, attrs


def _check_once(opcode: str, lineno: int, column: int, n_operands: int, parameter: int | None, keys: list[str],
                attrs: Sequence[Attribute], shape: Shape) -> bool:
    """`verifier.check_instruction` of an instruction read by the fast path, once per combination of what it
    depends on: the opcode, the operand count, whether a parameter number was given and the attribute keys (and
    one value, use_global_device_ids, when no channel_id is there; and a `tuple`'s shape: such lines are checked
    each time). Returns whether the combination is remembered (not one checked each time)."""
    sig = (opcode, n_operands, parameter is None, *keys)
    if sig in _CHECKED:
        return True
    verifier.check_instruction(Token("NAME", opcode, lineno, column), n_operands, parameter, attrs, shape)
    if opcode == "tuple" or ("use_global_device_ids" in sig and "channel_id" not in sig):
        return False
    if len(_CHECKED) > 4096:
        _CHECKED.clear()
    _CHECKED.add(sig)
    return True


def _attributes_slow(line: str, pos: int, end: int, lineno: int, attr_re: re.Pattern,
                     transformer: HloTransformer) -> list | None:
    """The attributes from `pos` to `end` one match at a time; None when a piece is not `, key=value`."""
    at = lineno << _SHIFT
    attrs: list = []
    while pos < end:
        a = attr_re.match(line, pos)
        if a is None:
            return None
        key, raw = a.group(2), a.group(3)
        if key == "device_ids":
            return None  # `replica_groups=mesh[...], device_ids=(...)`: the grammar callback joins the two
        key = _intern(key)
        if raw[:1].isspace() or not raw:  # `key= value`: the grammar callback handles the spacing
            attrs.append(transformer.attribute([Token("ATTR", a.group(1), lineno, a.start(1) + 1)]))
        else:
            attrs.append(Attribute(key, _intern(raw), at + a.start(3) + 1))
        pos = a.end()
    return attrs


_BLANK = object()  # `other`'s answer for a blank line


def _read_tail(tail: str, findall) -> tuple[tuple[int, str, str, bool], ...] | None:
    """The attributes of a line's tail (its text from an attribute's `, ` on) by `findall` (the pattern of
    `parser._attr_regex`), as `(offset of the value in the tail, key, value, known valid)` each; None when the
    matches do not tile it or one is `device_ids` (then the line is read by `_line_instruction`). When a line's
    matches up to the tail (`findall` with the tail's start as its end) tile that part and these tile the tail,
    together they are the line's own matches: a value that ends at the tail's `,` in the cut text ends there in
    the whole line too (what can cross a `,` is a bracket or a string, which the cut text cannot close), and the
    pattern looks at nothing before where it starts. Else the line is read one attribute at a time.
    `known valid`: what `verifier.value_known` said (true stays true: a valid value is valid)."""
    out = []
    p = 0
    for space, key, raw in findall(tail):
        if key == "device_ids":
            return None
        p += len(space) + len(key) + 2
        key = _intern(key)
        raw = _intern(raw)
        out.append((p, key, raw, verifier.value_known(key, raw)))
        p += len(raw)
    return tuple(out) if p == len(tail) else None


def build_lines(source: str, pos: int, stop: int, lineno: int, head, attr_res: tuple[re.Pattern, re.Pattern],
                transformer: HloTransformer, read_line, unvetted: list[Instruction] | None = None
                ) -> Computation | None:
    """A computation's instruction lines (`source[pos:stop]`, the line after the header first) read and built in
    one pass: what `build_computation` makes of the lines `_line_instruction` (else `read_line`) reads, or None,
    and then the caller takes that path (which reports what is wrong: callers send any exception there too).

    The commonest line (names as operands, attributes that `findall` tiles) is read here without the pending
    tuple and the generic loop of the two-step path; each line is sliced when it is read and what it makes is
    freed before the next (bounded memory on a computation of 200,000 lines, as in the two-step path). Each
    line's operands are resolved as it is read: an operand not defined before it, a name defined twice, an
    instruction named without `%`, a shape left out, nested operands or a line `read_line` cannot take (None)
    make it return None.

    A commonest line is also vetted as it is read: `verifier.verify_instructions` (with no 19-digit number in
    the text) passes an instruction whose opcode and keys it knows (`verifier.signature_known`) and whose values
    it found valid before (`verifier.value_known`, which also takes what a value's quick check takes), without
    a look at anything else; here the keys and values are at hand, so the caller need verify only the others.

    Args:
      source, pos, stop: the text and where the instruction lines start and end.
      lineno: the 1-based line of the first instruction line.
      head: `(name_token, is_entry, signature)` of the header.
      attr_res, transformer: as `_line_instruction` takes them.
      read_line: `(text, lineno)` -> the grammar's pending instruction for one line, or None when the line is
        not a whole instruction.
      unvetted: a list that gets, in order, each instruction not vetted (what `verify_instructions` must
        still check when no attribute holds a 19-digit number); the others pass it.
    """
    name_tok, is_entry, sig = head
    if name_tok[0] != "%":
        return None  # a computation named without `%`: build_computation checks the name
    match = _LINE.match
    findall = attr_res[1].findall
    find = source.find
    intern = _intern
    IB, OB, AB = InstructionBuilder, OperandBuilder, AttributeBuilder
    vetted = _VETTED
    valid_get = _VALID.get
    value_known = verifier.value_known
    if unvetted is None:
        unvetted = []
    sig_params = sig[0] if sig is not None else ()
    n_sig = len(sig_params)
    shapes: dict[str, Shape] = {}
    defined: dict[str, Operand] = {}
    defined_item = defined.__getitem__
    insts: list[Instruction] = []
    tails: dict[str, tuple | None] = {}  # `_read_tail` of each line tail read
    tails_get = tails.get

    def other(line: str, lineno: int):
        """Any line but the commonest, as the two-step path reads it, its operands resolved: the instruction's
        fields, _BLANK for a blank line, or None to decline the computation."""
        pending = _line_instruction(line, lineno, attr_res, transformer)
        if pending is None:
            if not line.strip():
                return _BLANK
            pending = read_line(line, lineno)
            if pending is None or len(pending) != 8:
                return None
        if len(pending) == 8:  # the grammar callbacks' form (also a constant's): name token second
            if any(len(o) != 2 for o in pending[4]):
                return None  # nested operands
            tok = pending[1]
            pending = (pending[0], str(tok), packed(tok.line, tok.column)) + pending[2:]
        is_root, iname, at, shape, opcode, operands, attrs, parameter, literal = pending
        if iname[0] != "%" or shape is None:
            return None  # a name without `%` (maybe a keyword), a shape to infer
        refs = []
        if type(operands) is tuple:  # the fast path's (names, line, column, text), or ()
            for oname in operands[0] if operands else ():
                ref = defined.get(oname)
                if ref is None:
                    return None
                refs.append(ref)
        else:  # the grammar's (token, shape written with it or None) pairs
            for otok, oshape in operands:
                ref = defined.get(otok[1:] if otok[0] == "%" else str(otok))
                if ref is None or (oshape is not None and not verifier.compatible(oshape, ref.shape)):
                    return None
                refs.append(ref)
        return (iname[1:], at, shape, opcode, tuple(refs), attrs, is_root, parameter, literal)

    while pos < stop:
        nl = find("\n", pos, stop)
        if nl < 0:
            nl = stop
        line = source[pos:nl]
        pos = nl + 1
        m = match(line)
        attrs = None  # the commonest line's attributes, once read
        if m is not None:
            root, name, shape_text, opcode, ops = m.groups()
            if (name[0] == "%" and opcode != "constant" and not line[-1].isspace()
                    and (not ops or (ops[0] == "%" and "/" not in ops and len(ops) < _LONG_OPERANDS)
                         or (opcode == "parameter" and ops.isdigit()))
                    and len(line) < _MAX_COLUMN and len(shape_text) < _CACHED_SHAPE):
                shape = shapes.get(shape_text)
                if shape is None:
                    try:
                        shape = shapes[shape_text] = decode_shape(shape_text)
                    except ValueError:
                        pass
                if shape is not None:
                    # The attributes by `findall`, whose matches must tile the rest of the line (each starts where
                    # the last ended): else (a gap, `key= value`, `device_ids`) `other` reads them one by one. Values
                    # repeat (metadata of unrolled layers, backend configs, shardings): a third or less of the
                    # attribute text of real dumps is unique, so one string per distinct value, one per key. The
                    # line's tail from `, metadata=` on (metadata, then mostly a backend_config) repeats whole
                    # (15 of 16 lines of an unrolled model's code): it is read once a computation (`_read_tail`).
                    at = lineno << _SHIFT
                    at1 = at + 1  # (a packed position is a two-digit int: one addition an attribute, not two)
                    p = m.end()
                    keys: list[str] = []
                    attrs = []
                    clean = "\\" not in line
                    end = len(line)
                    if p < end:
                        s = line.rfind(", metadata=", p)
                        if s < 0:
                            s = end
                        for space, key, raw in findall(line, p, s):
                            if key == "device_ids":
                                attrs = None
                                break
                            p += len(space) + len(key) + 2  # (`,`, the space, the key, `=`)
                            key = intern(key)
                            raw = intern(raw)
                            keys.append(key)
                            a = AB()  # (`ir.new_attribute`, inline)
                            a.key = key
                            a.raw = raw
                            a.at = at1 + p
                            a.__class__ = Attribute
                            attrs.append(a)
                            p += len(raw)
                            seen = valid_get(key)  # (`value_known`'s first test inline: most values were seen)
                            if seen is not None and raw not in seen and not value_known(key, raw):
                                clean = False
                        else:
                            if p != s:
                                attrs = None
                            elif s < end:
                                tail = line[s:]
                                read = tails_get(tail, _UNREAD)
                                if read is _UNREAD:
                                    if len(tails) >= _TAILS:
                                        tails.clear()
                                    read = tails[tail] = _read_tail(tail, findall)
                                if read is None:
                                    attrs = None
                                else:
                                    base = at1 + s
                                    for off, key, raw, known in read:
                                        keys.append(key)
                                        a = AB()
                                        a.key = key
                                        a.raw = raw
                                        a.at = base + off
                                        a.__class__ = Attribute
                                        attrs.append(a)
                                        if not known and not value_known(key, raw):
                                            clean = False
        if attrs is not None:
            opcode = intern(opcode)
            parameter = None
            iname = name[1:]
            if not ops:
                ops = ()
            elif ops[0] == "%":
                try:
                    ops = tuple(map(defined_item, ops[1:].split(", %")))
                except KeyError:
                    return None  # not defined before: the two-step path says which
            else:  # parameter(N)
                parameter = int(ops)
                ops = ()
            attrs = tuple(attrs)
            isig = (opcode, len(ops), parameter is None, *keys)
            if isig not in vetted:  # (a signature checked each time is vetted each time)
                remembered = _check_once(opcode, lineno, m.start(4) + 1, len(ops), parameter, keys, attrs, shape)
                if not verifier.signature_known((opcode, *keys)):
                    clean = False
                elif remembered:
                    if len(vetted) > 4096:
                        vetted.clear()
                    vetted.add(isig)
            is_root = root is not None
            at += m.start(2) + 1
            literal = None
        else:
            fields = other(line, lineno)
            if fields is None:
                return None
            if fields is _BLANK:
                lineno += 1
                continue
            iname, at, shape, opcode, ops, attrs, is_root, parameter, literal = fields
            clean = False
        lineno += 1
        if iname in defined:
            return None  # defined twice: the two-step path reports it
        if not ops and parameter is not None and 0 <= parameter < n_sig and sig_params[parameter][0] == iname:
            iname = sig_params[parameter][0]  # the signature's string: one per parameter name, not two
        o = OB()  # (`ir.new_operand`, inline)
        o.name = iname
        o.shape = shape
        o.__class__ = Operand
        defined[iname] = o
        i = IB()  # (`ir.new_instruction`, inline)
        i.name = iname
        i.opcode = opcode
        i.shape = shape
        i.operands = ops
        i.attributes = attrs
        i.is_root = is_root
        i.at = at
        i.parameter_number = parameter
        i.literal = literal
        i._attrs = None
        i.__class__ = Instruction
        insts.append(i)
        if not clean:
            unvetted.append(i)
    if not _ELEMENT_TYPES.isdisjoint(defined):
        verifier.check_instruction_names(insts)
    defined = defined_item = tails = tails_get = None
    if not insts:
        return None
    return finish_computation(name_tok[1:], name_tok, is_entry, sig, insts)


_ELEMENT_TYPES = frozenset(verifier.ELEMENT_BITS)


_TABLE_NAMES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_STRING_ROW = re.compile(r'[ \t]*(\d+)[ \t]+("(?:[^"\\\n]|\\.)*")[ \t]*$')
_BRACED_ROW = re.compile(r"[ \t]*(\d+)[ \t]+(\{[^{}\n]*\})[ \t]*$")


def parse_tables_fast(text: str, line0: int) -> dict[str, list] | None:
    """The stack-frame tables (`FileNames` ... `StackFrames`) as the grammar's callbacks build them, or None
    when a line is not a plain table row (then the grammar reads the header)."""
    tables: dict[str, list] = {}
    current = None
    braced = False
    for k, line in enumerate(text.split("\n")):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped in _TABLE_NAMES:
            if len(tables) >= 4 or stripped != _TABLE_NAMES[len(tables)]:
                return None  # XLA reads the four tables in order, each once: the grammar says what is wrong
            current = tables.setdefault(stripped, [])
            braced = stripped in ("FileLocations", "StackFrames")
            continue
        if current is None:
            return None
        if braced:
            m = _BRACED_ROW.match(line)
            if m is None or stripped in ("{", "}"):
                return None
            current.append((int(m.group(1)), m.group(2), Token("BRACED", m.group(2), line0 + k, m.start(2) + 1)))
        else:
            m = _STRING_ROW.match(line)
            if m is None:
                return None
            current.append((int(m.group(1)), unquote(m.group(2)), Token("INT", m.group(1), line0 + k, m.start(1) + 1)))
    return tables if len(tables) == 4 else None


_WORD_LINE = re.compile(r"[ \t]*([A-Za-z_]\w*)[ \t]*$")


def parse_tables_lenient(text: str, line0: int) -> tuple[dict[str, list], list[str]]:
    """The stack-frame tables of a dump from another XLA version: like `parse_tables_fast`, but a row this
    version cannot read, or a table it does not know, is skipped with a note (`line:column: ...; skipped`)
    instead of failing the parse. Never raises."""
    tables: dict[str, list] = {}
    notes: list[str] = []
    current: list | None = None
    unknown: tuple[str, int, int] | None = None  # (name, line, rows) of a table this version does not know
    braced = False

    def close_unknown() -> None:
        if unknown is not None:
            notes.append(f"{unknown[1]}:1: table {unknown[0]} ({unknown[2]} rows) is not one this XLA version "
                         f"prints ({', '.join(_TABLE_NAMES)}); skipped")

    for k, line in enumerate(text.split("\n")):
        stripped = line.strip()
        if not stripped:
            continue
        lineno = line0 + k
        word = _WORD_LINE.match(line)
        if word is not None:
            close_unknown()
            if stripped in _TABLE_NAMES:
                current, unknown = tables.setdefault(stripped, []), None
                braced = stripped in ("FileLocations", "StackFrames")
            else:
                current, unknown = None, (stripped, lineno, 0)
            continue
        if unknown is not None:
            unknown = (unknown[0], unknown[1], unknown[2] + 1)
            continue
        column = len(line) - len(line.lstrip()) + 1
        m = (_BRACED_ROW if braced else _STRING_ROW).match(line) if current is not None else None
        if m is None:
            what = "a row before any table" if current is None else (
                "a row that is not `N {key=value ...}`" if braced else 'a row that is not `N "text"`')
            notes.append(f"{lineno}:{column}: {what}: {stripped[:60]}; skipped")
            continue
        if braced:
            current.append((int(m.group(1)), m.group(2), Token("BRACED", m.group(2), lineno, m.start(2) + 1)))
        else:
            current.append((int(m.group(1)), unquote(m.group(2)), Token("INT", m.group(1), lineno, m.start(1) + 1)))
    close_unknown()
    return tables, notes
