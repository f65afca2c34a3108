"""TPU cost model behaviours beyond the chapter's worked answers: hand computations from sharding.md's
formulas, evaluated exactly (relative tolerance 1e-9 unless stated)."""

import pytest

from analyzer.theory.cost import (
    Cost,
    CostModelError,
    canonical_kind,
    collective_cost,
    group_cost,
    permute_seconds,
    ragged_fraction,
    rings_cost,
)
from analyzer.errors import ShardingError
from analyzer.theory.topology import Ring, Topology

W1 = 4.5e10  # v5e / v4p one-way link
V = 2**28


def v5e(names, sizes, topo):
    return Topology.for_mesh("tpu-v5e", names, sizes, topology=topo)


def test_kind_names():
    assert canonical_kind("AllGather") == "all-gather"
    assert canonical_kind("all-reduce-start") == "all-reduce"
    assert canonical_kind("psum") == "all-reduce"
    with pytest.raises(CostModelError, match="did you mean 'all-gather'"):
        canonical_kind("all-gathr")


def test_bad_model_and_bytes():
    t = v5e(("X",), (16,), "v5e:1x16")
    with pytest.raises(CostModelError, match="unknown cost model"):
        collective_cost("all-gather", V, "X", t, model="exact")
    with pytest.raises(CostModelError, match="bytes"):
        collective_cost("all-gather", -1, "X", t)
    with pytest.raises(ShardingError, match="no axis 'Q'"):
        collective_cost("all-gather", V, "Q", t)


def test_full_ring_of_16_matches_ideal():
    t = v5e(("X",), (16,), "v5e:1x16")
    topo = collective_cost("all-gather", V, "X", t)
    ideal = collective_cost("all-gather", V, "X", t, model="ideal")
    assert topo.seconds == pytest.approx(V / 9e10) == ideal.seconds  # V / W_bidi with wraparound
    assert topo.hops == 8


def test_line_without_wraparound_pays_one_way():
    t = v5e(("X",), (8,), "v5e:1x8")
    c = collective_cost("all-gather", V, "X", t)
    assert c.seconds == pytest.approx(7 * (V / 8) / W1)  # (s-1) hops of V/s one way
    assert c.hops == 7 and "no wraparound" in c.formula


def test_strided_ring_shares_links():
    t = v5e(("a", "b"), (4, 4), "v5e:1x16")  # a: stride 4 on the 16-ring, wraps; 4 interleaved groups
    c = collective_cost("all-gather", V, "a", t)
    assert c.seconds == pytest.approx(4 * 2 * (V / 4) / W1)  # share 4 x floor(4/2) hops x V/4 one way
    assert c.hops == 8  # 2 ring steps of 4 physical hops


def test_two_physical_axes_add_bandwidth():
    t = Topology.for_mesh("tpu-v5p", ("X", "Y"), (16, 4), topology="v5p:4x4x4")
    c = collective_cost("all-gather", V, "X", t)  # X lies on a 4x4 face: two wrapped rings of 4
    assert c.seconds == pytest.approx(V / (2 * 1.8e11))


def test_all_to_all_without_wraparound_doubles():
    wrapped = collective_cost("all-to-all", V, "X", v5e(("X",), (16,), "v5e:1x16"))
    line = collective_cost("all-to-all", V, "X", Topology.for_mesh("tpu-v4p", ("X", "R"), (4, 4),
                                                                   topology="v4p:4x4x1"))
    assert wrapped.seconds == pytest.approx(V / (4 * 9e10))
    assert line.seconds == pytest.approx(2 * V * 4 / (4 * 4 * 9e10))  # c = 2 on a line of 4


def test_nd_all_to_all_ideal_formula():
    t = Topology.for_mesh("tpu-v4p", ("X", "Y"), (4, 16), topology="v4p:4x4x4")
    c = collective_cost("all-to-all", V, ("X", "Y"), t, model="ideal")
    assert c.seconds == pytest.approx(V * 16 / (4 * 64 * 9e10))  # V max(A, B) / (4 N W)


def test_allreduce_is_twice_allgather():
    t = Topology.for_mesh("tpu-v4p", ("X", "Y", "Z"), (4, 4, 4), topology="v4p:4x4x4")
    for model in ("topology", "ideal"):
        ag = collective_cost("all-gather", V, "Y", t, model=model)
        ar = collective_cost("all-reduce", V, "Y", t, model=model)
        rs = collective_cost("reduce-scatter", V, "Y", t, model=model)
        assert ar.seconds == pytest.approx(2 * ag.seconds) and rs.seconds == pytest.approx(ag.seconds)


def test_permute_routes_pairs():
    t = v5e(("X",), (16,), "v5e:1x16")
    one = collective_cost("collective-permute", V, "X", t)  # default: shift by one around the ring
    assert one.seconds == pytest.approx(V / W1) and one.hops == 1
    far = collective_cost("collective-permute", V, "X", t, pairs=[(i, (i + 3) % 16) for i in range(16)])
    assert far.seconds == pytest.approx(3 * V / W1) and far.hops == 3  # 3 messages share each link
    wrapped = collective_cost("collective-permute", V, "X", t, pairs=[(0, 15)])
    assert wrapped.hops == 1  # the wraparound link
    small = collective_cost("collective-permute", 1000, "X", t, pairs=[(0, 8)])
    assert small.regime == "latency" and small.seconds == pytest.approx(8e-6)
    assert permute_seconds(V, 2, W1, 1e-6).seconds == pytest.approx(V / W1)


def test_broadcast_is_pipelined():
    t = v5e(("X",), (16,), "v5e:1x16")
    c = collective_cost("collective-broadcast", V, "X", t)
    assert c.seconds == pytest.approx(V / W1)


def test_dcn_axis():
    t = Topology.for_mesh("tpu-v5p", ("pod", "X"), (2, 64), topology="v5p:4x4x4*2")
    assert t.axis_info("pod").network == "dcn"
    c = collective_cost("all-reduce", V, "pod", t)  # one chip per slice in each group
    assert c.seconds == pytest.approx(2 * (1 / 2) * V / 6.25e9)
    # both axes: the DCN part carries V / 64 per chip, at the same time as the ICI gather
    both = collective_cost("all-gather", V, ("pod", "X"), t)
    assert both.seconds == pytest.approx(max(V / (3 * 1.8e11), 0.5 * V / (64 * 6.25e9)))
    assert collective_cost("all-gather", V, "pod", t, model="ideal").seconds == pytest.approx(V / 6.25e9)


def test_sub_axis_and_explicit_groups_agree():
    t = v5e(("X",), (16,), "v5e:4x4")
    a = collective_cost("all-gather", V, "X:(1)4", t)
    b = group_cost("all-gather", V, t.groups("X:(1)4"), t)
    assert a.seconds == b.seconds
    assert a.seconds == pytest.approx(3 * (V / 4) / W1)  # a line of 4 along x, no wraparound on v5e


def test_rings_cost_and_ragged():
    r = Ring(0, 8, 1, True, "ici", W1, 1e-6)
    assert rings_cost("all-gather", V, [r]).seconds == pytest.approx(4 * (V / 8) / W1)
    assert ragged_fraction(None, 8) == 1.0 and ragged_fraction(1, 8) == pytest.approx(1 / 8)
    dense = rings_cost("all-to-all", V, [r]).seconds
    assert rings_cost("ragged-all-to-all", V, [r], top_k=2).seconds == pytest.approx(dense * (1 - (7 / 8) ** 2))


def test_single_device_group_is_free():
    t = v5e(("X", "Y"), (4, 1), "v5e:2x2")
    c = collective_cost("all-gather", V, "Y", t)
    assert c.seconds == 0 and isinstance(c, Cost)


def test_cost_to_dict():
    t = v5e(("X",), (16,), "v5e:1x16")
    d = collective_cost("all-gather", V, "X", t).to_dict()
    assert {"seconds", "regime", "bytes", "hops", "formula", "kind", "model"} <= set(d)


def test_what_if_wraparound():
    from analyzer.theory.cost import geometry_cost

    t = v5e(("X", "Y"), (8, 4), "v5e:8x4")
    now = collective_cost("all-gather", V, "Y", t)
    closed = geometry_cost("all-gather", V, t.geometry("Y").with_wraparound(), t)
    assert now.seconds / closed.seconds == pytest.approx(1.5)  # 3 hops one way vs 2 hops each way, ring of 4


def test_permute_across_dcn():
    t = Topology.for_mesh("tpu-v5e", ("pod", "X"), (2, 256), topology="v5e:16x16*2")
    c = collective_cost("collective-permute", V, "pod", t)  # every chip swaps with its twin in the other pod
    assert c.seconds == pytest.approx(V / 3.125e9)
    assert "DCN" in c.formula
