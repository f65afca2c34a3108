"""`hlo-analyzer parse`: text and JSON summaries, exit 2 with the positioned message on bad input."""

from __future__ import annotations

import json
from pathlib import Path

from analyzer.cli import main

SAMPLE = Path(__file__).parent / "samples" / "shard_map_collectives.cpu.spmd.hlo"


def test_text_summary(capsys):
    assert main(["parse", str(SAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "module jit_collectives" in out and "num_partitions=8" in out
    assert "all-gather" in out and "groups {0,1} {2,3} {4,5} {6,7}" in out
    assert "pairs 0->2 2->4" in out


def test_json_summary_lazy(capsys):
    assert main(["parse", "--json", "--lazy", str(SAMPLE)]) == 0
    data = json.loads(capsys.readouterr().out)
    (mod,) = data["modules"]
    kinds = {c["opcode"]: c for c in mod["collectives"]}
    assert kinds["all-to-all"]["groups"] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert kinds["collective-permute"]["source_target_pairs"][0] == [0, 2]
    assert mod["instructions"] == sum(mod["opcodes"].values())
    assert kinds["all-gather"]["source"].endswith("make_samples.py:62")


def test_bad_input_exits_2_with_caret(tmp_path, capsys):
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0), replica_groups={{0,1},{2,x}}\n}\n")
    assert main(["parse", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3:" in err and "replica_groups" in err and "^" in err
    assert main(["parse", str(tmp_path / "missing.hlo")]) == 2
