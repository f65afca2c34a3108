"""What `hlo-analyzer check` costs in a pre-commit hook: cold (compile) and on an unchanged tree (the cache).

For two projects it prints, in one run:
  - `python -c pass`: the bare interpreter, the floor of any Python hook;
  - a cold check: the cache emptied, every entry point imported, compiled and analysed;
  - an unchanged check: the same command again, answered from `.hlo-analyzer-cache/` (no jax import).
The projects: the examples' entry point (examples/configs/mlp_step.py: a two-layer MLP step on data=4,
model=2, tpu-v5e) and a real-size model the suite builds, the 0.5B transformer of
examples/configs/fsdp-tp-v5e-8.toml (16 layers of d_model 2048, GQA, Adam, FSDP+TP) through
`analyzer.compile.models.build`. The target (issue 29): the unchanged check at most 1 s and at most 0.3 s
above the bare interpreter, whatever the model's size.

Beside check, the same for `hlo-analyzer report CONFIG -o report.html` on each project's report config (the
examples' examples/configs/entry-point.toml and fsdp-tp-v5e-8.toml, copied next to the model): cold (computed,
then stored in the same `.hlo-analyzer-cache/`) and unchanged (the stored report written again, no jax). No
target is set for report; the figures show what the cache saves when an audit report is asked again.

Every figure is the median of `--repeat` runs (the cold check runs once per project: it is seconds), each a
fresh process as pre-commit starts one. Python here may run with PYTHONDONTWRITEBYTECODE=1; an installed
package has its bytecode compiled, so the children get a bytecode folder of their own (PYTHONPYCACHEPREFIX)
warmed by one run before timing. `--no-bytecode` times without it (every module compiled from source each run).

Run: `python benchmarks/precommit.py [--repeat 5] [--no-bytecode]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PYPROJECT = textwrap.dedent("""\
    [project]
    name = "{name}"
    version = "0"

    [tool.hlo-analyzer]
    entry-points = ["{entry}"]
    mesh = {{ data = 4, model = 2 }}
    hardware = "tpu-v5e"
    """)

TRANSFORMER = textwrap.dedent("""\
    \"\"\"The 0.5B transformer of examples/configs/fsdp-tp-v5e-8.toml, as a project's entry point.\"\"\"

    from analyzer.compile.models import TransformerConfig, build


    def train_step(mesh):
        config = TransformerConfig(d_model=2048, d_ff=5632, heads=16, kv_heads=4, layers=16, seq=1024, batch=8,
                                   dtype="bfloat16", optimizer="adam")
        return build(config, "fsdp+tp", mesh)
    """)


def _projects(tmp: Path) -> dict[str, Path]:
    """Each project's folder; each holds `report.toml`, the report config of the same model."""
    examples = tmp / "examples-mlp"
    examples.mkdir()
    shutil.copy(REPO / "examples" / "configs" / "mlp_step.py", examples / "mlp_step.py")
    shutil.copy(REPO / "examples" / "configs" / "entry-point.toml", examples / "report.toml")
    (examples / "pyproject.toml").write_text(PYPROJECT.format(name="mlp", entry="mlp_step:train_step"))
    big = tmp / "transformer-0.5b"
    big.mkdir()
    (big / "model.py").write_text(TRANSFORMER)
    shutil.copy(REPO / "examples" / "configs" / "fsdp-tp-v5e-8.toml", big / "report.toml")
    (big / "pyproject.toml").write_text(PYPROJECT.format(name="lm", entry="model:train_step"))
    return {"examples' MLP step (mlp_step.py)": examples, "0.5B transformer, FSDP+TP (16 layers)": big}


def _time(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} in {cwd} failed ({proc.returncode}):\n{proc.stderr}")
    return elapsed, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure (median); default 5")
    parser.add_argument("--no-bytecode", action="store_true", help="time without compiled bytecode")
    opts = parser.parse_args()

    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "HLO_ANALYZER_NO_CACHE")}
    with tempfile.TemporaryDirectory(prefix="hlo-precommit-") as tmp_name:
        tmp = Path(tmp_name)
        if not opts.no_bytecode:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
        check = [sys.executable, "-m", "analyzer.cli", "check"]
        report = [sys.executable, "-m", "analyzer.cli", "report", "report.toml", "-o", "report.html"]
        bare = [sys.executable, "-c", "pass"]
        print(f"python {sys.version.split()[0]} ({sys.executable}), {os.cpu_count()} CPUs, "
              f"bytecode {'off' if opts.no_bytecode else 'on'}, median of {opts.repeat} runs")
        print(f"{'project':40s} {'command':>8s} {'bare python':>12s} {'cold':>9s} {'unchanged':>10s} "
              f"{'- bare':>8s} {'cold/unch.':>10s} {'target':>8s}")
        ok = True
        for name, root in _projects(tmp).items():
            _time([sys.executable, "-m", "analyzer.cli", "--help"], root, env)  # bytecode written once
            bare_runs = [_time(bare, root, env)[0] for _ in range(opts.repeat)]
            floor = statistics.median(bare_runs)
            # The cold check empties the cache (report's entries too): both commands start cold.
            for command, argv, first in (("check", check, [*check, "--clear-cache"]), ("report", report, report)):
                cold, code = _time(first, root, env)
                warm_runs = []
                for _ in range(opts.repeat):
                    elapsed, again = _time(argv, root, env)
                    if again != code:
                        raise SystemExit(f"{name}: the unchanged {command} exited {again}, the cold one {code}")
                    warm_runs.append(elapsed)
                warm = statistics.median(warm_runs)
                verdict = "-"
                if command == "check":
                    met = warm <= 1.0 and warm - floor <= 0.3
                    ok &= met
                    verdict = "met" if met else "MISSED"
                print(f"{name if command == 'check' else '':40s} {command:>8s} {floor:11.3f}s {cold:8.2f}s "
                      f"{warm:9.3f}s {warm - floor:+7.3f}s {cold / warm:9.0f}x {verdict:>8s}")
        print("target (check): unchanged <= 1 s and <= bare + 0.3 s; report: none (an audit, not a hook)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
