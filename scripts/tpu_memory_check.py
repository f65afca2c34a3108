"""The cpu target's estimate of a TPU's memory against libtpu's own memory analysis (issue 25 item 4).

For each program, in one process: the cpu target's report (`memory`: the estimate of
`analyzer.analysis.tpumemory`, plus the CPU compiler's temporaries for contrast) and the TPU target's report
(`tpu:v5e:2x4`, ahead of time with libtpu: `compiled.memory_analysis()` of the final TPU program). Prints per
program the arguments, outputs and temporaries of both, and the estimate's error on the total, relative and in MiB
(arguments + outputs + HBM temporaries - aliased bytes; generated code left out: it is the size of the TPU
program, which the cpu target cannot see). Needs libtpu (`pip install -e '.[tpu]'`).

    JAX_PLATFORMS=cpu python scripts/tpu_memory_check.py [--only NAME] [--json OUT.json]

The programs: the chapter's training steps (examples/chapter.py) on 8 devices, and the template's MaxText-like
runs named in tpumemory.py's docstring (d_model 2048, d_ff 8192, 16 heads, 4 layers, sequence 2048, batch 16,
Adam; FSDP over 8 with and without full remat; FSDP 4 x TP 2 with a 32,000 vocabulary and a gated SiLU MLP).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
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


def _total(memory: dict[str, int]) -> int:
    return memory["argument_bytes"] + memory["output_bytes"] + memory["temp_bytes"] - memory["alias_bytes"]


def measure(name: str) -> dict[str, Any]:
    from analyzer import analyze

    mesh, make = PROGRAMS[name]
    fn, args = make()[:2]
    cpu = analyze(fn, *args, mesh=mesh).memory
    tpu = analyze(fn, *args, mesh=mesh, target=TPU_TARGET).memory
    return {"program": name, "estimate": dict(cpu), "libtpu": dict(tpu),
            "error": _total(cpu) / _total(tpu) - 1.0,
            "cpu_compiler_error": ((_total({**cpu, "temp_bytes": cpu["cpu_compiler_temp_bytes"]}) / _total(tpu) - 1.0)
                                   if "cpu_compiler_temp_bytes" in cpu else None)}


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", help="a program's name (repeatable); default: all")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    ns = parser.parse_args(argv)
    names = ns.only or list(PROGRAMS)
    unknown = [n for n in names if n not in PROGRAMS]
    if unknown:
        parser.error(f"unknown program(s) {unknown}; known: {list(PROGRAMS)}")
    rows = [measure(n) for n in names]
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
    if ns.json:
        ns.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
