"""The step model against one real GPU: measured step times and matmul throughput beside the cpu target's prediction.

A held-out check (not calibration: nothing in the model is fitted to these figures). Users analyse on fake CPU
devices and price on a hardware spec; this script runs the same template programs on a real GPU, times them, and
compares with what `analyzer.analyze(..., hardware=<spec>)` predicts for them. One device, so no collectives:
it judges the compute side of the step model (dots at the roofline, HBM-bound work, per-op costs) on a GPU.

    # on a machine with one GPU (jax with CUDA): writes the measurements as JSON (fixtures/gpu/README.md)
    python scripts/gpu_step_check.py measure --out gpu_measured.json
    # anywhere (cpu target): prints predicted against measured
    python scripts/gpu_step_check.py compare gpu_measured.json --hardware h200

`measure --quick` runs tiny programs on whatever platform jax has (to check the script itself, not the model).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# Template programs (analyzer.compile.models.TransformerConfig fields), data parallel on one device.
_LM = {"vocab": 32_000, "optimizer": "adam", "mlp": "gated_silu"}
STEPS = {
    "lm-d1024-l4": {**_LM, "d_model": 1024, "d_ff": 4096, "heads": 8, "kv_heads": 8, "layers": 4, "seq": 1024,
                    "batch": 16},
    "lm-d2048-l8": {**_LM, "d_model": 2048, "d_ff": 8192, "heads": 16, "kv_heads": 16, "layers": 8, "seq": 2048,
                    "batch": 8},
    "lm-d2048-l8-remat": {**_LM, "d_model": 2048, "d_ff": 8192, "heads": 16, "kv_heads": 16, "layers": 8, "seq": 2048,
                          "batch": 8, "remat": "full"},
    "llama8b-shape-l4": {**_LM, "d_model": 4096, "d_ff": 14336, "heads": 32, "kv_heads": 8, "layers": 4, "seq": 2048,
                         "batch": 4},
}
QUICK_STEPS = {"tiny": {**_LM, "vocab": 512, "d_model": 128, "d_ff": 256, "heads": 4, "kv_heads": 4, "layers": 2,
                        "seq": 64, "batch": 4}}
# bf16 matmuls (M, K, N): squares, and a transformer's forward, input-gradient and weight-gradient shapes.
MATMULS = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (16384, 16384, 16384),
           (8192, 4096, 14336), (8192, 14336, 4096), (4096, 8192, 14336), (16384, 4096, 4096), (512, 4096, 4096),
           (2048, 8192, 2048), (8192, 2048, 32000)]
QUICK_MATMULS = [(256, 256, 256)]
# `compiled.memory_analysis()`'s per-device parts, as the report keeps them.
_MEMORY_FIELDS = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes",
                  "generated_code_size_in_bytes")


def _timed(fn, *args, repeats: int, inner: int) -> float:
    """Median seconds of one call: `repeats` timings of `inner` back-to-back calls each (after two warm-ups)."""
    import jax

    for _ in range(2):
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            out = fn(*args)
        jax.block_until_ready(out)
        times.append((time.perf_counter() - start) / inner)
    return statistics.median(times)


def _concrete(abstract, key):
    """Random arrays of the abstract arguments' shapes and dtypes on the default device (ids in range)."""
    import jax
    import jax.numpy as jnp

    leaves, tree = jax.tree_util.tree_flatten(abstract)
    out = []
    for i, leaf in enumerate(leaves):
        k = jax.random.fold_in(key, i)
        if jnp.issubdtype(leaf.dtype, jnp.integer):
            out.append(jax.random.randint(k, leaf.shape, 0, 256, dtype=leaf.dtype))
        else:
            out.append((0.02 * jax.random.normal(k, leaf.shape, jnp.float32)).astype(leaf.dtype))
    return jax.tree_util.tree_unflatten(tree, out)


def _gpu_state() -> dict:
    """The GPU's clocks and power as nvidia-smi reports them (empty where there is none)."""
    query = "name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu"
    try:
        line = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], check=False,
                              capture_output=True,
                              text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {}
    return dict(zip(query.split(","), (v.strip() for v in line.split(","))))


def measure(out: Path, quick: bool) -> None:
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType

    from analyzer.compile.models import TransformerConfig, build

    device = jax.devices()[0]
    if device.platform != "gpu" and not quick:
        sys.exit(f"measure: the default device is {device.platform!r}, not a GPU (use --quick to try the script)")
    result = {"jax": jax.__version__, "jaxlib": jax.lib.__version__ if hasattr(jax, "lib") else "",
              "device_kind": device.device_kind, "platform": device.platform, "gpu_before": _gpu_state(),
              "steps": {}, "matmuls": []}
    repeats, inner = (3, 2) if quick else (5, 10)
    for m, k, n in QUICK_MATMULS if quick else MATMULS:
        a = jax.random.normal(jax.random.key(0), (m, k), jnp.bfloat16)
        b = jax.random.normal(jax.random.key(1), (k, n), jnp.bfloat16)
        seconds = _timed(jax.jit(jnp.matmul), a, b, repeats=repeats, inner=inner)
        result["matmuls"].append({"m": m, "k": k, "n": n, "seconds": seconds, "tflops": 2 * m * k * n / seconds / 1e12})
        print(f"matmul {m}x{k}x{n}: {1e3 * seconds:.3f} ms, {2 * m * k * n / seconds / 1e12:.0f} TFLOP/s", flush=True)
        del a, b
    result["gpu_after_matmuls"] = _gpu_state()
    mesh = jax.make_mesh((1,), ("data",), axis_types=(AxisType.Auto,), devices=[device])
    for name, fields in (QUICK_STEPS if quick else STEPS).items():
        step, abstract = build(TransformerConfig(**fields), "dp", {"data": 1})
        with jax.set_mesh(mesh):
            args = _concrete(abstract, jax.random.key(2))
            compiled = step.lower(*args).compile()
            seconds = _timed(compiled, *args, repeats=repeats, inner=max(1, inner // 2))
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        memory = compiled.memory_analysis()
        result["steps"][name] = {"config": fields, "seconds": seconds,
                                 "xla_flops": float(cost.get("flops", 0.0)) if cost else None,
                                 "memory_analysis": {key: int(getattr(memory, key)) for key in _MEMORY_FIELDS
                                                     if memory is not None and hasattr(memory, key)},
                                 "peak_bytes_in_use_so_far": (device.memory_stats() or {}).get("peak_bytes_in_use")}
        print(f"step {name}: {1e3 * seconds:.2f} ms", flush=True)
        del args, compiled
    result["gpu_after"] = _gpu_state()
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=out.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, out)


def compare(measured: Path, hardware: str) -> None:
    import analyzer
    from analyzer.compile.models import TransformerConfig, build
    from analyzer.rules.memory import per_device_bytes
    from analyzer.theory.hardware import load_hardware

    data = json.loads(measured.read_text())
    hw = load_hardware(hardware)
    peak = dict(hw.flops)["bf16"]
    print(f"measured on {data['device_kind']} (jax {data['jax']}); predicted for {hw.name} "
          f"(bf16 peak {peak / 1e12:.0f} TFLOP/s, HBM {hw.hbm_bandwidth / 1e12:.2f} TB/s), cpu target")
    print(f"GPU state: before {data.get('gpu_before')}, after the matmuls {data.get('gpu_after_matmuls')}")
    print("\n| matmul M x K x N | measured ms | TFLOP/s | roofline ms | measured / roofline |")
    print("|---|---:|---:|---:|---:|")
    for row in data["matmuls"]:
        m, k, n = row["m"], row["k"], row["n"]
        roof = max(2 * m * k * n / peak, 2 * (m * k + k * n + m * n) / hw.hbm_bandwidth)
        print(f"| {m} x {k} x {n} | {1e3 * row['seconds']:.3f} | {row['tflops']:.0f} | {1e3 * roof:.3f} | "
              f"{row['seconds'] / roof:.2f} |")
    print("\n| program | measured ms | predicted ms | error | predicted compute ms | model TFLOP | MFU measured |"
          " MFU predicted | GPU compiler's bytes | predicted bytes |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, row in data["steps"].items():
        step, args = build(TransformerConfig(**row["config"]), "dp", {"data": 1})
        report = analyzer.analyze(step, *args, mesh={"data": 1}, hardware=hardware)
        t = report.totals
        flops = t.model_flops
        print(f"| {name} | {1e3 * row['seconds']:.2f} | {1e3 * t.step_seconds:.2f} | "
              f"{100 * (t.step_seconds / row['seconds'] - 1):+.1f}% | {1e3 * t.compute_seconds:.2f} | "
              f"{flops / 1e12:.2f} | {100 * flops / row['seconds'] / peak:.1f}% | {100 * t.mfu:.1f}% | "
              f"{_gb(per_device_bytes(row.get('memory_analysis')))} | {_gb(per_device_bytes(report.memory))} |",
              flush=True)


def _gb(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e9:.2f} GB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="time the programs on this machine's GPU")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--quick", action="store_true", help="tiny programs on any platform (checks the script)")
    c = sub.add_parser("compare", help="predicted (cpu target) against a measure run's JSON")
    c.add_argument("measured", type=Path)
    c.add_argument("--hardware", default="h200")
    args = parser.parse_args()
    if args.command == "measure":
        measure(args.out, args.quick)
    else:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        compare(args.measured, args.hardware)


if __name__ == "__main__":
    main()
