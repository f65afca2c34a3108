"""The pre-commit hook end to end: `pre-commit try-repo` on a sample repository fails on a planted finding
and passes once it is fixed.

The sample is a git repository with a pyproject.toml whose [tool.hlo-analyzer] names one entry point, and a
model whose activations are sharded on the contracting dimension (`In[B, D_data] . W[D_data, F]`): XLA adds an
AllReduce over `data` to every step, which the comm-bound-matmul rule flags. The fix shards the batch instead
(`In[B_data, D] . W[D, F]`, pure data parallelism: no communication in the forward step).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # two real compiles inside pre-commit (about 10 s each)

HOOK_REPO = Path(__file__).resolve().parents[2]

MODEL = textwrap.dedent("""\
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P


    def forward(x, w):
        return jnp.tanh(x @ w)


    def train_step(mesh):
        x = jax.ShapeDtypeStruct((256, 1024), jnp.bfloat16, sharding=NamedSharding(mesh, P({x_spec})))
        w = jax.ShapeDtypeStruct((1024, 4096), jnp.bfloat16, sharding=NamedSharding(mesh, P({w_spec})))
        return jax.jit(forward), (x, w)
    """)

PYPROJECT = textwrap.dedent("""\
    [project]
    name = "sample-model"
    version = "0"

    [tool.hlo-analyzer]
    entry-points = ["model:train_step"]
    mesh = { data = 8 }
    hardware = "tpu-v5e"
    """)


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PRE_COMMIT_HOME=str(tmp / "pre-commit-cache"),
        JAX_PLATFORMS="cpu",
        GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.com",
        # The hook is `language: system`: it runs the hlo-analyzer of this environment.
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
    )
    env.pop("XLA_FLAGS", None)  # the hook process decides its own device count
    return env


def _git(repo: Path, *args: str, env: dict[str, str]) -> None:
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)


def _try_repo(repo: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(HOOK_REPO), "hlo-analyzer", "--all-files"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=600,
    )


def test_try_repo_fails_on_a_planted_finding_and_passes_after_the_fix(tmp_path):
    assert (HOOK_REPO / ".pre-commit-hooks.yaml").is_file()
    assert shutil.which("hlo-analyzer", path=_env(tmp_path)["PATH"]), "hlo-analyzer must be installed"
    env = _env(tmp_path)
    repo = tmp_path / "sample"
    repo.mkdir()
    (repo / "pyproject.toml").write_text(PYPROJECT)
    (repo / "model.py").write_text(MODEL.format(x_spec='None, "data"', w_spec='"data", None'))
    _git(repo, "init", "-q", env=env)
    _git(repo, "add", "-A", env=env)
    _git(repo, "commit", "-q", "-m", "model with a planted finding", env=env)

    planted = _try_repo(repo, env)
    out = planted.stdout + planted.stderr
    assert planted.returncode == 1, out
    assert "hlo-analyzer check" in out and "Failed" in out
    assert "model.py:7: HA101 comm-bound-matmul" in out  # the user's line: `return jnp.tanh(x @ w)`
    assert "AllReduce_data" in out

    (repo / "model.py").write_text(MODEL.format(x_spec='"data", None', w_spec=""))
    _git(repo, "commit", "-q", "-am", "shard the batch, not the contraction", env=env)
    fixed = _try_repo(repo, env)
    out = fixed.stdout + fixed.stderr
    assert fixed.returncode == 0, out
    assert "Passed" in out
