"""MaxText's own training step, built by MaxText's code and analysed like any entry point.

    from analyzer.integrations.maxtext import analyze_maxtext
    report = analyze_maxtext(["model_name=llama2-7b", "compile_topology=v5e-256", "compile_topology_num_slices=1",
                              "per_device_batch_size=2", "ici_fsdp_parallelism=-1"], target="tpu")

The arguments are train_compile's (`python3 -m maxtext.trainers.pre_train.train_compile [CONFIG.yml]
KEY=VALUE...`): an optional config file (default: MaxText's own `configs/base.yml`) and MaxText keys. The step
is built as train_compile builds it, through MaxText's code: `pyconfig.initialize` (its config parsing and
model presets), its mesh, `get_shaped_inputs` (model, optimizer, abstract state, batch and their shardings),
`maybe_update_params_sharding_with_opt`, `build_zero1_input_state_mesh_shardings`, `get_input_data_sharding`
and `get_functional_train_with_signature(train.train_step, ...)`, jitted with the same in/out shardings and
donation and traced under `jax.set_mesh(mesh)` and MaxText's logical axis rules. Then it is compiled and
analysed like any entry point (`analyzer.pipeline.analyze_lowered`), in MaxText's mesh axis names (`fsdp`,
`tensor`, `expert`, `stage`, ...).

Targets:
  - "cpu" (default): one fake CPU device per chip of `compile_topology` x `compile_topology_num_slices`, the
    config loaded with `hardware=cpu skip_jax_distributed_system=true` (MaxText then picks its portable
    kernels: dot-product attention instead of the Pallas splash kernel, which has no CPU lowering), the mesh
    made by MaxText's `create_device_mesh`; collectives are read right after SPMD partitioning and priced on
    the slice `compile_topology` names. The live process needs that many CPU devices
    (`--xla_force_host_platform_device_count`, which the `hlo-analyzer maxtext` command sets before jax starts).
  - "tpu": ahead of time with libtpu, exactly as train_compile compiles: `get_topology_mesh` over libtpu's
    devices for `compile_topology`, `jax_default_prng_impl=unsafe_rbg` and
    `--xla_tpu_spmd_rng_bit_generator_unsafe=true` added to the user's `LIBTPU_INIT_ARGS` (and MaxText's
    `compile_xla_flags`); libtpu reads that variable once per process, when it first loads.

MaxText changes process-wide jax settings (`jax_default_prng_impl`, `jax_remove_size_one_mesh_axis_from_type`)
and `LIBTPU_INIT_ARGS`; they are put back as they were when the analysis returns.

Needs Python 3.12+ and the `maxtext` extra (`MAXTEXT_EXTRA_HINT`); without them every entry point here stops before
any work with an `AnalyzerError` giving that command.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib.util
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analyzer.errors import AnalyzerError, ConfigError, HardwareError, LoweringError

if TYPE_CHECKING:
    from analyzer.analysis.report import Report
    from analyzer.compile.lower import Lowered

__all__ = ["MAXTEXT_EXTRA_HINT", "TARGETS", "MaxTextArgs", "MaxTextStep", "analyze_maxtext", "base_config",
           "check_available", "lower_maxtext", "maxtext_step", "parse_args", "plan", "request_cpu_devices"]

# The `maxtext` extra by what a registry serves (no registry serves hlo-analyzer itself: README, "Supported versions").
MAXTEXT_EXTRA_HINT = ("install the `maxtext` extra: pip install -e '.[maxtext]' in a checkout of hlo-analyzer, or "
                      "pip install 'maxtext>=0.2.5' with MaxText's load-time dependencies (pyproject.toml lists them)")
TARGETS = ("cpu", "tpu")

# train_compile's settings for its compile (maxtext/trainers/pre_train/train_compile.py, main()).
_PRNG_IMPL = "unsafe_rbg"
_LIBTPU_RNG_FLAG = "--xla_tpu_spmd_rng_bit_generator_unsafe=true"
# What the cpu target adds to the user's keys: MaxText on CPU devices, no multi-host start (which reads JOB_INDEX).
_CPU_KEYS = ("hardware=cpu", "skip_jax_distributed_system=true")
# MaxText's TPU-only kernels and what the cpu target runs in their place (the same model: same matmuls, same
# model FLOPs). attention=flash is the Pallas splash kernel (tokamax), which has no CPU lowering ("Not supported
# on cpu"): the cpu target computes attention with XLA ops instead, its S x S scores in HBM, which the kernel
# keeps on chip (so the step prices score traffic a TPU run does not pay; the report's note says so).
_CPU_SUBSTITUTES = {"attention": ("flash", "dot_product")}
# MaxText's generation prefixes (`compile_topology` names, maxtext/utils/accelerator_to_spec_map.py) -> the
# hardware spec that prices them.
_HARDWARE = {"v4": "tpu-v4p", "v5e": "tpu-v5e", "v5p": "tpu-v5p", "v6e": "tpu-v6e", "tpu7x": "tpu-7x"}
_KEY = re.compile(r"^[A-Za-z_][\w.]*$")


# --------------------------------------------------------------------------------------------------------------
# Availability and arguments


def check_available() -> None:
    """Raise `AnalyzerError` with the install command when MaxText cannot be used here (Python before 3.12, or
    the package `maxtext` missing); cheap: nothing is imported."""
    if sys.version_info < (3, 12):
        raise AnalyzerError(f"MaxText needs Python 3.12 or later and this is Python "
                            f"{sys.version_info[0]}.{sys.version_info[1]}; in a Python 3.12+ environment, "
                            f"{MAXTEXT_EXTRA_HINT}")
    if importlib.util.find_spec("maxtext") is None:
        raise AnalyzerError(f"MaxText is not installed in this environment ({sys.executable}): "
                            f"{MAXTEXT_EXTRA_HINT} (Python 3.12 or later)")


def _import_maxtext() -> None:
    """Import the MaxText modules train_compile uses; a missing dependency becomes the install command."""
    check_available()
    try:
        with _stdout_to_stderr():
            import maxtext.trainers.pre_train.train_compile  # noqa: F401
    except ModuleNotFoundError as e:
        raise AnalyzerError(f"MaxText cannot load: its dependency {e.name!r} is missing; {MAXTEXT_EXTRA_HINT}") \
            from None
    except ImportError as e:
        raise AnalyzerError(f"MaxText cannot load ({type(e).__name__}: {e}); {MAXTEXT_EXTRA_HINT}") from None


def base_config() -> str:
    """The path of MaxText's own `configs/base.yml` (the default config file, as for train_compile)."""
    check_available()
    spec = importlib.util.find_spec("maxtext")
    assert spec is not None and spec.submodule_search_locations
    path = Path(list(spec.submodule_search_locations)[0]) / "configs" / "base.yml"
    if not path.is_file():
        raise AnalyzerError(f"the installed MaxText has no {path}; reinstall it: {MAXTEXT_EXTRA_HINT}")
    return str(path)


@dataclass(frozen=True)
class MaxTextArgs:
    """train_compile's arguments: the config file and the KEY=VALUE overrides, in order."""

    config_file: str
    overrides: tuple[str, ...]

    def value(self, key: str) -> str | None:
        """The last value given for `key` on the command line (what MaxText takes), else None."""
        found = None
        for item in self.overrides:
            k, _, v = item.partition("=")
            if k == key:
                found = v
        return found

    def __str__(self) -> str:
        return " ".join(self.overrides)


def parse_args(argv: Sequence[str] | str) -> MaxTextArgs:
    """train_compile's arguments from a list (or one string split at whitespace): an optional leading config
    file (`.yml`/`.yaml`; default MaxText's base.yml), then `KEY=VALUE` items.

    Raises:
      AnalyzerError: an item that is not KEY=VALUE (naming it and its position), a config file that does not
        exist, MaxText not installed.
    """
    items = argv.split() if isinstance(argv, str) else [str(a) for a in argv]
    config_file = None
    if items and "=" not in items[0] and items[0].endswith((".yml", ".yaml")):
        config_file = items.pop(0)
        if not Path(config_file).is_file():
            raise ConfigError(f"MaxText config file {config_file!r} does not exist; give a MaxText .yml file "
                              "(default: MaxText's configs/base.yml)")
    for i, item in enumerate(items, start=1 if config_file is None else 2):
        key, eq, _ = item.partition("=")
        if not eq or not _KEY.match(key):
            where = "a config file must come first" if item.endswith((".yml", ".yaml")) else \
                "MaxText takes KEY=VALUE, e.g. model_name=llama2-7b or ici_fsdp_parallelism=-1"
            raise ConfigError(f"MaxText argument {i} {item!r} is not KEY=VALUE ({where})")
    return MaxTextArgs(config_file or base_config(), tuple(items))


@dataclass(frozen=True)
class Plan:
    """What a MaxText command line compiles for: the chips of `compile_topology` and the hardware that prices
    them, read from the config and overrides without starting jax."""

    compile_topology: str
    slices: int
    chips: int
    tpu_target: str  # analyzer target, e.g. "tpu:v5e:16x16", "tpu:v5e:16x16*2"
    hardware: str  # hardware spec name, e.g. "tpu-v5e"
    topology: str  # pricing slice, e.g. "v5e:16x16", "v5e:16x16*2"


def plan(args: MaxTextArgs) -> Plan:
    """The target chips of a MaxText command line (`compile_topology` x `compile_topology_num_slices`, from
    the overrides or the config file, as MaxText merges them), without starting jax.

    Raises:
      ConfigError: no `compile_topology` (train_compile refuses it too), one MaxText does not know, a slice
        count that is not a positive integer.
    """
    _import_maxtext()
    import omegaconf
    from maxtext.configs import pyconfig
    from maxtext.utils import accelerator_to_spec_map

    try:
        with _stdout_to_stderr():
            merged = omegaconf.OmegaConf.merge(pyconfig._load_config(args.config_file),  # noqa: SLF001
                                               omegaconf.OmegaConf.from_cli(list(args.overrides)))
        topology = str(merged.get("compile_topology", "") or "")
        slices_text = str(merged.get("compile_topology_num_slices", 1))
    except Exception as e:  # noqa: BLE001 - a YAML error in the user's file
        raise ConfigError(f"MaxText config {args.config_file!r}: {_one_line(e)}") from None
    if not topology:
        raise ConfigError("MaxText argument compile_topology is missing: name the target chips as train_compile "
                          "does, e.g. compile_topology=v5e-256 compile_topology_num_slices=1")
    try:
        slices = int(slices_text)
    except ValueError:
        slices = 0
    if slices == -1:
        slices = 1  # base.yml's default; train_compile asks for a positive count, MaxText's own mesh uses 1
    if slices < 1:
        raise ConfigError(f"MaxText argument compile_topology_num_slices={slices_text} must be a positive integer")
    known = accelerator_to_spec_map.UserFacingNameToSystemCharacteristics
    spec = known.get(topology)
    if spec is None:
        close = difflib.get_close_matches(topology, list(known), n=3)
        raise ConfigError(f"MaxText does not know compile_topology={topology}"
                          + (f"; did you mean {', '.join(close)}?" if close else "")
                          + " (names such as v5e-256, v5p-128, v6e-64, v4-8)")
    if spec.platform != "tpu":
        raise HardwareError(f"compile_topology={topology} is a {spec.platform} system; hlo-analyzer maxtext "
                            "compiles for TPU topologies (v4, v5e, v5p, v6e, tpu7x)")
    generation, _, dims = str(spec.topology_name).partition(":")
    prefix = topology.split("-", 1)[0]
    hardware = _HARDWARE.get(prefix)
    if hardware is None:
        raise HardwareError(f"compile_topology={topology}: no hardware spec prices {prefix!r} chips; known: "
                            + ", ".join(sorted(_HARDWARE)))
    from analyzer.theory.hardware import load_hardware

    suffix = f"*{slices}" if slices > 1 else ""
    chips = int(spec.devices_per_slice) * slices
    return Plan(topology, slices, chips, f"tpu:{generation}:{dims}{suffix}", hardware,
                f"{load_hardware(hardware).topology_prefix}:{dims}{suffix}")


# --------------------------------------------------------------------------------------------------------------
# Building the step


@dataclass(frozen=True)
class MaxTextStep:
    """MaxText's train step as train_compile hands it to `jax.jit`, and what it was built from.

    Attributes:
      fn: `jax.jit(train_step, in_shardings, out_shardings, donate_argnums=0)`, train_compile's jit.
      args: the abstract state and batch (`jax.ShapeDtypeStruct`s with their shardings).
      kwargs: keyword arguments of the step (none for MaxText's NNX step).
      mesh: MaxText's mesh (`config.mesh_axes`), of CPU devices or libtpu's devices.
      config: MaxText's `HyperParameters`.
      plan: the target chips and the hardware that prices them.
      target: "cpu" or "tpu".
      substituted: the user's settings the cpu target replaced by portable ones (`"attention=flash ->
        attention=dot_product"`: MaxText's Pallas kernels have no CPU lowering); empty on the tpu target.
      flash_attention: the run's attention is MaxText's flash (splash) kernel and the cpu target analysed it as
        dot_product: `Lowered.flash_attention`, so the step prices attention as the kernel.
    """

    fn: Any
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    mesh: Any
    config: Any
    plan: Plan
    target: str
    substituted: tuple[str, ...] = ()
    flash_attention: bool = False


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """MaxText prints progress on stdout; keep it off stdout, which carries the report (`--json`)."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


@contextlib.contextmanager
def _train_compile_settings(target: str) -> Iterator[None]:
    """train_compile's process-wide settings for the duration of the build and compile, then put back: the
    PRNG implementation, jax's size-one mesh axis typing (which MaxText's mesh sets) and, on TPU, the
    flags added to LIBTPU_INIT_ARGS."""
    import jax

    saved = {name: getattr(jax.config, name) for name in
             ("jax_default_prng_impl", "jax_remove_size_one_mesh_axis_from_type")}
    saved_env = os.environ.get("LIBTPU_INIT_ARGS")
    try:
        jax.config.update("jax_default_prng_impl", _PRNG_IMPL)
        if target == "tpu":
            flags = " ".join(f for f in (saved_env or "", _LIBTPU_RNG_FLAG) if f.strip())
            os.environ["LIBTPU_INIT_ARGS"] = flags
        yield
    finally:
        for name, value in saved.items():
            jax.config.update(name, value)
        if saved_env is None:
            os.environ.pop("LIBTPU_INIT_ARGS", None)
        else:
            os.environ["LIBTPU_INIT_ARGS"] = saved_env


def _initialize(argv: list[str]) -> Any:
    """MaxText's `pyconfig.initialize`, its refusals as `ConfigError`s (it would otherwise sys.exit(2))."""
    from maxtext.configs import pyconfig

    try:
        with _stdout_to_stderr():
            pydantic_config = pyconfig._initialize_pydantic(argv)  # noqa: SLF001 - initialize() exits on errors
            return pyconfig.HyperParameters(pydantic_config)
    except (KeyboardInterrupt, AnalyzerError):
        raise
    except (Exception, SystemExit) as e:  # noqa: BLE001 - MaxText's validation raises several kinds
        raise ConfigError(f"MaxText rejected the configuration: {_config_message(e)}") from None


def _config_message(error: BaseException) -> str:
    """MaxText's message, shortened: an unknown key lists all ~900 valid ones; name the nearest instead."""
    text = str(error).strip()
    m = re.match(r"^'([^']+)' not in (.*)\.$", text, re.DOTALL)
    if m:
        valid = re.findall(r"'([^']+)'", m.group(2))
        close = difflib.get_close_matches(m.group(1), valid, n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        return f"unknown key {m.group(1)!r}; {hint}the keys are those of MaxText's configs/base.yml"
    lines = [line for line in text.splitlines() if line.strip()]
    return " ".join(lines[:6]) if lines else type(error).__name__


def _cpu_mesh(config: Any, n: int) -> Any:
    """MaxText's mesh (`create_device_mesh` over the first n CPU devices, axis types as MaxText sets them)."""
    import jax
    from jax.sharding import AxisType, Mesh
    from maxtext.common.common_types import ShardMode
    from maxtext.utils import maxtext_utils

    from analyzer.compile.lower import _DEVICE_COUNT_FLAG, _cpu_devices_in_process

    devices = _cpu_devices_in_process(n)
    if devices is None:
        have = len(jax.devices("cpu")) if _backends_started() else 0
        raise AnalyzerError(
            f"the cpu target needs one CPU device per chip of the MaxText target ({n}), and this process "
            + (f"started jax with {have}" if have else "has not started jax with that many")
            + f": set XLA_FLAGS={_DEVICE_COUNT_FLAG}={n} (and JAX_PLATFORMS=cpu) before jax starts "
            "(`hlo-analyzer maxtext` does), or use target='tpu'")
    jax.config.update("jax_remove_size_one_mesh_axis_from_type", config.remove_size_one_mesh_axis_from_type)
    axis_type = AxisType.Explicit if config.shard_mode == ShardMode.EXPLICIT else AxisType.Auto
    devices = sorted(devices, key=lambda d: d.id)[:n]
    slices = int(config.num_slices)
    if slices > 1:
        # MaxText's multi-slice mesh (jax's create_hybrid_device_mesh) groups devices by their `slice_index`, which
        # CPU devices lack: the fake devices of slice s are ids s*n/slices .. (s+1)*n/slices - 1, as the slices'
        # chips are numbered on the TPU target; the mesh is made over stand-ins that carry it, then mapped back.
        import numpy as np

        per_slice = n // slices
        stand_ins = [_SliceDevice(d, d.id // per_slice) for d in devices]
        grid = maxtext_utils.create_device_mesh(config, stand_ins)
        grid = np.vectorize(lambda d: d.device, otypes=[object])(grid)
    else:
        grid = maxtext_utils.create_device_mesh(config, devices)
    return Mesh(grid, config.mesh_axes, axis_types=(axis_type,) * len(config.mesh_axes))


class _SliceDevice:
    """A CPU device as one chip of a multi-slice target: the device, and the `slice_index` jax's hybrid mesh reads
    (every other attribute is the device's)."""

    def __init__(self, device: Any, slice_index: int) -> None:
        self.device = device
        self.slice_index = slice_index

    def __getattr__(self, name: str) -> Any:
        return getattr(self.device, name)

    def __repr__(self) -> str:
        return f"{self.device!r} (slice {self.slice_index})"


@contextlib.contextmanager
def _host_placements_kept() -> Iterator[bool]:
    """On the cpu target, lower `device_put` to a memory kind as jax lowers it for TPU: the remat policy's host
    offload (MaxText's `remat_policy=custom` with `NAME=offload`, `qkv_proj_offloaded`, `minimal_offloaded`:
    `save_and_offload_only_these_names(..., offload_dst="pinned_host")`) then stays in the program jax hands
    XLA as the TPU's program has it, `annotate_device_placement` custom calls with `_xla_buffer_placement=
    "pinned_host"` (to host) and `"device"` (back), which `analyzer.analysis.offload` reads and prices.

    jax lowers `device_put` on CPU to nothing (jax/_src/dispatch.py: `_common_device_put_lowering` returns its
    operands; the annotating rule `_tpu_gpu_device_put_lowering` is registered for "tpu" and "gpu" only), so
    without this the cpu program has no trace of the offload. XLA:CPU drops the annotations before SPMD
    partitioning: the partitioned program, its collectives and its compute are the same either way. Yields
    whether the rule was installed (False on a jax without these internals); the previous rule is put back."""
    try:
        from jax._src import dispatch
        from jax._src.interpreters import mlir

        table = mlir._platform_specific_lowerings  # noqa: SLF001 - jax's per-platform lowering rules
        tpu_rule = table["tpu"][dispatch.device_put_p]
    except (ImportError, AttributeError, KeyError):
        yield False
        return
    cpu = table["cpu"]
    had = dispatch.device_put_p in cpu
    saved = cpu.get(dispatch.device_put_p)
    cpu[dispatch.device_put_p] = tpu_rule
    try:
        yield True
    finally:
        if had:
            cpu[dispatch.device_put_p] = saved
        else:
            cpu.pop(dispatch.device_put_p, None)


def request_cpu_devices(argv: Sequence[str] | str | int) -> None:
    """For a command's own process (`hlo-analyzer maxtext`, `report`/`sweep` of a `maxtext:` config): ask for one
    fake CPU device per chip of the command line's `compile_topology` (or for `argv` devices, a count) before jax
    starts its backends (by `XLA_FLAGS`); nothing when they have started (then `analyze_maxtext` says what to
    set if there are too few)."""
    from analyzer.compile.lower import _DEVICE_COUNT_FLAG

    n = argv if isinstance(argv, int) else plan(parse_args(argv)).chips
    if _backends_started():
        return
    flags = re.sub(_DEVICE_COUNT_FLAG + r"=\d+", "", os.environ.get("XLA_FLAGS", "")).strip()
    os.environ["XLA_FLAGS"] = f"{flags} {_DEVICE_COUNT_FLAG}={n}".strip()


def _backends_started() -> bool:
    from jax._src import xla_bridge

    return bool(xla_bridge.backends_are_initialized())


def _build(args: MaxTextArgs, target: str, the_plan: Plan) -> MaxTextStep:
    """The step, as train_compile builds it (its `main`, without the diloco wrapper)."""
    import jax
    from maxtext.trainers.pre_train import train, train_compile
    from maxtext.utils import maxtext_utils, sharding

    argv = ["hlo-analyzer maxtext", args.config_file, *args.overrides]
    if target == "cpu":
        argv += list(_CPU_KEYS)
    config = _initialize(argv)
    substituted = []
    flash = False
    if target == "cpu":
        flash = str(getattr(config, "attention", "")) == "flash"
        for key, (tpu_only, portable) in _CPU_SUBSTITUTES.items():
            if str(getattr(config, key, "")) == tpu_only:
                substituted.append(f"{key}={tpu_only} -> {key}={portable}")
                argv.append(f"{key}={portable}")
        if substituted:
            config = _initialize(argv)
    if config.enable_diloco:
        raise ConfigError("MaxText's enable_diloco=true is not supported by hlo-analyzer maxtext yet (its step is "
                          "wrapped by diloco.build_diloco_train_step); analyse it with enable_diloco=false")
    entry = f"maxtext:{args}"
    from analyzer.compile.lower import libtpu_beside_others, user_code

    with user_code(entry, "building MaxText's train step"), _stdout_to_stderr():
        if target == "tpu":
            train_compile.validate_config(config)
            with libtpu_beside_others():  # (libtpu loads here, as in analyzer.compile.lower for AOT)
                mesh = train_compile.get_topology_mesh(config)
        else:
            mesh = _cpu_mesh(config, the_plan.chips)
        shaped_args, shaped_kwargs, state_shardings, _, model = train_compile.get_shaped_inputs(mesh, config)
        params_shardings, state_shardings = sharding.maybe_update_params_sharding_with_opt(config, state_shardings)
        input_state_shardings = sharding.build_zero1_input_state_mesh_shardings(config, state_shardings,
                                                                                params_shardings)
        data_sharding = sharding.get_input_data_sharding(config, mesh)
        fn, in_shard, out_shard, static_argnums, donate_argnums = \
            maxtext_utils.get_functional_train_with_signature(train.train_step, data_sharding,
                                                              input_state_shardings, model, config,
                                                              params_shardings)
        jitted = jax.jit(fn, in_shardings=in_shard, out_shardings=out_shard, static_argnums=static_argnums,
                         donate_argnums=donate_argnums)
    return MaxTextStep(jitted, tuple(shaped_args), dict(shaped_kwargs), mesh, config, the_plan, target,
                       tuple(substituted), flash)


def _check_target(target: str) -> str:
    name = str(target).strip().lower()
    if name not in TARGETS:
        from analyzer.errors import valid_choices

        raise AnalyzerError(f"MaxText target {target!r} is unknown; {valid_choices(name, TARGETS, what='targets')} "
                            "(the chips come from compile_topology)")
    return name


@contextlib.contextmanager
def maxtext_step(argv: Sequence[str] | str, target: str = "cpu") -> Iterator[MaxTextStep]:
    """MaxText's train step for train_compile's arguments, inside train_compile's settings: use (trace, lower)
    the step inside the `with`; the settings are put back when it ends.

    Raises:
      AnalyzerError: MaxText missing (with the install command), bad arguments, a configuration MaxText
        refuses (`ConfigError`), MaxText failing while building the step (`EntryPointError`).
    """
    target = _check_target(target)
    check_available()
    args = parse_args(argv)
    the_plan = plan(args)
    with _train_compile_settings(target), \
            (_host_placements_kept() if target == "cpu" else contextlib.nullcontext(False)):
        step = _build(args, target, the_plan)
        if target == "tpu" and step.config.compile_xla_flags:
            # MaxText passes compile_xla_flags as compiler options; libtpu reads the same flags from
            # LIBTPU_INIT_ARGS when it loads, which is first in get_topology_mesh above: too late here.
            raise ConfigError("MaxText's compile_xla_flags is not supported by hlo-analyzer maxtext; put the flags "
                              "in LIBTPU_INIT_ARGS instead (libtpu reads them when it loads)")
        yield step


def lower_maxtext(argv: Sequence[str] | str, target: str = "cpu") -> tuple[Lowered, MaxTextStep]:
    """Build MaxText's train step (`maxtext_step`) and compile it for the target (`analyzer.compile.lower`):
    the HLO after SPMD partitioning, libtpu's final HLO and memory figures on the TPU target."""
    from flax.core.spmd import logical_axis_rules

    import jax

    from analyzer.compile.lower import lower

    with maxtext_step(argv, target) as step:
        where = step.plan.tpu_target if step.target == "tpu" else "cpu"
        try:
            with jax.set_mesh(step.mesh), logical_axis_rules(step.config.logical_axis_rules), _stdout_to_stderr():
                lowered = lower(step.fn, *step.args, mesh=step.mesh, target=where, **step.kwargs)
        except LoweringError as e:
            if step.target == "cpu" and "ragged-all-to-all" in str(e):
                # MaxText's sparse_matmul MoE with expert parallelism exchanges tokens with a ragged all-to-all,
                # which XLA's CPU backend cannot compile (its after-SPMD module has it; the backend stops).
                raise LoweringError(f"{e}; MaxText's sparse_matmul=true MoE uses a ragged all-to-all, "
                                    "which the cpu target cannot compile: analyse it with --target tpu (libtpu), "
                                    "or set sparse_matmul=false (dispatch/combine by einsum)") from None
            raise
    if step.flash_attention:  # (the TPU runs the splash kernel the cpu target replaced: the step prices it)
        from dataclasses import replace

        lowered = replace(lowered, flash_attention=True)
    return lowered, step


def analyze_maxtext(
    argv: Sequence[str] | str,
    *,
    target: str = "cpu",
    hardware: str | None = None,
    topology: str | None = None,
    config: Any = None,
    model: str = "topology",
) -> Report:
    """Analyse MaxText's train step for train_compile's arguments.

    Args:
      argv: `[CONFIG.yml] KEY=VALUE...` as a list or one string; `compile_topology` (and
        `compile_topology_num_slices`) name the chips, as for train_compile.
      target: "cpu" (fake CPU devices, read after SPMD partitioning) or "tpu" (libtpu ahead of time).
      hardware: hardware spec to price on; default the one of `compile_topology` (v5e -> tpu-v5e, ...).
      topology: the slice to price on; default `compile_topology`'s (e.g. v5e:16x16) on the cpu target, the TPU
        devices' own coordinates on the tpu target.
      config, model: as for `analyzer.analyze`.
    Returns:
      `Report`, its collectives in MaxText's mesh axis names.
    """
    from analyzer.pipeline import analyze_lowered
    from analyzer.rules.config import as_config, check_plan_keys

    target = _check_target(target)
    check_available()
    config = as_config(config)
    check_plan_keys(hardware, topology, None)
    lowered, step = lower_maxtext(argv, target)
    if topology is None and lowered.platform != "tpu" and hardware is None:
        topology = step.plan.topology
    from analyzer.analysis.mapping import user_packages

    with user_packages("maxtext"):  # MaxText's model is the program: its lines are the sources
        report = analyze_lowered(lowered, hardware=hardware or step.plan.hardware, topology=topology,
                                 config=config, model=model, args=step.args)
    note = (f"MaxText's train step built by MaxText {_version()} for compile_topology={step.plan.compile_topology}"
            f" x {step.plan.slices} slice(s) ({step.plan.chips} chips), as train_compile builds it"
            + (" (cpu target: hardware=cpu, so MaxText's portable kernels, e.g. dot-product attention instead of "
               "the Pallas splash kernel)." if target == "cpu" else ".")
            + (f" Replaced for the cpu target, which cannot lower MaxText's Pallas kernels: "
               f"{', '.join(step.substituted)} (the same matmuls; its S x S scores go through HBM, where the "
               f"kernel keeps them on chip"
               + ("; the step prices the attention as the kernel" if step.flash_attention else "")
               + ")." if step.substituted else ""))
    from dataclasses import replace

    return replace(report, notes=(note, *report.notes))


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("maxtext")
    except Exception:  # noqa: BLE001 - an uninstalled source tree
        return "(version unknown)"
