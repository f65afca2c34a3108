"""What each of the template's knobs for published runs' models does to a program and its prediction (issue 25
item 5; analyzer.compile.models, docs/report-config.md `[model]`).

Part 1: one language model (2 layers, D=1024, F=4096, 8 heads, S=2048, B=16, V=32,000, Adam), FSDP over 8 fake
devices, priced on a TPU v5e 2x4 slice, with the defaults and with each knob alone: parameter bytes per device,
the dots' FLOPs per device, the predicted step, its compute and exposed communication, and MFU.

Part 2: the embedding read on one slice (fsdp=4, tensor=2: v5p 2x2x2) and on two (slice=2, fsdp=2, tensor=2: two
v5p 2x2x1 slices over DCN), left to XLA (`embedding_sharding="xla"`) and pinned: the collectives whose source is
the template's `_embed`, forward and backward, with bytes and exposed time.

    python scripts/template_knobs.py            # both parts (about 20 compiles of a few seconds each)
    python scripts/template_knobs.py --part 2
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

BASE = dict(d_model=1024, d_ff=4096, heads=8, kv_heads=8, layers=2, seq=2048, batch=16, vocab=32_000,
            optimizer="adam")
KNOBS = [
    ("defaults", {}),
    ("block=parallel", dict(block="parallel")),
    ("mlp=relu", dict(mlp="relu")),
    ("mlp=gated_silu", dict(mlp="gated_silu")),
    ("weight_dtype=float32", dict(weight_dtype="float32")),
    ("flash_attention", dict(flash_attention=True)),
    ("head_dim=256 (8 x 256 on D=1024)", dict(head_dim=256)),
    ("embedding=iota, tied", dict(embedding="iota", tied_embedding=True)),
]


def part1() -> None:
    import analyzer
    from analyzer.compile.models import TransformerConfig, build

    print("| knob | param bytes/device | dot GFLOP/device | step ms | compute ms | exposed comm ms | MFU |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    mesh = {"data": 8}
    for name, knob in KNOBS:
        step, args = build(TransformerConfig(**BASE, **knob), "fsdp", mesh)
        params = sum(p.size * p.dtype.itemsize for p in args[0].values()) // 8
        report = analyzer.analyze(step, *args, mesh=mesh, hardware="tpu-v5e", topology="v5e:2x4")
        t = report.totals
        print(f"| {name} | {params:,} | {t.flops / 1e9:.1f} | {1e3 * t.step_seconds:.2f} | "
              f"{1e3 * t.compute_seconds:.2f} | {1e3 * t.exposed_comm_seconds:.2f} | {100 * t.mfu:.1f}% |", flush=True)


def part2() -> None:
    from analyzer.compile import models
    from analyzer.compile.models import TransformerConfig, build
    from analyzer.pipeline import analyze

    lines, start = inspect.getsourcelines(models._embed)
    inside = range(start, start + len(lines))
    config = dict(BASE, attention=False, layers=1)
    plans = [("one slice: fsdp=4,tensor=2", {"fsdp": 4, "tensor": 2}, (), "v5p:2x2x2"),
             ("two slices: slice=2,fsdp=2,tensor=2", {"slice": 2, "fsdp": 2, "tensor": 2}, ("slice",), "v5p:2x2x1*2")]
    for sharding in ("xla", "pinned"):
        for label, mesh, replica, topology in plans:
            c = TransformerConfig(**config, embedding_sharding=sharding)
            step, args = build(c, "fsdp+tp", mesh, model_axis="tensor", replica_axes=replica)
            frame = analyze(step, *args, mesh=mesh, hardware="tpu-v5p", topology=topology).collectives
            print(f"\nembedding_sharding={sharding}, {label} ({topology})")
            total = 0.0
            for row in frame.itertuples():
                file, _, line = str(row.source).rpartition(":")
                if not (file.endswith("compile/models.py") and line.isdigit() and int(line) in inside):
                    continue
                way = "backward" if "transpose(" in row.op_name else "forward"
                total += row.exposed_seconds
                print(f"  {way:8} {row.kind:18} {','.join(row.axes):14} {row.bytes:>12,} B  "
                      f"{1e6 * row.seconds:8.1f} us, exposed {1e6 * row.exposed_seconds:8.1f} us")
            print(f"  exposed in all: {1e6 * total:.1f} us", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", type=int, choices=(1, 2), help="only this part")
    args = parser.parse_args()
    if args.part in (None, 1):
        part1()
    if args.part in (None, 2):
        part2()
    return 0


if __name__ == "__main__":
    sys.exit(main())
