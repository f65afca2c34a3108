"""analyzer.theory.roofline: thresholds from the specs, the four matmul cases, Problems 4 and 9."""

import pytest

from analyzer.errors import HardwareError, ShardingError
from analyzer.theory.notation import Notation
from analyzer.theory.roofline import (
    classify_matmul,
    collective_threshold,
    compare_gather_vs_reduce,
    compare_gather_vs_reduce_scatter,
    compute_seconds,
    dcn_threshold,
    hbm_threshold,
    ici_threshold,
    latency_threshold_bytes,
    matmul_comm_seconds,
    matmul_flops,
    roofline,
)
from analyzer.theory.topology import Topology


def test_thresholds_match_the_book():
    # exact arithmetic on the spec numbers; the book's stated values in comments (tolerance 1%)
    assert ici_threshold("tpu-v5p") == pytest.approx(2550, rel=0.01)  # sharding.md Problem 4, training.md
    assert ici_threshold("tpu-v5p", axes=3) == pytest.approx(850, rel=0.01)  # training.md: 850 over 3 axes
    assert hbm_threshold("tpu-v5e") == pytest.approx(240, rel=0.01)  # inference.md critical batch
    assert dcn_threshold("tpu-v5p") == pytest.approx(73_440, rel=0.01)  # training.md
    assert ici_threshold("h100") == pytest.approx(2200, rel=0.01)  # gpus.md: within a node
    assert collective_threshold("h100", "scale-out") == pytest.approx(2475, rel=0.01)  # gpus.md: beyond a node
    assert latency_threshold_bytes("tpu-v5e") == pytest.approx(45e3)  # sharding.md: 45kB
    assert latency_threshold_bytes("h100") == 0.0
    with pytest.raises(HardwareError, match="no 'dcn'"):
        collective_threshold("h100", "dcn")


def test_flops_and_compute_time():
    assert matmul_flops(2, 3, 4) == 48
    assert compute_seconds(1.97e14, "tpu-v5e") == pytest.approx(1.0)
    r = roofline(1.97e14, 0, 2.0, "tpu-v5e")
    assert r.bound == "communication" and r.seconds == 2.0
    assert roofline(1.97e14, 8.2e11 * 3, 0.5, "tpu-v5e").bound == "memory"
    assert roofline(1.97e14, 1, 0.5, "tpu-v5e").bound == "compute"


@pytest.mark.parametrize("lhs, rhs, case, comm", [
    ("A[I_X, J]", "B[J, K_Y]", 1, []),
    ("A[I, J]", "B[J, K]", 1, []),
    ("A[I, J_X]", "B[J, K]", 2, ["AllGather_X: [I, J_X] -> [I, J]"]),
    ("A[I, J]", "B[J_X, K]", 2, ["AllGather_X: [J_X, K] -> [J, K]"]),
    ("A[I, J_X]", "B[J_X, K]", 3, ["AllReduce_X: [I, K]{U_X} -> [I, K]"]),
    ("A[I_X, J]", "B[J, K_X]", 4, ["AllGather_X: [J, K_X] -> [J, K]"]),
])
def test_four_cases(lhs, rhs, case, comm):
    p = classify_matmul(Notation.parse(lhs), Notation.parse(rhs))
    assert p.case == case
    assert [str(c) for c in p.collectives] == comm


def test_case_3_offers_reduce_scatter_and_out_is_unreduced():
    p = classify_matmul(Notation.parse("A[I, J_X]"), Notation.parse("B[J_X, K]"))
    assert str(p.out) == "C[I, K]{U_X}"
    alts = [str(a[0]) for a in p.alternatives]
    assert "ReduceScatter_X,K: [I, K]{U_X} -> [I, K_X]" in alts


def test_case_4_alternative_gathers_the_other_operand():
    p = classify_matmul(Notation.parse("A[I_X, J]"), Notation.parse("B[J, K_X]"))
    assert [str(a[0]) for a in p.alternatives] == ["AllGather_X: [I_X, J] -> [I, J]"]


def test_no_contracting_dim():
    with pytest.raises(ShardingError, match="no shared dim"):
        classify_matmul(Notation.parse("A[I, J]"), Notation.parse("B[K, L]"))


def test_matmul_comm_seconds_prices_the_plan():
    t = Topology.for_mesh("tpu-v4p", ("X", "Y", "Z"), (4, 4, 4), topology="v4p:4x4x4")
    p = classify_matmul(Notation.parse("A[I, J_X]"), Notation.parse("B[J_X, K]"))
    (cost,) = matmul_comm_seconds(p, {"I": 1024, "J": 4096, "K": 8192}, "bf16", t)
    assert cost.kind == "all-reduce" and cost.bytes == 1024 * 8192 * 2
    assert cost.seconds == pytest.approx(2 * 1024 * 8192 * 2 / 9e10)  # AllReduce = 2V/W_bidi on a full ring


def test_problem_4_strategy_choice_follows_the_book():
    """sharding.md Problem 4 on v5p (C/W = 2550): with B < 2550 both strategies are comms-bound and the
    local-matmul-then-AllReduce wins when D > 2B; with B > 2550 it wins when D > 5100 (ideal model)."""
    t = \
        Topology.for_mesh("tpu-v5p", ("X", "R"), (4, 16), topology="v5p:4x4x4")
    small_b = compare_gather_vs_reduce(1024, 8192, 32768, "X", t, model="ideal")  # D = 8192 > 2B = 2048
    assert small_b.cheaper.name == "local matmul then AllReduce"
    assert small_b.options[1].bound == "communication"
    narrow = compare_gather_vs_reduce(1024, 1024, 32768, "X", t, model="ideal")  # D = 1024 < 2B
    assert narrow.cheaper.name == "AllGather then matmul"
    big_b = compare_gather_vs_reduce(8192, 8192, 32768, "X", t, model="ideal")  # D = 8192 > 5100
    assert big_b.cheaper.name == "local matmul then AllReduce"
    assert big_b.saving_seconds > 0


def test_problem_9_prefers_the_smaller_side():
    t = Topology.for_mesh("tpu-v5e", ("X",), (8,))
    assert compare_gather_vs_reduce_scatter(4096, 8192, 2048, "X", t).cheaper.name == "local matmul then ReduceScatter"
    # M < K: gathering A moves fewer bytes (ratio M/K) but then every chip does the whole matmul, so
    # with this K the sharded compute of the second option still makes it the faster plan overall
    wide = compare_gather_vs_reduce_scatter(4096, 2048, 65536, "X", t)
    assert wide.options[0].comm_seconds < wide.options[1].comm_seconds
    assert wide.options[0].compute_seconds == pytest.approx(8 * wide.options[1].compute_seconds)
