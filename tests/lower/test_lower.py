"""analyzer.compile.lower: in-process and child-process compiles, TPU ahead-of-time compiles, and the errors."""

from __future__ import annotations

import os
import re

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from analyzer.errors import AnalyzerError, HardwareError, LoweringError, MeshError, ShardingError
from analyzer.compile.lower import Lowered, Target, lower, lower_entry, make_mesh, mesh_info, parse_mesh, parse_target

pytestmark = pytest.mark.slow

needs_libtpu = pytest.mark.skipif(
    __import__("importlib.util").util.find_spec("libtpu") is None,
    reason="libtpu is not installed (pip install 'jax[tpu]==<your jax>'); TPU ahead-of-time compiles need it",
)


def _sds(mesh, shape, spec, dtype=jnp.float32):
    return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(make_mesh(mesh), spec))


def _collectives(hlo: str) -> list[tuple[str, str]]:
    """(opcode, replica groups text) of every collective instruction in HLO text."""
    found = []
    for line in hlo.splitlines():
        m = re.search(r"\s(all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute)(?:-start)?\(", line)
        if m:
            groups = re.search(r"(?:replica_groups|source_target_pairs)=(\S+)", line)
            found.append((m.group(1), groups.group(1) if groups else ""))
    return found


def _case3(mesh):
    """A[I, J_X] · B[J_X, K] -> C[I, K]: one AllReduce over X."""
    x = make_mesh(mesh).axis_names[0]
    a = _sds(mesh, (64, 128), P(None, x))
    b = _sds(mesh, (128, 32), P(x, None))
    return (lambda a, b: jnp.dot(a, b)), (a, b)  # the line the HLO metadata must point at


# ---------------------------------------------------------------------------------------------------- parsing


def test_parse_target_and_mesh():
    assert parse_target("cpu") == Target("cpu")
    assert parse_target("tpu:v5p:2x2x2") == Target("tpu", "v5p:2x2x2")
    assert str(parse_target("TPU:v5e:2x4")) == "tpu:v5e:2x4"
    multi = parse_target("tpu:v5e:16x16*4")
    assert multi == Target("tpu", "v5e:16x16*4") and multi.num_slices == 4 and multi.slice_topology == "v5e:16x16"
    assert parse_target("tpu:v5e:2x2*1") == Target("tpu", "v5e:2x2")  # one slice is the slice itself
    assert parse_mesh("data=4, model=2:explicit") == {"data": 4, "model": (2, "explicit")}
    m = make_mesh({"data": 4, "model": (2, "explicit")})
    assert m.axis_names == ("data", "model") and m.axis_sizes == (4, 2)
    assert [t.name for t in m.axis_types] == ["Auto", "Explicit"]
    info = mesh_info("X=2,Y=4")
    assert info.device_ids == tuple(range(8)) and info.axis_types == ("auto", "auto")


@pytest.mark.parametrize(
    "target, message",
    [("gpu", "did you mean 'cpu'"), ("tpu:v5e", "e.g. 'tpu:v5e:2x4'"), (3, "must be a string"),
     ("tpu:v5e:2x2*0", "'tpu:v5e:16x16*4'"), ("tpu:v5e:2x2*", "'tpu:v5e:16x16*4'")],
)
def test_bad_target(target, message):
    with pytest.raises(LoweringError, match=re.escape(message)):
        parse_target(target)


@pytest.mark.parametrize(
    "mesh, message",
    [
        ({"X": 0}, "size must be a positive integer"),
        ({"X": (2, "sideways")}, "valid axis types: auto, explicit, manual"),
        ("X=2,X=4", "appears twice"),
        ("X:2", "name=size"),
        ([2, 4], "must be a jax.sharding.Mesh"),
    ],
)
def test_bad_mesh(mesh, message):
    with pytest.raises(MeshError, match=re.escape(message)):
        make_mesh(mesh)


# ---------------------------------------------------------------------------------------------------- cpu


def test_in_process_cpu_compile():
    fn, args = _case3({"X": 8})
    lowered = lower(fn, *args, mesh={"X": 8})
    assert isinstance(lowered, Lowered)
    assert not lowered.in_subprocess
    assert lowered.target == "cpu" and lowered.platform == "cpu" and lowered.device_coords is None
    assert lowered.mesh.axis_names == ("X",) and lowered.mesh.device_ids == tuple(range(8))
    assert lowered.jax_version == jax.__version__
    assert lowered.compile_seconds > 0 and lowered.lower_seconds > 0
    assert set(lowered.memory) == {"argument_bytes", "output_bytes", "temp_bytes", "alias_bytes",
                                   "generated_code_bytes"}
    # A[64, 128/8] and B[128/8, 32] in f32 per device; C[64, 32] replicated.
    assert lowered.memory["argument_bytes"] == (64 * 16 + 16 * 32) * 4
    assert lowered.memory["output_bytes"] == 64 * 32 * 4
    assert [op for op, _ in _collectives(lowered.spmd_hlo)] == ["all-reduce"]  # AllReduce_X of C[I, K]{U_X}
    assert "num_partitions=8" in lowered.spmd_hlo
    assert lowered.optimized_hlo.startswith("HloModule")
    # The user's own file and line are in the stack-frame tables, not lower.py's.
    assert __file__ in lowered.spmd_hlo
    assert "analyzer/compile/lower.py" not in lowered.spmd_hlo


def test_child_process_matches_in_process():
    """isolate=True compiles the same StableHLO in a child with its own devices: the HLO is identical."""
    fn, args = _case3({"X": 2, "Y": 4})
    here = lower(fn, *args, mesh={"X": 2, "Y": 4})
    child = lower(fn, *args, mesh={"X": 2, "Y": 4}, isolate=True)
    assert child.in_subprocess and not here.in_subprocess
    assert child.spmd_hlo == here.spmd_hlo
    assert child.memory == here.memory


def test_mesh_larger_than_the_process_compiles_in_a_child():
    """A mesh of twice the test process's devices (64 in tests/conftest.py): a closure over a local variable still
    works (nothing is pickled)."""
    scale = 3.0
    groups = 2 * jax.device_count() // 8
    n = 8 * groups
    mesh = {"data": groups, "model": 8}
    x = _sds(mesh, (2 * n, 512), P("data", "model"))
    w = _sds(mesh, (512, 128), P("model", None))
    lowered = lower(lambda x, w: scale * (x @ w), x, w, mesh=mesh)
    assert lowered.in_subprocess
    assert lowered.mesh.size == n and f"num_partitions={n}" in lowered.spmd_hlo
    ops = _collectives(lowered.spmd_hlo)
    assert [op for op, _ in ops] == ["all-reduce"]
    # Over the model axis: `groups` groups of 8 consecutive devices.
    # (the printed form, with or without the comma of the attribute after it: jax 0.12 prints another attribute
    # there)
    assert ops[0][1].rstrip(",") in (f"[{groups},8]<=[{n}]",
                                     "{" + ",".join("{" + ",".join(str(8 * g + i) for i in range(8)) + "}"
                                                    for g in range(groups)) + "}")
    with pytest.raises(MeshError, match=f"needs {n} CPU devices"):
        lower(lambda x, w: x @ w, x, w, mesh=mesh, isolate=False)


def test_permuted_concrete_mesh_keeps_device_order():
    devices = jax.devices("cpu")[:8]
    order = [0, 2, 4, 6, 1, 3, 5, 7]
    mesh = jax.sharding.Mesh(
        __import__("numpy").array([devices[i] for i in order]).reshape(2, 4), ("X", "Y"),
        axis_types=(jax.sharding.AxisType.Auto,) * 2,
    )
    a = jax.ShapeDtypeStruct((64, 128), jnp.float32, sharding=NamedSharding(mesh, P("X", "Y")))
    lowered = lower(lambda a: a.sum(), a, mesh=mesh)
    assert lowered.mesh.device_ids == tuple(order)
    # Replica groups are logical (mesh positions): the same text as for the unpermuted mesh.
    plain = lower(lambda a: a.sum(), _sds({"X": 2, "Y": 4}, (64, 128), P("X", "Y")), mesh={"X": 2, "Y": 4})
    assert _collectives(lowered.spmd_hlo) == _collectives(plain.spmd_hlo)


def test_explicit_axes_shard_map_and_sharding_constraint():
    mesh = {"X": (2, "explicit"), "Y": (4, "explicit")}
    a = _sds(mesh, (64, 128), P("X", None))
    b = _sds(mesh, (128, 32), P(None, None))
    explicit = lower(lambda a, b: a @ b, a, b, mesh=mesh)
    assert explicit.mesh.axis_types == ("explicit", "explicit")
    assert _collectives(explicit.spmd_hlo) == []  # case 1: no communication

    auto = {"X": 8}
    x = _sds(auto, (64, 128), P("X", None))
    moved = lower(lambda a: jax.lax.with_sharding_constraint(a * 2, P(None, "X")), x, mesh=auto)
    assert [op for op, _ in _collectives(moved.spmd_hlo)] == ["all-to-all"]

    gathered = lower(jax.shard_map(lambda a: jax.lax.all_gather(a, "X", tiled=True), in_specs=P("X"),
                                   out_specs=P("X"), mesh=make_mesh(auto), check_vma=False), x, mesh=auto)
    assert [op for op, _ in _collectives(gathered.spmd_hlo)] == ["all-gather"]


def test_in_shardings_kwargs_and_static_argnums():
    mesh = {"X": 8}
    x = jax.ShapeDtypeStruct((64, 32), jnp.float32)
    lowered = lower(lambda x, n, *, scale: (x * scale).sum(axis=n), x, 0, mesh=mesh, in_shardings=(P("X"),),
                    static_argnums=1, scale=2.0)
    assert [op for op, _ in _collectives(lowered.spmd_hlo)] == ["all-reduce"]
    # A jitted function keeps its own options; the mesh comes from the arguments when mesh= is omitted.
    jitted = jax.jit(lambda x: x.sum(0))
    assert lower(jitted, _sds(mesh, (64, 32), P("X"))).mesh.axis_names == ("X",)


def test_lower_entry_with_a_chapter_program():
    lowered = lower_entry("examples.chapter:matmul_case2", mesh="X=2,Y=4")
    ops = _collectives(lowered.spmd_hlo)
    assert [op for op, _ in ops] == ["all-gather"]  # AllGather_Y of A[I_X, J_Y]
    assert "examples/chapter.py" in lowered.spmd_hlo


# ---------------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "spec, shape, error, message",
    [
        (P("X", "X"), (8, 8), ShardingError, "uses mesh axis 'X' twice"),
        (P("Z", None), (8, 8), ShardingError, "which the mesh (X=2,Y=4) lacks; valid axes: X, Y"),
        (P("X", None, None), (8, 8), ShardingError, "has rank 2"),
        (P("Y", None), (6, 8), ShardingError, "dimension size is 6"),
    ],
)
def test_bad_shardings(spec, shape, error, message):
    with pytest.raises(error, match=re.escape(message)):
        lower(lambda a: a * 2, jax.ShapeDtypeStruct(shape, jnp.float32), mesh={"X": 2, "Y": 4},
              in_shardings=(spec,))


def test_arguments_on_another_mesh():
    a = _sds({"data": 8}, (8, 8), P("data"))
    with pytest.raises(MeshError, match=r"sharded over a mesh data=8 but mesh= is X=2,Y=4"):
        lower(lambda a: a, a, mesh={"X": 2, "Y": 4})


def test_no_mesh_anywhere():
    with pytest.raises(MeshError, match="pass mesh="):
        lower(lambda a: a, jax.ShapeDtypeStruct((8,), jnp.float32))


def test_errors_inside_the_function_are_lowering_errors():
    a = _sds({"X": 8}, (8, 8), P("X"))
    with pytest.raises(LoweringError, match="dot_general requires contracting dimensions"):
        lower(lambda a: a @ jnp.ones((3, 3)), a, mesh={"X": 8})
    with pytest.raises(LoweringError, match=re.escape(__file__)):  # a bare jax assert: where it rose
        lower(jax.shard_map(lambda a: jax.lax.psum(a, "Q"), mesh=make_mesh({"X": 8}), in_specs=P("X"),
                            out_specs=P()), a, mesh={"X": 8})


@pytest.mark.parametrize(
    "entry, message",
    [
        ("examples.chapter", "write it as 'module:function'"),
        ("no_such_module_xyz:f", "cannot import 'no_such_module_xyz'"),
        ("examples.chapter:matmul_case5", "did you mean 'matmul_case"),
        ("examples.chapter:matmul_case2", "needs a mesh with at least 2 axes"),
    ],
)
def test_bad_entry_points(entry, message):
    with pytest.raises(AnalyzerError, match=re.escape(message)):
        lower_entry(entry, mesh={"X": 8})


# ---------------------------------------------------------------------------------------------------- tpu


def test_missing_libtpu_says_how_to_install(monkeypatch):
    import analyzer.compile.lower as module

    monkeypatch.setattr(module, "_libtpu_available", lambda: False)
    fn, args = _case3({"X": 8})
    with pytest.raises(LoweringError, match=re.escape("pip install 'jax[tpu]==")):
        lower(fn, *args, mesh={"X": 8}, target="tpu:v5e:2x4")


@needs_libtpu
@pytest.mark.tpu
def test_tpu_ahead_of_time_compile(monkeypatch):
    monkeypatch.delenv("ALLOW_MULTIPLE_LIBTPU_LOAD", raising=False)
    lowered = lower_entry("examples.chapter:matmul_case2", mesh={"X": 2, "Y": 4}, target="tpu:v5e:2x4")
    # libtpu is let load beside another process only while it loads: a process started later (a training run)
    # inherits the caller's environment, where libtpu's lock still guards the chips
    assert "ALLOW_MULTIPLE_LIBTPU_LOAD" not in os.environ
    assert lowered.target == "tpu:v5e:2x4" and lowered.platform == "tpu"
    assert lowered.device_kind.startswith("TPU v5")
    assert sorted(lowered.mesh.device_ids) == list(range(8))
    # Every chip of the 2x4 slice once, as (x, y, z) torus coordinates.
    assert sorted(lowered.device_coords) == sorted((x, y, 0) for x in range(2) for y in range(4))
    assert [op for op, _ in _collectives(lowered.spmd_hlo)] == ["all-gather"]
    assert "backend_config" in lowered.optimized_hlo  # the TPU compiler's own annotations
    assert lowered.memory["generated_code_bytes"] > 0


@needs_libtpu
@pytest.mark.tpu
@pytest.mark.parametrize(
    "target, mesh, error, message",
    [
        ("tpu:v9z:2x4", {"X": 8}, HardwareError, "libtpu does not know the TPU topology 'v9z:2x4'"),
        ("tpu:v5e:4x4", {"X": 8}, MeshError, "topology 'v5e:4x4' has 16"),
        ("tpu:v5e:2x2*2", {"X": 4}, MeshError, "topology 'v5e:2x2*2' has 8"),
        ("tpu:v9z:2x2*2", {"X": 8}, HardwareError, "libtpu does not know the TPU topology 'v9z:2x2*2'"),
    ],
)
def test_tpu_errors(target, mesh, error, message):
    fn, args = _case3(mesh)
    with pytest.raises(error, match=re.escape(message)):
        lower(fn, *args, mesh=mesh, target=target)


@needs_libtpu
@pytest.mark.tpu
def test_tpu_mesh_of_topology_devices_keeps_the_users_order():
    import os

    import numpy as np
    from jax.experimental import topologies

    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # as analyzer.compile.lower does: no chip is driven
    devices = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2").devices
    mesh = jax.sharding.Mesh(np.array(devices[::-1]).reshape(2, 2), ("X", "Y"),
                             axis_types=(jax.sharding.AxisType.Auto,) * 2)
    fn, args = _case3(mesh)
    lowered = lower(fn, *args, mesh=mesh, target="tpu:v5e:2x2")
    assert lowered.mesh.device_ids == tuple(d.id for d in devices[::-1])
    assert lowered.device_coords == tuple(tuple(d.coords) for d in devices[::-1])


@needs_libtpu
@pytest.mark.tpu
def test_tpu_multi_slice_ahead_of_time_compile():
    """Two v5e 2x2 slices: libtpu's devices of both slices, placed as jax's hybrid mesh (slice over DCN), and
    the AllReduce over the slices in the all-slice SPMD module, and in one slice's final program as a
    megascale host transfer."""
    # A[I, J_slice] . B[J_slice, K]: partial sums over 'slice', the AllReduce crosses the DCN
    lowered = lower_entry("examples.chapter:matmul_case3", mesh={"slice": 2, "X": 4}, target="tpu:v5e:2x2*2")
    assert lowered.target == "tpu:v5e:2x2*2" and lowered.device_kind.startswith("TPU v5")
    # (slice_index, x, y): mesh positions 0-3 on slice 0, 4-7 on slice 1, each slice's four chips once
    assert [c[0] for c in lowered.device_coords] == [0] * 4 + [1] * 4
    assert sorted(c[1:] for c in lowered.device_coords[:4]) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert sorted(lowered.device_coords[4:]) == sorted((1, *c[1:]) for c in lowered.device_coords[:4])
    assert re.search(r"num_partitions=8\b", lowered.spmd_hlo.split("\n", 1)[0])
    assert re.search(r"num_partitions=4\b", lowered.optimized_hlo.split("\n", 1)[0])  # one slice's program
    assert [op for op, _ in _collectives(lowered.spmd_hlo)] == ["all-reduce"]
    assert '_xla_megascale_transfer_type="ALL_REDUCE"' in lowered.optimized_hlo
    assert not _collectives(lowered.optimized_hlo)  # nothing left on ICI: the one AllReduce went over DCN


def test_jax_platforms_without_cpu_is_named_for_the_cpu_target():
    """JAX_PLATFORMS=cuda made jax stop on an AssertionError that named no platform (issue 27)."""
    from types import SimpleNamespace

    from analyzer.compile.lower import _check_platforms

    with pytest.raises(LoweringError, match=r"JAX_PLATFORMS='cuda' leaves out the cpu backend.*'cuda,cpu'"):
        _check_platforms(SimpleNamespace(config=SimpleNamespace(jax_platforms="cuda")), "cpu")
    _check_platforms(SimpleNamespace(config=SimpleNamespace(jax_platforms="cuda,cpu")), "cpu")
    _check_platforms(SimpleNamespace(config=SimpleNamespace(jax_platforms="")), "cpu")
