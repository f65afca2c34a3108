"""The check's result cache on real compiles, each check in its own process as pre-commit runs it: an
unchanged tree is answered without importing jax, byte for byte; a PartitionSpec change recomputes and the
new finding names the argument, its old and new spec and the changed line; concurrent checks and parallel
compiles give the same output as one check alone.

The project is the issue's: a package with two einsum layers and an SGD step, one entry point per step, mesh
data=4, model=2, tpu-v5e.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # real compiles in child processes (a few seconds each)

LAYERS = textwrap.dedent("""\
    import jax.numpy as jnp


    def mlp(params, x):
        h = jnp.einsum("bd,df->bf", x, params["w_in"])
        return jnp.einsum("bf,fd->bd", jnp.tanh(h), params["w_out"])
    """)

TRAIN = textwrap.dedent("""\
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    from toy.layers import mlp

    B, D, F = 256, 1024, 4096


    def loss(params, x):
        return jnp.mean(mlp(params, x) ** 2)


    def sgd(params, x):
        grads = jax.grad(loss)(params, x)
        return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads)


    def train_step(mesh):
        def sds(shape, spec):
            return jax.ShapeDtypeStruct(shape, jnp.bfloat16, sharding=NamedSharding(mesh, spec))

        params = {
            "w_in": sds((D, F), P(None, "model")),
            "w_out": sds((F, D), P("model", None)),
        }
        x = sds((B, D), P("data", None))
        return jax.jit(sgd), (params, x)
    """)

PYPROJECT = textwrap.dedent("""\
    [project]
    name = "toy"
    version = "0"

    [tool.hlo-analyzer]
    entry-points = ["toy.train:train_step"]
    mesh = { data = 4, model = 2 }
    hardware = "tpu-v5e"
    """)

PROBE = ("import sys\n"
         "from analyzer.cli import main\n"
         "code = main(sys.argv[1:])\n"
         "sys.stdout.flush()\n"
         "print('IMPORTED:' + ','.join(sorted(m for m in ('jax', 'jaxlib', 'numpy', 'pandas', 'lark') "
         "if m in sys.modules)), file=sys.stderr)\n"
         "sys.exit(code)\n")


def write_toy(root: Path, *, layers: str = LAYERS, train: str = TRAIN, pyproject: str = PYPROJECT,
              commit: bool = False) -> Path:
    """The toy project at `root` (package `toy` with layers.py and train.py, and its pyproject.toml); with
    `commit`, a git repository of one commit holding it."""
    (root / "toy").mkdir(parents=True)
    (root / "toy" / "__init__.py").write_text("")
    (root / "toy" / "layers.py").write_text(layers)
    (root / "toy" / "train.py").write_text(train)
    (root / "pyproject.toml").write_text(pyproject)
    if commit:
        git = ["git", "-c", "user.email=t@t", "-c", "user.name=t", "-C", str(root)]
        for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "toy"]):
            subprocess.run([*git, *args], check=True, capture_output=True)
    return root


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    return write_toy(tmp_path / "toy-project")


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> tuple[Path, Path, tuple[int, str, str]]:
    """The unchanged toy project checked once, cold, with JSON output: (its folder, a copy of it with the cache
    that check wrote, that check's result). Two tests start from this tree and this result; compiling it again
    for each would be the same cold check twice."""
    base = tmp_path_factory.mktemp("checked")
    root = write_toy(base / "toy-project")
    cold = check(root, "--output-format", "json")
    shutil.copytree(root, base / "as-checked", symlinks=True)
    return root, base / "as-checked", cold


def restore(saved: Path, root: Path) -> Path:
    """`root` as a module fixture's first run left it (`saved`, its copy, the cache included), back at the folder it
    ran in: a cache entry is the project's, at its path (test_report_cache.py starts from its cold run the same way)."""
    shutil.rmtree(root)
    shutil.copytree(saved, root, symlinks=True)
    return root


@pytest.fixture
def checked_toy(checked) -> tuple[Path, tuple[int, str, str]]:
    """The checked toy project as that first check left it, at the folder it was checked in, and the cold check's
    result."""
    root, saved, cold = checked
    return restore(saved, root), cold


def child_env() -> dict[str, str]:
    """The environment of a `report` or `diff` run in a fresh process (test_report_cache.py, test_diff_cache.py):
    the session's, less HLO_ANALYZER_NO_CACHE. The session's XLA_FLAGS (its fake devices, tests/conftest.py) stay,
    so a cold run compiles in its own process rather than starting a second child that imports jax again
    (tests/lower/test_lower.py covers that path): what those tests check, what is cached, replayed and
    recomputed, is the same. (`check` below prepares its own devices before jax starts, as a user's does, so
    its runs here keep the environment without XLA_FLAGS: the session's would save nothing there.)"""
    return {k: v for k, v in os.environ.items() if k != "HLO_ANALYZER_NO_CACHE"}


def check(root: Path, *argv: str) -> tuple[int, str, str]:
    """`hlo-analyzer check ARGV` in a fresh process at `root`; (exit status, stdout, stderr less the probe)."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "HLO_ANALYZER_NO_CACHE")}
    proc = subprocess.run([sys.executable, "-c", PROBE, "check", *argv], cwd=root, env=env, capture_output=True,
                          text=True, timeout=600)
    return proc.returncode, proc.stdout, proc.stderr


def imported(err: str) -> str:
    return next(line for line in err.splitlines() if line.startswith("IMPORTED:"))[len("IMPORTED:"):]


def test_an_unchanged_tree_is_answered_without_jax_and_the_same_bytes(checked_toy):
    toy, cold = checked_toy
    assert cold[0] == 1 and "jax" in imported(cold[2])
    warm = check(toy, "--output-format", "json")
    assert warm[:2] == cold[:2]
    assert imported(warm[2]) == ""  # no jax, jaxlib, numpy, pandas or lark on a hit
    (toy / "NOTES.md").write_text("unrelated\n")
    assert check(toy, "--output-format", "json")[:2] == cold[:2]


def test_a_spec_change_names_the_argument_its_specs_and_the_changed_line(checked_toy):
    # The unchanged tree's findings, read back from the cache the cold check wrote (the cache keeps a check's
    # result whatever the output format; that a replayed text output is the computed one's bytes is
    # test_concurrent_checks_agree_and_leave_a_whole_cache's last line).
    toy, _ = checked_toy
    before = check(toy)
    assert imported(before[2]) == ""
    train = toy / "toy" / "train.py"
    train.write_text(TRAIN.replace('"w_out": sds((F, D), P("model", None))', '"w_out": sds((F, D), P(None, "model"))'))
    after = check(toy)
    assert "jax" in imported(after[2])  # recomputed
    assert after[1] != before[1]
    line = next(i for i, text in enumerate(train.read_text().splitlines(), 1) if '"w_out"' in text)
    said = [s for s in after[1].splitlines() if "Changed since the last check" in s]
    assert said, after[1]
    assert all("params['w_out']: P('model', None) -> P(None, 'model')" in s for s in said)
    assert all(f"toy/train.py:{line}:" in s for s in said)
    # The collective's own line stays: the findings are still placed in layers.py, where the einsums are.
    assert "toy/layers.py:" in after[1]
    # Reverting gives the first result back, from the cache.
    train.write_text(TRAIN)
    reverted = check(toy)
    assert reverted[:2] == before[:2] and imported(reverted[2]) == ""


def test_concurrent_checks_agree_and_leave_a_whole_cache(toy):
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "HLO_ANALYZER_NO_CACHE")}
    procs = [subprocess.Popen([sys.executable, "-m", "analyzer.cli", "check"], cwd=toy, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=600), p.stdout.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    assert results[0] == results[1] and results[0][0] == 1
    leftovers = [p for p in (toy / ".hlo-analyzer-cache").rglob("*") if p.name.endswith((".tmp", ".lock"))]
    assert leftovers == []
    warm = check(toy)
    assert (warm[0], warm[1]) == results[0] and imported(warm[2]) == ""


def test_entry_points_compile_in_parallel_in_the_configured_order(toy):
    (toy / "toy" / "other.py").write_text(TRAIN.replace("def train_step(", "def eval_step("))
    text = PYPROJECT.replace('entry-points = ["toy.train:train_step"]',
                             'entry-points = ["toy.train:train_step", "toy.other:eval_step"]')
    (toy / "pyproject.toml").write_text(text)
    sequential = check(toy, "--no-cache", "--jobs", "1")
    parallel = check(toy, "--jobs", "2", "--output-format", "json")
    assert parallel[0] == sequential[0] == 1
    names = [e["name"] for e in json.loads(parallel[1])["entry_points"]]
    assert names == ["toy.train:train_step", "toy.other:eval_step"]
    # The text names what the findings are and where; the JSON also carries each instruction's line in the
    # HLO, which differs between one process compiling both programs and a process per program.
    assert check(toy)[:2] == sequential[:2]
