"""Differential fuzzing of `parse_hlo` against XLA's own parser (issue 13's measurement).

Mutants of the valid corpus modules and samples (the mutations of tests/hlo/make_corpus.py, fixed seed) go to
both parsers. XLA's verdict (`xla_client.hlo.hlo_module_from_text` in a child process, restarted when it
aborts) is the reference. Prints: agreement, mutants XLA rejects that we accept and the reverse (grouped by
the first words of the other parser's message), foreign exceptions (anything but HloSyntaxError /
HloSemanticError), errors without a line and column, errors on the first changed line, and the slowest parse.

Run: `JAX_PLATFORMS=cpu python tests/hlo/differential.py [--mutants 10000] [--seed 13] [-v]`.
"""

from __future__ import annotations

import argparse
import collections
import random
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent.parent))


def _worker(conn) -> None:
    import os

    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # XLA's CHECK failures print stack traces
    from jax._src.lib import xla_client as xc

    while True:
        text = conn.recv()
        if text is None:
            return
        try:
            xc.hlo.hlo_module_from_text(text)
            conn.send((True, ""))
        except Exception as e:
            conn.send((False, str(e)))


class Judge:
    """XLA's parser in a child process that is restarted after an abort (which counts as a rejection)."""

    def __init__(self) -> None:
        self._proc = None

    def __call__(self, text: str) -> tuple[bool, str]:
        import multiprocessing as mp

        if self._proc is None or not self._proc.is_alive():
            ctx = mp.get_context("spawn")
            self._conn, child = ctx.Pipe()
            self._proc = ctx.Process(target=_worker, args=(child,), daemon=True)
            self._proc.start()
        try:
            self._conn.send(text)
            if self._conn.poll(60):
                return self._conn.recv()
        except (EOFError, OSError):
            pass
        self._proc.join(1)
        self._proc = None
        return False, "aborted"

    def close(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._conn.send(None)
            self._proc.join(5)


def _first_changed_line(a: str, b: str) -> int:
    for k, (x, y) in enumerate(zip(a.split("\n"), b.split("\n"))):
        if x != y:
            return k + 1
    return min(a.count("\n"), b.count("\n")) + 1


def _xla_reason(msg: str) -> str:
    m = re.search(r"error: ([^\n]*)", msg)
    text = m.group(1) if m else msg.strip().split("\n")[0]
    text = re.sub(r"\b\d+\b", "N", text)
    return " ".join(text.split()[:6])


def _our_reason(msg: str) -> str:
    text = msg.split("error: ", 1)[-1].split("\n")[0]
    text = re.sub(r"'[^']*'|`[^`]*`|\b\d+\b", "X", text)
    return " ".join(text.split()[:6])


def main(argv=None) -> int:
    from analyzer.errors import HloSemanticError, HloSyntaxError
    from analyzer.hlo.parser import parse_hlo
    from make_corpus import _mutations  # type: ignore[import-not-found]  # tests/hlo/make_corpus.py

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mutants", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("-v", action="store_true", help="print every disagreement")
    ap.add_argument("--show", type=int, help="print mutant number N and the line that changed, and stop")
    args = ap.parse_args(argv)
    seeds = [p for p in sorted((HERE / "corpus").glob("*.hlo")) if not p.name.endswith(".invalid.hlo")]
    seeds += [p for p in sorted((HERE / "samples").glob("*.hlo")) if p.stat().st_size < 200_000]
    texts = [p.read_text() for p in seeds]
    rng = random.Random(args.seed)
    judge = Judge()
    agree = 0
    foreign: list[str] = []
    unpositioned = 0
    on_line = errors = 0
    we_accept: collections.Counter = collections.Counter()
    we_reject: collections.Counter = collections.Counter()
    slowest = (0.0, "")
    for n in range(args.mutants):
        k = rng.randrange(len(texts))
        src = texts[k]
        text = _mutations(src, rng)
        if args.show is not None:
            if n == args.show:
                print(text)
                line = _first_changed_line(src, text)
                print(f"--- {seeds[k].name}, first changed line {line}: {src.split(chr(10))[line - 1][:300]}")
                return 0
            continue
        xla_ok, xla_msg = judge(text)
        t0 = time.perf_counter()
        try:
            parse_hlo(text)
            ours_ok, our_msg = True, ""
        except (HloSyntaxError, HloSemanticError) as e:
            ours_ok, our_msg = False, str(e)
            errors += 1
            if e.line is None or e.column is None:
                unpositioned += 1
            elif e.line == _first_changed_line(src, text):
                on_line += 1
        except Exception as e:  # noqa: BLE001 - what this script counts
            ours_ok, our_msg = False, f"{type(e).__name__}: {e}"
            foreign.append(f"{seeds[k].name} #{n}: {our_msg[:200]}")
        dt = time.perf_counter() - t0
        if dt > slowest[0]:
            slowest = (dt, f"{seeds[k].name} #{n}")
        if xla_ok == ours_ok:
            agree += 1
        elif xla_ok:
            we_reject[_our_reason(our_msg)] += 1
            if args.v:
                print(f"XLA accepts, we reject: {seeds[k].name} #{n}: {our_msg.splitlines()[0][:200]}")
        else:
            we_accept[_xla_reason(xla_msg)] += 1
            if args.v:
                print(f"XLA rejects, we accept: {seeds[k].name} #{n}: {_xla_reason(xla_msg)}")
    judge.close()
    total = args.mutants
    print(f"mutants: {total} (seed {args.seed}, {len(seeds)} seed modules)")
    print(f"agreement with XLA's verdict: {agree}/{total} ({100 * agree / total:.2f}%)")
    print(f"XLA rejects, we accept: {sum(we_accept.values())}")
    for reason, c in we_accept.most_common(15):
        print(f"  {c:5d}  {reason}")
    print(f"XLA accepts, we reject: {sum(we_reject.values())}")
    for reason, c in we_reject.most_common(15):
        print(f"  {c:5d}  {reason}")
    print(f"foreign exceptions: {len(foreign)}")
    for f in foreign[:10]:
        print("  " + f)
    print(f"errors without a position: {unpositioned}; on the first changed line: {on_line}/{errors} "
          f"({100 * on_line / max(errors, 1):.0f}%)")
    print(f"slowest parse: {slowest[0] * 1000:.0f} ms ({slowest[1]})")
    return 1 if foreign or unpositioned else 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
