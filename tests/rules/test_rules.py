"""Each rule fires on its fixture program with the saving the chapter's formulas predict, and stays quiet
on its well-sharded counterpart.

Hand computations use the book's numbers ("How to Scale Your Model"; shared/reference/scaling_book_numbers.md):
TPU v5p C = 4.59e14 FLOPs/s, W_ici = 1.8e11 B/s bidirectional; v5e C = 1.97e14, W_ici = 9e10 bidirectional,
4.5e10 one way, T_min = 1 us per hop; H100 NVLink egress 450e9 B/s per GPU, scale-out 400e9 B/s per node of 8.
Tolerance: 10% (the issue's acceptance), written as REL below.
"""

from __future__ import annotations

import pytest

from analyzer.diagnostics import Severity
from analyzer.rules import check_rules, run_rules
from analyzer.units import format_bytes
from analyzer.rules.config import Budgets, Config

pytestmark = pytest.mark.slow
REL = 0.10

V5P_C, V5P_W = 4.59e14, 1.8e11
V5E_W, V5E_W1, T_MIN = 9e10, 4.5e10, 1e-6


def only(report, code):
    found = [d for d in report.diagnostics if d.code == code]
    assert len(found) == 1, f"expected one {code}, got {[(d.code, d.message) for d in report.diagnostics]}"
    return found[0]


def codes(report):
    return {d.code for d in report.diagnostics}


def assert_complete(d):
    """Every finding carries what the issue asks for: location, notation (for collectives), times, fix; its
    saving is in step time (docs/rules.md, "Savings in step time"): the exposed time the change removes, at
    most what it takes off the links."""
    assert d.code and d.name and d.message and d.fix
    assert d.location.instruction or d.location.computation
    if d.saving_seconds is not None:
        assert d.seconds is not None and d.alternative and d.alternative_seconds is not None
        comm = d.details["comm_saving_seconds"]
        assert comm == pytest.approx(d.seconds - d.alternative_seconds, rel=1e-6)
        assert d.saving_seconds == pytest.approx(max(0.0, min(d.details["exposed_seconds"], comm)), rel=1e-6)


def exposed(report, kind=None):
    """The step's exposed seconds of the report's collectives (of one kind), as the step model charged them."""
    frame = report.collectives
    rows = frame if kind is None else frame[frame["kind"] == kind]
    return float(sum(min(e, t) for e, t in zip(rows["exposed_seconds"], rows["total_seconds"])))


# --------------------------------------------------------------------------------------------------- HA101
def test_comm_bound_matmul_fires_below_the_per_chip_batch_threshold(analysed):
    r = analysed("fsdp_matmul(128)")
    d = only(r, "HA101")
    assert_complete(d)
    D, F, b = 4096, 8192, 128
    t_comm = 2 * D * F / V5P_W          # AllGather_X of W[D_X, F] in bf16: V / W_ici
    t_math = 2 * b * D * F / V5P_C      # 2 x per-chip tokens x D x F FLOPs at C
    assert d.saving_seconds == pytest.approx(t_comm - t_math, rel=REL)
    assert d.details["per_chip_batch"] == pytest.approx(b, rel=REL)
    assert d.details["quantity_value"] == pytest.approx(b, rel=REL)
    assert "2,550" in d.message and "128" in d.message
    assert d.location.file.endswith("programs.py") and "AllGather_X" in d.notation


def test_comm_bound_matmul_quiet_above_the_threshold(analysed):
    assert "HA101" not in codes(analysed("fsdp_matmul(4096)"))


def test_megatron_above_the_f_over_2550_bound(analysed):
    """Tensor parallelism 8-way with F = 8192: F / Y = 1024 < 2550, so the AllReduce outlasts both matmuls."""
    d = only(analysed("megatron_mlp(f=8192)"), "HA101")
    B, D, F, Y = 4096, 1024, 8192, 8
    t_math = 4 * B * D * F / (Y * V5P_C)  # W_in and W_out, each 2 B D F / Y
    t_comm = 2 * 2 * B * D / V5P_W        # AllReduce of the bf16 output: 2 V / W_ici
    assert d.saving_seconds == pytest.approx(t_comm - t_math, rel=REL)
    assert d.details["quantity_value"] == pytest.approx(F / Y, rel=REL)
    # the per-chip batch is the report's one figure in tokens, not the roofline's quantity (issue 26)
    assert d.details["per_chip_batch"] == pytest.approx(B, rel=REL)
    assert d.details["threshold_topology"] == pytest.approx(2550, rel=REL)
    assert "HA101" not in codes(analysed("megatron_mlp(f=32768)"))  # F / Y = 4096 > 2550


def test_comm_bound_matmul_hidden_behind_the_previous_matmul_is_not_flagged(analysed):
    """HA101 judges exposed time (issue 10): W2's gather (V / W = 2 x 8192 x 256 / 1.8e11 = 23.3 us) against
    its own matmul's 1.17 us (per-chip batch 128 < 2550) is comm-bound, but XLA issues it under the matmul
    before (x . W1, 2 x 128 x 8192 x 8192 / 4.59e14 = 37 us of FLOPs, longer still from HBM): the step never
    waits for it, so no finding. With W1 of 512 rows that matmul takes about 3 us and the step waits for the
    rest of the gather: the finding's saving is that wait, not t_comm - t_math."""
    t_comm = 2 * 8192 * 256 / V5P_W
    t_math = 2 * 128 * 8192 * 256 / V5P_C
    hidden = analysed("gather_behind_matmul(8192)")
    assert exposed(hidden) == 0.0 and hidden.totals.step_seconds == pytest.approx(hidden.totals.compute_seconds)
    assert "HA101" not in codes(hidden)
    r = analysed("gather_behind_matmul(512)")
    d = only(r, "HA101")
    assert_complete(d)
    wait = r.totals.step_seconds - r.totals.compute_seconds  # one collective: all the step's waiting is for it
    assert exposed(r) == pytest.approx(wait, rel=1e-6) and 0 < wait < t_comm - t_math
    assert d.seconds == pytest.approx(t_comm, rel=REL) and d.alternative_seconds == pytest.approx(t_math, rel=REL)
    assert d.saving_seconds == pytest.approx(wait, rel=1e-6)
    assert d.details["comm_saving_seconds"] == pytest.approx(t_comm - t_math, rel=REL)


# --------------------------------------------------------------------------------------------------- HA102
def test_gathered_larger_operand_saving_is_problem_9s_m_over_k(analysed):
    r = analysed("gather_wide_operand(1024, 8192, 1024)")
    d = only(r, "HA102")
    assert_complete(d)
    N, M, K = 1024, 8192, 1024
    gather, scatter = 2 * N * M / V5P_W, 2 * N * K / V5P_W  # AllGather A[N, M] vs ReduceScatter C[N, K]
    assert d.details["ratio"] == pytest.approx(M / K, rel=REL)
    assert d.fix.startswith("b: P(None, None) -> P('X', None)")  # B[M_X, K]: its contracting dim sharded
    assert d.details["fix_spec"] == {"arguments": {"b": "P('X', None)"}}  # what --verify-fixes applies
    assert d.saving_seconds == pytest.approx(gather - scatter, rel=REL)


def test_gathered_larger_operand_spec_keeps_the_axes_the_operand_has(analysed):
    """B[M, K_Y] replicated over X: the spec to write shards M over X and keeps K on Y (issue 26: a
    `[F_model, D_data]` kernel was told `P('data')`, dropping 'model')."""
    d = only(analysed("gather_wide_operand_2d()"), "HA102")
    assert d.fix.startswith("b: P(None, 'Y') -> P('X', 'Y')")
    assert d.details["partition_spec"] == "P(None, 'Y')" and d.details["proposed_partition_spec"] == "P('X', 'Y')"
    assert d.details["fix_spec"] == {"arguments": {"b": "P('X', 'Y')"}}


def test_gathered_larger_operand_quiet_when_gathering_is_cheaper(analysed):
    assert "HA102" not in codes(analysed("gather_wide_operand(1024, 1024, 8192)"))


def test_reduced_larger_output_the_reverse_of_problem_9(analysed):
    """Slicing a replicated B and all-reducing C[N, K] when K = 8 M: gathering A[N, M] moves 8x fewer bytes."""
    d = only(analysed("sliced_weight_then_psum(False)"), "HA102")
    assert_complete(d)
    N, M, K = 1024, 1024, 8192
    all_reduce = 2 * (2 * N * K) / V5P_W  # AllReduce of C: 2 V / W
    gather = 2 * N * M / V5P_W            # AllGather of A: V / W
    assert d.saving_seconds == pytest.approx(all_reduce - gather, rel=REL)
    # the user wrote the psum in a shard_map body: its in_specs decide what each device holds, so the change is
    # there, not in an argument's sharding (no spec for --verify-fixes to apply)
    assert "fix_spec" not in d.details and d.fix.startswith("keep the output replicated over X")
    assert "HA102" not in codes(analysed("sliced_weight_then_psum(True)"))


def test_the_reduction_side_s_change_is_the_sharded_operand_s_spec():
    """HA102's reduction side where XLA chose it for the arguments' shardings: the operand split on its contracting
    dim arrives whole on it, `a: P(None, 'X') -> P(None, None)` (its other dims as they are)."""
    from analyzer.hlo.parser import parse_hlo
    from analyzer.rules.matmul import _contracting_spec

    module = parse_hlo("""HloModule m
ENTRY e {
  a = bf16[1024,128]{1,0} parameter(0), sharding={devices=[1,8]<=[8]}, metadata={op_name="a"}
  b = bf16[128,8192]{1,0} parameter(1), metadata={op_name="b"}
  ROOT d = bf16[1024,8192]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
""")
    comp = module.entry
    a, dot = comp.by_name["a"], comp.by_name["d"]
    specs = {"a": (("Y",), ("X",))}
    assert _contracting_spec(comp, dot, 0, a, ("X",), specs, drop=True) == ("a", "P('Y', 'X')", "P('Y', None)")
    assert _contracting_spec(comp, dot, 0, a, ("X:(1)2",), specs, drop=True)[2] == "P('Y', None)"  # a sub-axis
    assert _contracting_spec(comp, dot, 0, a, ("Z",), specs, drop=True) == ("", "", "")  # not split over Z: none


# --------------------------------------------------------------------------------------------------- HA302
def test_a_resharded_argument_s_change_is_its_in_sharding(analysed):
    """An argument read in another layout than it arrives in: the fix is its PartitionSpec, for --verify-fixes."""
    d = only(analysed("resharded_argument()"), "HA302")
    assert d.fix.startswith("y: P(None, 'X') -> P('X', None): the argument arrives in the layout its consumer reads")
    assert d.details["fix_spec"] == {"arguments": {"y": "P('X', None)"}}
    assert d.details["argument"] == "y" and d.details["root_cause"] == "the sharding of y"


# --------------------------------------------------------------------------------------------------- HA103
def test_all_reduce_only_used_sharded(analysed):
    d = only(analysed("psum_then_slice(False)"), "HA103")
    assert_complete(d)
    V = 8 * 1024 * 2048 * 2             # the per-device partial sums, bf16
    assert d.seconds == pytest.approx(2 * V / V5P_W, rel=REL)          # AllReduce: 2 V / W
    assert d.alternative_seconds == pytest.approx(V / V5P_W, rel=REL)  # ReduceScatter: V / W
    assert d.saving_seconds == pytest.approx(V / V5P_W, rel=REL)


def test_reduce_scatter_counterpart_is_quiet(analysed):
    assert "HA103" not in codes(analysed("psum_then_slice(True)"))


def test_all_reduce_then_activation_under_jit(analysed):
    """jit: the matmul's partial sums are all-reduced, the gelu runs on the whole array, then sliced."""
    d = only(analysed("matmul_then_activation(False)"), "HA103")
    V = 8192 * 2048 * 2
    assert d.saving_seconds == pytest.approx(V / V5P_W, rel=REL)
    r = analysed("matmul_then_activation(True)")
    assert "HA103" not in codes(r) and set(r.collectives["kind"]) == {"reduce-scatter"}


# --------------------------------------------------------------------------------------------------- HA201
def test_idle_mesh_axis_problem_2_closing_note(analysed):
    d = only(analysed("idle_axis(False)"), "HA201")
    assert_complete(d)
    B, D, Y = 1024, 4096, 2
    V = 2 * B * D / Y                   # AllGather_X [B_X, D_Y]: one Y-shard of the array
    assert d.seconds == pytest.approx(V / V5P_W, rel=REL)
    assert d.alternative_seconds == pytest.approx(V / (2 * V5P_W), rel=REL)  # over X and Z: 2 axes
    assert d.saving_seconds == pytest.approx(V / (2 * V5P_W), rel=REL)
    assert d.details["idle_axes"] == ["Z"]


def test_idle_mesh_axis_quiet_when_sharded_over_it(analysed):
    assert "HA201" not in codes(analysed("idle_axis(True)"))


def test_idle_mesh_axis_through_a_scan(analysed):
    """The gathered value comes out of a `lax.scan` whose carry XLA sharded by per-device offsets."""
    d = only(analysed("idle_axis_scan(False)"), "HA201")
    V = 2 * 1024 * 4096 / 2
    assert d.saving_seconds == pytest.approx(V / (2 * V5P_W), rel=REL)
    assert "HA201" not in codes(analysed("idle_axis_scan(True)"))


def test_problem_2_on_a_v4p_4x4x4(analysed):
    """The chapter's own numbers: AllGather_X([B_X, D_Y]) 23 us, 11.5 us (11.65 us computed) over X and Z."""
    r = analysed("idle_axis(False, shape=(4, 4, 4), hardware='tpu-v4p', topology='v4p:4x4x4', model='topology')")
    d = only(r, "HA201")
    assert d.seconds == pytest.approx(23e-6, rel=REL)
    assert d.alternative_seconds == pytest.approx(11.65e-6, rel=REL)


def test_problem_2_part_2_gather_over_two_axes(analysed):
    """[B_X, D_Y] -> [B, D]: XLA gathers over Y, then over X; the X gather moves the whole 2BD array, which
    over X, Y and the idle Z takes the chapter's 31 us (2BD / (3 W), the closing note of Problem 2)."""
    r = analysed("idle_axis(False, shape=(4, 4, 4), hardware='tpu-v4p', topology='v4p:4x4x4', model='topology', "
                 "out=P())")
    whole = [d for d in r.diagnostics if d.code == "HA201" and d.details["bytes"] == 2 * 1024 * 4096]
    assert len(whole) == 1 and sorted(whole[0].details["idle_axes"]) == ["Y", "Z"]
    assert whole[0].alternative_seconds == pytest.approx(2 * 1024 * 4096 / (3 * 9e10), rel=REL)


# --------------------------------------------------------------------------------------------------- HA202
def test_missing_wraparound_pop_quiz_2(analysed):
    d = only(analysed("gather_on_axis('Y')"), "HA202")
    assert_complete(d)
    assert d.severity == Severity.WARNING  # the slice was declared (topology="v5e:4x2@Y=x,X=y"), not assumed
    V = 2048 * 8192 * 2
    one_way = 3 * (V / 4) / V5E_W1      # 3 hops one way on a line of 4: 560 us in the book
    ring = V / V5E_W                    # with wraparound: 377 us in the book
    assert d.seconds == pytest.approx(one_way, rel=REL)
    assert d.alternative_seconds == pytest.approx(ring, rel=REL)
    # No v5e slice of 8 chips has wraparound (it needs an axis of 16): the closed ring is the book's figure,
    # not a change anyone can make on this slice, so it is no saving (issue 11; it was one_way - ring before).
    assert d.saving_seconds is None and d.details["wraparound_possible"] is False


def test_missing_wraparound_counts_only_the_axis_own_collectives(analysed):
    report = analysed("gathers_on_one_and_two_axes()")
    assert sorted(tuple(a) for a in report.collectives["axes"]) == [("Y",), ("Y", "X")]
    d = only(report, "HA202")
    assert d.details["axis"] == "Y" and d.details["collectives"] == 1  # not the AllGather over Y and X
    alone = only(analysed("gather_on_axis('Y')"), "HA202")
    assert d.seconds == pytest.approx(alone.seconds, rel=1e-9)


def test_wraparound_axis_is_quiet(analysed):
    """A v5e axis of 16 chips has its wraparound (16 devices: compiled in a child process)."""
    assert "HA202" not in codes(analysed("ring_of_16()"))


# --------------------------------------------------------------------------------------------------- HA203
def test_slow_link_across_gpu_nodes(analysed):
    d = only(analysed("gpu_gather('node')"), "HA203")
    assert_complete(d)
    V = 4096 * 8192 * 2
    across = V * (2 - 1) / (2 * 400e9 / 8)  # tree form: bytes (D-1)/(D W), 50 GB/s per GPU across nodes
    inside = V * (2 - 1) / (2 * 450e9)      # in-node AllGather of 2 GPUs: bytes (N-1) / (N W_GPU egress)
    assert d.saving_seconds == pytest.approx(across - inside, rel=REL)


def test_slow_link_across_tpu_slices(analysed):
    """Two v5e 2x2 slices over DCN: the gather over 'slice' crosses DCN at 3.125e9 B/s per chip."""
    d = only(analysed("dcn_gather('slice')"), "HA203")
    V = 4096 * 8192 * 2
    across = V * (2 - 1) / (2 * 3.125e9)    # (D-1)/D of the array over each chip's DCN egress
    inside = V / V5E_W                      # the same gather on an ICI ring of 2: V / W_ici
    assert d.seconds == pytest.approx(across, rel=REL)
    assert d.saving_seconds == pytest.approx(across - inside, rel=REL)
    assert "HA203" not in codes(analysed("dcn_gather('chip')"))


def test_inside_nvlink_is_quiet(analysed):
    assert "HA203" not in codes(analysed("gpu_gather('gpu')"))


# --------------------------------------------------------------------------------------------------- HA204
def test_straddling_axis_all_to_all_placed_in_order(analysed):
    """{data: 2, model: 4} on v5e:2x4: jax.make_mesh lays 'data' across x and y (tests/cost/test_placement.py).
    AllToAll_data of [I_data, J] (V = 4096 x 8192 x 2 B = 64 MiB) costs 1.12 ms on that zig-zag and 373 us with
    'data' laid on x (the placement in order): the alternative is the in-order analysis's own communication.
    The step waits for it at the end, so the saving is the exposed time that goes, which is what the step
    itself loses when analysed again on v5e:2x4@in-order (within 10%: 746 us of 1.16 ms -> 414 us)."""
    r = analysed("straddled_all_to_all()")
    assert r.analysis.topology.straddling_axes() == ("data",)
    d = only(r, "HA204")
    assert_complete(d)
    assert d.details["placement"] == "v5e:2x4@in-order" and d.details["physical_axes"] == ["x", "y"]
    placed = analysed("straddled_all_to_all('v5e:2x4@in-order')")
    assert placed.analysis.topology.straddling_axes() == () and "HA204" not in codes(placed)
    assert d.alternative_seconds == pytest.approx(placed.totals.comm_seconds, rel=1e-6)
    assert d.saving_seconds == pytest.approx(r.totals.step_seconds - placed.totals.step_seconds, rel=REL)
    assert "v5e:2x4@in-order" in d.fix and "'data' on x" in d.fix
    assert f"{d.alternative_seconds * 1e6:.0f} µs" in d.message


def test_straddling_axis_quiet_when_jax_placement_is_cheaper(analysed):
    """Issue 10's FSDP+TP MLP on {data: 4, model: 2} of v5e:2x4: 'data' straddles x and y, but its weight
    gathers use 3 links there (447 us) and 2 on y alone (1.12 ms): no explicit placement is cheaper."""
    r = analysed("straddled_fsdp()")
    assert r.analysis.topology.straddling_axes() == ("data",)
    assert "HA204" not in codes(r)


# --------------------------------------------------------------------------------------------------- HA301
def test_latency_bound_collectives_combine(analysed):
    d = only(analysed("many_small_psums(False)"), "HA301")
    assert_complete(d)
    per = 2 * T_MIN * 8 / 2             # AllReduce of a tiny array: 2 x T_min x X/2 hops (latency floor)
    assert d.saving_seconds == pytest.approx(6 * per - per, rel=REL)  # six floors -> one


def test_latency_bound_collective_in_a_loop_is_info(analysed):
    d = only(analysed("small_psum_in_loop()"), "HA301")
    assert d.severity == Severity.INFO
    V = 8 * 128 * 4                     # f32[8, 128] per device, all-reduced
    per = 2 * T_MIN * 8 / 2             # latency floor of one AllReduce over 8 chips
    assert d.saving_seconds == pytest.approx(16 * (per - 2 * V / V5E_W), rel=REL)


def test_one_large_psum_is_quiet(analysed):
    assert "HA301" not in codes(analysed("many_small_psums(True)"))


# --------------------------------------------------------------------------------------------------- HA302/3
def test_resharding_all_to_all(analysed):
    d = only(analysed("reshard('transpose')"), "HA302")
    assert_complete(d)
    V = 4096 * 4096 * 2
    assert d.saving_seconds == pytest.approx(V / (4 * V5P_W), rel=REL)  # AllToAll: V / (4 W)
    assert "[I_X, J]" in d.message and "[I, J_X]" in d.message
    assert "P(None, 'X')" in d.fix


def test_matching_shardings_are_quiet(analysed):
    assert not analysed("reshard('same')").diagnostics


def test_full_rematerialization_is_an_error(analysed):
    d = only(analysed("gather_then_slice(True)"), "HA303")
    assert_complete(d)
    assert d.severity == Severity.ERROR
    V = 4096 * 4096 * 2
    assert d.saving_seconds == pytest.approx(V / V5P_W - V / (4 * V5P_W), rel=REL)
    assert "HA302" not in codes(analysed("gather_then_slice(True)"))


def test_all_to_all_counterpart_is_quiet(analysed):
    assert not {"HA302", "HA303"} & codes(analysed("gather_then_slice(False)"))


# --------------------------------------------------------------------------------------------------- HA401/2
def test_memory_over_hbm(analysed):
    r = analysed("big_weight(False)")
    d = only(r, "HA401")
    assert d.severity == Severity.ERROR
    w = 8 * 1024 * (int(20e9 / 4 / (8 * 1024)) // 8 * 8) * 4
    assert d.details["saving_bytes"] == pytest.approx(w * 7 / 8, rel=REL)
    assert d.details["fits"]


def test_replicated_large_parameter(analysed):
    d = only(analysed("big_weight(False, 4.0)"), "HA402")
    assert d.details["saving_bytes"] == pytest.approx(4e9 * 7 / 8, rel=REL)


@pytest.mark.parametrize("gb", [20.0, 4.0])
def test_sharded_weight_is_quiet(analysed, gb):
    assert not {"HA401", "HA402"} & codes(analysed(f"big_weight(True, {gb})"))


# --------------------------------------------------------------------------------------------------- HA501/2
def test_budgets(analysed):
    r = analysed("fsdp_matmul(128)")
    t_comm = 2 * 4096 * 8192 / V5P_W
    t_math = 2 * 128 * 4096 * 8192 / V5P_C
    found = {d.code: d for d in run_rules(r, Config(budgets=Budgets(comm_seconds_per_step=100e-6,
                                                                     comm_compute_ratio=1.0)))}
    assert found["HA501"].saving_seconds == pytest.approx(t_comm - 100e-6, rel=REL)
    assert found["HA502"].saving_seconds == pytest.approx(t_comm - t_math, rel=REL)
    assert found["HA501"].severity == Severity.ERROR
    quiet = run_rules(r, Config(budgets=Budgets(comm_seconds_per_step=1e-3, comm_compute_ratio=50.0)))
    assert not {"HA501", "HA502"} & {d.code for d in quiet}


# --------------------------------------------------------------------------------------------------- suppressions
def test_config_ignore_and_unused_ignore(analysed):
    r = analysed("reshard('transpose')")
    res = check_rules(r, Config(ignore=("HA302", "HA202")))
    assert "HA302" not in {d.code for d in res.diagnostics}
    assert [s.entry for _, s in res.suppressed] == ["HA302"]
    unused = [d for d in res.diagnostics if d.code == "HA901"]
    assert len(unused) == 1 and "'HA202'" in unused[0].message


def test_decorator_style_override_and_select(analysed):
    r = analysed("reshard('transpose')")
    cfg = Config().override(select=["HA3"], ignore=["HA302"], where="@audit(ignore=...)")
    res = check_rules(r, cfg)
    assert not res.diagnostics and res.suppressed[0][1].where == "@audit(ignore=...)"


def test_inline_suppression(analysed):
    r = analysed("reshard_suppressed()")
    res = check_rules(r)
    assert "HA302" not in {d.code for d in res.diagnostics}
    assert res.suppressed and res.suppressed[0][1].kind == "inline"
    stale = analysed("stale_inline()")
    assert "HA901" in {d.code for d in check_rules(stale).diagnostics}


def test_baseline(analysed, tmp_path):
    from analyzer.rules.baseline import read_baseline, write_baseline

    r = analysed("reshard('transpose')")
    path = write_baseline(tmp_path / "baseline.json", r.diagnostics)
    assert read_baseline(path).counts
    res = check_rules(r, Config(baseline=str(path)))
    assert not res.diagnostics and res.suppressed[0][1].kind == "baseline"
    clean = check_rules(analysed("reshard('same')"), Config(baseline=str(path)))
    assert [d.code for d in clean.diagnostics] == ["HA901"]  # the accepted finding is gone: stale entry


# --------------------------------------------------------------------------------------------------- references
REFERENCES = {
    "dp": ("TransformerConfig(d_model=256, d_ff=1024, batch=64, seq=128, layers=2)", "{'data': 8}"),
    "fsdp": ("TransformerConfig(d_model=2048, d_ff=8192, batch=64, seq=1024, layers=2, attention=False)",
             "{'data': 8}"),
    "tp": ("TransformerConfig(d_model=1024, d_ff=32768, batch=8, seq=512, layers=2, attention=False)",
           "{'data': 1, 'model': 8}"),
}


@pytest.mark.parametrize("strategy", sorted(REFERENCES))
def test_clean_references_have_no_errors(strategy):
    """Megatron TP at 8-way (below F/2550 = 12.8), FSDP at 8192 tokens per chip (above 2550), pure DP."""
    import analyzer
    from analyzer.compile.models import TransformerConfig, build  # noqa: F401 - used by eval

    cfg, mesh = REFERENCES[strategy]
    step, args = build(eval(cfg), strategy, eval(mesh))  # noqa: S307
    r = analyzer.analyze(step, *args, mesh=eval(mesh), hardware="tpu-v5p")  # noqa: S307
    errors = [d for d in r.diagnostics if d.severity == Severity.ERROR]
    assert not errors, [(d.code, d.message) for d in errors]
    assert "HA900" not in {d.code for d in r.diagnostics}
    if strategy in ("fsdp", "tp"):
        assert "HA101" not in {d.code for d in r.diagnostics}


def test_memory_over_hbm_names_what_is_big_and_nothing_small(analysed):
    """HA401 says what the bytes are (largest first, each at least 1% of them) and lists no array whose
    sharding frees under 1% of the overflow (issue 11: 75 replicated 4 KiB norm weights against 17 GiB)."""
    from analyzer.rules.memory import _contributors

    r = analysed("big_weight(False)")
    d = only(r, "HA401")
    parts = d.details["contributors"]
    used = d.details["per_device_bytes"]
    assert list(parts.values()) == sorted(parts.values(), reverse=True) and all(v >= 0.01 * used for v in parts.values())
    first = next(iter(parts))
    assert f"({first} " in d.message  # the message names the largest part first
    # by hand: 10 GiB of temporaries, 2 GiB of arguments, a 10 MiB output: the output is under 1%, not named
    memory = {"temp_bytes": 10 << 30, "argument_bytes": 2 << 30, "output_bytes": 10 << 20, "alias_bytes": 0}
    assert [k for k, _ in _contributors(memory, 12 << 30)] == ["temporaries", "arguments"]


def test_memory_over_hbm_points_at_the_largest_temporary_when_temporaries_dominate(analysed):
    """Temporaries the largest part: HA401 points at the user's line of the largest array the program creates.
    fsdp_matmul(128) gathers W[D_X, F] into bf16[4096, 8192] per device: 4096 x 8192 x 2 B = 64 MiB (the dot's
    bf16[128, 8192] result is the output, not a temporary). HA401's `fraction` is lowered to 0.05% of v5p's
    HBM (~48 MB) so the program's ~75 MiB on the TPU (64 MiB of them temporaries, the TPU-memory estimate) is
    over it."""
    import inspect

    import programs

    r = analysed("fsdp_matmul(128)")
    assert r.memory["temp_bytes"] > r.memory["argument_bytes"] + r.memory["output_bytes"]
    res = check_rules(r, Config(select=("HA401",), rules={"HA401": {"fraction": 5e-4}}))
    (d,) = [d for d in res.diagnostics if d.code == "HA401"]
    assert next(iter(d.details["contributors"])) == "temporaries"
    lines, first = inspect.getsourcelines(programs.fsdp_matmul)
    line = first + next(i for i, text in enumerate(lines) if "lambda x, w: x @ w" in text)
    assert d.location.file == programs.__file__ and d.location.line == line
    assert d.location.instruction == "all-gather"
    assert d.details["largest_temporary"] == {"instruction": "all-gather", "shape": "bf16[4096,8192]",
                                              "bytes": 4096 * 8192 * 2}
    assert ("The largest temporary the program creates is this line's dot_general (HLO all-gather), bf16[4096,8192] "
            "(64.0 MiB per device by its shape") in d.message
    # The message names the limit the rule used (0.05% of HBM), not all of HBM, which 75 MiB does not exceed.
    hbm = d.details["hbm_bytes"]
    assert f"more than {format_bytes(hbm * 5e-4)}, the configured fraction 0.0005 of the {format_bytes(hbm)} of HBM" \
        in d.message
    # Arguments the largest part (a replicated 20 GB weight): the finding stays on the weight to shard
    w = only(analysed("big_weight(False)"), "HA401")
    assert next(iter(w.details["contributors"])) == "arguments" and "largest_temporary" not in w.details
    assert "largest temporary" not in w.message


def test_largest_temporary_skips_outputs_views_and_fused_bodies_and_reads_loop_bodies():
    """The proxy by hand: in the loop body a f32[1024,1024] multiply (1024 x 1024 x 4 B = 4 MiB) is the largest
    buffer made; the entry's f32[2048,1024] output (8 MiB), the fusion's inner f32[4096,1024] multiply (16 MiB,
    never materialised), the broadcasts, parameters and the loop's tuple are not temporaries.
    Without metadata there is no user line, so HA401 would stay at `<module>`."""
    from analyzer.hlo.parser import parse_hlo
    from analyzer.rules.memory import _temporary_location, largest_temporary

    text = """HloModule m, entry_computation_layout={(f32[1024]{0})->f32[2048,1024]{1,0}}

add {
  l = f32[] parameter(0)
  r = f32[] parameter(1)
  ROOT s = f32[] add(l, r)
}

fused {
  a = f32[1024]{0} parameter(0)
  big = f32[4096,1024]{1,0} broadcast(a), dimensions={1}
  sq = f32[4096,1024]{1,0} multiply(big, big)
  zero = f32[] constant(0)
  ROOT red = f32[1024]{0} reduce(sq, zero), dimensions={0}, to_apply=add
}

cond {
  p = (s32[], f32[1024,1024]{1,0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (s32[], f32[1024,1024]{1,0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[1024,1024]{1,0} get-tuple-element(p), index=1
  y = f32[1024,1024]{1,0} multiply(x, x)
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[1024,1024]{1,0}) tuple(j, y)
}

ENTRY main {
  p0 = f32[1024]{0} parameter(0)
  f = f32[1024]{0} fusion(p0), kind=kInput, calls=fused
  z = s32[] constant(0)
  b = f32[1024,1024]{1,0} broadcast(f), dimensions={1}
  t = (s32[], f32[1024,1024]{1,0}) tuple(z, b)
  w = (s32[], f32[1024,1024]{1,0}) while(t), condition=cond, body=body
  r = f32[1024,1024]{1,0} get-tuple-element(w), index=1
  zf = f32[] constant(0)
  ROOT out = f32[2048,1024]{1,0} pad(r, zf), padding=0_1024x0_0
}
"""
    module = parse_hlo(text)
    comp, inst, nbytes = largest_temporary(module)
    assert (comp.name, inst.name, nbytes) == ("body", "y", 1024 * 1024 * 4)
    assert _temporary_location(module, comp, inst) is None
