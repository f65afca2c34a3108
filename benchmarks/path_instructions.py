"""The analysis path against XLA's parser in machine instructions (cachegrind), the figure that holds still.

`analyze_hlo_time.py` times the same work in CPU seconds; on a shared 2-core machine those drift by a quarter
from one minute to the next, so a change of a few percent cannot be told from noise. Instruction counts under
valgrind's cachegrind repeat to a few parts in a thousand. They are not time: our Python retires fewer
instructions a cycle than XLA's C++, so the time ratio stays above the instruction ratio (1.3x against 1.17x when
this script was written); both are worth printing.

What is counted, each as the difference of two runs of one child process that differ only in doing it (so the
interpreter's start, the imports and reading the text cancel out), `PYTHONHASHSEED=0`, the collector off:
  - `xla`: XLA's parser (`xla_client.hlo.hlo_module_from_text`) on the text;
  - `path`: what `analyze_hlo` makes our parser do (`analyze_hlo_time._record`, replayed as `analyze_hlo_time`
    replays it): the lazy parse, the computations parsed in full, every question to an unparsed computation;
  - with `--stages`, the same work in parts, each cut counted from the start: `lazy` the lazy parse, `code` the
    computations the analysis parses in full, `index` every unparsed computation's index (what its first question
    reads), `questions` the questions (those to computations the analysis parsed are left out).
The questions are recorded once from a real `analyze_hlo` run of this tree (needs jax; not counted).

Run: `python benchmarks/path_instructions.py [--stages] [--jobs 2] [FILE]` (default: the synthetic 22 MB module of
`parse_speed.py`). Needs `valgrind` on the PATH; each child runs about 50x slower than natively (minutes each).
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")
# The cumulative cuts of the path (`--stages`), in order.
_STAGES = ("lazy", "code", "index", "questions")


def _child(what: str, upto: str, text_path: str, events_path: str) -> None:
    """One measured process: everything up to `upto` (`none`, or a stage, or `all`) of `what` (`xla`/`path`)."""
    import gc

    text = Path(text_path).read_text()
    if what == "xla":
        from jax._src.lib import xla_client as xc

        parse = xc.hlo.hlo_module_from_text
        gc.disable()
        if upto != "none":
            module = parse(text)
            del module
        return
    import analyze_hlo_time as timing
    from analyzer.hlo.parser import _lark, parse_hlo

    _lark()  # (the grammar, built once per process: not the parse's work)
    asks = timing._asks(pickle.loads(Path(events_path).read_bytes()))
    parses = [a for a in asks if a[0] == "parse"]  # (for the stages; made in every run, so none counts it)
    questions = [a for a in asks if a[0] != "parse"]
    gc.disable()
    if upto == "none":
        return
    if upto == "all":
        timing._replay(text, asks)
        return
    cut = _STAGES.index(upto)
    module = parse_hlo(text, lenient=True, lazy=True)
    if cut >= 1:
        timing._ask(module, parses)
    if cut >= 2:
        for comp in module.computations:
            if not comp.is_parsed:
                comp._index  # noqa: B018
    if cut >= 3:
        timing._ask(module, questions)


def _count(what: str, upto: str, text_path: str, events_path: str) -> int:
    """Instructions cachegrind counts for one child run."""
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
           sys.executable, __file__, "--child", what, upto, text_path, events_path]
    # (one BLAS thread: numpy's idle OpenBLAS threads spin, and cachegrind counts every thread's instructions)
    env = dict(os.environ, PYTHONHASHSEED="0", JAX_PLATFORMS="cpu", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    found = _REFS.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"cachegrind run {what} {upto} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", help="an HLO file (default: the synthetic module of parse_speed.py)")
    ap.add_argument("--mesh", default="fsdp=4,tp=2", help="mesh for analyze_hlo (the synthetic module's)")
    ap.add_argument("--stages", action="store_true", help="also the path cut after each of its parts")
    ap.add_argument("--jobs", type=int, default=2, help="cachegrind runs at once (default 2)")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(*args.child)
        return 0
    if shutil.which("valgrind") is None:
        print("path_instructions.py needs valgrind (cachegrind) on the PATH; `analyze_hlo_time.py` times the same "
              "work in seconds", file=sys.stderr)
        return 2
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from analyze_hlo_time import _record
    from analyzer.pipeline import analyze_hlo
    from parse_speed import synthetic_module

    path = Path(args.file) if args.file else synthetic_module(64)
    events = _record(lambda: analyze_hlo(str(path), mesh=args.mesh))
    with tempfile.TemporaryDirectory() as tmp:
        events_path = str(Path(tmp) / "events.pkl")
        Path(events_path).write_bytes(pickle.dumps(events))
        runs = [("xla", "none"), ("xla", "go"), ("path", "none"), ("path", "all")]
        if args.stages:
            runs += [("path", s) for s in _STAGES]
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            counts = dict(zip(runs, pool.map(lambda r: _count(*r, str(path), events_path), runs)))
    xla = counts["xla", "go"] - counts["xla", "none"]
    ours = counts["path", "all"] - counts["path", "none"]
    print(f"{path.name}: {len(events)} questions recorded")
    print(f"  XLA's parser {xla / 1e6:,.0f}M instructions; the analysis path {ours / 1e6:,.0f}M: {ours / xla:.2f}x")
    if args.stages:
        marks = [counts["path", "none"]] + [counts["path", s] for s in _STAGES]
        parts = ", ".join(f"{s} {(b - a) / 1e6:,.0f}M" for s, a, b in zip(_STAGES, marks, marks[1:]))
        print(f"  split (the parts in that order, not the analysis's: {(marks[-1] - marks[0]) / 1e6:,.0f}M in all): "
              f"{parts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
