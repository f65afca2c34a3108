"""What the parser and the analysis remember of a program's texts, for one call of the analyzer and no longer.

A module repeats a few hundred distinct shapes, device groups and metadata texts thousands of times, so the
decoders of those texts (`shapes.decode_shape`, the replica-group and metadata decoders of `attributes`) are
memoised, and the attribute values found valid are remembered (`attributes.valid_values`). The memos belong to
the call that reads the module: `one_call` opens them around a public entry point (`parse_hlo`, `analyze_hlo`,
`analyze_lowered`, `build_report`), a call inside another shares the outer one's, and they are dropped when the
outermost returns. Nothing decoded from a user's program stays in the host process
after the call (the product's rule for a library: no in-memory cache outlives a call). A decoder called outside
any such call (a module read after its `parse_hlo` returned) decodes without a memo: the same answer, computed
again.

The memos are held in a `contextvars.ContextVar`, so two threads (or two asyncio tasks) analysing at once each
have their own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

__all__ = ["memoised", "one_call", "scope", "state"]

_T = TypeVar("_T")
_F = TypeVar("_F", bound=Callable[..., Any])
_MISSING = object()  # (no value yet: None and every other value can be a decoder's answer)


class _Memos(dict):
    """One call's memos: decoder -> {text: value}, a decoder's table made on its first use (and factory -> the
    object it made, for `state`)."""

    __slots__ = ()

    def __missing__(self, decoder: Callable[[str], Any]) -> dict[str, Any]:
        table: dict[str, Any] = {}
        self[decoder] = table
        return table


_MEMOS: ContextVar[_Memos | None] = ContextVar("hlo_analyzer_memos", default=None)


@contextmanager
def scope() -> Iterator[None]:
    """Open this call's memos (or join the memos of the call this one runs inside); dropped on leaving."""
    if _MEMOS.get() is not None:
        yield
        return
    token = _MEMOS.set(_Memos())
    try:
        yield
    finally:
        _MEMOS.reset(token)


def one_call(fn: _F) -> _F:
    """Run each call of `fn` inside `scope()`: what it decodes is memoised for that call only."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        with scope():
            return fn(*args, **kwargs)

    return call  # type: ignore[return-value]


def memoised(decode: Callable[[str], _T]) -> Callable[[str], _T]:
    """`decode` (a pure function of one text), memoised in the current call's memos; `__wrapped__` is `decode`.

    A text that raises is not remembered (it raises again, as the caller's error path expects).

    Example:
        >>> calls = []
        >>> def decode(text):
        ...     calls.append(text)
        ...     return text.upper()
        >>> upper = memoised(decode)
        >>> with scope():
        ...     upper("f32"), upper("f32")
        ('F32', 'F32')
        >>> upper("f32"), len(calls)          # outside a call: decoded again, nothing kept
        ('F32', 2)
    """
    memos = _MEMOS

    @functools.wraps(decode)
    def call(text: str) -> _T:
        tables = memos.get()
        if tables is None:
            return decode(text)
        table = tables[call]
        value = table.get(text, _MISSING)
        if value is _MISSING:
            value = table[text] = decode(text)
        return value  # type: ignore[return-value]

    return call


def state(factory: Callable[[], _T]) -> _T:
    """The current call's object made by `factory` (made on its first use in the call); outside a call, a new one
    each time (so what is put in it is dropped at once).

    Example:
        >>> def seen():
        ...     return set()
        >>> with scope():
        ...     state(seen).add("f32[2]")
        ...     "f32[2]" in state(seen)
        True
        >>> "f32[2]" in state(seen)
        False
    """
    tables = _MEMOS.get()
    if tables is None:
        return factory()
    made = tables.get(factory, _MISSING)
    if made is _MISSING:
        made = tables[factory] = factory()
    return made  # type: ignore[return-value]
