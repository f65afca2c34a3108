"""`hlo-analyzer price` and `hlo-analyzer hardware`: output, JSON, and exit 2 with a message on bad input."""

import json

import pytest

from analyzer.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_price_issue_example(capsys):
    code, out, _ = run(capsys, "price", "AllGather_Y [E_Y, F] -> [E, F]", "--mesh", "X=8,Y=4", "--dims",
                       "E=2048,F=8192", "--dtype", "bf16", "--hardware", "tpu-v5e", "--topology", "v5e:8x4")
    assert code == 0
    assert "AllGather_Y: [E_Y, F] -> [E, F]" in out
    for word in ("seconds", "regime", "bytes", "hops", "formula", "559 µs", "33,554,432"):
        assert word in out


@pytest.mark.parametrize("collective, dims, model, seconds", [
    ("AllGather_Y [E_Y, F] -> [E, F]", "E=2048,F=8192", "ideal", 372.8e-6),
    ("ReduceScatter_Y,F: [E, F]{U_Y} -> [E, F_Y]", "E=2048,F=8192", "topology", 559.2e-6),
    ("AllReduce_Y: [E, F]{U_Y} -> [E, F]", "E=2048,F=8192", "topology", 2 * 559.2e-6),
    ("AllToAll_Y: [E_Y, F] -> [E, F_Y]", "E=2048,F=8192", "ideal", 372.8e-6 / 4),
])
def test_price_json(capsys, collective, dims, model, seconds):
    code, out, _ = run(capsys, "price", collective, "--mesh", "X=8,Y=4", "--dims", dims, "--hardware", "tpu-v5e",
                       "--model", model, "--json")
    assert code == 0
    obj = json.loads(out)
    assert {"seconds", "regime", "bytes", "hops", "formula"} <= set(obj)
    assert obj["seconds"] == pytest.approx(seconds, rel=1e-3)
    assert obj["topology"] == "v5e:8x4" and obj["topology_declared"] is False


@pytest.mark.parametrize("argv, words", [
    (["price", "AllGather_Y [E_Y, F] -> [E, F]", "--mesh", "X=8,Y=4", "--dims", "E=2048"], "--dims lacks F"),
    (["price", "AllGather_Y [E_Y, F] -> [E, F]", "--mesh", "X=8,Y=4", "--dims", "E=2048,F=8192,G=1"], "does not use"),
    (["price", "AllGather_Y [E_Y, F] -> [E, F]", "--mesh", "X=8,Y=four", "--dims", "E=2,F=2"], "bad --mesh item"),
    (["price", "AllGather_W [E_W, F] -> [E, F]", "--mesh", "X=8,Y=4", "--dims", "E=2048,F=8192"], "no axis 'W'"),
    (["price", "AllGather_Y [E_Y, F] -> [E, F]", "--mesh", "X=8,Y=4", "--dims", "E=2048,F=8192", "--hardware",
      "tpu-v5"], "did you mean 'tpu-v5p'"),
    (["price", "AllGather_Y [E_Y, F] -> [E, F]", "--mesh", "X=8,Y=4", "--dims", "E=2050,F=8192"], "does not divide"),
    (["price", "Gather_Y [E_Y, F] -> [E, F]", "--mesh", "X=8,Y=4", "--dims", "E=2048,F=8192"], "unknown collective"),
    (["price", "AllGather_Y [E_Y, F] -> [E, F]", "--mesh", "X=8,Y=4", "--dims", "E=2048,F=8192", "--topology",
      "v5e:4x4"], "has 32 devices but the slice v5e:4x4 has 16"),
])
def test_price_errors_exit_2(capsys, argv, words):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert words in err
    assert "Traceback" not in err


def test_hardware_list_and_show(capsys):
    code, out, _ = run(capsys, "hardware", "list")
    assert code == 0 and "tpu-v5e" in out and "gb200-nvl72" in out
    code, out, _ = run(capsys, "hardware", "list", "--json")
    assert code == 0 and len(json.loads(out)) == 11
    code, out, _ = run(capsys, "hardware", "show", "tpu-v5e")
    assert code == 0 and "tpus.md" in out and "latency-bound below 45,000 B" in out
    code, out, _ = run(capsys, "hardware", "show", "h100", "--json")
    assert code == 0 and json.loads(out)["nvlink"]["gpu_egress"] == 450e9
    code, _, err = run(capsys, "hardware", "show", "h1000")
    assert code == 2 and "did you mean 'h100'" in err


def test_price_gpu_sharp(capsys):
    args = ["price", "AllReduce_X: [B, F]{U_X} -> [B, F]", "--mesh", "X=8", "--dims", "B=4096,F=8192",
            "--hardware", "h100", "--json"]
    code, out, _ = run(capsys, *args)
    plain = json.loads(out)["seconds"]
    code, out, _ = run(capsys, *args, "--sharp")
    assert code == 0
    sharp = json.loads(out)["seconds"]
    assert sharp == pytest.approx(4096 * 8192 * 2 / 450e9)  # SHARP: V / W_gpu
    assert plain == pytest.approx(2 * 4096 * 8192 * 2 * 7 / (8 * 450e9))
