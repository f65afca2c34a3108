"""Replica groups in all four printed forms, expanded to device ids: by hand, and against XLA itself.

The mesh form's semantics come from XLA's `MeshAxesReplicaGroupList` (xla/hlo/ir/replica_group.cc). Besides
hand-computed groups, `test_mesh_groups_match_xla_execution` runs an all-reduce with each form on 8 CPU
devices: device d contributes the one-hot vector e_d, so the sum it gets back marks its group's members.
"""

from __future__ import annotations

import numpy as np
import pytest

from analyzer.hlo.attributes import expand_replica_groups, parse_mesh_groups, parse_replica_groups
from analyzer.hlo.parser import parse_hlo

_MODULE = """HloModule m, replica_count=8

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}

ENTRY e {
  p = f32[8] parameter(0)
  ROOT ar = f32[8] all-reduce(p), replica_groups=RG, to_apply=add, channel_id=1, use_global_device_ids=true
}
"""


@pytest.mark.parametrize("raw, groups", [
    ("{{0,1},{2,3}}", ((0, 1), (2, 3))),
    ("{}", ()),
    ("[4,2]<=[8]", ((0, 1), (2, 3), (4, 5), (6, 7))),
    ("[2,4]<=[4,2]T(1,0)", ((0, 2, 4, 6), (1, 3, 5, 7))),
    ("[3,10]<=[6,5]T(1,0)", ((0, 5, 10, 15, 20, 25, 1, 6, 11, 16), (21, 26, 2, 7, 12, 17, 22, 27, 3, 8),
                              (13, 18, 23, 28, 4, 9, 14, 19, 24, 29))),
    # mesh x=4 (major), y=2 (minor): devices [[0,1],[2,3],[4,5],[6,7]]
    ("mesh['x'=4,'y'=2] {'y'}", ((0, 1), (2, 3), (4, 5), (6, 7))),
    ("mesh['x'=4,'y'=2] {'x'}", ((0, 2, 4, 6), (1, 3, 5, 7))),
    ("mesh['x'=4,'y'=2] {'x','y'}", ((0, 1, 2, 3, 4, 5, 6, 7),)),
    ("mesh['x'=4,'y'=2] {'y','x'}", ((0, 2, 4, 6, 1, 3, 5, 7),)),
    # x=8 split major->minor as 2x2x2; (2)2 is the middle factor: ids 4a+2b+c, vary b
    ("mesh['x'=8] {'x':(2)2}", ((0, 2), (1, 3), (4, 6), (5, 7))),
    ("mesh['x'=8] {'x':(1)2,'x':(4)2}", ((0, 1, 4, 5), (2, 3, 6, 7))),
    # device_ids put device ids into the mesh array: [[0,2],[4,6],[1,3],[5,7]]
    ("mesh['x'=4,'y'=2], device_ids=(0,2,4,6,1,3,5,7) {'y'}", ((0, 2), (4, 6), (1, 3), (5, 7))),
    ("mesh['x'=4,'y'=2], device_ids=(0,2,4,6,1,3,5,7) {'x'}", ((0, 4, 1, 5), (2, 6, 3, 7))),
])
def test_forms_by_hand(raw, groups):
    assert parse_replica_groups(raw) == groups


@pytest.mark.parametrize("raw", [
    "mesh['x'=4] {'z'}", "mesh['x'=4] {}", "mesh['x'=4,'x'=2] {'x'}", "mesh['x'=8] {'x':(3)2}",
    "mesh['x'=4], device_ids=(0,1,2) {'x'}", "[4,2]<=[7]", "[4,2]<=[8]T(0,0)", "{{0,1},{2,x}}",
])
def test_bad_forms_name_the_problem(raw):
    with pytest.raises(ValueError):
        parse_replica_groups(raw)


def test_bad_groups_are_syntax_errors_at_the_attribute():
    from analyzer.errors import HloSyntaxError

    text = _MODULE.replace("RG", "mesh['x'=4,'y'=2] {'z'}")
    with pytest.raises(HloSyntaxError) as e:
        parse_hlo(text)
    assert (e.value.line, e.value.column) == (11, 50)  # where the value starts
    assert "axis 'z' is not in the mesh" in str(e.value)


def test_empty_groups_expand_to_every_participant():
    m = parse_hlo(_MODULE.replace("RG", "{}"))
    inst = m.entry.root
    assert inst.replica_groups == ()
    assert expand_replica_groups(inst, m) == (tuple(range(8)),)


def _groups_by_running(rg: str) -> list[tuple[int, ...]]:
    """Ask XLA's CPU runtime which devices each all-reduce group holds (one-hot inputs, summed)."""
    import jax
    from jax._src import xla_bridge as xb
    from jax._src.lib import xla_client as xc
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    backend = xb.get_backend("cpu")
    devs = backend.devices()[:8]
    m = xc.hlo.hlo_module_from_text(_MODULE.replace("RG", rg))
    opts = xc.CompileOptions()
    eb = opts.executable_build_options
    eb.num_replicas, eb.num_partitions, eb.use_spmd_partitioning = 8, 1, False
    eb.device_assignment = xc.DeviceAssignment.create(np.arange(8).reshape(8, 1))
    exe = backend.compile_and_load(xc._xla.mlir.hlo_to_stablehlo(m.as_serialized_hlo_module_proto()),
                                   xc.DeviceList(tuple(devs)), opts)
    shards = [jax.device_put(np.eye(8, dtype=np.float32)[d], devs[d]) for d in range(8)]
    arr = jax.make_array_from_single_device_arrays((64,), NamedSharding(Mesh(np.array(devs), ("x",)), P("x")),
                                                  shards)
    out = exe.execute_sharded([arr]).disassemble_into_single_device_arrays()[0]
    return sorted({tuple(int(i) for i in np.nonzero(np.asarray(r))[0]) for r in out})


@pytest.mark.slow
@pytest.mark.parametrize("rg", [
    "mesh['a'=4,'b'=2] {'a'}", "mesh['a'=4,'b'=2] {'b'}", "mesh['a'=8] {'a':(2)2}",
    "mesh['a'=2,'b'=4] {'b':(1)2,'a'}", "mesh['a'=8] {'a':(1)2,'a':(4)2}", "mesh['a'=2,'b'=2,'c'=2] {'c','a'}",
    "[2,4]<=[4,2]T(1,0)", "{{0,3},{1,2},{4,5,6,7}}",
])
def test_mesh_groups_match_xla_execution(rg):
    # (The HLO -> StableHLO step this uses drops `device_ids`, so those forms are checked by hand above.)
    import jax

    if len(jax.devices("cpu")) < 8:
        pytest.skip("needs 8 CPU devices (tests/conftest.py sets them)")
    ours = sorted(tuple(sorted(g)) for g in parse_replica_groups(rg))
    assert _groups_by_running(rg) == ours


def test_mesh_with_iota_device_ids_as_printed_by_xla():
    # Printed by jax 0.10's CPU compiler (fixtures/cpu/X2_Y4/ep_step.final.hlo): the device array is iota(8)
    # reshaped to [2,4], transposed, then laid on the mesh [4,2,1,1,1]: [[0,4],[1,5],[2,6],[3,7]].
    raw = "mesh['axis_0'=4,'axis_1'=2,'axis_2'=1,'axis_3'=1,'axis_4'=1], device_ids=([2,4]T(1,0)) {'axis_0'}"
    assert parse_replica_groups(raw) == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert parse_replica_groups(raw.replace("{'axis_0'}", "{'axis_1'}")) == ((0, 4), (1, 5), (2, 6), (3, 7))
    m = parse_hlo(_MODULE.replace("RG", raw.replace("axis_0'=4,'axis_1'=2", "axis_0'=4,'axis_1'=2")))
    assert m.entry.root.replica_groups == ((0, 1, 2, 3), (4, 5, 6, 7))
