"""Parse speed of `analyzer.parse_hlo` against XLA's C++ parser, on the same texts, in one process.

Texts: the largest fixtures (fixtures/**/*.hlo) and a synthetic module of at least 20 MB, the optimized HLO
of an unrolled 64-layer transformer training step compiled by jax on 8 fake CPU devices (FSDP x TP), made
once and cached under build/bench/. For each text it prints MB/s of XLA's parser
(`xla_client.hlo.hlo_module_from_text`), of the full `parse_hlo`, and of the lazy path the analysis takes
(`parse_hlo(lazy=True)`, then the entry, every while body and condition, every called computation except
fusions, and inside fusions only those that hold a collective or a dot), the time ratios against XLA, and
peak Python memory (tracemalloc) as a multiple of the text size.

Targets (issue 2): full <= 10x XLA's time, lazy <= 2x, peak memory <= 10x the text.

Run: `python benchmarks/parse_speed.py [--repeat 3] [--layers 64] [--no-synthetic]`.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "build" / "bench"

_ANALYSIS_OPS = ("all-gather", "all-gather-start", "all-reduce", "all-reduce-start", "reduce-scatter",
                 "all-to-all", "collective-permute", "collective-permute-start", "collective-broadcast",
                 "ragged-all-to-all", "dot")


def synthetic_module(layers: int) -> Path:
    """Write (once) the HLO of an unrolled `layers`-layer transformer training step; return its path.

    The step is forward, backward and an Adam update of every layer (attention, MLP, layer norms), FSDP x TP
    sharded on 8 fake CPU devices; the text is the module right after SPMD partitioning (unfused, so every op
    is an instruction, each with its metadata), about 0.4 MB per layer.
    """
    path = CACHE / f"transformer_unrolled_{layers}.hlo"
    if path.exists():
        return path
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    flag = "--xla_force_host_platform_device_count=8"
    if flag not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()
    import glob
    import tempfile

    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    mesh = jax.make_mesh((4, 2), ("fsdp", "tp"), axis_types=(AxisType.Auto,) * 2)
    d, f, b, s = 256, 1024, 8, 128

    def norm(x, g):
        mu = jnp.mean(x, -1, keepdims=True)
        return g * (x - mu) * jax.lax.rsqrt(jnp.mean((x - mu) ** 2, -1, keepdims=True) + 1e-6)

    def block(x, p):
        h = norm(x, p["g1"])
        q, k, v = (jnp.einsum("bsd,de->bse", h, p[w]) for w in ("wq", "wk", "wv"))
        a = jax.nn.softmax(jnp.einsum("bse,bte->bst", q, k) / 16.0)
        x = x + jnp.einsum("bst,bte->bse", a, v) @ p["wo"]
        h = norm(x, p["g2"])
        return x + jax.nn.gelu(jnp.einsum("bsd,df->bsf", h, p["w1"])) @ p["w2"]

    def loss(params, x):
        for p in params:  # unrolled: one copy of the block per layer
            x = block(x, p)
        return jnp.mean(x * x)

    def step(params, m, v, x):
        val, g = jax.value_and_grad(loss)(params, x)
        m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, m, g)
        v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, v, g)
        params = jax.tree.map(lambda p, m, v: p - 1e-3 * m / (jnp.sqrt(v) + 1e-8), params, m, v)
        return val, params, m, v

    S = lambda *spec: NamedSharding(mesh, P(*spec))  # noqa: E731
    layer = {"wq": S("fsdp", "tp"), "wk": S("fsdp", "tp"), "wv": S("fsdp", "tp"), "wo": S("tp", "fsdp"),
             "w1": S("fsdp", "tp"), "w2": S("tp", "fsdp"), "g1": S(None), "g2": S(None)}
    shapes = {"wq": (d, d), "wk": (d, d), "wv": (d, d), "wo": (d, d), "w1": (d, f), "w2": (f, d), "g1": (d,),
              "g2": (d,)}
    params = [{k: jax.ShapeDtypeStruct(shapes[k], jnp.float32, sharding=layer[k]) for k in layer}] * layers
    x = jax.ShapeDtypeStruct((b, s, d), jnp.float32, sharding=S("fsdp", None, None))
    lowered = jax.jit(step).lower(params, params, params, x)
    with tempfile.TemporaryDirectory() as tmp:
        lowered.compile(compiler_options={"xla_dump_to": tmp, "xla_dump_hlo_pass_re": "spmd-partitioning",
                                          "xla_dump_hlo_as_text": True})
        dumps = sorted(glob.glob(os.path.join(tmp, "*after_spmd-partitioning*.txt")))
        text = Path(dumps[-1]).read_text()
    CACHE.mkdir(parents=True, exist_ok=True)
    header = (f"// unrolled {layers}-layer transformer training step (fwd, bwd, Adam), after SPMD partitioning, "
              f"jax {jax.__version__}, cpu, mesh fsdp=4 tp=2\n// made by benchmarks/parse_speed.py\n")
    path.write_text(header + text)
    return path


def analysis_path(module) -> int:
    """Touch what the analysis needs of a lazily parsed module; return the instructions parsed."""
    seen: set[str] = set()
    todo = [module.entry.name]
    n = 0
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        comp = module[name]
        n += len(comp.instructions)
        for inst in comp.instructions:
            for callee in inst.called_computations:
                target = module.by_name.get(callee)
                if target is None or callee in seen:
                    continue
                if inst.opcode == "fusion" and hasattr(target, "mentions") and not target.mentions(*_ANALYSIS_OPS):
                    continue  # a fusion with neither collectives nor dots stays text
                todo.append(callee)
    return n


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _peak(fn) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def measure(path: Path, repeat: int) -> dict:
    from jax._src.lib import xla_client as xc

    from analyzer.hlo.parser import parse_hlo

    text = path.read_text()
    mb = len(text.encode()) / 1e6
    parse_hlo("HloModule warm\nENTRY e {\n  ROOT p = f32[] parameter(0)\n}\n")  # build the Lark parser first
    t_xla = _best(lambda: xc.hlo.hlo_module_from_text(text), repeat)
    t_full = _best(lambda: parse_hlo(text), repeat)
    t_lazy = _best(lambda: analysis_path(parse_hlo(text, lazy=True)), repeat)
    peak_full = _peak(lambda: parse_hlo(text))
    peak_lazy = _peak(lambda: analysis_path(parse_hlo(text, lazy=True)))
    return {"name": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path), "mb": mb,
            "xla": t_xla, "full": t_full, "lazy": t_lazy, "peak_full": peak_full / len(text.encode()),
            "peak_lazy": peak_lazy / len(text.encode())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--layers", type=int, default=64)
    ap.add_argument("--fixtures", type=int, default=3, help="how many of the largest fixtures")
    ap.add_argument("--no-synthetic", action="store_true")
    args = ap.parse_args(argv)

    paths = sorted((ROOT / "fixtures").rglob("*.hlo"), key=lambda p: p.stat().st_size, reverse=True)[:args.fixtures]
    if not args.no_synthetic:
        paths.append(synthetic_module(args.layers))
    print(f"{'text':<58} {'MB':>6} {'XLA MB/s':>9} {'full MB/s':>10} {'lazy MB/s':>10} {'full/XLA':>9} "
          f"{'lazy/XLA':>9} {'peak full':>10} {'peak lazy':>10}")
    for p in paths:
        r = measure(p, args.repeat)
        print(f"{r['name'][-58:]:<58} {r['mb']:6.2f} {r['mb'] / r['xla']:9.2f} {r['mb'] / r['full']:10.2f} "
              f"{r['mb'] / r['lazy']:10.2f} {r['full'] / r['xla']:8.2f}x {r['lazy'] / r['xla']:8.2f}x "
              f"{r['peak_full']:9.1f}x {r['peak_lazy']:9.1f}x")
    print("targets: full/XLA <= 10x, lazy/XLA <= 2x, peak memory <= 10x the text size")
    return 0


if __name__ == "__main__":
    sys.exit(main())
