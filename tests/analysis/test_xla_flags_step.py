"""The user's XLA flags in the step model's overlap model (issue 25 item 2; docs/step.md, "The user's XLA flags"):
each modelled flag moves the prediction the way the flag moves the TPU's schedule, the report names what it
modelled and what not, and the overlap rules (no collective exposed longer than it runs) still hold."""

from __future__ import annotations

from pathlib import Path

import pytest

import analyzer
from analyzer.compile.xlaflags import overlap_flags, parse_xla_flags

ROOT = Path(__file__).resolve().parents[2]
FSDP_TP = ROOT / "fixtures" / "cpu" / "X2_Y4" / "fsdp_tp_step.spmd.hlo"  # examples.chapter:fsdp_tp_step, cpu target


def _step(flags=None):
    return analyzer.analyze_hlo(FSDP_TP, mesh="X=2,Y=4", hardware="tpu-v5e", xla_flags=flags)


@pytest.fixture(scope="module")
def base():
    return _step()


def _exposure_within_own_time(report):
    step = report.analysis.step
    for r, c in enumerate(report.analysis.collectives):
        assert step.exposed_rows[r] <= c.cost.seconds * c.count * (1 + 1e-9) + 1e-12, (r, c.kind)
    assert sum(step.exposed_rows) == pytest.approx(step.exposed_comm_seconds, rel=1e-6)


def test_no_flags_no_note(base):
    assert not any("XLA flags" in n for n in base.notes)
    assert base.analysis.xla_flags is None


def test_synchronous_all_gathers_make_the_step_longer(base):
    # flags guidance: async all-gathers need xla_enable_async_all_gather, async collective fusion and its
    # fuse_all_gather; one of them off and the compute waits where each all-gather stands
    sync = _step("--xla_enable_async_all_gather=false")
    assert sync.totals.step_seconds > base.totals.step_seconds * 1.05
    assert sync.totals.compute_seconds == pytest.approx(base.totals.compute_seconds)
    _exposure_within_own_time(sync)
    assert sync.analysis.xla_flags == {"xla_enable_async_all_gather": False}


def test_collective_matmul_hides_gathers_under_their_dots(base):
    wind = _step("--xla_tpu_enable_windowed_einsum_for_all_gather=true")
    assert wind.totals.exposed_comm_seconds < base.totals.exposed_comm_seconds
    assert wind.totals.compute_seconds == pytest.approx(base.totals.compute_seconds)
    _exposure_within_own_time(wind)
    rs = _step("--xla_tpu_enable_windowed_einsum_for_reduce_scatter=true")
    assert rs.totals.exposed_comm_seconds <= base.totals.exposed_comm_seconds
    _exposure_within_own_time(rs)


def test_the_note_says_what_was_modelled_and_what_not():
    r = _step("--xla_tpu_enable_data_parallel_all_reduce_opt=true --xla_tpu_overlap_compute_collective_tc=true "
              "--xla_tpu_made_up_flag=3")
    note = next(n for n in r.notes if n.startswith("XLA flags in the step model"))
    assert "modelled: xla_tpu_enable_data_parallel_all_reduce_opt" in note
    assert "not modelled: xla_tpu_overlap_compute_collective_tc" in note
    assert "unknown to the step model (no effect on the prediction): xla_tpu_made_up_flag" in note


def test_overlap_flags_reads_values_as_xla_does():
    f = overlap_flags(parse_xla_flags("--xla_enable_async_collective_permute=kDisabled "
                                      "--xla_enable_async_all_gather=kAuto --xla_tpu_enable_async_all_to_all=0"))
    assert f.synchronous_kinds == {"collective-permute", "all-to-all"}
    assert not (f.multiple_steps or f.dcn_pipelined or f.windowed_all_gather or f.windowed_reduce_scatter)
    assert overlap_flags(None).note() is None


def test_a_bad_flag_is_refused_by_analyze_hlo_before_the_analysis():
    with pytest.raises(analyzer.AnalyzerError, match="not an XLA flag"):
        _step("xla_enable_async_all_gather=false")


# ------------------------------------------------------------------------------------------ where the flags come from
def test_tool_config_reads_xla_flags_as_a_string_or_a_list():
    from analyzer.rules.config import as_config

    one = as_config({"xla-flags": "--xla_tpu_enable_data_parallel_all_reduce_opt=true --xla_foo=3"})
    assert dict(one.xla_flags) == {"xla_tpu_enable_data_parallel_all_reduce_opt": True, "xla_foo": 3}
    two = as_config({"xla_flags": ["--xla_enable_async_all_gather=false"]})
    assert dict(two.xla_flags) == {"xla_enable_async_all_gather": False}
    assert dict(as_config({}).xla_flags) == {}


@pytest.mark.parametrize("value, message", [
    ("xla_foo=1", "not an XLA flag"),
    (3, "must be a string of flags or a list of them"),
    ({"xla_foo": 1}, "must be a string of flags or a list of them"),
    ("--xla_dump_to=/tmp/x", "set by hlo-analyzer"),
])
def test_tool_config_refuses_bad_xla_flags_naming_the_key(tmp_path, value, message):
    from analyzer.errors import ConfigError
    from analyzer.rules.config import load_config

    import json

    text = f"[tool.hlo-analyzer]\nxla-flags = {json.dumps(value) if not isinstance(value, dict) else '{ xla_foo = 1 }'}\n"
    path = tmp_path / "pyproject.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as e:
        load_config(path)
    assert e.value.line == 2


def test_report_config_reads_xla_flags():
    from analyzer.errors import ConfigError
    from analyzer.workflows.reportconfig import parse_report_config

    base = 'strategy = "fsdp"\n[mesh]\ndata = 8\n[model]\nd_model = 256\nd_ff = 512\nheads = 4\nlayers = 2\nseq = 64\nbatch = 16\n'
    config = parse_report_config('xla-flags = "--xla_tpu_enable_async_collective_fusion_multiple_steps=true"\n' + base)
    assert config.xla_flags == (("xla_tpu_enable_async_collective_fusion_multiple_steps", True),)
    with pytest.raises(ConfigError, match="'xla-flags'"):
        parse_report_config('xla-flags = "nope"\n' + base)


def test_check_report_and_sweep_take_xla_flags_on_the_command_line():
    from analyzer.cli import build_parser

    parser = build_parser()
    for argv in (["check", "--xla-flags=--xla_foo=1"], ["report", "c.toml", "--xla-flags=--xla_foo=1"],
                 ["sweep", "c.toml", "--xla-flags=--xla_foo=1"]):
        assert parser.parse_args(argv).xla_flags == "--xla_foo=1"
