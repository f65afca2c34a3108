"""How `analyzer.pipeline.analyze_hlo` splits its time between parsing and analysis, against XLA's parser.

For each text (a file given, else the synthetic 22 MB module of `parse_speed.py`, made once and cached under
build/bench/) it prints two rows, in CPU seconds (`time.process_time`, best of `--repeat` rounds in one process, the
parses taken in turn in each round, each module freed inside its timing as XLA's is): `fresh`, measured in a new
process that has run no analysis (what a command-line run pays: `analyze_hlo` parses first), and `analysed`,
measured in this process after the analyses that recorded the questions and timed `analyze_hlo`. They differ:
an analysis of the 22 MB module leaves the process's freed memory scattered (its resident size stays near
440 MB), and every later Python parse allocates into it, slower; XLA's parser much less so. (Seen on this
2-core machine: the path 1.05x XLA in a fresh process, 1.13x after five analyses in it, 1.20x after making
and dropping three million small objects.) Each row gives:
XLA's parser (`xla_client.hlo.hlo_module_from_text`), the full parse (`parse_hlo(text, lenient=True)`, what
`analyze_hlo` ran before it read lazily), `analyze_hlo` end to end from the file, and the parse work
`analyze_hlo` does now: the lazy parse (`parse_hlo(text, lenient=True, lazy=True)`) plus what the analysis makes
it read, replayed on a fresh lazy parse in the order `analyze_hlo` asked for it (every computation it parsed
in full; every `select`, `call_instructions`, `line_head`, `users_of`, `mentions` and `parameter_name` of one
still unparsed; every `HloModule.holding`, the module's table of which computations write which opcodes); then each parse's time as a multiple of XLA's, and how many computations the analysis parsed in
full.

Columns: `full s` the full parse, `lazy s` the lazy parse, `read s` what the analysis then reads (the replay
less the lazy parse), `path/xla` the lazy parse plus that reading against XLA's parser, the same two ratios with
the cyclic collector off throughout (`no collector`: without the pass Python makes over a parse's new objects
when the parse's pause ends, which also walks everything else the process holds), `parsed` computations parsed
in full out of all.

Then `path/xla` round by round: each round runs XLA's parser and then the path (collector on), and the ratio
of the two is taken within the round; the median and range of those ratios. On a shared machine whose speed
drifts by a quarter over minutes, a ratio of two runs seconds apart moves less than the ratio of two minima
taken in different rounds.

Then the replay's own loop (each question a no-op, `_noop`), which the path's figures include: the lookups
and calls that stand for the analysis's own code, which XLA's parser does not pay, and the path less it.

Then the memory the lazy parse and the analysis's reads of it hold (tracemalloc, peak and kept with the module,
as multiples of the text's size), and the collections the full parse and the path set off in one more run each
(young, middle, full: `gc.callbacks`) with the objects the collector tracks in what each keeps: a full collection
walks every tracked object of the process, so these say how much of a ratio is the collector's, whatever the
machine's load.

With `--by-kind`, the path (collector off) split by kind of question: `lazy` the lazy parse, `parse` the
computations parsed in full, then `calls`, `select`, `head`, `users`, `mentions`, `param` of unparsed ones and
`holding` of the module (its first answer reads every computation's opcodes).

Run: `python benchmarks/analyze_hlo_time.py [--repeat 2] [--mesh fsdp=4,tp=2] [--by-kind] [FILE ...]`.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# (the tree this script sits in first, then its folder: a copy of the repository measures its own `analyzer`, not
# the one installed, so two trees can be timed side by side; the timing child runs this file, so it does too)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _collector_off(fn):
    """`fn` run with the cyclic collector off (for `parse_speed._best`, which collects before each timing)."""
    def run() -> None:
        gc.disable()
        try:
            fn()
        finally:
            gc.enable()
    return run


def _record(run) -> list[tuple[str, str, tuple[str, ...]]]:
    """What `run()` makes the lazy module read, in order: (what, computation, arguments) with what one of
    `parse`, `select`, `calls`, `head`, `users`, `mentions`, `param` (only reads of a computation not parsed at the
    time), or `holding` (of the module: computation "")."""
    from analyzer.hlo import ir, parser

    lazy = parser.LazyComputation
    kinds = {"select": "select", "call_instructions": "calls", "line_head": "head", "users_of": "users",
             "mentions": "mentions", "parameter_name": "param"}
    events: list[tuple[str, str, tuple[str, ...]]] = []
    saved = {k: lazy.__dict__[k] for k in kinds}
    parse_func = lazy.__dict__["_parse"]

    depth = [0]  # only the reads the analysis asks for, not those they make themselves

    def logged(kind, f):
        def g(self, *args):
            if not self.is_parsed and not depth[0]:
                events.append((kind, self.name, args))
            depth[0] += 1
            try:
                return f(self, *args)
            finally:
                depth[0] -= 1
        return g

    def parsed(self):
        if not depth[0]:
            events.append(("parse", self.name, ()))
        depth[0] += 1
        try:
            return parse_func(self)
        finally:
            depth[0] -= 1

    holding = ir.HloModule.holding

    def held(self, *opcodes):
        if not depth[0]:
            events.append(("holding", "", opcodes))
        depth[0] += 1
        try:
            return holding(self, *opcodes)
        finally:
            depth[0] -= 1

    for method, kind in kinds.items():
        setattr(lazy, method, logged(kind, saved[method]))
    lazy._parse = parsed
    ir.HloModule.holding = held
    try:
        run()
    finally:
        for k, v in saved.items():
            setattr(lazy, k, v)
        lazy._parse = parse_func
        ir.HloModule.holding = holding
    return events


# The kinds of question `_replay` asks, in the order of `_methods`' entries.
_KINDS = ("parse", "select", "calls", "head", "users", "mentions", "param", "holding")


def _methods() -> tuple:
    """What each kind of `_KINDS` calls: None for a parse, else the LazyComputation method (`HloModule.holding`
    for `holding`), looked up once before any timing."""
    from analyzer.hlo.ir import HloModule
    from analyzer.hlo.parser import LazyComputation

    return (None, LazyComputation.select, LazyComputation.call_instructions, LazyComputation.line_head,
            LazyComputation.users_of, LazyComputation.mentions, LazyComputation.parameter_name, HloModule.holding)


def _asks(events) -> list[tuple]:
    """`events` as `_replay` asks them: `(kind, its index in _KINDS, name, arguments)`, tuples of strings and ints
    only. The collector stops tracking such a tuple at its first collection, so the questions add nothing to what a
    full collection inside a timing walks: with each question's method in its tuple, the 118,797 questions of the
    synthetic module kept 124,000 objects tracked, more than jax and the analyzer hold (96,000), and a full
    collection in the path walked them too, which no `analyze_hlo` run has to."""
    index = {kind: k for k, kind in enumerate(_KINDS)}
    return [(kind, index[kind], name, args) for kind, name, args in events]


def _replay(text: str, asks: list[tuple], by_kind: dict | None = None) -> None:
    """`asks` (`_asks` of the recorded events) asked again of a fresh lazy parse, the parse and the questions in one
    call's memos as `analyze_hlo` runs them (`analyzer.hlo.memo`); with `by_kind`, the CPU seconds of each kind
    added into it (the lazy parse under `lazy`; each timing costs about a microsecond, counted in)."""
    from analyzer.hlo.memo import scope

    with scope():
        _replay_in_call(text, asks, by_kind)


def _replay_in_call(text: str, asks: list[tuple], by_kind: dict | None) -> None:
    from analyzer.hlo.parser import parse_hlo

    clock = time.process_time
    t = clock()
    module = parse_hlo(text, lenient=True, lazy=True)
    if by_kind is not None:
        by_kind["lazy"] = by_kind.get("lazy", 0.0) + clock() - t
    if by_kind is None:
        _ask(module, asks)
        return
    by_name, methods = module.by_name, _methods()
    for kind, k, name, args in asks:  # (`_ask`'s loop, each question timed)
        c = by_name[name] if name else module
        if name and c.is_parsed:
            continue
        t = clock()
        f = methods[k]
        if f is None:
            c.instructions
        else:
            f(c, *args)
        by_kind[kind] = by_kind.get(kind, 0.0) + clock() - t


def _ask(module, asks: list[tuple], methods: tuple | None = None) -> None:
    """`asks` asked of `module`, in order: a parse (`f` None) or a question of a computation (of the module when
    the name is empty); none of a computation parsed meanwhile (answered from its instructions, no parse work).
    `methods`: what each kind calls (`_methods()` unless given)."""
    by_name = module.by_name
    methods = _methods() if methods is None else methods
    for kind, k, name, args in asks:
        c = by_name[name] if name else module
        if name and c.is_parsed:
            continue
        f = methods[k]
        if f is None:
            c.instructions
        else:
            f(c, *args)


def _noop(*args) -> None:
    """A question that does nothing (`_ask` of `asks` with each one this: the replay's own loop)."""
    return None


def _timings(text: str, events, repeat: int, by_kind: bool) -> dict:
    """The figures of one text, measured in this process: XLA's parser, the full and the lazy parse and the path
    (the replay of `events`), each the best of `repeat` interleaved rounds, collector on and off; the path
    against XLA's parser round by round; the replay's own loop; the path's memory (`_path_memory`); and with
    `by_kind`, the path split by kind."""
    from jax._src.lib import xla_client as xc

    from analyzer.hlo.memo import scope
    from analyzer.hlo.parser import parse_hlo

    from parse_speed import _best, _rounds

    asks = _asks(events)
    # (taken in turn each round: XLA's parser beside ours, so a slow spell of the machine falls on both)
    rounds = _rounds(
        [lambda: xc.hlo.hlo_module_from_text(text), lambda: parse_hlo(text, lenient=True),
         lambda: parse_hlo(text, lenient=True, lazy=True), lambda: _replay(text, asks),
         _collector_off(lambda: parse_hlo(text, lenient=True)), _collector_off(lambda: _replay(text, asks))],
        repeat)
    out = dict(zip(("xla", "full", "lazy", "path", "full_nc", "path_nc"), (min(t) for t in zip(*rounds))))
    out["per_round"] = sorted(r[3] / r[0] for r in rounds)  # (the path against XLA's parser run just before it)
    module = parse_hlo(text, lenient=True, lazy=True)
    out["computations"] = len(module.computations)
    # The replay's own loop, each question a no-op of the same call: what it spends besides the parser's work
    # (looking up each computation and calling), which the analysis spends in its own code instead.
    noops = (_noop,) * len(_KINDS)
    (out["loop"],) = _best([_collector_off(lambda m=module: _ask(m, asks, noops))], repeat)
    del module
    out["peak"], out["kept"] = _path_memory(text, asks)

    def path():
        with scope():
            m = parse_hlo(text, lenient=True, lazy=True)
            _ask(m, asks)
        return m

    out["gc_full"] = _collections(lambda: parse_hlo(text, lenient=True))
    out["gc_path"] = _collections(path)
    if by_kind:  # the path with the collector off, per kind of question, best of `repeat`
        runs = []
        for _ in range(repeat):
            gc.collect()
            gc.disable()
            try:
                runs.append({})
                _replay(text, asks, runs[-1])
            finally:
                gc.enable()
        out["by_kind"] = min(runs, key=lambda r: sum(r.values()))
    return out


def _collections(make) -> tuple[list[int], int, int]:
    """The collections `make()` sets off (young, middle, full: `gc.callbacks`), how many objects the collector
    tracks in what it returns (the difference in `gc.get_objects()` after a full collection), the returned object
    kept until both are counted, and how many it tracked in the process before (what each full collection walks
    besides: a process with jax and the analyzer imported, as the command line's, tracks about 96,000)."""
    gens: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            gens.append(info["generation"])

    gc.collect()
    before = len(gc.get_objects())
    gc.callbacks.append(count)
    try:
        kept = make()
    finally:
        gc.callbacks.remove(count)
    gc.collect()
    tracked = len(gc.get_objects()) - before
    del kept
    return [gens.count(g) for g in range(3)], tracked, before


def _path_memory(text: str, asks: list[tuple]) -> tuple[float, float]:
    """Peak and kept memory (tracemalloc, as multiples of the text's size; the text itself not counted) of the
    lazy parse and the analysis's reads of it, the module kept: what a module read by `analyze_hlo` holds (the
    stand-in walk of `parse_speed.analysis_path` asks less: no `line_head`, `users_of` or `parameter_name`)."""
    import tracemalloc

    from analyzer.hlo.memo import scope
    from analyzer.hlo.parser import parse_hlo

    gc.collect()
    tracemalloc.start()
    try:
        with scope():
            module = parse_hlo(text, lenient=True, lazy=True)
            _ask(module, asks)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del module
    n = len(text.encode())
    return peak / n, kept / n


def _fresh_timings(path: Path, events, repeat: int, by_kind: bool) -> dict:
    """`_timings` in a new process (this script with `--child`), which reads the text and the pickled events and
    has run no analysis: what a command-line run of `analyze_hlo` pays, whose parse comes first in its process."""
    with tempfile.TemporaryDirectory() as tmp:
        events_path = Path(tmp) / "events.pickle"
        events_path.write_bytes(pickle.dumps(events))
        cmd = [sys.executable, __file__, "--child", str(path), str(events_path), str(repeat), str(int(by_kind))]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the timing child failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _print_row(label: str, p: Path, text: str, t: dict, t_all: float | None, n_parsed: int, n_asks: int) -> None:
    xla, path_nc = t["xla"], t["path_nc"]
    per_round = t["per_round"]
    all_s = f"{t_all:13.2f}" if t_all is not None else f"{'':>13}"
    print(f"{label:<9} {str(p)[-30:]:<30} {len(text.encode()) / 1e6:6.2f} {xla:6.2f} {t['full']:6.2f} {all_s} "
          f"{t['lazy']:6.2f} {t['path'] - t['lazy']:6.2f} {t['full'] / xla:7.2f}x {t['path'] / xla:7.2f}x "
          f"{t['full_nc'] / xla:21.2f}x {path_nc / xla:7.2f}x {n_parsed:>6}/{t['computations']:<6}")
    print(f"  path/xla round by round (each the ratio of two runs seconds apart): median "
          f"{per_round[len(per_round) // 2]:.2f}x, {per_round[0]:.2f}x to {per_round[-1]:.2f}x over "
          f"{len(per_round)} rounds")
    print(f"  the replay's own loop over its {n_asks:,} questions, each a no-op: {t['loop']:.3f} s; the path less it "
          f"(collector off): {(path_nc - t['loop']) / xla:.2f}x XLA")
    print(f"  memory of the lazy parse and the analysis's reads (module kept; the text not counted): peak "
          f"{t['peak']:.2f}x, kept {t['kept']:.2f}x the text")
    (fy, fm, ff), f_kept, f_before = t["gc_full"]
    (py, pm, pf), p_kept, _ = t["gc_path"]
    print(f"  the collector (one more run each, the process tracking {f_before:,} objects before): the full parse "
          f"{fy} young / {fm} middle / {ff} full collections, {f_kept:,} tracked objects kept; the path {py} / {pm} / "
          f"{pf}, {p_kept:,} kept")
    if "by_kind" in t:
        best = t["by_kind"]
        print("  by kind (s, collector off): " + ", ".join(f"{k} {v:.3f}" for k, v in best.items())
              + f"; total {sum(best.values()):.2f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="HLO files (default: the synthetic module of parse_speed.py)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--mesh", default="fsdp=4,tp=2", help="mesh for analyze_hlo (the synthetic module's)")
    ap.add_argument("--by-kind", action="store_true", help="also the path's time per kind of question")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    sys.setrecursionlimit(10000)
    if args.child:
        text_path, events_path, repeat, by_kind = args.child
        events = pickle.loads(Path(events_path).read_bytes())
        print(json.dumps(_timings(Path(text_path).read_text(), events, int(repeat), by_kind == "1")))
        return 0

    from analyzer.pipeline import analyze_hlo

    from parse_speed import _best, synthetic_module

    paths = [Path(f) for f in args.files] if args.files else [synthetic_module(64)]
    print(f"{'process':<9} {'text':<30} {'MB':>6} {'xla s':>6} {'full s':>6} {'analyze_hlo s':>13} {'lazy s':>6} "
          f"{'read s':>6} {'full/xla':>8} {'path/xla':>8} {'no collector: full/xla':>22} {'path/xla':>8} "
          f"{'parsed':>13}")
    for p in paths:
        text = p.read_text()
        events = _record(lambda: analyze_hlo(str(p), mesh=args.mesh))
        n_parsed = len({name for kind, name, _ in events if kind == "parse"})
        fresh = _fresh_timings(p, events, args.repeat, args.by_kind)
        (t_all,) = _best([lambda: analyze_hlo(str(p), mesh=args.mesh)], args.repeat)
        _print_row("fresh", p, text, fresh, t_all, n_parsed, len(events))
        _print_row("analysed", p, text, _timings(text, events, args.repeat, args.by_kind), None, n_parsed,
                   len(events))
    return 0


if __name__ == "__main__":
    sys.exit(main())
