"""The cpu target's placement equals what jax.make_mesh gives on libtpu's topology devices."""

import os

import pytest

from analyzer.compile.placement import jax_placement
from analyzer.theory.topology import Topology, parse_slice

CASES = [("v5e:2x4", (4, 2)), ("v5e:4x4", (4, 4)), ("v5e:4x4", (16,)), ("v5p:2x2x2", (4, 2)), ("v5p:2x2x4", (8, 2))]


@pytest.mark.tpu
@pytest.mark.parametrize("topology,shape", CASES)
def test_cpu_placement_matches_libtpu_make_mesh(topology, shape):
    pytest.importorskip("libtpu", reason="needs libtpu for the reference device coords")
    import jax
    from jax.experimental import topologies

    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    devices = topologies.get_topology_desc(platform="tpu", topology_name=topology).devices
    names = ("data", "model")[: len(shape)]
    sl = parse_slice(topology)
    want = [tuple(d.coords[: len(sl.dims)]) for d in jax.make_mesh(shape, names, devices=devices).devices.flat]
    got, how = jax_placement(sl, names, shape)
    assert how == "jax.make_mesh"
    assert list(got) == want


def test_v5e_2x4_data_axis_straddles():
    # jax's v5e tray ring order (0 1 2 3 7 6 5 4 over chips sorted x-fastest) puts data=4 on a zig-zag
    coords, _ = jax_placement(parse_slice("v5e:2x4"), ("data", "model"), (4, 2))
    t = Topology.for_mesh("tpu-v5e", ("data", "model"), (4, 2), topology="v5e:2x4", device_coords=coords,
                          coords_origin="jax.make_mesh")
    assert t.straddling_axes() == ("data",)
    inorder = Topology.for_mesh("tpu-v5e", ("data", "model"), (4, 2), topology="v5e:2x4@in-order")
    assert inorder.straddling_axes() == ()
    mapped = Topology.for_mesh("tpu-v5e", ("data", "model"), (4, 2), topology="v5e:2x4@data=y,model=x")
    assert mapped.origin == "mapping" and mapped.axis_info("data").physical_axes == ("y",)


def test_dcn_split_gives_the_slices_to_the_major_axes():
    from analyzer.compile.placement import dcn_split

    assert dcn_split((2, 4), 2) == ((2, 1), (1, 4))  # slice=2, chip=4: 'slice' over DCN
    assert dcn_split((8,), 2) == ((2,), (4,))  # one axis over both networks, DCN major
    assert dcn_split((4, 2), 2) == ((2, 1), (2, 2))  # the major axis takes the slices even when named otherwise
    assert dcn_split((2, 2, 4), 4) == ((2, 2, 1), (1, 1, 4))
    assert dcn_split((3, 4), 2) == ((1, 2), (3, 2))
    assert dcn_split((3, 3), 2) is None


def test_multi_slice_placement_is_jax_hybrid_mesh_on_standins():
    # two v5e 2x2 slices: 'slice' over DCN (dcn_mesh_shape (2, 1)); within each slice jax lays chip=4 around
    # the 2x2 ring (x, y) = (0,0) (1,0) (1,1) (0,1), as it does on libtpu's devices (the test below);
    # coords are (slice, x, y)
    coords, how = jax_placement(parse_slice("v5e:2x2*2"), ("slice", "chip"), (2, 4))
    assert how == "mesh_utils.create_hybrid_device_mesh"
    ring = [(0, 0), (1, 0), (1, 1), (0, 1)]
    assert list(coords) == [(s, *c) for s in (0, 1) for c in ring]
    t = Topology.for_mesh("tpu-v5e", ("slice", "chip"), (2, 4), topology="v5e:2x2*2", device_coords=coords,
                          coords_origin="jax.make_mesh")
    assert t.axis_info("slice").network == "dcn" and t.axis_info("chip").network == "ici"


MULTI_CASES = [("v5e:2x2", 2, (2, 4)), ("v5e:2x2", 2, (8,)), ("v5e:2x4", 2, (4, 4)), ("v5e:4x4", 4, (4, 16)),
               ("v5p:2x2x2", 2, (2, 4, 2))]


@pytest.mark.tpu
@pytest.mark.parametrize("topology,slices,shape", MULTI_CASES)
def test_cpu_multi_slice_placement_matches_libtpu_hybrid_mesh(topology, slices, shape):
    pytest.importorskip("libtpu", reason="needs libtpu for the reference devices of several slices")
    import numpy as np
    from jax.experimental import mesh_utils, topologies

    from analyzer.compile.placement import dcn_split

    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    devices = topologies.get_topology_desc(platform="tpu", topology_name=topology, num_slices=slices).devices
    dcn, ici = dcn_split(shape, slices)
    arr = mesh_utils.create_hybrid_device_mesh(ici, dcn, devices=devices)
    sl = parse_slice(f"{topology}*{slices}")
    rank = len(sl.dims) - 1
    want = [(d.slice_index, *d.coords[:rank]) for d in np.asarray(arr).flat]
    got, how = jax_placement(sl, ("a", "b", "c")[: len(shape)], shape)
    assert how == "mesh_utils.create_hybrid_device_mesh"
    assert [tuple(c) for c in got] == [tuple(int(v) for v in w) for w in want]
