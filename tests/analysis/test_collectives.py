"""Extraction: one row per logical collective, whatever form XLA printed it in; counts through loops and
branches; recognised patterns (reduce-scatter from all-reduce + slice, compiler rewrites, TPU forms)."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.pipeline import analyze_hlo
from analyzer.analysis.collectives import extract_collectives
from analyzer.hlo.parser import parse_hlo

SAMPLES = Path(__file__).resolve().parents[1] / "hlo" / "samples"
X = "replica_groups={{0,2,4,6},{1,3,5,7}}"   # over X on a mesh X=4, Y=2
Y = "replica_groups={{0,1},{2,3},{4,5},{6,7}}"  # over Y

MODULE = f"""HloModule forms, num_partitions=8

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

%wrapped (w: f32[16]) -> f32[16] {{
  %w = f32[16] parameter(0)
  ROOT %ar = f32[16] all-reduce(%w), channel_id=9, {Y}, use_global_device_ids=true, to_apply=%add
}}

%body (p: (s32[], f32[8,16])) -> (s32[], f32[8,16]) {{
  %p = (s32[], f32[8,16]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %one = s32[] constant(1)
  %n = s32[] add(%i, %one)
  %x = f32[8,16] get-tuple-element(%p), index=1
  %ag = f32[32,16] all-gather(%x), channel_id=10, {X}, dimensions={{0}}, use_global_device_ids=true, metadata={{op_name="jit(f)/while/body/all_gather"}}
  %sl = f32[8,16] slice(%ag), slice={{[0:8], [0:16]}}
  ROOT %t = (s32[], f32[8,16]) tuple(%n, %sl)
}}

%cond (p.1: (s32[], f32[8,16])) -> pred[] {{
  %p.1 = (s32[], f32[8,16]) parameter(0)
  %i = s32[] get-tuple-element(%p.1), index=0
  %b = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %b), direction=LT
}}

%small (x: f32[4]) -> f32[4] {{
  %x = f32[4] parameter(0)
  ROOT %r = f32[4] all-reduce(%x), channel_id=11, {X}, use_global_device_ids=true, to_apply=%add
}}

%large (x: f32[4]) -> f32[4] {{
  %x = f32[4] parameter(0)
  %big = f32[1048576] broadcast(%x), dimensions={{}}
  %r.1 = f32[1048576] all-reduce(%big), channel_id=12, {X}, use_global_device_ids=true, to_apply=%add
  ROOT %s = f32[4] slice(%r.1), slice={{[0:4]}}
}}

ENTRY %main (a: f32[8,16], b: f32[8,16], k: s32[], v: f32[4]) -> f32[] {{
  %a = f32[8,16] parameter(0)
  %b = f32[8,16] parameter(1)
  %start = ((f32[8,16]), f32[8,32]) all-gather-start(%a), channel_id=1, {Y}, dimensions={{1}}, use_global_device_ids=true
  %done = f32[8,32] all-gather-done(%start)
  %tup = (f32[8,16], f32[8,16]) all-reduce(%a, %b), channel_id=2, {X}, use_global_device_ids=true, to_apply=%add
  %t0 = f32[8,16] get-tuple-element(%tup), index=0
  %t1 = f32[8,16] get-tuple-element(%tup), index=1
  %rs_ar = f32[8,16] all-reduce(%b), channel_id=3, {Y}, use_global_device_ids=true, to_apply=%add
  %offsets = s32[2] constant({{0, 8}})
  %pid = u32[] partition-id()
  %two = u32[] constant(2)
  %pos = u32[] remainder(%pid, %two)
  %off = s32[1] dynamic-slice(%offsets, %pos), dynamic_slice_sizes={{1}}
  %off.s = s32[] reshape(%off)
  %zero = s32[] constant(0)
  %rs = f32[8,8] dynamic-slice(%rs_ar, %zero, %off.s), dynamic_slice_sizes={{8,8}}
  %keep_ar = f32[8,16] all-reduce(%a), channel_id=4, {Y}, use_global_device_ids=true, to_apply=%add
  %fixed = f32[8,8] dynamic-slice(%keep_ar, %zero, %zero), dynamic_slice_sizes={{8,8}}
  %ar1 = f32[8,16] all-reduce(%t0), channel_id=5, {X}, use_global_device_ids=true, to_apply=%add
  %ar2 = f32[8,16] all-reduce(%t1), channel_id=6, {X}, use_global_device_ids=true, to_apply=%add
  %sum = f32[8,16] add(%ar1, %ar2)
  %dup1 = f32[8,64] all-gather(%sum), channel_id=7, {X}, dimensions={{1}}, use_global_device_ids=true
  %dup2 = f32[8,64] all-gather(%sum), channel_id=8, {X}, dimensions={{1}}, use_global_device_ids=true
  %v = f32[4] parameter(3)
  %inner = f32[4] all-reduce(%v), channel_id=13, {X}, use_global_device_ids=true, to_apply=%add
  %outer = f32[4] all-reduce(%inner), channel_id=14, {Y}, use_global_device_ids=true, to_apply=%add
  %outer.r = f32[16] broadcast(%outer), dimensions={{}}
  %as = ((f32[16]), f32[16]) async-start(%outer.r), calls=%wrapped
  %ad = f32[16] async-done(%as)
  %c0 = s32[] constant(0)
  %init = (s32[], f32[8,16]) tuple(%c0, %a)
  %w = (s32[], f32[8,16]) while(%init), condition=%cond, body=%body
  %k = s32[] parameter(2)
  %cv = f32[4] conditional(%k, %v, %v), branch_computations={{%small, %large}}
  ROOT %out = f32[] constant(0)
}}
"""


def test_async_pair_is_one_collective():
    found = [r for r in extract_collectives(parse_hlo(MODULE)) if r.instruction.name == "start"]
    assert len(found) == 1
    r = found[0]
    assert r.kind == "all-gather" and not r.sync and r.instructions == ("start", "done")
    assert r.bytes == 8 * 32 * 4 and r.per_device_bytes == 8 * 16 * 4


def test_rows_by_kind_and_count():
    module = parse_hlo(MODULE)
    found = extract_collectives(module)
    names = [(r.instruction.name, r.operand_index, r.kind, r.count) for r in found]
    assert ("tup", 0, "all-reduce", 1.0) in names and ("tup", 1, "all-reduce", 1.0) in names
    assert ("ag", None, "all-gather", 3.0) in names  # in the loop body: 3 executions per call
    assert ("rs_ar", None, "reduce-scatter", 1.0) in names
    assert ("keep_ar", None, "all-reduce", 1.0) in names  # sliced at a fixed offset: not a reduce-scatter
    # add(all-reduce, all-reduce): one all-reduce of the sum
    merged = [r for r in found if r.instruction.name == "ar1"]
    assert len(merged) == 1 and "ar2" in merged[0].instructions and not any(r.instruction.name == "ar2" for r in found)
    # two identical all-gathers of one value: one
    assert sum(r.instruction.name in ("dup1", "dup2") for r in found) == 1
    # all-reduce over Y of an all-reduce over X: one all-reduce over both
    folded = [r for r in found if r.instruction.name == "inner"]
    assert len(folded) == 1 and folded[0].group_size == 8 and not any(r.instruction.name == "outer" for r in found)
    # async-start wrapping an all-reduce: one async all-reduce
    wrapped = [r for r in found if r.instruction.name == "ar"]
    assert len(wrapped) == 1 and not wrapped[0].sync and wrapped[0].instructions == ("as", "ad")
    # one row per branch, each with its branch
    branches = {r.instruction.name: r.branch for r in found if r.branch}
    assert branches == {"r": (("cv", 0),), "r.1": (("cv", 1),)}


def test_reduce_scatter_from_all_reduce_and_partition_slice():
    found = {(r.instruction.name, r.operand_index): r for r in extract_collectives(parse_hlo(MODULE))}
    rs = found[("rs_ar", None)]
    assert rs.original_ops == "all-reduce + dynamic-slice" and rs.only_used_sharded
    assert rs.bytes == 8 * 16 * 4 and tuple(rs.result_shape.dims) == (8, 8) and rs.scatter_dims == (1,)
    assert "rs" in rs.instructions


def test_report_totals_take_the_costliest_branch():
    report = analyze_hlo(MODULE, mesh="X=4,Y=2")
    df = report.collectives
    small = df[df.instruction == "r"].total_seconds.iloc[0]
    large = df[df.instruction == "r.1"].total_seconds.iloc[0]
    assert large > small
    rest = df[df.branch == ""].total_seconds.sum()
    assert report.totals.comm_seconds == pytest.approx(rest + large)
    assert any("branch" in n for n in report.notes)
    assert set(df[df.instruction == "ag"]["axes"]) == {("X",)}
    assert df[df.instruction == "ag"]["count"].iloc[0] == 3


def test_tpu_async_collective_fusions_are_counted_once():
    """start / continuation / done fusions that each hold the all-gather's text: one row each chain, and
    the TPU module has as many all-gathers per step as the post-partitioning one."""
    tpu = extract_collectives(parse_hlo((SAMPLES / "scan_fsdp_tp.tpu-v5e-2x2.final.hlo").read_text()))
    chains = [r for r in tpu if not r.sync and r.kind == "all-gather"]
    assert chains and all(len(r.instructions) >= 3 for r in chains) and all(r.overlapped for r in chains)
    channels = [r.instruction.channel_id for r in tpu]
    assert len(channels) == len(set(channels))  # no channel counted twice


def test_samples_agree_between_spmd_and_final_cpu_forms():
    """The shard_map sample: the post-partitioning module and the TPU module give the same kinds."""
    spmd = extract_collectives(parse_hlo((SAMPLES / "shard_map_collectives.cpu.spmd.hlo").read_text()))
    tpu = extract_collectives(parse_hlo((SAMPLES / "shard_map_collectives.tpu-v5e-2x2.final.hlo").read_text()))
    kinds = {"all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all"}
    assert {r.kind for r in spmd} == kinds == {r.kind for r in tpu}


SLICED_BY_OTHER_AXIS = f"""HloModule other_axis, num_partitions=8

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

ENTRY %main (a: f32[8,16]) -> (f32[8,8], f32[8,8]) {{
  %a = f32[8,16] parameter(0)
  %pid = u32[] partition-id()
  %zero = s32[] constant(0)
  %by_x = s32[8] constant({{0, 0, 8, 8, 0, 0, 8, 8}})
  %ox = s32[1] dynamic-slice(%by_x, %pid), dynamic_slice_sizes={{1}}
  %ox.s = s32[] reshape(%ox)
  %ar_y = f32[8,16] all-reduce(%a), channel_id=1, {Y}, use_global_device_ids=true, to_apply=%add
  %wrong = f32[8,8] dynamic-slice(%ar_y, %zero, %ox.s), dynamic_slice_sizes={{8,8}}
  %by_y = s32[8] constant({{0, 8, 0, 8, 0, 8, 0, 8}})
  %oy = s32[1] dynamic-slice(%by_y, %pid), dynamic_slice_sizes={{1}}
  %oy.s = s32[] reshape(%oy)
  %ar_y2 = f32[8,16] all-reduce(%a), channel_id=2, {Y}, use_global_device_ids=true, to_apply=%add
  %right = f32[8,8] dynamic-slice(%ar_y2, %zero, %oy.s), dynamic_slice_sizes={{8,8}}
  ROOT %t = (f32[8,8], f32[8,8]) tuple(%wrong, %right)
}}
"""


def test_a_slice_by_another_axis_is_not_a_reduce_scatter():
    """All-reduce over Y, then each device keeps the slice its X coordinate picks: both devices of a Y group
    keep the same slice, so this is an all-reduce (used sharded), not a reduce-scatter over Y."""
    found = {r.instruction.name: r for r in extract_collectives(parse_hlo(SLICED_BY_OTHER_AXIS))}
    assert found["ar_y"].kind == "all-reduce" and found["ar_y"].only_used_sharded
    assert found["ar_y2"].kind == "reduce-scatter" and found["ar_y2"].original_ops == "all-reduce + dynamic-slice"
