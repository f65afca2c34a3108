"""The typed, positioned form of an HLO module: what `analyzer.parse_hlo` returns.

Everything here is a frozen dataclass. Positions are 1-based (line, column) in the text that was parsed.
Equality compares the program, not where it was written: positions and the path take no part in `==`.
Attribute values keep their raw text; typed views (replica groups, shardings, metadata, JSON backend
configs) are computed on demand by `analyzer.hlo.attributes`, so an attribute a newer XLA adds never
breaks parsing.

This module is the contract between the parser (which builds these objects) and everything downstream
(graph, collectives, notation, rules). Add fields freely; do not rename or remove the ones below.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import FrozenInstanceError, dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

from analyzer.hlo import attributes
from analyzer.hlo.attributes import Metadata
from analyzer.hlo.shapes import ELEMENT_BITS, Layout, Shape

__all__ = [
    "Position",
    "packed",
    "Layout",
    "Shape",
    "Operand",
    "Attribute",
    "Metadata",
    "Frame",
    "Instruction",
    "LineHead",
    "Computation",
    "HloModule",
    "ELEMENT_BITS",
]

class Position(int):
    """A 1-based place in the parsed text: `.line` and `.column`.

    One packed int (line << 24 | column), not an object with two ints: a large module holds one per
    instruction and per attribute, and this way each costs 32 bytes instead of about 100.

    Example:
      >>> p = Position(12, 7)
      >>> p.line, p.column, str(p)
      (12, 7, '12:7')
    """

    __slots__ = ()
    _SHIFT = 24
    _COLUMN = (1 << _SHIFT) - 1  # the low bits: the column (the largest one a position holds)

    def __new__(cls, line: int, column: int) -> Position:
        if not 0 <= column <= cls._COLUMN:
            column = cls._COLUMN  # a column beyond 16 million characters is reported as that
        return int.__new__(cls, (line << cls._SHIFT) | column)

    @property
    def line(self) -> int:
        return int(self) >> self._SHIFT

    @property
    def column(self) -> int:
        return int(self) & self._COLUMN

    def __getnewargs__(self) -> tuple[int, int]:  # copy and pickle rebuild it from line and column
        return (self.line, self.column)

    def __str__(self) -> str:
        return f"{self.line}:{self.column}"

    def __repr__(self) -> str:
        return f"Position(line={self.line}, column={self.column})"


@dataclass(frozen=True, slots=True)
class Operand:
    """One operand: the producing instruction's name and its shape (resolved after parsing)."""

    name: str
    shape: Shape | None = None


def packed(line: int, column: int) -> int:
    """`Position(line, column)` as the plain int the IR stores (32 bytes; a Position object is 56)."""
    return (line << Position._SHIFT) | min(column, Position._COLUMN)


def _position(at: int) -> Position | None:
    return Position(at >> Position._SHIFT, at & Position._COLUMN) if at else None


@dataclass(frozen=True, slots=True)
class Attribute:
    """One `key=value` attribute of an instruction, as printed, with where its value starts.

    `at` is that place packed into one int (`packed(line, column)`, 0 when unknown); `position` unpacks it.
    """

    key: str
    raw: str
    at: int = field(default=0, compare=False, repr=False)

    @property
    def position(self) -> Position | None:
        return _position(self.at)


@dataclass(frozen=True, slots=True)
class Frame:
    """One stack frame from the module's `StackFrames` table, resolved through its file and function tables.

    `parent` is the real parent frame id (XLA prints it one higher; 0 printed means none), or None.
    """

    id: int
    file: str
    function: str
    line: int
    column: int
    end_line: int | None = None
    end_column: int | None = None
    parent: int | None = None


class Instruction:
    """One HLO instruction: `[ROOT] %name = shape opcode(operands), attributes...`.

    Immutable, slotted, compared by value (the position takes no part in `==`, as for every IR object).

    A large module holds hundreds of thousands of these, and Python's cyclic collector walks every object that
    may hold another on each full collection (the parse leaves the caller's collector as it is), so an
    instruction holds no object of its own that the collector tracks:
    - its operands as two tuples, `operand_names` (strings) and `operand_shapes` (the `Shape`s; a parse shares
      one tuple among the instructions whose operands have the same shapes); `operands` makes the `Operand`s on
      each read;
    - its attributes as one tuple of strings and ints, `attribute_row`: `(key_0, ..., key_n-1, raw_0, ...,
      raw_n-1, at_0, ..., at_n-1)` (`at` a value's packed position, as `Attribute.at`); `attributes` makes the
      `Attribute`s on each read; `attr(key)`, `attribute(key)` and `attribute_keys` read the row.
    The collector stops tracking a tuple that holds only strings and ints at its first young collection: a parsed
    instruction is one object to walk, where an `Attribute` per attribute, an `Operand` per definition and the
    tuples of both were five.
    """

    __slots__ = ("name", "opcode", "shape", "operand_names", "operand_shapes", "attribute_row", "is_root", "at",
                 "parameter_number", "literal")
    __match_args__ = ("name", "opcode", "shape", "operands", "attributes", "is_root")

    name: str
    opcode: str
    shape: Shape
    # The operands' names and shapes, in order (`operands` gives them as `Operand`s).
    operand_names: tuple[str, ...]
    operand_shapes: tuple[Shape | None, ...]
    # The attributes as one flat tuple (see above); `attributes` gives them as `Attribute`s.
    attribute_row: tuple
    is_root: bool
    # Where the instruction's name is, packed (`packed(line, column)`; 0 when unknown): see `position`.
    at: int
    # Parameters: parameter(N). Constants: the literal text. Other opcodes with a bare argument
    # (get-tuple-element index is an attribute, not this) keep None.
    parameter_number: int | None
    literal: str | None

    def __init__(self, name: str, opcode: str, shape: Shape, operands: tuple[Operand, ...],
                 attributes: tuple[Attribute, ...] = (), is_root: bool = False, at: int = 0,
                 parameter_number: int | None = None, literal: str | None = None) -> None:
        names, shapes = operand_fields(tuple(operands))
        for field_name, value in (("name", name), ("opcode", opcode), ("shape", shape), ("operand_names", names),
                                  ("operand_shapes", shapes), ("attribute_row", attribute_row(attributes)),
                                  ("is_root", is_root), ("at", at),
                                  ("parameter_number", parameter_number), ("literal", literal)):
            object.__setattr__(self, field_name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple:  # (copy and pickle: through the builder, as `__setattr__` refuses)
        return (new_instruction, (self.name, self.opcode, self.shape, self.operand_names, self.operand_shapes,
                                  self.attribute_row, self.is_root, self.at, self.parameter_number, self.literal))

    def _compared(self) -> tuple:
        """What `==` and `hash` read: every field but the positions (the instruction's and its values')."""
        row = self.attribute_row
        return (self.name, self.opcode, self.shape, self.operand_names, self.operand_shapes, row[:len(row) // 3 * 2],
                self.is_root, self.parameter_number, self.literal)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self is other or self._compared() == other._compared()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._compared())

    def __repr__(self) -> str:
        return (f"Instruction(name={self.name!r}, opcode={self.opcode!r}, shape={self.shape!r}, "
                f"operands={self.operands!r}, attributes={self.attributes!r}, is_root={self.is_root!r}, "
                f"parameter_number={self.parameter_number!r}, literal={self.literal!r})")

    @property
    def position(self) -> Position | None:
        return _position(self.at)

    @property
    def operands(self) -> tuple[Operand, ...]:
        """The operands in order, each an `Operand` (its name and shape; made on each read: `operand_names` and
        `operand_shapes` read less)."""
        return tuple(map(new_operand, self.operand_names, self.operand_shapes))

    @property
    def attributes(self) -> tuple[Attribute, ...]:
        """The attributes in the order written, each an `Attribute` (made on each read: `attr`, `attribute` and
        `attribute_keys` read less)."""
        return row_attributes(self.attribute_row)

    @property
    def attribute_keys(self) -> tuple[str, ...]:
        """The attributes' keys, in the order written."""
        row = self.attribute_row
        return row[:len(row) // 3]

    def attr(self, key: str) -> str | None:
        """The raw text of attribute `key`, or None."""
        row = self.attribute_row
        n = len(row) // 3
        keys = row[:n]
        return row[n + keys.index(key)] if key in keys else None

    def attribute(self, key: str) -> Attribute | None:
        """Attribute `key` (its text and position), or None."""
        row = self.attribute_row
        n = len(row) // 3
        keys = row[:n]
        if key not in keys:
            return None
        k = keys.index(key)
        return new_attribute(key, row[n + k], row[2 * n + k])

    @property
    def attrs(self) -> Mapping[str, Attribute]:
        """The attributes by key (a dict made on each read: `attr` and `attribute` look one up without it)."""
        return {a.key: a for a in self.attributes}

    # Typed views live in analyzer.hlo.attributes; these properties delegate so callers can write
    # `inst.replica_groups` without knowing where the decoding happens.
    @property
    def replica_groups(self) -> tuple[tuple[int, ...], ...] | None:
        """Device-id groups, expanded from any of the four printed forms; None when absent."""
        return attributes.replica_groups(self)

    @property
    def source_target_pairs(self) -> tuple[tuple[int, int], ...] | None:
        return attributes.source_target_pairs(self)

    @property
    def channel_id(self) -> int | None:
        v = self.attr("channel_id")
        return int(v) if v is not None else None

    @property
    def use_global_device_ids(self) -> bool:
        return self.attr("use_global_device_ids") == "true"

    @property
    def dimensions(self) -> tuple[int, ...] | None:
        return attributes.int_list(self, "dimensions")

    @property
    def called_computations(self) -> tuple[str, ...]:
        """Names of every computation this instruction calls (calls, to_apply, body, condition, branches...)."""
        return attributes.called_computations(self)

    @property
    def metadata(self) -> Metadata | None:
        return attributes.metadata(self)

    @property
    def sharding(self) -> Any:
        """The `sharding=` attribute as an `analyzer.hlo.sharding.HloSharding`, or None."""
        return attributes.sharding(self)

    @property
    def frontend_attributes(self) -> Mapping[str, str]:
        return attributes.frontend_attributes(self)

    @property
    def backend_config(self) -> Any:
        """The `backend_config=` JSON decoded (dict), the raw string if it is not JSON, or None."""
        raw = self.attr("backend_config")
        if raw is None:
            return None
        text = raw
        if text.startswith('"') and text.endswith('"'):
            # Older XLA prints the JSON as an escaped string literal.
            try:
                text = json.loads(text)
            except ValueError:
                return raw
        try:
            return json.loads(text)
        except ValueError:
            return raw


class LineHead(NamedTuple):
    """What an instruction's line says before its attributes: `name = shape opcode(operand, ...`.

    `Computation.line_head` gives it (a lazily parsed computation reads it from the line, without a parse).
    """

    opcode: str
    shape: Shape
    operand: str | None  # the first operand's name; None without operands (or for a constant's literal)


@dataclass(frozen=True, slots=True, weakref_slot=True)
class Computation:
    """A named computation: its parameters, instructions in printed order, and its root.

    The questions the analysis asks of a computation are methods here (`select`, `mentions`/`written`,
    `users_of`, `call_instructions`, `line_head`, `parameter_name`): a computation a lazy parse has not read yet
    (`analyzer.hlo.parser`) answers the same from its lines, reading only what each question needs.

    Slotted: a large module has tens of thousands of computations, and Python's cyclic collector walks each
    object that may hold another on every full collection; without a `__dict__` a computation is one such object,
    not two. What the questions keep once asked (`by_name`, `root`, `written`, the users of each value) is in
    fields of their own, outside `==`, `hash` and `repr`. For the same reason, as `Instruction` keeps its
    operands: the parameters are two tuples, `parameter_names` (strings, which the collector stops tracking) and
    `parameter_types` (their shapes; a parse shares one tuple among the computations whose parameters have the
    same shapes), and `parameter_shapes` makes the `(name, shape)` pairs on each read (a pair per parameter and a
    tuple of them per computation were 87,000 objects of a 22 MB module); the position is one packed int, `at`
    (`packed(line, column)`, 0 when unknown; `position` unpacks it: a `Position` object each was 21,500 more).
    """

    name: str
    instructions: tuple[Instruction, ...]
    # The parameters' names and their shapes, in order (`parameter_shapes` gives them as pairs).
    parameter_names: tuple[str, ...] = ()
    parameter_types: tuple[Shape, ...] = ()
    result_shape: Shape | None = None
    is_entry: bool = False
    # Where the computation's name is, packed (see `position`).
    at: int = field(default=0, compare=False, repr=False)
    # Attributes printed after the closing brace, e.g. `}, execution_thread="main_thread"`.
    attributes: tuple[Attribute, ...] = ()
    # What a lenient parse kept as written (an opcode or attribute this XLA does not know), `line:column: ...`.
    notes: tuple[str, ...] = field(default=(), compare=False)
    # (what the questions keep, made on the first)
    _by_name: dict[str, Instruction] | None = field(default=None, init=False, repr=False, compare=False)
    _root: Instruction | None = field(default=None, init=False, repr=False, compare=False)
    _written: frozenset[str] | None = field(default=None, init=False, repr=False, compare=False)
    _users: dict[str, tuple[tuple[Instruction, int], ...]] | None = field(default=None, init=False, repr=False,
                                                                          compare=False)

    @property
    def parameter_shapes(self) -> tuple[tuple[str, Shape], ...]:
        """The parameters as the signature writes them (or, without one, as the parameter instructions have them),
        in order: `(name, shape)` each (made on each read from `parameter_names` and `parameter_types`)."""
        return tuple(zip(self.parameter_names, self.parameter_types))

    @property
    def position(self) -> Position | None:
        return _position(self.at)

    @property
    def by_name(self) -> Mapping[str, Instruction]:
        found = self._by_name
        if found is None:
            found = _keep(self, "_by_name", {i.name: i for i in self.instructions})
        return found

    @property
    def root(self) -> Instruction:
        # Kept (like `by_name`): the step model asks for it once per value it follows, a scan each time.
        found = self._root
        if found is None:
            found = _keep(self, "_root", next((i for i in self.instructions if i.is_root), self.instructions[-1]))
        return found

    def __getitem__(self, name: str) -> Instruction:
        return self.by_name[name]

    def select(self, *opcodes: str) -> tuple[Instruction, ...]:
        """The instructions whose opcode is one of `opcodes`, in order. (A lazily parsed computation reads
        only those lines; see `analyzer.hlo.parser.LazyComputation`.)"""
        return tuple(i for i in self.instructions if i.opcode in opcodes)

    def mentions(self, *opcodes: str) -> bool:
        """Whether any instruction has one of `opcodes` (a test of `written`)."""
        return not self.written.isdisjoint(opcodes)

    @property
    def written(self) -> frozenset[str]:
        """The opcodes of the instructions. (A lazily parsed computation reads them from its lines: no parse.)"""
        found = self._written
        if found is None:
            found = _keep(self, "_written", frozenset(i.opcode for i in self.instructions))
        return found

    def parameter_name(self, number: int) -> str | None:
        """The name of `parameter(number)`; None when there is none. (A lazily parsed computation answers from
        its index without reading the line.)"""
        return next((i.name for i in self.instructions if i.opcode == "parameter" and i.parameter_number == number),
                    None)

    def call_instructions(self) -> tuple[Instruction, ...]:
        """The instructions that name a called computation (an attribute of `attributes.CALL_KEYS`: `calls=`,
        `to_apply=`, `body=`, `condition=`, branches...), in order. (A lazily parsed computation reads only the
        lines that hold such an attribute.)"""
        return tuple(i for i in self.instructions if attributes.names_callee(i))

    def users_of(self, name: str) -> tuple[tuple[Instruction, int], ...]:
        """The instructions that read the value `name`, each with the operand index it reads it at, in order.
        (A lazily parsed computation reads only the lines whose operands may name it.)"""
        found = self._users
        if found is None:
            users: dict[str, list[tuple[Instruction, int]]] = {}
            for inst in self.instructions:
                for k, operand in enumerate(inst.operand_names):
                    users.setdefault(operand, []).append((inst, k))
            found = _keep(self, "_users", {value: tuple(read) for value, read in users.items()})
        return found.get(name, ())

    def line_head(self, name: str | None = None) -> LineHead | None:
        """The opcode, shape and first operand of the instruction `name` (None: the root); None when no
        instruction is so named. (A lazily parsed computation reads them from that line alone.)"""
        inst = self.root if name is None else self.by_name.get(name)
        if inst is None:
            return None
        return LineHead(inst.opcode, inst.shape, inst.operand_names[0] if inst.operand_names else None)

    @property
    def is_parsed(self) -> bool:
        """Whether the instructions are parsed (always, except for a lazy computation not yet read)."""
        return True

    def __iter__(self) -> Iterator[Instruction]:
        return iter(self.instructions)

    def __len__(self) -> int:
        return len(self.instructions)


def _keep(comp: Computation, slot: str, value: Any) -> Any:
    """`value` kept in `comp`'s field `slot` (one of the answers a computation keeps), and given back."""
    object.__setattr__(comp, slot, value)
    return value


@dataclass(frozen=True)
class HloModule:
    """A parsed HLO module.

    `attributes` holds the header's `key=value` pairs as raw text (`num_partitions`,
    `entry_computation_layout`, ...). `frames` is the resolved `StackFrames` table by frame id.
    """

    name: str
    computations: tuple[Computation, ...]
    attributes: Mapping[str, str] = field(default_factory=dict)
    frames: Mapping[int, Frame] = field(default_factory=dict)
    path: str | None = field(default=None, compare=False)
    # What a lenient parse kept of the header (see `notes`).
    header_notes: tuple[str, ...] = field(default=(), compare=False, repr=False)
    # Lines of the inserted `get-tuple-element`s that stand for `%x#N` references (analyzer.hlo.tuplerefs): the
    # positions above are in the text with them made explicit; `written_line` takes one back to the text as written.
    made_lines: tuple[int, ...] = field(default=(), compare=False, repr=False)
    # The entry parameters' `sharding=` text by parameter number, from the program before partitioning, for a
    # partitioned module that does not print them (jax 0.11+'s): set by the analysis (analyzer.pipeline), read
    # through `parameter_sharding`.
    argument_shardings: Mapping[int, str] = field(default_factory=dict, compare=False, repr=False)
    # What a lazily parsed module's computations look their callees up in (`parser._CalleeTable`), held here so that
    # it lives as long as the module and no longer (each computation holds it weakly); None for one parsed whole.
    callee_table: Any = field(default=None, compare=False, repr=False)

    def parameter_sharding(self, inst: Instruction) -> Any:
        """An entry parameter's sharding (`HloSharding`): its own `sharding=`, else the one its argument had before
        partitioning (`argument_shardings`); None when neither is known or readable."""
        own = inst.sharding
        if own is not None or inst.parameter_number is None:
            return own
        raw = self.argument_shardings.get(inst.parameter_number)
        if raw is None:
            return None
        from analyzer.errors import AnalyzerError
        from analyzer.hlo.sharding import parse_hlo_sharding

        try:
            return parse_hlo_sharding(raw)
        except AnalyzerError:
            return None

    def written_line(self, line: int) -> int:
        """The line of the text as written that `line` (an instruction's `position.line`) stands for: the same
        line, unless the module had `%x#N` references (jax 0.11+), whose explicit forms were inserted as lines."""
        if not self.made_lines:
            return line
        from analyzer.hlo.tuplerefs import LineMap

        return LineMap(self.made_lines).original(line)

    @property
    def notes(self) -> tuple[str, ...]:
        """What `parse_hlo(..., lenient=True)` kept as written instead of rejecting: opcodes or attributes this
        XLA version does not know, each as `line:column: message`. Empty for a strict parse. (A lazily parsed
        computation adds its notes once it is parsed.)"""
        return self.header_notes + tuple(n for c in self.computations if c.is_parsed for n in c.notes)

    @cached_property
    def by_name(self) -> Mapping[str, Computation]:
        return {c.name: c for c in self.computations}

    @cached_property
    def entry(self) -> Computation:
        for c in self.computations:
            if c.is_entry:
                return c
        # XLA's rule: without an ENTRY keyword the last computation is the entry.
        return self.computations[-1]

    def __getitem__(self, name: str) -> Computation:
        return self.by_name[name]

    def holding(self, *opcodes: str) -> frozenset[str]:
        """The names of the computations with an instruction of one of `opcodes`: each computation's `mentions`,
        asked of the whole module at once.

        The analyses ask it for every fusion body they price (its dots, collectives, slices): one table of opcode
        to computations (`_by_opcode`, made on the first question from each computation's `written`; a lazily
        parsed one reads its opcodes from its lines, without a parse) answers each by a set test. Answers are
        kept per tuple of opcodes.

        Example: `"fused_computation.3" in module.holding("dot", "convolution")`.
        """
        found = self._held.get(opcodes)
        if found is None:
            by_opcode = self._by_opcode
            found = self._held[opcodes] = frozenset().union(*(by_opcode.get(op, ()) for op in opcodes))
        return found

    @cached_property
    def _by_opcode(self) -> Mapping[str, frozenset[str]]:
        groups: dict[frozenset[str], list[str]] = {}  # (most fusion bodies write one of a few dozen opcode sets)
        for c in self.computations:
            groups.setdefault(c.written, []).append(c.name)
        by_opcode: dict[str, set[str]] = {}
        for written, names in groups.items():
            for opcode in written:
                by_opcode.setdefault(opcode, set()).update(names)
        return {opcode: frozenset(names) for opcode, names in by_opcode.items()}

    @cached_property
    def _held(self) -> dict[tuple[str, ...], frozenset[str]]:
        return {}

    def instructions(self) -> Iterator[tuple[Computation, Instruction]]:
        """Every instruction of every computation, with its computation."""
        for c in self.computations:
            for i in c.instructions:
                yield c, i

    @property
    def num_partitions(self) -> int:
        return int(self.attributes.get("num_partitions", "1"))

    @property
    def replica_count(self) -> int:
        return int(self.attributes.get("replica_count", "1"))

    def frame_chain(self, frame_id: int | None) -> tuple[Frame, ...]:
        """The stack from frame `frame_id` outwards (innermost first); empty when unknown."""
        chain: list[Frame] = []
        seen: set[int] = set()
        while frame_id is not None and frame_id in self.frames and frame_id not in seen:
            seen.add(frame_id)
            f = self.frames[frame_id]
            chain.append(f)
            frame_id = f.parent
        return tuple(chain)


# ---------------------------------------------------------------------------------------------- builders
# The parser makes one Instruction per line of a module (with its tuples of operand names and attributes). A frozen
# dataclass's `__init__` sets each field through `object.__setattr__` by name; these make the same object of the
# same class (`object.__new__`) and set each field once through its slot's own descriptor, bound once here: about
# half the time of the constructor (test_fastpath checks they equal what the constructors make). This is the one
# place, besides the classes' own `__init__`, that sets an IR object's fields; nothing changes one after.


def _setters(cls: type, *names: str) -> tuple:
    return tuple(cls.__dict__[name].__set__ for name in names)


_ATTRIBUTE_FIELDS = _setters(Attribute, "key", "raw", "at")
_OPERAND_FIELDS = _setters(Operand, "name", "shape")
_INSTRUCTION_FIELDS = _setters(Instruction, "name", "opcode", "shape", "operand_names", "operand_shapes",
                               "attribute_row", "is_root", "at", "parameter_number", "literal")


def new_attribute(key: str, raw: str, at: int, _new=object.__new__, _cls=Attribute,
                  _fields=_ATTRIBUTE_FIELDS) -> Attribute:
    """`Attribute(key, raw, at)`, faster."""
    a = _new(_cls)
    set_key, set_raw, set_at = _fields
    set_key(a, key)
    set_raw(a, raw)
    set_at(a, at)
    return a


def new_operand(name: str, shape: Shape | None, _new=object.__new__, _cls=Operand, _fields=_OPERAND_FIELDS) -> Operand:
    """`Operand(name, shape)`, faster."""
    o = _new(_cls)
    set_name, set_shape = _fields
    set_name(o, name)
    set_shape(o, shape)
    return o


def new_instruction(name: str, opcode: str, shape: Shape, names: tuple[str, ...], shapes: tuple, row: tuple,
                    is_root: bool, at: int, parameter_number: int | None, literal: str | None, _new=object.__new__,
                    _cls=Instruction, _fields=_INSTRUCTION_FIELDS) -> Instruction:
    """`Instruction(name, opcode, shape, operands, attributes, is_root, at, parameter_number, literal)`, faster:
    the operands as their names and shapes (`operand_names`, `operand_shapes`), the attributes as their row
    (`attribute_row`; a tuple of `Attribute`s is made one)."""
    i = _new(_cls)
    set_name, set_opcode, set_shape, set_names, set_shapes, set_row, set_root, set_at, set_number, set_literal = \
        _fields
    set_name(i, name)
    set_opcode(i, opcode)
    set_shape(i, shape)
    set_names(i, names)
    set_shapes(i, shapes)
    set_row(i, row if not row or type(row[0]) is str else attribute_row(row))
    set_root(i, is_root)
    set_at(i, at)
    set_number(i, parameter_number)
    set_literal(i, literal)
    return i


def operand_fields(operands: tuple[Operand, ...] | list[Operand]) -> tuple[tuple[str, ...], tuple]:
    """`(operand_names, operand_shapes)` of `Operand`s."""
    return tuple([o.name for o in operands]), tuple([o.shape for o in operands])


def attribute_row(attrs: tuple | list) -> tuple:
    """`Instruction.attribute_row` of attributes `attrs` (`Attribute`s; a row is given back as it is)."""
    if not attrs or type(attrs[0]) is str:
        return tuple(attrs)
    return (*(a.key for a in attrs), *(a.raw for a in attrs), *(a.at for a in attrs))


def row_attributes(row: tuple) -> tuple[Attribute, ...]:
    """The `Attribute`s of an `Instruction.attribute_row`."""
    if not row:
        return ()
    n = len(row) // 3
    return tuple(map(new_attribute, row[:n], row[n:2 * n], row[2 * n:]))
