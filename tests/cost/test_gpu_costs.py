"""GPU collectives against hand computations from gpus.md's stated formulas (the chapter's published
answers are held out). Tolerances: the formulas are evaluated exactly, so 1e-9 relative unless stated."""

import pytest

from analyzer.theory.cost import collective_cost, tree_all_gather_seconds
from analyzer.errors import HardwareError
from analyzer.theory.topology import Topology

W_GPU = 450e9  # H100 NVLink egress per GPU (gpus.md NVLink table)
W_NODE = 400e9  # DGX H100 node egress (8 x 400Gbps)
V = 2**30


def h100(names, sizes, topology=None):
    return Topology.for_mesh("h100", names, sizes, topology=topology)


def test_in_node_allgather_ring_form():
    t = h100(("X",), (8,))
    c = collective_cost("all-gather", V, "X", t)
    assert c.seconds == pytest.approx(V * 7 / (8 * W_GPU), rel=1e-9)  # bytes (N-1) / (N W_gpu)
    assert collective_cost("all-gather", V, "X", t, model="ideal").seconds == pytest.approx(V / W_GPU)
    assert collective_cost("reduce-scatter", V, "X", t).seconds == pytest.approx(c.seconds)


def test_dgx_superpod_tree_form_is_413_gbps():
    # 1024 GPUs = 128 nodes of 8: node 450e9*8/7 = 514 GB/s, leaf 400e9*32/31 = 413 GB/s, spine 17.1 TB/s
    t = h100(("X",), (1024,))
    assert t.slice.name == "h100:128x8"
    c = collective_cost("all-gather", V, "X", t)
    assert V / c.seconds == pytest.approx(400e9 * 32 / 31, rel=1e-9)
    assert round(V / c.seconds / 1e9) == 413
    geo = t.geometry("X")
    assert [(lv.name, lv.degree) for lv in geo.levels] == [("nvlink", 8), ("leaf", 32), ("spine", 4)]
    assert V / tree_all_gather_seconds(V, geo.levels[2:]) == pytest.approx(12.8e12 * 4 / 3)


def test_allreduce_is_twice_without_sharp_and_v_over_w_with_it():
    t = h100(("X",), (8,))
    ag = collective_cost("all-gather", V, "X", t).seconds
    assert collective_cost("all-reduce", V, "X", t).seconds == pytest.approx(2 * ag)
    sharp = collective_cost("all-reduce", V, "X", t, sharp=True)
    assert sharp.seconds == pytest.approx(V / W_GPU)  # exact: no (N-1)/N factor
    big = h100(("X",), (1024,))
    # across the SuperPod with SHARP: V * max(1/450e9, 1/400e9, 1/12.8e12) -> 400 GB/s ("around 400GB/s")
    assert V / collective_cost("all-reduce", V, "X", big, sharp=True).seconds == pytest.approx(W_NODE)


def test_sharp_refused_where_absent():
    with pytest.raises(HardwareError, match="SHARP"):
        collective_cost("all-reduce", V, "X", Topology.for_mesh("a100", ("X",), (8,)), sharp=True)
    with pytest.raises(HardwareError, match="SHARP"):
        collective_cost("all-reduce", V, "X", Topology.for_mesh("tpu-v5e", ("X",), (8,)), sharp=True)


def test_alltoall_in_node_and_across_two_nodes():
    one = h100(("X",), (8,))
    a = collective_cost("all-to-all", V, "X", one)
    assert a.seconds == pytest.approx(V * 7 / (64 * W_GPU))  # B (N-1) / (W N^2)
    assert collective_cost("all-to-all", V, "X", one, model="ideal").seconds == pytest.approx(V / (8 * W_GPU))
    two = h100(("X",), (16,))
    assert two.slice.name == "h100:2x8"
    b = collective_cost("all-to-all", V, "X", two)
    assert b.seconds == pytest.approx(V * 1 / (4 * W_NODE))  # B (M-1) / (M^2 W_node), M = 2
    ideal = collective_cost("all-to-all", V, "X", two, model="ideal").seconds
    assert ideal == pytest.approx(V / (2 * W_NODE))  # B / (M W_node)
    # gpus.md: from B/(8*450e9) in a node to B/(2*400e9) over 2 nodes, "a more than 4x degradation"
    assert ideal / collective_cost("all-to-all", V, "X", one, model="ideal").seconds > 4


def test_reduction_over_nodes_with_inner_axis_sharded():
    # AllReduce_X(A[I_Y, J]{U_X}), Y inner over the 8 GPUs of a node, X over 4 nodes: the 8 groups of a node
    # share its egress, so T = bytes / W_node * (D-1)/D with bytes = 8 V (gpus.md, "sharded over a separate axis")
    t = h100(("X", "Y"), (4, 8))
    c = collective_cost("all-gather", V, "X", t)
    assert c.seconds == pytest.approx(8 * V * 3 / (4 * W_NODE))
    # Y = 16 spanning 2 nodes: each node still hosts 8 groups; bytes = 16 V, so (bytes/W_node) * 8/16
    t2 = h100(("X", "Y"), (4, 16), topology="h100:8x8")
    c2 = collective_cost("all-gather", V, "X", t2)
    assert c2.seconds == pytest.approx(16 * V / W_NODE * 8 / 16 * 3 / 4)


def test_b200_and_nvl72_in_domain():
    b = Topology.for_mesh("b200", ("X",), (8,))
    assert collective_cost("all-gather", V, "X", b, model="ideal").seconds == pytest.approx(V / 900e9)
    g = Topology.for_mesh("gb200-nvl72", ("X",), (72,))
    assert g.slice.name == "gb200:72"
    assert collective_cost("all-gather", V, "X", g).seconds == pytest.approx(V * 71 / (72 * 900e9))
    g2 = Topology.for_mesh("gb200-nvl72", ("X",), (144,))
    # two NVL72 domains: max over levels of (D-1)/(D W): NVLink 71/(72 * 900e9) vs 1/(2 * 3.6e12)
    assert collective_cost("all-gather", V, "X", g2).seconds == pytest.approx(
        V * max(71 / (72 * 900e9), 1 / (2 * 3.6e12)))


def test_ragged_alltoall_scales_by_expected_fraction():
    t = h100(("X",), (8,))
    dense = collective_cost("all-to-all", V, "X", t).seconds
    ragged = collective_cost("ragged-all-to-all", V, "X", t, top_k=4).seconds
    assert ragged / dense == pytest.approx(1 - (7 / 8) ** 4)  # gpus.md footnote: 1 - ((Z-1)/Z)^K
    assert collective_cost("ragged-all-to-all", V, "X", t).seconds == pytest.approx(dense)  # unknown k: dense bound


def test_gpu_permute_in_and_across_nodes():
    t = h100(("X", "Y"), (2, 8))
    inner = collective_cost("collective-permute", V, "Y", t)  # shift by one inside each node
    assert inner.seconds == pytest.approx(V / W_GPU)
    outer = collective_cost("collective-permute", V, "X", t)  # 8 GPUs per node each send across
    assert outer.seconds == pytest.approx(8 * V / W_NODE)
