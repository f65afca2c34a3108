"""A line-level fast path for the instructions XLA prints, falling back to the Lark grammar.

Most of a module's text is instruction lines in one canonical form:
`  [ROOT ]%name = <shape> <opcode>(%a, %b, ...)[, key=value]*`. `INSTRUCTION_LINE` is that form, the one
description of an instruction line besides the grammar (grammars/hlo.lark, rule `instruction`): the fast path
reads a line with it (and its attributes with one `findall` whose matches must tile the rest of the line), and a
lazy parse's index of a computation (`parser._index_of`) is one `findall` of it over the computation's text.
`LineReader` makes what the grammar's `HloTransformer` callbacks and checks make of such a line, so both paths
build identical IR (tests/hlo/test_fastpath.py compares them on every fixture and corpus module, positions
included). `LineReader.build` reads a computation's lines and builds the computation in one pass; what it declines
or finds wrong goes through the two-step path (`LineReader.instruction` per line, else the grammar for that line
alone, then `transformer.build_computation`), which says what is wrong; text not laid out one instruction per
line goes through the grammar whole. The grammar stays the definition of the language; this is only a shortcut
for its commonest sentence.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence

from analyzer.hlo.attributes import unquote, valid_values
from analyzer.hlo.ir import (Attribute, Computation, Instruction, Operand, Position, attribute_row, new_instruction,
                             new_operand, packed, row_attributes)
from analyzer.hlo.shapes import ARRAY_PATTERN, Shape, decode_shape
from analyzer.hlo import verifier
from analyzer.hlo.transformer import (OPERAND_NAME as _OPERAND, HloTransformer, OperandNames,
                                      finish_computation)

# decode_shape lives in analyzer.hlo.shapes; it is re-exported here for the callers that knew it here.
__all__ = ["INSTRUCTION_LINE", "LineReader", "parse_head_fast", "decode_shape", "FastToken"]

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

# ---------------------------------------------------------------------------------------------- the line
# An array shape as `shapes.ARRAY_PATTERN` reads it, written for `re`'s speed (possessive repeats, `(?:x|)` for
# `(?:x)?`): the same language (tests/hlo/test_parser.py compares the two).
_ARRAY_FAST = r"[a-zA-Z][a-zA-Z0-9]*+\[[^\]\n]*+\](?:\{[^{}\n]*+\}|[ \t]++\{(?:\d++(?:,\d++)*+|)(?::[^{}\n]*+|)\}|)"
_OPERAND_NAME = r"(?:/\*[^*\n]*+\*/)?%[A-Za-z_][a-zA-Z0-9_.\-]*+"

# One instruction line as XLA prints it, up to the end of its operand list (what follows is its attributes). It is
# the grammar's rule
#     instruction: ROOT? (NAME | COLON_NAME) "=" shape? NAME "(" [operand] ("," [operand])* ")" attribute*
#                | ROOT? (NAME | COLON_NAME) "=" shape CONSTANT_OPEN literal ")" attribute*
# in the one spelling XLA prints: the shape written, an array or a tuple (nested to four levels); the opcode in
# lower case; the operands `%name`s separated by `, ` (a `/*index=5*/` comment before one, as long lists have), or a
# bare token (`parameter(0)`, a scalar literal `constant(-inf)`), or a flat array literal `{1, 2, 3}`, or a literal
# left out (`{...}`: the index reads such a line; the grammar builds it), or none.
# Any other spelling (an operand with its shape, a nested literal, a line broken in two, a comment elsewhere) is
# read by the grammar. Led by the line's newline: `re` then finds the rows of a text with a fast literal scan, and a
# line is matched at its newline (`match(text, start - 1, end)`), so each line gives at most one match.
# Groups: 1 `ROOT ` or "", 2 `%` or "", 3 the name, 4 the shape, 5 the opcode, 6 the operand text ("" for none).
# Written for `re`'s speed: repeats possessive where what follows cannot start with what they repeat, an optional
# part as an alternative with an empty last branch, the classes as explicit ASCII sets.
INSTRUCTION_LINE = re.compile(
    r"\n[ \t]*+(ROOT[ \t]++|)(%?+)([A-Za-z_][A-Za-z0-9_.\-]*+)[ \t]*+=[ \t]*+(" + _ARRAY_FAST + "|" + _TUPLE
    + r")[ \t]++([a-z][a-z0-9\-]*+)\((" + _OPERAND_NAME + r"(?:, " + _OPERAND_NAME + r")*+|[a-zA-Z0-9_.+\-]++"
    + r"|\{(?:(?:" + _SCALAR_TEXT + r")(?:, (?:" + _SCALAR_TEXT + r"))*+|)\}|\{\.\.\.\}|)\)", re.A)
# The groups of `INSTRUCTION_LINE`, by name.
MARK, PERCENT, NAME, SHAPE, OPCODE, OPERANDS = range(6)
GROUPS = 6

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
_MAX_COLUMN = Position._COLUMN
# A shape text this long (a tuple of thousands) is decoded without `decode_shape`'s memo, which would keep a copy
# of the text for the rest of the call (2.2 MB for a 200,000-element tuple); its elements still go through it.
_CACHED_SHAPE = 4096
# An operand list this long (a tuple of thousands) is not split into a list of names (`OperandNames`).
_LONG_OPERANDS = 4096
_decode_shape_once = decode_shape.__wrapped__
# What a `LineReader` remembers, each at most this many (emptied when full): the checked signatures, the vetted
# ones, the whole attribute texts read (of at most `_CACHED_TEXT` characters), the operand shape tuples, and a
# computation's line tails.
_REMEMBERED = 4096
_CACHED_TEXT = 256
_SHARED_OPERANDS = 16  # (`LineReader.shared`)
_UNREAD = object()  # a line tail or an attribute text not read yet
_BLANK = object()  # `_Build.other`'s answer for a blank line


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


class _Declined(Exception):
    """A computation `LineReader.build` leaves to the two-step path (which says what is wrong, if anything)."""


class LineReader:
    """What one parse reads instruction lines with: the attribute patterns (`parser._attr_regex`), the grammar's
    callbacks, the grammar's reading of a single line (`read_line`), and what it remembers from line to line,
    owned by the parse (a lazily parsed module keeps it for the computations it reads later) and bounded: the
    `(opcode, operand count, no parameter number, *keys)` signatures that passed `verifier.check_instruction`
    (`checked`) and those of them `verifier.signature_known` knows too (`vetted`), the whole attribute texts
    read (`texts`: 8,057 dot lines of an unrolled model have 13), and the instructions' operand shape tuples
    (`shape_tuples`, see `shared`)."""

    __slots__ = ("attr_one", "attr_all", "transformer", "read_line", "checked", "vetted", "texts", "shape_tuples")

    def __init__(self, attr_res: tuple[re.Pattern, re.Pattern], transformer: HloTransformer, read_line) -> None:
        self.attr_one, self.attr_all = attr_res
        self.transformer, self.read_line = transformer, read_line
        self.checked: set[tuple] = set()
        self.vetted: set[tuple] = set()
        self.texts: dict[str, tuple | None] = {}
        self.shape_tuples: dict[tuple[int, ...], tuple] = {}

    def shared(self, shapes: tuple) -> tuple:
        """`shapes` (an instruction's `operand_shapes`, a computation's `parameter_types`), or an equal tuple of the
        same `Shape` objects made before in this parse: one tuple for all the instructions whose operands have the
        same shapes (53 tuples for the 94,000 instructions with operands of the synthetic module; likewise the
        computations' parameters), so that the collector has one object an instruction to walk, not two. Keyed by the shapes' ids (the kept tuple holds them, so no id is reused
        while its key is here): a `Shape`'s own hash walks its fields. A tuple of more than `_SHARED_OPERANDS`
        (a tuple instruction's thousands) is its own."""
        if not shapes or len(shapes) > _SHARED_OPERANDS:
            return shapes
        key = tuple(map(id, shapes))
        tuples = self.shape_tuples
        found = tuples.get(key)
        if found is None:
            if len(tuples) >= _REMEMBERED:
                tuples.clear()
            found = tuples[key] = shapes
        return found

    # ------------------------------------------------------------------------------------ one line
    def instruction(self, source: str, start: int, end: int, lineno: int):
        """The line `source[start:end]` (`source[start - 1]` its newline) -> a pending-instruction tuple, or None
        when it is not in `INSTRUCTION_LINE`'s form.

        The common line gives the fast form `(is_root, name, at, shape, opcode, operands, attributes, parameter,
        literal)` (`name` as written, `%` included; `at` its packed position; `operands` empty or `(names, line,
        column of the first, text when comments sit between them)`); a constant gives the grammar callback's
        8-tuple. `build_computation` takes either.
        """
        m = INSTRUCTION_LINE.match(source, start - 1, end)
        if m is None:
            return None
        root, percent, name, shape_text, opcode, ops = m.groups()
        if not percent and source[m.end(NAME + 1):m.end(NAME + 1) + 1] == "=":
            return None  # `c= ...`: XLA's lexer reads `c=` as an attribute name; the grammar reports it
        try:
            shape = decode_shape(shape_text) if len(shape_text) < _CACHED_SHAPE else _decode_shape_once(shape_text)
        except ValueError:
            return None
        opcode = _intern(opcode)  # one string per opcode, not one per instruction
        line = source[start:end]
        column = m.start(OPERANDS + 1) - start + 1  # (of the operand text)
        operands, n_operands, parameter = _operands(opcode, ops, lineno, column)
        if operands is None:
            return None
        pos = m.end() - start
        stop = len(line)
        if stop and line[-1].isspace():  # (the line ends in a name, `)` or `}` when printed by XLA: no copy to strip)
            stop = len(line.rstrip())
        if stop >= _MAX_COLUMN:
            return None  # a line longer than a packed column holds: the grammar path (it clamps) reads it
        at = lineno << _SHIFT
        keys: list | tuple = ()
        row: tuple = ()
        if pos < stop:
            tiled = self._tiled_attributes(line, pos, stop, at)
            if tiled is not None:
                keys, row = tiled
            else:
                attrs = _attributes_slow(line, pos, stop, lineno, self.attr_one, self.transformer)
                if attrs is None:
                    return None
                row = attribute_row(attrs)
                keys = row[:len(attrs)]
        name = percent + name
        if opcode == "constant":
            children = ([Token("ROOT", "ROOT", lineno, m.start(MARK + 1) - start + 1)] if root else []) + [
                Token("NAME", name, lineno, m.start(PERCENT + 1) - start + 1), shape,
                Token("CONSTANT_OPEN", "constant(", lineno, m.start(OPCODE + 1) - start + 1),
                _literal(ops, lineno, column), *row_attributes(row)]
            return self.transformer.constant_instruction(children)
        # What `HloTransformer.instruction` makes of the same line, without its generic loop over children.
        self.check_once(opcode, lineno, m.start(OPCODE + 1) - start + 1, n_operands, parameter, keys, row, shape)
        return (bool(root), name, at + m.start(PERCENT + 1) - start + 1, shape, opcode, operands, row, parameter,
                None)

    def _tiled_attributes(self, line: str, start: int, end: int, at: int) -> tuple[list[str], tuple] | None:
        """The keys and the attribute row (`Instruction.attribute_row`) of `line[start:end]` read by one
        `findall` (the `, key=value` pattern of
        `parser._attr_regex`, through `_read_tail`), or None when its matches do not tile that text exactly (a
        gap, `key= value`, `device_ids`: then they are read one by one). When they tile it, each is what a match
        at its place gives (the first starts where the head ends, each next where the last ended). `at`: the
        line's packed position. (What follows `end` is the line's trailing whitespace, where no match starts: the
        cut text tiles exactly when the line does.) A text of at most `_CACHED_TEXT` characters is read once a
        parse (`texts`) and only placed here."""
        text = line[start:end]
        texts = self.texts
        read = texts.get(text, _UNREAD) if len(text) <= _CACHED_TEXT else _UNREAD
        if read is _UNREAD:
            read = _read_tail(text, self.attr_all.findall)
            if len(text) <= _CACHED_TEXT:
                if len(texts) >= _REMEMBERED:
                    texts.clear()
                texts[text] = read
        if read is None:
            return None
        keys: list[str] = []
        raws: list[str] = []
        ats: list[int] = []
        base = at + start + 1
        for off, key, raw, _ in read:
            keys.append(key)
            raws.append(raw)
            ats.append(base + off)
        return keys, (*keys, *raws, *ats)

    def check_once(self, opcode: str, lineno: int, column: int, n_operands: int, parameter: int | None,
                   keys: Sequence[str], row: tuple, shape: Shape) -> bool:
        """`verifier.check_instruction` of an instruction read by the fast path, once per combination of what it
        depends on: the opcode, the operand count, whether a parameter number was given and the attribute keys
        (and one value, use_global_device_ids, when no channel_id is there; and a `tuple`'s shape: such lines
        are checked each time). Returns whether the combination is remembered (not one checked each time)."""
        sig = (opcode, n_operands, parameter is None, *keys)
        checked = self.checked
        if sig in checked:
            return True
        verifier.check_instruction(Token("NAME", opcode, lineno, column), n_operands, parameter, row_attributes(row),
                                   shape)
        if opcode == "tuple" or ("use_global_device_ids" in sig and "channel_id" not in sig):
            return False
        if len(checked) >= _REMEMBERED:
            checked.clear()
        checked.add(sig)
        return True

    # ------------------------------------------------------------------------------------ a computation
    def build(self, source: str, pos: int, stop: int, lineno: int, head,
              unvetted: list[Instruction] | None = None) -> Computation | None:
        """A computation's instruction lines (`source[pos:stop]`, the line after the header first) read and built
        in one pass: what `build_computation` makes of the lines `instruction` (else `read_line`) reads, or None,
        and then the caller takes that path (which reports what is wrong: callers send any exception there too).

        The commonest line (names as operands, attributes that `findall` tiles) is read without the pending
        tuple and the generic loop of the two-step path (`_Build.common`); each line is sliced when it is read
        and what it makes is freed before the next (bounded memory on a computation of 200,000 lines, as in the
        two-step path). Each line's operands are resolved as it is read: an operand not defined before it, a
        name defined twice, an instruction named without `%`, a shape left out, nested operands or a line
        `read_line` cannot take make it return None.

        A commonest line is also vetted as it is read: `verifier.verify_instructions` (with no 19-digit number
        in the text) passes an instruction whose opcode and keys it knows (`verifier.signature_known`) and whose
        values it found valid before (`verifier.value_known`, which also takes what a value's quick check
        takes), without a look at anything else; here the keys and values are at hand, so the caller need verify
        only the others.

        Args:
          source, pos, stop: the text and where the instruction lines start and end.
          lineno: the 1-based line of the first instruction line.
          head: `(name_token, is_entry, signature)` of the header.
          unvetted: a list that gets, in order, each instruction not vetted (what `verify_instructions` must
            still check when no attribute holds a 19-digit number); the others pass it.
        """
        name_tok, is_entry, sig = head
        if name_tok[0] != "%":
            return None  # a computation named without `%`: build_computation checks the name
        build = _Build(self, sig[0] if sig is not None else (), unvetted if unvetted is not None else [])
        find = source.find
        try:
            while pos < stop:
                nl = find("\n", pos, stop)
                if nl < 0:
                    nl = stop
                build.line(source, pos, nl, lineno)
                pos = nl + 1
                lineno += 1
        except _Declined:
            return None
        insts = build.insts
        if not _ELEMENT_TYPES.isdisjoint(build.defined):
            verifier.check_instruction_names(insts)
        if not insts:
            return None
        return finish_computation(name_tok[1:], name_tok, is_entry, sig, insts, shared=self.shared)


def _operands(opcode: str, ops: str, lineno: int, column: int) -> tuple[tuple | None, int, int | None]:
    """`(operands, their count, parameter number)` of a line's operand text as `LineReader.instruction` gives
    them; operands None when the text is not one the fast path reads for `opcode`. Operands as `(names, line,
    column of the first, the text when a comment sits between them)`: one tuple per instruction, not one per
    operand (a 200,000-operand tuple line made 200,000); `build_computation` works out an operand's column only
    to report it (`transformer.operand_places`)."""
    if opcode == "constant":  # a scalar `constant(-inf)` or a flat array `constant({0, 1})`; others go to the grammar
        if not ops or (ops[0] != "{" and not _SCALAR.fullmatch(ops)) or ops == "{...}":
            return None, 0, None
        return (), 0, None
    if not ops:
        return (), 0, None
    if len(ops) >= _LONG_OPERANDS and ops[0] in "%/":  # thousands: each name read as it is resolved
        names = OperandNames(ops)
        return (names, lineno, column, ops), len(names), None
    if ops[0] == "%" and "/" not in ops:  # `%a, %b`: a name holds no `, %`, so a split finds them all
        names = ops[1:].split(", %")
        return (names, lineno, column, None), len(names), None
    if ops[0] == "%" or ops[0] == "/":
        names = _OPERAND.findall(ops)
        return (names, lineno, column, ops), len(names), None
    if opcode == "parameter" and ops.isdigit():
        return (), 0, int(ops)
    return None, 0, None


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


def _read_tail(tail: str, findall) -> tuple[tuple[int, str, str, bool], ...] | None:
    """The attributes of a line's tail (its text from an attribute's `, ` on) by `findall` (the pattern of
    `parser._attr_regex`), as `(offset of the value in the tail, key, value, known valid)` each; None when the
    matches do not tile it or one is `device_ids` (then the line is read by `LineReader.instruction`). When a
    line's matches up to the tail (`findall` with the tail's start as its end) tile that part and these tile the
    tail, together they are the line's own matches: a value that ends at the tail's `,` in the cut text ends there
    in the whole line too (what can cross a `,` is a bracket or a string, which the cut text cannot close), and the
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


class _Build:
    """One computation as `LineReader.build` reads it, line by line: the instructions so far (`insts`), the shape
    of each name defined (`defined`) and the name's own string (`named`: an operand's name is the definition's
    string, not the one its reader's line holds), and the shapes and line tails read so far (a computation repeats
    them: the tail from `, metadata=` on of 15 of 16 lines of an unrolled model's code is one already read)."""

    __slots__ = ("reader", "params", "unvetted", "insts", "defined", "named", "shapes", "tails", "valid")

    def __init__(self, reader: LineReader, params: tuple, unvetted: list[Instruction]) -> None:
        self.reader, self.params, self.unvetted = reader, params, unvetted
        self.valid = valid_values()  # (this call's values found valid: looked up once a computation, not a line)
        self.insts: list[Instruction] = []
        self.defined: dict[str, Shape] = {}
        self.named: dict[str, str] = {}
        self.shapes: dict[str, Shape] = {}
        self.tails: dict[str, tuple | None] = {}

    def line(self, source: str, start: int, end: int, lineno: int) -> None:
        """Read and build the line `source[start:end]` (`source[start - 1]` its newline).

        Raises:
          _Declined: a line this one pass does not build (the two-step path reads the computation).
        """
        m = INSTRUCTION_LINE.match(source, start - 1, end)
        fields = self.common(source[start:end], m.end() - start, m.groups(), lineno,
                             m.start(OPCODE + 1) - start + 1, m.start(PERCENT + 1) - start + 1) \
            if m is not None else None
        if fields is None:
            fields = self.other(source, start, end, lineno)
            if fields is _BLANK:
                return
        iname, at, shape, opcode, names, shapes, attrs, is_root, parameter, literal, clean = fields
        if iname in self.defined:
            raise _Declined  # defined twice: the two-step path reports it
        params = self.params
        if not names and parameter is not None and 0 <= parameter < len(params) and params[parameter][0] == iname:
            iname = params[parameter][0]  # the signature's string: one per parameter name, not two
        self.defined[iname] = shape
        self.named[iname] = iname
        inst = new_instruction(iname, opcode, shape, names, shapes, attrs, is_root, at, parameter, literal)
        self.insts.append(inst)
        if not clean:
            self.unvetted.append(inst)

    def common(self, line: str, pos: int, groups: tuple, lineno: int, opcode_column: int, name_column: int):
        """The fields of a commonest line (`%name = shape opcode(%a, %b)` or `parameter(N)`, attributes that one
        `findall` tiles), vetted as it is read (see `LineReader.build`); None for any other line.

        Raises:
          _Declined: an operand not defined before the line (the two-step path says which).
        """
        root, percent, name, shape_text, opcode, ops = groups
        if (not percent or opcode == "constant" or line[-1].isspace() or len(line) >= _MAX_COLUMN
                or len(shape_text) >= _CACHED_SHAPE
                or not (not ops or (ops[0] == "%" and "/" not in ops and len(ops) < _LONG_OPERANDS)
                        or (opcode == "parameter" and ops.isdigit()))):
            return None
        shape = self.shapes.get(shape_text)
        if shape is None:
            try:
                shape = self.shapes[shape_text] = decode_shape(shape_text)
            except ValueError:
                return None
        at = lineno << _SHIFT
        read = self.attributes(line, pos, at + 1)
        if read is None:
            return None
        keys, row, clean = read
        opcode = _intern(opcode)
        parameter = None
        names: tuple = ()
        shapes: tuple = ()
        if not ops:
            pass
        elif ops[0] == "%":
            split = ops[1:].split(", %")
            try:
                shapes = tuple(map(self.defined.__getitem__, split))
            except KeyError:
                raise _Declined from None  # not defined before: the two-step path says which
            names = tuple(map(self.named.__getitem__, split))
            shapes = self.reader.shared(shapes)
        else:  # parameter(N)
            parameter = int(ops)
        if not self.vet(opcode, len(names), parameter, keys, row, shape, lineno, opcode_column):
            clean = False
        return name, at + name_column, shape, opcode, names, shapes, row, bool(root), parameter, None, clean

    def vet(self, opcode: str, n_operands: int, parameter: int | None, keys: list[str], row: tuple,
            shape: Shape, lineno: int, column: int) -> bool:
        """`LineReader.check_once` of a commonest line; whether its signature is one `verify_instructions`
        passes unread (`verifier.signature_known`, remembered in `vetted` when `check_once` remembers it)."""
        reader = self.reader
        vetted = reader.vetted
        isig = (opcode, n_operands, parameter is None, *keys)
        if isig in vetted:
            return True
        remembered = reader.check_once(opcode, lineno, column, n_operands, parameter, keys, row, shape)
        if not verifier.signature_known((opcode, *keys)):
            return False
        if remembered:  # (a signature checked each time is vetted each time)
            if len(vetted) >= _REMEMBERED:
                vetted.clear()
            vetted.add(isig)
        return True

    def attributes(self, line: str, p: int, at1: int) -> tuple[list[str], tuple, bool] | None:
        """The keys and the attribute row (`Instruction.attribute_row`) of `line` from `p` on, and whether every
        value is known valid (no `\\`
        in the line), by `findall`, whose matches must tile the rest of the line (each starts where the last
        ended); None when they do not (a gap, `key= value`, `device_ids`: `other` reads them one by one). Values
        repeat (metadata of unrolled layers, backend configs, shardings): a third or less of the attribute text of
        real dumps is unique, so one string per distinct value, one per key. The line's tail from `, metadata=` on
        (metadata, then mostly a backend_config) is read once a computation (`_read_tail`). `at1`: the line's
        packed position of column 1."""
        keys: list[str] = []
        raws: list[str] = []
        ats: list[int] = []
        clean = "\\" not in line
        end = len(line)
        if p >= end:
            return keys, (), clean
        findall = self.reader.attr_all.findall
        valid_get, value_known, intern = self.valid.get, verifier.value_known, _intern
        s = line.rfind(", metadata=", p)
        if s < 0:
            s = end
        for space, key, raw in findall(line, p, s):
            if key == "device_ids":
                return None
            p += len(space) + len(key) + 2  # (`,`, the space, the key, `=`)
            key = intern(key)
            raw = intern(raw)
            keys.append(key)
            raws.append(raw)
            ats.append(at1 + p)
            p += len(raw)
            seen = valid_get(key)  # (`value_known`'s first test inline: most values were seen)
            if seen is not None and raw not in seen and not value_known(key, raw):
                clean = False
        if p != s:
            return None
        if s < end:
            tail = line[s:]
            tails = self.tails
            read = tails.get(tail, _UNREAD)
            if read is _UNREAD:
                if len(tails) >= _REMEMBERED:
                    tails.clear()
                read = tails[tail] = _read_tail(tail, findall)
            if read is None:
                return None
            base = at1 + s
            for off, key, raw, known in read:
                keys.append(key)
                raws.append(raw)
                ats.append(base + off)
                if not known and not value_known(key, raw):
                    clean = False
        return keys, (*keys, *raws, *ats), clean

    def other(self, source: str, start: int, end: int, lineno: int):
        """Any line but the commonest, as the two-step path reads it, its operands resolved: the instruction's
        fields (not vetted), or _BLANK for a blank line.

        Raises:
          _Declined: a line the two-step path must read (not a whole instruction, nested operands, a name
            without `%`, a shape to infer, an operand not defined before it).
        """
        reader = self.reader
        pending = reader.instruction(source, start, end, lineno)
        if pending is None:
            line = source[start:end]
            if not line.strip():
                return _BLANK
            pending = reader.read_line(line, lineno)
            if pending is None or len(pending) != 8:
                raise _Declined
        if len(pending) == 8:  # the grammar callbacks' form (also a constant's): name token second
            if any(len(o) != 2 for o in pending[4]):
                raise _Declined  # nested operands
            tok = pending[1]
            pending = (pending[0], str(tok), packed(tok.line, tok.column)) + pending[2:]
        is_root, iname, at, shape, opcode, operands, attrs, parameter, literal = pending
        if iname[0] != "%" or shape is None:
            raise _Declined  # a name without `%` (maybe a keyword), a shape to infer
        defined, named = self.defined, self.named
        names, shapes = [], []
        if type(operands) is tuple:  # the fast path's (names, line, column, text), or ()
            for oname in operands[0] if operands else ():
                oshape = defined.get(oname)
                if oshape is None:
                    raise _Declined
                names.append(named[oname])
                shapes.append(oshape)
        else:  # the grammar's (token, shape written with it or None) pairs
            for otok, written in operands:
                oname = otok[1:] if otok[0] == "%" else str(otok)
                oshape = defined.get(oname)
                if oshape is None or (written is not None and not verifier.compatible(written, oshape)):
                    raise _Declined
                names.append(named[oname])
                shapes.append(oshape)
        return (iname[1:], at, shape, opcode, tuple(names), reader.shared(tuple(shapes)), attrs, is_root, parameter,
                literal, False)


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
