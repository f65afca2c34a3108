"""Training-config files: every example loads; bad keys and values name the key, file, line and valid keys."""

import pickle
from pathlib import Path

import pytest

from analyzer.errors import ConfigError
from analyzer.workflows.reportconfig import find_key_line, load_report_config, parse_mesh_shape, parse_report_config

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples" / "configs").glob("*.toml"))

BASE = """\
name = "t"
strategy = "fsdp"
hardware = "tpu-v5e"

[mesh]
data = 8

[model]
d_model = 256
d_ff = 1024
heads = 4
kv_heads = 2
layers = 2
seq = 64
batch = 16
dtype = "bf16"
optimizer = "adam"
"""


def _error(text: str, path: str = "cfg.toml") -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_report_config(text, path=path)
    return info.value


def test_examples_load():
    assert len(EXAMPLES) >= 4
    for path in EXAMPLES:
        cfg = load_report_config(path)
        assert cfg.mesh and (cfg.entry or cfg.strategy)
        assert cfg.rules_config() is not None
        if cfg.entry is None:
            cfg.transformer_config()  # the template accepts the sizes


def test_template_config_values():
    cfg = parse_report_config(BASE, path="cfg.toml")
    assert cfg.strategy == "fsdp" and dict(cfg.mesh) == {"data": 8}
    assert cfg.model["dtype"] == "bfloat16"  # bf16 spelled the template's way
    assert cfg.target == "cpu" and cfg.title == "t"
    assert pickle.loads(pickle.dumps(cfg)) == cfg  # sweeps send it to worker processes


def test_unknown_model_key_names_key_line_and_valid_keys():
    err = _error(BASE + "d_modle = 3\n")
    assert err.path == "cfg.toml" and err.line == 18
    assert "'d_modle'" in str(err) and "did you mean 'd_model'" in str(err) and "kv_heads" in str(err)
    assert "d_modle = 3" in str(err)  # the source line is shown


def test_unknown_top_level_key():
    err = _error("strategi = 'fsdp'\n" + BASE)
    assert err.line == 1 and "did you mean 'strategy'" in str(err)


@pytest.mark.parametrize("edit, key, line", [
    (("strategy = \"fsdp\"", "strategy = \"fdsp\""), "fdsp", 2),
    (("data = 8", "data = 0"), "data", 6),
    (("dtype = \"bf16\"", "dtype = \"bf8\""), "dtype", 16),
    (("heads = 4", "heads = \"four\""), "heads", 11),
    (("layers = 2", "layers = true"), "layers", 13),
])
def test_bad_values(edit, key, line):
    err = _error(BASE.replace(*edit))
    assert err.line == line, str(err)
    assert key in str(err)


def test_template_invariants_are_config_errors():
    err = _error(BASE.replace("heads = 4", "heads = 3"))  # 256 is not a multiple of 3
    assert "heads" in str(err) and err.path == "cfg.toml"


def test_structure_errors():
    assert "missing [mesh]" in str(_error(BASE.replace("[mesh]\ndata = 8\n", "")))
    assert "nothing to analyse" in str(_error('hardware = "tpu-v5e"\n[mesh]\ndata = 8\n'))
    err = _error('entry = "m:f"\n' + BASE)
    assert "not both" in str(err) and err.line == 1
    err = _error('entry = "m:f"\nstrategy = "tp"\n[mesh]\ndata = 8\n')
    assert "strategy" in str(err) and err.line == 2


def test_toml_syntax_error_has_line_and_column():
    err = _error(BASE + "batch = = 3\n")
    assert err.line == 18 and err.column is not None and "not valid TOML" in str(err)


def test_rules_and_sweep_tables():
    cfg = parse_report_config(BASE + '[rules]\nselect = ["HA1"]\nignore = ["HA301"]\n[budgets]\n'
                              'comm-compute-ratio = 0.5\n[sweep]\nmesh-shapes = ["8"]\nstrategies = ["dp", "fsdp"]\n')
    rules = cfg.rules_config()
    assert rules.select == ("HA1",) and rules.ignore == ("HA301",)
    assert rules.budgets.comm_compute_ratio == 0.5
    assert cfg.sweep_mesh_shapes == ((8,),) and cfg.sweep_strategies == ("dp", "fsdp")
    err = _error(BASE + '[rules]\nselect = ["HA999"]\n')
    assert "HA999" in str(err) and err.line == 19
    err = _error(BASE + '[sweep]\nshapes = ["8"]\n')
    assert "did you mean 'mesh-shapes'" in str(err) and err.line == 19
    err = _error(BASE + '[budgets]\ncomm-ratio = 1\n')
    assert "comm-ratio" in str(err) and err.line == 19


def test_with_plan_and_mesh_shapes():
    cfg = parse_report_config(BASE.replace("data = 8", "data = 4\nmodel = 2"))
    assert dict(cfg.with_plan((8, 1), "tp").mesh) == {"data": 8, "model": 1}
    with pytest.raises(ConfigError, match="has 3 axes"):
        cfg.with_plan((2, 2, 2))
    with pytest.raises(ConfigError, match="valid strategies"):
        cfg.with_plan(None, "zero3")
    assert parse_mesh_shape("2x2x2") == (2, 2, 2)
    with pytest.raises(ConfigError):
        parse_mesh_shape("4*2")


def test_find_key_line_forms():
    text = 'a = 1\nmesh = { data = 4 }\n[model]\n"d-ff" = 3\n[rules.HA301]\nmin-count = 2\n'
    assert find_key_line(text, "a") == 1
    assert find_key_line(text, "data", "mesh") == 2
    assert find_key_line(text, "d_ff", "model") == 4
    assert find_key_line(text, "HA301", "rules") == 5
    assert find_key_line(text, "nope") is None
