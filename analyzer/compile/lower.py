"""Lowering: from a jax function and its shardings to the HLO text XLA produces for a target.

The first stage of the pipeline (DESIGN.md, "lower"). `lower` returns a `Lowered` that carries the HLO right
after SPMD partitioning (the backend-neutral view the collectives are read from), the final optimized HLO, the
mesh, the TPU torus coordinates of each logical device, and the compiler's memory figures.

How it works, and why this way:

1. The function is traced and lowered *in the calling process* against an `AbstractMesh` of the requested
   shape (`jax.jit(fn).trace(*args).lower(lowering_platforms=(platform,))` under
   `jax.sharding.use_abstract_mesh`). No devices are needed for that, so the mesh may be larger than what the
   live process has, and closures, lambdas and locally defined functions work: nothing is pickled or
   imported by name. The StableHLO text keeps its debug locations, so the HLO's stack-frame tables and
   `op_name`s point at the user's own `file:line`.
2. The StableHLO text is compiled by XLA with `num_partitions = mesh size` and the mesh's device assignment,
   with `xla_dump_to` set so that the module after the `spmd-partitioning` pass is written out:
   - target `cpu`: on the live process's CPU client when it has enough devices, otherwise in a child
     process started with `--xla_force_host_platform_device_count=N` and `JAX_PLATFORMS=cpu`
     (`python -m analyzer.compile.lower`, the job passed as JSON on stdin);
   - target `tpu:<topology>`: ahead of time on libtpu's compile-only client for that topology
     (`jax.experimental.topologies.get_topology_desc`), in the calling process; no TPU is needed and it works
     under `JAX_PLATFORMS=cpu`. `tpu:<topology>*N` asks libtpu for N such slices (`num_slices=N`; the
     devices carry `slice_index`). libtpu then compiles the program of one slice: its final HLO has the
     partitions of one slice and the collectives over DCN as megascale host transfers (send/recv), while the
     after-SPMD dump is the whole program over every slice's chips.

Logical device ids. In every HLO this module returns, device (partition) id `i` is position `i` of the mesh
in row-major order; `Lowered.mesh.device_ids[i]` is the physical device id placed there
(`mesh.devices.flat[i].id`) and `Lowered.device_coords[i]` its torus coordinates on TPU. On a TPU target a
dict or abstract mesh is placed as `jax.make_mesh` places it on that slice; pass a `jax.sharding.Mesh` of the
topology's devices (`jax.experimental.topologies.get_topology_desc(...).devices`) to choose the placement.
On several slices, which `jax.make_mesh` refuses, it is placed as jax's hybrid mesh places it
(`mesh_utils.create_hybrid_device_mesh`, the major mesh axes over DCN).

Example:
    >>> import jax, jax.numpy as jnp
    >>> from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec as P
    >>> from analyzer.compile.lower import lower, make_mesh
    >>> mesh = make_mesh({"X": 2, "Y": 4})    # larger than the process's devices: compiled in a child process
    >>> a = jax.ShapeDtypeStruct((256, 128), jnp.float32, sharding=NamedSharding(mesh, P("X", "Y")))
    >>> b = jax.ShapeDtypeStruct((128, 64), jnp.float32, sharding=NamedSharding(mesh, P("Y", None)))
    >>> lowered = lower(lambda a, b: a @ b, a, b, mesh=mesh)
    >>> "all-reduce(" in lowered.spmd_hlo      # A[I_X, J_Y] · B[J_Y, K]: partial sums over Y
    True
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analyzer.errors import (AnalyzerError, CompileTimeout, EntryPointError, HardwareError, LoweringError, MeshError,
                             ShardingError, valid_choices)
from analyzer.theory.mesh import AXIS_TYPES, MeshInfo, parse_mesh

if TYPE_CHECKING:  # jax is imported lazily: `import analyzer` must stay cheap
    import jax

__all__ = [
    "Lowered",
    "Target",
    "lower",
    "lower_entry",
    "load_entry",
    "mark_flash_attention",
    "time_limit",
    "make_mesh",
    "mesh_info",
    "parse_mesh",
    "parse_target",
    "TPU_EXTRA_HINT",
    "tpu_extra_hint",
]

# What the `tpu` extra installs, by the names the registry serves: libtpu through jax's own extra, at the jax that is
# installed (a libtpu of another jax may not load).
TPU_EXTRA_HINT = "pip install 'jax[tpu]==<your jax version>' (the `tpu` extra of hlo-analyzer: libtpu for your jax)"
_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
# Dump files written right after the SPMD partitioner: `...after_spmd-partitioning...` on CPU/GPU,
# `...after_tpu-spmd-partitioning...` from libtpu.
_SPMD_DUMP = re.compile(r"after_(tpu-)?spmd-partitioning")
_PASS_NUMBER = re.compile(r"^module_(\d+)\.[^/]*?\.(\d{4})\.")  # module_0002.jit_f.0001.<pipeline>.after_...
# The cpu target compiles up to this many devices through every backend pass (the optimized HLO and the CPU
# compiler's memory figures); beyond it, in a child that stops at the after-SPMD module (DESIGN.md, "More than
# 1,024 devices on the cpu target").
CPU_FULL_COMPILE_DEVICES = 1024
# XLA's CPU client holds at most this many devices per process (kMaxCpuDevicesPerProcess, cpu_topology.h); more
# take gloo collectives and a one-process jax.distributed coordinator on localhost.
_CPU_DEVICES_PER_PROCESS = 2048
_MEMORY_FIELDS = {
    "argument_bytes": "argument_size_in_bytes",
    "output_bytes": "output_size_in_bytes",
    "temp_bytes": "temp_size_in_bytes",
    "alias_bytes": "alias_size_in_bytes",
    "generated_code_bytes": "generated_code_size_in_bytes",
}


# --------------------------------------------------------------------------------------------------------------
# Result


@dataclass(frozen=True)
class Lowered:
    """One function compiled for one target and mesh.

    Attributes:
      spmd_hlo: HLO text right after SPMD partitioning: per-device shapes and the collectives the partitioner
        inserted, before backend passes rewrite them (the CPU backend promotes bf16 all-reduces, combines and
        decomposes collectives). The view to read collectives from.
      optimized_hlo: the final optimized HLO (`compiled.as_text()`); "" on the cpu target beyond 1,024 devices,
        where the compile stops after SPMD partitioning.
      target: "cpu" or "tpu:<generation>:<shape>[*<slices>]", e.g. "tpu:v5e:2x4", "tpu:v5e:2x2*2".
      mesh: the user's mesh: axis names, sizes, device id at each mesh position, axis types.
      device_coords: torus coordinates of the device at each mesh position (mesh order), or None on cpu; on a
        multi-slice target `(slice_index, *torus coords)`, the torus coords trimmed to the slice's rank.
      memory: per-device bytes from the compiler's memory analysis (`argument_bytes`, `output_bytes`,
        `temp_bytes`, `alias_bytes`, `generated_code_bytes`), or None when the backend gives none.
      compile_seconds: seconds XLA took to compile (partitioning and backend passes), without tracing.
      lower_seconds: seconds to trace the function and lower it to StableHLO.
      jax_version: the jax version that produced the HLO.
      stablehlo: the StableHLO module (MLIR text with debug locations) that was compiled.
      name: the function's name as jax reports it (e.g. "jit_step").
      in_subprocess: whether the compile ran in a child process (the live process had too few devices).
      device_kind: the device kind compiled for ("cpu", "TPU v5 lite", ...).
      xla_flags: the user's XLA flags (`analyzer.compile.xlaflags.parse_xla_flags`), all of them, as data for the
        step model; xla_flags_passed: the names the target's compiler took (the cpu target passes only the flags
        the CPU compiler knows; a TPU target passes all of them to libtpu's compiler).
      global_hlo: the HLO module as jax handed it to XLA (`before_optimizations`): global shapes, one program
        for the whole mesh; the model's work (`analyzer.analysis.dots.model_flops`) is counted on it. On a
        one-device mesh, where XLA runs no SPMD partitioner, it is also `spmd_hlo`.
      flash_attention: the program's attention is a flash kernel on the TPU, analysed here through a portable
        substitute whose S x S scores go through HBM (MaxText's attention=flash on the cpu target; a function
        marked by `mark_flash_attention`, such as the template's step with `flash_attention=True`).
    """

    spmd_hlo: str
    optimized_hlo: str
    target: str
    mesh: MeshInfo
    device_coords: tuple[tuple[int, ...], ...] | None
    memory: Mapping[str, int] | None
    compile_seconds: float
    jax_version: str
    lower_seconds: float = 0.0
    stablehlo: str = dataclasses.field(default="", repr=False)
    name: str = ""
    in_subprocess: bool = False
    device_kind: str = ""
    global_hlo: str = dataclasses.field(default="", repr=False)
    xla_flags: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    xla_flags_passed: tuple[str, ...] = ()
    # The program's attention runs on the TPU as a flash kernel that this target could not lower (MaxText's
    # attention=flash analysed as dot_product on the cpu target): the step prices its attention as the kernel
    # (analyzer.analysis.costs.FlashScores, docs/step.md "Flash attention").
    flash_attention: bool = False

    @property
    def platform(self) -> str:
        """"cpu" or "tpu"."""
        return self.target.split(":", 1)[0]


@dataclass(frozen=True)
class Target:
    """A parsed target: `cpu`, or `tpu:<generation>:<shape>[*<slices>]` (a libtpu topology name such as
    `v5e:2x4`, and how many such slices are joined by the data-center network; `topology` keeps the whole
    `v5e:2x2*2`)."""

    platform: str
    topology: str | None = None

    def __str__(self) -> str:
        return self.platform if self.topology is None else f"{self.platform}:{self.topology}"

    @property
    def generation(self) -> str | None:
        """The TPU generation ("v5e" for "tpu:v5e:2x2*2"; None for cpu)."""
        return None if self.topology is None else self.topology.split(":", 1)[0]

    @property
    def slice_topology(self) -> str | None:
        """The libtpu topology name of one slice ("v5e:2x2" for "v5e:2x2*2")."""
        return None if self.topology is None else self.topology.split("*", 1)[0]

    @property
    def num_slices(self) -> int:
        """How many slices the target joins over DCN (1 for a single slice and for cpu)."""
        return int(self.topology.split("*", 1)[1]) if self.topology and "*" in self.topology else 1


# --------------------------------------------------------------------------------------------------------------
# Targets and meshes


def parse_target(target: str | Target) -> Target:
    """Parse a target string.

    Args:
      target: "cpu", or "tpu:<generation>:<shape>" such as "tpu:v5e:2x4" or "tpu:v5p:2x2x2", optionally
        followed by "*<slices>" for several such slices joined by DCN ("tpu:v5e:16x16*4").

    Returns:
      The `Target`.

    Example:
        >>> parse_target("tpu:v5e:2x4")
        Target(platform='tpu', topology='v5e:2x4')
        >>> parse_target("tpu:v5e:2x2*2").num_slices
        2
    """
    if isinstance(target, Target):
        return target
    if not isinstance(target, str):
        raise LoweringError(f"target must be a string such as 'cpu' or 'tpu:v5e:2x4', got {target!r}")
    text = target.strip().lower()
    if text == "cpu":
        return Target("cpu")
    if text.startswith("tpu:"):
        topology = re.sub(r"\s+", "", text[4:])
        m = re.fullmatch(r"v\d+[a-z]*(lite)?:\d+(x\d+){1,2}(\*(?P<slices>\d+))?", topology)
        if not m or (m.group("slices") is not None and int(m.group("slices")) < 1):
            raise LoweringError(
                f"target {target!r}: a TPU target names a generation and a slice shape, and optionally a number "
                "of slices joined by DCN, e.g. 'tpu:v5e:2x4', 'tpu:v5e:4x4', 'tpu:v5p:2x2x2', 'tpu:v4:2x2x1', "
                "'tpu:v5e:16x16*4'"
            )
        if m.group("slices") is not None and int(m.group("slices")) == 1:
            topology = topology.split("*", 1)[0]  # one slice is the slice itself
        return Target("tpu", topology)
    raise LoweringError(f"unknown target {target!r}: " + valid_choices(text, ["cpu", "tpu:<generation>:<shape>"],
                                                                         what="targets"))


def _axis_type(value: Any, axis: str) -> Any:
    """A `jax.sharding.AxisType` from a name ("auto", "explicit", "manual") or an AxisType."""
    from jax.sharding import AxisType

    if isinstance(value, AxisType):
        return value
    name = str(value).lower()
    if name not in AXIS_TYPES:
        raise MeshError(f"mesh axis {axis!r}: unknown axis type {value!r}; " + valid_choices(name, AXIS_TYPES,
                                                                                          what="axis types"))
    return getattr(AxisType, name.capitalize())


def make_mesh(mesh: Any) -> jax.sharding.AbstractMesh:
    """An `AbstractMesh` from a mesh description.

    Args:
      mesh: a `jax.sharding.Mesh` or `AbstractMesh` (returned as its abstract mesh), a dict
        `{"data": 4, "model": 2}` whose values are sizes or `(size, axis_type)` pairs, or a string accepted by
        `parse_mesh`. Axes of a dict or string default to `AxisType.Auto` (XLA chooses intermediate
        shardings), unlike `jax.make_mesh`, which defaults to Explicit in jax 0.10.

    Returns:
      The abstract mesh, axes in the given order (major to minor).

    Example:
        >>> make_mesh({"data": 4, "model": (2, "explicit")})
        AbstractMesh('data': 4, 'model': 2, axis_types=(Auto, Explicit))
    """
    from jax.sharding import AbstractMesh, Mesh

    if isinstance(mesh, Mesh):
        return mesh.abstract_mesh
    if isinstance(mesh, AbstractMesh):
        return mesh
    if isinstance(mesh, str):
        mesh = parse_mesh(mesh)
    if not isinstance(mesh, Mapping) or not mesh:
        raise MeshError(
            f"mesh must be a jax.sharding.Mesh, an AbstractMesh, a dict such as {{'data': 4, 'model': 2}} "
            f"or a string such as 'data=4,model=2'; got {mesh!r}"
        )
    names, sizes, types = [], [], []
    for name, value in mesh.items():
        if not isinstance(name, str) or not name:
            raise MeshError(f"mesh {dict(mesh)!r}: axis names must be non-empty strings, got {name!r}")
        size, kind = (value if isinstance(value, tuple) else (value, "auto"))
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise MeshError(f"mesh axis {name!r}: size must be a positive integer, got {size!r}")
        names.append(name)
        sizes.append(size)
        types.append(_axis_type(kind, name))
    return AbstractMesh(tuple(sizes), tuple(names), axis_types=tuple(types))


def mesh_info(mesh: Any, device_ids: Sequence[int] | None = None) -> MeshInfo:
    """The `MeshInfo` of a mesh (axis names, sizes, device id at each position, axis types).

    Args:
      mesh: anything `make_mesh` accepts.
      device_ids: the device id at each mesh position in row-major order; by default the concrete mesh's
        device ids, or 0..N-1 for an abstract mesh.

    Example:
        >>> mesh_info({"X": 2, "Y": 2})
        MeshInfo(axis_names=('X', 'Y'), axis_sizes=(2, 2), device_ids=(0, 1, 2, 3), axis_types=('auto', 'auto'))
    """
    from jax.sharding import Mesh

    abstract = make_mesh(mesh)
    if device_ids is None:
        if isinstance(mesh, Mesh):
            device_ids = [d.id for d in mesh.devices.flat]
        else:
            device_ids = range(abstract.size)
    return MeshInfo(
        axis_names=tuple(abstract.axis_names),
        axis_sizes=tuple(abstract.axis_sizes),
        device_ids=tuple(int(i) for i in device_ids),
        axis_types=tuple(t.name.lower() for t in abstract.axis_types),
    )


# --------------------------------------------------------------------------------------------------------------
# Shardings of the arguments


def _describe_mesh(abstract: Any) -> str:
    return ",".join(f"{n}={s}" for n, s in zip(abstract.axis_names, abstract.axis_sizes))


def _check_spec(spec: Any, shape: Sequence[int] | None, abstract: Any, where: str) -> None:
    """Raise ShardingError when a PartitionSpec cannot hold on the mesh (and, given a shape, on that shape)."""
    names = tuple(abstract.axis_names)
    sizes = dict(zip(abstract.axis_names, abstract.axis_sizes))
    used: dict[str, int] = {}
    entries = tuple(spec)
    if shape is not None and len(entries) > len(shape):
        raise ShardingError(
            f"{where}: PartitionSpec {spec} has {len(entries)} entries but the array has rank {len(shape)} "
            f"(shape {tuple(shape)}); give at most one entry per dimension"
        )
    for dim, entry in enumerate(entries):
        if entry is None:
            continue
        axes = (entry,) if isinstance(entry, str) else tuple(entry)
        for axis in axes:
            if not isinstance(axis, str):
                continue  # P.UNCONSTRAINED and friends
            if axis not in sizes:
                raise ShardingError(
                    f"{where}: PartitionSpec {spec} names mesh axis {axis!r}, which the mesh "
                    f"({_describe_mesh(abstract)}) lacks; " + valid_choices(axis, names, what="axes")
                )
            if axis in used:
                raise ShardingError(
                    f"{where}: PartitionSpec {spec} uses mesh axis {axis!r} twice (dimensions {used[axis]} and "
                    f"{dim}); an array can be sharded over each mesh axis at most once"
                )
            used[axis] = dim


def _same_mesh_shape(a: Any, b: Any) -> bool:
    return tuple(a.axis_names) == tuple(b.axis_names) and tuple(a.axis_sizes) == tuple(b.axis_sizes)


def _abstract_sharding(sharding: Any, abstract: Any, shape: Sequence[int] | None, where: str) -> Any:
    """Re-home a NamedSharding or PartitionSpec onto the abstract mesh; None and other shardings pass as None."""
    from jax.sharding import NamedSharding, PartitionSpec

    if sharding is None:
        return None
    if isinstance(sharding, PartitionSpec):
        _check_spec(sharding, shape, abstract, where)
        return NamedSharding(abstract, sharding)
    if isinstance(sharding, NamedSharding):
        own = sharding.mesh.abstract_mesh if hasattr(sharding.mesh, "abstract_mesh") else sharding.mesh
        if not _same_mesh_shape(own, abstract):
            raise MeshError(
                f"{where} is sharded over a mesh {_describe_mesh(own)} but mesh= is {_describe_mesh(abstract)}; "
                "pass the mesh the shardings were made with"
            )
        _check_spec(sharding.spec, shape, abstract, where)
        return NamedSharding(abstract, sharding.spec, memory_kind=sharding.memory_kind)
    if getattr(sharding, "is_fully_replicated", False) and len(getattr(sharding, "device_set", ())) <= 1:
        return None  # a single-device array: let XLA choose, as jit does for uncommitted arguments
    raise ShardingError(
        f"{where}: unsupported sharding {type(sharding).__name__}; use jax.sharding.NamedSharding "
        "or a PartitionSpec on the mesh"
    )


def _path_name(prefix: str, path: Sequence[Any]) -> str:
    from jax.tree_util import keystr

    return prefix + keystr(tuple(path))


def _abstract_args(args: Sequence[Any], abstract: Any, static: set[int]) -> list[Any]:
    """ShapeDtypeStructs on the abstract mesh for every array leaf of every non-static argument."""
    import jax

    def convert(path: Sequence[Any], leaf: Any, prefix: str) -> Any:
        if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            return leaf  # Python scalars stay as they are; jit makes them weakly typed arrays
        where = _path_name(prefix, path)
        sharding = _abstract_sharding(getattr(leaf, "sharding", None), abstract, tuple(leaf.shape), where)
        return jax.ShapeDtypeStruct(tuple(leaf.shape), leaf.dtype, sharding=sharding)

    out = []
    for i, arg in enumerate(args):
        if i in static:
            out.append(arg)
        else:
            out.append(jax.tree_util.tree_map_with_path(lambda p, x, i=i: convert(p, x, f"args[{i}]"), arg))
    return out


def _apply_in_shardings(args: list[Any], in_shardings: Any, static: set[int]) -> list[Any]:
    """Put `in_shardings` (a pytree prefix of the non-static arguments, as for `jax.jit`) onto the arguments'
    ShapeDtypeStructs. Equivalent to jit's in_shardings for abstract arguments, and unlike them it works with
    keyword arguments too. A None leaf keeps the argument's own sharding."""
    import jax
    from jax.sharding import NamedSharding

    if in_shardings is None:
        return args
    dynamic = [i for i in range(len(args)) if i not in static]
    if isinstance(in_shardings, NamedSharding):
        in_shardings = (in_shardings,) * len(dynamic)
    if not isinstance(in_shardings, (tuple, list)) or len(in_shardings) != len(dynamic):
        raise ShardingError(f"in_shardings must be a sharding or a tuple with one entry per non-static argument "
                            f"({len(dynamic)}); got {in_shardings!r}")

    def put(where: str, sharding: Any, subtree: Any) -> Any:
        if sharding is None:
            return subtree

        def one(path: Sequence[Any], leaf: Any) -> Any:
            if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
                return leaf
            _check_spec(sharding.spec, tuple(leaf.shape), sharding.mesh, _path_name(where, path))
            return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding)

        return jax.tree_util.tree_map_with_path(one, subtree)

    out = list(args)
    for k, (i, sharding) in enumerate(zip(dynamic, in_shardings)):
        try:
            out[i] = jax.tree_util.tree_map_with_path(
                lambda p, s, sub, i=i, k=k: put(f"in_shardings[{k}]{jax.tree_util.keystr(tuple(p))} on args[{i}]",
                                                s, sub),
                sharding, args[i], is_leaf=lambda x: x is None or isinstance(x, NamedSharding))
        except ValueError as e:
            raise ShardingError(f"in_shardings[{k}] does not match the structure of args[{i}]: "
                                f"{_first_line(e)}") from None
    return out


def _abstract_shardings(tree: Any, abstract: Any, what: str) -> Any:
    """in_shardings / out_shardings with every NamedSharding or PartitionSpec re-homed on the abstract mesh."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    if tree is None:
        return None

    def is_leaf(x: Any) -> bool:
        return x is None or isinstance(x, (PartitionSpec, NamedSharding))

    return jax.tree_util.tree_map_with_path(
        lambda p, s: _abstract_sharding(s, abstract, None, _path_name(what, p)), tree, is_leaf=is_leaf
    )


# --------------------------------------------------------------------------------------------------------------
# Devices


def _libtpu_available() -> bool:
    return importlib.util.find_spec("libtpu") is not None


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[list[str]]:
    """Capture what C++ libraries (libtpu) write to file descriptor 2; the text is yielded for error messages."""
    captured: list[str] = []
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real fd 2 (some embedded interpreters)
        yield captured
        return
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield captured
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            captured.append(sink.read().decode(errors="replace"))


def tpu_extra_hint() -> str:
    """The command that installs libtpu for the installed jax (what `pip install -e '.[tpu]'` would bring)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"pip install 'jax[tpu]=={version('jax')}' (the `tpu` extra of hlo-analyzer: libtpu for your jax)"
    except PackageNotFoundError:
        return TPU_EXTRA_HINT


@contextlib.contextmanager
def libtpu_beside_others() -> Iterator[None]:
    """`ALLOW_MULTIPLE_LIBTPU_LOAD=1` while libtpu loads for an ahead-of-time compile, and the caller's environment
    back after.

    libtpu reads the variable when it initialises and otherwise takes /tmp/libtpu_lockfile, so that two processes
    never drive the same chips. Ahead-of-time compilation drives no chip, and without it a second analysis (or a
    test run) beside a first one fails. Set only around the load: a process the caller starts later (a training
    run) inherits the caller's environment, where libtpu's lock still guards the chips.
    """
    key = "ALLOW_MULTIPLE_LIBTPU_LOAD"
    set_here = key not in os.environ
    if set_here:
        os.environ[key] = "1"
    try:
        yield
    finally:
        if set_here:
            os.environ.pop(key, None)


def _tpu_devices(target: Target) -> list[Any]:
    """The compile-only TPU devices of a TPU target (e.g. "tpu:v5e:2x4"; "tpu:v5e:2x2*2" for two such slices
    over DCN, whose devices carry `slice_index` 0 and 1)."""
    if not _libtpu_available():
        raise LoweringError(f"target '{target}' needs libtpu for ahead-of-time TPU compilation: "
                            f"{tpu_extra_hint()}")
    from jax.experimental import topologies

    topology, slices = target.topology, target.num_slices
    extra = {"num_slices": slices} if slices > 1 else {}

    with libtpu_beside_others(), _quiet_stderr() as log:
        try:
            desc = topologies.get_topology_desc(platform="tpu", topology_name=target.slice_topology, **extra)
            error = None
        except Exception as e:  # libtpu raises its own runtime errors for unknown names
            error = e
    if error is not None:
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise HardwareError(
            f"libtpu does not know the TPU topology {topology!r} ({detail}); give a generation and a slice "
            "shape such as 'v5e:2x2', 'v5e:2x4', 'v5e:4x4', 'v5p:2x2x2', 'v4:2x2x1' (and '*N' for N slices)"
        ) from None
    del log
    devices = list(desc.devices)
    found = len({int(getattr(d, "slice_index", 0)) for d in devices})
    if found != slices:
        raise HardwareError(f"libtpu described TPU topology {topology!r} with {found} slice(s), not "
                            f"{slices}; this libtpu cannot describe multi-slice topologies")
    return devices


def _tpu_coords(device: Any, rank: int, multi_slice: bool) -> tuple[int, ...]:
    """A TPU device's coordinates on the slice(s): its torus coordinates trimmed to the torus's `rank`, led by
    its `slice_index` on a multi-slice target (the DCN is the major physical axis, as in `v5e:2x2*2`)."""
    torus = tuple(int(c) for c in device.coords)[:rank]
    return ((int(device.slice_index), *torus) if multi_slice else tuple(int(c) for c in device.coords))


def _tpu_mesh_devices(mesh: Any, abstract: Any, devices: list[Any], topology: str) -> list[Any]:
    """The topology's devices in mesh order: the user's own order for a Mesh of these devices, else the layout
    `jax.make_mesh` gives on that slice (what a real run with `jax.make_mesh` would use; on an 8-chip v5e
    tray that is jax's ring order 0 1 2 3 7 6 5 4 whatever the mesh shape), else device-id order
    (`analyzer.compile.placement.make_mesh_devices`, which the cpu target applies to stand-in devices). On
    several slices (`jax.make_mesh` refuses those) the layout of jax's hybrid mesh, the major axes over DCN
    (`analyzer.compile.placement.hybrid_mesh_devices`)."""
    from jax.sharding import Mesh

    from analyzer.compile.placement import hybrid_mesh_devices, make_mesh_devices

    if abstract.size != len(devices):
        raise MeshError(
            f"mesh {_describe_mesh(abstract)} has {abstract.size} devices but TPU topology {topology!r} has "
            f"{len(devices)}; use a mesh whose axis sizes multiply to {len(devices)}, or a topology with "
            f"{abstract.size} chips"
        )
    if isinstance(mesh, Mesh) and all(getattr(d, "platform", "") == "tpu" for d in mesh.devices.flat):
        by_id = {d.id: d for d in devices}
        try:
            return [by_id[d.id] for d in mesh.devices.flat]
        except KeyError as e:
            raise MeshError(f"mesh device {e.args[0]} is not in TPU topology {topology!r}") from None
    if len({int(getattr(d, "slice_index", 0)) for d in devices}) > 1:
        ordered, _ = hybrid_mesh_devices(tuple(abstract.axis_sizes), devices)
        return ordered
    ordered, _ = make_mesh_devices(tuple(abstract.axis_sizes), tuple(abstract.axis_names), devices,
                                   axis_types=tuple(abstract.axis_types))
    return ordered


def _cpu_devices_in_process(n: int) -> list[Any] | None:
    """The live process's CPU devices when jax is (or can cheaply be) initialised with at least n of them."""
    from jax._src import xla_bridge

    if not xla_bridge.backends_are_initialized():
        flags = os.environ.get("XLA_FLAGS", "")
        m = re.search(_DEVICE_COUNT_FLAG + r"=(\d+)", flags)
        platforms = [p for p in os.environ.get("JAX_PLATFORMS", "").split(",") if p]
        # Starting jax here is cheap when it will only start the CPU backend; with libtpu installed and no
        # JAX_PLATFORMS it would probe for TPU chips first, so the child process is the better deal.
        cpu_only = platforms == ["cpu"] or (not platforms and not _libtpu_available())
        if not m or int(m.group(1)) < n or not cpu_only:
            return None
    try:
        devices = xla_bridge.get_backend("cpu").devices()
    except Exception:
        return None
    return list(devices) if len(devices) >= n else None


# --------------------------------------------------------------------------------------------------------------
# Compiling a StableHLO module (runs in this process or in the child)


def _spmd_dumps(dump: str) -> tuple[Path | None, bool]:
    """The after-SPMD-partitioning dump in a dump folder, and whether XLA has finished writing it (a dump of a
    later pass exists: XLA writes its dumps one after the other, each closed before the next pass runs)."""
    spmd, later = None, False
    for p in Path(dump).iterdir():
        if p.suffix == ".txt" and _SPMD_DUMP.search(p.name):
            spmd = p
    if spmd is None:
        return None, False
    number = _PASS_NUMBER.search(spmd.name)
    for p in Path(dump).iterdir():
        m = _PASS_NUMBER.search(p.name)
        if m and number and m.group(1) == number.group(1) and int(m.group(2)) > int(number.group(2)):
            later = True
    return spmd, later


def _watch_for_spmd_dump(dump: str, start: float, ids: Sequence[int], devices: Sequence[Any],
                         done: Callable[[dict[str, Any]], None], stop: Any, flags: Sequence[str] = ()) -> None:
    """Poll the dump folder until the after-SPMD module is complete, then hand `done` the result without the
    backend's passes (no optimized HLO, no memory figures): what the cpu target reads beyond 1,024 devices,
    where the CPU backend's passes after partitioning take minutes and gigabytes for nothing the analysis needs."""
    while not stop.wait(0.02):
        spmd, complete = _spmd_dumps(dump)
        if not complete or spmd is None:
            continue
        before = sorted(p for p in Path(dump).iterdir() if p.name.endswith(".before_optimizations.txt"))
        done({"spmd_hlo": spmd.read_text(), "optimized_hlo": "",
              "global_hlo": before[0].read_text() if before else "", "memory": None,
              "compile_seconds": time.perf_counter() - start, "device_kind": str(getattr(devices[0], "device_kind",
                                                                                            "cpu")),
              "stopped_after_spmd": True, "devices": len(ids), "xla_flags_passed": list(flags)})
        return


def _compile_job(job: Mapping[str, Any], devices: Sequence[Any] | None = None,
                 after_spmd: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Compile one StableHLO module and collect its HLO texts and memory figures.

    Args:
      job: JSON-able description: `stablehlo` (MLIR text), `platform` ("cpu" | "tpu"), `device_ids` (physical
        id at each mesh position), `tuple_args`, `allow_prop_in`, `allow_prop_out` (per-argument / per-output
        flags letting XLA choose unspecified shardings, as jit sets them); optionally `dump_dir`, a folder the
        caller owns (and removes) for XLA's dumps.
      devices: the devices to compile for (TPU compile-only devices); None picks the CPU client's devices by id.
      after_spmd: called (from a watcher thread) with the result as soon as the after-SPMD module is written,
        while XLA goes on with the backend's passes; it is expected to end the process (the child does).

    Returns:
      dict with `spmd_hlo`, `optimized_hlo`, `memory`, `compile_seconds`, `device_kind`, `global_hlo`.
    """
    import threading

    import numpy as np
    from jax._src import compiler, xla_bridge
    from jax._src.interpreters import mlir
    from jax._src.lib import xla_client as xc
    from jax._src.lib.mlir import ir

    ids = [int(i) for i in job["device_ids"]]
    if devices is None:
        by_id = {d.id: d for d in xla_bridge.get_backend("cpu").devices()}
        devices = [by_id[i] for i in ids]
    client = devices[0].client
    owned = contextlib.nullcontext(job["dump_dir"]) if job.get("dump_dir") else \
        tempfile.TemporaryDirectory(prefix="hlo-analyzer-")
    with owned as dump:
        overrides: dict[str, Any] = dict(job.get("xla_flags") or {})
        overrides |= {
            "xla_dump_to": dump,
            # The pass after the partitioner is dumped too: its file tells a watcher the partitioned one is whole.
            "xla_dump_hlo_pass_re": "spmd-partitioning" + ("|control-dep-rewriter" if after_spmd else ""),
            "xla_dump_hlo_as_text": True,
        }

        def make_options() -> Any:
            options = compiler.get_compile_options(
                num_replicas=1,
                num_partitions=len(ids),
                device_assignment=np.asarray(ids).reshape(1, len(ids)),
                env_options_overrides=overrides,
            )
            options.parameter_is_tupled_arguments = bool(job["tuple_args"])
            build = options.executable_build_options
            build.allow_spmd_sharding_propagation_to_parameters = [bool(x) for x in job["allow_prop_in"]]
            build.allow_spmd_sharding_propagation_to_output = [bool(x) for x in job["allow_prop_out"]]
            return options

        options = make_options()
        passed = sorted(job.get("xla_flags") or {})
        with mlir.make_ir_context():
            module = ir.Module.parse(job["stablehlo"])
            start = time.perf_counter()
            stop = threading.Event()
            if after_spmd is not None:
                threading.Thread(target=_watch_for_spmd_dump,
                                 args=(dump, start, ids, devices, after_spmd, stop, passed),
                                 name="hlo-analyzer-spmd-watch", daemon=True).start()
            device_list = xc.DeviceList(tuple(devices))
            try:
                while True:
                    try:
                        if job["platform"] == "cpu":
                            executable = client.compile_and_load(module, executable_devices=device_list,
                                                                 compile_options=options)
                        else:
                            executable = client.compile(module, executable_devices=device_list,
                                                        compile_options=options)
                        break
                    except Exception as e:
                        unknown = _unknown_flag(e, passed)
                        if unknown is None:
                            raise
                        if job["platform"] != "cpu":
                            raise LoweringError(f"the TPU compiler (libtpu) does not know the XLA flag --{unknown} "
                                                "(--xla-flags / xla-flags in [tool.hlo-analyzer]); check its name "
                                                "against this libtpu's flags") from None
                        # a flag of another backend (xla_tpu_*): not the CPU compiler's, kept as data only
                        passed.remove(unknown)
                        overrides.pop(unknown, None)
                        options = make_options()
            finally:
                stop.set()
            seconds = time.perf_counter() - start
        optimized = executable.hlo_modules()[0].to_string()
        spmd_files = sorted(p for p in Path(dump).iterdir() if _SPMD_DUMP.search(p.name) and p.suffix == ".txt")
        before = sorted(p for p in Path(dump).iterdir() if p.name.endswith(".before_optimizations.txt"))
        global_hlo = before[0].read_text() if before else ""
        if spmd_files:
            spmd = spmd_files[0].read_text()
        elif len(ids) == 1 and global_hlo:  # one device: XLA partitions nothing, the program is the module itself
            spmd = global_hlo
        else:
            dumped = sorted(p.name for p in Path(dump).iterdir() if p.suffix == ".txt")
            raise RuntimeError(f"XLA wrote no spmd-partitioning dump ({len(dumped)} text dumps, e.g. "
                               f"{', '.join(dumped[:3]) or 'none'})")
    try:
        stats = executable.get_compiled_memory_stats()
        memory = {key: int(getattr(stats, attr)) for key, attr in _MEMORY_FIELDS.items()}
    except Exception:  # some backends do not implement memory stats
        memory = None
    return {
        "xla_flags_passed": passed,
        "spmd_hlo": spmd,
        "optimized_hlo": optimized,
        "global_hlo": global_hlo,
        "memory": memory,
        "compile_seconds": seconds,
        "device_kind": str(getattr(devices[0], "device_kind", job["platform"])),
    }


def _unknown_flag(error: BaseException, flags: Sequence[str]) -> str | None:
    """The user's flag a compiler refused as unknown ("No such compile option: 'xla_...'"), else None."""
    from analyzer.compile.xlaflags import UNKNOWN_OPTION

    m = UNKNOWN_OPTION.search(str(error))
    return m.group(1) if m and m.group(1) in flags else None


def _check_platforms(jax: Any, platform: str) -> None:
    """Refuse, naming the setting, a `JAX_PLATFORMS` that leaves out the backend the target lowers for (jax itself
    stops on an assertion that names no platform)."""
    chosen = str(getattr(jax.config, "jax_platforms", None) or os.environ.get("JAX_PLATFORMS", "") or "")
    names = {p.strip().lower() for p in chosen.split(",") if p.strip()}
    if names and platform not in names and platform == "cpu":
        raise LoweringError(f"JAX_PLATFORMS={chosen!r} leaves out the cpu backend that the cpu target compiles on "
                            "(fake CPU devices); unset JAX_PLATFORMS or include cpu (e.g. JAX_PLATFORMS="
                            f"'{chosen},cpu'), or choose a tpu:<gen>:<shape> target")


def _child_env(n: int) -> dict[str, str]:
    """Environment for the child: n fake CPU devices, cpu platform only, analyzer importable."""
    env = dict(os.environ)
    flags = re.sub(_DEVICE_COUNT_FLAG + r"=\d+", "", env.get("XLA_FLAGS", "")).strip()
    env["XLA_FLAGS"] = f"{flags} {_DEVICE_COUNT_FLAG}={n}".strip()
    env["JAX_PLATFORMS"] = "cpu"
    package_root = str(Path(__file__).resolve().parents[2])  # the folder that holds `analyzer/`, not `analyzer/`
    # itself (which would let a module of ours shadow the standard library's of the same name in the child)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    return env


def _compile_in_child(job: Mapping[str, Any], n: int, timeout: float | None) -> dict[str, Any]:
    """Run `_compile_job` in `python -m analyzer.compile.lower` with n fake CPU devices."""
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "analyzer.compile.lower"],
            input=json.dumps(job),
            capture_output=True,
            text=True,
            env=_child_env(n),
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise LoweringError(f"compiling for {n} CPU devices took longer than {timeout:g} s; "
                            "pass a larger timeout= or a smaller program") from None
    try:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise LoweringError(f"the compile process for {n} CPU devices failed (exit {proc.returncode}):\n{tail}") \
            from None
    if "error" in result:
        raise LoweringError(f"XLA could not compile the program for {n} CPU devices: {result['error']}")
    return result


def _start_local_coordinator() -> None:
    """Let this process's CPU client hold more than 2,048 devices: gloo collectives and a jax.distributed
    coordinator of one process on localhost (nothing leaves the machine), set before any device exists."""
    import socket

    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    jax.distributed.initialize(f"localhost:{port}", num_processes=1, process_id=0)


def _worker_after_spmd(job: Mapping[str, Any]) -> int:
    """The child for more than `CPU_FULL_COMPILE_DEVICES` devices: print the result as soon as the after-SPMD
    module is written and end the process there (`os._exit`: neither the backend's passes, which grow with the
    device count, nor the client's teardown, about 40 s at 8,192 devices, are waited for). The parent owns the
    dump folder and removes it."""
    import threading

    lock = threading.Lock()

    def emit(result: Mapping[str, Any]) -> None:
        with lock:
            sys.stdout.write(json.dumps(result) + "\n")
            sys.stdout.flush()
            os._exit(0)

    try:
        if len(job["device_ids"]) > _CPU_DEVICES_PER_PROCESS:
            _start_local_coordinator()
        result = _compile_job(job, after_spmd=emit)
    except Exception as e:  # reported to the parent, which raises LoweringError
        result = {"error": f"{type(e).__name__}: {e}"}
    emit(result)
    return 0


def _worker_main() -> int:
    """Entry of `python -m analyzer.compile.lower`: a job as JSON on stdin, the result as one JSON line on stdout."""
    job = json.loads(sys.stdin.read())
    if job.get("stop_after_spmd"):
        return _worker_after_spmd(job)
    try:
        result = _compile_job(job)
    except Exception as e:  # reported to the parent, which raises LoweringError
        result = {"error": f"{type(e).__name__}: {e}"}
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


# --------------------------------------------------------------------------------------------------------------
# lower


def _first_line(error: BaseException) -> str:
    """`Type: message` of an exception; for a bare one (jax's internal asserts), where in user code it rose."""
    text = str(error).strip()
    if text:
        return f"{type(error).__name__}: {text}"
    frame = _user_frame(error)
    return f"{type(error).__name__} raised inside jax" + (f" while tracing {frame}" if frame else "")


def _user_frame(error: BaseException) -> str | None:
    """The innermost `file:line` of the traceback outside jax, jaxlib and this package."""
    import traceback

    skip = ("/jax/", "/jaxlib/", "/analyzer/lower.py", "/contextlib.py")
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not any(s in f.filename for s in skip)]
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else None


def _user_error(error: BaseException, what: str) -> AnalyzerError:
    """Translate an exception raised while tracing user code into the matching AnalyzerError.

    jax's own sharding checks (an axis used twice, an axis the mesh lacks, a spec longer than the rank, a
    dimension the sharding does not divide) become ShardingError; everything else LoweringError.
    """
    message = f"{what}: {_first_line(error)}"
    kind = type(error).__name__
    text = str(error)
    if kind in ("DuplicateSpecError", "IndivisibleError") or "not found in mesh" in text \
            or "is only valid for values of rank" in text:
        return ShardingError(message)
    return LoweringError(message)


def _trace_and_lower(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any], *, abstract: Any,
                     platform: str, in_shardings: Any, out_shardings: Any,
                     static_argnums: Sequence[int]) -> Any:
    """jax's Lowered for `fn` on the abstract mesh, for one platform."""
    import jax
    from jax._src import source_info_util

    # Keep this module's frames out of the HLO's stack-frame tables, as jax keeps out its own: the user's
    # call site stays the outermost frame.
    here = str(Path(__file__).resolve())
    if here not in source_info_util._exclude_paths:
        source_info_util.register_exclusion(here)

    jit_options: dict[str, Any] = {}
    if in_shardings is not None:
        jit_options["in_shardings"] = in_shardings
    if out_shardings is not None:
        jit_options["out_shardings"] = out_shardings
    if static_argnums:
        jit_options["static_argnums"] = tuple(static_argnums)
    is_jitted = hasattr(fn, "trace") and hasattr(fn, "lower")
    jitted = fn if (is_jitted and not jit_options) else jax.jit(fn, **jit_options)
    with jax.sharding.use_abstract_mesh(abstract):
        traced = jitted.trace(*args, **kwargs)
        return traced.lower(lowering_platforms=(platform,))


# The attribute `mark_flash_attention` sets on a function, read by `lower` into `Lowered.flash_attention`.
_FLASH_MARK = "_hlo_analyzer_flash_attention"


def mark_flash_attention(fn: Any) -> Any:
    """Mark `fn` (a function or a `jax.jit`-wrapped one) as one whose attention runs on the TPU as a flash kernel
    but is written (or traced here) as dot-product attention: `lower(fn, ...)` then sets `Lowered.flash_attention`,
    and the step model prices the S x S scores in VMEM (docs/step.md, "Flash attention"). Returns `fn`. The
    template's `TransformerConfig(flash_attention=True)` marks its step so.

    Example:
        >>> import jax
        >>> step = mark_flash_attention(jax.jit(lambda x: x))
        >>> getattr(step, _FLASH_MARK)
        True
    """
    setattr(fn, _FLASH_MARK, True)
    return fn


def lower(
    fn: Callable[..., Any],
    *args: Any,
    mesh: Any = None,
    in_shardings: Any = None,
    out_shardings: Any = None,
    target: str | Target = "cpu",
    static_argnums: int | Sequence[int] = (),
    isolate: bool | None = None,
    timeout: float | None = 900.0,
    xla_flags: Any = None,
    **kwargs: Any,
) -> Lowered:
    """Compile `fn(*args, **kwargs)` for a target and mesh and return its HLO.

    Args:
      fn: a plain function or a `jax.jit`-wrapped one. Closures and lambdas are fine.
      *args: arrays or `jax.ShapeDtypeStruct`s (pytrees of them), sharded with `NamedSharding`s on `mesh` (or on
        any mesh of the same axis names and sizes); leaves without a sharding are left to XLA.
      mesh: a `jax.sharding.Mesh`, an `AbstractMesh`, a dict `{"data": 4, "model": 2}` (values may be
        `(size, "explicit")`), or a string "data=4,model=2". When None, the mesh of the first NamedSharding
        among the arguments. On cpu, beyond `CPU_FULL_COMPILE_DEVICES` (1,024) devices the child process stops
        at the after-SPMD module (all the cpu target reads): `optimized_hlo` is then "" and `memory` None.
      in_shardings, out_shardings: as for `jax.jit`; `PartitionSpec`s are taken on `mesh`.
      target: "cpu" (fake CPU devices) or "tpu:<generation>:<shape>" (e.g. "tpu:v5e:2x4"; needs libtpu), with
        "*N" for N slices over DCN ("tpu:v5e:2x2*2").
      static_argnums: as for `jax.jit`.
      isolate: cpu target only: True compiles in a child process always, False never (raises if the live
        process has too few CPU devices), None (default) only when the live process has too few.
      timeout: seconds allowed for the child process.
      xla_flags: the user's XLA flags: "--xla_a=true --xla_b=3", a list of such tokens, or a dict
        (`analyzer.compile.xlaflags.parse_xla_flags`). Passed to the target's compiler as per-compile options
        (a TPU target: all of them, an unknown name is an error; cpu: those the CPU compiler knows) and kept in
        `Lowered.xla_flags` for the step model.
      **kwargs: keyword arguments of `fn`.

    Returns:
      A `Lowered`.

    Raises:
      MeshError: the mesh is malformed or does not fit the arguments or the TPU topology.
      ShardingError: a sharding names an axis the mesh lacks, uses an axis twice, or has too many entries.
      HardwareError: libtpu does not know the TPU topology.
      LoweringError: the function cannot be traced or compiled, or libtpu is missing for a tpu target.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jax.sharding import NamedSharding, PartitionSpec as P
        >>> mesh = make_mesh({"X": 8})
        >>> x = jax.ShapeDtypeStruct((64, 32), jnp.float32, sharding=NamedSharding(mesh, P("X")))
        >>> lowered = lower(lambda x: x.sum(0), x, mesh=mesh)
        >>> lowered.mesh
        MeshInfo(axis_names=('X',), axis_sizes=(8,), device_ids=(0, 1, 2, 3, 4, 5, 6, 7), axis_types=('auto',))
    """
    import jax

    from analyzer.compile.xlaflags import parse_xla_flags

    parsed = parse_target(target)
    flags = parse_xla_flags(xla_flags, where="xla_flags")
    _check_platforms(jax, parsed.platform)
    if mesh is None:
        mesh = _mesh_from_args(args)
    abstract = make_mesh(mesh)
    n = abstract.size
    after_spmd_only = parsed.platform == "cpu" and n > CPU_FULL_COMPILE_DEVICES
    if after_spmd_only and isolate is False:
        raise MeshError(f"mesh {_describe_mesh(abstract)} has {n} devices: the cpu target compiles more than "
                        f"{CPU_FULL_COMPILE_DEVICES} in a child process only; pass isolate=None or True")
    static = {static_argnums} if isinstance(static_argnums, int) else set(static_argnums)
    static = {i % len(args) if len(args) else i for i in static}

    # Devices: which physical device sits at each mesh position.
    tpu_devices: list[Any] | None = None
    coords: tuple[tuple[int, ...], ...] | None = None
    if parsed.platform == "tpu":
        assert parsed.topology is not None
        tpu_devices = _tpu_mesh_devices(mesh, abstract, _tpu_devices(parsed), parsed.topology)
        device_ids = [d.id for d in tpu_devices]
        rank = len(str(parsed.slice_topology).split(":")[1].split("x"))
        coords = tuple(_tpu_coords(d, rank, parsed.num_slices > 1) for d in tpu_devices)
    else:
        from jax.sharding import Mesh

        if isinstance(mesh, Mesh):
            device_ids = [int(d.id) for d in mesh.devices.flat]
            if sorted(device_ids) != list(range(n)):
                raise MeshError(f"mesh {_describe_mesh(abstract)}: the cpu target needs device ids 0..{n - 1}, "
                                f"got {device_ids}")
        else:
            device_ids = list(range(n))
    info = mesh_info(abstract, device_ids)

    # Trace and lower on the abstract mesh (no devices needed).
    abstract_args = _apply_in_shardings(_abstract_args(args, abstract, static),
                                        _abstract_shardings(in_shardings, abstract, "in_shardings"), static)
    out_sh = _abstract_shardings(out_shardings, abstract, "out_shardings")
    start = time.perf_counter()
    try:
        lowered = _trace_and_lower(fn, abstract_args, kwargs, abstract=abstract, platform=parsed.platform,
                                   in_shardings=None, out_shardings=out_sh, static_argnums=sorted(static))
    except Exception as e:  # the user's function failed to trace (shapes, shardings, axis names)
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))
        raise _user_error(e, f"jax could not lower {name} on mesh {_describe_mesh(abstract)} for target "
                             f"{parsed}") from None
    lower_seconds = time.perf_counter() - start
    job = {**_job(lowered, parsed.platform, device_ids), "xla_flags": flags}

    # Compile.
    in_child = False
    try:
        if parsed.platform == "tpu":
            with _quiet_stderr():
                result = _compile_job(job, devices=tpu_devices)
        else:
            live = None if (isolate or after_spmd_only) else _cpu_devices_in_process(n)
            if live is None and isolate is False:
                raise MeshError(f"mesh {_describe_mesh(abstract)} needs {n} CPU devices and this process has "
                                f"fewer; set XLA_FLAGS={_DEVICE_COUNT_FLAG}={n} before jax starts, or pass "
                                "isolate=None")
            if live is None and after_spmd_only:
                in_child = True
                with tempfile.TemporaryDirectory(prefix="hlo-analyzer-") as dump:
                    result = _compile_in_child({**job, "stop_after_spmd": True, "dump_dir": dump}, n, timeout)
            elif live is None:
                in_child = True
                result = _compile_in_child(job, n, timeout)
            else:
                by_id = {d.id: d for d in live}
                result = _compile_job(job, devices=[by_id[i] for i in device_ids])
    except (LoweringError, MeshError):
        raise
    except Exception as e:
        raise LoweringError(f"XLA could not compile {_module_name(job['stablehlo'])} for target {parsed}: "
                            f"{_first_line(e)}") from None

    return Lowered(
        spmd_hlo=result["spmd_hlo"],
        optimized_hlo=result["optimized_hlo"],
        target=str(parsed),
        mesh=info,
        device_coords=coords,
        memory=result["memory"],
        compile_seconds=float(result["compile_seconds"]),
        jax_version=jax.__version__,
        lower_seconds=lower_seconds,
        stablehlo=job["stablehlo"],
        name=_module_name(job["stablehlo"]),
        in_subprocess=in_child,
        device_kind=result["device_kind"],
        global_hlo=result.get("global_hlo", ""),
        xla_flags=flags,
        xla_flags_passed=tuple(result.get("xla_flags_passed", ())),
        flash_attention=getattr(fn, _FLASH_MARK, False) is True,
    )


def _module_name(stablehlo: str) -> str:
    m = re.search(r"^module @([\w.$-]+)", stablehlo, re.MULTILINE)
    return m.group(1) if m else ""


def _job(lowered: Any, platform: str, device_ids: Sequence[int]) -> dict[str, Any]:
    """The JSON-able compile job for a jax Lowered: module text and the options jit would set."""
    from jax._src.interpreters import pxla

    args = lowered._lowering.compile_args
    allow_in, allow_out = pxla.get_prop_to_input_output(
        args["in_shardings"], args["out_shardings"], len(args["ordered_effects"]))
    return {
        "stablehlo": lowered.as_text(debug_info=True),
        "platform": platform,
        "device_ids": [int(i) for i in device_ids],
        "tuple_args": bool(args["tuple_args"]),
        "allow_prop_in": [bool(x) for x in allow_in],
        "allow_prop_out": [bool(x) for x in allow_out],
    }


def _mesh_from_args(args: Sequence[Any]) -> Any:
    """The mesh of the first NamedSharding among the arguments' leaves."""
    import jax
    from jax.sharding import NamedSharding

    for leaf in jax.tree_util.tree_leaves(args):
        sharding = getattr(leaf, "sharding", None)
        if isinstance(sharding, NamedSharding):
            return sharding.mesh
    raise MeshError("no mesh given and no argument carries a NamedSharding; pass mesh=, e.g. "
                    "mesh={'data': 4, 'model': 2}")


# --------------------------------------------------------------------------------------------------------------
# Entry points


_FRAMEWORK = ("/jax/", "/jaxlib/", "/analyzer/", "/contextlib.py", "<frozen ", "/importlib/", "/runpy.py",
              "/threading.py", "/signal.py")


def _user_where(tb: Any) -> str | None:
    """`file:line` of the innermost frame of a traceback (or of a frame's stack) in the user's code."""
    import traceback

    frames = traceback.extract_tb(tb) if not inspect.isframe(tb) else traceback.extract_stack(tb)
    user = [f for f in frames if not any(s in f.filename.replace(os.sep, "/") for s in _FRAMEWORK)]
    return f"{user[-1].filename}:{user[-1].lineno}" if user else None


def _describe(error: BaseException) -> str:
    """One line for an exception from user code: `NameError: name 'x' is not defined`, `sys.exit(3)`."""
    if isinstance(error, SystemExit):
        return f"it called sys.exit({error.code!r})"
    if isinstance(error, SyntaxError):
        where = f" ({error.filename}:{error.lineno})" if error.filename and error.lineno else ""
        return f"SyntaxError: {error.msg}{where}"
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


@contextlib.contextmanager
def user_code(entry: str, doing: str) -> Iterator[None]:
    """The boundary around the user's code: whatever it raises (import errors, exceptions, `sys.exit`) leaves
    as an `EntryPointError` naming the entry point, the user's `file:line` and the exception. Our own
    `AnalyzerError`s and Ctrl-C pass through unchanged.
    """
    try:
        yield
    except (AnalyzerError, KeyboardInterrupt):
        raise
    except SyntaxError as e:  # the file itself: its own file:line is the place
        where = f"{e.filename}:{e.lineno}" if e.filename and e.lineno else _user_where(e.__traceback__)
        raise EntryPointError(doing, entry=entry, where=where, cause=f"SyntaxError: {e.msg}") from None
    except UnicodeDecodeError as e:
        raise EntryPointError(doing, entry=entry, where=_user_where(e.__traceback__),
                              cause=f"the source is not UTF-8 text ({e.reason} at byte {e.start}); save it as "
                                    "UTF-8 or declare its encoding (PEP 263)") from None
    except (Exception, SystemExit) as e:  # noqa: BLE001 - user code may raise anything
        raise EntryPointError(doing, entry=entry, where=_user_where(e.__traceback__), cause=_describe(e)) from None


class _Expired(BaseException):
    """Raised asynchronously into a thread other than the main one when its `time_limit` runs out; turned into
    `CompileTimeout` at the limit's boundary. A BaseException, so a user's `except Exception` does not catch it."""


@contextlib.contextmanager
def time_limit(seconds: float | None, entry: str, *, hard_exit: bool = False) -> Iterator[None]:
    """Bound the time of what runs inside: past `seconds`, raise `CompileTimeout` naming where it was.

    In the main thread of a POSIX process the limit is a SIGALRM timer: Python code (an entry point stuck in a
    loop, a sleep) is interrupted where it is, and the error names that `file:line`. In any other thread (the
    `@audit`ed function called from a worker thread, a sweep's compile thread) a timer thread raises the
    error into this thread (`PyThreadState_SetAsyncExc`, repeated every 0.2 s for 10 s in case code on the
    way swallowed it): it is delivered when the thread next runs Python bytecode, so a loop is stopped at
    once but a blocking call (a long `time.sleep`, a lock) only when it returns. Either way, code that never returns to Python (a compile stuck inside XLA) cannot be
    interrupted: with `hard_exit` (the command line), a watchdog then prints the error and ends the process
    with status 2 ten seconds after the limit. None or a limit <= 0: nothing is bounded.

    Example:
        >>> with time_limit(0.1, "model:step"):
        ...     time.sleep(5)
        Traceback (most recent call last):
        analyzer.errors.CompileTimeout: entry point 'model:step' (...): did not finish within 0.1 s ...
    """
    import signal
    import threading

    if not seconds or seconds <= 0:
        yield
        return
    # jax (and numpy under it) is imported before the limit is armed: an exception raised into the middle of their
    # first import leaves them half-initialised (numpy's C core then fails to import, or the process crashes),
    # where the limit is meant to stop the entry point and its compile with a clean CompileTimeout.
    import jax  # noqa: F401
    message = (f"did not finish within {seconds:g} s (--timeout, or `timeout` in the config): an entry point "
               "that never returns, or a compile too large for the limit")
    done = threading.Event()

    def watchdog() -> None:
        if not done.wait(seconds + 10.0):
            sys.stderr.write(f"hlo-analyzer: {CompileTimeout(message + ' (stuck inside native code)', entry=entry)}"
                             "\n")
            sys.stderr.flush()
            os._exit(2)

    if hard_exit:
        threading.Thread(target=watchdog, name="hlo-analyzer-timeout", daemon=True).start()
    try:
        with _quiet_swallowed_timeouts():
            if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
                with _alarm(seconds, entry, message):
                    yield
            else:
                with _async_alarm(seconds, entry, message):
                    yield
    finally:
        done.set()


@contextlib.contextmanager
def _quiet_swallowed_timeouts() -> Iterator[None]:
    """While a time limit runs: a limit that fires inside a callback Python calls itself (jax's gc callback) is
    printed as "Exception ignored in ..." with a traceback, and fires again 0.2 s later; keep those prints off
    stderr. The hook drops only this module's timeouts, passes everything else to the hook it replaced, and is
    put back as it was when the block ends (the caller's `sys.unraisablehook` is theirs)."""
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, (_Expired, CompileTimeout)):
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        if sys.unraisablehook is hook:  # (not if the block installed a hook of its own)
            sys.unraisablehook = previous


@contextlib.contextmanager
def _alarm(seconds: float, entry: str, message: str) -> Iterator[None]:
    """`time_limit` in the main thread: SIGALRM, again every 0.2 s until the block is left, since code that
    swallows exceptions (jax's gc callback, a bare `except:`) may have eaten the first."""
    import signal

    def on_alarm(signum: int, frame: Any) -> None:
        raise CompileTimeout(message, entry=entry, where=_user_where(frame))

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.2)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@contextlib.contextmanager
def _async_alarm(seconds: float, entry: str, message: str) -> Iterator[None]:
    """`time_limit` in any other thread: a timer thread raises `_Expired` into this thread, again every 0.2 s
    (for at most 10 s) until the block is left, since code that swallows exceptions (a library's gc callback,
    a bare `except:`) may have eaten the first."""
    import ctypes
    import threading

    set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
    target = ctypes.c_ulong(threading.get_ident())
    lock = threading.Lock()
    stop = threading.Event()
    state = {"done": False}

    def fire() -> None:
        if stop.wait(seconds):
            return
        for _ in range(50):
            with lock:
                if state["done"]:
                    return
                set_async_exc(target, ctypes.py_object(_Expired))
            if stop.wait(0.2):
                return

    def disarm() -> None:
        # Under the lock: no further exception is set, and one set but not yet delivered is withdrawn.
        with lock:
            state["done"] = True
            set_async_exc(target, None)
        stop.set()

    def disarmed() -> None:
        while True:
            try:
                disarm()
                return
            except _Expired:  # delivered while disarming: the block is over; ignore it
                continue

    firer = threading.Thread(target=fire, name="hlo-analyzer-time-limit", daemon=True)
    try:
        firer.start()
        try:
            yield
        finally:
            disarmed()
    except _Expired as e:
        disarmed()
        raise CompileTimeout(message, entry=entry, where=_user_where(e.__traceback__)) from None


def load_entry(entry: str, mesh: Any) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
    """Import an entry point and call it to get the function to analyse and its arguments.

    The convention: an entry point is a callable named `module:function` (`package.models:train_step`, or a
    file path `path/to/file.py:train_step`). It takes either no parameter or one, the mesh (an `AbstractMesh`
    built from `mesh`, or the given `jax.sharding.Mesh`), and returns `(fn, args)` or `(fn, args, kwargs)`:
    the (usually jitted) function and its abstract arguments, `jax.ShapeDtypeStruct`s with `NamedSharding`s
    on that mesh.

        def train_step(mesh):
            x = jax.ShapeDtypeStruct((B, D), jnp.bfloat16, sharding=NamedSharding(mesh, P("data")))
            ...
            return jax.jit(step), (params, x)

    This is the one boundary where the user's code runs (the `analyze`, `report`, `check` and `sweep`
    commands all come through it): an import that fails (a SyntaxError, a NameError at import, a source that
    is not UTF-8), an exception or `sys.exit` in the entry point, and a return value that does not follow the
    convention all raise `EntryPointError` with the entry point, the user's `file:line` and the exception.

    Args:
      entry: "module:function" or "file.py:function"; the function part may be dotted (`Class.method`).
      mesh: anything `make_mesh` accepts.

    Returns:
      `(fn, args, kwargs)`.

    Raises:
      EntryPointError: the entry point could not be found, imported or called, or returned something else.
    """
    from jax.sharding import Mesh

    if not isinstance(entry, str) or entry.count(":") != 1 or not all(entry.split(":")):
        raise EntryPointError("write it as 'module:function' or 'path/to/file.py:function'", entry=str(entry))
    module_name, qualname = entry.split(":")
    with user_code(entry, f"cannot import {module_name!r}"):
        if module_name.endswith(".py") or os.sep in module_name:
            path = Path(module_name)
            if not path.is_file():
                raise EntryPointError(f"no file {str(path)!r}", entry=entry)
            spec = importlib.util.spec_from_file_location(path.stem, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules.setdefault(path.stem, module)
            spec.loader.exec_module(module)
        else:
            # Like `python -m`, look in the current directory first, so that `examples.chapter:fsdp_step` works
            # from a checkout through the console command too.
            if os.getcwd() not in sys.path and "" not in sys.path:
                sys.path.insert(0, os.getcwd())
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as e:
                if e.name is not None and module_name.startswith(e.name):  # the module itself, not its imports
                    raise EntryPointError(f"cannot import {module_name!r}: no module named {e.name!r} (looked in "
                                          f"{os.getcwd()!r} and sys.path)", entry=entry) from None
                raise
    target: Any = module
    for part in qualname.split("."):
        if not hasattr(target, part):
            choices = [n for n in dir(target) if not n.startswith("_") and callable(getattr(target, n, None))]
            raise EntryPointError(f"{module_name} has no attribute {part!r}; "
                                  + valid_choices(part, choices, what="callables"), entry=entry)
        target = getattr(target, part)
    if not callable(target):
        raise EntryPointError(f"{qualname} is a {type(target).__name__}, not a function", entry=entry)
    mesh_arg = mesh if isinstance(mesh, Mesh) else make_mesh(mesh)
    try:
        n_params = len([p for p in inspect.signature(target).parameters.values()
                        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])
    except (TypeError, ValueError):
        n_params = 1
    try:
        with user_code(entry, "failed"):
            produced = target(mesh_arg) if n_params >= 1 else target()
    except EntryPointError as e:
        # jax's own sharding checks raised inside the entry point: still a sharding problem.
        if e.cause and any(k in e.cause for k in ("DuplicateSpecError", "IndivisibleError", "not found in mesh")):
            raise ShardingError(str(e)) from None
        raise
    return _check_produced(entry, produced)


def _check_produced(entry: str, produced: Any) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
    """The entry point's return value, checked against `(fn, args)` / `(fn, args, kwargs)`."""
    expected = "it must return (fn, args) or (fn, args, kwargs): the jitted function, a tuple of its abstract " \
               "arguments and optionally a dict of keyword arguments"
    if not isinstance(produced, tuple) or len(produced) not in (2, 3):
        shown = f"a tuple of {len(produced)}" if isinstance(produced, tuple) else type(produced).__name__
        raise EntryPointError(f"returned {shown}; {expected}", entry=entry)
    if not callable(produced[0]):
        raise EntryPointError(f"returned a {type(produced[0]).__name__} where the function goes; {expected}",
                              entry=entry)
    fn, args = produced[0], produced[1]
    if len(produced) == 3 and not isinstance(produced[2], Mapping):
        raise EntryPointError(f"returned {produced[2]!r} ({type(produced[2]).__name__}) as kwargs; {expected}",
                              entry=entry)
    kwargs = dict(produced[2]) if len(produced) == 3 else {}
    if not all(isinstance(k, str) for k in kwargs):
        raise EntryPointError(f"returned kwargs with non-string keys {list(kwargs)!r}; {expected}", entry=entry)
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    return fn, args, kwargs


def lower_entry(entry: str, *, mesh: Any, target: str | Target = "cpu", **options: Any) -> Lowered:
    """`lower` for an entry point named `module:function` (see `load_entry` for the convention).

    Args:
      entry: "module:function" or "path/to/file.py:function".
      mesh: anything `make_mesh` accepts; passed to the entry point as a jax mesh.
      target: as for `lower`.
      **options: further keyword options of `lower` (in_shardings, out_shardings, static_argnums, isolate,
        timeout, xla_flags).

    Example (from the repository root):
        >>> lowered = lower_entry("examples.chapter:matmul_case2", mesh={"X": 2, "Y": 4})
        >>> "all-gather(" in lowered.spmd_hlo     # AllGather_Y: A[I_X, J_Y] -> A[I_X, J]
        True
    """
    fn, args, kwargs = load_entry(entry, mesh)
    overlap = set(kwargs) & {"mesh", "in_shardings", "out_shardings", "target", "static_argnums", "isolate",
                             "timeout", "xla_flags"}
    if overlap:
        raise LoweringError(f"entry point {entry!r}: its kwargs {sorted(overlap)} clash with lower()'s options")
    return lower(fn, *args, mesh=mesh, target=target, **options, **kwargs)


if __name__ == "__main__":
    sys.exit(_worker_main())
