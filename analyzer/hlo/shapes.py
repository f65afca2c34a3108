"""Shapes and layouts, and their text form: `bf16[8,<=16]{1,0:T(8,128)S(1)}`, `(f32[], s32[2])`, `token[]`.

The value types (`Shape`, `Layout`, `ELEMENT_BITS`) and the decoders of a shape's printed spelling. It
imports nothing else of the package but `analyzer.hlo.memo` (the decoders' per-call memos), so every other
module (the attribute decoders, the IR, the parser) can build on it; `analyzer.hlo.ir` re-exports the types.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from analyzer.hlo.memo import memoised

__all__ = ["ARRAY_PATTERN", "ELEMENT_BITS", "Layout", "Shape", "decode_array_shape", "decode_shape"]

# One array shape as XLA prints it, its layout (after a space or not) included: `f32[2,3]{1,0:T(8,128)}` (the
# grammar's form; the fast path's lines and the tuple references' definitions are read with it).
ARRAY_PATTERN = r"[a-zA-Z][a-zA-Z0-9]*\[[^\]\n]*\](?:\{[^{}\n]*\}|[ \t]+\{(?:[0-9]+(?:,[0-9]+)*)?(?::[^{}\n]*)?\})?"

_DIMS_SPLIT = re.compile(r"\s*,\s*")

# Bits per element of every XLA primitive type (xla_data.proto). Sub-byte types pack.
ELEMENT_BITS: Mapping[str, int] = {
    "pred": 8,
    "s1": 1, "s2": 2, "s4": 4, "s8": 8, "s16": 16, "s32": 32, "s64": 64,
    "u1": 1, "u2": 2, "u4": 4, "u8": 8, "u16": 16, "u32": 32, "u64": 64,
    "f16": 16, "bf16": 16, "f32": 32, "f64": 64,
    "f4e2m1fn": 4, "f8e3m4": 8, "f8e4m3": 8, "f8e4m3fn": 8, "f8e4m3b11fnuz": 8, "f8e4m3fnuz": 8,
    "f8e5m2": 8, "f8e5m2fnuz": 8, "f8e8m0fnu": 8,
    "c64": 64, "c128": 128,
    "token": 0, "opaque": 0,
}


@dataclass(frozen=True, slots=True)
class Layout:
    """An array layout: `{1,0:T(8,128)(2,1)S(1)}`.

    `minor_to_major` is the dimension order; `tiles` the `T(...)` tiles in order; `memory_space` the `S(n)`
    value. Every item after the colon other than the tiles (`E(4)`, `D(...)`, `S(1)`, `SC(...)`, `M(...)`,
    `#(...)`...) is also kept verbatim, in order, in `extra`, so printing gives back what was read (XLA's parser
    wants the items in its own order).
    """

    minor_to_major: tuple[int, ...]
    tiles: tuple[tuple[int, ...], ...] = ()
    memory_space: int | None = None
    extra: str = ""


@dataclass(frozen=True, slots=True)
class Shape:
    """An array, tuple or token shape.

    Arrays: `element_type` is the lower-case XLA type (`f32`, `bf16`, `pred`...), `dims` the sizes (the bound
    for dynamic dims), `dynamic` which dims are dynamic (`<=8` or `?`). Tuples: `element_type == "tuple"` and
    `tuple_shapes` holds the elements. Tokens: `element_type == "token"`.
    """

    element_type: str
    dims: tuple[int, ...] = ()
    dynamic: tuple[bool, ...] = ()
    layout: Layout | None = None
    tuple_shapes: tuple[Shape, ...] = ()

    @property
    def is_tuple(self) -> bool:
        return self.element_type == "tuple"

    @property
    def is_buffer(self) -> bool:
        """A buffer shape `b(f32[4])`: one array held by reference; `tuple_shapes[0]` is the array."""
        return self.element_type == "buffer"

    @property
    def is_token(self) -> bool:
        return self.element_type == "token"

    @property
    def is_array(self) -> bool:
        return not self.is_tuple and not self.is_token and not self.is_buffer

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def num_elements(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n

    @property
    def byte_size(self) -> int:
        """Bytes of the data (tuples: the sum of their leaves; sub-byte types rounded up per array)."""
        if self.is_tuple or self.is_buffer:
            return sum(s.byte_size for s in self.tuple_shapes)
        bits = ELEMENT_BITS.get(self.element_type)
        if bits is None:
            raise ValueError(f"unknown element type {self.element_type!r}")
        return (self.num_elements * bits + 7) // 8

    def leaves(self) -> Iterator[Shape]:
        """The array and token shapes inside, depth first (the shape itself when it is not a tuple)."""
        if self.is_tuple:
            for s in self.tuple_shapes:
                yield from s.leaves()
        else:
            yield self

    def __str__(self) -> str:
        """The HLO spelling without the layout: `bf16[1024,<=8]`, `(f32[], s32[2])`, `token[]`."""
        if self.is_tuple:
            return "(" + ", ".join(str(s) for s in self.tuple_shapes) + ")"
        if self.is_buffer:
            return f"b({self.tuple_shapes[0]})"
        dims = ",".join(
            (f"<={d}" if dyn else str(d)) for d, dyn in zip(self.dims, self.dynamic or (False,) * len(self.dims))
        )
        return f"{self.element_type}[{dims}]"


@memoised
def decode_array_shape(text: str) -> Shape:
    """Decode one array-shape terminal: `bf16[8,<=16]{1,0:T(8,128)S(1)}`, `f32[]`, `token[]`, `s32[?]`.

    Memoised for the call that reads the module (`analyzer.hlo.memo`): a module repeats a few hundred distinct
    shapes thousands of times, and `Shape` is immutable.

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
            if len(item) > 18 and int(item) >= 1 << 63:
                raise ValueError(f"dimension size {item} is out of range for an int64")
            dims.append(int(item))
            dynamic.append(dyn)
    if etype == "token" and dims:
        raise ValueError("a token shape has no dimensions: `token[]`")
    layout = None
    if close + 1 < len(text):  # `{...}`, right after `]` or (XLA's lexer skips it) after a space
        layout = _decode_layout(text[text.index("{", close) + 1:-1], len(dims))
        if layout.minor_to_major or dims:
            if len(layout.minor_to_major) != len(dims):
                raise ValueError(f"the layout lists {len(layout.minor_to_major)} dimensions but the shape has "
                                 f"{len(dims)}: expected a minor-to-major order like "
                                 f"{{{','.join(str(d) for d in reversed(range(len(dims))))}}}")
    return Shape(etype, tuple(dims), tuple(dynamic) if any(dynamic) else (), layout)


# A layout's tokens as XLA's lexer reads them: integers, words, and single punctuation characters (anything
# else, e.g. `%`, is a token no layout item takes).
_LAYOUT_TOKEN = re.compile(r"\s*(?:(-?\d+)|([A-Za-z_][A-Za-z0-9_]*)|(\S))")
# The items after the colon, in the only order XLA's `ParseLayout` takes them: dim level types, tiles, tail
# padding, index and pointer types, element size, memory space, split configs, physical shape, metadata bytes.
_LAYOUT_ITEMS = ("D", "T", "L", "#", "*", "E", "S", "SC", "P", "M")


class _LayoutReader:
    """A cursor over a layout's tokens. Like XLA's parser, a malformed item stops where it went wrong and the
    layout goes on from that token (XLA records the item's error but only the closing `}` decides)."""

    def __init__(self, body: str) -> None:
        self.body = body
        self.toks: list[tuple[str, str, int, int]] = []  # (kind, text, start, end); kind "int", "word", "op"
        pos = 0
        while True:
            m = _LAYOUT_TOKEN.match(body, pos)
            if m is None:
                break
            kind = "int" if m.group(1) is not None else "word" if m.group(2) is not None else "op"
            self.toks.append((kind, m.group(m.lastindex or 3), m.start(m.lastindex or 3), m.end()))
            pos = m.end()
        self.i = 0

    def peek(self) -> tuple[str, str]:
        return self.toks[self.i][:2] if self.i < len(self.toks) else ("end", "")

    def eat(self, kind: str, text: str | None = None) -> str | None:
        k, t = self.peek()
        if k != kind or (text is not None and t != text):
            return None
        self.i += 1
        return t

    def word(self, text: str) -> bool:
        return self.eat("word", text) is not None

    def int_list(self, open_: str, close: str, star: bool = False) -> tuple[list[int], bool]:
        """`open_ [item (',' item)*] close` -> (the items read, whether it got to `close`)."""
        out: list[int] = []
        if self.eat("op", open_) is None:
            return out, False
        if self.eat("op", close) is not None:
            return out, True
        while True:
            v = self.eat("int")
            if v is None and star and self.eat("op", "*") is not None:
                out.append(-1)
            elif v is None:
                return out, False
            else:
                out.append(int(v))
            if self.eat("op", ",") is None:
                break
        return out, self.eat("op", close) is not None

    def int_attr(self) -> int | None:
        if self.eat("op", "(") is None:
            return None
        v = self.eat("int")
        if v is None:
            return None
        self.eat("op", ")")
        return int(v)

    def text_from(self, i: int) -> str:
        if i >= len(self.toks) or i == self.i:
            return ""
        return self.body[self.toks[i][2]:self.toks[self.i - 1][3]].replace(" ", "")


def _decode_layout(body: str, rank: int) -> Layout:
    """`1,0:T(8,128)(2,1)S(1)` -> Layout, read as XLA's `ParseLayout` reads it.

    The minor-to-major list, then after `:` the items in XLA's order (`D(...)`, `T(...)...`, `L(n)`, `#(u32)`,
    `*(u32)`, `E(n)`, `S(n)`, `SC(d:i,...)...`, `M(n)`), then the end. Items other than the tiles are kept
    verbatim in `extra`, in order, so printing gives back what was read.
    """
    r = _LayoutReader(body)
    m2m: list[int] = []
    if r.peek()[0] == "int":
        while True:
            v = r.eat("int")
            if v is None:
                raise ValueError(f"expected a layout like `{{1,0}}` (minor-to-major dims), got `{{{body}}}`")
            m2m.append(int(v))
            if r.eat("op", ",") is None:
                break
    tiles: list[tuple[int, ...]] = []
    memory_space = None
    extra: list[str] = []
    if r.eat("op", ":") is not None:
        if r.word("D"):
            at = r.i - 1
            _dim_level_types(r)
            extra.append(r.text_from(at))
        if r.word("T"):
            while r.peek() == ("op", "("):
                tile, ok = r.int_list("(", ")", star=True)
                tiles.append(tuple(tile))
                if not ok:
                    break
        if r.word("L"):
            at = r.i - 1
            r.int_attr()
            extra.append(r.text_from(at))
        for mark in ("#", "*"):  # index and pointer primitive types: `#(u32)`, `*(u32)`
            if r.eat("op", mark) is not None:
                at = r.i - 1
                if r.eat("op", "(") is not None:
                    k, t = r.peek()
                    if k == "word" and t in ELEMENT_BITS:  # XLA takes the type, then says if it is not unsigned
                        r.i += 1
                    r.eat("op", ")")
                extra.append(r.text_from(at))
        if r.word("E"):
            at = r.i - 1
            r.int_attr()
            extra.append(r.text_from(at))
        if r.word("S"):
            at = r.i - 1
            memory_space = r.int_attr()
            extra.append(r.text_from(at))
        if r.word("SC"):
            at = r.i - 1
            while r.peek() == ("op", "("):
                r.i += 1
                if r.eat("int") is None or not r.int_list(":", ")")[1]:
                    break
            extra.append(r.text_from(at))
        if r.peek() == ("word", "P"):
            raise ValueError("a layout with a physical shape `P(...)` is for sparse arrays only")
        if r.word("M"):
            at = r.i - 1
            r.int_attr()
            extra.append(r.text_from(at))
    if r.i < len(r.toks):
        k, t = r.peek()
        raise ValueError(f"unexpected `{t}` in the layout `{{{body}}}`: after the minor-to-major list XLA takes `:` "
                         f"and then the items {', '.join(_LAYOUT_ITEMS)} in that order, then `}}`")
    return Layout(tuple(m2m), tuple(tiles), memory_space, "".join(extra))


def _dim_level_types(r: _LayoutReader) -> None:
    """`(D, C+, S~, H)` after `D`: each a level type, optionally `+` then `~`."""
    if r.eat("op", "(") is None or r.eat("op", ")") is not None:
        return
    while True:
        k, t = r.peek()
        if k != "word" or t not in ("D", "C", "S", "H"):
            return
        r.i += 1
        r.eat("op", "+")
        r.eat("op", "~")
        if r.eat("op", ",") is None:
            break
    r.eat("op", ")")



_COMMENT = re.compile(r"/\*.*?\*/")


@memoised
def decode_shape(text: str) -> Shape:
    """Decode an array or (nested) tuple shape as printed, e.g. `(f32[2]{0}, /*index=1*/s32[])`.

    Raises:
      ValueError: when the text is not a shape (the caller then falls back to the grammar).
    """
    if text.startswith("b("):  # a buffer: `b(f32[4]{0})`
        if not text.endswith(")"):
            raise ValueError(f"not a buffer shape: {text[:40]}")
        return Shape("buffer", tuple_shapes=(decode_shape(text[2:-1].strip()),))
    if not text.startswith("("):
        return decode_array_shape(text)
    body = text[1:-1]
    if "/*" in body:
        body = _COMMENT.sub("", body)
    body = body.strip()
    if not body:
        return Shape("tuple")
    # Each element decoded as it is found, not after a list of their texts (a 200,000-element tuple's list was most
    # of the parse's peak); an empty element still takes precedence over the first element that does not decode.
    elements: list[Shape] = []
    failed: ValueError | None = None
    empty = False
    depth = 0
    start = 0
    n = len(body)
    for i, c in enumerate(itertools.chain(body, ",")):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and (depth == 0 or i == n):
            part = body[start:i].strip()
            start = i + 1
            if not part:
                empty = True
            elif failed is None and not empty:
                try:
                    elements.append(decode_shape(part))
                except ValueError as e:
                    failed = e
    if empty:
        raise ValueError(f"not a tuple shape: {text[:40]}")
    if failed is not None:
        raise failed
    elements = tuple(elements)
    bad = bad_element_layout(elements)
    if bad is not None:
        raise ValueError(bad)
    return Shape("tuple", tuple_shapes=elements)


def bad_element_layout(elements: tuple[Shape, ...]) -> str | None:
    """Why a tuple with these elements is not one XLA's parser builds, or None: it validates the layout of each
    array element (directly or in a buffer), whose minor-to-major list must be a permutation of its dimensions
    (an array shape on its own is not checked so)."""
    for e in elements:
        leaf = e.tuple_shapes[0] if e.element_type == "buffer" and e.tuple_shapes else e
        lay = leaf.layout
        if lay is not None and lay.minor_to_major and sorted(lay.minor_to_major) != list(range(len(leaf.dims))):
            return (f"the layout {{{','.join(map(str, lay.minor_to_major))}}} of tuple element {leaf} is not a "
                    "permutation of its dimensions")
    return None


