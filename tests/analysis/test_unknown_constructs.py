"""A construct this version does not know (a newer XLA's opcode or attribute) degrades the analysis, never kills it
(issue 22): the report is made, names the construct, its line and the installed jax in its warnings in every
format, and the exit code follows the findings; `parse` of the same text is a positioned error."""

from __future__ import annotations

import json

import pytest

from analyzer import analyze_hlo
from analyzer.cli import main
from analyzer.errors import HloSyntaxError
from analyzer.hlo.parser import parse_hlo

MODULE = """HloModule m, num_partitions=8

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %a = f32[] add(%x, %y)
}

ENTRY %e (p: f32[64,128]) -> f32[64,128] {
  %p = f32[64,128]{1,0} parameter(0), sharding={devices=[8,1]<=[8]}
  %q = f32[64,128]{1,0} frobnicate(%p), new_knob=7
  %n = f32[64,128]{1,0} negate(%q), some_future_attr={a=1}
  ROOT %ar = f32[64,128]{1,0} all-reduce(%n), channel_id=1, replica_groups=[1,8]<=[8], use_global_device_ids=true, to_apply=%add
}
"""


@pytest.fixture
def hlo_file(tmp_path):
    path = tmp_path / "future.hlo"
    path.write_text(MODULE)
    return path


def test_the_report_is_made_and_warns_of_each_unknown_construct(hlo_file):
    from importlib.metadata import version

    r = analyze_hlo(hlo_file, mesh="data=8", hardware="tpu-v5e")
    assert len(r.collectives) == 1 and r.collectives.iloc[0]["kind"] == "all-reduce"  # the rest is still read
    assert r.totals.step_seconds > 0
    (warning,) = [w for w in r.warnings if "does not know" in w]
    assert "11:25: unknown opcode `frobnicate`" in warning and "12:37: unknown attribute some_future_attr" in warning
    assert f"jax {version('jax')}" in warning
    for text in (r.to_text(), r.to_markdown(), r.to_html()):
        assert "frobnicate" in text and "some_future_attr" in text
    assert any("frobnicate" in w for w in json.loads(r.to_json())["warnings"])


def test_the_commands_exit_by_the_findings_not_as_an_internal_error(hlo_file, capsys):
    code = main(["inspect", str(hlo_file), "--mesh", "data=8", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code in (0, 1) and code == (1 if any(d["severity"] == "error" for d in out["diagnostics"]) else 0)
    assert any("frobnicate" in w for w in out["warnings"])


def test_strict_parse_of_the_same_text_is_a_positioned_error(hlo_file):
    with pytest.raises(HloSyntaxError) as e:
        parse_hlo(MODULE)
    assert (e.value.line, e.value.column) == (11, 25) and "frobnicate" in str(e.value)
    assert main(["parse", str(hlo_file)]) == 2


def test_an_unreadable_program_before_partitioning_costs_the_model_flops_not_the_analysis():
    from types import SimpleNamespace

    from analyzer.pipeline import _before_partitioning

    lowered = SimpleNamespace(name="step", global_hlo="HloModule m\nENTRY e {\n  ROOT %p = f32[] parameter(0), "
                                                      "sharding={a_sharding_of_xla_99}\n}\n")
    problems: list[str] = []
    assert _before_partitioning(lowered, problems) is None
    (problem,) = problems
    assert "before partitioning could not be read" in problem and "a_sharding_of_xla_99" in problem


GATHER_012 = """HloModule m, num_partitions=4

ENTRY %e (w: f32[64,128], x: f32[8,256]) -> f32[8,128] {
  %w = f32[64,128]{1,0} parameter(0), sharding={devices=[4,1]<=[4]}
  %x = f32[8,256]{1,0} parameter(1), sharding={replicated}
  %s = f32[64,128]{1,0} reshape(%w), metadata={op_name="jit(f)/squeeze" source_file="model.py" source_line=10}
  %ag = f32[256,128]{1,0} all-gather(%s), channel_id=1, replica_groups=[1,4]<=[4], dimensions={0}, use_global_device_ids=true, frontend_attributes={is_spmd_generated="true"}, metadata={op_name="jit(f)/%s" source_file="model.py" source_line=10}
  ROOT %d = f32[8,128]{1,0} dot(%x, %ag), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(f)/bd,df->bf/dot_general" source_file="model.py" source_line=20}
}
"""


@pytest.mark.parametrize("op", ["squeeze", "add_any"])
def test_a_gather_the_partitioner_inserted_points_at_the_dot_it_gathers_for(op):
    """jax 0.11+ gives such an all-gather its operand's metadata (a scanned weight's squeeze: the lax.scan line;
    a gradient's add_any), marked is_spmd_generated; jax 0.10 gave it the dot's. Both read as the dot's line."""
    r = analyze_hlo(GATHER_012.replace("%s\" source_file", f"{op}\" source_file"), mesh="x=4")
    (row,) = r.collectives.itertuples()
    assert row.kind == "all-gather" and row.source == "model.py:20"
    unmarked = GATHER_012.replace(', frontend_attributes={is_spmd_generated="true"}', "")
    (row,) = analyze_hlo(unmarked.replace("%s\" source_file", "add_any\" source_file"), mesh="x=4").collectives.itertuples()
    assert row.source == "model.py:10"  # (an op that computes, not marked: its own line stands)
