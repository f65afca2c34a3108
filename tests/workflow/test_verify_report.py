"""`hlo-analyzer report ... --verify-fixes` and `verify-fixes = true` in a report config (issue 26): the report
workflow applies each finding's change and recompiles, as `analyze --verify-fixes` does (analyzer.workflows.verify).

The fast tests read the config key and its refusals; the slow ones run the command on a small MLP step (the plans
of tests/rules/plans.py written as an entry point): its batch replicated (HA104 and HA101 share one change, the
batch's PartitionSpec) and its good plan (HA101's mesh fold, the entry point built again on the new mesh).
"""

from __future__ import annotations

import json

import pytest

from analyzer.errors import ConfigError
from analyzer.workflows.reportconfig import parse_report_config

ENTRY = '''
from pathlib import Path

import jax, jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

B, S, D, F = 32, 256, 512, 2048


def loss(params, batch):
    h = jax.nn.relu(batch["x"] @ params["w_in"])
    return jnp.mean(jnp.square(h @ params["w_out"] - batch["y"]).astype(jnp.float32))


def _step(mesh, x):
    with open(Path(__file__).with_name("meshes.txt"), "a") as f:  # each mesh the entry point is built on
        f.write(",".join(f"{a}={n}" for a, n in mesh.shape.items()) + "\\n")
    def a(shape, spec):
        return jax.ShapeDtypeStruct(shape, jnp.bfloat16, sharding=NamedSharding(mesh, spec))
    params = {"w_in": a((D, F), P(None, "model")), "w_out": a((F, D), P("model", None))}
    batch = {"x": a((B, S, D), x), "y": a((B, S, D), x)}
    return jax.jit(jax.value_and_grad(loss)), (params, batch)


def replicated(mesh):
    return _step(mesh, P())


def good(mesh):
    return _step(mesh, P("data"))
'''


def _config(tmp_path, function, extra=""):
    (tmp_path / "mlp_entry.py").write_text(ENTRY)
    path = tmp_path / f"{function}.toml"
    path.write_text(f'entry = "mlp_entry.py:{function}"\nhardware = "tpu-v5p"\n{extra}[mesh]\ndata = 4\nmodel = 2\n')
    return path


# ------------------------------------------------------------------------------------------- the config key
def test_the_config_key_is_read_and_checked():
    text = 'entry = "m:f"\n[mesh]\ndata = 8\n'
    assert parse_report_config(text).verify_fixes is False
    assert parse_report_config("verify-fixes = true\n" + text).verify_fixes is True
    assert parse_report_config("verify_fixes = false\n" + text).verify_fixes is False
    with pytest.raises(ConfigError, match="'verify-fixes' must be true or false") as e:
        parse_report_config('name = "x"\nverify-fixes = "yes"\n' + text, path="c.toml")
    assert e.value.line == 2


def test_a_maxtext_entry_refuses_it_at_its_line():
    text = 'entry = "maxtext:model_name=llama2-7b compile_topology=v5e-256"\nverify-fixes = true\n'
    with pytest.raises(ConfigError, match="MaxText builds its own arguments") as e:
        parse_report_config(text, path="c.toml")
    assert e.value.line == 2


def test_the_command_takes_the_flag():
    import argparse

    from analyzer.cli import report

    parser = argparse.ArgumentParser()
    report.register(parser.add_subparsers())
    assert parser.parse_args(["report", "c.toml", "--verify-fixes"]).verify_fixes is True
    assert parser.parse_args(["report", "c.toml"]).verify_fixes is False


# ------------------------------------------------------------------------------------------- compiled
@pytest.mark.slow
def test_the_config_key_verifies_the_replicated_batch_s_one_change(tmp_path, monkeypatch, capsys):
    """The batch replicated over 'data': HA104 and HA101 name the same change (the batch's spec; no mesh fold,
    which made this step slower), compiled once, and each saves at least half its promise."""
    from analyzer.cli import main

    config = _config(tmp_path, "replicated", "verify-fixes = true\n")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "report.json"
    assert main(["report", str(config), "-o", str(out), "--no-cache"]) in (0, 1)
    capsys.readouterr()
    data = json.loads(out.read_text())
    found = {d["code"]: d for d in data["diagnostics"]}
    assert {"HA104", "HA101"} <= set(found)
    for code in ("HA104", "HA101"):
        details = found[code]["details"]
        assert details["verified_change"] == "batch['x'] -> P('data', None, None)"
        assert details["verified_findings"] == 2
        assert details["verified_saving_seconds"] >= 0.5 * found[code]["saving_seconds"] > 0
    assert found["HA101"]["details"]["fix_mesh"] == {}
    assert any("1 distinct change applied and recompiled" in n for n in data["notes"])


@pytest.mark.slow
def test_the_flag_rebuilds_the_entry_point_on_a_mesh_change(tmp_path, monkeypatch, capsys):
    """The good plan's HA101 folds 'model' into 'data': the entry point is called again on data=8, model=1."""
    from analyzer.cli import main

    config = _config(tmp_path, "good")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "report.json"
    assert main(["report", str(config), "-o", str(out), "--verify-fixes", "--no-cache"]) in (0, 1)
    capsys.readouterr()
    data = json.loads(out.read_text())
    (fold,) = [d for d in data["diagnostics"] if d["code"] == "HA101"]
    assert fold["details"]["verified_change"] == "mesh model=1, data=8"
    assert fold["details"]["verified_saving_seconds"] >= 0.5 * fold["saving_seconds"] > 0
    # built on the new mesh by the entry point, not its arguments moved onto it
    assert (tmp_path / "meshes.txt").read_text().split() == ["data=4,model=2", "data=4,model=2", "data=8,model=1"]
