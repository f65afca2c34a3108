"""`hlo-analyzer report` and `hlo-analyzer sweep`: help with examples, exit 2 on bad input, real runs."""

import json
from pathlib import Path

import jsonschema
import pytest

from analyzer.cli import main

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "report-schema.json").read_text())

CONFIG = """\
name = "small FSDP"
strategy = "fsdp"
target = "cpu"
hardware = "tpu-v5e"

[mesh]
data = 8

[model]
d_model = 256
d_ff = 1024
heads = 4
kv_heads = 4
layers = 2
seq = 64
batch = 16
dtype = "bf16"
optimizer = "sgd"
"""


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "small.toml"
    path.write_text(CONFIG)
    return path


@pytest.mark.parametrize("command", ["report", "sweep"])
def test_help_explains_with_examples(command, capsys):
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert "examples:" in text and f"hlo-analyzer {command} examples/configs/" in text
    assert "exit status" in text


@pytest.mark.parametrize("argv, message", [
    (["report"], "the following arguments are required"),
    (["sweep", "c.toml", "--mesh-shapes", "8y1"], "write sizes joined by 'x'"),
    (["sweep", "c.toml", "--strategies", "fsdq"], "did you mean 'fsdp'"),
    (["sweep", "c.toml", "--jobs", "0"], "--jobs must be a positive integer"),
    (["report", "c.toml", "--what-if", ","], "HARDWARE[@TOPOLOGY]"),
])
def test_bad_arguments_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_inputs_exit_2_with_the_reason(config, tmp_path, capsys):
    assert main(["report", str(tmp_path / "missing.toml")]) == 2
    assert "no such config file" in capsys.readouterr().err
    assert main(["report", str(config), "-o", str(tmp_path / "r.pdf")]) == 2
    assert "valid extensions" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text(CONFIG.replace("layers = 2", "layer = 2"))
    assert main(["report", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:14" in err and "did you mean 'layers'" in err and "Traceback" not in err
    assert main(["sweep", str(config), "--mesh-shapes", "8,4"]) == 2
    assert "different numbers of devices" in capsys.readouterr().err


@pytest.mark.slow
def test_report_json_follows_the_schema(config, tmp_path, capsys):
    out = tmp_path / "report.json"
    assert main(["report", str(config), "-o", str(out), "--what-if", "tpu-v5p"]) == 0
    assert "wrote" in capsys.readouterr().out
    data = json.loads(out.read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    assert data["name"] == "small FSDP" and data["hardware"] == "tpu-v5e"
    kinds = {c["kind"] for c in data["collectives"]}
    assert {"all-gather", "reduce-scatter"} <= kinds  # FSDP: gather weights forward, scatter gradients backward
    assert all(c["axes"] == ["data"] for c in data["collectives"] if c["kind"] != "all-reduce")
    layers = 2
    gathers = [c for c in data["collectives"] if c["kind"] == "all-gather"]
    assert all(c["count"] % layers == 0 for c in gathers)  # inside the scan over layers
    # The plan as written: FSDP shards W_in[L, D, F] over data; 2 layers x 256 x 1024 bf16 over 8 devices.
    w_in = next(a for a in data["arguments"] if a["name"] == "arg0.w_in")
    assert w_in["shape"] == "bf16[2,256,1024]" and w_in["notation"] == "[I, J_data, K]"
    assert w_in["bytes_per_device"] == 2 * 256 * 1024 * 2 // 8
    # What-if: the same compile repriced; v5p has more FLOPs/s and HBM bandwidth than v5e, so less compute.
    base, v5p = data["what_if"]
    assert base["baseline"] and base["hardware"] == "tpu-v5e" and v5p["hardware"] == "tpu-v5p"
    assert base["comm_seconds"] == pytest.approx(data["totals"]["comm_seconds"], rel=1e-9)
    assert v5p["compute_seconds"] < base["compute_seconds"]
    # issue 10: what-if rows are the predicted step (not compute + comm), with its wait and MFU
    assert base["step_seconds"] == pytest.approx(data["totals"]["step_seconds"], rel=1e-9)
    assert base["exposed_comm_seconds"] == pytest.approx(data["totals"]["exposed_comm_seconds"], rel=1e-9)
    assert base["mfu"] == pytest.approx(data["totals"]["mfu"], rel=1e-9) and 0 < v5p["mfu"] < 1


def parse_seconds(text: str) -> float:
    """"1.20 ms" -> 1.2e-3 (analyzer.units.format_seconds's units)."""
    value, unit = text.split()
    return float(value) * {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}[unit]


# The sweep's plans are compiled in spawned workers, each importing jax and the analyzer afresh; the ranking does
# not depend on the model's size, so the smallest model that has both plans' collectives keeps that cheap.
SWEEP_CONFIG = (CONFIG.replace("d_model = 256", "d_model = 64").replace("d_ff = 1024", "d_ff = 128")
                .replace("layers = 2", "layers = 1").replace("seq = 64", "seq = 16"))


@pytest.mark.slow
def test_sweep_ranks_in_worker_processes(tmp_path, capsys):
    config = tmp_path / "sweep.toml"
    config.write_text(SWEEP_CONFIG)
    out = tmp_path / "ranking.md"
    code = main(["sweep", str(config), "--mesh-shapes", "8", "--strategies", "dp,fsdp", "--jobs", "2",
                 "--no-progress", "-o", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "Sweep ranking on tpu-v5e" in printed
    text = out.read_text()
    assert "## Sweep ranking on tpu-v5e" in text
    rows = [l for l in text.splitlines() if l.startswith("| 1 |") or l.startswith("| 2 |")]
    assert len(rows) == 2
    # dp all-reduces whole gradients; fsdp gathers weights and scatters gradients: both compile and rank.
    assert {r.split("|")[2].strip() for r in rows} == {"dp", "fsdp"}
    # ranked by the predicted step, each with its exposed communication and MFU (issue 10)
    header = next(l for l in text.splitlines() if l.startswith("| # |"))
    cols = [c.strip() for c in header.split("|")]
    assert "exposed comm" in cols and "MFU" in cols
    cells = [[c.strip() for c in r.split("|")] for r in sorted(rows)]
    assert all(c[cols.index("MFU")].endswith("%") for c in cells)
    steps = [parse_seconds(c[cols.index("step")]) for c in cells]
    assert steps == sorted(steps)
