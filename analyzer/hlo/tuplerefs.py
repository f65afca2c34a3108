"""Tuple-element references (`%param#0`), which XLA prints from jax 0.11 on, made explicit before the parse.

The XLA in jaxlib 0.11 and later elides a `get-tuple-element` whose only job is to name one element of a tuple:
its users name the element directly, `%add.68 = s32[] add(%param#0, %constant.124.clone)` meaning element 0 of
the tuple `%param` (`%x#1#0`: element 0 of element 1). XLA's own parser reads such a reference back by making
the `get-tuple-element` it stands for, named `x_0` (one per element referenced, shared by its users), and
rejects an index outside the tuple, a reference to a value that is not a tuple, and `#` in a defined name.

`expand` does the same on the text, so that every later stage (the fast path, the lazy index, the grammar and
the whole analysis) sees the `get-tuple-element` instructions that jax 0.10's XLA prints:

    %param = (s32[], f32[16,128]{1,0}) parameter(0)
    %param_0 = s32[] get-tuple-element(%param), index=0        <- made here, before its first user
    %add.8 = s32[] add(%param_0, %constant.6.clone)            <- `%param#0` renamed in place

A reference becomes the made instruction's name, of the same length where the module leaves that name free
(`#` -> `_`, else `-`), so columns on the user's line stay where they were; each made line is inserted before
the first line that uses it, and `LineMap` takes a line of the expanded text back to the line it came from (a
made line to its first user's), for error messages. (Instruction positions, and so the `hlo_line` of collectives
and findings, stay those of the expanded text: on a module with references they are later than written by the
number of lines made above them; `HloModule.written_line` converts one.)
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass

from analyzer.errors import HloSemanticError
from analyzer.hlo.shapes import ARRAY_PATTERN

__all__ = ["LineMap", "expand", "has_tuple_refs"]

_NAME = r"[A-Za-z_][A-Za-z0-9_.\-]*"
# A reference as an operand: after `(`, `,`, a space or a comment (`/*index=5*/%param#5`), with or without `%`.
_REF = re.compile(r"(?<![A-Za-z0-9_.\-%#])(%?)(" + _NAME + r")((?:#[0-9]+)+)(?![A-Za-z0-9_.\-#])")
_ANY_REF = re.compile(r"%" + _NAME + r"#[0-9]")
# A defining line: `[ROOT] %name = ` (the shape follows); a computation's header line ends in `{`.
_DEF = re.compile(r"[ \t]*(?:ROOT[ \t]+)?%?(" + _NAME + r")[ \t]*=[ \t]*")
_HEADER = re.compile(r"[ \t]*(?:ENTRY[ \t]+)?%?" + _NAME + r"[^\n=]*\{[ \t]*$")
_QUOTED = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_COMMENT = re.compile(r"/\*(?:[^*]|\*(?!/))*\*/")
_ARRAY = re.compile(ARRAY_PATTERN)


def has_tuple_refs(text: str) -> bool:
    """Whether the text may hold a `%name#N` reference (a fast test: `#` anywhere, then the pattern)."""
    return "#" in text and _ANY_REF.search(text) is not None


@dataclass(frozen=True)
class LineMap:
    """Lines of the expanded text back to the lines of the text as written.

    `made` holds, in order, the 1-based lines of the expanded text that `expand` inserted.

    Example:
      >>> LineMap(made=(3, 4, 9)).original(5), LineMap(made=(3, 4, 9)).original(3)
      (3, 3)
    """

    made: tuple[int, ...] = ()

    def original(self, line: int) -> int:
        """The written line that `line` of the expanded text came from (a made line: its first user's)."""
        k = bisect_right(self.made, line)
        if k and self.made[k - 1] == line:  # a made line: the next line that is not made, its first user
            while k < len(self.made) and self.made[k] == self.made[k - 1] + 1:
                k += 1
            return self.made[k - 1] + 1 - k
        return line - k


def _masked(line: str) -> str:
    """The line with quoted strings and comments blanked (same length), so no reference is found inside them."""
    blank = lambda m: " " * (m.end() - m.start())  # noqa: E731
    return _COMMENT.sub(blank, _QUOTED.sub(blank, line))


def _shape_text(line: str, start: int) -> str | None:
    """The shape written at `line[start:]`: a tuple `(...)` read to its matching `)`, else one array shape."""
    if start < len(line) and line[start] == "(":
        depth = 0
        for i in range(start, len(line)):
            c = line[i]
            if c in "([{":
                depth += 1
            elif c in ")]}":
                depth -= 1
                if depth == 0:
                    return line[start:i + 1]
        return None
    m = _ARRAY.match(line, start)
    return m.group() if m else None


def _elements(shape: str) -> list[str] | None:
    """The top-level element shapes of a tuple shape's text (comments dropped), or None for an array shape."""
    if not shape.startswith("("):
        return None
    inner = _COMMENT.sub("", shape[1:-1])
    parts, depth, begin = [], 0, 0
    for i, c in enumerate(inner):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(inner[begin:i].strip())
            begin = i + 1
    last = inner[begin:].strip()
    if last or parts:
        parts.append(last)
    return parts


class _Names:
    """The module's defined names, and new ones made unique against them."""

    def __init__(self, text: str) -> None:
        self.taken = set(re.findall(r"(?m)^[ \t]*(?:ROOT[ \t]+)?%?(" + _NAME + r")[ \t]*=", text))

    def make(self, base: str, path: str) -> str:
        for sep in ("_", "-"):  # same length as `base#i#j`: the user's columns stay put
            name = base + path.replace("#", sep)
            if name not in self.taken:
                self.taken.add(name)
                return name
        n = 1
        while (name := f"{base}{path.replace('#', '_')}.gte{n}") in self.taken:
            n += 1
        self.taken.add(name)
        return name


def expand(text: str, path: str | None = None) -> tuple[str, LineMap]:
    """The text with every `%name#N...` reference replaced by an explicit `get-tuple-element`, and its line map.

    Raises:
      HloSemanticError: a reference to a name not defined before it in its computation, to a value that is not
        a tuple, or to an element the tuple does not have (positioned at the reference, as written).
    """
    lines = text.split("\n")
    names = _Names(text)
    out: list[str] = []
    made: list[int] = []
    defined: dict[str, tuple[int, int]] = {}  # this computation's names -> (line index, where its shape starts)
    shapes: dict[str, str] = {}  # shapes read so far (and those of the made instructions)
    refs: dict[str, str] = {}  # this computation's references (`param#0`) -> the name made for them
    define = _DEF.match

    tuples: dict[str, list[str] | None] = {}  # element shapes of the tuples referenced so far

    def elements_of(name: str) -> tuple[str | None, list[str] | None]:
        """The shape text of `name` and, for a tuple, its elements' (each tuple split once)."""
        if name not in shapes and name in defined:
            k, at = defined[name]
            found = _shape_text(lines[k], at)
            if found is not None:
                shapes[name] = found
        shape = shapes.get(name)
        if shape is not None and name not in tuples:
            tuples[name] = _elements(shape)
        return shape, tuples.get(name)

    for k, line in enumerate(lines):
        if line.endswith("{") and _HEADER.match(line) and "=" not in line.split("(", 1)[0]:
            defined.clear()
            shapes.clear()
            tuples.clear()
            refs.clear()
            out.append(line)
            continue
        d = define(line)
        if d is None:
            out.append(line)
            continue
        if "#" in line:
            line = lines[k] = _expand_line(line, k + 1, d.end(), elements_of, refs, shapes, names, out, made, path)
        defined[d.group(1)] = (k, d.end())
        out.append(line)
    return "\n".join(out), LineMap(tuple(made))


def _expand_line(line: str, lineno: int, after: int, elements_of, refs: dict[str, str], shapes: dict[str, str],
                 names: _Names, out: list[str], made: list[int], path: str | None) -> str:
    """One instruction line with its references renamed; the `get-tuple-element` lines they need, not made
    before in this computation, are appended to `out` first."""
    pieces: list[str] = []
    last = 0
    for m in _REF.finditer(_masked(line), after):
        pct, base, path_ = m.groups()
        written = f"{pct}{base}{path_}"
        name = base
        so_far = ""
        for index in path_[1:].split("#"):
            so_far += "#" + index
            key = base + so_far
            if key in refs:
                name = refs[key]
                continue
            shape, elements = elements_of(name)
            if shape is None:
                raise HloSemanticError(f"`{written}` refers to `%{name}`, which is not defined before it in "
                                       "this computation", path=path, line=lineno, column=m.start() + 1,
                                       source_line=line)
            if elements is None or int(index) >= len(elements):
                what = f"a tuple of {len(elements)} elements" if elements is not None else f"not a tuple (`{shape}`)"
                raise HloSemanticError(
                    f"`{written}` names element {index} of `%{name}`, which is {what}; a reference `%name#N` "
                    "names element N of a tuple-shaped value (N from 0)", path=path, line=lineno,
                    column=m.start() + 1, source_line=line)
            made_name = names.make(base, so_far)
            indent = line[: len(line) - len(line.lstrip())] or "  "
            out.append(f"{indent}%{made_name} = {elements[int(index)]} get-tuple-element(%{name}), index={int(index)}")
            made.append(len(out))
            shapes[made_name] = elements[int(index)]
            refs[key] = made_name
            name = made_name
        pieces.append(line[last:m.start()])
        pieces.append(f"{pct}{name}")
        last = m.end()
    return "".join(pieces) + line[last:] if pieces else line
