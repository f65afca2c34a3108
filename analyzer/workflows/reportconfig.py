"""Training-config files for `hlo-analyzer report` and `hlo-analyzer sweep`.

A report config is a TOML file that says what to compile, on which mesh, for which hardware, and which
rules to apply. The program is either the user's own entry point or the built-in transformer template
(`analyzer.compile.models`) with a sharding strategy:

    name = "8B-class model, FSDP+TP on a v5e-8"
    strategy = "fsdp+tp"                 # dp | fsdp | tp | fsdp+tp | ep  (with [model])
    # entry = "mypkg.train:step"         # or: module:function (or path/to/file.py:function) returning
    #                                    #     (jitted fn, abstract args); then no [model] and no strategy
    target = "cpu"                       # "cpu" (fake devices) or "tpu:v5e:2x4" (libtpu AOT)
    hardware = "tpu-v5e"                 # `hlo-analyzer hardware list`, or a spec file path
    topology = "v5e:2x4"                 # optional: the slice the mesh is laid on
    # xla-flags = "--xla_tpu_enable_async_collective_fusion_multiple_steps=true"  # the run's XLA flags (or a list)

    [mesh]                               # axis name = size, major to minor
    data = 4
    model = 2

    [model]                              # the built-in template's sizes
    d_model = 4096
    d_ff = 14336
    heads = 32
    kv_heads = 8
    layers = 32
    seq = 4096
    batch = 32
    dtype = "bf16"                       # bf16 | f32 | f16 (or bfloat16, float32, float16)
    optimizer = "adam"                   # sgd | adam
    # experts = 8                        # ep only; also capacity_factor
    # attention = true
    # remat = "full"                     # none | full | dots | minimal: what backward keeps of each block
    # microbatches = 4                   # gradient accumulation; divides batch

    [rules]                              # as [tool.hlo-analyzer] in pyproject.toml
    select = ["HA"]
    ignore = ["HA105"]
    # [rules.HA301] min-count = 8        # per-rule options, by code

    [budgets]
    comm-compute-ratio = 0.5

    [sweep]                              # defaults for `hlo-analyzer sweep`
    mesh-shapes = ["8x1", "4x2", "2x4"]
    strategies = ["fsdp", "tp", "fsdp+tp"]
    # batch-sizes = [16, 32]             # template dimensions, crossed with the above
    # remat = ["none", "full"]           # none | full | dots | minimal
    # microbatches = [1, 4]
    # executor = "ray"                   # local (default) | ray; ray-address = "ray://head:10001"
    # ray-cpus = 1                       # per compile (Ray task); ray-memory = "2GiB"

MaxText's own train step (`hlo-analyzer maxtext`'s arguments after `maxtext:`; no [mesh], no `topology`: the
chips and mesh come from `compile_topology` and MaxText's `ici_*`/`dcn_*` keys; `target` is cpu or tpu;
`hardware` defaults to the one of `compile_topology`), its keys swept under [sweep.maxtext]:

    entry = "maxtext:model_name=llama2-7b compile_topology=v5e-256 per_device_batch_size=2"
    [sweep.maxtext]
    remat_policy = ["full", "minimal"]
    ici_fsdp_parallelism = [-1, 64]

Every key is checked: an unknown key or a bad value is an `analyzer.errors.ConfigError` that names the key,
the file and its line, and lists the valid keys. Keys may be written kebab-case or snake_case.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from analyzer.errors import (AnalyzerError, ConfigError, find_key_line, find_table_line, find_value_line, load_toml,
                             toml_line, valid_choices)
from analyzer.theory.dtypes import numpy_name, spellings

if TYPE_CHECKING:
    from analyzer.rules.config import Config

__all__ = [
    "ReportConfig",
    "load_report_config",
    "parse_report_config",
    "parse_mesh_shape",
    "STRATEGIES",
    "TOP_KEYS",
    "MODEL_KEYS",
    "DTYPE_ALIASES",
]

STRATEGIES: tuple[str, ...] = ("dp", "fsdp", "tp", "fsdp+tp", "ep")

# dtype spellings users write -> the template's (numpy) names, for the dtypes the template builds in.
DTYPE_ALIASES: Mapping[str, str] = MappingProxyType({
    name: numpy_name(xla) for xla in ("bf16", "f32", "f16") for name in spellings(xla)})

# Top-level keys (snake_case) -> a sentence of what they hold, for error messages and docs.
TOP_KEYS: Mapping[str, str] = MappingProxyType({
    "name": "a title for the report",
    "entry": "module:function returning (fn, args), or maxtext:KEY=VALUE ...",
    "strategy": "dp, fsdp, tp, fsdp+tp or ep (with [model])",
    "target": "cpu or tpu:<generation>:<shape>",
    "hardware": "hardware spec name or path",
    "topology": "physical slice, e.g. v5e:2x4",
    "xla_flags": "the run's XLA flags: a string or list of --xla_<name>=<value>",
    "data_axes": "mesh axes that shard the batch (default: all but the last)",
    "model_axis": "mesh axis for tensor/expert parallelism (default: the last)",
    "verify_fixes": "true: apply each finding's proposed change, recompile, and report the step after it",
    "mesh": "table of axis name = size",
    "model": "table of the built-in transformer's sizes",
    "rules": "table: select, ignore, per-rule options",
    "budgets": "table: comm-seconds-per-step, comm-compute-ratio",
    "sweep": "table: mesh-shapes, strategies, batch-sizes, remat, microbatches, executor, ray-address, ray-cpus, "
             "ray-memory",
})

# [model] keys -> expected Python type(s).
MODEL_KEYS: Mapping[str, tuple[type, ...]] = MappingProxyType({
    "d_model": (int,), "d_ff": (int,), "heads": (int,), "kv_heads": (int,), "layers": (int,), "seq": (int,),
    "batch": (int,), "dtype": (str,), "optimizer": (str,), "experts": (int,), "capacity_factor": (int, float),
    "attention": (bool,), "learning_rate": (int, float), "remat": (str,), "microbatches": (int,),
    "head_dim": (int,), "mlp": (str,), "vocab": (int,), "norm": (bool,), "block": (str,), "weight_dtype": (str,),
    "embedding": (str,), "tied_embedding": (bool,), "embedding_sharding": (str,), "flash_attention": (bool,),
})
_RULES_KEYS = ("select", "ignore")
_SWEEP_KEYS = ("mesh_shapes", "strategies", "batch_sizes", "remat", "microbatches", "maxtext", "executor",
               "ray_address", "ray_cpus", "ray_memory")


@dataclass(frozen=True)
class ReportConfig:
    """A checked training config.

    Attributes:
      path: the file it was read from (None for text).
      name: report title.
      entry: `module:function` of the user's program, or None for the built-in template.
      model: the template's sizes as `TransformerConfig` keyword arguments (empty with `entry`).
      strategy: the template's strategy (None with `entry`).
      mesh: axis name -> size, major to minor.
      target, hardware, topology: where to compile and how to price.
      xla_flags: the run's XLA flags as (name, value) pairs (`xla-flags`): passed to the compiler and read by the
        step model (analyzer.compile.xlaflags).
      data_axes, model_axis: the template's axis roles (None: its defaults).
      rules_table: the `[rules]` and `[budgets]` tables in `[tool.hlo-analyzer]` form, for `rules_config`.
      sweep_mesh_shapes, sweep_strategies: defaults for `hlo-analyzer sweep`.
      sweep_batch_sizes, sweep_remat, sweep_microbatches: template dimensions for `hlo-analyzer sweep`.
      sweep_executor: `local`, `ray` or `ray:ADDRESS` (None: local).
      sweep_ray_cpus, sweep_ray_memory: CPUs and bytes of memory one compile asks Ray for (None: defaults).
      verify_fixes: `hlo-analyzer report` applies each finding's proposed change and recompiles
        (`analyzer.workflows.verify`); `--verify-fixes` sets it from the command line.
    """

    mesh: Mapping[str, int]
    path: str | None = None
    name: str = ""
    entry: str | None = None
    model: Mapping[str, Any] = field(default_factory=dict)
    strategy: str | None = None
    target: str = "cpu"
    hardware: str = "tpu-v5e"
    topology: str | None = None
    xla_flags: tuple[tuple[str, Any], ...] = ()
    data_axes: tuple[str, ...] | None = None
    model_axis: str | None = None
    rules_table: Mapping[str, Any] = field(default_factory=dict)
    sweep_mesh_shapes: tuple[tuple[int, ...], ...] = ()
    sweep_strategies: tuple[str, ...] = ()
    sweep_batch_sizes: tuple[int, ...] = ()
    sweep_remat: tuple[str, ...] = ()
    sweep_microbatches: tuple[int, ...] = ()
    sweep_executor: str | None = None
    sweep_ray_cpus: float | None = None
    sweep_ray_memory: int | None = None
    sweep_maxtext: tuple[tuple[str, tuple[str, ...]], ...] = ()  # MaxText key -> values, from [sweep.maxtext]
    verify_fixes: bool = False

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        """Pickle as plain data (sweeps send configs to worker processes; mapping proxies do not pickle)."""
        state = {f: getattr(self, f) for f in self.__dataclass_fields__}
        for key in ("mesh", "model", "rules_table"):
            state[key] = _plain(state[key])
        return (_rebuild, (state,))

    @property
    def title(self) -> str:
        """The report's title: `name`, else a description of the plan."""
        if self.name:
            return self.name
        what = self.entry or f"transformer template, {self.strategy}"
        mesh = ",".join(f"{k}={v}" for k, v in self.mesh.items())
        return f"{what} on {mesh} ({self.hardware})"

    @property
    def mesh_text(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.mesh.items())

    def with_plan(self, mesh_shape: Sequence[int] | None = None, strategy: str | None = None) -> ReportConfig:
        """The same config with another mesh shape (same axis names, in order) and/or strategy.

        Raises:
          ConfigError: the shape has a different number of axes, or a strategy is given for an entry point.
        """
        mesh = dict(self.mesh)
        if mesh_shape is not None:
            if len(mesh_shape) != len(mesh):
                raise ConfigError(
                    f"mesh shape {'x'.join(map(str, mesh_shape))} has {len(mesh_shape)} axes but the config's mesh "
                    f"{self.mesh_text} has {len(mesh)} ({', '.join(mesh)}); give one size per axis", path=self.path)
            mesh = dict(zip(mesh, (int(s) for s in mesh_shape)))
        if strategy is not None:
            if self.entry is not None:
                raise ConfigError(f"strategy {strategy!r} applies to the built-in [model] template; this config "
                                  f"names an entry point ({self.entry}), whose shardings are its own",
                                  path=self.path)
            _check_strategy(strategy, self.path)
        return replace(self, mesh=MappingProxyType(mesh), strategy=strategy or self.strategy,
                       name="" if (mesh_shape is not None or strategy is not None) else self.name)

    def with_template(self, **sizes: Any) -> ReportConfig:
        """The same config with some of the template's [model] values replaced (None values are ignored):
        a sweep's batch size, remat policy or microbatches. They are checked when the program is built.

        Raises:
          ConfigError: the config names an entry point, whose sizes are its own.

        Example:
          >>> cfg = load_report_config("examples/configs/fsdp-tp-v5e-8.toml")
          >>> cfg.with_template(batch=32, remat="full").model["remat"]
          'full'
        """
        given = {k: v for k, v in sizes.items() if v is not None}
        if not given:
            return self
        if self.entry is not None:
            raise ConfigError(f"{', '.join(given)} apply to the built-in [model] template; this config names an entry "
                              f"point ({self.entry}), whose sizes are its own", path=self.path)
        return replace(self, model=MappingProxyType({**self.model, **given}), name="")

    def transformer_config(self) -> Any:
        """The template's `analyzer.compile.models.TransformerConfig` (only for configs with [model])."""
        from analyzer.compile.models import TransformerConfig

        try:
            return TransformerConfig(**self.model)
        except ConfigError as e:
            raise ConfigError(f"[model]: {e.message}", path=self.path) from None

    def build(self) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
        """The function to analyse and its abstract arguments: `(fn, args, kwargs)`.

        For [model] configs, `analyzer.compile.models.build(config, strategy, mesh)`; for an entry point,
        `analyzer.compile.lower.load_entry(entry, mesh)` (a `path.py:function` entry is resolved against the config
        file's folder when it is not found from the working directory).
        """
        if self.entry is None:
            from analyzer.compile.models import build

            try:
                fn, args = build(self.transformer_config(), self.strategy, dict(self.mesh), data_axes=self.data_axes,
                                 model_axis=self.model_axis)
            except AnalyzerError as e:
                raise self._placed(e) from None
            return fn, tuple(args), {}
        from analyzer.compile.lower import load_entry

        return load_entry(self._resolved_entry(), dict(self.mesh))

    def _placed(self, error: AnalyzerError) -> AnalyzerError:
        """A mesh or dimension that does not fit the template, placed at its line of the config file: the [model]
        size that does not divide (`but 7 is not a multiple of 4`, when one key holds 7), else the mesh axis the
        message names (`sharded over data`), else the [model] key it names (`experts=6`), else [mesh].
        Only while the mesh and sizes are the file's own (a sweep's plan changes them: its message stands alone).
        """
        if self.path is None or isinstance(error, ConfigError) and error.line is not None:
            return error
        try:
            text = Path(self.path).read_text(encoding="utf-8")
            own = parse_report_config(text, path=self.path)
        except (OSError, UnicodeDecodeError, AnalyzerError):
            return error
        if dict(own.mesh) != dict(self.mesh) or dict(own.model) != dict(self.model):
            return error
        message = str(error)
        axis = re.search(r"sharded over (\w+)", message)
        size = next((k for k in MODEL_KEYS if re.search(rf"\b{k}=", message)), None)
        # `... but 7 is not a multiple of 4`: the size that does not divide, when one [model] key holds it.
        bad = re.search(r"but (\d+) is not a multiple", message)
        holders = [k for k, v in self.model.items() if bad and v == int(bad.group(1)) and not isinstance(v, bool)]
        if len(holders) == 1:
            line = find_key_line(text, holders[0], "model")
        elif axis and axis.group(1) in self.mesh:
            line = find_key_line(text, axis.group(1), "mesh")
        elif size is not None:
            line = find_key_line(text, size, "model")
        else:
            line = find_table_line(text, "mesh")
        return ConfigError(message, path=self.path, line=line, source_line=toml_line(text, line))

    @property
    def maxtext_argv(self) -> list[str] | None:
        """train_compile's arguments of a `maxtext:` entry (a relative `.yml` config resolved against this
        config's folder when it is not found from the working directory), else None."""
        if self.entry is None or not self.entry.startswith(MAXTEXT_PREFIX):
            return None
        items = self.entry[len(MAXTEXT_PREFIX):].split()
        if items and "=" not in items[0] and not Path(items[0]).is_file() and self.path:
            candidate = Path(self.path).parent / items[0]
            if candidate.is_file():
                items[0] = str(candidate)
        return items

    def with_maxtext(self, overrides: Sequence[tuple[str, str]]) -> ReportConfig:
        """The same `maxtext:` config with these MaxText keys set (after the entry's own: MaxText takes the last)."""
        if not overrides:
            return self
        assert self.maxtext_argv is not None
        extra = " ".join(f"{k}={v}" for k, v in overrides)
        return replace(self, entry=f"{self.entry} {extra}", name="")

    def _resolved_entry(self) -> str:
        assert self.entry is not None
        module, _, function = self.entry.partition(":")
        if module.endswith(".py") and self.path and not Path(module).is_file():
            candidate = Path(self.path).parent / module
            if candidate.is_file():
                return f"{candidate}:{function}"
        return self.entry

    def input_files(self, *hardware: str | None) -> list[tuple[str, Path | None]]:
        """The files a run of this config reads, as (what, path) for `analyzer.fileio.refuse_inputs`
        (`analyzer.workflows.reportcache.report_inputs`): the config, the entry point's sources, and the hardware
        spec files among its `hardware` and the given names (`--hardware`, `--what-if`)."""
        from analyzer.workflows.reportcache import report_inputs

        return report_inputs(self.path, self.entry, (self.hardware, *hardware))

    def rules_config(self) -> Config:
        """The rule selection, options and budgets as an `analyzer.rules.config.Config`."""
        from analyzer.rules.config import config_from_table

        table = dict(self.rules_table)
        try:
            return config_from_table(table, path=self.path)
        except ConfigError as e:
            raise ConfigError(e.message, path=self.path, line=e.line) from None


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _rebuild(state: dict[str, Any]) -> ReportConfig:
    for key in ("mesh", "model", "rules_table"):
        state[key] = MappingProxyType(state[key])
    return ReportConfig(**state)


def parse_mesh_shape(text: str) -> tuple[int, ...]:
    """A mesh shape written `8x1`, `4x2` or `2x2x2`.

    Raises:
      ConfigError: not positive integers joined by `x`.

    Example:
      >>> parse_mesh_shape("4x2")
      (4, 2)
    """
    if not isinstance(text, str) or not re.fullmatch(r"\s*\d+(\s*x\s*\d+)*\s*", text):
        raise ConfigError(f"mesh shape {text!r}: write sizes joined by 'x', e.g. '8x1', '4x2' or '2x2x2'")
    shape = tuple(int(p) for p in text.lower().split("x"))
    if any(s < 1 for s in shape):
        raise ConfigError(f"mesh shape {text!r}: every size must be at least 1")
    return shape


def load_report_config(path: str | Path) -> ReportConfig:
    """Read and check a report config file.

    Raises:
      ConfigError: a missing file, bad TOML (with line and column), an unknown key or a bad value (with its
        line and the valid keys).

    Example:
      >>> cfg = load_report_config("examples/configs/fsdp-v5e-8.toml")
      >>> cfg.strategy, dict(cfg.mesh)
      ('fsdp', {'data': 8})
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"no such config file: {str(p)!r}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read config file {str(p)!r}: {e}") from None
    return parse_report_config(text, path=str(p))


def _norm(key: str) -> str:
    return key.replace("-", "_")


class _Checker:
    """Turns problems with the parsed TOML into ConfigErrors placed at the key's line in the text."""

    def __init__(self, text: str, path: str | None) -> None:
        self.text = text
        self.path = path
        self.lines = text.splitlines()

    def error(self, message: str, key: str | None = None, table: str = "") -> ConfigError:
        line = find_key_line(self.text, key, table) if key is not None else None
        if line is None and table:
            line = find_table_line(self.text, table)
        source = self.lines[line - 1] if line and 0 < line <= len(self.lines) else None
        return ConfigError(message, path=self.path, line=line, source_line=source)

    def unknown(self, key: str, table: str, valid: Sequence[str]) -> ConfigError:
        where = f"[{table}]" if table else "the top level"
        shown = [k.replace("_", "-") if table in ("budgets", "sweep") else k for k in valid]
        return self.error(f"unknown key {key!r} in {where}; " + valid_choices(key, shown, what="keys"), key, table)


def _check_strategy(strategy: Any, path: str | None, checker: _Checker | None = None) -> str:
    if not isinstance(strategy, str) or strategy not in STRATEGIES:
        message = f"unknown strategy {strategy!r}; " + valid_choices(str(strategy), STRATEGIES, what="strategies")
        raise checker.error(message, "strategy") if checker else ConfigError(message, path=path)
    return strategy


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def parse_report_config(text: str, *, path: str | None = None) -> ReportConfig:
    """Check a report config given as TOML text.

    Args:
      text: the TOML.
      path: the file it came from, for messages and for resolving a relative `file.py:function` entry.

    Returns:
      The `ReportConfig`.

    Raises:
      ConfigError: as `load_report_config`.
    """
    data = load_toml(text, path=path)
    c = _Checker(text, path)
    _check_top_types(data, c)
    kwargs: dict[str, Any] = {"path": path}
    for raw, value in data.items():
        kwargs.update(_read_top(_norm(raw), raw, value, data, c))
    maxtext = isinstance(kwargs.get("entry"), str) and kwargs["entry"].startswith(MAXTEXT_PREFIX)
    _check_plan(kwargs, data, c, maxtext=maxtext)
    kwargs["rules_table"] = MappingProxyType(_rules(data.get("rules", {}), data.get("budgets", {}), c))
    _check_what_to_analyse(kwargs, "model" in data, c, maxtext=maxtext)
    config = ReportConfig(**kwargs)
    _check_roles(config, c)
    if "model" in data:
        _check_model(config, c)
    _check_rules(config, c)
    return config


_TABLES = ("mesh", "model", "rules", "budgets", "sweep")
_STRING_KEYS = ("name", "entry", "target", "hardware", "topology", "model_axis")


def _check_top_types(data: Mapping[str, Any], c: _Checker) -> None:
    """Every top-level key known, and tables and strings where they must be, before any value is read."""
    for raw, value in data.items():
        key = _norm(raw)
        if key not in TOP_KEYS:
            raise c.unknown(raw, "", list(TOP_KEYS))
        if key in _TABLES and not isinstance(value, dict):
            raise c.error(f"{raw!r} must be a table ([{raw}] or {raw} = {{ ... }}), got {value!r}", raw)
        if key in _STRING_KEYS and not isinstance(value, str):
            raise c.error(f"{raw!r} must be a string, got {value!r}", raw)


def _read_top(key: str, raw: str, value: Any, data: Mapping[str, Any], c: _Checker) -> dict[str, Any]:
    """One top-level key of a report config as `ReportConfig` keyword arguments ({} for the tables read later:
    rules, budgets)."""
    if key in ("name", "entry", "hardware", "topology", "model_axis"):
        return {key: value}
    if key == "target":
        from analyzer.compile.lower import parse_target

        try:
            if not str(data.get("entry", "")).startswith(MAXTEXT_PREFIX):  # MaxText's: cpu|tpu, checked later
                parse_target(value)
        except AnalyzerError as e:
            raise c.error(str(e), raw) from None
        return {"target": value}
    if key == "xla_flags":
        from analyzer.compile.xlaflags import parse_xla_flags

        if not (isinstance(value, str) or (isinstance(value, list) and _strings(value))):
            raise c.error(f"{raw!r} must be a string of flags or a list of them, e.g. "
                          "\"--xla_tpu_enable_async_collective_fusion_multiple_steps=true\"", raw)
        try:
            return {"xla_flags": tuple(parse_xla_flags(value, where=repr(raw)).items())}
        except ConfigError as e:
            raise c.error(e.message, raw) from None
    if key == "strategy":
        return {"strategy": _check_strategy(value, c.path, c)}
    if key == "verify_fixes":
        if not isinstance(value, bool):
            raise c.error(f"{raw!r} must be true or false, got {value!r}", raw)
        return {"verify_fixes": value}
    if key == "data_axes":
        if isinstance(value, str):
            value = [value]
        if not _strings(value):
            raise c.error(f"'data_axes' must be a list of mesh axis names, got {value!r}", raw)
        return {"data_axes": tuple(value)}
    if key == "mesh":
        for axis, size in value.items():
            if not _positive_int(size):
                raise c.error(f"mesh axis {axis!r} must have a positive integer size, got {size!r}", axis, "mesh")
        if not value:
            raise c.error("[mesh] is empty; give at least one axis, e.g. data = 8", raw)
        return {"mesh": MappingProxyType(dict(value))}
    if key == "model":
        return {"model": MappingProxyType(_model(value, c))}
    if key == "sweep":
        return _sweep(value, c)
    return {}


def _check_plan(kwargs: dict[str, Any], data: Mapping[str, Any], c: _Checker, *, maxtext: bool) -> None:
    """A MaxText entry's own rules, a mesh given, and the hardware and slice checked now, with their line, not
    after the compile."""
    if maxtext:
        _check_maxtext(kwargs, data, c)
    if "mesh" not in kwargs:
        raise c.error("missing [mesh]: say the mesh axes and their sizes, e.g.\n[mesh]\ndata = 4\nmodel = 2")
    if kwargs.get("sweep_maxtext") and not maxtext:
        raise c.error("[sweep.maxtext] sweeps MaxText's keys: it needs entry = \"maxtext:KEY=VALUE ...\"", "maxtext",
                      "sweep")
    from analyzer.rules.config import check_plan_keys

    try:
        check_plan_keys(kwargs.get("hardware") or None, kwargs.get("topology"), None,
                        mesh=kwargs["mesh"] if not maxtext else None)
    except AnalyzerError as e:
        key = e.key or "hardware"
        if key == "mesh":
            raise c.error(str(e), None, "mesh") from None
        raise c.error(str(e), next((r for r in data if _norm(r) == key), key)) from None


def _check_what_to_analyse(kwargs: Mapping[str, Any], has_model: bool, c: _Checker, *, maxtext: bool) -> None:
    """Either an entry point (written module:function, or a maxtext: entry) or the [model] template with a
    strategy; a strategy only for the template."""
    entry = kwargs.get("entry")
    if entry is not None and has_model:
        raise c.error("give either 'entry' (your own program) or [model] (the built-in template), not both", "entry")
    if entry is None and not has_model:
        raise c.error("nothing to analyse: add 'entry = \"module:function\"' (your program) or a [model] table "
                      "with a 'strategy' (the built-in transformer template)")
    if entry is not None and maxtext:
        if "strategy" in kwargs:
            raise c.error("'strategy' applies to the built-in [model] template; MaxText's shardings come from its "
                          "logical_axis_rules and ici_*/dcn_* keys", "strategy")
    elif entry is not None:
        if "strategy" in kwargs:
            raise c.error("'strategy' applies to the built-in [model] template; an entry point's shardings are "
                          "its own", "strategy")
        if not re.fullmatch(r"[^:\s]+:[\w.]+", entry):
            raise c.error(f"entry {entry!r}: write it as 'module:function' or 'path/to/file.py:function'", "entry")
    elif "strategy" not in kwargs:
        raise c.error("[model] needs a 'strategy': " + ", ".join(STRATEGIES), "model")


def _sweep_maxtext(table: Any, raw: str, c: _Checker) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """[sweep.maxtext]: MaxText key -> list of values (strings, numbers, booleans), as MaxText reads them."""
    if not isinstance(table, Mapping) or not table:
        raise c.error("[sweep.maxtext] must be a table of MaxText keys, each a list of values, e.g. "
                      "remat_policy = [\"full\", \"minimal\"]", raw, "sweep")
    out = []
    for key, values in table.items():
        if not _MAXTEXT_KEY.match(str(key)):
            raise c.error(f"[sweep.maxtext] {key!r} is not a MaxText key name", key, "sweep.maxtext")
        if not (isinstance(values, list) and values and all(isinstance(v, (str, int, float)) for v in values)):
            raise c.error(f"[sweep.maxtext] {key!r} must be a non-empty list of values, e.g. [-1, 64] or "
                          f"[\"full\", \"minimal\"], got {values!r}", key, "sweep.maxtext")
        text = tuple(("true" if v else "false") if isinstance(v, bool) else str(v) for v in values)
        if any(not t or any(ch.isspace() for ch in t) for t in text):
            raise c.error(f"[sweep.maxtext] {key!r}: a value may not be empty or hold spaces, got {values!r}", key,
                          "sweep.maxtext")
        out.append((str(key), text))
    return tuple(out)


MAXTEXT_PREFIX = "maxtext:"
_MAXTEXT_KEY = re.compile(r"^[A-Za-z_][\w.]*$")


def _check_maxtext(kwargs: dict[str, Any], data: Mapping[str, Any], c: _Checker) -> None:
    """A `maxtext:` entry: its items are train_compile's (an optional leading .yml, then KEY=VALUE); the mesh and
    slice are MaxText's, so [mesh] and `topology` are refused; the target is cpu or tpu; the hardware, unless
    given, is the one of `compile_topology` (empty here). Nothing of MaxText is imported."""
    items = kwargs["entry"][len(MAXTEXT_PREFIX):].split()
    if not items:
        raise c.error("entry 'maxtext:' names no MaxText arguments; write e.g. \"maxtext:model_name=llama2-7b "
                      "compile_topology=v5e-256\"", "entry")
    for i, item in enumerate(items):
        key, eq, _ = item.partition("=")
        if i == 0 and not eq and item.endswith((".yml", ".yaml")):
            continue
        if not eq or not _MAXTEXT_KEY.match(key):
            raise c.error(f"entry: MaxText argument {item!r} is not KEY=VALUE (a .yml config file may come first)",
                          "entry")
    if "mesh" in data:
        raise c.error("a maxtext: entry takes its mesh from MaxText (ici_*/dcn_* keys, compile_topology): remove "
                      "[mesh]", None, "mesh")
    if "topology" in kwargs:
        raise c.error("a maxtext: entry lays its mesh on compile_topology: remove 'topology' (or set "
                      "compile_topology in the entry)", "topology")
    if kwargs.get("verify_fixes"):
        raise c.error("verify-fixes with a maxtext: entry: MaxText builds its own arguments from its keys, so a "
                      "finding's PartitionSpec cannot be applied to them; remove 'verify-fixes'", "verify_fixes")
    target = str(kwargs.get("target", "cpu"))
    if target not in ("cpu", "tpu"):
        raise c.error(f"a maxtext: entry's target is cpu or tpu (the chips come from compile_topology), got "
                      f"{target!r}", "target")
    kwargs.setdefault("hardware", "")
    kwargs["mesh"] = MappingProxyType({})


def _model(table: Mapping[str, Any], c: _Checker) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for raw, value in table.items():
        key = _norm(raw)
        types = MODEL_KEYS.get(key)
        if types is None:
            raise c.unknown(raw, "model", list(MODEL_KEYS))
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            kinds = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
            kind = " or ".join(kinds[t] for t in types)
            raise c.error(f"[model] {raw!r} must be {kind}, got {value!r}", raw, "model")
        if key == "dtype" or key == "weight_dtype" and value != "":  # (weight_dtype "": the same as dtype)
            if value.lower() not in DTYPE_ALIASES:
                raise c.error(f"[model] {key} {value!r}; " + valid_choices(value, DTYPE_ALIASES, what="dtypes"),
                              raw, "model")
            value = DTYPE_ALIASES[value.lower()]
        if types == (int,) and key in ("head_dim", "vocab") and value < 0:  # (0: not used, as the template reads it)
            raise c.error(f"[model] {raw!r} must be a non-negative integer (0: not used), got {value!r}", raw, "model")
        if types == (int,) and key not in ("head_dim", "vocab") and value < 1:
            raise c.error(f"[model] {raw!r} must be a positive integer, got {value!r}", raw, "model")
        out[key] = value
    return out


def _check_model(config: ReportConfig, c: _Checker) -> None:
    """Let the template check its own invariants (heads divide d_model, ...), placed at the [model] table."""
    from analyzer.compile.models import TransformerConfig

    try:
        TransformerConfig(**config.model)
    except ConfigError as e:
        message = e.message.replace("TransformerConfig.", "[model] ").replace("TransformerConfig:", "[model]:")
        field_name = next((k for k in MODEL_KEYS if re.search(rf"\b{k}\b", e.message)), None)
        raise c.error(message, field_name, "model") if field_name else c.error(message, None, "model") from None


def _check_roles(config: ReportConfig, c: _Checker) -> None:
    axes = list(config.mesh)
    for axis in config.data_axes or ():
        if axis not in axes:
            raise c.error(f"data_axes names {axis!r}, which is not a mesh axis; "
                          + valid_choices(axis, axes, what="mesh axes"), "data_axes")
    if config.model_axis is not None and config.model_axis not in axes:
        raise c.error(f"model_axis {config.model_axis!r} is not a mesh axis; "
                      + valid_choices(config.model_axis, axes, what="mesh axes"), "model_axis")


def _sweep(table: Mapping[str, Any], c: _Checker) -> dict[str, Any]:
    """The [sweep] table as `ReportConfig` keyword arguments (`sweep_*`)."""
    out: dict[str, Any] = {}
    executor, address = None, None
    for raw, value in table.items():
        key = _norm(raw)
        if key not in _SWEEP_KEYS:
            raise c.unknown(raw, "sweep", _SWEEP_KEYS)
        if key in ("executor", "ray_address") and not (isinstance(value, str) and value.strip()):
            raise c.error(f"[sweep] {raw!r} must be a string, got {value!r}", raw, "sweep")
        if key == "executor":
            executor = value
        elif key == "ray_address":
            address = value.strip()
        else:
            out.update(_SWEEP_READERS[key](key, raw, value, c))
    if executor is not None or address is not None:
        out["sweep_executor"] = _sweep_executor(table, executor, address, c)
    return out


def _sweep_names(key: str, raw: str, value: Any, c: _Checker) -> dict[str, Any]:
    """mesh-shapes, strategies, remat: lists of strings, each a mesh shape, a strategy or a remat policy."""
    from analyzer.compile.models import REMAT_POLICIES

    if not _strings(value):
        raise c.error(f"[sweep] {raw!r} must be a list of strings, got {value!r}", raw, "sweep")
    if key == "mesh_shapes":
        try:
            return {"sweep_mesh_shapes": tuple(parse_mesh_shape(v) for v in value)}
        except ConfigError as e:
            raise c.error(f"[sweep] {e.message}", raw, "sweep") from None
    valid, what = (STRATEGIES, "strategy") if key == "strategies" else (REMAT_POLICIES, "remat policy")
    for s in value:
        if s not in valid:
            plural = "strategies" if key == "strategies" else "remat policies"
            raise c.error(f"[sweep] unknown {what} {s!r}; " + valid_choices(s, valid, what=plural), raw, "sweep")
    return {f"sweep_{key}": tuple(value)}


def _sweep_counts(key: str, raw: str, value: Any, c: _Checker) -> dict[str, Any]:
    """batch-sizes, microbatches: non-empty lists of positive integers."""
    if not (isinstance(value, list) and value and all(_positive_int(v) for v in value)):
        raise c.error(f"[sweep] {raw!r} must be a list of positive integers, e.g. [16, 32], got {value!r}",
                      raw, "sweep")
    return {f"sweep_{key}": tuple(value)}


def _sweep_ray(key: str, raw: str, value: Any, c: _Checker) -> dict[str, Any]:
    """ray-cpus (a positive number) and ray-memory (bytes, or a size such as "8GiB") per compile."""
    if key == "ray_cpus":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise c.error(f"[sweep] {raw!r} must be a positive number of CPUs per compile, got {value!r}",
                          raw, "sweep")
        return {"sweep_ray_cpus": float(value)}
    from analyzer.workflows.executors import parse_memory

    try:
        return {"sweep_ray_memory": parse_memory(value, where=f"[sweep] {raw}")}
    except ConfigError as e:
        raise c.error(f"[sweep] {raw} {e.message}", raw, "sweep") from None


def _sweep_maxtext_key(key: str, raw: str, value: Any, c: _Checker) -> dict[str, Any]:
    return {"sweep_maxtext": _sweep_maxtext(value, raw, c)}


# [sweep] key -> its reader (checks the value, returns `ReportConfig` keyword arguments); executor and
# ray-address are read together by `_sweep_executor`.
_SWEEP_READERS: Mapping[str, Callable[[str, str, Any, _Checker], dict[str, Any]]] = MappingProxyType({
    "mesh_shapes": _sweep_names, "strategies": _sweep_names, "remat": _sweep_names,
    "batch_sizes": _sweep_counts, "microbatches": _sweep_counts, "ray_cpus": _sweep_ray, "ray_memory": _sweep_ray,
    "maxtext": _sweep_maxtext_key,
})


def _sweep_executor(table: Mapping[str, Any], executor: str | None, address: str | None, c: _Checker) -> str:
    """`executor` and `ray-address` of [sweep] as one executor spec ("ray", "ray:ADDRESS", "local", ...)."""
    from analyzer.workflows.executors import parse_executor

    where = next((r for r in table if _norm(r) == "executor"), None)
    try:
        spec = parse_executor(executor or "ray", where="[sweep] executor")
    except ConfigError as e:
        raise c.error(f"[sweep] executor {e.message}", where, "sweep") from None
    if address is not None:
        if spec.kind != "ray" or spec.address is not None:
            raise c.error(f"[sweep] ray-address {address!r} needs executor = \"ray\" (without an address of its "
                          f"own), got executor = {executor!r}", "ray_address", "sweep")
        spec = replace(spec, address=address)
    return spec.kind + (f":{spec.address}" if spec.address else "")


def _rules(rules: Mapping[str, Any], budgets: Mapping[str, Any], c: _Checker) -> dict[str, Any]:
    """[rules] and [budgets] in the form of `[tool.hlo-analyzer]`, keys checked here for good line numbers."""
    table: dict[str, Any] = {}
    per_rule: dict[str, Any] = {}
    for raw, value in rules.items():
        key = _norm(raw)
        if key in _RULES_KEYS:
            if isinstance(value, str):
                value = [value]
            if not _strings(value):
                raise c.error(f"[rules] {raw!r} must be a list of rule codes or prefixes, got {value!r}", raw, "rules")
            table[key] = value
        elif isinstance(value, dict):
            per_rule[raw] = value
        else:
            raise c.error(f"unknown key {raw!r} in [rules]; valid keys: select, ignore, or a per-rule table such as "
                          "[rules.HA301]", raw, "rules")
    if per_rule:
        table["rules"] = per_rule
    if budgets:
        table["budgets"] = dict(budgets)
    return table


def _check_rules(config: ReportConfig, c: _Checker) -> None:
    """Build the rules Config once so bad codes and budgets fail at load time, placed at their line."""
    from analyzer.rules.config import config_from_table

    try:
        config_from_table(dict(config.rules_table), path=config.path)
    except ConfigError as e:
        key = getattr(e, "key", None)
        table = "budgets" if "budget" in e.message else "rules"
        # A per-rule option's table ([tool.hlo-analyzer.rules.HA201] in a pyproject) is [rules.HA201] here.
        table = str(getattr(e, "table", "") or "").removeprefix("tool.hlo-analyzer.") or table
        if key is None:
            m = re.search(r"'([^']+)'|^budget ([\w-]+)", e.message)
            key = (m.group(1) or m.group(2)) if m else None
        line = None
        if key is not None:
            line = find_key_line(c.text, key, table) or find_value_line(c.text, key)
        source = c.lines[line - 1] if line and 0 < line <= len(c.lines) else None
        raise ConfigError(e.message, path=c.path, line=line, source_line=source) from None
