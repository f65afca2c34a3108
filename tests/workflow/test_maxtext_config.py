"""`entry = "maxtext:KEY=VALUE ..."` in report configs (issue 24): `report` and `sweep` analyse MaxText's own
train step, MaxText keys as sweep dimensions ([sweep.maxtext]). The parsing tests need no MaxText; the slow ones
skip without it (pip install -e '.[maxtext]' on Python 3.12+)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from analyzer.errors import ConfigError
from analyzer.workflows.reportconfig import parse_report_config
from analyzer.workflows.sweep import candidates

HAVE_MAXTEXT = sys.version_info >= (3, 12) and importlib.util.find_spec("maxtext") is not None
TINY = ("compile_topology=v5e-8 compile_topology_num_slices=1 base_emb_dim=256 base_num_query_heads=4 "
        "base_num_kv_heads=4 base_mlp_dim=512 base_num_decoder_layers=2 head_dim=64 vocab_size=1024 "
        "max_target_length=128 per_device_batch_size=1 enable_checkpointing=false")
CONFIG = f'''name = "tiny maxtext"
entry = "maxtext:{TINY}"

[sweep.maxtext]
ici_fsdp_parallelism = [8, 4]
ici_tensor_parallelism = [1, 2]
'''


def test_a_maxtext_entry_needs_no_mesh_and_keeps_maxtexts_arguments():
    config = parse_report_config(CONFIG)
    assert config.maxtext_argv == TINY.split()
    assert dict(config.mesh) == {} and config.target == "cpu"
    assert config.hardware == ""  # priced on compile_topology's chips unless the config names hardware
    assert config.sweep_maxtext == (("ici_fsdp_parallelism", ("8", "4")), ("ici_tensor_parallelism", ("1", "2")))


def test_maxtext_keys_are_the_sweeps_dimensions():
    cands = candidates(parse_report_config(CONFIG))
    assert [c.label for c in cands] == [
        "ici_fsdp_parallelism=8 ici_tensor_parallelism=1", "ici_fsdp_parallelism=8 ici_tensor_parallelism=2",
        "ici_fsdp_parallelism=4 ici_tensor_parallelism=1", "ici_fsdp_parallelism=4 ici_tensor_parallelism=2"]
    planned = cands[3].plan(parse_report_config(CONFIG)).maxtext_argv
    assert planned[-2:] == ["ici_fsdp_parallelism=4", "ici_tensor_parallelism=2"]  # after the entry's: they win
    with pytest.raises(ConfigError, match="do not apply to a maxtext: entry"):
        candidates(parse_report_config(CONFIG), mesh_shapes=[(8,)])


@pytest.mark.parametrize("text, message, line", [
    (f'entry = "maxtext:{TINY}"\n[mesh]\nfsdp = 8\n', "remove \\[mesh\\]", 2),
    (f'entry = "maxtext:{TINY}"\ntopology = "v5e:2x4"\n', "remove 'topology'", 2),
    (f'entry = "maxtext:{TINY}"\ntarget = "tpu:v5e:2x4"\n', "target is cpu or tpu", 2),
    (f'entry = "maxtext:{TINY} bogus"\n', "argument 'bogus' is not KEY=VALUE", 1),
    ('entry = "maxtext:"\n', "names no MaxText arguments", 1),
    ('entry = "m:f"\n[mesh]\nx = 8\n[sweep.maxtext]\nremat_policy = ["full"]\n', "needs entry = \\\"maxtext:", 4),
    (f'entry = "maxtext:{TINY}"\n[sweep.maxtext]\nremat_policy = "full"\n', "must be a non-empty list", 3),
])
def test_what_a_maxtext_config_refuses_is_named_at_its_line(text, message, line):
    with pytest.raises(ConfigError, match=message) as info:
        parse_report_config(text, path="cfg.toml")
    assert info.value.line == line


def test_a_tpu_target_is_taken_as_maxtexts():
    assert parse_report_config(f'entry = "maxtext:{TINY}"\ntarget = "tpu"\n').target == "tpu"


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_MAXTEXT, reason="needs MaxText: pip install -e '.[maxtext]' on Python 3.12+")
def test_report_and_sweep_analyse_maxtexts_step():
    from analyzer.workflows.sweep import analyze_config, evaluate

    config = parse_report_config(CONFIG)
    report = analyze_config(config)
    assert report.name == "tiny maxtext" and report.hardware == "tpu-v5e"  # compile_topology=v5e-8's
    assert {a for row in report.collectives["axes"] for a in row} == {"fsdp"}  # base.yml: ici_fsdp_parallelism=-1
    good, bad = (evaluate(config, c) for c in candidates(config)[2:4])
    assert bad.ok and bad.step_seconds > 0  # fsdp 4 x tensor 2
    assert {"fsdp", "tensor"} <= {a for row in bad.report["collectives"] for a in row["axes"]}
    assert not good.ok and "product of the ICI parallelism 4" in good.error  # fsdp 4 x tensor 1 on 8 chips
    # a plan's label (the sweep's title, its ranking and progress lines) names the mesh MaxText made from its keys;
    # a plan MaxText refused has no mesh, and no empty "@ "
    assert bad.mesh == "fsdp=4,tensor=2" and bad.label.endswith(" @ fsdp=4,tensor=2"), bad.label
    assert good.mesh == "" and "@" not in good.label, good.label
