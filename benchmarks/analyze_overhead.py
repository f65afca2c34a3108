"""What `analyzer.analyze` adds on top of jax's own compile, for a 32-layer transformer training step.

Target (issue "From a jitted function to priced collectives"): the analysis adds at most 20% to the compile
time. Measured in one process, on 8 fake CPU devices, mesh X=4 (FSDP) x Y=2 (TP), bf16, for the layers in a
`lax.scan` and unrolled (a Python loop: 32 copies of the block in the HLO):

  - jax: `jax.jit(step).lower(*args).compile()`, best of --repeat runs;
  - analyze: `analyzer.analyze(step, *args, mesh=mesh)` end to end (lowering with the after-SPMD dump,
    parsing, call graph, collectives, mapping, pricing, rules), best of --repeat runs;
  - of which analysis: everything after the compile (parse + the rest), from the report's own figures.

Run: `python benchmarks/analyze_overhead.py [--layers 32] [--repeat 2]`. Prints both times and the ratios.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
_FLAG = "--xla_force_host_platform_device_count"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" {_FLAG}=8").strip()


def build(layers: int, unrolled: bool):
    """The step (attention + MLP block, pre-norm, SGD) and its abstract arguments on mesh X=4, Y=2."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((4, 2), ("X", "Y"), axis_types=(AxisType.Auto,) * 2)
    b, s, d, f, h = 16, 128, 512, 2048, 8
    k = d // h

    def sh(*spec):
        return NamedSharding(mesh, P(*spec))

    shapes = {"wq": ((layers, d, h, k), sh(None, "X", "Y")), "wk": ((layers, d, h, k), sh(None, "X", "Y")),
              "wv": ((layers, d, h, k), sh(None, "X", "Y")), "wo": ((layers, h, k, d), sh(None, "Y", None, "X")),
              "win": ((layers, d, f), sh(None, "X", "Y")), "wout": ((layers, f, d), sh(None, "Y", "X"))}
    params = {n: jax.ShapeDtypeStruct(shape, jnp.bfloat16, sharding=spec) for n, (shape, spec) in shapes.items()}
    x = jax.ShapeDtypeStruct((b, s, d), jnp.bfloat16, sharding=sh("X", None, None))

    def norm(v):
        v32 = v.astype(jnp.float32)
        return (v32 * jax.lax.rsqrt(jnp.mean(v32 * v32, -1, keepdims=True) + 1e-6)).astype(v.dtype)

    def block(hidden, p):
        a = norm(hidden)
        q = jnp.einsum("bsd,dhk->bshk", a, p["wq"])
        kk = jnp.einsum("bsd,dhk->bshk", a, p["wk"])
        v = jnp.einsum("bsd,dhk->bshk", a, p["wv"])
        att = jax.nn.softmax(jnp.einsum("bshk,bthk->bhst", q, kk).astype(jnp.float32) / k ** 0.5, -1)
        o = jnp.einsum("bhst,bthk->bshk", att.astype(v.dtype), v)
        hidden = hidden + jnp.einsum("bshk,hkd->bsd", o, p["wo"])
        m = norm(hidden)
        hidden = hidden + jnp.einsum("bsf,fd->bsd", jax.nn.gelu(jnp.einsum("bsd,df->bsf", m, p["win"])), p["wout"])
        return hidden, None

    def loss(p, xb):
        if unrolled:
            hidden = xb
            for i in range(layers):
                hidden, _ = block(hidden, {n: w[i] for n, w in p.items()})
        else:
            hidden, _ = jax.lax.scan(block, xb, p)
        return jnp.mean(hidden.astype(jnp.float32) ** 2)

    def step(p, xb):
        g = jax.grad(loss)(p, xb)
        return jax.tree.map(lambda w, gw: w - 0.01 * gw, p, g)

    out = {n: spec for n, (_, spec) in shapes.items()}
    return jax.jit(step, out_shardings=out), (params, x), mesh


def measure(layers: int, unrolled: bool, repeat: int) -> dict[str, float]:
    import jax

    import analyzer

    fn, args, mesh = build(layers, unrolled)
    jax_times, total_times, after_compile = [], [], []
    n_collectives = 0
    for _ in range(repeat):
        jax.clear_caches()
        t = time.perf_counter()
        fn.lower(*args).compile()
        jax_times.append(time.perf_counter() - t)
        jax.clear_caches()
        t = time.perf_counter()
        report = analyzer.analyze(fn, *args, mesh=mesh)
        total = time.perf_counter() - t
        total_times.append(total)
        lowered = report.context["lowered"]
        after_compile.append(total - lowered.lower_seconds - lowered.compile_seconds)
        n_collectives = len(report.collectives)
    return {"jax": min(jax_times), "analyze": min(total_times), "analysis": min(after_compile),
            "collectives": n_collectives}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    worst = 0.0
    print(f"{'program':28s} {'jax compile':>12s} {'analyze':>10s} {'analysis':>10s} {'added':>8s} {'rows':>6s}")
    for unrolled in (False, True):
        m = measure(args.layers, unrolled, args.repeat)
        added = (m["analyze"] - m["jax"]) / m["jax"]
        worst = max(worst, added)
        name = f"{args.layers}-layer step, {'unrolled' if unrolled else 'scanned'}"
        print(f"{name:28s} {m['jax']:11.2f}s {m['analyze']:9.2f}s {m['analysis']:9.2f}s {added:7.1%} "
              f"{int(m['collectives']):6d}")
    print(f"target: analyze adds at most 20% to jax's compile; worst here {worst:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
