"""`hlo-analyzer maxtext` (issue 24): MaxText's own train step, built by MaxText's code.

The fast tests need no MaxText: arguments, the install command on Python 3.11 or without the extra, MaxText's
config refusals made short. The slow ones build a tiny MaxText model (2 layers, width 256, vocab 1024) for
v5e-8 on the 8 fake CPU devices of the test session (tests/conftest.py), and for the TPU target with libtpu;
they skip with the reason where the `maxtext` extra (Python 3.12+) is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import numpy as np
import pytest

from analyzer.errors import AnalyzerError, ConfigError
from analyzer.integrations import maxtext

HAVE_MAXTEXT = sys.version_info >= (3, 12) and importlib.util.find_spec("maxtext") is not None
needs_maxtext = pytest.mark.skipif(not HAVE_MAXTEXT, reason="needs MaxText: pip install -e '.[maxtext]' "
                                                            "on Python 3.12+")
needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                  reason="the TPU target needs libtpu: pip install -e '.[tpu]'")

# A tiny llama2-style MaxText model on a v5e-8, FSDP 4 x tensor 2.
TINY = ("compile_topology=v5e-8 compile_topology_num_slices=1 base_emb_dim=256 base_num_query_heads=4 "
        "base_num_kv_heads=4 base_mlp_dim=512 base_num_decoder_layers=2 head_dim=64 vocab_size=1024 "
        "max_target_length=128 per_device_batch_size=1 ici_fsdp_parallelism=4 ici_tensor_parallelism=2 "
        "enable_checkpointing=false").split()


# ---------------------------------------------------------------------------------------------------- fast
def test_without_maxtext_it_stops_with_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "maxtext" else real(name, *a))
    with pytest.raises(AnalyzerError, match=r"pip install -e '\.\[maxtext\]'"):
        maxtext.check_available()


def test_on_python_3_11_it_stops_with_the_install_command(monkeypatch):
    monkeypatch.setattr(sys, "version_info", (3, 11, 7, "final", 0))
    with pytest.raises(AnalyzerError, match=r"Python 3\.12 or later.*pip install -e '\.\[maxtext\]'"):
        maxtext.check_available()


def test_the_command_exits_2_with_the_install_command_before_any_work(monkeypatch, capsys):
    from analyzer.cli import main

    monkeypatch.setattr(maxtext, "check_available", lambda: (_ for _ in ()).throw(
        AnalyzerError(f"MaxText is not installed here: {maxtext.MAXTEXT_EXTRA_HINT}")))
    assert main(["maxtext", "compile_topology=v5e-8", "--json"]) == 2
    captured = capsys.readouterr()
    assert "pip install -e '.[maxtext]'" in captured.err and captured.out == ""


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
        pytest.skip("needs MaxText: pip install -e '.[maxtext]' on Python 3.12+")
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
def test_rows_name_maxtexts_logical_axes_and_its_source_lines(tiny_cpu):
    report, _, _ = tiny_cpu
    rows = report.collectives
    # MaxText's NNX parameters carry their logical axis names in their metadata (nn.with_logical_partitioning's
    # NNX form); a weight's FSDP gather is written in them
    gathers = rows[(rows["kind"] == "all-gather") & rows["array"].str.contains("logits_dense")]
    assert len(gathers) and all("embed_vocab" in n and "vocab" in n for n in gathers["notation"]), \
        list(gathers["notation"])  # AllGather_fsdp: [embed_vocab_fsdp, vocab_tensor] -> [embed_vocab, vocab_tensor]
    # the source is MaxText's own line, not the analyzer's call into jax
    sources = [s for s in rows["source"] if s]
    assert sources and not any("/analyzer/" in s for s in sources), sources[:3]
    assert any("maxtext" in s and s.rsplit(":", 1)[1].isdigit() for s in sources)


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


# A tiny Mixtral (4 experts, 2 per token) with expert parallelism 4 x fsdp 2, dispatch/combine by einsum
# (sparse_matmul=false: the ragged all-to-all of sparse_matmul=true has no XLA:CPU lowering), and a tiny
# 4-layer model over 4 pipeline stages x fsdp 2 with 8 microbatches.
_TINY_COMMON = [a for a in TINY if not a.startswith(("ici_", "base_num_decoder_layers", "per_device_batch_size"))]
MOE = ["model_name=mixtral-8x7b", "override_model_config=true", *_TINY_COMMON, "base_moe_mlp_dim=512",
       "base_num_decoder_layers=2", "per_device_batch_size=1", "num_experts=4", "num_experts_per_tok=2",
       "ici_expert_parallelism=4", "ici_fsdp_parallelism=2", "sparse_matmul=false"]
PP_STAGES, PP_MICROBATCHES = 4, 8
PP = [*_TINY_COMMON, "base_num_decoder_layers=4", "per_device_batch_size=2", f"ici_pipeline_parallelism={PP_STAGES}",
      "ici_fsdp_parallelism=2", f"num_pipeline_microbatches={PP_MICROBATCHES}"]


@pytest.mark.slow
@needs_maxtext
def test_a_mixtral_step_shows_the_expert_all_to_all():
    report = maxtext.analyze_maxtext(MOE, target="cpu")
    rows = report.collectives[report.collectives["axes"] == ("expert",)]
    a2a = rows[rows["kind"] == "all-to-all"]
    assert len(a2a) >= 2, set(rows["kind"])  # tokens dispatched to their experts' devices and combined back
    assert all("maxtext/layers/moe.py:" in str(s) for s in a2a["source"]), list(a2a["source"])  # its MoE layer
    assert report.totals.by_kind["all-to-all"] > 0 and report.totals.exposed_by_axis.get("expert", 0) >= 0
    assert report.totals.bubble_seconds == 0.0


@pytest.mark.slow
@needs_maxtext
def test_a_pipelined_step_shows_the_bubble_of_the_schedule():
    report = maxtext.analyze_maxtext(PP, target="cpu")
    step = report.analysis.step
    assert {"stage"} <= {a for row in report.collectives["axes"] for a in row}
    # the forward loop and its transpose, each of microbatches + stages - 1 iterations over 4 stages
    assert [(s, t) for _, s, t, _, _ in step.pipelines] == [(PP_STAGES, PP_MICROBATCHES + PP_STAGES - 1)] * 2
    formula = (PP_STAGES - 1) / (PP_MICROBATCHES + PP_STAGES - 1)  # the schedule's own (pipeline.py's comment)
    for _, _, _, bubble, loop_seconds in step.pipelines:
        assert bubble / loop_seconds == pytest.approx(formula, rel=1e-9)
    assert 0 < report.totals.bubble_seconds < report.totals.step_seconds
    assert report.totals.hfu > report.totals.mfu  # the bubble's iterations compute too


@pytest.mark.slow
@needs_maxtext
def test_a_ragged_all_to_all_moe_on_the_cpu_target_says_what_to_do():
    from analyzer.errors import LoweringError

    sparse = [a for a in MOE if a != "sparse_matmul=false"] + ["sparse_matmul=true", "megablox=false"]
    with pytest.raises(LoweringError, match="ragged all-to-all.*--target tpu.*sparse_matmul=false"):
        maxtext.analyze_maxtext(sparse, target="cpu")


@pytest.mark.slow
@needs_maxtext
def test_flash_attention_on_the_cpu_target_is_analysed_as_dot_product_and_said():
    # MaxText's published v6e recipes set attention=flash: the Pallas splash kernel, which XLA:CPU cannot lower
    # (tokamax: "Not supported on cpu"). The cpu target runs the same model with dot-product attention and says so.
    report = maxtext.analyze_maxtext([*TINY, "attention=flash"], target="cpu")
    assert "attention=flash -> attention=dot_product" in report.notes[0], report.notes[0]
    assert report.totals.step_seconds > 0 and 0 < report.totals.mfu <= 1


# Two v5e-4 slices (8 chips): fsdp 2 inside each slice x 2 over DCN, tensor 2.
TWO_SLICES = [*(a for a in TINY if not a.startswith(("compile_topology", "ici_"))), "compile_topology=v5e-4",
              "compile_topology_num_slices=2", "ici_fsdp_parallelism=2", "ici_tensor_parallelism=2",
              "dcn_fsdp_parallelism=2"]


@pytest.mark.slow
@needs_maxtext
def test_a_two_slice_target_on_the_cpu_target_is_meshed_as_maxtexts_hybrid_mesh():
    # CPU devices have no slice_index, which MaxText's multi-slice mesh (jax's create_hybrid_device_mesh) reads: the
    # cpu target numbers the fake devices slice by slice, and the DCN part of an axis is its major part.
    with maxtext.maxtext_step(TWO_SLICES, target="cpu") as step:
        shape = dict(step.mesh.shape)
        fsdp = step.mesh.axis_names.index("fsdp")
        ids = [[d.id for d in row.flat] for row in np.moveaxis(step.mesh.devices, fsdp, 0)]
    assert shape["fsdp"] == 4 and shape["tensor"] == 2
    assert all(i < 4 for i in ids[0] + ids[1]) and all(i >= 4 for i in ids[2] + ids[3]), ids  # slice 0, then 1
    report = maxtext.analyze_maxtext(TWO_SLICES, target="cpu")
    assert "v5e:2x2*2" in report.topology and "fsdp=4: dcn" in report.topology, report.topology


@pytest.mark.slow
@needs_maxtext
def test_check_runs_a_maxtext_entry_point(tmp_path, monkeypatch, capsys):
    # entry-points = ["maxtext:KEY=VALUE ..."]: MaxText's own step, no [mesh] (MaxText's keys make it), on the
    # chips of its compile_topology; its result is never cached (no key reads the installed MaxText)
    from analyzer.cli import main

    argv = " ".join([*TINY, "ici_tensor_parallelism=1", "ici_fsdp_parallelism=-1"])
    (tmp_path / "pyproject.toml").write_text(f'[tool.hlo-analyzer]\nentry-points = ["maxtext:{argv}"]\n')
    monkeypatch.chdir(tmp_path)
    code = main(["check", "--output-format", "json"])
    out = capsys.readouterr().out
    assert code in (0, 1), out
    (entry,) = json.loads(out)["entry_points"]
    assert entry["name"] == f"maxtext:{argv}" and entry["error"] is None, entry
    assert entry["totals"]["collectives"] > 0 and entry["status"] == ("findings" if code == 1 else "clean")
    # findings point at MaxText's own lines (its model is the program)
    assert all("maxtext/" in f["location"]["file"] for f in entry["findings"] if f["location"]["file"]), entry
