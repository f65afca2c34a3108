"""HLO shardings: the `sharding={...}` attribute XLA prints, as typed data.

Every form XLA's `HloSharding::ToString` prints is read here:

=====================================================  ===============================================
`{replicated}`                                         every device holds the whole array
`{maximal device=0}`                                   one device holds it
`{manual}`                                             the array is already per-device (shard_map)
`{unknown}`                                            not decided yet (before propagation)
`{devices=[4,2]<=[8]}`                                 tiled, iota tile assignment
`{devices=[2,2]0,2,1,3}`                               tiled, explicit tile assignment
`{devices=[1,2,4]<=[4,2]T(1,0) last_tile_dim_replicate}`  last tile dim replicates (partial tiling)
`{devices=[2,2,2]<=[8] last_tile_dims={manual, replicated}}`  trailing tile dims are subgroups
`{{replicated}, {devices=[2]<=[2]}}`                   a tuple sharding, one element per tuple leaf
=====================================================  ===============================================

`metadata={...}`, `shard_as N` / `shard_like N` may follow inside the braces; they are kept, never
interpreted. The tile assignment of a tiled sharding holds *logical* device ids: with jax, id `i` is the
device at position `i` of `mesh.devices.flat` (see `analyzer.theory.notation` for the mapping to mesh axes).

Source of the forms: XLA's `hlo_sharding.cc` (ToString) and `tile_assignment.h` (iota tile assignments).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, NamedTuple

from analyzer.errors import ShardingError

if TYPE_CHECKING:  # numpy is light, but keep the import local to the one place that needs it
    import numpy as np

__all__ = ["HloSharding", "ShardingSyntaxError", "check_hlo_sharding", "named_axes", "parse_hlo_sharding",
           "SUBGROUP_TYPES"]

# The subgroup kinds XLA prints in `last_tile_dims={...}` (OpSharding::Type names, lower case).
SUBGROUP_TYPES: tuple[str, ...] = ("replicated", "manual", "maximal", "other", "unreduced")

_KINDS = ("replicated", "maximal", "manual", "unknown", "tiled", "tuple")
# A tile assignment is expanded into a list of device ids; cap it so a corrupt dim cannot exhaust memory.
_MAX_DEVICES = 1 << 20


class ShardingSyntaxError(ShardingError):
    """Sharding text that does not follow XLA's `HloSharding` syntax.

    Attributes:
      text: the sharding text that was parsed.
      column: 1-based column in `text` where the problem is.
      message: what was expected there.
    """

    def __init__(self, message: str, text: str, column: int) -> None:
        self.message = message
        self.text = text
        self.column = column
        caret = " " * (column - 1) + "^"
        super().__init__(f"bad HLO sharding at column {column}: {message}\n  {text}\n  {caret}")


@dataclass(frozen=True)
class HloSharding:
    """One HLO sharding, as XLA prints it.

    Attributes:
      kind: "replicated", "maximal", "manual", "unknown", "tiled" or "tuple".
      tile_dims: for "tiled", the tile assignment shape: one entry per array dim, then one per entry of
        `last_tile_dims` (e.g. `(1, 2, 4)` with `last_tile_dims=("replicated",)`).
      device_ids: for "tiled", the tile assignment flattened row-major (logical device ids).
      iota: for "tiled" shardings printed in iota form, `(reshape_dims, transpose_perm)`; None when the
        devices were listed explicitly. Kept so `str()` gives back what XLA printed.
      last_tile_dims: the subgroup kind of each trailing tile dim (`"replicated"` for
        `last_tile_dim_replicate`, or the names in `last_tile_dims={...}`).
      device: for "maximal", the device that holds the array.
      elements: for "tuple", the sharding of each tuple leaf.
      metadata: the raw `metadata={...}` text (without the key), or "".
      shard_group: the raw `shard_as N` / `shard_like N` text, or "".

    Example:
      >>> s = parse_hlo_sharding("{devices=[1,2,4]<=[4,2]T(1,0) last_tile_dim_replicate}")
      >>> s.kind, s.data_tile_dims, s.replication
      ('tiled', (1, 2), 4)
    """

    kind: str
    tile_dims: tuple[int, ...] = ()
    device_ids: tuple[int, ...] = ()
    iota: tuple[tuple[int, ...], tuple[int, ...] | None] | None = None
    last_tile_dims: tuple[str, ...] = ()
    device: int | None = None
    elements: tuple[HloSharding, ...] = ()
    metadata: str = ""
    shard_group: str = ""

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"HloSharding kind {self.kind!r} is not one of {_KINDS}")
        if self.kind == "tiled":
            n = 1
            for d in self.tile_dims:
                n *= d
            if n != len(self.device_ids):
                raise ValueError(f"tile dims {list(self.tile_dims)} need {n} devices, got {len(self.device_ids)}")
            if len(self.last_tile_dims) > len(self.tile_dims):
                raise ValueError("more last_tile_dims than tile dims")

    # ----------------------------------------------------------------------------------------------- views
    @property
    def is_tuple(self) -> bool:
        return self.kind == "tuple"

    @property
    def is_tiled(self) -> bool:
        return self.kind == "tiled"

    @property
    def is_replicated(self) -> bool:
        """True when every device holds the whole array (also a tiling whose data dims are all 1)."""
        if self.kind == "replicated":
            return True
        return (self.kind == "tiled" and all(d == 1 for d in self.data_tile_dims)
                and all(t == "replicated" for t in self.last_tile_dims))

    @property
    def is_manual(self) -> bool:
        """True for `{manual}`, and for tilings with a manual subgroup (`last_tile_dims={manual}`)."""
        return self.kind == "manual" or "manual" in self.last_tile_dims

    @property
    def num_devices(self) -> int:
        """Devices in the tile assignment (0 when the sharding does not list devices)."""
        return len(self.device_ids)

    @property
    def data_tile_dims(self) -> tuple[int, ...]:
        """The tile counts of the array's own dims (the trailing subgroup dims removed)."""
        return self.tile_dims[: len(self.tile_dims) - len(self.last_tile_dims)]

    @property
    def replication(self) -> int:
        """How many devices hold each tile: the product of the replicated subgroup dims (1 if none)."""
        n = 1
        k = len(self.data_tile_dims)
        for size, t in zip(self.tile_dims[k:], self.last_tile_dims):
            if t == "replicated":
                n *= size
        return n

    @cached_property
    def tile_assignment(self) -> np.ndarray:
        """The tile assignment as an int64 array of shape `tile_dims` (device id of each tile)."""
        import numpy as np

        if self.kind != "tiled":
            raise ValueError(f"a {self.kind} sharding has no tile assignment")
        return np.asarray(self.device_ids, dtype=np.int64).reshape(self.tile_dims)

    def leaves(self) -> tuple[HloSharding, ...]:
        """The shardings of the tuple leaves in order (just `(self,)` for a non-tuple sharding)."""
        if not self.is_tuple:
            return (self,)
        out: list[HloSharding] = []
        for e in self.elements:
            out.extend(e.leaves())
        return tuple(out)

    # ------------------------------------------------------------------------------------------- printing
    def _body(self) -> str:
        if self.kind == "tuple":
            return "{" + ", ".join(str(e) for e in self.elements) + "}"
        if self.kind in ("replicated", "manual", "unknown"):
            parts = [self.kind]
        elif self.kind == "maximal":
            parts = [f"maximal device={self.device}"]
        else:
            dims = ",".join(map(str, self.tile_dims))
            if self.iota is not None:
                reshape, perm = self.iota
                tail = f"<=[{','.join(map(str, reshape))}]"
                if perm is not None:
                    tail += f"T({','.join(map(str, perm))})"
            else:
                tail = ",".join(map(str, self.device_ids))
            parts = [f"devices=[{dims}]{tail}"]
            if self.last_tile_dims == ("replicated",):
                parts.append("last_tile_dim_replicate")
            elif self.last_tile_dims:
                parts.append("last_tile_dims={" + ", ".join(self.last_tile_dims) + "}")
        if self.shard_group:
            parts.append(self.shard_group)
        if self.metadata:
            parts.append(f"metadata={{{self.metadata}}}")
        return "{" + " ".join(parts) + "}"

    def __str__(self) -> str:
        return self._body()


# --------------------------------------------------------------------------------------------------- parse
_TOKEN = re.compile(r"\s*(?:(?P<num>-?\d+)|(?P<word>[A-Za-z_][A-Za-z0-9_.\-]*)|(?P<op><=|[{}\[\](),=]))")


class _Reader:
    """A tiny cursor over sharding text: tokens are integers, words and punctuation."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self._at = -1  # where `_match` was last taken (a peek then a next match once)
        self._match: re.Match | None = None

    def error(self, message: str, pos: int | None = None) -> ShardingSyntaxError:
        at = self.pos if pos is None else pos
        # Point at the next non-space character, where the reader was looking.
        while at < len(self.text) and self.text[at].isspace():
            at += 1
        return ShardingSyntaxError(message, self.text, at + 1)

    def _token(self) -> re.Match | None:
        if self._at != self.pos:
            self._match = _TOKEN.match(self.text, self.pos)
            self._at = self.pos
        return self._match

    def peek(self) -> tuple[str, str] | None:
        m = self._token()
        if not m:
            rest = self.text[self.pos:].strip()
            if not rest:
                return None
            raise self.error(f"unexpected character {rest[0]!r}")
        kind = m.lastgroup or "op"
        return kind, m.group(kind)

    def next(self) -> tuple[str, str]:
        m = self._token()
        if not m:
            raise self.error("unexpected end of text" if not self.text[self.pos:].strip()
                             else f"unexpected character {self.text[self.pos:].strip()[0]!r}")
        self.pos = m.end()
        kind = m.lastgroup or "op"
        return kind, m.group(kind)

    def expect(self, value: str, what: str | None = None) -> None:
        start = self.pos
        tok = self.peek()
        if tok is None or tok[1] != value:
            got = "end of text" if tok is None else repr(tok[1])
            raise self.error(f"expected {what or repr(value)}, got {got}", start)
        self.next()

    def integer(self, what: str) -> int:
        start = self.pos
        tok = self.peek()
        if tok is None or tok[0] != "num":
            got = "end of text" if tok is None else repr(tok[1])
            raise self.error(f"expected {what} (an integer), got {got}", start)
        self.next()
        return int(tok[1])

    def int_list(self, open_: str, close: str, what: str) -> tuple[int, ...]:
        self.expect(open_)
        out: list[int] = []
        if self.peek() == ("op", close):
            self.next()
            return ()
        while True:
            out.append(self.integer(what))
            tok = self.peek()
            if tok == ("op", ","):
                self.next()
                continue
            self.expect(close, f"',' or {close!r}")
            return tuple(out)

    def skip_balanced(self) -> str:
        """Skip a `{...}` group (nested braces, quoted strings) and return its inside text."""
        start = self.pos
        while start < len(self.text) and self.text[start].isspace():
            start += 1
        if start >= len(self.text) or self.text[start] != "{":
            raise self.error("expected '{'")
        depth, i, quote = 0, start, False
        while i < len(self.text):
            c = self.text[i]
            if quote:
                if c == "\\":
                    i += 1
                elif c == '"':
                    quote = False
            elif c == '"':
                quote = True
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    self.pos = i + 1
                    return self.text[start + 1:i]
            i += 1
        raise self.error("unclosed '{'", start)


def parse_hlo_sharding(text: str) -> HloSharding:
    """Parse the text of an HLO `sharding=` attribute.

    The text is read as XLA's parser reads it (`check_hlo_sharding`'s rules), then the rules of XLA's HLO
    verifier that the analysis needs apply (one kind, a maximal sharding's `device=` right after `maximal`, a
    tile assignment that fills the tile dims with distinct devices); a tuple sharding may also nest here.

    Args:
      text: the sharding as XLA prints it, braces included, e.g. `"{devices=[4,2]<=[8]}"`.

    Returns:
      The `HloSharding`; tuple shardings have `kind == "tuple"` and one element per leaf.

    Raises:
      ShardingSyntaxError: (an `AnalyzerError`) text that is not a sharding, with the 1-based column.

    Example:
      >>> parse_hlo_sharding("{devices=[2,2]0,2,1,3}").device_ids
      (0, 2, 1, 3)
      >>> str(parse_hlo_sharding("{{replicated}, {maximal device=1}}"))
      '{{replicated}, {maximal device=1}}'
    """
    if not isinstance(text, str):
        raise ShardingSyntaxError(f"expected sharding text, got {type(text).__name__}", str(text), 1)
    r = _Reader(text)
    try:
        sharding = _read_sharding(r, build=True, top=True)
        if r.peek() is not None:
            raise r.error("unexpected text after the sharding")
    except ShardingSyntaxError:
        check_hlo_sharding(text)  # what XLA's parser rejects is reported as it says it (a verifier's rule, met
        raise                     # while building, could stand before a syntax error further on); else the rule
    return sharding  # type: ignore[return-value]


def check_hlo_sharding(text: str) -> None:
    """Check `text` only as far as XLA's HLO parser does (what `parse_hlo` must accept and reject).

    XLA's parser takes the items of a sharding in any order and leaves most of their meaning to its HLO
    verifier, which `hlo_module_from_text` does not run: a device listed twice, a device count that does not
    fill the tile dims, an iota whose reshape holds another number of devices, or two kinds (the first of
    replicated, maximal, manual, unknown, unreduced wins). It rejects: an unknown item, devices on a sharding
    that has none, a maximal sharding without exactly one device, a tiled one without tile dims or (listed)
    with fewer than two devices, `T(...)` after a one-dim iota or its absence after a longer one, a transpose
    index outside the reshape dims, `last_tile_dim_replicate` together with `last_tile_dims`, and more last
    tile dims than tile dims. `parse_hlo_sharding` (what the analysis reads) reads the same way, then applies
    the verifier's rules.

    Raises:
      ShardingSyntaxError: with the 1-based column.
    """
    r = _Reader(_strip_block_comments(text))
    _read_sharding(r, build=False, top=True)
    if r.peek() is not None:
        raise r.error("unexpected text after the sharding")


def _strip_block_comments(text: str) -> str:
    """`/*index=5*/` (XLA prints it in long tuple shardings) as spaces, so columns stay put."""
    return re.sub(r"/\*.*?\*/", lambda m: " " * len(m.group(0)), text, flags=re.S) if "/*" in text else text


def _read_sharding(r: _Reader, *, build: bool, top: bool) -> HloSharding | None:
    """`{...}`: a tuple of single shardings (XLA's one level; nested too when `build`), `{}`, or one sharding.
    With `build`, the HloSharding, else None."""
    r.expect("{", "'{' to open the sharding")
    if top or build:
        tok = r.peek()
        if tok == ("op", "{"):  # tuple sharding
            elements = [_read_sharding(r, build=build, top=False)]
            while r.peek() == ("op", ","):
                r.next()
                elements.append(_read_sharding(r, build=build, top=False))
            r.expect("}", "',' or '}' to close the tuple sharding")
            return HloSharding(kind="tuple", elements=tuple(elements)) if build else None  # type: ignore[arg-type]
        if tok == ("op", "}"):  # the empty tuple
            r.next()
            return HloSharding(kind="tuple") if build else None
    if _NAMED_START.match(r.text, r.pos):
        return _read_named(r, build)
    items, close = _read_single(r)
    return _build(r, items, close) if build else None


# ------------------------------------------------------------------------- named shardings (jax 0.11+'s XLA)
# `{mesh['X'=4,'Y'=2], [{}, {'X'}, {'Y':(1)2}], replicated={...}, unreduced={...}, manual={...}, metadata={...}}`:
# the mesh's axes (major to minor, devices in iota order over them), then each array dim's axes (major to minor;
# `'Y':(pre)size` is the sub-axis of size `size` after the first `pre` devices' worth of 'Y'), then the axes that
# are explicitly replicated, partial sums (unreduced) or manual. Read into the tile-assignment form the rest of
# the analysis reads (`devices=[tile dims]<=[axis sizes]T(order)` with the subgroups as last tile dims).
_NAMED_START = re.compile(r"\s*mesh\s*\[")
_MESH_AXIS = re.compile(r"\s*'([^'\n]*)'\s*=\s*(-?\d+)")
_AXIS_REF = re.compile(r"\s*'([^'\n]*)'(?:\s*:\s*\(\s*(\d+)\s*\)\s*(\d+))?")
_NAMED_GROUPS = ("replicated", "unreduced", "manual")


def _axis_refs(r: _Reader, what: str, open_dim: bool = False) -> list[tuple[str, int, int | None, int | None]]:
    """`{'X', 'Y':(1)2}`: each axis as (name, where, pre, size), pre and size None for a whole axis. A dim's list
    (`open_dim`) may end in `?` (Shardy's open dim: more axes may be added; it does not change the sharding)."""
    r.expect("{", f"'{{' to open {what}")
    refs: list[tuple[str, int, int | None, int | None]] = []
    if _next_is(r, "}"):
        r.next()
        return refs
    while True:
        if open_dim and _next_is(r, "?"):
            r.pos = r.text.index("?", r.pos) + 1
            r.expect("}", f"'}}' after '?' in {what} (no axis may follow it)")
            return refs
        m = _AXIS_REF.match(r.text, r.pos)
        if m is None:
            raise r.error(f"expected a mesh axis like 'X' or 'X':(1)2 in {what}")
        pre, size = m.group(2), m.group(3)
        refs.append((m.group(1), m.start(1) - 1, int(pre) if pre else None, int(size) if size else None))
        r.pos = m.end()
        tok = r.peek() if not _next_is(r, "?") else None
        if tok == ("op", ","):
            r.next()
            continue
        if tok is None and open_dim:
            raise r.error(f"expected ',' before '?' in {what}")
        r.expect("}", f"',' or '}}' in {what}")
        return refs


def _next_is(r: _Reader, op: str) -> bool:
    """Whether the next character past spaces is `op` (`peek` cannot look at a quoted axis name or `?`)."""
    rest = r.text[r.pos:].lstrip()
    return rest[:1] == op


def _listed(r: _Reader, item, close: str, what: str) -> None:
    """After an opening bracket: `item()` for each comma-separated entry (none for an empty list), then `close`."""
    if _next_is(r, close):
        r.next()
        return
    while True:
        item()
        if r.peek() != ("op", ","):
            r.expect(close, f"',' or '{close}' to close {what}")
            return
        r.next()


_NAMED_KINDS = ("replicated", "manual", "unreduced")  # what may stand instead of the dims' axes


def named_axes(text: str) -> tuple[tuple[str, ...], ...] | None:
    """Each array dim's mesh axes (major to minor) of a named sharding, as jax 0.11+'s XLA prints it on the program
    before partitioning (`{mesh['data'=4,'model'=2], [{'data'}, {}]}` -> `(('data',), ())`; a sub-axis counts as its
    axis); `()` for `{mesh[...], replicated}`; None for a sharding in another form, a tuple, or bad text.

    Example:
      >>> named_axes("{mesh['data'=4,'model'=2], [{'data', 'model'}, {}]}")
      (('data', 'model'), ())
      >>> named_axes("{devices=[4,1]<=[4]}") is None
      True
    """
    try:
        r = _Reader(_strip_block_comments(text))
        r.expect("{")
        if not _NAMED_START.match(r.text, r.pos):
            return None
        found: list[tuple[tuple[str, ...], ...]] = []
        _read_named(r, build=False, found=found)
    except ShardingSyntaxError:
        return None
    return found[0] if found and r.peek() is None else None


def _read_named(r: _Reader, build: bool, found: list | None = None) -> HloSharding | None:
    """A named sharding after its opening brace, checked as XLA's parser checks it (axes of the mesh, each
    used once, sub-axes that divide their axis), and with `build` the tiled HloSharding it stands for.

    Forms: `mesh[...]`, then `, device_ids=(...)` when the mesh's devices are not in order, then the dims' axes
    `[{...}, ...]` or one of replicated, manual, unreduced, then `replicated=`, `unreduced=`, `manual=` axes
    and `metadata=`."""
    start = r.pos
    axes = _read_mesh(r)
    devices = _read_device_ids(r, axes)
    kind, dims = _read_named_dims(r)
    groups, metadata = _read_named_items(r, dims is not None)
    pieces = _check_named_axes(r, axes, [*(dims or ()), *groups.values()])
    if found is not None:
        found.append(tuple(tuple(ref[0] for ref in refs) for refs in dims or ()))
    if not build:
        return None
    if kind == "unreduced":  # (as for `{unreduced}`: partial sums on every device, no kind of HloSharding)
        raise r.error(f"'unreduced' sharding: {_VERIFIER}", start)
    if kind is not None:
        return HloSharding(kind=kind, metadata=metadata)
    return _named_to_tiled(axes, pieces, dims, groups, metadata, devices)


def _read_mesh(r: _Reader) -> dict[str, int]:
    """`mesh['X'=4, ...],`: each axis's size, in order (major to minor); names once, sizes positive."""
    r.next()  # `mesh`
    r.expect("[")
    axes: dict[str, int] = {}

    def mesh_axis() -> None:
        m = _MESH_AXIS.match(r.text, r.pos)
        if m is None:
            raise r.error("expected a mesh axis like 'X'=4 in the sharding's mesh")
        name, size = m.group(1), int(m.group(2))
        if name in axes:
            raise r.error(f"mesh axis {name!r} is declared twice", m.start(1) - 1)
        if size <= 0:
            raise r.error(f"mesh axis {name!r} has size {size}; sizes are positive", m.start(2))
        axes[name] = size
        r.pos = m.end()

    _listed(r, mesh_axis, "]", "the mesh")
    r.expect(",", "',' then the dims' axes `[{...}, ...]`")
    return axes


def _read_device_ids(r: _Reader, axes: dict[str, int]) -> tuple[int, ...] | None:
    """`device_ids=(...),` when the mesh's devices are not in order (each of them once), else None."""
    if r.peek() != ("word", "device_ids"):
        return None
    at = r.pos
    r.next()
    r.expect("=")
    devices = r.int_list("(", ")", "a device id")
    if sorted(devices) != list(range(_product(axes.values()))):
        raise r.error(f"device_ids must list each of the mesh's {_product(axes.values())} devices once", at)
    r.expect(",", "',' then the dims' axes `[{...}, ...]`")
    return devices


def _read_named_dims(r: _Reader) -> tuple[str | None, list[list[tuple[str, int, int | None, int | None]]] | None]:
    """The dims' axes `[{...}, ...]` as (None, each dim's axis refs), or one of replicated, manual, unreduced as
    (that kind, None)."""
    tok = r.peek()
    if tok is not None and tok[0] == "word" and tok[1] in _NAMED_KINDS:
        r.next()
        return tok[1], None
    dims: list[list[tuple[str, int, int | None, int | None]]] = []
    r.expect("[", f"'[' to open the dims' axes, or one of {', '.join(_NAMED_KINDS)}")
    _listed(r, lambda: dims.append(_axis_refs(r, f"dim {len(dims)}'s axes", open_dim=True)), "]",
            "the dims' axes")
    return None, dims


def _read_named_items(r: _Reader, has_dims: bool) -> tuple[dict[str, list[tuple[str, int, int | None, int | None]]],
                                                           str]:
    """`, replicated={...}`, `unreduced=`, `manual=` (each once, only after the dims' axes) and `metadata=`, up to
    the closing brace: (the axis refs of each group given, the metadata's inside text or "")."""
    groups: dict[str, list[tuple[str, int, int | None, int | None]]] = {}
    metadata = ""
    while r.peek() == ("op", ","):
        r.next()
        at = r.pos
        word = r.next()[1]
        if word == "metadata":
            r.expect("=")
            metadata = r.skip_balanced()
        elif word in _NAMED_GROUPS and word not in groups and has_dims:
            r.expect("=")
            groups[word] = _axis_refs(r, f"{word}=")
        else:
            raise r.error(f"unknown named-sharding item {word!r}; XLA takes replicated={{...}}, unreduced={{...}}, "
                          "manual={...}, metadata={...} after the dims' axes", at)
    r.expect("}", "'}' to close the sharding")
    return groups, metadata


def _check_named_axes(r: _Reader, axes: dict[str, int], refs_lists: list) -> dict[str, set[int]]:
    """Each (sub-)axis once, of the mesh, dividing it: XLA's parser checks the names, and aborts on an overlap.
    Returns each axis's cut points (1, its size and every sub-axis's bounds), in the order the refs name them."""
    pieces: dict[str, set[int]] = {name: {1, size} for name, size in axes.items()}
    used: dict[str, list[tuple[int, int]]] = {}
    for refs in refs_lists:
        for name, at, pre, size in refs:
            if name not in axes:
                raise r.error(f"axis {name!r} is not an axis of the mesh [{', '.join(map(repr, axes))}]", at)
            n = axes[name]
            lo, hi = (1, n) if pre is None else (pre, pre * size)  # type: ignore[operator]
            if pre is not None and (pre <= 0 or size <= 0 or n % hi or hi % lo or n % lo):  # type: ignore[operator]
                raise r.error(f"sub-axis {name!r}:({pre}){size} does not divide axis {name!r} of size {n}", at)
            if any(lo < b and a < hi for a, b in used.get(name, ())):
                raise r.error(f"axis {name!r} is used twice (or its sub-axes overlap) in the sharding", at)
            used.setdefault(name, []).append((lo, hi))
            pieces[name] |= {lo, hi}
    return pieces


def _named_to_tiled(axes, pieces, dims, groups, metadata: str, devices: tuple[int, ...] | None) -> HloSharding:
    """The tile-assignment form of a checked named sharding: the mesh's (sub-)axes as iota reshape dims, put in
    the order dim 0's axes, dim 1's, ..., then the manual, unreduced and remaining (replicated) ones."""
    from analyzer.hlo.iota import expand_iota

    reshape: list[int] = []
    index: dict[tuple[str, int], int] = {}  # (axis, pre) -> the reshape dim of that piece
    for name in axes:
        bounds = sorted(pieces[name])
        for lo, hi in zip(bounds, bounds[1:]):
            index[(name, lo)] = len(reshape)
            reshape.append(hi // lo)

    def covered(refs) -> list[int]:
        out: list[int] = []
        for name, _at, pre, size in refs:
            lo, hi = (1, axes[name]) if pre is None else (pre, pre * size)
            bounds = sorted(b for b in pieces[name] if lo <= b <= hi)
            out += [index[(name, b)] for b in bounds[:-1]]
        return out

    order: list[int] = []
    tile_dims: list[int] = []
    for refs in dims:
        ks = covered(refs)
        order += ks
        tile_dims.append(_product(reshape[k] for k in ks))
    last: list[str] = []
    for kind in ("manual", "unreduced"):
        ks = covered(groups.get(kind, ()))
        if ks and _product(reshape[k] for k in ks) > 1:
            order += ks
            tile_dims.append(_product(reshape[k] for k in ks))
            last.append(kind)
    rest = [k for k in range(len(reshape)) if k not in set(order)]
    if _product(reshape[k] for k in rest) > 1:
        order += rest
        tile_dims.append(_product(reshape[k] for k in rest))
        last.append("replicated")
    data = tile_dims[: len(dims)]
    if _product(data) == 1 and last in ([], ["replicated"]):
        return HloSharding(kind="replicated", metadata=metadata)
    if _product(data) == 1 and last == ["manual"]:
        return HloSharding(kind="manual", metadata=metadata)
    if order == sorted(order):  # no transpose: XLA prints that iota as one reshape dim, `<=[8]`
        reshape, perm = [_product(reshape)], None
    else:
        perm = tuple(order)
    ids = [int(i) for i in expand_iota(tuple(tile_dims), tuple(reshape), perm).flat]
    if devices is not None:  # the mesh's devices in another order: the iota numbers mesh positions
        return HloSharding(kind="tiled", tile_dims=tuple(tile_dims), device_ids=tuple(devices[i] for i in ids),
                           last_tile_dims=tuple(last), metadata=metadata)
    return HloSharding(kind="tiled", tile_dims=tuple(tile_dims), device_ids=tuple(ids),
                       iota=(tuple(reshape), perm), last_tile_dims=tuple(last), metadata=metadata)


def _product(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out


# ----------------------------------------------------------------------------------- XLA's parser's rules
_FLAGS = ("replicated", "maximal", "manual", "unknown", "unreduced")


def _read_single(r: _Reader) -> tuple[list[tuple[str, int, object]], int]:
    """After the opening brace of a non-tuple sharding: its items up to the closing brace, checked as XLA's
    parser checks them. Returns the items in order, each `(word, where it starts, value)` (`device`: the id;
    `devices`: what `_check_tile_assignment` read; `last_tile_dims`: the names; `metadata`: its inside text;
    `shard_as`/`shard_like`: the id; flags: None) and where its `}` is."""
    start = r.pos
    items: list[tuple[str, int, object]] = []
    tally = _SingleTally()
    while True:
        at = r.pos
        tok = r.peek()
        if tok is None:
            raise r.error("expected '}' to close the sharding")
        if tok == ("op", "}"):
            close = at
            r.next()
            break
        if tok[0] != "word":
            raise r.error(f"unexpected {tok[1]!r} in the sharding", at)
        r.next()
        items.append((tok[1], at, _read_single_item(r, tok[1], at, tally)))
    _check_single(r, tally, start)
    return items, close


@dataclass
class _SingleTally:
    """What XLA's parser's rules ask of a non-tuple sharding's items, summed as `_read_single` reads them: the
    flags and kinds named, how many devices were given, the tile dims, the iota reshape's and transpose's ranks,
    the reshape's device count, and the subgroup types of `last_tile_dims` (a repeated `devices=` or
    `last_tile_dims=` adds to what the first gave, as in XLA)."""

    flags: set[str] = field(default_factory=set)
    devices: int = 0
    dims: list[int] = field(default_factory=list)
    reshape_rank: int = 0
    perm_rank: int = 0
    reshape_total: int = 1
    subgroups: list[str] = field(default_factory=list)


def _read_single_item(r: _Reader, word: str, at: int, tally: _SingleTally) -> object:
    """The value of one item of a non-tuple sharding after its word (`_read_single` says which), added to
    `tally`."""
    if word in _FLAGS or word == "last_tile_dim_replicate":
        tally.flags.add(word)
        return None
    if word == "device":
        r.expect("=")
        tally.devices = 1
        return r.integer("a device id")
    if word == "devices":
        r.expect("=")
        read = _check_tile_assignment(r, tally.reshape_rank)
        tally.dims += read.dims
        tally.reshape_total *= read.reshape_total
        tally.devices = tally.devices + read.listed if read.listed else tally.devices
        tally.reshape_rank += read.reshape_rank
        tally.perm_rank += read.perm_rank
        return read
    if word == "metadata":
        r.expect("=")
        return r.skip_balanced()
    if word == "last_tile_dims":
        r.expect("=")
        names = _read_subgroup_types(r)
        tally.subgroups += names
        tally.flags.add("last_tile_dims")
        return names
    if word in ("shard_as", "shard_like"):
        return r.integer("a shard group id")
    raise r.error(f"unknown sharding item {word!r}; XLA takes replicated, maximal, manual, unknown, "
                  "unreduced, device=N, devices=[...], last_tile_dim_replicate, last_tile_dims={...}, "
                  "metadata={...}, shard_as N, shard_like N", at)


def _read_subgroup_types(r: _Reader) -> tuple[str, ...]:
    """`{manual, replicated}` after `last_tile_dims=`: one or more of SUBGROUP_TYPES."""
    r.expect("{", "'{' after 'last_tile_dims='")
    names: list[str] = []
    while True:
        s = r.pos
        t = r.next()
        if t[0] != "word" or t[1] not in SUBGROUP_TYPES:
            raise r.error(f"expected a subgroup type ({', '.join(SUBGROUP_TYPES)}), got {t[1]!r}", s)
        names.append(t[1])
        if r.peek() != ("op", ","):
            break
        r.next()
    r.expect("}", "',' or '}'")
    return tuple(names)


def _check_single(r: _Reader, tally: _SingleTally, start: int) -> None:
    """XLA's parser's rules over a whole non-tuple sharding (`start`: where its items start, where errors point):
    a maximal sharding has one device, another kind none; without a kind, tile dims, a transpose as long as the
    reshape, one of the two ways to give last tile dims and no more of them than tile dims, more than one device,
    and replicated subgroup dims that an iota's device count divides or is divided by."""
    flags, devices, dims = tally.flags, tally.devices, tally.dims
    kind = next((f for f in _FLAGS if f in flags), None)
    if kind == "maximal":
        if devices != 1:
            raise r.error("a maximal sharding needs exactly one device: `{maximal device=0}`", start)
        return
    if kind is not None:
        if devices:
            raise r.error(f"a {kind} sharding has no devices", start)
        return
    if not dims:
        raise r.error("expected replicated, maximal, manual, unknown or devices=[...] in the sharding", start)
    if tally.perm_rank != tally.reshape_rank:
        raise r.error(f"the iota transpose has {tally.perm_rank} entries for {tally.reshape_rank} reshape dims",
                      start)
    if "last_tile_dim_replicate" in flags and "last_tile_dims" in flags:
        raise r.error("last_tile_dim_replicate and last_tile_dims={...} together (XLA takes one)", start)
    if len(tally.subgroups) > len(dims):
        raise r.error(f"{len(tally.subgroups)} last tile dims but only {len(dims)} tile dims", start)
    if not tally.reshape_rank and devices <= 1:
        raise r.error("a tiled sharding needs more than one device", start)
    if tally.reshape_rank:  # XLA aborts folding a replicated subgroup dim into an iota it does not divide
        total = tally.reshape_total
        kinds = ["replicated"] if "last_tile_dim_replicate" in flags else tally.subgroups
        for size, kind in zip(dims[len(dims) - len(kinds):], kinds):
            if kind == "replicated" and size > 1 and total > 0 and size % total and total % size:
                raise r.error(f"replicated subgroup dim {size} neither divides nor is a multiple of the "
                              f"{total} devices of the iota (XLA's parser aborts on it)", start)


class _TileRead(NamedTuple):
    """What `_check_tile_assignment` read of one `devices=`: for XLA's parser's rules the tile dims, how many
    device ids were listed, the reshape's and the transpose's ranks and the reshape's device count; for the
    builder where the dims start, the reshape dims (None for a list), the transpose (None without one), where
    the reshape starts, the ids listed and where they start."""

    dims: tuple[int, ...]
    listed: int
    reshape_rank: int
    perm_rank: int
    reshape_total: int
    dims_at: int
    reshape: tuple[int, ...] | None
    perm: tuple[int, ...] | None
    reshape_at: int
    ids: tuple[int, ...]
    ids_at: int


def _check_tile_assignment(r: _Reader, prior: int) -> _TileRead:
    """`[d...]` then `<=[r...]` (and `T(p...)` when there are several `r`) or a device list, checked as XLA's
    parser checks it. A repeated `devices=` adds to what the first gave, as in XLA (`prior`: the reshape dims
    read before)."""
    dims_at = r.pos
    dims = r.int_list("[", "]", "a tile dimension")
    if not dims:
        raise r.error("expected a tile dimension (an integer)")
    if r.peek() == ("op", "<="):
        r.next()
        reshape_at = r.pos
        reshape = r.int_list("[", "]", "an iota reshape dimension")
        if not reshape:
            raise r.error("expected an iota reshape dimension (an integer)")
        rank = prior + len(reshape)
        total = 1
        for x in reshape:
            total *= x
        if rank == 1:
            return _TileRead(dims, 0, 1, 1, total, dims_at, reshape, None, reshape_at, (), 0)
        at = r.pos
        if r.peek() != ("word", "T"):
            raise r.error("expected 'T(' and the transpose of the iota reshape dims", at)
        r.next()
        perm = r.int_list("(", ")", "a transpose index")
        for p in perm:
            if not 0 <= p < rank:
                raise r.error(f"transpose index {p} is outside the {rank} reshape dims", at)
        return _TileRead(dims, 0, len(reshape), len(perm), total, dims_at, reshape, perm, reshape_at, (), 0)
    ids_at = r.pos
    ids = []
    while True:
        ids.append(r.integer("a device id"))
        if r.peek() != ("op", ","):
            return _TileRead(dims, len(ids), 0, 0, 1, dims_at, None, None, 0, tuple(ids), ids_at)
        r.next()


# ----------------------------------------------------------------------------------- XLA's verifier's rules
_VERIFIER = "XLA's parser takes it, its HLO verifier does not; the analysis needs a valid tile assignment"


def _build(r: _Reader, items: list[tuple[str, int, object]], close: int) -> HloSharding:
    """The HloSharding of one non-tuple sharding read by `_read_single` (`close`: where its `}` is), once the
    rules of XLA's HLO verifier hold: one kind, `device=` right after `maximal`, no `unreduced` (HloSharding
    has no such kind), a tile assignment of positive dims filled by distinct devices, last tile dims only on a
    tiled sharding. The last of a repeated `last_tile_dims`, `metadata` or shard group counts."""
    end = r.pos
    kind: str | None = None
    device = None
    tiled = None
    last: tuple[str, ...] = ()
    metadata = shard_group = ""
    skip = -1
    for k, (word, at, value) in enumerate(items):
        if k == skip:  # the `device=N` of `maximal device=N`
            continue
        if word in ("replicated", "manual", "unknown"):
            kind = _set_kind(r, kind, word, at)
        elif word == "maximal":
            kind = _set_kind(r, kind, "maximal", at)
            after = items[k + 1] if k + 1 < len(items) else ("}", close, None)
            if after[0] != "device":
                raise r.error(f"expected 'device=' after 'maximal', got {after[0]!r}", after[1])
            device, skip = after[2], k + 1
        elif word == "devices":
            kind = _set_kind(r, kind, "tiled", at)
            tiled = _tile_assignment(r, value)  # type: ignore[arg-type]
        elif word == "last_tile_dim_replicate":
            last = ("replicated",)
        elif word == "last_tile_dims":
            last = value  # type: ignore[assignment]
        elif word == "metadata":
            metadata = value  # type: ignore[assignment]
        elif word in ("shard_as", "shard_like"):
            shard_group = f"{word} {value}"
        else:  # `unreduced`, a `device=` not after `maximal`
            valid = "replicated, maximal device=N, manual, unknown, devices=[...], last_tile_dim_replicate, " \
                    "last_tile_dims={...}, metadata={...}, shard_as N, shard_like N"
            raise r.error(f"unknown sharding item {word!r}; valid: {valid}", at)
    if kind is None:
        raise r.error("empty sharding: expected replicated, maximal, manual, unknown or devices=[...]", end)
    if kind == "tiled":
        tile_dims, device_ids, iota = tiled  # type: ignore[misc]
        if len(last) > len(tile_dims):
            raise r.error(f"{len(last)} last tile dims but only {len(tile_dims)} tile dims", end)
        return HloSharding(kind="tiled", tile_dims=tile_dims, device_ids=device_ids, iota=iota, last_tile_dims=last,
                           metadata=metadata, shard_group=shard_group)
    if last:
        raise r.error(f"last tile dims given for a {kind} sharding (only tiled shardings have them)", end)
    return HloSharding(kind=kind, device=device, metadata=metadata, shard_group=shard_group)


def _set_kind(r: _Reader, kind: str | None, new: str, start: int) -> str:
    if kind is not None:
        raise r.error(f"{new!r} after {kind!r}: a sharding has one kind", start)
    return new


def _tile_assignment(r: _Reader, read: _TileRead) -> tuple[tuple[int, ...], tuple[int, ...], tuple | None]:
    """(tile dims, device ids, iota or None) of a `devices=` that `_check_tile_assignment` read, once its dims
    are positive and its devices fill them, each once (an iota expanded)."""
    from analyzer.hlo.iota import expand_iota

    dims, dims_at, reshape, perm, reshape_at, ids, ids_at = (read.dims, read.dims_at, read.reshape, read.perm,
                                                              read.reshape_at, read.ids, read.ids_at)
    if any(d <= 0 for d in dims):
        raise r.error(f"tile dimensions must be positive, got {list(dims)} ({_VERIFIER})", dims_at)
    total = 1
    for d in dims:
        total *= d
    if total > _MAX_DEVICES:
        raise r.error(f"tile dims {list(dims)} assign {total} devices, more than any machine "
                      f"(limit {_MAX_DEVICES})", dims_at)
    if reshape is not None:
        try:
            expanded = expand_iota(dims, reshape, perm)
        except ValueError as e:
            raise r.error(f"bad iota tile assignment: {e} ({_VERIFIER})", reshape_at) from None
        return dims, tuple(int(i) for i in expanded.flat), (reshape, perm)
    if len(ids) != total:
        raise r.error(f"tile dims {list(dims)} need {total} device ids, got {len(ids)} ({_VERIFIER})", ids_at)
    if len(set(ids)) != len(ids):
        raise r.error(f"a device id appears twice in the tile assignment ({_VERIFIER})", ids_at)
    return dims, ids, None
