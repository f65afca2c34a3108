"""`gc_paused`: pause Python's cyclic garbage collector for a block or a function.

Parsing, analysing and checking a module make many small, acyclic objects next to an IR of millions of
objects; each full collection they trigger walks the whole IR (three cost 0.3 s on an unrolled 32-layer
step, and the parser's passes cost more). Reference counting still frees everything; the collector's state
is restored afterwards, so nested uses are safe.

`gc_paused(promote=True)` (what a parse uses) also hands what the block made to the collector's oldest
generation when it re-enables the collector: the IR of a parse is hundreds of thousands of container objects
that live as long as the module, and left young, the first allocations after the parse pay for a young
collection that walks all of them, then a middle one, then (they count as newly old) a full one: 0.85 s for the
next 100,000 allocations after a full parse of the 22 MB synthetic module (benchmarks/parse_speed.md). Promoting
them is `gc.freeze()` then `gc.unfreeze()`: the first moves every tracked object to the permanent generation, the
second moves them all to the oldest one, each in constant time, without a scan. Side effects on the caller's
process:

- every object young at that moment is promoted, the caller's own too: a reference cycle the caller made
  shortly before, already garbage, is freed at the next full collection (or `gc.collect()`) instead of the next
  young one. Nothing is leaked; only that cycle's memory is held longer. (So must be cycles the block itself
  leaves: the parser leaves none, a test checks; `analyze_hlo` on the synthetic module leaves 2,908 objects.)
- full collections still walk the IR, as they walk every live object; promotion does not count as the
  objects' arrival in the oldest generation (CPython's `long_lived_pending`), so it does not hasten the next
  full collection either, where a young collection of the same objects would have.
- it is skipped when the caller has frozen objects (`gc.get_freeze_count() > 0`, e.g. a server that freezes
  before forking), since `unfreeze` would thaw them too, when the collector was disabled before the block,
  and when the block left fewer than `PROMOTE_MIN` young objects (a small parse: nothing to gain). A thread
  that calls `gc.freeze()` between the two calls would have its objects thawed: not expected of a process that
  parses HLO.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused", "PROMOTE_MIN"]

# Young objects (`gc.get_count()[0]`) a block must leave before `promote` moves them: a young collection takes
# about 0.1 us an object (0.5 ms, 4% of the parse, after parsing a 0.2 MB fixture's 5,400 objects).
PROMOTE_MIN = 1_000


@contextmanager
def gc_paused(promote: bool = False) -> Iterator[None]:
    """Pause the cyclic collector; usable as `with gc_paused():` or as the decorator `@gc_paused()`.

    Args:
      promote: when the block re-enables the collector, move the objects it leaves to the oldest generation
        without a scan (see the module docstring for what that does to the rest of the process).

    Example:
      >>> with gc_paused():
      ...     import gc; gc.isenabled()
      False
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if promote:
                promote_young()
            gc.enable()


def promote_young() -> bool:
    """Move every tracked object to the collector's oldest generation, without a scan, when that is safe (no
    objects frozen by the caller) and worth it (at least `PROMOTE_MIN` young objects); whether it did.

    Example:
      >>> import gc
      >>> with gc_paused():
      ...     keep = [[] for _ in range(PROMOTE_MIN)]
      ...     promote_young(), gc.get_count()[0], gc.get_freeze_count()
      (True, 0, 0)
    """
    if gc.get_freeze_count() or gc.get_count()[0] < PROMOTE_MIN:
        return False
    gc.freeze()
    gc.unfreeze()
    return True
