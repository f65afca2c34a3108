"""Parse speed of `analyzer.parse_hlo` against XLA's C++ parser, on the same texts, in one process.

Texts: the largest fixtures (fixtures/**/*.hlo) and a synthetic module of at least 20 MB: the optimized HLO
of an unrolled 64-layer transformer training step compiled by jax on 8 fake CPU devices (FSDP x TP), in
renamed copies under one ENTRY until it reaches 20 MB (`--synthetic-mb N`: N MB, from copies of the 20 MB one; made
once, cached under build/bench/). For each text it prints MB/s of XLA's parser
(`xla_client.hlo.hlo_module_from_text`), of the full `parse_hlo`, and of the lazy path the analysis takes
(`parse_hlo(lazy=True)`, then the entry, every while body and condition, every called computation except
fusions, and inside fusions only those that hold a collective or a dot), the time ratios against XLA, and
peak Python memory (tracemalloc) and the memory the parsed module keeps (the lazy one once the analysis path has
read it), as multiples of the text size.
XLA's parser and ours are timed in turn (CPU time), best of `--repeat`, so other jobs on a shared machine weigh on
both.

Targets (issue 13): full <= 3x XLA's time, lazy (the analysis path) <= 1x, peak memory <= 8x the text, kept <= 4x.

Run: `python benchmarks/parse_speed.py [--repeat 3] [--layers 64] [--no-synthetic] [--synthetic-mb 20] [--long-tuple]`.
"""

from __future__ import annotations

import argparse
import gc
import re
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


def _compiled_step(layers: int) -> str:
    """The optimized HLO (`compiled.as_text()`) of an unrolled `layers`-layer transformer training step:
    forward and backward of attention + MLP blocks, FSDP x TP sharded on 8 fake CPU devices."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    flag = "--xla_force_host_platform_device_count=8"
    if flag not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    mesh = jax.make_mesh((4, 2), ("fsdp", "tp"), axis_types=(AxisType.Auto,) * 2)
    d, f, b, s = 256, 1024, 8, 128

    def block(x, p):
        h = x + jax.nn.gelu(jnp.einsum("bsd,df->bsf", x, p["w1"])) @ p["w2"]
        q = jnp.einsum("bsd,de->bse", h, p["wq"])
        k = jnp.einsum("bsd,de->bse", h, p["wk"])
        a = jax.nn.softmax(jnp.einsum("bse,bte->bst", q, k) / 16.0)
        return h + jnp.einsum("bst,btd->bsd", a, h)

    def loss(params, x):
        for p in params:  # unrolled: one copy of the block per layer
            x = block(x, p)
        return jnp.mean(x * x)

    S = lambda *spec: NamedSharding(mesh, P(*spec))  # noqa: E731
    layer = {"w1": jax.ShapeDtypeStruct((d, f), jnp.float32, sharding=S("fsdp", "tp")),
             "w2": jax.ShapeDtypeStruct((f, d), jnp.float32, sharding=S("tp", "fsdp")),
             "wq": jax.ShapeDtypeStruct((d, d), jnp.float32, sharding=S("fsdp", "tp")),
             "wk": jax.ShapeDtypeStruct((d, d), jnp.float32, sharding=S("fsdp", "tp"))}
    x = jax.ShapeDtypeStruct((b, s, d), jnp.float32, sharding=S("fsdp", None, None))
    return jax.jit(jax.value_and_grad(loss)).lower([layer] * layers, x).compile().as_text()


_IDENT = re.compile(r"%([A-Za-z_][\w.\-]*)")
_ENTRY_HEAD = re.compile(r"^ENTRY %([\w.\-]+) \((.*)\) -> (.*) \{$", re.M)


def _replicate(text: str, copies: int) -> str:
    """`copies` renamed copies of a module's computations under one new ENTRY that calls each copy.

    Names get a `c<k>_` prefix; each copy's ENTRY becomes an ordinary computation; the new ENTRY passes its
    parameters to every copy with `call` and returns their results as a tuple. The header and stack-frame
    tables are kept once (metadata still points into them). XLA's parser accepts the result.
    """
    first = re.search(r"^(ENTRY )?%[\w.\-]+ \(", text, re.M)
    header, body = text[: first.start()], text[first.start():]
    head = _ENTRY_HEAD.search(body)
    entry, params_text, result = head.group(1), head.group(2), head.group(3)
    from analyzer.hlo.attributes import split_top

    pairs = [p.split(":", 1) for p in split_top(re.sub(r"/\*.*?\*/", "", params_text))]
    params = [name.strip() for name, _ in pairs]
    parts, calls = [], []
    for k in range(copies):
        parts.append(_IDENT.sub(lambda m: f"%c{k}_{m.group(1)}", body).replace("ENTRY %", "%"))
        calls.append(f"  %call.{k} = {result} call({', '.join('%' + p for p in params)}), to_apply=%c{k}_{entry}")
    param_lines = [f"  %{name.strip()} = {sh.strip()} parameter({i})" for i, (name, sh) in enumerate(pairs)]
    tuple_shape = "(" + ", ".join([result] * copies) + ")"
    entry_text = (f"ENTRY %main.replicated ({params_text}) -> {tuple_shape} {{\n" + "\n".join(param_lines + calls)
                  + f"\n  ROOT %all = {tuple_shape} tuple({', '.join(f'%call.{k}' for k in range(copies))})\n}}\n")
    # The header's per-parameter attributes no longer fit the new ENTRY: keep the name and partition count.
    first_line, _, rest = header.partition("\n")
    parts_n = re.search(r"num_partitions=(\d+)", first_line)
    name = first_line.split()[1].rstrip(",")
    header = f"HloModule {name}_x{copies}" + (f", num_partitions={parts_n.group(1)}" if parts_n else "") + "\n" + rest
    return header + "\n\n".join(parts) + "\n\n" + entry_text


def synthetic_module(layers: int, min_mb: float = 20.0) -> Path:
    """Write (once) a synthetic module of at least `min_mb` MB and return its path.

    It is the optimized HLO of an unrolled `layers`-layer transformer training step compiled by jax, made
    big enough by `_replicate` (renamed copies under one ENTRY): real XLA output line for line, without a
    compile that needs tens of GB of memory.
    """
    path = CACHE / f"transformer_unrolled_{layers}_x{min_mb:g}MB.hlo"
    if path.exists():
        return path
    import jax

    if min_mb > 20.0:  # copies of the 20 MB module (itself copies of one step): no second compile
        base = synthetic_module(layers, 20.0).read_text()
        one = base[re.search(r"^HloModule ", base, re.M).start():]  # without its `//` lines
        what = f"renamed copies of the 20 MB module (itself renamed copies of an unrolled {layers}-layer step)"
    else:
        one = _compiled_step(layers)
        what = f"renamed copies of an unrolled {layers}-layer transformer training step (fwd+bwd)"
    copies = max(1, -(-int(min_mb * 1e6) // len(one.encode())))
    text = _replicate(one, copies) if copies > 1 else one
    CACHE.mkdir(parents=True, exist_ok=True)
    header = (f"// {copies} {what}, jax {jax.__version__}, cpu, mesh fsdp=4 tp=2, under one ENTRY\n"
              "// made by benchmarks/parse_speed.py\n")
    path.write_text(header + text)
    return path


def analysis_path(module) -> int:
    """Touch what the analysis needs of a lazily parsed module; return the instructions it read.

    The entry, and everything it calls (while bodies and conditions, called computations, branches) in
    full; of a fusion's computation only its collectives and dots, with their operands' shapes
    (`select`). Python's cyclic collector runs as the caller left it (the parser never pauses it).
    """
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
                if inst.opcode == "fusion" and hasattr(target, "select"):
                    seen.add(callee)
                    n += len(target.select(*_ANALYSIS_OPS))
                    continue
                todo.append(callee)
    return n


def _lazy_read(module):
    """The lazily parsed module after the analysis path has read it (what it then keeps)."""
    analysis_path(module)
    return module


def _one_call(fn):
    """`fn()` in one call's memos, as `analyze_hlo` parses and reads a module (`analyzer.hlo.memo`)."""
    from analyzer.hlo.memo import scope

    with scope():
        return fn()


def _best(fns, repeat: int) -> list[float]:
    """The best CPU time (`time.process_time`: less moved than wall time by other jobs on a shared machine) of
    each of `fns`, run in turn `repeat` times (interleaved, so that another job slows all of them alike rather
    than one)."""
    return [min(times) for times in zip(*_rounds(fns, repeat))]


def _rounds(fns, repeat: int) -> list[list[float]]:
    """The CPU time of each of `fns` in each of `repeat` rounds, the functions run in turn each round: a list
    per round (`_best` takes each function's least; a ratio taken within each round compares runs made seconds
    apart, which a slow spell of the machine slows alike)."""
    rounds = []
    for _ in range(repeat):
        times = []
        for fn in fns:
            gc.collect()
            t = time.process_time()
            fn()
            times.append(time.process_time() - t)
        rounds.append(times)
    return rounds


def _peak(fn) -> tuple[int, int]:
    """Peak memory during `fn()` and memory still held by its result (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    try:
        result = fn()
        retained = tracemalloc.get_traced_memory()[0]
        peak = tracemalloc.get_traced_memory()[1]
        del result
        return peak, retained
    finally:
        tracemalloc.stop()


def long_tuple_module(n: int = 200_000) -> Path:
    """One 200,000-element tuple line, the shape issue 13 found quadratic (cached under build/bench/)."""
    path = CACHE / f"tuple_{n}.hlo"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        params = "\n".join(f"  %p.{i} = f32[8]{{0}} parameter({i})" for i in range(n))
        shape = "(" + ", ".join("f32[8]{0}" for _ in range(n)) + ")"
        ops = ", ".join(f"%p.{i}" for i in range(n))
        path.write_text(f"HloModule tuple_{n}\n\nENTRY %e {{\n{params}\n  ROOT %t = {shape} tuple({ops})\n}}\n")
    return path


def measure(path: Path, repeat: int) -> dict:
    from jax._src.lib import xla_client as xc

    from analyzer.hlo.parser import parse_hlo

    text = path.read_text()
    mb = len(text.encode()) / 1e6
    parse_hlo("HloModule warm\nENTRY e {\n  ROOT p = f32[] parameter(0)\n}\n")  # build the Lark parser first
    t_xla, t_full, t_lazy = _best([lambda: xc.hlo.hlo_module_from_text(text), lambda: parse_hlo(text),
                                   lambda: _one_call(lambda: analysis_path(parse_hlo(text, lazy=True)))], repeat)
    peak_full, kept_full = _peak(lambda: parse_hlo(text))
    peak_lazy, kept_lazy = _peak(lambda: _one_call(lambda: _lazy_read(parse_hlo(text, lazy=True))))
    n = len(text.encode())
    return {"name": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path), "mb": mb,
            "xla": t_xla, "full": t_full, "lazy": t_lazy, "peak_full": peak_full / n, "kept_full": kept_full / n,
            "peak_lazy": peak_lazy / n, "kept_lazy": kept_lazy / n}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--layers", type=int, default=64)
    ap.add_argument("--fixtures", type=int, default=3, help="how many of the largest fixtures")
    ap.add_argument("--no-synthetic", action="store_true")
    ap.add_argument("--synthetic-mb", type=float, default=20.0,
                    help="size of the synthetic module (above 20: copies of the 20 MB one, no second compile)")
    ap.add_argument("--long-tuple", action="store_true", help="also a module with one 200,000-element tuple line")
    args = ap.parse_args(argv)

    paths = sorted((ROOT / "fixtures").rglob("*.hlo"), key=lambda p: p.stat().st_size, reverse=True)[:args.fixtures]
    if not args.no_synthetic:
        paths.append(synthetic_module(args.layers, args.synthetic_mb))
    if args.long_tuple:
        paths.append(long_tuple_module())
    print(f"{'text':<58} {'MB':>6} {'XLA MB/s':>9} {'full MB/s':>10} {'lazy MB/s':>10} {'full/XLA':>9} "
          f"{'lazy/XLA':>9} {'peak full':>10} {'kept full':>10} {'peak lazy':>10} {'kept lazy':>10}")
    for p in paths:
        r = measure(p, args.repeat)
        print(f"{r['name'][-58:]:<58} {r['mb']:6.2f} {r['mb'] / r['xla']:9.2f} {r['mb'] / r['full']:10.2f} "
              f"{r['mb'] / r['lazy']:10.2f} {r['full'] / r['xla']:8.2f}x {r['lazy'] / r['xla']:8.2f}x "
              f"{r['peak_full']:9.1f}x {r['kept_full']:9.1f}x {r['peak_lazy']:9.1f}x {r['kept_lazy']:9.1f}x")
    print("targets (issue 13): full/XLA <= 3x, lazy/XLA <= 1x, peak memory <= 8x the text size, kept <= 4x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
