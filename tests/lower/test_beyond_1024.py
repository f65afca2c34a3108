"""The cpu target beyond 1,024 devices (issue 25 item 7; DESIGN.md, "More than 1,024 devices on the cpu target"):
a child process that stops at the after-SPMD module, with gloo and a local coordinator past 2,048 devices."""

from __future__ import annotations

import os
import re

import pytest

from analyzer.compile import lower as lower_module
from analyzer.compile.lower import _spmd_dumps, lower, make_mesh
from analyzer.errors import MeshError


def _touch(folder, name: str) -> None:
    (folder / name).write_text("HloModule m\n")


def test_the_spmd_dump_is_whole_only_once_a_later_pass_of_the_same_module_is_dumped(tmp_path):
    _touch(tmp_path, "module_0003.jit_step.before_optimizations.txt")
    _touch(tmp_path, "module_0003.jit_step.0000.spmd-partitioner.after_shardy-xla.before_spmd-partitioning.txt")
    assert _spmd_dumps(str(tmp_path)) == (None, False)
    spmd = "module_0003.jit_step.0001.spmd-partitioner.after_spmd-partitioning.before_control-dep-rewriter.txt"
    _touch(tmp_path, spmd)
    assert _spmd_dumps(str(tmp_path)) == (tmp_path / spmd, False)  # being written, maybe
    _touch(tmp_path, "module_0001.jit_other.0007.spmd-partitioner.after_control-dep-rewriter.before_x.txt")
    assert _spmd_dumps(str(tmp_path))[1] is False  # another module's later pass says nothing
    _touch(tmp_path, "module_0003.jit_step.0002.spmd-partitioner.after_control-dep-rewriter.before_call-inliner.txt")
    assert _spmd_dumps(str(tmp_path)) == (tmp_path / spmd, True)


def test_isolate_false_beyond_1024_devices_names_the_option():
    with pytest.raises(MeshError, match="isolate=None"):
        lower(lambda x: x, 1.0, mesh={"X": 2048}, isolate=False)


def _fsdp(mesh_sizes: dict[str, int]):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = make_mesh(mesh_sizes)
    n = mesh.size
    x = jax.ShapeDtypeStruct((2 * n, 1024), jnp.float32, sharding=NamedSharding(mesh, P(tuple(mesh.axis_names))))
    w = jax.ShapeDtypeStruct((1024, 256), jnp.float32, sharding=NamedSharding(mesh, P(mesh.axis_names[-1])))

    def step(x, w):
        return jax.grad(lambda w: (jnp.tanh(x @ w) ** 2).sum())(w)

    return step, (x, w), mesh


@pytest.mark.slow
def test_stopping_after_partitioning_gives_the_full_compiles_module(monkeypatch):
    # Where both are possible (8 devices), the child that stops at the after-SPMD module returns the module the
    # full compile dumps, line for line: what the cpu target reads is the same either way. The full compile runs in
    # this process (its 8 devices; test_lower.py's test_child_process_matches_in_process shows a child's compile
    # gives the same module), so only the short compile starts a child and its jax.
    step, args, mesh = _fsdp({"slice": 2, "fsdp": 4})
    full = lower(step, *args, mesh=mesh, isolate=False)
    monkeypatch.setattr(lower_module, "CPU_FULL_COMPILE_DEVICES", 4)
    short = lower(step, *args, mesh=mesh)
    assert short.optimized_hlo == "" and short.memory is None and full.optimized_hlo
    assert short.spmd_hlo == full.spmd_hlo and short.global_hlo == full.global_hlo


@pytest.mark.slow
@pytest.mark.parametrize("sizes", [{"slice": 2, "fsdp": 1024}, {"slice": 16, "fsdp": 256}], ids=["2048", "4096"])
def test_more_than_1024_devices_compile_to_the_after_spmd_module(sizes, tmp_path, monkeypatch):
    # 2,048 devices fit one CPU client; 4,096 take gloo and the local coordinator. The groups are the mesh's.
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # a private temp folder: nothing left in it
    step, args, mesh = _fsdp(sizes)
    lowered = lower(step, *args, mesh=mesh)
    n = mesh.size
    assert lowered.in_subprocess and lowered.optimized_hlo == "" and lowered.memory is None
    assert f"num_partitions={n}" in lowered.spmd_hlo.split("\n", 1)[0]
    assert re.search(r"all-reduce\(", lowered.spmd_hlo) and re.search(r"all-gather\(", lowered.spmd_hlo)
    assert lowered.mesh.size == n and lowered.mesh.device_ids == tuple(range(n))
    assert os.listdir(tmp_path) == []  # the dump folder went with the child


@pytest.mark.slow
def test_analysis_beyond_1024_devices_prices_the_slice_axis_and_estimates_tpu_memory():
    import analyzer

    step, args, mesh = _fsdp({"slice": 8, "fsdp": 256})
    report = analyzer.analyze(step, *args, mesh=mesh, hardware="tpu-v5e", topology="v5e:16x16*8")
    axes = {tuple(a) for a in report.collectives["axes"]}
    assert any("slice" in a for a in axes) and report.totals.step_seconds > 0
    # the TPU estimate, no CPU figures (its temporaries in HBM, or in VMEM where their peak fits there)
    assert report.memory and report.memory.get("temp_bytes", 0) + report.memory.get("vmem_temp_bytes", 0) > 0
    assert "cpu_compiler_temp_bytes" not in report.memory
