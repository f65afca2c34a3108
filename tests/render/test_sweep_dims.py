"""Sweep dimensions of the built-in template: batch sizes, remat policies and microbatches (config keys, CLI
options, the candidates' cross product, how entries are labelled). No compiles."""

import re

import pytest

from analyzer.cli import main
from analyzer.errors import ConfigError
from analyzer.workflows.reportconfig import parse_report_config
from analyzer.workflows.sweep import Candidate, SweepEntry, candidates

CONFIG = """\
strategy = "fsdp"
[mesh]
data = 4
model = 2
[model]
d_model = 256
batch = 32
"""


def test_cross_product_of_every_dimension():
    cfg = parse_report_config(CONFIG + '[sweep]\nbatch-sizes = [16, 32]\nremat = ["none", "full"]\n'
                                       'microbatches = [1, 2]\n')
    assert cfg.sweep_batch_sizes == (16, 32) and cfg.sweep_remat == ("none", "full")
    cands = candidates(cfg, [(8, 1), (4, 2)])
    assert len(cands) == 2 * 2 * 2 * 2
    assert cands[0] == Candidate((8, 1), "fsdp", 16, "none", 1)
    assert Candidate((4, 2), "fsdp", 32, "full", 2) in cands
    # The options override the table; a dimension not given is the config's own value (not varied).
    assert candidates(cfg, [(8, 1)], batch_sizes=[64], remat=["dots"], microbatches=[4]) == (
        Candidate((8, 1), "fsdp", 64, "dots", 4),)
    plain = candidates(parse_report_config(CONFIG), [(8, 1)])
    assert plain == (Candidate((8, 1), "fsdp"),)


def test_a_candidate_plans_its_sizes():
    cfg = parse_report_config(CONFIG)
    planned = Candidate((8, 1), "tp", 64, "full", 4).plan(cfg)
    assert dict(planned.mesh) == {"data": 8, "model": 1} and planned.strategy == "tp"
    assert planned.transformer_config().batch == 64 and planned.model["remat"] == "full"
    assert planned.model["microbatches"] == 4 and planned.model["d_model"] == 256


@pytest.mark.parametrize("table, message", [
    ("batch-sizes = [16, 0]", "'batch-sizes' must be a list of positive integers"),
    ("microbatches = 2", "'microbatches' must be a list of positive integers"),
    ('remat = ["ful"]', "unknown remat policy 'ful'; did you mean 'full'"),
])
def test_bad_sweep_dimensions(table, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as e:
        parse_report_config(CONFIG + "[sweep]\n" + table + "\n")
    assert e.value.line == CONFIG.count("\n") + 2


def test_model_remat_and_microbatches_are_checked():
    assert parse_report_config(CONFIG.replace("batch = 32", 'batch = 32\nremat = "dots"\nmicrobatches = 4')).model[
        "microbatches"] == 4
    with pytest.raises(ConfigError, match="batch=32 is not a multiple of microbatches=3"):
        parse_report_config(CONFIG.replace("batch = 32", "batch = 32\nmicrobatches = 3"))


def test_entry_points_sweep_mesh_shapes_only():
    cfg = parse_report_config('entry = "m:f"\n[mesh]\ndata = 8\n')
    with pytest.raises(ConfigError, match="remat apply to the built-in"):
        candidates(cfg, [(8,)], remat=["full"])


def test_entries_name_the_dimensions():
    e = SweepEntry("fsdp", "data=8,model=1", 1e-3, 1e-3, batch=32, remat="full", microbatches=4)
    assert e.label == "fsdp, batch 32, remat full, 4 microbatches @ data=8,model=1"
    data = e.to_dict()
    assert (data["strategy"], data["batch"], data["remat"], data["microbatches"]) == ("fsdp", 32, "full", 4)
    assert SweepEntry("dp", "data=8").label == "dp @ data=8"
    assert SweepEntry("dp", "data=8").to_dict()["remat"] is None


@pytest.mark.parametrize("argv, message", [
    (["--remat", "none,fulll"], "did you mean 'full'"),
    (["--batch-sizes", "16,x"], "positive integers separated by commas"),
    (["--microbatches", "0"], "positive integers separated by commas"),
    (["--ray-memory", "lots"], "positive size"),
])
def test_bad_options_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        main(["sweep", "c.toml", *argv])
    assert info.value.code == 2
    assert message in capsys.readouterr().err
