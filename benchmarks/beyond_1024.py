"""Issue 25 item 7: the cpu target beyond 1,024 devices, timed against a 1,024-device run of the same model.

Beyond `analyzer.compile.lower.CPU_FULL_COMPILE_DEVICES` (1,024) devices the cpu target compiles in a child process
that stops at the after-SPMD module (gloo and a one-process coordinator past XLA's 2,048 CPU devices per process;
DESIGN.md, "More than 1,024 devices on the cpu target"). This script prints, for each case, the wall time of the
whole `analyzer.analyze` (trace, lower, compile, parse, analysis, step model), the compile's share, the predicted
step and MFU, and the ratio of each large run's wall time to its 1,024-chip counterpart (issue 25: at most 2).

Cases:
- `v5p`: MaxText's 1024B on one v5p-2048 slice (1,024 chips, full compile) and on two (2,048 chips; the published
  row, 51.55% MFU: examples/maxtext_v5p.py);
- `v5e`: a Llama-2-7B-shaped template step (FSDP over each slice's 256 chips, data parallel over slices, per-device
  batch 2, sequence 2048, full remat, Adam) on 4 slices of v5e-256 (1,024 chips) and on 32 (8,192 chips).

    nice python benchmarks/beyond_1024.py [--only v5p|v5e]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _llama7b(slices: int):
    from analyzer.compile.models import TransformerConfig, build

    chips = 256 * slices
    config = TransformerConfig(d_model=4096, heads=32, kv_heads=32, head_dim=128, d_ff=11008, layers=32,
                               mlp="gated_silu", vocab=32_000, seq=2048, batch=2 * chips, remat="full",
                               dtype="bfloat16", optimizer="adam")
    mesh = {"slice": slices, "fsdp": 256}
    step, args = build(config, "fsdp", mesh, data_axes=("fsdp",), replica_axes=("slice",))
    return step, args, mesh, f"v5e:16x16*{slices}", "tpu-v5e"


def _maxtext(slices: int):
    from examples.maxtext_v5p import ROWS, build_row

    row = next(r for r in ROWS if r.name == f"1024b-{slices}x-v5p-2048")
    step, args, mesh, topology = build_row(row)
    return step, args, mesh, topology, "tpu-v5p"


def run(name: str, make) -> float:
    import analyzer

    start = time.perf_counter()
    step, args, mesh, topology, hardware = make()
    report = analyzer.analyze(step, *args, mesh=mesh, hardware=hardware, topology=topology)
    wall = time.perf_counter() - start
    lowered = report.analysis.lowered
    compile_s = getattr(lowered, "compile_seconds", float("nan")) if lowered is not None else float("nan")
    t = report.totals
    chips = 1
    for size in mesh.values():
        chips *= size
    print(f"{name:28s} chips {chips:5d}  wall {wall:6.1f} s (compile {compile_s:5.2f} s)  step "
          f"{t.step_seconds:7.3f} s  MFU {100 * t.mfu:5.2f}%", flush=True)
    return wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("v5p", "v5e"))
    ns = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if ns.only in (None, "v5p"):
        small = run("1024B 1x v5p-2048", lambda: _maxtext(1))
        large = run("1024B 2x v5p-2048", lambda: _maxtext(2))
        print(f"ratio 2,048 / 1,024 chips: {large / small:.2f} (published MFU 55.35% and 51.55%)")
    if ns.only in (None, "v5e"):
        small = run("7B 4x v5e-256", lambda: _llama7b(4))
        large = run("7B 32x v5e-256", lambda: _llama7b(32))
        print(f"ratio 8,192 / 1,024 chips: {large / small:.2f} (issue 25: at most 2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
