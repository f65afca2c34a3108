"""The cpu target's estimate of a TPU's memory against libtpu's own memory analysis (issue 25 item 4).

For each program, in one process: the cpu target's report (`memory`: the estimate of
`analyzer.analysis.tpumemory`, plus the CPU compiler's temporaries for contrast) and the TPU target's report
(`tpu:v5e:2x4`, ahead of time with libtpu: `compiled.memory_analysis()` of the final TPU program). Prints per
program the arguments, outputs and temporaries of both, and the estimate's error on the total, relative and in MiB
(arguments + outputs + HBM temporaries - aliased bytes; generated code left out: it is the size of the TPU
program, which the cpu target cannot see). Needs libtpu (`pip install -e '.[tpu]'`).

    JAX_PLATFORMS=cpu python scripts/tpu_memory_check.py [--only NAME] [--json OUT.json] [--dump DIR] [--probes]

`--dump DIR` keeps libtpu's dumps of each TPU compile in DIR/<program> (`xla_dump_to`): its buffer assignment
(`*after_optimizations-buffer-assignment.txt`), the final schedule's live ranges (`*-live-range.txt`) and the
final HLO, which is where the estimate's rules come from (tpumemory.py's docstring); the table then also gives
the size of libtpu's HBM heap of temporaries (the `preallocated-temp` allocation of color 0), how many
16 KiB slots of it hold tuple index tables, and libtpu's `temp_size_in_bytes` less that heap: the two are not
the same figure (docs/step.md, "TPU memory").

`--probes` adds programs that are not examples but test what libtpu's temporaries are made of (`PROBES`): the
chapter's MLP-only step with one scanned layer (no loop) and with four, and a small jax training step of its
own (a scanned two-matrix MLP, value_and_grad, SGD) whose heap holds as many tuple index tables as the
chapter's MLP step's.

The programs: the chapter's training steps (examples/chapter.py) on 8 devices, and the template's MaxText-like
runs named in tpumemory.py's docstring (d_model 2048, d_ff 8192, 16 heads, 4 layers, sequence 2048, batch 16,
Adam; FSDP over 8 with and without full remat; FSDP 4 x TP 2 with a 32,000 vocabulary and a gated SiLU MLP).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TPU_TARGET = "tpu:v5e:2x4"


def _template(strategy: str, mesh: str, **overrides: Any) -> Callable[[], tuple[Any, tuple[Any, ...]]]:
    def make() -> tuple[Any, tuple[Any, ...]]:
        from analyzer.compile.models import TransformerConfig, build

        base = {"d_model": 2048, "d_ff": 8192, "heads": 16, "layers": 4, "seq": 2048, "batch": 16,
                "optimizer": "adam"}
        return build(TransformerConfig(**{**base, **overrides}), strategy, mesh)
    return make


def _chapter(name: str, mesh: str) -> Callable[[], tuple[Any, tuple[Any, ...]]]:
    def make() -> tuple[Any, tuple[Any, ...]]:
        from analyzer.compile.lower import make_mesh
        from examples import chapter

        return getattr(chapter, name)(make_mesh(mesh))
    return make


PROGRAMS: dict[str, tuple[str, Callable[[], tuple[Any, tuple[Any, ...]]]]] = {
    "chapter dp_step X=8": ("X=8", _chapter("dp_step", "X=8")),
    "chapter fsdp_step X=8": ("X=8", _chapter("fsdp_step", "X=8")),
    "chapter tp_step X=4,Y=2": ("X=4,Y=2", _chapter("tp_step", "X=4,Y=2")),
    "chapter fsdp_tp_step X=4,Y=2": ("X=4,Y=2", _chapter("fsdp_tp_step", "X=4,Y=2")),
    "chapter ep_step X=4,Y=2": ("X=4,Y=2", _chapter("ep_step", "X=4,Y=2")),
    "template fsdp 8, no remat": ("data=8", _template("fsdp", "data=8")),
    "template fsdp 8, full remat": ("data=8", _template("fsdp", "data=8", remat="full")),
    "template fsdp 4 x tp 2, vocab, gated": ("data=4,model=2",
                                             _template("fsdp+tp", "data=4,model=2", vocab=32000,
                                                       mlp="gated_silu")),
}


def _chapter_mlp(layers: int) -> Callable[[], tuple[Any, tuple[Any, ...]]]:
    def make() -> tuple[Any, tuple[Any, ...]]:
        from analyzer.compile.lower import make_mesh
        from analyzer.compile.models import TransformerConfig, build
        from examples import chapter

        config = {**chapter.STEP_CONFIG.to_dict(), "attention": False, "norm": False, "layers": layers}
        return build(TransformerConfig(**config), "fsdp", make_mesh("X=8"))
    return make


def _scan_sgd() -> tuple[Any, tuple[Any, ...]]:
    """A training step of this script's own: four scanned layers of a two-matrix MLP (bf16, weights split over
    X on their last dim), the mean of the output as the loss, value_and_grad, an SGD update; returns the new
    weights and the loss, as the template's step does."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec

    from analyzer.compile.lower import make_mesh

    mesh = make_mesh("X=8")

    def loss(ws: Any, a: Any) -> Any:
        out, _ = jax.lax.scan(lambda c, w: (jnp.tanh(c @ w[0]) @ w[1], None), a, ws)
        return out.astype(jnp.float32).mean()

    def step(ws: Any, a: Any) -> Any:
        value, grads = jax.value_and_grad(loss)(ws, a)
        return ws - 0.1 * grads, value

    ws = jax.ShapeDtypeStruct((4, 2, 256, 256), jnp.bfloat16,
                              sharding=NamedSharding(mesh, PartitionSpec(None, None, None, "X")))
    a = jax.ShapeDtypeStruct((64, 256), jnp.bfloat16, sharding=NamedSharding(mesh, PartitionSpec("X")))
    return jax.jit(step), (ws, a)


PROBES: dict[str, tuple[str, Callable[[], tuple[Any, tuple[Any, ...]]]]] = {
    "probe chapter MLP fsdp X=8, 1 layer": ("X=8", _chapter_mlp(1)),
    "probe chapter MLP fsdp X=8, 4 layers": ("X=8", _chapter_mlp(4)),
    "probe scanned MLP, SGD, X=8": ("X=8", _scan_sgd),
}


def _total(memory: dict[str, int]) -> int:
    return memory["argument_bytes"] + memory["output_bytes"] + memory["temp_bytes"] - memory["alias_bytes"]


@contextlib.contextmanager
def _libtpu_dumps(folder: Path | None) -> Iterator[None]:
    """While inside, each TPU compile writes libtpu's dumps into `folder` (the compile job's own `dump_dir`)."""
    if folder is None:
        yield
        return
    from analyzer.compile import lower

    compile_job = lower._compile_job  # noqa: SLF001 - a measuring script reading the compiler's own dumps

    def dumping(job: Any, devices: Any = None, after_spmd: Any = None) -> Any:
        if job.get("platform") == "tpu":
            folder.mkdir(parents=True, exist_ok=True)
            job = {**job, "dump_dir": str(folder)}
        return compile_job(job, devices, after_spmd)

    lower._compile_job = dumping  # noqa: SLF001
    try:
        yield
    finally:
        lower._compile_job = compile_job  # noqa: SLF001


def heap_of(folder: Path) -> dict[str, int] | None:
    """libtpu's HBM heap of temporaries from its buffer-assignment dump: its bytes, and how many 16 KiB-aligned
    slots of it hold a tuple's index table (a 512-byte value of tuple shape)."""
    found = sorted(folder.glob("*after_optimizations-buffer-assignment.txt"))
    if not found:
        return None
    heap, slots, in_heap = 0, set(), False
    for line in found[0].read_text().splitlines():
        m = re.match(r"allocation \d+: size (\d+),(.*):$", line)
        if m:
            in_heap = "preallocated-temp" in m.group(2) and "color" not in m.group(2)
            heap += int(m.group(1)) if in_heap else 0
        elif in_heap:
            v = re.match(r" value: <\d+ \S+ (?:\(phi\) )?@0> \(size=(\d+),offset=(\d+)\): \(", line)
            if v:
                slots.add(int(v.group(2)))
    return {"heap_bytes": heap, "tuple_slots": len(slots)}


def measure(name: str, dump: Path | None = None) -> dict[str, Any]:
    from analyzer import analyze

    mesh, make = {**PROGRAMS, **PROBES}[name]
    fn, args = make()[:2]
    cpu = analyze(fn, *args, mesh=mesh).memory
    folder = dump / re.sub(r"[^A-Za-z0-9]+", "_", name) if dump is not None else None
    with _libtpu_dumps(folder):
        tpu = analyze(fn, *args, mesh=mesh, target=TPU_TARGET).memory
    heap = heap_of(folder) if folder is not None else None
    return {"program": name, "estimate": dict(cpu), "libtpu": dict(tpu), "libtpu_heap": heap,
            "error": _total(cpu) / _total(tpu) - 1.0,
            "cpu_compiler_error": ((_total({**cpu, "temp_bytes": cpu["cpu_compiler_temp_bytes"]}) / _total(tpu) - 1.0)
                                   if "cpu_compiler_temp_bytes" in cpu else None)}


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", help="a program's name (repeatable); default: all")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    parser.add_argument("--dump", type=Path, help="keep libtpu's dumps (buffer assignment) in DIR/<program>")
    parser.add_argument("--probes", action="store_true", help="also the probe programs (PROBES)")
    ns = parser.parse_args(argv)
    known = {**PROGRAMS, **PROBES}
    names = ns.only or list(PROGRAMS) + (list(PROBES) if ns.probes else [])
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown program(s) {unknown}; known: {list(known)}")
    rows = [measure(n, ns.dump) for n in names]
    print(f"estimate (cpu target) against libtpu's memory analysis ({TPU_TARGET}), MiB per device")
    print("| program | args est / libtpu | outputs est / libtpu | HBM temps est / libtpu | temps in VMEM (est) | "
          "total error | total error, MiB | CPU compiler's total error |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        e, t = r["estimate"], r["libtpu"]
        cpu_err = f"{r['cpu_compiler_error']:+.1%}" if r["cpu_compiler_error"] is not None else "-"
        print(f"| {r['program']} | {_mib(e['argument_bytes'])} / {_mib(t['argument_bytes'])} | "
              f"{_mib(e['output_bytes'])} / {_mib(t['output_bytes'])} | {_mib(e['temp_bytes'])} / "
              f"{_mib(t['temp_bytes'])} | {_mib(e.get('vmem_temp_bytes', 0))} | {r['error']:+.1%} | "
              f"{(_total(e) - _total(t)) / 2**20:+,.1f} | {cpu_err} |")
    heaps = [(r["program"], r["libtpu_heap"], r["libtpu"]["temp_bytes"]) for r in rows if r.get("libtpu_heap")]
    if heaps:
        print("\nlibtpu's HBM heap of temporaries (buffer assignment), MiB; tuple index tables: 16 KiB slots; "
              "libtpu's temp_size_in_bytes less the heap, KiB")
        for program, h, temp in heaps:
            print(f"  {program}: heap {_mib(h['heap_bytes'])}, {h['tuple_slots']} tuple slots, "
                  f"temp - heap {(temp - h['heap_bytes']) / 1024:+,.1f}")
    if ns.json:
        ns.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
