"""How `analyzer.pipeline.analyze_hlo` splits its time between parsing and analysis, against XLA's parser.

For each text (a file given, else the synthetic 22 MB module of `parse_speed.py`, made once and cached under
build/bench/) it prints, in CPU seconds (`time.process_time`, best of `--repeat`, each in the same process):
XLA's parser (`xla_client.hlo.hlo_module_from_text`), the parse `analyze_hlo` runs (`parse_hlo(text,
lenient=True)`), `analyze_hlo` end to end from the file, the analysis (end to end less the parse) and the
parse's time as a multiple of XLA's.

Run: `python benchmarks/analyze_hlo_time.py [--repeat 2] [--mesh fsdp=4,tp=2] [FILE ...]`.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="HLO files (default: the synthetic module of parse_speed.py)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--mesh", default="fsdp=4,tp=2", help="mesh for analyze_hlo (the synthetic module's)")
    args = ap.parse_args(argv)
    sys.setrecursionlimit(10000)

    from jax._src.lib import xla_client as xc

    from analyzer.hlo.parser import parse_hlo
    from analyzer.pipeline import analyze_hlo

    if args.files:
        paths = [Path(f) for f in args.files]
    else:
        from parse_speed import synthetic_module

        paths = [synthetic_module(64)]
    print(f"{'text':<48} {'MB':>6} {'xla s':>6} {'parse s':>7} {'analyze_hlo s':>13} {'analysis s':>10} "
          f"{'parse/xla':>9}")
    for p in paths:
        text = p.read_text()
        t_xla = _best(lambda: xc.hlo.hlo_module_from_text(text), args.repeat)
        t_parse = _best(lambda: parse_hlo(text, lenient=True), args.repeat)
        t_all = _best(lambda: analyze_hlo(str(p), mesh=args.mesh), args.repeat)
        print(f"{str(p)[-48:]:<48} {len(text.encode()) / 1e6:6.2f} {t_xla:6.2f} {t_parse:7.2f} {t_all:13.2f} "
              f"{t_all - t_parse:10.2f} {t_parse / t_xla:8.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
