"""`gc_paused`: pause Python's cyclic garbage collector for a block or a function, then restore it as it was.

Parsing, analysing and checking a module make many small, acyclic objects next to an IR of millions of
objects; each full collection they trigger walks the whole IR (three cost 0.3 s on an unrolled 32-layer
step, and the parser's passes cost more). Reference counting still frees everything meanwhile.

The caller's collector is left exactly as found: enabled or not, its thresholds and its frozen objects
(`gc.get_freeze_count()`) are the same after the block, on every supported Python (a test checks all three
after `parse_hlo` and `analyze_hlo`). Earlier versions also moved what a parse made to the oldest generation
with `gc.freeze()` + `gc.unfreeze()`, which saved the first young collections after a large parse; it touched
every object of the caller's heap and, on Python 3.12, left objects frozen, so it is gone
(benchmarks/parse_speed.md has what it cost).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic collector; usable as `with gc_paused():` or as the decorator `@gc_paused()`.

    Example:
      >>> import gc
      >>> with gc_paused():
      ...     gc.isenabled()
      False
      >>> gc.isenabled()
      True
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
