"""analyzer.theory.topology: slices, default placement, mappings, device coords, group geometry."""

import pytest

from analyzer.errors import HardwareError, MeshError, ShardingError
from analyzer.theory.topology import SubAxis, Topology, parse_slice, smallest_slice


def test_parse_slices():
    s = parse_slice("v5e:8x4")
    assert (s.dims, s.wraps, s.networks) == ((8, 4), (False, False), ("ici", "ici"))
    assert parse_slice("v5e:8x16").wraps == (False, True)
    assert parse_slice("v5p:4x4x4").wraps == (True, True, True)
    assert parse_slice("v5p:2x2x2").wraps == (False, False, False)
    assert parse_slice("v5e:16x16*2").networks == ("dcn", "ici", "ici")
    assert parse_slice("h100:8").dims == (1, 8)
    assert parse_slice("h100:4x8").networks == ("scale-out", "nvlink")
    assert str(parse_slice("v5e:16x16*2")) == "v5e:16x16*2"


@pytest.mark.parametrize("text, words", [
    ("v5e-8x4", "expected PREFIX:DIMS"),
    ("v9z:4x4", "unknown slice prefix"),
    ("v5e:4x4x4", "2D torus"),
    ("v5e:32x16", "larger than the tpu-v5e pod"),
    ("h100:16", "exceed the NVLink domain"),
    ("a100:2x8", "no [scale_out]"),
])
def test_bad_slices(text, words):
    with pytest.raises(HardwareError, match=words.replace("[", r"\[").replace("]", r"\]")):
        parse_slice(text)


def test_slice_for_other_hardware():
    with pytest.raises(HardwareError, match="for 'v5e'"):
        parse_slice("v5e:4x4", "tpu-v5p")


def test_smallest_slice():
    assert smallest_slice("tpu-v5e", (8, 4)).name == "v5e:8x4"
    assert smallest_slice("tpu-v5e", (8,)).name == "v5e:2x4"
    assert smallest_slice("tpu-v5e", (2, 16)).name == "v5e:2x16"
    assert smallest_slice("tpu-v4p", (4, 4, 4)).name == "v4p:4x4x4"
    assert smallest_slice("tpu-v5e", (512,)).name == "v5e:16x16*2"
    assert smallest_slice("h100", (4, 8)).name == "h100:4x8"
    with pytest.raises(MeshError, match="whole h100 nodes"):
        smallest_slice("h100", (12,))


def test_default_topology_says_so():
    t = Topology.for_mesh("tpu-v5e", ("X", "Y"), (8, 4))
    assert not t.declared
    assert "smallest slice that holds the mesh" in t.describe()
    assert "Y=4: ici on y (4), no wraparound" in t.describe()


def test_axis_info():
    t = Topology.for_mesh("tpu-v5e", ("data", "model"), (16, 16))
    d = t.axis_info("data")
    assert (d.size, d.wraparound, d.network, d.links, d.hops) == (16, True, "ici", 2, 8)
    t2 = Topology.for_mesh("tpu-v5p", ("X", "Y"), (16, 4))  # X spans a 4x4 sub-grid of the cube
    x = t2.axis_info("X")
    assert x.physical_axes == ("x", "y") and x.ring_sizes == (4, 4) and x.wraparound and x.links == 4
    g = Topology.for_mesh("h100", ("X", "Y"), (4, 8))
    assert g.axis_info("Y").network == "nvlink" and g.axis_info("X").network == "scale-out"


def test_mesh_must_fill_the_slice():
    with pytest.raises(MeshError, match="has 8 devices but the slice v5e:8x4 has 32"):
        Topology.for_mesh("tpu-v5e", ("X",), (8,), topology="v5e:8x4")


def test_explicit_mapping_changes_wraparound():
    t = Topology.for_mesh("tpu-v5e", ("X", "Y"), (16, 8), topology="v5e:8x16", mapping={"X": "y", "Y": "x"})
    assert t.axis_info("X").wraparound and not t.axis_info("Y").wraparound
    with pytest.raises(MeshError, match="hold 8"):
        Topology.for_mesh("tpu-v5e", ("X", "Y"), (16, 8), topology="v5e:8x16", mapping={"X": "x", "Y": "y"})


def test_device_coords_with_permuted_devices():
    # a 4-device mesh whose logical order walks the 2x2 grid in a snake: coords decide the rings
    coords = [(0, 0), (1, 0), (1, 1), (0, 1)]
    t = Topology.for_mesh("tpu-v5e", ("X",), (4,), device_coords=coords)
    assert t.origin == "device coords" and t.slice.name == "v5e:2x2"
    with pytest.raises(MeshError, match="unevenly"):
        Topology.for_mesh("tpu-v5e", ("X",), (4,), device_coords=[(0, 0), (0, 0), (0, 0), (1, 0)])
    with pytest.raises(MeshError, match="4 device coords for a mesh of 8"):
        Topology.for_mesh("tpu-v5e", ("X",), (8,), device_coords=coords)


def test_groups_and_sub_axes():
    t = Topology.for_mesh("tpu-v5e", ("X", "Y"), (4, 2), topology="v5e:2x4")
    assert t.groups("X").tolist() == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert t.groups(("X", "Y")).tolist() == [[0, 1, 2, 3, 4, 5, 6, 7]]
    assert t.groups("X:(1)2").tolist() == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert t.groups(("X", 2)).tolist() == t.groups(SubAxis("X", 1, 2)).tolist()
    assert t.groups("X:(2)2").tolist() == [[0, 2], [1, 3], [4, 6], [5, 7]]
    with pytest.raises(ShardingError, match="no axis 'Z'"):
        t.groups("Z")
    with pytest.raises(ShardingError, match="used twice"):
        t.groups(("X", "X"))
    with pytest.raises(ShardingError, match="does not divide"):
        t.groups("X:(1)3")


def test_strided_groups_share_links():
    t = Topology.for_mesh("tpu-v5e", ("a", "b"), (2, 8), topology="v5e:1x16")
    (ring,) = t.geometry("a").rings
    assert (ring.size, ring.stride, ring.share, ring.wraparound) == (2, 8, 8, True)
    (inner,) = t.geometry("b").rings
    assert (inner.size, inner.stride, inner.wraparound) == (8, 1, False)  # a segment of the 16-ring


def test_explicit_groups_geometry():
    t = Topology.for_mesh("tpu-v5e", ("X",), (16,), topology="v5e:4x4")
    geo = t.geometry_for_groups([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]])
    assert [r.size for r in geo.rings] == [4]
    with pytest.raises(MeshError, match="outside"):
        t.geometry_for_groups([[0, 99]])


def test_device_coords_trim_and_shift():
    # jax reports (x, y, z) on 2D tori; a sub-slice may not start at 0
    coords = [(x + 2, y, 0) for y in range(2) for x in range(4)]
    t = Topology.for_mesh("tpu-v5e", ("X",), (8,), device_coords=coords)
    assert t.slice.name == "v5e:4x2" and t.coords[0] == (0, 0)
    assert "bounding box of the devices' coords" in t.describe()


def test_two_cores_per_chip_get_a_free_core_axis():
    # TPU7x: two devices per chip report the same coords; the second becomes core 1 of a "chip" axis
    coords = [(x, y, 0) for y in range(2) for x in range(2) for _ in range(2)]
    t = Topology.for_mesh("tpu-7x", ("X", "core"), (4, 2), device_coords=coords)
    assert t.slice.axis_labels[-1] == "core" and t.axis_info("core").network == "chip"
    from analyzer.theory.cost import collective_cost

    assert collective_cost("all-gather", 1e8, "core", t).seconds == 0
    assert collective_cost("all-gather", 1e8, "core", t, model="ideal").seconds == 0
    assert collective_cost("all-gather", 1e8, "X", t).seconds == pytest.approx(1e8 / (2 * 1.8e11))
