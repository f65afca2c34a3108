"""`parse_hlo`: HLO text -> `analyzer.hlo.ir.HloModule`, through the Lark grammar in grammars/hlo.lark.

Two paths:

- full (default): one LALR pass over the whole text with the transformer inlined (no parse tree), then
  every known attribute is decoded once so malformed values are reported with their position.
- lazy (`lazy=True`): a fast line scanner splits the text into the header and the computations; each
  computation is parsed only when its instructions are first asked for (`LazyComputation`). Until then its
  questions (the query interface of `ir.Computation`: `written`/`mentions`, `select`, `call_instructions`,
  `line_head`, `users_of`, `parameter_name`) are answered from one index of its lines (`_index_of`: one pass of
  `fastpath.INSTRUCTION_LINE`, name, opcode, shape and operands per line) and the few lines they need read by the
  fast path; a computation with a line not in XLA's form parses instead. The module-level checks of a full
  parse run before `parse_hlo` returns, on each computation's call lines (`_check_read`).

Errors are `analyzer.HloSyntaxError` / `analyzer.HloSemanticError` with path, line, column, the source
line and a caret; no Lark exception escapes.
"""

from __future__ import annotations

import operator
import re
import weakref
from array import array
from bisect import bisect_left
from itertools import chain
from dataclasses import replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from sys import intern as _intern
from typing import TYPE_CHECKING

from analyzer.errors import AnalyzerError, HloSemanticError, HloSyntaxError
from analyzer.hlo.attributes import CALL_KEYS, names_callee
from analyzer.hlo.fastpath import (_ARRAY, GROUPS, INSTRUCTION_LINE, MARK, NAME, OPCODE, OPERANDS, SHAPE, LineReader,
                                   parse_head_fast, parse_tables_fast, parse_tables_lenient)
from analyzer.hlo.ir import Computation, HloModule, Instruction, LineHead, Position, new_instruction, packed
from analyzer.hlo.memo import one_call
from analyzer.hlo.shapes import Shape, decode_shape
from analyzer.hlo import transformer as _transformer_module
from analyzer.hlo.transformer import (CALLEES, DroppedModule, HloTransformer, NeedsModuleParse, build_computation,
                                      build_single, callee_table, frames, inline_computations, single_instruction_mode)
from analyzer.hlo.tuplerefs import LineMap, expand, has_tuple_refs
from analyzer.hlo import verifier as _verifier
from analyzer.hlo.verifier import check_alias_outputs, check_computations, verify_header, verify_instructions, vetted

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping

    from lark import Lark

__all__ = ["parse_hlo", "parse_hlo_file", "parse_instruction", "parse_shape", "LazyComputation",
           "attribute_value_pattern"]

# Deepest bracket nesting inside one attribute value (backend_config JSON is the deepest XLA prints).
_MAX_NESTING = 24


def attribute_value_pattern(depth: int = _MAX_NESTING, *, continuation: bool = True) -> str:
    """The regex of one attribute value: plain characters, quoted strings and bracket-balanced groups.

    Python's `re` has no recursion, so balanced groups are unrolled to `depth` levels (brackets and
    parentheses to 4); possessive quantifiers keep matching linear. The typed decoders check the inner
    syntax of the values they know.

    Example:
      >>> import re
      >>> re.fullmatch(attribute_value_pattern(3), "{{0,1},{2,3}}") is not None
      True
    """
    # (A quoted string as runs of plain characters between escapes, `"[^"\\]*+(?:\\.[^"\\]*+)*+"`: the same strings
    # as `"(?:[^"\\]|\\.)*+"`, and `re` reads a run in one step rather than one character per repetition, which
    # made reading a line's attributes a third faster.)
    dq = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
    string = dq + "|" + r"'[^'\\]*+(?:\\.[^'\\]*+)*+'"
    # Inside braces XLA's lexer balances braces only, and skips double-quoted strings (a JSON backend_config
    # with a `]` dropped or a stray `'` is still one value to it); `[...]` and `(...)` groups (`[4,2]<=[8]`, `device_ids=(...)`) balance every kind.
    brace = ""
    for _ in range(depth):
        brace = r'\{(?:[^{}"]++|' + dq + (("|" + brace) if brace else "") + r")*+\}"
    inner = r"""[^{}\[\]()"']++""" + "|" + string + "|" + brace
    group = ""
    for _ in range(min(depth, 4)):
        alts = inner + (("|" + group) if group else "")
        group = r"[\[(](?:" + alts + r")*+[\])]"
    group = brace + "|" + group
    plain = r"""[^\s,{}\[\]()"'/]++|/(?!/)"""
    value = r"(?:" + plain + "|" + string + "|" + group + r")++"
    if not continuation:
        return value
    # Instruction attributes may hold spaces at the top level: the mesh replica-group form
    # `mesh['x'=4] {'x'}`, literals `literal=f32[] 0.1`. A space continues the value unless what follows
    # starts something else: `,`, `}`, a comment, `ROOT`, or a name followed by `=` (the next instruction).
    more = r"(?:\s++(?!ROOT\b|ENTRY\b|%|[,}/]|[A-Za-z_][\w.\-]*\s*=)" + value + r")*+"
    return value + more


_ATTR_KEY = r"[a-zA-Z_][a-zA-Z0-9_.\-]*=\s*"
_BRACED = r"\{[^{}]*\}"


@lru_cache(maxsize=1)
def _lark() -> Lark:
    """The compiled LALR parser with the transformer inlined (built once per process)."""
    from lark import Lark

    grammar = resources.files("analyzer").joinpath("_data/grammars/hlo.lark").read_text(encoding="utf-8")
    def terminal(pattern: str) -> str:
        return "/" + pattern.replace("/", "\\/") + "/"

    grammar = grammar.replace("/__ATTR__/", terminal(_ATTR_KEY + attribute_value_pattern()))
    grammar = grammar.replace("/__MODULE_ATTR__/", terminal(_ATTR_KEY + attribute_value_pattern(continuation=False)))
    grammar = grammar.replace("/__BRACED__/", "/" + _BRACED + "/")
    return Lark(
        grammar,
        parser="lalr",
        lexer="contextual",
        start=["module", "header", "computation", "computation_head", "program_layout", "instruction",
               "single_instruction", "shape", "callee", "callees"],
        transformer=HloTransformer(),
        maybe_placeholders=True,
        propagate_positions=False,
        cache=False,
        lexer_callbacks={"COLON_NAME": _colon_name},
    )


def _colon_name(tok):
    """`p:` where a name stands: the name `p`, as XLA's lexer reads it (only this spelling pays for the call). The
    token keeps its type, so the parser takes it only where the grammar allows it (a name, never an opcode: the
    lexer state after a shape, shared by `shape %operand` and `shape opcode(`, lexes `negate:` so)."""
    return tok.update(value=tok[:-1])


# ---------------------------------------------------------------------------------------------- errors

# What each terminal means to a person who writes HLO (Lark's names never reach the user).
_TERMINALS: dict[str, str] = {
    "NAME": "a name like `%x`",
    "PARAM_NAME": "a parameter like `p0: f32[2]`",
    "ARRAY_SHAPE": "a shape like `f32[2,3]`",
    "BUFFER_OPEN": "a buffer shape like `b(f32[2])`",
    "OPCODE": "an opcode like `add`",
    "CONSTANT_OPEN": "`constant(`",
    "INT": "a number",
    "SCALAR": "a literal value like `1.5`",
    "DOTS": "`...`",
    "STRING": 'a quoted string like `"a.py"`',
    "BRACED": "`{key=value ...}`",
    "ATTR": "an attribute like `dimensions={0}`",
    "ENTRY": "`ENTRY`",
    "ROOT": "`ROOT`",
    "LPAR": "`(`",
    "RPAR": "`)`",
    "LBRACE": "`{`",
    "RBRACE": "`}`",
    "LSQB": "`[`",
    "RSQB": "`]`",
    "COMMA": "`,`",
    "EQUAL": "`=`",
    "MORETHAN": "`>`",
    "__ANON_0": "`->`",
    "HLOMODULE": "`HloModule`",
    "FILENAMES": "the table `FileNames`",
    "FUNCTIONNAMES": "the table `FunctionNames`",
    "FILELOCATIONS": "the table `FileLocations`",
    "STACKFRAMES": "the table `StackFrames`",
    "$END": "the end of the text",
}

_INSTRUCTION = "an instruction like `%name = f32[2] add(%a, %b)`"


def _describe_expected(expected: set[str]) -> str:
    """One sentence of what was expected, most specific first."""
    e = set(expected)
    if "NAME" in e:
        e.discard("COLON_NAME")  # (`x:`, XLA's other spelling of the name `x`)
    if "OPCODE" in e or e == {"NAME", "CONSTANT_OPEN"}:  # (the opcode is lexed as a NAME)
        return "expected an opcode like `add` or `constant(...)` after the shape"
    if {"ROOT", "NAME", "RBRACE"} <= e:
        return f"expected {_INSTRUCTION}, or `}}` to end the computation"
    if "ATTR" in e and len(e - {"ATTR"}) <= 1:
        return "expected an attribute like `dimensions={0}` after `,`"
    if "ARRAY_SHAPE" in e and "NAME" not in e and "SCALAR" not in e:
        return "expected a shape like `f32[2,3]` or `(f32[], s32[])`"
    if "SCALAR" in e:
        return "expected a literal like `1`, `{1, 2}` or `{ {1, 2}, {3, 4} }`"
    if "HLOMODULE" in e:
        return "expected `HloModule name` at the start of the module"
    if "NAME" in e and ("ENTRY" in e or "$END" in e) and "ROOT" not in e:
        return "expected a computation like `ENTRY %main (p: f32[2]) -> f32[2] { ... }`"
    if e == {"EQUAL"}:
        return "expected `=` after the instruction name"
    names = [_TERMINALS.get(t, t.lower()) for t in sorted(e)]
    if not names:
        return "unexpected text"
    return "expected " + (names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1])


def _source_line(text: str, line: int | None) -> str | None:
    if line is None or line < 1:
        return None
    start = 0
    for _ in range(line - 1):
        start = text.find("\n", start) + 1
        if start == 0:
            return None
    end = text.find("\n", start)
    return text[start:] if end < 0 else text[start:end]


def _positioned(err: AnalyzerError, text: str, path: str | None) -> AnalyzerError:
    """The same error with the path and the source line filled in."""
    if isinstance(err, (HloSyntaxError, HloSemanticError)):
        if err.path is not None and err.source_line is not None:
            return err
        return type(err)(err.message, path=path, line=err.line, column=err.column,
                         source_line=err.source_line or _source_line(text, err.line))
    return err


def _from_lark(e: Exception, text: str, path: str | None, line_offset: int = 0) -> HloSyntaxError:
    """Translate a Lark exception into an HloSyntaxError in HLO terms."""
    from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedToken

    line = getattr(e, "line", None)
    column = getattr(e, "column", None)
    if isinstance(e, UnexpectedToken):
        tok = e.token
        if tok.type == "$END":
            found = "the end of the text"
            line, column = _end_position(text)
        else:
            found = f"`{str(tok)[:40]}{':' if tok.type == 'COLON_NAME' else ''}`"
        msg = f"{_describe_expected(set(e.expected))}, found {found}"
    elif isinstance(e, UnexpectedCharacters):
        # (by line and column: a line or computation parsed on its own counts `pos_in_stream` in its own text)
        src = _source_line(text, (line or 0) + line_offset) if isinstance(column, int) else None
        if src is not None and 0 < column <= len(src):
            ch = src[column - 1]
        else:
            ch = text[e.pos_in_stream] if 0 <= e.pos_in_stream < len(text) else ""
        allowed = set(e.allowed or ())
        msg = f"{_describe_expected(allowed)}, found `{ch}`" if allowed else f"unexpected character `{ch}`"
        if ch == "\x00":
            msg = "unexpected NUL character"
    elif isinstance(e, UnexpectedEOF):
        line, column = _end_position(text)
        msg = f"{_describe_expected(set(e.expected))}, found the end of the text"
    else:
        msg = f"cannot parse: {e}"
    if line is not None and line_offset:
        line += line_offset
    if isinstance(line, int) and line < 1:
        line, column = None, None
    return HloSyntaxError(msg, path=path, line=line, column=column,
                          source_line=_source_line(text, line) if line else None)


def _end_position(text: str) -> tuple[int, int]:
    stripped = text.rstrip()
    line = stripped.count("\n") + 1
    column = len(stripped) - (stripped.rfind("\n") + 1) + 1
    return line, column


# ---------------------------------------------------------------------------------------------- full


@one_call
def parse_hlo(text: str, *, path: str | None = None, lazy: bool = False, lenient: bool = False) -> HloModule:
    """Parse HLO text as XLA prints it (`compiled.as_text()`, `--xla_dump_to` files) into an `HloModule`.

    Args:
      text: the module text, starting with `HloModule`.
      path: where the text came from, for error messages and `HloModule.path`.
      lazy: split computations with a fast scanner and parse each only when its instructions are first
        used (see the module docstring); errors inside a computation then surface on that access.
      lenient: for dumps from another XLA version: keep opcodes and attributes this XLA does not know (or
        does not allow on that opcode) as written, and list each in `HloModule.notes` instead of raising.

    Returns:
      The module, with 1-based positions on computations, instructions and attributes.

    Raises:
      HloSyntaxError: text that does not follow the HLO grammar, with line, column and what was expected.
      HloSemanticError: undefined operands or computations, duplicate names, two ROOTs.

    Example:
      >>> m = parse_hlo("HloModule m\\nENTRY e {\\n  ROOT p = f32[2] parameter(0)\\n}\\n")
      >>> m.entry.root.opcode
      'parameter'
    """
    if not isinstance(text, str):
        raise HloSyntaxError(f"expected HLO text (str), got {type(text).__name__}", path=path)
    if not text.isascii():
        _check_ascii(text, path)
    written, made = text, LineMap()
    if has_tuple_refs(text):  # jax 0.11+: `%param#0`, element 0 of `%param`, made an explicit get-tuple-element
        try:
            text, made = expand(text, path)
        except HloSemanticError as e:
            raise _positioned(e, text, path) from None
    single = is_single_instruction(text)
    split = None if single else _split(text)
    # Numbers that may not fit an int64 are checked per attribute, where the text has a run of 19 digits; a lazy
    # parse looks for one in each computation as it reads it (None), not in the whole text up front.
    check_ints = None if lazy and split is not None else _has_long_int(text)
    header_end = split[1][0][0] if split is not None else len(text)
    try:
        if single:
            module = _parse_single(text, lenient, check_ints)
        elif split is None:  # not laid out as XLA prints it: one pass of the grammar over everything
            module = _parse_grammar(text, lenient, check_ints)
        else:
            try:
                module = _parse_split(text, split, path, lazy, lenient, check_ints)  # (empties split's spans)
            except (HloSyntaxError, HloSemanticError) as e:
                # A computation written inline in an attribute (its body may also have misled the line scanner):
                # only the grammar's pass over the whole module adds it to the module.
                if not isinstance(e, NeedsModuleParse) and not _INLINE_BODY.search(text):
                    raise
                module = _parse_grammar(text, lenient, check_ints)
        done: dict = {}  # (the module's fields known once it is read: set by one copy, at the end)
        if module.attributes:
            notes = verify_header(module, text[:header_end], lenient=lenient)
            if notes:
                done["header_notes"] = module.header_notes + notes
            if "input_output_alias" in module.attributes and not isinstance(module.entry, LazyComputation):
                # (a lazy parse's: `_check_read`, from the entry's ROOT line)
                check_alias_outputs(text[:header_end], module.attributes["input_output_alias"],
                                    module.entry.root.shape)
    except (HloSyntaxError, HloSemanticError) as e:
        raise _hint_single(_written(_positioned(e, text, path), written, made), single) from None
    except Exception as e:  # Lark's own exceptions, or a bug: never let them reach the caller raw
        raise _hint_single(_written(_translate(e, text, path), written, made), single) from None
    if path is not None:
        done["path"] = path
    if made.made:
        done["made_lines"] = made.made
    return replace(module, **done) if done else module


def _written(err: AnalyzerError, written: str, made: LineMap) -> AnalyzerError:
    """An error positioned in the text with `%x#N` made explicit, placed on the line as written instead."""
    if not made.made or not isinstance(err, (HloSyntaxError, HloSemanticError)) or err.line is None:
        return err
    line = made.original(err.line)
    return type(err)(err.message, path=err.path, line=line, column=err.column,
                     source_line=_source_line(written, line))


# A quoted string (C escapes) or a comment: where XLA's lexer takes characters beyond ASCII.
_STRING_OR_COMMENT = re.compile(r'"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+"|/\*(?:[^*]|\*(?!/))*+\*/|//[^\n]*+')
_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def _check_ascii(text: str, path: str | None) -> None:
    """XLA's lexer reads names, numbers and punctuation in ASCII only; a character beyond it outside a quoted
    string or a comment is an error there. (The fast path's `\\d` and `\\w` would take `²` or `é`, and `int()`
    fails on `²` with no position.)

    Raises:
      HloSyntaxError: at the first such character, naming it.
    """
    tokens = _STRING_OR_COMMENT.finditer(text)  # (in order, each read once: only texts with such a character)
    token = next(tokens, None)
    for m in _NON_ASCII.finditer(text):
        while token is not None and token.end() <= m.start():
            token = next(tokens, None)
        if token is not None and token.start() <= m.start():
            continue  # inside a string or a comment
        line_start = text.rfind("\n", 0, m.start()) + 1
        line = text.count("\n", 0, m.start()) + 1
        ch = m.group()
        raise HloSyntaxError(f"unexpected character {ch!r} (U+{ord(ch):04X}): HLO names, numbers and punctuation "
                             "are ASCII; other characters may only appear inside a quoted string or a comment",
                             path=path, line=line, column=m.start() - line_start + 1,
                             source_line=_source_line(text, line))


# Where the text starts: whitespace and comments, then the first token and what follows it.
_LEAD = re.compile(r"(?:\s++|/\*(?:[^*]|\*(?!/))*+\*/|//[^\n]*+)*+")
_FIRST_NAME = re.compile(r"%?[A-Za-z_][\w.\-]*+")


def is_single_instruction(text: str) -> bool:
    """Whether XLA's parser reads `text` as one instruction rather than a module: it does unless the first token
    is `HloModule` or `ENTRY`, or the second is `{` (a header-less module's first computation).

    Example:
      >>> is_single_instruction("r = f32[2] add(f32[2] x, f32[2] y)"), is_single_instruction("HloModule m")
      (True, False)
    """
    pos = _LEAD.match(text).end()
    m = _FIRST_NAME.match(text, pos)
    if m is None:
        return True
    if m.group() in ("HloModule", "ENTRY"):
        return False
    end = m.end() + (text[m.end():m.end() + 1] == ":" and m.group()[0] != "%")  # (`add: {`: the name `add`)
    nxt = _LEAD.match(text, end).end()
    return text[nxt:nxt + 1] != "{"


def _hint_single(err: AnalyzerError, single: bool) -> AnalyzerError:
    if not single or not isinstance(err, (HloSyntaxError, HloSemanticError)):
        return err
    return type(err)(err.message + " (read as one instruction: XLA reads a text so unless it starts with `HloModule` "
                     "or `ENTRY`, or has `{` after its first name)", path=err.path, line=err.line,
                     column=err.column, source_line=err.source_line)


# A call attribute whose value opens a computation written inline: `calls={ ROOT r = ...`, `calls=\n{\n  p = ...`,
# `branch_computations={ {...`. (Searched only when a parse by the line scanner failed.)
_INLINE_BODY = re.compile(r"\b(?:" + "|".join(CALL_KEYS) + r")=\s*+\{\s*+(?:\{|ROOT\b|%?[A-Za-z_][\w.\-]*+:?\s*+=)")


def _parse_grammar(text: str, lenient: bool, check_ints: bool) -> HloModule:
    """The whole module in one pass of the grammar (a text not laid out as XLA prints it, or with a computation
    written inline in an attribute), every computation verified."""
    with callee_table({}), inline_computations():
        module = _lark().parse(text, start="module")
    comps = tuple(_verify(c, lenient, text, check_ints) for c in module.computations)
    return module if all(map(operator.is_, comps, module.computations)) else replace(module, computations=comps)


def parse_value(text: str, start: str, line: int, column: int):
    """An attribute value (`text`, starting at `line`:`column` of the module) by the grammar's rule `start`, with
    positions in the module's text (padded so: Lark counts lines and columns from the text's start)."""
    from lark.exceptions import LarkError

    padded = "\n" * (line - 1) + " " * (column - 1) + text
    try:
        return _lark().parse(padded, start=start)
    except LarkError as e:
        inner = getattr(e, "orig_exc", None)
        err = inner if isinstance(inner, (HloSyntaxError, HloSemanticError)) else _from_lark(e, padded, None)
    # (the source line is the module's, filled in where the error leaves the parse; the padded one is not)
    raise type(err)(err.message, line=err.line, column=err.column) from None


_transformer_module.parse_value = parse_value


def _parse_single(text: str, lenient: bool, check_ints: bool) -> HloModule:
    """One instruction on its own, as XLA reads it: a module `_` whose entry computation `_` has a parameter per
    operand written with its shape and the instruction as ROOT; a computation written inline in its attributes
    (`calls={ ... }`) is a computation of that module, before the entry."""
    with single_instruction_mode(), inline_computations() as made:
        pending = _lark().parse(text, start="single_instruction")
        comp = build_single(pending)
    comps = tuple(_verify(c, lenient, text, check_ints) for c in (*made.order, comp))
    check_computations(list(comps))
    return HloModule("_", comps, {}, {})


def parse_instruction(text: str, *, lenient: bool = False) -> Instruction:
    """One instruction as XLA's parser tests write it (`r = f32[2] add(f32[2] x, f32[2] y)`; the name may be
    left out, `f32[2] add(f32[2] x, f32[2] y)`), with its operands' shapes.

    Raises:
      HloSyntaxError / HloSemanticError: bad text, an operand written without its shape, a text that is a module.

    Example:
      >>> i = parse_instruction("r = f32[2] add(f32[2] x, f32[2] y)")
      >>> i.opcode, [str(o.shape) for o in i.operands]
      ('add', ['f32[2]', 'f32[2]'])
    """
    if isinstance(text, str) and not is_single_instruction(text):
        raise HloSyntaxError("expected one instruction like `r = f32[2] add(f32[2] x, f32[2] y)`, got a module (it "
                             "starts with `HloModule` or `ENTRY`, or has `{` after its first name); use parse_hlo",
                             line=1, column=_LEAD.match(text).end() + 1 if "\n" not in text[:_LEAD.match(text).end()]
                             else None)
    return parse_hlo(text, lenient=lenient).entry.root


def parse_shape(text: str) -> Shape:
    """One shape as XLA's ParseShape reads it: `f32[2,3]{1,0}`, `(f32[], s32[4])`, `bf16[<=8]`, `b(f32[4])`.

    Raises:
      HloSyntaxError: text that is not one shape, with line and column.

    Example:
      >>> parse_shape("(f32[2,3]{1,0}, s32[])").tuple_shapes[0].dims
      (2, 3)
    """
    if not isinstance(text, str):
        raise HloSyntaxError(f"expected a shape (str), got {type(text).__name__}")
    if not text.isascii():
        _check_ascii(text, None)
    try:
        return _lark().parse(text, start="shape")
    except (HloSyntaxError, HloSemanticError) as e:
        raise _positioned(e, text, None) from None
    except Exception as e:
        raise _translate(e, text, None) from None


def _translate(e: Exception, text: str, path: str | None, line_offset: int = 0) -> AnalyzerError:
    from lark.exceptions import LarkError

    if isinstance(e, LarkError):
        inner = getattr(e, "orig_exc", None)
        if isinstance(inner, (HloSyntaxError, HloSemanticError)):
            return _positioned(inner, text, path)
        return _from_lark(e, text, path, line_offset)
    if isinstance(e, RecursionError):
        return HloSyntaxError("the text nests too deeply to parse", path=path)
    return HloSyntaxError(f"cannot parse this HLO ({type(e).__name__}: {e})", path=path)


_DIGIT_MASK = bytes(0x30 if 0x30 <= i <= 0x39 else 0x20 for i in range(256))


def _has_long_int(text: str) -> bool:
    r"""Whether `text` has a run of 19 digits (an integer that may not fit an int64). A byte translation and a
    substring test: 10x faster than `re.search(r"\d{19}")`, which tries 19 digits at every digit."""
    return b"0" * 19 in text.encode("utf-8", "surrogatepass").translate(_DIGIT_MASK)


def _verify(comp: Computation, lenient: bool, source: str, check_ints: bool,
            unvetted: list[Instruction] | None = None) -> Computation:
    """`comp` after `verify_instructions`, with its notes (`Computation.notes`, a copy when there are any).
    `unvetted`: when no attribute may hold a 19-digit number (not `check_ints`), only these of its instructions
    (the others passed `LineReader.build`'s vetting, which is what `verify_instructions` checks of them then);
    None: all."""
    if unvetted is not None and not check_ints and len(unvetted) < len(comp.instructions):
        notes = verify_instructions(_found_computation(comp.name, tuple(unvetted), comp.attributes), lenient=lenient,
                                    source=source, check_ints=check_ints)
    else:
        notes = verify_instructions(comp, lenient=lenient, source=source, check_ints=check_ints)
    return replace(comp, notes=notes) if notes else comp


# The verifier parses the module texts an origin_recovery_table quotes with this parser (it imports none).
_verifier.parse_module = parse_hlo


def parse_hlo_file(path: str | Path, *, lazy: bool = False, lenient: bool = False) -> HloModule:
    """Read and parse one HLO text file (`.hlo`, `.txt`, an `--xla_dump_to` dump).

    Raises:
      HloSyntaxError: unreadable file (with the OS reason), or bad HLO.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise HloSyntaxError(f"cannot read HLO file: {e}", path=str(p)) from None
    return parse_hlo(text, path=str(p), lazy=lazy, lenient=lenient)


# The opcodes whose instructions `check_computations` checks one by one (an async op's chain is checked whole).
_SYNC = frozenset(_verifier.OPCODES) - frozenset(_verifier._ASYNC_GENERIC)


def _check_read(module: HloModule, records: list[LazyComputation]) -> None:
    """The module-level checks of a full parse (`verifier.check_computations`: one ENTRY, every called
    computation defined before its caller, the async-op structure) on a lazily parsed module, by what they need
    of each computation: its call instructions (`call_instructions`: an unparsed one reads those lines only; one
    with an async op among them, and what that op wraps, is parsed: async chains are checked on them whole). And the
    header's `input_output_alias` output indexes against the entry's root shape (`verifier.check_alias_outputs`),
    from the entry's ROOT line (`line_head`). `parse_hlo(lazy=True)` runs them before it returns: what a full parse
    would reject, a lazy one rejects too, and no caller has to remember to ask.

    Raises:
      HloSemanticError: with path, line, column and the source line, as `parse_hlo` would.
    """
    reading = records[0]._reading
    try:
        aliasing = module.attributes.get("input_output_alias")
        if aliasing is not None:
            head = module.entry.line_head()
            if head is not None:
                check_alias_outputs(reading.source[:records[0]._span[0]], aliasing, head.shape)
        comps = module.computations
        calls = {c.name: c.call_instructions() for c in comps}
        # (what writes an async op, and what one wraps, is checked whole: the async chains are checked on them)
        whole = {c.name for c in comps if not _SYNC.issuperset(c.written)}
        for c in comps:
            if c.name in whole:
                whole.update(n for i in calls[c.name] if i.opcode not in _SYNC for n in i.called_computations)
        # (one that writes no such op gives only its calls, parsed or not: its other instructions call nothing and
        # are not async ops, so the checks have nothing to read in them)
        check_computations(comps, lambda c: c.instructions if c.name in whole else calls[c.name])
    except (HloSyntaxError, HloSemanticError) as e:
        raise _positioned(e, reading.source, reading.path) from None


# ---------------------------------------------------------------------------------------------- lazy

# A computation header at the start of a line: `[ENTRY] %name [(...) -> shape] {`.
# (The name possessive: a greedy one gave back a character at a time, each retrying the rest of the line, so that a
# long line with no `{` at its end cost its length squared: 11 s for 80,000 characters of garbage after `HloModule`.)
_COMP_START = re.compile(r"^(?!HloModule\b)(ENTRY[ \t]+)?(%?[A-Za-z_][A-Za-z0-9_.\-]*+)[^\n]*\{[ \t]*$", re.M | re.A)
# A computation's closing line: `}` (XLA prints it unindented; its parser takes it indented too), maybe
# followed by attributes (`}, execution_thread="main_thread"`).
# (Led by the newline: `re` then finds candidates with a fast literal scan; `^[ \t]*\}` was 8x slower.)
_COMP_END = re.compile(r"\n([ \t]*+\}[^\n]*+)$", re.M)
# The first line that is `_COMP_END`'s closing line (group 1) or follows a line ending in `{` (group 1 unset):
# one scan for what `_split` looks for inside a computation (a header inside would end its line in `{`).
_CLOSE_OR_OPEN = re.compile(r"\n(?:([ \t]*+\}[^\n]*+)$|(?<=\{\n))", re.M)


def _split(text: str) -> tuple[str, list[tuple]] | None:
    """Split the text into the header and the computations with a line scanner.

    Returns:
      `(header_text, [(start, end, line, column, name, is_entry, rows, commented), ...])`, or None when the text
      is not laid out as XLA prints it (a computation per block, `}` alone at the start of its closing line).
      `rows`: the computation's lines between its header and its closing line (what `_index_of` finds when each is
      an instruction line); `commented`: whether its text holds a `/*` (its index then reads keys after a
      comment too). The scanner counts and finds both anyway, so no index does either again.
    """
    first = _COMP_START.search(text)
    starts = _comment_starts(text) if first is not None else None
    if starts is None:
        return None
    header_text = text[: first.start()]
    if _STRAY_IN_HEADER.search(header_text) or _HEADER_OPENS.search(header_text):
        # a computation the scanner did not see (e.g. `name {` with an instruction on that line, or one that
        # starts on the `HloModule` line: `HloModule m:c1 {`, which XLA reads as the module `m` and computation `c1`)
        return None
    spans: list[tuple] = []
    pos = first.start()
    line = header_text.count("\n") + 1
    names: set[str] = set()
    n = len(text)
    start_at, end_at, ws_at, find, count = _COMP_START.match, _COMP_END.search, _WS.match, text.find, text.count
    first_at, close_or_open = _COMP_END.match, _CLOSE_OR_OPEN.search
    # (the first `/*` of each line that holds one, in order: `k` the next from a computation's start on, or none)
    k = bisect_left(starts, pos)
    comment = starts[k] if k < len(starts) else -1
    while pos < n:
        m = start_at(text, pos)
        if m is None:
            return None  # something between computations that the scanner does not know
        begin, body = m.span()  # (body: the header's newline)
        # The first `}` line (XLA prints it at column 1, which always closes), unless a line before it ends in
        # `{`: the line after the header, then one search that stops at either.
        end = first_at(text, body) or close_or_open(text, body + 1)
        if end is None or end.start(1) < 0 or text[end.start(1)] != "}":
            end = end_at(text, body - 1)  # (the first `}` line, which may be indented)
            if end is None or text[end.start(1)] != "}":
                end = _comp_end(text, body)
                if end is None:
                    return None
            if find("{\n", body, end.start()) >= 0 and (_COMP_START.search(text, body, end.start())
                                                         or _CLOSED_THEN_HEADER.search(text, body, end.start())):
                return None  # a header inside: this computation's `}` ends an instruction's line (`add(a, b) }`)
        close = end.end()
        entry, name = m.groups()
        if name[0] == "%":
            name = name[1:]
        if name == "ENTRY":
            return None  # `ENTRY /*comment*/ name {`: the grammar reads it
        if name in names:
            return None  # let the grammar path report the duplicate
        names.add(name)
        if 0 <= comment < begin:
            k = bisect_left(starts, begin, k)
            comment = starts[k] if k < len(starts) else -1
        inner = count("\n", begin, close)
        spans.append((begin, close, line, m.start(2) - begin + 1, name, entry is not None, inner - 1,
                      0 <= comment < close))
        pos = ws_at(text, close).end()
        line += inner + count("\n", close, pos)
    return (header_text, spans) if spans else None


_WS = re.compile(r"\s*")
# A computation closed on an instruction's line and the next one's header after it: `  ROOT p = f32[] parameter(0) }
# ENTRY e {` (one line), which XLA reads.
_CLOSED_THEN_HEADER = re.compile(r"\}[ \t]*+(?:ENTRY[ \t]++)?%?[A-Za-z_][\w.\-]*+:?[ \t]*+(?:\([^\n]*)?\{[ \t]*$", re.M | re.A)
# An `HloModule` line that ends in `{`: a computation opens on it.
_HEADER_OPENS = re.compile(r"^[ \t]*HloModule\b[^\n]*\{[ \t]*$", re.M)
# A header line that is neither `HloModule ...`, a table name nor a table row.
_STRAY_IN_HEADER = re.compile(r"^[ \t]*(?!HloModule\b|FileNames\b|FunctionNames\b|FileLocations\b|StackFrames\b)"
                              r"(?:ENTRY\b|%?[A-Za-z_][\w.\-]*+[ \t]*+[({])", re.M)


def _comp_end(text: str, pos: int) -> re.Match | None:
    """The closing line of the computation whose body starts at `pos`: the first `}` line followed by the end
    of the text or by the next computation's header (an indented `}` can also close a multi-line value)."""
    for end in _COMP_END.finditer(text, pos - 1):
        if text[end.start(1)] == "}":  # XLA's own layout: a `}` at column 1 always closes
            return end
        nxt = _WS.match(text, end.end()).end()
        if nxt == len(text) or _COMP_START.match(text, nxt):
            return end
    return None


def _has_multiline_comment(text: str) -> bool:
    """Whether a `/* ... */` comment spans lines (the line scanner would misread what it hides)."""
    return _comment_starts(text) is None


def _comment_starts(text: str) -> array | None:
    """None when a `/* ... */` comment spans lines, else where the comments a reader meets begin, in order: the
    first `/*` of every line that holds one is among them (the scanner's test of which computations do)."""
    # Only a `/*` that nothing closes before its line ends can count, outside whole-line `//` comments: one regex
    # scan meets the comments as the walk below does and tells those (none in most texts); the walk then decides.
    starts = array("q")  # (8 bytes a comment: a text of short comments may hold one every dozen characters)
    suspect = False
    for m in _COMMENT_OPENS.finditer(text):
        start = m.start()
        starts.append(start)
        if m.group(1) is not None and not suspect:  # not closed on its line
            line_start = text.rfind("\n", 0, start) + 1
            suspect = not text[line_start:start].lstrip().startswith("//")
    if not suspect:
        return starts
    i = text.find("/*")
    while i >= 0:
        line_start = text.rfind("\n", 0, i) + 1
        if text[line_start:i].lstrip().startswith("//"):  # inside a whole-line `//` comment: not a comment opener
            i = text.find("/*", i + 2)
            continue
        j = text.find("*/", i + 2)
        if j < 0 or text.find("\n", i, j) >= 0:
            return None
        i = text.find("/*", j + 2)
    return starts


# A comment on its line: `/*` to its `*/`, or (group 1) to the line's end when nothing closes it there.
_COMMENT_OPENS = re.compile(r"/\*(?:[^*\n]|\*(?!/))*+(?:\*/|(\n|\Z))")
_HAS_HEADER = re.compile(r"^\s*HloModule\b", re.M)


def _parse_split(text: str, split: tuple[str, list[tuple]], path: str | None, lazy: bool, lenient: bool = False,
                 check_ints: bool | None = True) -> HloModule:
    """Parse the header with the grammar and each computation with the fast path (or the grammar)."""
    header_text, spans = split
    header = _parse_header(header_text, lenient)
    callees = _Unread() if not lazy else {}
    table = _CalleeTable(callees)
    reading = _Reading(text, path, lenient, check_ints, weakref.ref(table))
    if lazy:
        comps = LazyComputation._records(reading, spans)
        callees.update((c.name, c) for c in comps)
    else:
        comps = callees.parse(reading, spans)
        check_computations(comps)
    spans.clear()  # (the caller's: 21,000 spans of a 22 MB module are a quarter of its text while it is parsed)
    name = header.name
    if not _HAS_HEADER.search(header_text):  # XLA names a header-less module after its entry
        name = "module_" + next((c for c in comps if c.is_entry), comps[-1]).name
    module = HloModule(name, tuple(comps), header.attributes, header.frames, path, header_notes=header.header_notes,
                       callee_table=table if lazy else None)
    if lazy:
        _check_read(module, comps)
    return module


class _Reading:
    """What the lazy records of one parse share (one object, not four fields a record): the source text and its
    path, the parse's checks (`lenient`; `check_ints`, None to look for long integers per computation read), a
    weak reference to the callee table (`_CalleeTable`), and what the parse reads lines with and remembers from
    line to line and body to body (`lines`, a `fastpath.LineReader`; `written_sets`, the distinct opcode sets of
    the bodies indexed, one object each: most fusion bodies write one of a few dozen), and the instructions the
    records read from single rows of computations not parsed (`rows_read`, by line: one dict for the parse, not
    one per computation read). All of it lives as long as the parse, or the lazily parsed module, does."""

    __slots__ = ("source", "path", "lenient", "check_ints", "callees", "lines", "written_sets", "parsing",
                 "rows_read")

    def __init__(self, source: str, path: str | None, lenient: bool, check_ints: bool | None,
                 callees: weakref.ref | None) -> None:
        self.source, self.path, self.lenient, self.check_ints = source, path, lenient, check_ints
        self.callees = callees
        self.lines = _line_reader()
        self.written_sets: dict[frozenset[str], frozenset[str]] = {}
        self.parsing: set[str] = set()  # (the computations being parsed: one that needs itself parsed calls itself)
        self.rows_read: dict[int, Instruction] = {}


class _Unread(dict):
    """What a full parse's computations look their callees up in (`CALLEES`, for shapes inferred from a callee):
    each computation parsed so far by name, and one not parsed yet as a lazy record, made when first looked up (a
    callee printed after its caller; XLA prints callees first), which parses it then. (A record for every
    computation, each replaced once parsed, was 21,500 objects that lived through the parse of a 22 MB module for
    the collector to walk.)"""

    __slots__ = ("reading", "spans")

    def parse(self, reading: _Reading, spans: list[tuple]) -> list[Computation]:
        """The computations of `spans` (`_split`'s), parsed in order, each by a lazy record made for it (or made
        when a computation before it looked it up) and dropped once it is parsed."""
        self.reading = reading
        self.spans = {span[4]: span for span in spans}
        comps = []
        for span in spans:
            name = span[4]
            self.spans.pop(name, None)  # (None: a record made before, when looked up)
            record = dict.get(self, name)
            if record is None:  # (in the table while it is parsed, as when looked up: it may name itself)
                record = self[name] = LazyComputation._records(reading, [span])[0]
            comps.append(record._parsed)
            self[name] = comps[-1]
        return comps

    def get(self, name: str, default=None):
        found = dict.get(self, name)
        if found is None:
            span = self.spans.get(name)
            if span is None:
                return default
            found = self[name] = LazyComputation._records(self.reading, [span])[0]
            del self.spans[name]
        return found


class _CalleeTable:
    """A module's computations by name, as its lazy records look up their callees when parsed (shapes inferred
    from a callee). The module holds it and each record only a weak reference to it: a record holding the table
    that holds the record would make every lazily parsed module a reference cycle, freed only by a full collection
    that walks all of it (0.45 s after the synthetic 22 MB module), not when the module is dropped."""

    __slots__ = ("by_name", "__weakref__")

    def __init__(self, by_name: dict) -> None:
        self.by_name = by_name


_TABLE_START = re.compile(r"^[ \t]*(?:FileNames|FunctionNames|FileLocations|StackFrames)[ \t]*$", re.M)
# Any table name on a line of its own (a dump from another XLA version may print tables this one does not know).
_ANY_TABLE_START = re.compile(r"^[ \t]*[A-Za-z_]\w*[ \t]*$", re.M)


def _parse_header(header_text: str, lenient: bool = False) -> HloModule:
    """The `HloModule` line by the grammar; the stack-frame tables by the fast path when they are plain rows
    (they can be thousands of lines), else by the grammar too. When `lenient`, rows and tables this version
    cannot read are skipped and noted (`HloModule.header_notes`) instead."""
    t = (_ANY_TABLE_START if lenient else _TABLE_START).search(header_text)
    if t is not None and t.start() > 0 and header_text[: t.start()].strip():
        line0 = header_text.count("\n", 0, t.start()) + 1
        notes: list[str] | None = None
        if lenient:
            tables, notes = parse_tables_lenient(header_text[t.start():], line0)
        else:
            tables = parse_tables_fast(header_text[t.start():], line0)
        if tables is not None:
            head = _lark().parse(header_text[: t.start()], start="header")
            return HloModule(head.name, (), head.attributes, frames(tables, notes),
                             header_notes=tuple(notes) if notes else ())
    return _lark().parse(header_text, start="header")


def _parse_chunk(reading: _Reading, start: int, end: int, line: int) -> Computation:
    """One computation's text (`reading.source[start:end]`) -> Computation: the header line by the grammar,
    instructions by the fast path when they are in canonical form, else the whole computation by the grammar.
    Positions are in the source.

    The computation's text is sliced out of `source` only for the grammar (a copy of a 100 MB entry is 100 MB).
    """
    source, check_ints = reading.source, reading.check_ints
    if check_ints is None:  # (before the parse: its two temporary copies of the text then add nothing to the peak)
        check_ints = _has_long_int(source[start:end])
    newline = source.find("\n", start, end)
    head_line = source[start:newline] if newline >= 0 else source[start:end]
    head = parse_head_fast(head_line, line) or _parse_interactive(head_line, "computation_head", line)
    unvetted: list[Instruction] = []
    comp = _parse_lines(reading.lines, source, start, end, line, head, unvetted) if newline >= 0 else None
    if comp is None:
        comp = _parse_interactive(source[start:end], "computation", line)
        unvetted = None
    return _verify(comp, reading.lenient, source, check_ints, unvetted)


class _Decline(Exception):
    """A line that is not a whole instruction by itself: the grammar reads the computation."""


class _Listed(Exception):
    """What only the list form of `_parse_lines` gives exactly: an error (which XLA's order reports after every
    line's own checks and before the computation's), or nested operands (named after every other name)."""


def _parse_lines(lines: LineReader, source: str, start: int, end: int, line0: int, head,
                 unvetted: list[Instruction] | None = None) -> Computation | None:
    """A computation's instruction lines (`source[start:end]`, its header line first), each by the fast path or,
    where it declines one (a constant array, an operand with a shape prefix), that line alone by the grammar's
    `instruction` rule; None when a line is not a whole instruction by itself (then the caller parses the
    computation by the grammar).

    One odd line no longer sends a whole computation through Lark: the entry of an unrolled 32-layer step
    (6,700 lines) has a few `constant({0, 128, ...})` lines and took 0.5 s by the grammar.

    Each line is built into its Instruction as it is read (`build_computation` takes the lines as they come),
    so what a line makes on the way (its text, its pending tuple, its operand list) is freed before the next:
    one computation of 200,000 instructions peaked at 20x its text when every line and pending tuple was held
    until the last was read. An error, or nested operands, sends the computation through `_parse_lines_listed`,
    which reads all lines first and so reports what it always did.

    `unvetted`, when a list, gets the instructions `verify_instructions` must still check (see `_verify`): those
    the one-pass build (`LineReader.build`) did not vet, or all when the two-step way built them.
    """
    first = source.find("\n", start, end)
    last = source.rfind("\n", start, end)
    if first == last or source[last + 1:end].strip() != "}":
        return None
    vetting: list[Instruction] = []
    try:  # the lines read and built in one pass; what it declines, or finds wrong, goes the two-step way below
        comp = lines.build(source, first + 1, last, line0 + 1, head, vetting)
    except (HloSyntaxError, HloSemanticError):
        comp = None
    if comp is not None:
        if unvetted is not None:
            unvetted += vetting
        return comp
    try:
        comp = build_computation(head[0], head[1], head[2], _instructions(lines, source, first + 1, last, line0 + 1))
    except _Decline:
        return None
    except Exception:  # (_Listed, an error, or anything else: the list form gives what it always gave)
        comp = _parse_lines_listed(lines, source, first + 1, last, line0 + 1, head)
    if comp is not None and unvetted is not None:
        unvetted += comp.instructions  # (the two-step way vets none)
    return comp


def _instructions(lines: LineReader, source: str, pos: int, stop: int, lineno: int):
    """The pending instruction of each line from `pos` to `stop`, in the fast form `build_computation` takes.

    Raises:
      _Decline: a line that is not a whole instruction.
      _Listed: a line with nested operands.
    """
    for pos, nl, lineno in _lines(source, pos, stop, lineno):
        inst = _pending(lines, source, pos, nl, lineno)
        if inst is None:
            continue
        if len(inst) == 8:  # the grammar callback's form (also a constant's): name token second
            if any(len(o) == 3 for o in inst[4]):
                raise _Listed
            tok = inst[1]
            inst = (inst[0], str(tok), packed(tok.line, tok.column)) + inst[2:]
        yield inst


def _lines(source: str, pos: int, stop: int, lineno: int):
    """`(start, end, line number)` of each line from `pos` to `stop`."""
    find = source.find
    while pos < stop:
        nl = find("\n", pos, stop)
        if nl < 0:
            nl = stop
        yield pos, nl, lineno
        pos = nl + 1
        lineno += 1


def _pending(lines: LineReader, source: str, start: int, end: int, lineno: int):
    """The pending instruction of the line `source[start:end]`: by the fast path, else by the grammar's
    `instruction` rule; None for a blank line.

    Raises:
      _Decline: a line that is not a whole instruction.
    """
    from lark.exceptions import LarkError

    inst = lines.instruction(source, start, end, lineno)
    if inst is None:
        text = source[start:end]
        if not text.strip():
            return None
        try:
            inst = _parse_interactive(text, "instruction", lineno)
        except LarkError:
            raise _Decline from None
    return inst


def _parse_lines_listed(lines: LineReader, source: str, pos: int, stop: int, lineno: int, head
                        ) -> Computation | None:
    """`_parse_lines` with every line read before any is built: the order of errors the grammar path gives (a
    line's own checks, then the computation's), and nested operands."""
    try:
        pending = [inst for start, end, k in _lines(source, pos, stop, lineno)
                   if (inst := _pending(lines, source, start, end, k)) is not None]
    except _Decline:  # not a whole instruction on one line: the grammar reads the computation
        return None
    return build_computation(head[0], head[1], head[2], pending)


def _read_line(text: str, line: int):
    """One instruction line by the grammar's `instruction` rule, or None when it is not a whole instruction."""
    from lark.exceptions import LarkError

    try:
        return _parse_interactive(text, "instruction", line)
    except LarkError:
        return None


def _parse_interactive(text: str, start: str, line: int):
    """Parse `text` from rule `start`, with line numbers counted from `line`."""
    ip = _lark().parse_interactive(text, start=start)
    ip.lexer_thread.state.line_ctr.line = line
    return ip.resume_parse()


@lru_cache(maxsize=1)
def _attr_regex() -> tuple[re.Pattern, re.Pattern]:
    """The grammar's ATTR pattern with a leading comma, twice: `, key=value` for one match at a time (group 1
    the whole `key=value`, 2 the key, 3 the value), and the same without the space after `=` for `findall`
    over a whole line (groups: the space after the comma, the key, the value; the space is one character as
    XLA prints it, a string Python does not allocate)."""
    value = attribute_value_pattern()
    return (re.compile(r",[ \t]*(([a-zA-Z_][a-zA-Z0-9_.\-]*)=(\s*" + value + "))", re.A),
            re.compile(r",([ \t]*)([a-zA-Z_][a-zA-Z0-9_.\-]*)=(" + value + ")", re.A))


@lru_cache(maxsize=1)
def _transformer():
    return HloTransformer()


def _line_reader() -> LineReader:
    """A parse's `fastpath.LineReader` (its own: what it remembers lives as long as the parse)."""
    return LineReader(_attr_regex(), _transformer(), _read_line)


def _found_computation(name: str, found: tuple[Instruction, ...], attributes: tuple = ()) -> Computation:
    """The computation `verify_instructions` checks: what `select` found, or what a full parse did not vet."""
    return Computation(name, found, attributes=attributes)


class LazyComputation(Computation):
    """A computation whose instructions are parsed on first use; `text` holds its source meanwhile.

    A record per computation of a lazily parsed module (a parse makes them in bulk, `_records`), slotted as its
    base is: `name`, `is_entry` and `at` (its base's fields); `_reading`, the parse's `_Reading` (shared);
    `_span`, where its text is, the lines between its header and closing line (-1 when not known) and whether the
    text holds a `/*` (None when not known) (only ints and bools: the collector stops tracking the tuple);
    `_indexed`, its index once asked for (`_index_of`, a tuple the collector stops tracking too; `_UNINDEXED`
    before; None when its lines are not all instruction lines, or once parsed), its rows' opcodes then in the
    base's `_written`; `_row_names`, each name's row once asked for (None before); `_computation`, the parsed
    `Computation` once parsed, None before. The instructions read from rows are kept in the parse's
    `_Reading.rows_read`. Its base's
    other fields and kept answers stay unset: each is read from the parsed computation (`instructions`,
    `by_name`...), and questions of an unparsed one are answered from its index, or by parsing it.
    """

    __slots__ = ("_reading", "_span", "_indexed", "_row_names", "_computation")

    @classmethod
    def _records(cls, reading: _Reading, spans: list[tuple]) -> list[LazyComputation]:
        """A record per span of `_split`, each its eight fields set through its slots' own descriptors (no
        `__init__` and `Position` call each: they were a quarter of a lazy parse's time after the split, 21,000
        records in a large module)."""
        new, top, shift = object.__new__, Position._COLUMN, Position._SHIFT
        set_name, set_entry, set_at, set_reading, set_span, set_indexed, set_row_names, set_parsed = _RECORD_FIELDS
        records = []
        for start, end, line, column, name, is_entry, rows, commented in spans:
            record = new(cls)
            set_name(record, name)
            set_entry(record, is_entry)
            set_at(record, line << shift | min(column, top))
            set_reading(record, reading)
            set_span(record, (start, end, rows, commented))
            set_indexed(record, _UNINDEXED)
            set_row_names(record, None)
            set_parsed(record, None)
            records.append(record)
        return records

    @property
    def _source(self) -> str:
        return self._reading.source

    @property
    def _path(self) -> str | None:
        return self._reading.path

    @property
    def text(self) -> str:
        """The computation's source text, unparsed."""
        start, end = self._span[:2]
        return self._reading.source[start:end]

    @property
    def is_parsed(self) -> bool:
        return self._computation is not None

    def mentions(self, *opcodes: str) -> bool:
        """Whether any of `opcodes` is an opcode here (`written`; no parse of a computation in XLA's form).

        Example: `comp.mentions("all-gather", "all-gather-start", "dot")`.
        """
        return not self.written.isdisjoint(opcodes)

    @property
    def written(self) -> frozenset[str]:
        """The opcodes of the instructions: read by the index (`_index`, one regex pass over the text; kept in the
        base's `_written`) when every line is in XLA's form and the computation is not parsed yet, else from the
        parsed instructions. `mentions` and `select` answer "not here" by a set test."""
        index = None if self._computation is not None else self._index
        return self._written if index is not None else self._parsed.written

    @property
    def _index(self) -> tuple | None:
        """The index of the text's instruction lines (`_index_of`), made on the first read, its opcodes kept in the
        base's `_written`; None when a line between the header and `}` is not `[ROOT ]name = shape opcode(...`
        (then every question parses the computation), or once the computation is parsed (its instructions
        answer)."""
        index = self._indexed
        if index is _UNINDEXED:
            start, end, rows, commented = self._span
            found = _index_of(self._reading, start, end, rows, commented)
            index = None
            if found is not None:
                index, written = found
                _SET_WRITTEN(self, written)
            _SET_INDEXED(self, index)
        return index

    def select(self, *opcodes: str) -> tuple[Instruction, ...]:
        """The instructions with one of `opcodes`, in order, each with its operands' shapes.

        On an unparsed computation only the lines of those opcodes are read (`_read`: what the analysis needs
        of a fusion: its collectives and dots); the rest stays text. Falls back to a full parse of the
        computation when a line is not in XLA's canonical form.

        Example: `fusion_comp.select("dot", "all-gather")`.
        """
        index = None if self._computation is not None else self._index
        if index is not None:
            written = self._written
            if written.isdisjoint(opcodes):
                return ()  # (most fusions: none written, nothing read)
            # (each row is read once, `_read`: the step model, the dots and the collectives ask a fusion body for
            # its dots with different company and get the same instructions)
            found = self._read(_rows_of(index, written.intersection(opcodes)))
            if found is not None:
                return found
        return self._parsed.select(*opcodes)

    def call_instructions(self) -> tuple[Instruction, ...]:
        """The instructions that name a called computation (an attribute of `attributes.CALL_KEYS`: `calls=`,
        `to_apply=`, `body=`, `condition=`, branches, `select=`/`scatter=`...), in order, as the full parse
        has them.

        On an unparsed computation only the rows the index found a call attribute on are read, so the call
        graph of a module need not parse its fusion bodies; a parsed one answers from its instructions, and so
        does one where at least half the rows call and they are `_CALLS_PARSED` or more (an entry or a loop body
        of fusions: the analysis reads those whole, and a parse reads a line for less than a row read alone; such
        a computation is not indexed first: its call attributes are counted by one search of its text).
        """
        if self._computation is None and self._indexed is _UNINDEXED and self._mostly_calls():
            return self._parsed.call_instructions()
        index = None if self._computation is not None else self._index
        calls = index[_CALLS] if index is not None else None
        if calls is not None:
            if not calls:
                return ()
            if len(calls) >= _CALLS_PARSED and 2 * len(calls) * GROUPS >= len(index[_CELLS]):
                return self._parsed.call_instructions()
            found = self._read(calls)
            if found is not None:
                return tuple(i for i in found if names_callee(i))
        return self._parsed.call_instructions()

    def _mostly_calls(self) -> bool:
        """Whether `_CALLS_PARSED` or more of the lines between the header and `}` hold a call attribute, and at
        least half of them (counted without an index: call attributes, two on a line counted twice; only those after
        a comma, as XLA prints them, even in a text with comments: a count to choose by, not an answer, and the
        search for a key after any space took five times as long)."""
        start, end, rows = self._span[:3]
        reading = self._reading
        if 0 <= rows < 2 * _CALLS_PARSED:
            return False
        calls = len(_CALL_AT.findall(reading.source, start, end))
        return calls >= _CALLS_PARSED and 2 * calls >= (rows if rows >= 0 else reading.source.count("\n", start, end))

    def line_head(self, name: str | None = None) -> LineHead | None:
        """`Computation.line_head`. Unparsed: from the index's row, no parse (None when no row defines `name`);
        a computation whose rows cannot tell (two rows define the name or mark ROOT, a shape the row does not
        decode) is parsed and answers as a parsed one.

        Answers are not kept: the analysis asks a body for one head (its root's) about once (on the synthetic
        module 25,095 questions, 22,862 different), and a kept `LineHead` is one more object for the collector to
        walk per body.
        """
        index = None if self._computation is not None else self._index
        if index is None:
            return self._parsed.line_head(name)
        k = index[_ROOT] if name is None else self._rows_by_name().get(name)
        if k is None:
            return None
        head = _head(index, k)
        if head is None:  # (the rows cannot tell: the parse says, or reports what is wrong)
            return self._parsed.line_head(name)
        return head

    def parameter_name(self, number: int) -> str | None:
        """The name of `parameter(number)`, None when there is none. Unparsed: from the index, no line read (a
        row `name = shape parameter(N)`; the parse when two rows give the number)."""
        index = None if self._computation is not None else self._index
        if index is None or "parameter" not in self._written:
            return self._parsed.parameter_name(number) if index is None else None
        cells = index[_CELLS]
        found = [k for k in _rows_of(index, ("parameter",))
                 if (text := cells[GROUPS * k + OPERANDS].strip()).isdigit() and int(text) == number]
        if len(found) != 1:
            return self._parsed.parameter_name(number) if found else None
        return cells[GROUPS * found[0] + NAME]

    def users_of(self, name: str) -> tuple[tuple[Instruction, int], ...]:
        """The instructions that read the value `name`, each with the operand index it is read at, in order (what
        `analyzer.analysis.dataflow.users_map` gives for `name`). Unparsed: only the rows whose operand text
        may name it (`_readers`) are read; the rest stays text.
        """
        index = None if self._computation is not None else self._index
        found = self._read(_readers(index, name)) if index is not None else None
        if found is None:
            return self._parsed.users_of(name)
        return tuple((i, k) for i in found for k, o in enumerate(i.operand_names) if o == name)

    def _read(self, ks: list[int] | tuple[int, ...]) -> tuple[Instruction, ...] | None:
        """The instructions of the index's rows `ks` (ascending), each with its operands' shapes (from the rows
        that define them), read by the fast path line by line and checked as a full parse checks each
        instruction; each row is read once (kept by its line in `_Reading.rows_read`). None when a line is not in
        the form the fast path reads, or an operand is not defined once by an earlier row (then the caller parses
        the computation).
        """
        if not ks:
            return ()
        reading = self._reading
        memo = reading.rows_read
        first = self.at >> Position._SHIFT  # (the header's line: row k is line first + 1 + k)
        try:  # (most questions: every row read before)
            return tuple([memo[first + 1 + k] for k in ks])
        except KeyError:
            pass
        missing = [k for k in ks if first + 1 + k not in memo]
        if missing:
            at, end = self._span[:2]
            src = reading.source
            cells = self._indexed[_CELLS]
            start, rows, names = at, len(cells) // GROUPS, self._rows_by_name()
            line = 0  # (the line `at` starts; row k is line k + 1, and a `}` line follows the last)
            new: list[Instruction] = []
            spans: list[tuple[int, int]] = []
            try:
                for k in missing:
                    if rows - k < k - line:  # (nearer the end: most rows read are the root, the last)
                        at = end
                        for _ in range(rows - k + 1):
                            at = src.rfind("\n", start, at)
                        at += 1
                        line = k + 1
                    while line <= k:
                        at = src.find("\n", at, end) + 1
                        line += 1
                    nl = src.find("\n", at, end)
                    inst = _row_instruction(reading.lines, src, at, nl, first + line, k, cells, names)
                    if inst is None:
                        return None
                    new.append(inst)
                    spans.append((at, nl))
                lenient, check_ints = reading.lenient, reading.check_ints
                if check_ints is None:  # what the range check reads (a superset: the read lines)
                    check_ints = _has_long_int("\n".join(src[a:b] for a, b in spans))
                # What `verify_instructions` would pass unread, as `LineReader.build` vets its lines: a known
                # signature whose values were found valid before (most dot lines: their values repeat).
                unvetted = new if check_ints else [i for i in new if not vetted(i)]
                if unvetted:
                    verify_instructions(_found_computation(self.name, tuple(unvetted)), lenient=lenient,
                                        source=src, check_ints=check_ints)
            except (HloSyntaxError, HloSemanticError) as e:
                raise _positioned(e, self._source, self._path) from None
            except Exception as e:
                raise _translate(e, self._source, self._path) from None
            memo.update(zip([first + 1 + k for k in missing], new))
        return tuple([memo[first + 1 + k] for k in ks])

    def _rows_by_name(self) -> dict[str, int]:
        """Each name's row in the index (-1 for a name two rows define), made on the first question and kept in
        `_row_names` (a dict of strings and ints, which the collector does not track; in the index, it would make
        the collector track the index too)."""
        by_name = self._row_names
        if by_name is None:
            names = self._indexed[_CELLS][NAME::GROUPS]
            by_name = dict(zip(names, range(len(names))))  # (in C: most bodies define each once)
            if len(by_name) != len(names):  # a name defined twice: -1
                by_name = {}
                for k, name in enumerate(names):
                    by_name[name] = -1 if name in by_name else k
            _SET_ROW_NAMES(self, by_name)
        return by_name

    @property
    def _parsed(self) -> Computation:
        """The parsed computation, parsed on the first read (`_parse`) and kept."""
        parsed = self._computation
        if parsed is None:
            parsed = self._parse()
            _SET_PARSED(self, parsed)
            index = self._indexed
            _SET_INDEXED(self, None)  # (the parsed instructions answer from now on)
            _SET_ROW_NAMES(self, None)
            memo = self._reading.rows_read
            if memo and index is not None and index is not _UNINDEXED:  # (rows read before: not needed now)
                first = (self.at >> Position._SHIFT) + 1
                for line in range(first, first + len(index[_CELLS]) // GROUPS):
                    memo.pop(line, None)
        return parsed

    def _parse(self) -> Computation:
        start, end = self._span[:2]
        reading = self._reading
        if self.name in reading.parsing:  # a shape inferred from a callee that is this computation
            raise HloSemanticError(f"computation {self.name!r} calls itself", line=self.position.line,
                                   column=self.position.column, source_line=_source_line(self._source,
                                                                                         self.position.line))
        reading.parsing.add(self.name)
        # The module's computations for shapes inferred from a callee; none when the module was dropped (only a
        # call, while or conditional written without its shape needs them, and then says so). (`CALLEES.set`, not
        # `with callee_table(...)`: a context manager per computation cost 5% of a large parse.)
        table = reading.callees() if reading.callees is not None else None
        token = CALLEES.set(table.by_name if table is not None else DroppedModule())
        try:
            return _parse_chunk(reading, start, end, self.position.line)
        except (HloSyntaxError, HloSemanticError) as e:
            raise _positioned(e, self._source, self._path) from None
        except Exception as e:
            raise _translate(e, self._source, self._path) from None
        finally:
            CALLEES.reset(token)
            reading.parsing.discard(self.name)

    # The parsed computation's fields and kept answers (the record leaves its own unset).
    @property
    def instructions(self) -> tuple[Instruction, ...]:  # type: ignore[override]
        return self._parsed.instructions

    @property
    def parameter_names(self):  # type: ignore[override]
        return self._parsed.parameter_names

    @property
    def parameter_types(self):  # type: ignore[override]
        return self._parsed.parameter_types

    @property
    def result_shape(self):  # type: ignore[override]
        return self._parsed.result_shape

    @property
    def attributes(self):  # type: ignore[override]
        return self._parsed.attributes

    @property
    def notes(self):  # type: ignore[override]
        return self._parsed.notes if self.is_parsed else ()

    @property
    def by_name(self) -> Mapping[str, Instruction]:
        return self._parsed.by_name

    @property
    def root(self) -> Instruction:
        return self._parsed.root

    def __repr__(self) -> str:
        state = "parsed" if self.is_parsed else "unparsed"
        return f"LazyComputation({self.name!r}, {state}, line {self.position.line})"


_RECORD_FIELDS = tuple(cls.__dict__[name].__set__ for cls, name in (
    (Computation, "name"), (Computation, "is_entry"), (Computation, "at"), (LazyComputation, "_reading"),
    (LazyComputation, "_span"), (LazyComputation, "_indexed"), (LazyComputation, "_row_names"),
    (LazyComputation, "_computation")))
_SET_INDEXED, _SET_ROW_NAMES, _SET_PARSED = _RECORD_FIELDS[5:]
_SET_WRITTEN = Computation.__dict__["_written"].__set__
_UNINDEXED = object()  # `LazyComputation._indexed` before the index is asked for


# `, key=` of an attribute that names called computations: where the fast path reads attribute keys (a superset
# of the lines that hold one: the same text inside a quoted string also matches, and those lines are only read).
# With a comment in the text, any key after a space too (the grammar reads `, /*c*/ calls=`).
# (The lookahead, a key's first letter or a space, turns most commas of a line, in shapes and operand lists, away
# before the alternatives are tried: 9% of the search.)
_CALL_AT = re.compile(r",(?=[ \t" + "".join(sorted({k[0] for k in CALL_KEYS})) + r"])[ \t]*+(?:" + "|".join(CALL_KEYS)
                      + r")=")
_CALL_AT_SPACED = re.compile(r"[,\s](?:" + "|".join(CALL_KEYS) + r")=", re.A)
# The first operand in a row's operand text: a name, maybe after its shape (older printers), then `,` or the end;
# `/*...*/` comments may stand wherever spaces may (XLA prints `/*index=5*/%x` in long lists; its lexer skips them).
_GAP = r"(?:[ \t]|/\*(?:[^*\n]|\*(?!/))*+\*/)*+"
_FIRST_OPERAND = re.compile(_GAP + r"(?:" + _ARRAY + r"[ \t]" + _GAP + r")?%?([A-Za-z_][\w.\-]*+)" + _GAP
                            + r"(?:,|\Z)", re.A)


# A lazy computation's index (`_index_of`): what one regex pass (`fastpath.INSTRUCTION_LINE.findall`) reads of its text
# in XLA's form, kept as a plain tuple of strings and ints, which the collector stops tracking at its first collection (an object per computation, 21,500 of a 22 MB module, was a fifth of what a lazy parse and the
# analysis's questions kept for it to walk). Its fields, by index:
# - `_CELLS`: per instruction line (row k is line k + 1 of the text), its ROOT mark, `%`, name, shape text, opcode and
#   operand text (`INSTRUCTION_LINE`'s groups), flat (row k's group `f` at `GROUPS * k + f`);
# - `_CALLS`: the rows with a call attribute (`_CALL_AT`), None when one is on the header or the closing line;
# - `_ROOT`: the row marked ROOT, -1 unless exactly one is.
# The collector would track a tuple that held anything else, so what else a record knows of its rows is apart: their
# opcodes (a frozenset) in its `_written`, each name's row in its `_row_names` (`LazyComputation._rows_by_name`),
# the instructions read from rows in the parse's `_Reading.rows_read`.
_CELLS, _CALLS, _ROOT = range(3)


def _index_of(reading: _Reading, start: int, end: int, lines: int = -1, commented: bool | None = None
              ) -> tuple[tuple, frozenset[str]] | None:
    """The index of `reading.source[start:end]` and its rows' opcodes; None when a line between the header and `}`
    is not a row. (What follows a row's operand list is taken for its attributes, one instruction a line, as XLA
    prints.) `lines`: how many lines lie between the header and `}` (-1: counted here); `commented`: whether the
    text holds a `/*` (None: looked for here; False: call keys are looked for after a comma only)."""
    src = reading.source
    rows = INSTRUCTION_LINE.findall(src, start, end)
    if len(rows) != (lines if lines >= 0 else src.count("\n", start, end) - 1):
        return None
    # Opcodes interned (one string per opcode, not one per row: 145,000 rows of the synthetic module, a third of
    # its text kept; the list, the C-level slice assignment and the tuple cost 0.3 us a body)
    flat = list(chain.from_iterable(rows))
    flat[OPCODE::GROUPS] = map(_intern, flat[OPCODE::GROUPS])
    cells = tuple(flat)
    written = frozenset(cells[OPCODE::GROUPS])
    written = reading.written_sets.setdefault(written, written)  # (one set per distinct opcode set)
    marks = cells[MARK::GROUPS]
    root = -1  # (two rows marked ROOT: the parse reports it)
    marked = len(marks) - marks.count("")
    if marked == 1:
        root = len(rows) - 1 if marks[-1] else next(k for k, mark in enumerate(marks) if mark)
    elif not marked and rows:  # none marked: the last instruction is the root, as XLA reads it
        root = len(rows) - 1
    if commented is None:
        commented = src.find("/*", start, end) >= 0
    call_at = _CALL_AT_SPACED if commented else _CALL_AT
    if call_at.search(src, start, end) is None:  # (most fusion bodies)
        return (cells, (), root), written
    calls: list[int] | None = []
    line, at = 0, start  # (the line of `at`: each hit counts the newlines since the last)
    for hit in call_at.finditer(src, start, end):
        line += src.count("\n", at, hit.start())
        at = hit.start()
        if not 0 < line <= len(rows):
            calls = None  # (the header or the closing line: parse)
            break
        if not calls or calls[-1] != line - 1:
            calls.append(line - 1)
    return (cells, tuple(calls) if calls is not None else None, root), written


def _head(index: tuple, k: int) -> LineHead | None:
    """Row `k`'s `LineHead`; None when `k` is -1 (no one row) or its shape does not decode."""
    if k < 0:
        return None
    at = GROUPS * k
    shape_text, opcode, operands = index[_CELLS][at + SHAPE:at + OPERANDS + 1]
    first = _FIRST_OPERAND.match(operands) if opcode != "constant" else None  # (a literal)
    try:
        return LineHead(opcode, decode_shape(shape_text), first.group(1) if first is not None else None)
    except ValueError:
        return None


def _rows_of(index: tuple, opcodes: frozenset[str] | set[str] | tuple[str, ...]) -> list[int]:
    """The rows with an opcode in `opcodes`, ascending."""
    return [k for k, opcode in enumerate(index[_CELLS][OPCODE::GROUPS]) if opcode in opcodes]


def _readers(index: tuple, name: str) -> list[int]:
    """The rows whose operand text holds `name` as text, ascending (a superset of its users: they are read to
    tell)."""
    return [k for k, operands in enumerate(index[_CELLS][OPERANDS::GROUPS]) if name in operands]


# Call rows from which `call_instructions` parses a computation where they are half its rows or more.
_CALLS_PARSED = 32


def _row_instruction(lines: LineReader, source: str, start: int, end: int, lineno: int, k: int, cells: tuple,
                     by_name: dict[str, int]) -> Instruction | None:
    """Row `k`'s instruction (the line `source[start:end]`) by the fast path, with its operands' shapes from the rows
    that define them; None when the line is not in the form the fast path reads or an operand is not defined by an
    earlier row."""
    pending = lines.instruction(source, start, end, lineno)
    if pending is None:
        return None
    if len(pending) == 9:  # the fast form
        is_root, name, at, shape, opcode, operands, attrs, parameter, literal = pending
    else:  # a constant, as the grammar's callback gives it
        is_root, tok, shape, opcode, operands, attrs, parameter, literal = pending
        name, at = str(tok), packed(tok.line, tok.column)
    names = []
    shapes = []
    if operands:  # (either form has none, or the fast path's names first)
        for oname in operands[0]:
            j = by_name.get(oname, -1)
            if not 0 <= j < k:
                return None  # not defined once, by an earlier row
            try:
                shapes.append(decode_shape(cells[GROUPS * j + SHAPE]))
            except ValueError:
                return None
            names.append(cells[GROUPS * j + NAME])  # (the defining row's string)
    return new_instruction(name[1:] if name[0] == "%" else name, opcode, shape, tuple(names),
                           lines.shared(tuple(shapes)), attrs, is_root, at, parameter, literal)
