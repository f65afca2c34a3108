"""`hlo-analyzer diff`: matching collectives between two analyses, time deltas, the regression gate."""

from __future__ import annotations

import json

import pytest

from analyzer.cli import main
from analyzer.workflows.diff import Diff, diff_programs, parse_threshold
from analyzer.render.diff import render_text

AG = dict(kind="all-gather", axes=("data",), notation="AllGather_data: [D_data, F] -> [D, F]", dtype="bf16",
          bytes=4 << 20, count=24, seconds=5e-6, total_seconds=120e-6, source="model.py:42", op_name="dot_general")
AR = dict(kind="all-reduce", axes=("model",), notation="AllReduce_model: [B, D]{U_model} -> [B, D]", dtype="f32",
          bytes=2 << 20, count=24, seconds=2e-6, total_seconds=48e-6, source="model.py:57", op_name="dot_general")
PERM = dict(kind="collective-permute", axes=("data",), notation="CollectivePermute_data: [B_data, D]",
            dtype="bf16", bytes=1 << 20, count=1, seconds=10e-6, total_seconds=10e-6, source="", op_name="ppermute")


def test_matching_added_removed_changed_and_time_deltas():
    bigger_ar = {**AR, "bytes": 4 << 20, "seconds": 4e-6, "total_seconds": 96e-6}
    d = diff_programs("step", [AR, PERM], [AG, bigger_ar])
    by = {c.status: c for c in d.changes}
    assert sorted(by) == ["added", "changed", "removed"] and d.unchanged == 0
    assert by["added"].new["kind"] == "all-gather"
    assert by["changed"].old["bytes"] == 2 << 20 and by["changed"].new["bytes"] == 4 << 20
    assert by["changed"].delta_seconds == pytest.approx(48e-6, rel=1e-12)
    assert by["removed"].old["kind"] == "collective-permute"
    # comm per step: (48 + 10) us -> (120 + 96) us
    assert d.old_seconds == pytest.approx(58e-6) and d.new_seconds == pytest.approx(216e-6)
    assert [c.status for c in d.changes] == ["added", "changed", "removed"]  # largest |delta| first


def test_identical_programs_have_no_changes_and_duplicates_count_as_multisets():
    d = diff_programs("step", [AR, AR], [AR, AR])
    assert d.changes == () and d.unchanged == 2
    d = diff_programs("step", [AR], [AR, AR])
    assert [c.status for c in d.changes] == ["added"] and d.unchanged == 1


def test_a_resized_collective_without_source_is_changed_not_added_and_removed():
    old = {**PERM, "notation": "CollectivePermute_data: [B_data, D]", "op_name": ""}
    new = {**old, "bytes": 2 << 20, "total_seconds": 20e-6}
    d = diff_programs("step", [old], [new])
    assert [c.status for c in d.changes] == ["changed"]


@pytest.mark.parametrize("text, value, relative", [("5%", 0.05, True), ("200us", 2e-4, False),
                                                   ("1.5ms", 1.5e-3, False), ("0.002", 2e-3, False)])
def test_thresholds(text, value, relative):
    t = parse_threshold(text)
    assert t.value == pytest.approx(value) and t.relative is relative


def test_threshold_semantics():
    assert parse_threshold("5%").exceeded(100e-6, 106e-6)
    assert not parse_threshold("5%").exceeded(100e-6, 104e-6)
    assert parse_threshold("10us").exceeded(100e-6, 111e-6)
    assert not parse_threshold("10us").exceeded(100e-6, 50e-6)  # faster never regresses


def test_text_shows_each_change():
    d = diff_programs("step", [AR], [AG, AR])
    text = render_text(Diff("a.json", "b.json", (d,)), threshold=parse_threshold("5%"))
    lines = text.splitlines()
    assert lines[2].startswith("step: 1 added, 1 unchanged; comm 48.0 µs -> 168 µs per step (+120 µs, +250.0%)")
    assert "REGRESSION over 5%" in lines[2]
    assert lines[3].split()[:3] == ["+", "all-gather", "AllGather_data:"]
    assert "4.00 MiB x24" in lines[3] and "+120 µs/step" in lines[3] and lines[3].endswith("model.py:42")


def test_cli_on_json_reports_exits_1_over_the_threshold(tmp_path, make_report, capsys):
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(make_report([AR]).to_json())
    new.write_text(make_report([AR, AG]).to_json())
    assert main(["diff", str(old), str(new)]) == 0  # no threshold: informational
    assert main(["diff", str(old), str(new), "--max-regression", "5%"]) == 1
    assert main(["diff", str(new), str(old), "--max-regression", "5%"]) == 0  # removing is not a regression
    capsys.readouterr()
    assert main(["diff", str(old), str(new), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    import pathlib

    import jsonschema

    schema = json.loads((pathlib.Path(__file__).parents[2] / "docs" / "diff-output-schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(data)
    assert data["programs"][0]["added"] == 1 and data["programs"][0]["changes"][0]["new"]["kind"] == "all-gather"


@pytest.mark.parametrize("argv, message", [
    (["diff", "nope.json", "nope2.json"], "no such file or folder"),
    (["diff", "a.json"], "the following arguments are required: NEW"),
    (["diff", "{old}", "{old}", "--max-regression", "lots"], "regression threshold 'lots' is not valid"),
])
def test_cli_bad_arguments_exit_2(tmp_path, make_report, monkeypatch, capsys, argv, message):
    old = tmp_path / "old.json"
    old.write_text(make_report([AR]).to_json())
    monkeypatch.chdir(tmp_path)
    try:
        code = main([a.format(old=old) for a in argv])
    except SystemExit as e:
        code = e.code
    assert code == 2 and message in capsys.readouterr().err


def test_not_a_report_is_named(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text('{"hello": 1}')
    assert main(["diff", str(bad), str(bad)]) == 2
    assert "x.json" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_on_two_hlo_dumps(tmp_path, capsys):
    """Two real dumps (post-SPMD HLO of a matmul before and after resharding its weight)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    from analyzer.compile.lower import lower

    mesh = jax.make_mesh((8,), ("X",), axis_types=(jax.sharding.AxisType.Auto,))
    x = jax.ShapeDtypeStruct((64, 256), jnp.float32, sharding=NamedSharding(mesh, P("X", None)))
    paths = []
    for name, w_spec in (("replicated", P()), ("sharded", P("X", None))):
        w = jax.ShapeDtypeStruct((256, 128), jnp.float32, sharding=NamedSharding(mesh, w_spec))
        path = tmp_path / f"{name}.hlo"
        path.write_text(lower(lambda x, w: x @ w, x, w, mesh=mesh).spmd_hlo)
        paths.append(str(path))
    # W[D_X, F] with In[B_X, D]: XLA gathers W over X (AllGather_X, 128 KiB), where the replicated W needed none.
    assert main(["diff", *paths, "--mesh", "X=8", "--max-regression", "1us"]) == 1
    out = capsys.readouterr().out
    added = [ln for ln in out.splitlines() if ln.strip().startswith("+ ")]
    assert len(added) == 1 and "all-gather" in added[0] and "AllGather_X" in added[0]


@pytest.mark.slow
def test_cli_on_two_report_configs(tmp_path, capsys):
    """Report configs of the built-in template: data parallel against FSDP on the same 8 devices."""
    base = ('target = "cpu"\nhardware = "tpu-v5e"\n[mesh]\ndata = 8\n[model]\nd_model = 256\nd_ff = 512\n'
            'heads = 4\nkv_heads = 4\nlayers = 2\nseq = 16\nbatch = 8\nattention = false\n')
    (tmp_path / "dp.toml").write_text(f'name = "step"\nstrategy = "dp"\n{base}')
    (tmp_path / "fsdp.toml").write_text(f'name = "step"\nstrategy = "fsdp"\n{base}')
    assert main(["diff", str(tmp_path / "dp.toml"), str(tmp_path / "fsdp.toml"), "--json"]) == 0
    import json

    data = json.loads(capsys.readouterr().out)
    program = data["programs"][0]
    kinds = {c["new"]["kind"] for c in program["changes"] if c["status"] in ("added", "changed") and c["new"]}
    # FSDP gathers the weights before use (AllGather_data), where data parallelism keeps them whole.
    assert "all-gather" in kinds
    assert program["name"] == "step"
