"""`hlo-analyzer maxtext` (issue 24): MaxText's own train step, built by MaxText's code.

The fast tests need no MaxText: arguments, the install command on Python 3.11 or without the extra, MaxText's
config refusals made short. The slow ones build a tiny MaxText model (2 layers, width 256, vocab 1024) for
v5e-8 on the 8 fake CPU devices of the test session (tests/conftest.py), and for the TPU target with libtpu;
they skip with the reason where `pip install 'hlo-analyzer[maxtext]'` (Python 3.12+) is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest

from analyzer.errors import AnalyzerError, ConfigError
from analyzer.integrations import maxtext

HAVE_MAXTEXT = sys.version_info >= (3, 12) and importlib.util.find_spec("maxtext") is not None
needs_maxtext = pytest.mark.skipif(not HAVE_MAXTEXT, reason="needs MaxText: pip install 'hlo-analyzer[maxtext]' "
                                                            "on Python 3.12+")
needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                  reason="the TPU target needs libtpu: pip install 'hlo-analyzer[tpu]'")

# A tiny llama2-style MaxText model on a v5e-8, FSDP 4 x tensor 2.
TINY = ("compile_topology=v5e-8 compile_topology_num_slices=1 base_emb_dim=256 base_num_query_heads=4 "
        "base_num_kv_heads=4 base_mlp_dim=512 base_num_decoder_layers=2 head_dim=64 vocab_size=1024 "
        "max_target_length=128 per_device_batch_size=1 ici_fsdp_parallelism=4 ici_tensor_parallelism=2 "
        "enable_checkpointing=false").split()


# ---------------------------------------------------------------------------------------------------- fast
def test_without_maxtext_it_stops_with_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "maxtext" else real(name, *a))
    with pytest.raises(AnalyzerError, match=r"pip install 'hlo-analyzer\[maxtext\]'"):
        maxtext.check_available()


def test_on_python_3_11_it_stops_with_the_install_command(monkeypatch):
    monkeypatch.setattr(sys, "version_info", (3, 11, 7, "final", 0))
    with pytest.raises(AnalyzerError, match=r"Python 3\.12 or later.*pip install 'hlo-analyzer\[maxtext\]'"):
        maxtext.check_available()


def test_the_command_exits_2_with_the_install_command_before_any_work(monkeypatch, capsys):
    from analyzer.cli import main

    monkeypatch.setattr(maxtext, "check_available", lambda: (_ for _ in ()).throw(
        AnalyzerError(f"MaxText is not installed here: {maxtext.MAXTEXT_EXTRA_HINT}")))
    assert main(["maxtext", "compile_topology=v5e-8", "--json"]) == 2
    captured = capsys.readouterr()
    assert "pip install 'hlo-analyzer[maxtext]'" in captured.err and captured.out == ""


@pytest.mark.parametrize("argv, where", [
    (["compile_topology=v5e-8", "bogus"], "argument 2 'bogus'"),
    (["=3"], "argument 1 '=3'"),
    (["compile_topology=v5e-8", "other.yml"], "a config file must come first"),
])
def test_arguments_that_are_not_key_value_are_named(argv, where):
    with pytest.raises(ConfigError, match=where):
        maxtext.parse_args(argv)


def test_a_missing_config_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="missing.yml' does not exist"):
        maxtext.parse_args([str(tmp_path / "missing.yml"), "compile_topology=v5e-8"])


def test_an_unknown_key_names_the_nearest_instead_of_maxtexts_whole_list():
    listing = ", ".join(f"'{k}'" for k in ("per_device_batch_size", "remat_policy", "vocab_size", *[f"k{i}" for i in
                                                                                                   range(900)]))
    message = maxtext._config_message(ValueError(f"'per_devic_batch_size' not in {listing}."))
    assert "unknown key 'per_devic_batch_size'" in message and "per_device_batch_size" in message
    assert len(message) < 300


def test_unknown_target_is_refused():
    with pytest.raises(AnalyzerError, match="valid targets: cpu, tpu"):
        maxtext.analyze_maxtext(TINY, target="gpu")


# ---------------------------------------------------------------------------------------------------- slow
@pytest.fixture(scope="module")
def tiny_cpu():
    if not HAVE_MAXTEXT:
        pytest.skip("needs MaxText: pip install 'hlo-analyzer[maxtext]' on Python 3.12+")
    import jax

    before = (jax.config.jax_default_prng_impl, jax.config.jax_remove_size_one_mesh_axis_from_type,
              os.environ.get("LIBTPU_INIT_ARGS"))
    report = maxtext.analyze_maxtext(TINY, target="cpu")
    after = (jax.config.jax_default_prng_impl, jax.config.jax_remove_size_one_mesh_axis_from_type,
             os.environ.get("LIBTPU_INIT_ARGS"))
    return report, before, after


@pytest.mark.slow
@needs_maxtext
def test_collectives_are_in_maxtexts_mesh_axis_names(tiny_cpu):
    report, _, _ = tiny_cpu
    from maxtext.configs import pyconfig

    assert report.mesh.axis_names[:4] == ("diloco", "data", "stage", "fsdp")  # MaxText's config.mesh_axes
    assert dict(zip(report.mesh.axis_names, report.mesh.axis_sizes))["fsdp"] == 4
    axes = {a for row in report.collectives["axes"] for a in row}
    assert {"fsdp", "tensor"} <= axes, axes  # FSDP gathers weights, tensor parallelism reduces activations
    kinds = set(report.collectives[report.collectives["axes"] == ("fsdp",)]["kind"])
    assert {"all-gather", "reduce-scatter"} <= kinds, kinds  # FSDP: weights gathered, gradients scattered
    assert pyconfig is not None


@pytest.mark.slow
@needs_maxtext
def test_totals_carry_the_step_and_mfu(tiny_cpu):
    report, _, _ = tiny_cpu
    t = report.totals
    assert t.step_seconds > 0 and t.comm_seconds > 0
    assert 0 < t.mfu <= 1
    # 6 N T for the tiny model's ~1.2M parameters x 8 sequences of 128 tokens, plus attention: the FLOPs count
    # must be of that order, not of the 8 chips' sum nor of one shard.
    assert 5e9 < t.model_flops < 5e10
    assert report.target == "cpu" and report.hardware == "tpu-v5e"
    assert "compile_topology=v5e-8" in report.notes[0]


@pytest.mark.slow
@needs_maxtext
def test_maxtexts_process_wide_settings_are_put_back(tiny_cpu):
    _, before, after = tiny_cpu
    assert after == before


@pytest.mark.slow
@needs_maxtext
def test_the_command_prints_the_report_as_json(capsys):
    from analyzer.cli import main

    code = main(["maxtext", *TINY, "ici_tensor_parallelism=1", "ici_fsdp_parallelism=-1", "--json"])
    out = capsys.readouterr().out
    assert code == 0
    data = json.loads(out)  # MaxText's own prints went to stderr
    assert data["totals"]["step_seconds"] > 0 and data["totals"]["mfu"] > 0
    assert {tuple(c["axes"]) for c in data["collectives"]} == {("fsdp",)}


@pytest.mark.slow
@pytest.mark.tpu
@needs_maxtext
@needs_libtpu
def test_the_tpu_target_compiles_as_train_compile_does():
    report = maxtext.analyze_maxtext(TINY, target="tpu")
    assert report.target == "tpu:v5e:2x4"
    assert report.memory and report.memory["generated_code_bytes"] > 0  # libtpu's memory analysis
    axes = {a for row in report.collectives["axes"] for a in row}
    assert {"fsdp", "tensor"} <= axes, axes
    assert report.totals.step_seconds > 0 and 0 < report.totals.mfu <= 1
