"""The public entry points around the analysis: analyze_hlo's inputs, errors, reprice, Report.analysis, CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import analyzer
from analyzer.pipeline import analyze_hlo, pick_dump_file, reprice
from analyzer.cli import main
from analyzer.errors import AnalyzerError, HloSyntaxError, MeshError

SAMPLES = Path(__file__).resolve().parents[1] / "hlo" / "samples"
SPMD = SAMPLES / "scan_fsdp_tp.cpu.spmd.hlo"  # mesh data=4, model=2; 4 scanned layers


@pytest.fixture(scope="module")
def report():
    return analyze_hlo(SPMD, mesh="data=4,model=2")


def test_analyze_hlo_reads_a_file(report):
    df = report.collectives
    assert report.target == "dump" and report.mesh.axis_names == ("data", "model")
    assert set(df["axes"].map(tuple)) == {("data",), ("model",)}
    assert set(df["count"]) == {4}
    assert list(df.columns[:10]) == ["kind", "axes", "notation", "dtype", "bytes", "count", "seconds", "regime",
                                     "op_name", "source"]
    assert (df.seconds > 0).all() and set(df.regime) <= {"bandwidth", "latency"}
    assert all(src.endswith(tuple(f":{n}" for n in range(1, 200))) for src in df.source)
    assert report.totals.comm_seconds == pytest.approx((df.seconds * df["count"]).sum())
    assert report.totals.compute_seconds > 0 and len(report.dots) > 0
    assert set(report.totals.by_axis) == {"data", "model"}
    assert sum(report.totals.by_kind.values()) == pytest.approx(report.totals.comm_seconds)


def test_analyze_hlo_reads_text_and_dump_folders(report, tmp_path):
    from_text = analyze_hlo(SPMD.read_text(), mesh="data=4,model=2")
    assert from_text.collectives[["kind", "bytes", "count"]].equals(report.collectives[["kind", "bytes", "count"]])
    dump = tmp_path / "dump"
    dump.mkdir()
    shutil.copy(SPMD, dump / "module_0001.jit_step.0001.spmd-partitioner.after_spmd-partitioning.txt")
    shutil.copy(SAMPLES / "scan_fsdp_tp.cpu.final.hlo", dump / "module_0001.jit_step.cpu_after_optimizations.txt")
    chosen, why = pick_dump_file(dump)
    assert "after_spmd-partitioning" in chosen.name and "SPMD" in why
    from_dump = analyze_hlo(dump, mesh={"data": 4, "model": 2})
    assert any("after_spmd-partitioning" in n for n in from_dump.notes)
    assert len(from_dump.collectives) == len(report.collectives)
    (dump / "module_0001.jit_step.0001.spmd-partitioner.after_spmd-partitioning.txt").unlink()
    assert pick_dump_file(dump)[0].name.endswith("after_optimizations.txt")


def test_without_a_mesh_axes_are_named_from_the_groups():
    r = analyze_hlo(SPMD)
    assert r.mesh.axis_sizes == (4, 2) and r.mesh.axis_names == ("axis_0", "axis_1")
    assert set(r.collectives["axes"].map(tuple)) == {("axis_0",), ("axis_1",)}
    assert any("No mesh was given" in n for n in r.notes)


def test_bad_inputs_are_analyzer_errors(tmp_path):
    with pytest.raises(MeshError, match="8"):
        analyze_hlo(SPMD, mesh="data=2,model=2")
    with pytest.raises(AnalyzerError, match="neither HLO text nor an existing file"):
        analyze_hlo(tmp_path / "missing.hlo")
    with pytest.raises(AnalyzerError, match="holds no HLO text"):
        analyze_hlo(tmp_path)
    with pytest.raises(HloSyntaxError):
        analyze_hlo("HloModule broken\n\nENTRY %main () -> f32[] {\n  ROOT %x = f32[] bogus-op(\n}\n")
    with pytest.raises(AnalyzerError, match="cost model"):
        analyze_hlo(SPMD, mesh="data=4,model=2", model="fancy")


def test_reprice_changes_seconds_not_bytes(report):
    v5p = reprice(report, hardware="tpu-v5p")
    assert v5p.hardware == "tpu-v5p"
    assert list(v5p.collectives.bytes) == list(report.collectives.bytes)
    assert list(v5p.collectives["count"]) == list(report.collectives["count"])
    assert v5p.totals.comm_seconds < report.totals.comm_seconds  # twice the ICI bandwidth of v5e
    ideal = reprice(report, model="ideal")
    assert ideal.analysis.cost_model == "ideal"
    assert ideal.totals.comm_seconds <= report.totals.comm_seconds  # no missing wraparound, no hops
    declared = reprice(report, topology="v5e:4x2")
    assert "v5e:4x2" in declared.topology


def test_analysis_context_carries_what_rules_need(report):
    import dataclasses

    from analyzer.analysis.context import AnalysisContext

    ctx = report.analysis
    assert isinstance(ctx, AnalysisContext)
    for key in ("module", "graph", "hardware", "topology", "hlo_path"):  # a dump: no lowered, no args
        assert getattr(ctx, key) is not None, key
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.module = None  # type: ignore[misc]
    assert len(ctx.collectives) == len(report.collectives)
    assert len(ctx.dots) == len(report.dots)
    rs = [c for c in ctx.collectives if c.kind == "reduce-scatter"]
    assert rs and all(c.only_used_sharded and c.dot is not None and c.dot_relation == "from" for c in rs)
    ag = [c for c in ctx.collectives if c.kind == "all-gather"]
    assert all(c.dot is not None and c.dot_relation == "feeds" for c in ag)
    assert all(c.cost is not None and c.cost.seconds > 0 for c in ctx.collectives)
    assert "analysis" not in report.to_dict()  # live objects never reach the JSON


def test_json_round_trip(report):
    data = json.loads(report.to_json())
    assert len(data["collectives"]) == len(report.collectives)


def test_public_names():
    assert analyzer.analyze is not None and analyzer.analyze_hlo is analyze_hlo


def test_cli_inspect(capsys):
    assert main(["inspect", str(SPMD), "--mesh", "data=4,model=2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["collectives"]) == 6
    assert main(["inspect", str(SPMD), "--mesh", "data=4,model=2", "--csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("kind,axes,notation") and len(lines) == 7
    assert main(["inspect", str(SPMD), "--mesh", "data=4,model=2"]) == 0
    text = capsys.readouterr().out
    assert "AllGather_model" in text and "data" in text
    assert main(["inspect", str(SPMD), "--mesh", "data=3"]) == 2
    assert "mesh" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_analyze(capsys, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    assert main(["analyze", "examples.chapter:matmul_case3", "--mesh", "X=4,Y=2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [c["kind"] for c in data["collectives"]] == ["all-reduce"]
    assert main(["analyze", "examples.chapter:no_such_entry", "--mesh", "X=4,Y=2"]) == 2


def test_a_report_rebuilt_from_json_prices_on_its_topology_spec_or_says_it_cannot(report):
    """report_from_dict rebuilds the Topology from the JSON's typed `topology_spec` (never from the sentence
    `topology` says it in): the rules price alternatives on the same Topology, so their figures are the live
    report's; reprice, which needs the HLO module, says plainly that it cannot. A report written without the
    spec has no topology, and pricing says so."""
    from analyzer.analysis.report import report_from_dict
    from analyzer.errors import AnalyzerError
    from analyzer.rules import run_rules
    from analyzer.rules.facts import Facts

    data = json.loads(report.to_json())
    again = report_from_dict(data)
    assert again.analysis.module is None and again.analysis.topology is not None
    with pytest.raises(AnalyzerError, match="rebuilt from JSON"):
        reprice(again, hardware="tpu-v5p")
    live, rebuilt = Facts.from_report(report), Facts.from_report(again)
    assert rebuilt.topology.describe() == live.topology.describe() and rebuilt.topology.coords == live.topology.coords
    c = live.collectives[0]
    assert rebuilt.price(c.kind, c.bytes, c.axes) == live.price(c.kind, c.bytes, c.axes)
    assert all(d.code != "HA900" for d in run_rules(again))
    data.pop("topology_spec")
    facts = Facts.from_report(report_from_dict(data))
    assert facts.topology is None
    with pytest.raises(AnalyzerError, match="no topology"):
        facts.price(c.kind, c.bytes, c.axes)


FINAL = SAMPLES / "shard_map_collectives.cpu.final.hlo"  # is_scheduled=true: the CPU backend's final module


def test_backend_final_module_is_warned_about_first(tmp_path):
    final = analyze_hlo(FINAL)
    assert len(final.warnings) == 1
    w = final.warnings[0]
    # every kind in the module named with its count (one each in this sample), and the flags for the SPMD module
    for kind in ("1 all-reduce", "1 all-gather", "1 reduce-scatter", "1 all-to-all", "1 collective-permute"):
        assert kind in w
    assert "--xla_dump_hlo_pass_re=spmd-partitioning" in w
    assert not analyze_hlo(SAMPLES / "shard_map_collectives.cpu.spmd.hlo").warnings
    # shown before anything else in every format, kept by JSON and reprice
    assert final.to_markdown().split("\n\n")[1] == f"> **Warning:** {w}"
    assert final.to_text().index("Warning: Only the backend") < final.to_text().index("Totals")
    html = final.to_html()
    assert html.index('class="warning"') < html.index('id="summary"')
    assert json.loads(final.to_json())["warnings"] == [w]
    assert "warnings" not in json.loads(analyze_hlo(SAMPLES / "shard_map_collectives.cpu.spmd.hlo").to_json())
    assert reprice(final, hardware="tpu-v5p").warnings == final.warnings
    from analyzer.analysis.report import report_from_dict

    assert report_from_dict(final.to_dict()).warnings == (w,)
    # a dump folder with only the final module: warned too, and the note says which file was read
    dump = tmp_path / "dump"
    dump.mkdir()
    text = FINAL.read_text().replace(", is_scheduled=true", "")
    (dump / "module_0001.jit_collectives.cpu_after_optimizations.txt").write_text(text)
    assert analyze_hlo(dump).warnings == final.warnings


def test_backend_final_warning_counts_async_and_combined_forms():
    from analyzer.hlo.parser import parse_hlo
    from analyzer.pipeline import backend_final_warning

    m = parse_hlo("HloModule m, is_scheduled=true\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                  "  ROOT c = f32[] add(a, b)\n}\nENTRY e {\n  p = f32[8] parameter(0)\n  q = f32[4] parameter(1)\n"
                  "  r = (f32[8], f32[4]) all-reduce(p, q), replica_groups={{0,1}}, to_apply=add\n"
                  "  s = f32[8] all-reduce-start(p), replica_groups={{0,1}}, to_apply=add\n"
                  "  ROOT d = f32[8] all-reduce-done(s)\n}\n")
    w = backend_final_warning(m)
    assert "2 all-reduce" in w and "1 tuple-shaped" in w and "1 in async start/done form" in w
    assert backend_final_warning(parse_hlo("HloModule m\nENTRY e {\n  ROOT p = f32[] parameter(0)\n}\n")) is None
