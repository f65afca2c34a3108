"""What XLA accepts beyond the grammar: the semantic checks of a parsed HLO module.

XLA keeps its HloVerifier apart from its parser; so does this package. `analyzer.hlo.transformer` builds
the IR and calls these checks where the pieces they need are at hand (an instruction's opcode token and
attributes, a computation once built, the module once all computations are read); the checks themselves
only read tokens (anything with `.line` and `.column`) and IR values, so they import no parser.

Every failure is an `HloSyntaxError` (the text cannot mean anything) or an `HloSemanticError` (it parses,
but XLA's parser rejects it) with the line and column of the offending token. The rules of XLA's HLO verifier
that its parser leaves out (`hlo_module_from_text` runs no verifier: a device twice in a sharding, an iota of
another size) are not checked here; the attribute decoders the analysis reads apply them, positioned
(`analyzer.hlo.attributes._PARSE_CHECKS`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from difflib import get_close_matches
from math import prod
from typing import Any

from analyzer.errors import HloSemanticError, HloSyntaxError
from analyzer.hlo import attributes
from analyzer.hlo.ir import Attribute, Computation, HloModule, Instruction, Position
from analyzer.hlo.literals import check_literal
from analyzer.hlo.opcodes import (ALLOWED_ATTRIBUTES, COMMON_ATTRIBUTES, OPCODES, REQUIRED_ATTRIBUTES, allowed_attributes,
                                  base_opcode, fixed_arity, is_known_opcode)
from analyzer.hlo.shapes import ELEMENT_BITS, Shape, bad_element_layout, decode_array_shape

__all__ = [
    "check_opcode",
    "check_instruction",
    "check_constant",
    "verify_computation",
    "verify_attributes",
    "verify_instructions",
    "signature_known",
    "value_known",
    "verify_header",
    "check_computations",
    "check_module_attribute",
    "compatible",
    "check_name",
    "check_instruction_names",
]


def _syntax(msg: str, tok: Any, offset: int = 0) -> HloSyntaxError:
    return HloSyntaxError(msg, line=tok.line, column=tok.column + offset)


def _at(pos: Position | None) -> dict[str, int | None]:
    return {"line": pos.line if pos else None, "column": pos.column if pos else None}


# ---------------------------------------------------------------------------------------------- instructions

def check_opcode(opcode: Any) -> None:
    """`opcode` (a token) is one XLA's parser knows.

    Raises:
      HloSyntaxError: at the opcode, with the closest known spellings.
    """
    if not is_known_opcode(opcode):
        raise _syntax(_unknown_opcode(str(opcode)), opcode)


def check_instruction(opcode: Any, n_operands: int, parameter: int | None, attrs: Sequence[Attribute],
                      shape: Shape | None = None) -> None:
    """The operand count, the parameter number and the required attributes of one instruction.

    Args:
      opcode: the opcode token (errors point at it).
      n_operands: how many operands were written.
      parameter: N of `parameter(N)`, else None.
      attrs: the instruction's attributes in order.
      shape: the shape written (None when left out); a `tuple`'s must have one element per operand.
    """
    if opcode == "parameter" and parameter is None:
        raise _syntax("expected a parameter number: `parameter(0)`", opcode, len(opcode) + 1)
    if opcode == "tuple" and shape is not None:
        _check_tuple(opcode, n_operands, shape)
    arity = fixed_arity(opcode)
    if arity is not None and n_operands != arity and not (
            opcode in ("async-done", "async-update") and attributes.xla_does("async_chain_unchecked")):
        raise _syntax(f"`{opcode}` expects {arity} operand{'s' if arity != 1 else ''}, but has {n_operands}",
                      opcode, len(opcode))
    _check_required(str(opcode), attrs, opcode)


def _check_tuple(opcode: Any, n_operands: int, shape: Shape) -> None:
    """A `tuple`'s shape is a tuple with one element per operand (XLA's parser reads as many operands as its shape
    has elements, and aborts on a shape that is not a tuple); the elements' shapes are not compared, nor nested
    tuples' counts (XLA's parser takes them as written)."""
    if not shape.is_tuple:
        raise HloSemanticError(f"`tuple` makes a tuple: its shape must be one like (f32[4], s32[]), an element per "
                               f"operand ({n_operands} here), not {shape}", line=opcode.line, column=opcode.column)
    n = len(shape.tuple_shapes)
    if n != n_operands:
        raise HloSemanticError(f"`tuple` of shape {shape} expects {n} operand{'s' if n != 1 else ''}, one per "
                               f"element, but has {n_operands}", line=opcode.line, column=opcode.column + len(opcode))


def check_constant(name: Any, shape: Shape, literal: tuple, opened: Any) -> None:
    """A constant's layout is a permutation of its dimensions and its literal fits its shape."""
    for leaf in shape.leaves():
        if leaf.layout is not None and sorted(leaf.layout.minor_to_major) != list(range(leaf.rank)):
            raise _syntax(f"the layout of constant {leaf} is not a permutation of its dimensions", name)
    check_literal(literal, shape, opened)


# ---------------------------------------------------------------------------------------------- computations

def verify_computation(comp: Computation, *, signed: bool) -> None:
    """Checks on one built computation: one ROOT, parameter numbers 0..N-1, control predecessors defined
    before their user, the per-opcode rules of XLA's parser (`_SHAPE_RULES`; with attributes, `_ATTRIBUTE_RULES`:
    conditional selectors, parameter replication, custom-call layout constraints, tuple indices) and, when a
    signature was written (`signed`), that its result fits the root.

    Raises:
      HloSemanticError / HloSyntaxError: at the offending instruction or attribute.
    """
    name = comp.name
    root = None
    instructions = comp.instructions
    # Parameter numbers seen, one byte each (a dict by number, and one by name for control predecessors, were
    # most of what a 200,000-parameter computation's checks held); numbers past the instruction count are invalid
    # anyway and are kept apart only to name the error the same way.
    n = len(instructions)
    seen = bytearray(n)
    beyond: set[int] = set()
    count = 0
    index: dict[str, int] | None = None  # each name's place, made on the first control-predecessors
    for k, inst in enumerate(instructions):
        if inst.is_root:
            if root is not None:
                raise HloSemanticError(f"computation {name!r} has two ROOT instructions (the first is at "
                                       f"line {root.position.line if root.position else '?'})", **_at(inst.position))
            root = inst
        p = inst.parameter_number
        if p is not None:
            _note_parameter(p, seen, beyond, name, inst)
            count += 1
        op = inst.opcode
        rule = _SHAPE_RULES.get(op)
        if rule is not None:
            if rule is _check_done_channel:  # needs the operand's own instruction
                if len(inst.operand_names) == 1:
                    if index is None:
                        index = _places(instructions)
                    j = index.get(inst.operand_names[0], k)
                    _check_done_channel(inst, instructions[j if j < k else k])
            else:
                rule(inst)
        if not inst.attribute_row:
            continue
        rule = _ATTRIBUTE_RULES.get(op)
        if rule is not None:
            rule(inst)
        a = inst.attribute("control-predecessors")
        if a is not None:
            if index is None:
                index = _places(instructions)
            _check_control_predecessors(inst, a, index, k, name)
    if count and (beyond or seen.find(0, 0, count) >= 0):  # (all distinct: 0..count-1 each seen, or one missing)
        missing = seen.find(0, 0, count)
        numbers = [i for i in range(n) if seen[i]] + sorted(beyond)
        raise HloSemanticError(f"computation {name!r} has parameters {numbers}, but parameter({missing}) is "
                               "missing: numbers must run 0..N-1", **_at(comp.position))
    if signed and comp.result_shape is not None:
        _check_signature(comp, root or comp.instructions[-1])


def _places(instructions: Sequence[Instruction]) -> dict[str, int]:
    """Each instruction's place in its computation, by name."""
    return {i.name: j for j, i in enumerate(instructions)}


def _note_parameter(p: int, seen: bytearray, beyond: set[int], name: str, inst: Instruction) -> None:
    """Record parameter number `p` of `inst` in computation `name` (`seen`: one byte per number below the
    instruction count; `beyond`: the numbers past it), once it is new, non-negative and an int64."""
    n = len(seen)
    if (seen[p] if 0 <= p < n else p in beyond):
        raise HloSemanticError(f"parameter number {p} is used twice in computation {name!r}", **_at(inst.position))
    if p < 0:
        raise HloSemanticError(f"parameter number {p} is negative", **_at(inst.position))
    if p > _INT64_MAX:
        raise HloSyntaxError(f"parameter number {p} is out of range for an int64", **_at(inst.position))
    if p < n:
        seen[p] = 1
    else:
        beyond.add(p)


def _check_control_predecessors(inst: Instruction, a: Attribute, index: dict[str, int], k: int, name: str) -> None:
    """`control-predecessors={...}` of `inst` (the `k`th instruction of computation `name`) names instructions
    defined before it (`index`: each name's place; names are unique, so one at or after `k` is not before)."""
    apos = a.position or inst.position
    try:
        preds = attributes.parse_name_list(a.raw)
    except ValueError as e:
        raise HloSyntaxError(f"bad control-predecessors on {inst.name!r}: {e}", **_at(apos)) from None
    for q in preds:
        if index.get(q, k) >= k:
            raise HloSemanticError(f"control predecessor {q!r} of {inst.name!r} is not defined before it in "
                                   f"computation {name!r}", **_at(apos))


def _check_signature(comp: Computation, root: Instruction) -> None:
    """The written result shape of `comp` fits its root (XLA reads the signature's parameters for their names
    only; it checks just the result shape)."""
    if not compatible(comp.result_shape, root.shape):
        raise HloSemanticError(f"shape of computation {comp.name!r}, {comp.result_shape}, is not compatible with that "
                               f"of its root instruction {root.name!r}, {root.shape}", **_at(root.position))


def _check_scan(inst: Instruction) -> None:
    """A scan has at least `num_carries` operands (XLA's parser checks it)."""
    for a in inst.attributes:
        if a.key == "num_carries" and a.raw.strip().isdigit() and int(a.raw) > len(inst.operands):
            raise HloSemanticError(f"scan {inst.name!r} has num_carries={a.raw.strip()} but only "
                                   f"{len(inst.operands)} operands: it needs one operand per carry",
                                   **_at(a.position or inst.position))


def _check_done_channel(inst: Instruction, operand: Instruction) -> None:
    """A send-done (recv-done) of a send (recv) has the same channel_id, or neither has one (XLA's parser
    builds the done from its operand's channel and refuses, without a message, when they differ)."""
    if operand.opcode != inst.opcode[:-5]:
        return
    mine, theirs = inst.attr("channel_id"), operand.attr("channel_id")
    def value(raw: str | None) -> Any:
        return None if raw is None else int(raw) if raw.strip().lstrip("-").isdigit() else raw
    if value(mine) != value(theirs):
        a = inst.attribute("channel_id")
        at = a.position if a is not None and a.position is not None else inst.position
        raise HloSemanticError(f"{inst.name!r} has channel_id={mine if mine is not None else '(none)'}, but its "
                               f"{operand.opcode} {operand.name!r} has channel_id="
                               f"{theirs if theirs is not None else '(none)'}: they must match", **_at(at))


def verify_attributes(module: HloModule) -> None:
    """Decode every known attribute value once, so a malformed one is reported where it is written."""
    for c in module.computations:
        verify_instructions(c)


# Keys XLA's parser takes in the module header, in `metadata={...}`, after a computation's `}`, and in the
# rows of the FileLocations and StackFrames tables (from the "Allowed attributes: ..." of its errors, jax 0.10).
MODULE_ATTRIBUTES = frozenset({
    "alias_passthrough_params", "allow_spmd_sharding_propagation_to_output",
    "allow_spmd_sharding_propagation_to_parameters", "buffer_donor", "entry_computation_layout",
    "frontend_attributes", "input_output_alias", "is_scheduled", "num_partitions", "origin_recovery_table",
    "replica_count"})
METADATA_FIELDS = frozenset({
    "deduplicated_name", "metadata_payload", "op_name", "op_type", "profile_type", "scheduling_name",
    "source_column", "source_end_column", "source_end_line", "source_file", "source_line", "stack_frame_id"})
COMPUTATION_ATTRIBUTES = frozenset({"execution_thread"})
FILE_LOCATION_FIELDS = frozenset({"column", "end_column", "end_line", "file_name_id", "function_name_id", "line"})
STACK_FRAME_FIELDS = frozenset({"file_location_id", "parent_frame_id"})

# Words XLA's lexer reads as keywords, so they cannot name an instruction or a computation (unless written
# with `%`); measured by naming an instruction with each.
RESERVED_NAMES = frozenset(ELEMENT_BITS) | {
    "true", "false", "inf", "nan", "maximal", "replicated", "manual", "unknown", "last_tile_dim_replicate",
    "HloModule", "ENTRY", "ROOT", "FileNames", "FunctionNames", "FileLocations", "StackFrames"}


def check_name(tok: Any, what: str) -> None:
    """`tok` (a name token) is not one of XLA's keywords.

    Raises:
      HloSyntaxError: at the name.
    """
    if tok in RESERVED_NAMES:
        if tok in ELEMENT_BITS and what == "an instruction":  # (not even as `%s2`: see check_instruction_names)
            raise _syntax(f"`{tok}` is an element type and cannot name an instruction; rename it (XLA suggests "
                          f"`{tok}_`)", tok)
        raise _syntax(f"`{tok}` is a keyword of HLO and cannot name {what}; write `%{tok}` or rename it", tok)


def check_instruction_names(insts) -> None:
    """No instruction is named like an element type, `%` or not (XLA's parser: "illegal instruction name: s2; suggest
    renaming to: s2_", on every supported version; a computation may be, as `%s2`).

    Raises:
      HloSyntaxError: at the first such instruction's name.
    """
    for inst in insts:
        if inst.name in ELEMENT_BITS:
            p = inst.position
            raise HloSyntaxError(f"`{inst.name}` is an element type and cannot name an instruction, not even as "
                                 f"`%{inst.name}`; rename it (XLA suggests `{inst.name}_`)",
                                 line=p.line if p else None, column=p.column if p else None)


_INT64_MAX = (1 << 63) - 1
_METADATA_OK = re.compile(r'\{(?:\s*(?:' + "|".join(sorted(METADATA_FIELDS)) + r')\s*=\s*(?:"[^"\\]*(?:\\.[^"\\]*)*"|[^\s"{},]+)\s*,?)*\s*\}')
_METADATA_KEY = re.compile(r'"(?:[^"\\]|\\.)*"|([A-Za-z_][\w.\-]*)\s*=')
_LONG_INT = re.compile(r"-?\d{19,}")
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')


# (opcode, *attribute keys) of instructions whose opcode is known and whose keys the opcode allows, each once. Kept
# for the process, unlike the memos of a program's texts (analyzer/hlo/memo.py): XLA's vocabulary, not a program's.
_SIGNATURES_OK: set[tuple] = set()


def signature_known(sig: tuple) -> bool:
    """Whether `sig` (an opcode, then an instruction's attribute keys in order) is a known opcode with keys it
    allows, each once: then `verify_instructions` passes the instruction's keys without reading them one by one,
    and `fastpath.LineReader.build` may vet the line. Each such signature is remembered. Never raises."""
    if sig in _SIGNATURES_OK:
        return True
    opcode, keys = sig[0], sig[1:]
    if not is_known_opcode(opcode) or len(set(keys)) != len(keys):
        return False
    allowed = allowed_attributes(opcode)
    if allowed is not None and not allowed.issuperset(keys):
        return False
    if len(_SIGNATURES_OK) > 4096:
        _SIGNATURES_OK.clear()
    _SIGNATURES_OK.add(sig)
    return True


def value_known(key: str, raw: str) -> bool:
    """Whether `verify_instructions` takes `key=raw` without a check it would report (on an instruction whose
    signature it knows, with no backslash and no 19-digit number in the line): a key it does not decode, a value
    found valid before, or one whose quick check (`attributes._QUICK`) accepts it, which `attributes.validate`
    trusts; that one is then remembered as valid, as `validate` would (a metadata value also needs the field
    names XLA takes, `_METADATA_OK`, or the verifier reads them). Never raises: False sends the instruction
    through `verify_instructions`, which says what is wrong."""
    seen = attributes.valid_values().get(key)
    if seen is None or raw in seen:
        return True
    quick = attributes._QUICK.get(key)
    if quick is None or not quick.fullmatch(raw) or (key == "metadata" and not _METADATA_OK.fullmatch(raw)):
        return False
    seen.add(raw)
    return True


def vetted(inst: Instruction) -> bool:
    """Whether `verify_instructions` (with no 19-digit number in the text) passes `inst` without a check it would
    report: a known opcode with keys it allows, each once (`signature_known`), and every value known valid
    (`value_known`) with no backslash in it. What `fastpath.LineReader.build` tests of each line it reads, for an
    instruction already built (a lazily read row). Never raises."""
    return signature_known((inst.opcode, *inst.attribute_keys)) and _values_known(inst.attribute_row)


def _values_known(row: tuple) -> bool:
    """Whether every value of an attribute row (`Instruction.attribute_row`) is known valid (`value_known`, its
    first test inline: most values were seen before) and none holds a backslash (escapes are checked in full).
    Never raises."""
    valid = attributes.valid_values()
    n = len(row) // 3
    for key, raw in zip(row[:n], row[n:2 * n]):
        seen = valid.get(key)
        if "\\" in raw or (seen is not None and raw not in seen and not value_known(key, raw)):
            return False
    return True


def verify_instructions(comp: Computation, *, lenient: bool = False, source: str | None = None,
                        check_ints: bool = True) -> tuple[str, ...]:
    """Per instruction: a known opcode, each attribute allowed on it (XLA's per-opcode tables), none twice,
    integers within int64, and every known attribute value decodes.

    Args:
      comp: a built computation.
      lenient: keep unknown opcodes and attributes (a dump from another XLA version) and return a note
        for each instead of raising.
      source: the text the positions refer to, to point errors at the opcode rather than the name.
      check_ints: False when the caller knows the text has no 19-digit number (the common case).

    Returns:
      The notes (empty unless `lenient`), each starting with `line:column:`.

    Raises:
      HloSyntaxError: at the opcode or the attribute.
    """
    notes: list[str] = []
    for a in comp.attributes:
        if a.key not in COMPUTATION_ATTRIBUTES:
            msg = f"unknown attribute {a.key} after computation {comp.name!r}; XLA takes execution_thread"
            if not lenient:
                raise HloSyntaxError(msg, **_key_at(a, None))
            notes.append(f"{_key_at(a, None)['line']}:{_key_at(a, None)['column']}: {msg}; kept as written")
    for inst in comp.instructions:
        opcode = inst.opcode
        row = inst.attribute_row
        # A known opcode with keys it allows, each once, passes whatever the values (`signature_known`, which
        # remembers each such combination; its values are still checked, below).
        sig = (opcode, *inst.attribute_keys)
        known = sig in _SIGNATURES_OK or signature_known(sig)
        if not known and not is_known_opcode(opcode):
            col = _opcode_column(inst, source)
            msg = _unknown_opcode(opcode)
            if not lenient:
                raise HloSyntaxError(msg, line=inst.position.line if inst.position else None, column=col)
            notes.append(f"{inst.position.line if inst.position else '?'}:{col}: {msg}; kept as written")
        if not row:
            continue
        if known and not check_ints and _values_known(row):
            continue  # nothing left to check: every value known valid (most: values repeat)
        if not known:
            _check_unique_keys(inst)
        allowed = None if known else allowed_attributes(opcode)
        for a in inst.attributes:
            note = _check_attribute(a, inst, allowed, lenient, check_ints)
            if note:
                notes.append(note)
        _validate(inst)
    return tuple(notes)


def _check_unique_keys(inst: Instruction) -> None:
    """No attribute key twice on `inst` (XLA takes each once)."""
    keys = inst.attribute_keys
    if len(keys) > 1 and len(set(keys)) != len(keys):
        seen: set[str] = set()
        for a in inst.attributes:
            if a.key in seen:
                raise HloSyntaxError(f"attribute {a.key} appears twice on {inst.name!r}; XLA takes each once",
                                     **_key_at(a, inst))
            seen.add(a.key)


def _check_attribute(a: Attribute, inst: Instruction, allowed: frozenset[str] | None, lenient: bool,
                     check_ints: bool) -> str | None:
    """One attribute of `inst`: a key the opcode allows (`allowed`; None: all), integers within int64 (with
    `check_ints`), the escapes of its strings, the fields of a metadata. Returns the note of what `lenient`
    kept (an attribute not allowed, an unknown metadata field), else None."""
    key = a.key
    if allowed is not None and key not in allowed:
        msg = _unexpected_attribute(key, inst.opcode, allowed)
        if not lenient:
            raise HloSyntaxError(msg, **_key_at(a, inst))
        where = _key_at(a, inst)
        return f"{where['line']}:{where['column']}: {msg}; kept as written"
    if check_ints and key != "backend_config":
        _check_int64(a, inst)
    if "\\" in a.raw and not (key == "backend_config" and a.raw[:1] == "{"):  # (JSON has its own escapes)
        _check_escapes(a, inst)
    if key == "metadata" and not attributes.known_valid(key, a.raw) and not _METADATA_OK.fullmatch(a.raw):
        return _check_metadata(a, inst, lenient)
    return None


def _validate(inst: Instruction) -> None:
    """Every known attribute value of `inst` decodes (`attributes.validate`); a failure is placed at the
    attribute, or inside its value where the decoder says where."""
    try:
        attributes.validate(inst)
    except ValueError as e:
        a = e.attribute  # type: ignore[attr-defined]
        where = _at(a.position or inst.position)
        offset = getattr(e, "offset", 0)  # (a decoder that knows where in the value: `attributes.OriginError`)
        if offset and a.position is not None and "\n" not in a.raw[:offset]:
            where["column"] = a.position.column + offset
        raise HloSyntaxError(f"bad {a.key}= on {inst.name!r}: {e}", **where) from None


# The escapes XLA's lexer takes in a quoted string (C's, as `absl::CUnescape` reads them).
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]+|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-7]{1,3}|[abfnrtv\\'\"?]|.?)", re.S)


def _check_escapes(a: Attribute, inst: Instruction) -> None:
    """Every backslash in the attribute's quoted strings starts an escape XLA's lexer knows."""
    for q in _QUOTED.finditer(a.raw):
        for e in _ESCAPE.finditer(q.group()[1:-1]):
            esc = e.group(1)
            if len(esc) <= 1 and (not esc or esc not in "abfnrtv\\'\"?01234567"):  # (a known escape matched longer)
                at = _at(a.position or inst.position)
                if a.position is not None:
                    at["column"] = a.position.column + q.start() + 1 + e.start()
                raise HloSyntaxError(f"unknown escape `\\{esc}` in a string of {a.key}= on {inst.name!r}; XLA takes "
                                     "\\n \\t \\r \\\\ \\\" \\' \\? \\a \\b \\f \\v, octal \\0-\\377, \\xHH, \\uHHHH and "
                                     "\\UHHHHHHHH", **at)


def _key_at(a: Attribute, inst: Instruction | None) -> dict[str, int | None]:
    """Where attribute `a`'s key starts (its value's position less `key=`)."""
    if a.position is not None:
        return {"line": a.position.line, "column": max(1, a.position.column - len(a.key) - 1)}
    return _at(inst.position if inst is not None else None)


def _check_metadata(a: Attribute, inst: Instruction, lenient: bool) -> str | None:
    """The fields of `metadata={...}` are XLA's, each once (the value syntax is the decoder's business)."""
    seen: set[str] = set()
    for m in _METADATA_KEY.finditer(a.raw):
        key = m.group(1)
        if key is None:
            continue
        where = {"line": a.position.line if a.position else None,
                 "column": (a.position.column + m.start(1)) if a.position else None}
        if key in seen:
            raise HloSyntaxError(f"metadata field {key} appears twice on {inst.name!r}", **where)
        seen.add(key)
        if key not in METADATA_FIELDS:
            close = get_close_matches(key, METADATA_FIELDS, n=1)
            msg = f"unknown metadata field {key} on {inst.name!r}" + (f"; did you mean {close[0]}?" if close else "")
            if not lenient:
                raise HloSyntaxError(msg, **where)
            return f"{where['line']}:{where['column']}: {msg}; kept as written"
    return None


def verify_header(module: HloModule, source: str, *, lenient: bool = False) -> tuple[str, ...]:
    """The module header's keys are XLA's (`MODULE_ATTRIBUTES`); when `lenient`, notes instead of errors."""
    notes = []
    for key in module.attributes:
        if key in MODULE_ATTRIBUTES:
            continue
        m = re.search(r"[,\s]" + re.escape(key) + r"\s*=", source)
        line = source.count("\n", 0, m.start()) + 1 if m else None
        column = m.start() + 2 - (source.rfind("\n", 0, m.start()) + 1) if m else None
        close = get_close_matches(key, MODULE_ATTRIBUTES, n=1)
        msg = f"unknown module attribute {key}" + (f"; did you mean {close[0]}?" if close else "")
        if not lenient:
            raise HloSyntaxError(msg, line=line, column=column)
        notes.append(f"{line}:{column}: {msg}; kept as written")
    return tuple(notes)


def check_fields(pairs: list[tuple[str, str]], allowed: frozenset[str], text: str, tok: Any) -> None:
    """A FileLocations / StackFrames row names each of its allowed fields at most once.

    Raises:
      HloSyntaxError: at the row.
    """
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _syntax(f"field {key} appears twice in {text}", tok)
        if key not in allowed:
            raise _syntax(f"unknown field {key} in {text}; XLA takes {', '.join(sorted(allowed))}", tok)
        seen.add(key)


def _check_int64(a: Attribute, inst: Instruction) -> None:
    raw = a.raw
    m = _LONG_INT.search(raw)
    if m is None:
        return
    text = _QUOTED.sub(lambda q: " " * len(q.group()), raw) if '"' in raw else raw
    for m in _LONG_INT.finditer(text):
        v = int(m.group())
        if not -_INT64_MAX - 1 <= v <= _INT64_MAX:
            pos = a.position
            raise HloSyntaxError(f"{m.group()} in {a.key}= of {inst.name!r} is out of range for an int64",
                                 line=pos.line if pos else None, column=(pos.column + m.start()) if pos else None)


def _opcode_column(inst: Instruction, source: str | None) -> int | None:
    """The column of `inst`'s opcode in `source` (the name's column when it cannot be found)."""
    pos = inst.position
    if pos is None:
        return None
    if source is not None:
        start = 0
        for _ in range(pos.line - 1):
            start = source.find("\n", start) + 1
            if start == 0:
                return pos.column
        end = source.find("\n", start)
        line = source[start:] if end < 0 else source[start:end]
        k = line.find(f" {inst.opcode}(", pos.column - 1)
        if k >= 0:
            return k + 2
    return pos.column


def _unexpected_attribute(key: str, opcode: str, allowed: frozenset[str]) -> str:
    own = sorted(allowed - COMMON_ATTRIBUTES)
    if key in _ALL_KEYS:
        valid = f"`{opcode}` takes {', '.join(own)}" if own else f"`{opcode}` takes none of its own"
        return f"unexpected attribute {key} for `{opcode}` ({valid}, besides metadata, sharding, backend_config...)"
    close = get_close_matches(key, _ALL_KEYS, n=2)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return f"unknown attribute {key} on `{opcode}`{hint}"


_ALL_KEYS = sorted(COMMON_ATTRIBUTES.union(*ALLOWED_ATTRIBUTES.values()))


def _unknown_opcode(opcode: str) -> str:
    if opcode.startswith("%"):
        return f"expected an opcode like `add` after the shape, got the name `{opcode}`"
    close = get_close_matches(opcode, OPCODES, n=3)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else \
        " (XLA opcodes are like add, dot, fusion, all-gather, custom-call)"
    return f"unknown opcode `{opcode}`{hint}"


def _check_required(opcode: str, attrs: list[Attribute], tok: Any) -> None:
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


def _dynamic_reshape(inst: Instruction) -> None:
    if len(inst.operand_names) != 1 + inst.shape.rank:
        raise HloSemanticError(f"dynamic-reshape {inst.name!r} takes the operand and one size per dimension of "
                               f"{inst.shape}: {1 + inst.shape.rank} operands, not {len(inst.operand_names)}",
                               **_at(inst.position))


def _tuple_result(inst: Instruction) -> None:
    if not inst.shape.is_tuple or not inst.shape.tuple_shapes:
        raise HloSemanticError(f"{inst.opcode} {inst.name!r} must have a non-empty tuple shape like (f32[4], token[]), "
                               f"got {inst.shape}", **_at(inst.position))


_NOT_ARRAY = frozenset({"tuple", "token", "buffer"})


def _reshape(inst: Instruction) -> None:
    """A reshape keeps the element count of its operand (dynamic dims at their bound; XLA's parser aborts
    otherwise, unless a dim of the operand is unbounded `?`)."""
    ops = inst.operand_shapes
    if len(ops) != 1:
        return
    a, b = inst.shape, ops[0]
    if a is None or b is None:
        return
    if a.element_type in _NOT_ARRAY or b.element_type in _NOT_ARRAY:
        raise HloSemanticError(f"reshape {inst.name!r} takes and makes arrays, got {b} -> {a}", **_at(inst.position))
    if -1 in b.dims:
        return
    if prod(a.dims) != prod(b.dims) or -1 in a.dims:
        raise HloSemanticError(f"reshape {inst.name!r} to {a} ({a.num_elements} elements) from {b} "
                               f"({b.num_elements} elements): a reshape keeps the element count",
                               **_at(inst.position))


def _broadcast(inst: Instruction) -> None:
    """XLA's parser fills in `dimensions={}` only for a broadcast of a scalar; of an array it needs them written
    (measured: `f32[10,10] broadcast(f32[10] p)` without them is a syntax error there)."""
    if len(inst.operand_shapes) != 1 or "dimensions" in inst.attribute_keys:
        return
    shape = inst.operand_shapes[0]
    if shape is not None and not shape.is_tuple and shape.rank:
        raise HloSyntaxError(f"broadcast {inst.name!r} of {shape} needs `dimensions={{...}}` (which dimension of "
                             f"{inst.shape} each operand dimension becomes); only a scalar's may be left out",
                             **_at(inst.position))


# Shape rules XLA's parser applies to single opcodes (measured: it rejects or aborts otherwise).
_SHAPE_RULES: dict[str, Callable] = {
    "broadcast": _broadcast,
    "dynamic-reshape": _dynamic_reshape, "infeed": _tuple_result, "recv": _tuple_result, "reshape": _reshape,
    "scan": lambda inst: _check_scan(inst), "send-done": _check_done_channel, "recv-done": _check_done_channel}


def _check_index(inst: Instruction) -> None:
    """get-tuple-element's index names an element of its tuple operand (XLA aborts otherwise)."""
    a = inst.attribute("index")
    raw = a.raw if a is not None else None
    if raw is None or not inst.operand_shapes or not raw.lstrip("-").isdigit():
        return
    shape = inst.operand_shapes[0]
    n = len(shape.tuple_shapes) if shape is not None and shape.is_tuple else 0
    if not 0 <= int(raw) < n:
        raise HloSemanticError(f"index={raw} of {inst.name!r} is outside its operand's {n} tuple elements "
                               f"({shape})", **_at(a.position or inst.position))


def _check_conditional(iname: str, tok, ops: list, keys: tuple[str, ...]) -> None:
    """XLA: the selector is a scalar; s32 with branch_computations, pred with true/false_computation (`keys`: the
    attribute keys)."""
    sel = ops[0].shape
    want = "s32" if "branch_computations" in keys else "pred"
    if sel is not None and (sel.is_tuple or sel.dims or sel.element_type != want):
        raise HloSemanticError(f"the first operand of conditional {iname!r} must be a {want}[] scalar "
                               f"({'branch_computations' if want == 's32' else 'true/false_computation'}), "
                               f"got {sel}", line=tok.line, column=tok.column)


def _check_parameter_replication(iname: str, shape: Shape, a: Attribute | None) -> None:
    """parameter_replication={...} (`a`, None when not written) has one entry per leaf buffer of the parameter."""
    if a is None:
        return
    body = a.raw.strip()[1:-1].strip()
    n = len([x for x in body.split(",") if x.strip()]) if body else 0
    leaves = sum(1 for _ in shape.leaves())
    if n != leaves:
        raise HloSemanticError(f"parameter {iname!r} has {leaves} leaf buffers, but parameter_replication has {n} "
                               "elements", line=a.position.line if a.position else None,
                               column=a.position.column if a.position else None)


def _check_layout_constraints(iname: str, ops: list, a: Attribute | None) -> None:
    """A custom-call's operand_layout_constraints (`a`, None when not written): one shape per operand, each
    compatible with it."""
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



def _conditional_selector(inst: Instruction) -> None:
    if inst.operands:
        _check_conditional(inst.name, inst.position, inst.operands, inst.attribute_keys)


# Rules XLA's parser applies to the attributes of single opcodes (run on instructions that have attributes).
_ATTRIBUTE_RULES: dict[str, Callable[[Instruction], None]] = {
    "get-tuple-element": _check_index,
    "custom-call": lambda inst: _check_layout_constraints(inst.name, inst.operands,
                                                          inst.attribute("operand_layout_constraints")),
    "conditional": _conditional_selector,
    "parameter": lambda inst: _check_parameter_replication(inst.name, inst.shape,
                                                           inst.attribute("parameter_replication"))}

def compatible(a: Shape, b: Shape) -> bool:
    """XLA's `ShapeUtil::Compatible`: same element types and dims (tuples element-wise), layouts ignored."""
    if a.is_tuple or b.is_tuple:
        return (a.is_tuple and b.is_tuple and len(a.tuple_shapes) == len(b.tuple_shapes)
                and all(compatible(x, y) for x, y in zip(a.tuple_shapes, b.tuple_shapes)))
    return a.element_type == b.element_type and a.dims == b.dims


# ---------------------------------------------------------------------------------------------- module

def check_computations(comps: Sequence[Computation],
                       instructions_of: Callable[[Computation], Sequence[Instruction]] | None = None
                       ) -> Computation | None:
    """Module-level checks: unique computation names, at most one ENTRY, every called computation defined.

    `instructions_of(c)`: the instructions of `c` the checks read (None: all of them; a lazily parsed module
    gives an unparsed computation's call instructions, `parser._check_read`).

    Returns:
      The ENTRY computation, or None when none is marked.

    Raises:
      HloSemanticError: at the offending computation or attribute.
    """
    seen: dict[str, Computation] = {}
    entry = None
    async_calls: dict[str, Instruction] = {}  # wrapped computation -> its async-start
    for c in comps:
        if c.name in seen:
            raise HloSemanticError(f"computation name {c.name!r} is already defined at line {seen[c.name].position}",
                                   line=c.position.line, column=c.position.column)
        if c.is_entry:
            if entry is not None:
                raise HloSemanticError(f"two ENTRY computations: {entry.name!r} and {c.name!r}",
                                       line=c.position.line, column=c.position.column)
            entry = c
        chains: dict[str, tuple[str, str | None, str]] | None = None
        for inst in c.instructions if instructions_of is None else instructions_of(c):
            op = inst.opcode
            if op not in OPCODES or op in _ASYNC_GENERIC:
                chains = {} if chains is None else chains
                _check_async(inst, c, seen, chains, async_calls)
            for callee in attributes.called_computations(inst):
                if callee not in seen:  # XLA resolves calls as it reads: the callee must come first
                    where = ("defined after its caller; XLA needs it before" if any(x.name == callee for x in comps)
                             else "not defined")
                    a = _call_attr(inst, callee)
                    raise HloSemanticError(f"{inst.name!r} calls computation {callee!r}, which is {where}",
                                           line=a.line, column=a.column)
        seen[c.name] = c
    return entry

_LAYOUT_SHAPE = re.compile(r"[A-Za-z][A-Za-z0-9]*\[[^\]]*\](?:\{[^{}]*\})?")


_SHAPE_INDEX = r"\{\s*(?:\d+\s*(?:,\s*\d+\s*)*,?\s*)?\}"  # (XLA's ParseShapeIndex takes `{0,}`)
_ALIAS_ITEM = re.compile(r"\s*" + _SHAPE_INDEX + r"\s*:\s*\(\s*\d+\s*,\s*" + _SHAPE_INDEX
                         + r"\s*(?:,\s*(?:must-alias|may-alias)\s*)?\)\s*")
_DONOR_ITEM = re.compile(r"\s*\(\s*\d+\s*,\s*" + _SHAPE_INDEX + r"\s*\)\s*")


def _check_items(a: Attribute, item: re.Pattern, example: str) -> None:
    """`{item, item, ...}`, comments anywhere and a `,` after the last item allowed (as XLA's parser reads them)."""
    body = _blank_comments(a.raw).strip()
    ok = body.startswith("{") and body.endswith("}")
    if ok:
        inner = body[1:-1].strip()
        if inner.endswith(",") and inner[:-1].strip():
            inner = inner[:-1]
        if inner:
            from analyzer.hlo.attributes import split_top

            try:
                ok = all(item.fullmatch(x) for x in split_top(inner))
            except ValueError:
                ok = False
    if not ok:
        raise HloSyntaxError(f"expected {a.key} like {example}", line=a.position.line if a.position else None,
                             column=a.position.column if a.position else None)


def check_module_attribute(a: Attribute) -> None:
    """Check the header attributes whose syntax XLA checks: aliasing, buffer donors, the entry layout."""
    if a.key not in MODULE_ATTRIBUTES:
        return  # an unknown key: the parser reports it (or, when lenient, notes it) once the module is built
    if a.key == "is_scheduled" and a.raw not in ("true", "false"):
        raise HloSyntaxError(f"expected is_scheduled=true or false, got {a.raw[:20]!r}", **_at(a.position))
    if a.key in ("allow_spmd_sharding_propagation_to_output", "allow_spmd_sharding_propagation_to_parameters"):
        if a.raw.strip() in ("true", "false"):  # XLA reads one boolean too (a list of one)
            return
        try:
            attributes.parse_bool_list(a.raw)
        except ValueError as e:
            raise HloSyntaxError(f"bad {a.key}=: {e} (or one boolean, `true`)", **_at(a.position)) from None
        return
    if a.key == "input_output_alias":
        _check_items(a, _ALIAS_ITEM, "`{ {0}: (0, {}, may-alias), {1}: (1, {0}) }`")
        return
    if a.key == "buffer_donor":
        _check_items(a, _DONOR_ITEM, "`{ (0, {0}), (1, {}) }`")
        return
    if a.key == "origin_recovery_table":
        _check_recovery_modules(a)
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
    why: list[str] = []
    bad = _program_layout_error(body, why)
    if bad is not None:
        raise HloSyntaxError(f"entry_computation_layout: {why[0]}" if why else
                             "expected entry_computation_layout={(f32[2]{0}, ...)->f32[2]{0}}",
                             line=a.position.line if a.position else None,
                             column=(a.position.column + bad) if a.position else None)


# An output index of `input_output_alias`: `{0, 1}` before its `:` (a parameter index has none after it).
_ALIAS_OUTPUT = re.compile(r"\{([^{}:]*)\}\s*:")
_KEY_AT = "[,\\s]{}\\s*=\\s*"


def _blank_comments(text: str) -> str:
    """`text` with each `/*...*/` comment turned into as many spaces (offsets stay those of `text`)."""
    return _COMMENT.sub(lambda c: " " * len(c.group()), text) if "/*" in text else text


_COMMENT = re.compile(r"/\*(?:[^*]|\*(?!/))*\*/")


def check_alias_outputs(header: str, raw: str, root: Shape) -> None:
    """XLA's parser sets up each `input_output_alias` entry on the entry computation's root shape (the root's,
    not the `entry_computation_layout` result's): an output index that shape lacks fails the parse there
    (`ShapeUtil::IndexIsValid`). One check per module, once the root's shape is known.

    Args:
      header: the module's text before its first computation (where the attribute is, for the position).
      raw: the attribute's value, as `HloModule.attributes` keeps it (its syntax already checked).
      root: the entry computation's root shape.

    Raises:
      HloSemanticError: at the output index.
    """
    for m in _ALIAS_OUTPUT.finditer(_blank_comments(raw)):
        index = tuple(int(x) for x in m.group(1).replace(",", " ").split())
        shape = root
        for k in index:
            if not shape.is_tuple or not 0 <= k < len(shape.tuple_shapes):
                break
            shape = shape.tuple_shapes[k]
        else:
            continue
        at = re.search(_KEY_AT.format("input_output_alias"), header)
        line = column = None
        if at is not None:
            line_start = header.rfind("\n", 0, at.end()) + 1
            line = header.count("\n", 0, at.end()) + 1
            column = at.end() - line_start + 1
            if header.startswith(raw, at.end()) and "\n" not in raw[:m.start()]:
                column += m.start()
        raise HloSemanticError(f"input_output_alias output index {{{m.group(1).strip()}}} is not an index of the "
                               f"entry computation's root shape {root}; XLA sets up each alias on that shape",
                               line=line, column=column)


# How to parse a whole module, for the module texts an `origin_recovery_table` quotes. `analyzer.hlo.parser`
# sets it when it loads: the parser imports these checks, never the other way round.
parse_module: Callable[[str], Any] | None = None


def _check_recovery_modules(a: Attribute) -> None:
    """The modules an `origin_recovery_table` holds (`{ {"x"} : {"x__ovp0"}, "HloModule ..." }`): XLA parses each
    quoted module text, so one it cannot parse fails the whole module; this parses them the same way."""
    parse_hlo = parse_module
    assert parse_hlo is not None, "analyzer.hlo.parser sets analyzer.hlo.verifier.parse_module when it loads"
    raw = a.raw
    depth = 0
    i = 0
    while i < len(raw):
        c = raw[i]
        if c == '"':
            m = _QUOTED.match(raw, i)
            if m is None:
                break
            if depth == 1:  # a module text (the original-value keys are quoted inside their own braces)
                try:
                    parse_hlo(attributes.unquote(m.group()))
                except (HloSyntaxError, HloSemanticError) as e:
                    where = f" at its line {e.line}, column {e.column}" if e.line is not None else ""
                    raise HloSyntaxError(f"the module in origin_recovery_table does not parse{where}: {e.message}",
                                         **_at(a.position)) from None
            i = m.end()
            continue
        depth += c == "{"
        depth -= c == "}"
        i += 1


# The tokens of `{(f32[2]{0}, (s32[], f32[])) -> f32[2]{0}}`: spaces and comments between any two.
_LAYOUT_TOKEN = re.compile(r"\s+|/\*(?:[^*]|\*(?!/))*\*/|(->|[(){},]|[a-zA-Z][a-zA-Z0-9]*\[[^\]\n]*\](?:\{[^{}\n]*\})?)")


def _program_layout_error(body: str, why: list[str] | None = None) -> int | None:
    """Where (0-based offset) `body` stops being `{(shape, ...)->shape}`, or None when it is one. A tuple
    element whose layout is not a permutation of its dimensions counts too (XLA validates tuple elements);
    then the reason is appended to `why`."""
    toks: list[tuple[str, int]] = []
    pos = 0
    while pos < len(body):
        m = _LAYOUT_TOKEN.match(body, pos)
        if m is None:
            return pos
        if m.group(1):
            toks.append((m.group(1), pos))
        pos = m.end()
    toks.append(("", len(body)))
    k = 0

    def expect(t: str) -> None:
        nonlocal k
        if toks[k][0] != t:
            raise IndexError(toks[k][1])
        k += 1

    def shape(in_tuple: bool = False) -> None:
        nonlocal k
        t = toks[k][0]
        if t == "(":
            k += 1
            if toks[k][0] == ")":
                k += 1
                return
            shape(True)
            while toks[k][0] == ",":
                k += 1
                shape(True)
            expect(")")
        elif t[:1].isalpha():
            if in_tuple:
                bad = bad_element_layout((decode_array_shape(t),))
                if bad is not None:
                    if why is not None:
                        why.append(bad)
                    raise IndexError(toks[k][1])
            k += 1
        else:
            raise IndexError(toks[k][1])

    try:
        expect("{")
        expect("(")  # the parameters: each a shape of its own, not a tuple's element
        if toks[k][0] != ")":
            shape()
            while toks[k][0] == ",":
                k += 1
                shape()
        expect(")")
        expect("->")
        shape()
        expect("}")
        expect("")
    except IndexError as e:
        return e.args[0]
    return None


_ASYNC_GENERIC = frozenset({"async-start", "async-update", "async-done"})


def _async_shape(shape: Shape | None) -> bool:
    """XLA's form of an async op's shape: `((operands...), outputs, state...)`."""
    return (shape is not None and shape.is_tuple and len(shape.tuple_shapes) >= 2
            and shape.tuple_shapes[0].is_tuple)


def _same_layout_shape(a: Shape, b: Shape) -> bool:
    """XLA's `ShapeUtil::Equal`: `compatible` and the same layouts (a shape written without one has the default,
    minor-to-major descending)."""
    if a.is_tuple or b.is_tuple or a.is_buffer or b.is_buffer:
        return (a.element_type == b.element_type and len(a.tuple_shapes) == len(b.tuple_shapes)
                and all(_same_layout_shape(x, y) for x, y in zip(a.tuple_shapes, b.tuple_shapes)))
    if not compatible(a, b):
        return False
    default = tuple(reversed(range(a.rank)))
    la, lb = a.layout, b.layout
    return ((la.minor_to_major if la else default) == (lb.minor_to_major if lb else default)
            and (la.tiles if la else ()) == (lb.tiles if lb else ())
            and (la.memory_space if la else None) == (lb.memory_space if lb else None))


def _check_async(inst: Instruction, comp: Computation, comps: dict[str, Computation],
                 chains: dict[str, tuple[str, str | None, str]], async_calls: dict[str, Instruction]) -> None:
    """The structure XLA's parser requires of async ops (`async-start/-update/-done` and the `<op>-start` sugar):
    start and update shaped `((operands), outputs, state)`; update and done take one operand, the previous op
    of the chain; the wrapped opcode, the wrapped computation and the execution thread stay those of the start;
    a computation is wrapped by one async-start only.

    `chains` maps each async op of `comp` to (wrapped opcode, wrapped computation or None, execution thread).
    """
    op = inst.opcode
    if op in _ASYNC_GENERIC:
        phase, wrapped = op[6:], None
    else:
        if not is_known_opcode(op):
            return  # an opcode this XLA does not know (kept by a lenient parse)
        base = base_opcode(op)
        phase, wrapped = op[len(base) + 1:], base
    thread_attr = inst.attr("async_execution_thread")
    thread = attributes.unquote(thread_attr) if thread_attr is not None else None
    calls = inst.attr("calls")
    calls = calls.lstrip("%") if calls is not None else None
    if phase in ("update", "done"):
        if (len(inst.operands) != 1 or inst.operands[0].name not in chains) and \
                attributes.xla_does("async_chain_unchecked"):
            return  # (jaxlib >= 0.12: an update/done need not continue a chain)
    _check_async_shapes(inst, phase)
    if phase == "start":
        _start_async_chain(inst, wrapped, calls, thread, comps, chains, async_calls)
    else:
        _continue_async_chain(inst, wrapped, calls, thread, chains)


def _check_async_shapes(inst: Instruction, phase: str) -> None:
    """An async op of `phase` (start, update, done) is shaped as XLA needs: update and done take a single operand
    shaped `((operands), outputs, state)`; start and update have that shape; an update has its operand's."""
    op, where = inst.opcode, _at(inst.position)
    if phase in ("update", "done") and (len(inst.operands) != 1 or not _async_shape(inst.operands[0].shape)):
        raise HloSemanticError(f"`{op}` {inst.name!r} needs a single operand shaped ((async-operands), "
                               "async-outputs, state): the async-start or async-update before it", **where)
    if phase in ("start", "update") and not _async_shape(inst.shape):
        raise HloSemanticError(f"`{op}` {inst.name!r} must have a shape like ((async-operands), async-outputs, "
                               f"state), got {inst.shape}", **where)
    if phase == "update" and not _same_layout_shape(inst.shape, inst.operands[0].shape):
        raise HloSemanticError(f"`{op}` {inst.name!r} must have its operand's shape {inst.operands[0].shape}, got "
                               f"{inst.shape}", **where)


def _start_async_chain(inst: Instruction, wrapped: str | None, calls: str | None, thread: str | None,
                       comps: dict[str, Computation], chains: dict[str, tuple[str, str | None, str]],
                       async_calls: dict[str, Instruction]) -> None:
    """An async-start (or `<op>-start`, `wrapped` its opcode) opens a chain: what it wraps (a generic start: the
    root opcode of the computation it `calls`, which no other async-start may wrap) and its thread."""
    if wrapped is None:
        callee = comps.get(calls) if calls is not None else None
        wrapped = callee.root.opcode if callee is not None else "?"
        if calls is not None:
            first = async_calls.get(calls)
            if first is not None and not attributes.xla_does("async_chain_unchecked"):
                raise HloSemanticError(f"computation {calls!r} is already wrapped by async-start {first.name!r}",
                                       **_at(inst.position))
            async_calls[calls] = inst
    chains[inst.name] = (wrapped, calls, thread or "main")


def _continue_async_chain(inst: Instruction, wrapped: str | None, calls: str | None, thread: str | None,
                          chains: dict[str, tuple[str, str | None, str]]) -> None:
    """An async-update or -done continues the chain of its operand, with the same wrapped opcode, computation and
    thread where it names them."""
    op, where = inst.opcode, _at(inst.position)
    prev = chains.get(inst.operands[0].name)
    if prev is None:
        raise HloSemanticError(f"the operand of `{op}` {inst.name!r} must be the previous async op of its chain "
                               f"(an async-start or async-update), got {inst.operands[0].name!r}", **where)
    p_wrapped, p_calls, p_thread = prev
    if wrapped is not None and wrapped != p_wrapped:
        raise HloSemanticError(f"`{op}` {inst.name!r} continues an async `{p_wrapped}`, not `{wrapped}`", **where)
    if thread is not None and thread != p_thread:
        raise HloSemanticError(f"async_execution_thread of {inst.name!r} is {thread!r}, but its async-start runs on "
                               f"{p_thread!r}", **where)
    if calls is not None and calls != p_calls:
        raise HloSemanticError(f"{inst.name!r} calls {calls!r}, but its async-start wraps {p_calls!r}", **where)
    chains[inst.name] = prev


def _call_attr(inst: Instruction, callee: str) -> Position:
    for a in inst.attributes:
        if callee in a.raw and a.position is not None:
            return a.position
    return inst.position or Position(1, 1)

