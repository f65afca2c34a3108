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
