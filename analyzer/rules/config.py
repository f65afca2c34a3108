"""`[tool.hlo-analyzer]` of pyproject.toml: which rules run, their thresholds, budgets, and what to check.

A `Config` is a frozen value. `load_config(path)` reads it from a pyproject.toml (or any TOML file whose
`[tool.hlo-analyzer]` table holds it); `Config()` is the default (every rule, default thresholds, no
budgets). The decorator and the command line layer their own options on top with `Config.override`.

Every key in the table, and every rule code or prefix named in `select`/`ignore`/`rules`, is checked: an
unknown one is a `ConfigError` that names the key, the file, the line, and what would be valid.

    [tool.hlo-analyzer]
    select = ["HA"]                      # codes or prefixes; default: every rule
    ignore = ["HA202"]                   # codes or prefixes; the most specific match wins
    hardware = "tpu-v5e"                 # a name from `hlo-analyzer hardware list`, or a spec path
    topology = "v5e:2x4"                 # the physical slice the mesh is laid on
    mesh = { data = 4, model = 2 }       # axis name -> size, major to minor
    target = "cpu"                       # "cpu", "tpu:v5e:2x4", ...
    xla-flags = "--xla_tpu_enable_async_collective_fusion_multiple_steps=true"  # the run's XLA flags (or a list)
    timeout = 600                        # seconds one entry point (its import, call and compile) may take
    entry-points = ["model.train:step"]  # module:function returning (jitted fn, abstract args); `check` runs them
    baseline = ".hlo-analyzer-baseline.json"
    baseline-tolerance = 0.10            # a baselined finding whose cost grew more than this (10%) is new again
    cache-inputs = ["configs/*.yaml"]    # files entry points read at run time: part of `check`'s cache key
    cache-dir = ".hlo-analyzer-cache"    # where `check` keeps results; `cache = false` turns the cache off
    min-saving-seconds = 10e-6           # drop findings that save less per step (default 10 us) ...
    min-saving-fraction = 0.01           # ... or less than this fraction of the predicted step (1%)

    [tool.hlo-analyzer.budgets]
    comm-seconds-per-step = 0.010        # predicted communication per step, seconds
    comm-compute-ratio = 0.5             # predicted communication / compute per step

    [tool.hlo-analyzer.rules.HA301]      # per-rule options, by code or kebab-case name
    min-count = 8
    severity = "error"                   # any rule's default severity can be changed

For the `check` command (analyzer/cli/check.py): `entry_points`, `mesh`, `target`, `hardware`, `topology`
and `baseline` say what to compile and how; `run_rules(report, config)` applies the rest.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from analyzer.numeric import number_problem
from analyzer.errors import (AnalyzerError, ConfigError, MeshError, find_key_line, find_value_line, load_toml, toml_line,
                             valid_choices)

__all__ = ["Budgets", "Config", "as_config", "load_config", "find_config", "TABLE", "DEFAULT_MIN_SAVING_SECONDS",
           "DEFAULT_MIN_SAVING_FRACTION", "DEFAULT_BASELINE_TOLERANCE"]

TABLE = "tool.hlo-analyzer"

# TOML key -> Config field. Keys are kebab-case as in ruff; snake_case spellings are accepted too.
_TOP_KEYS: Mapping[str, str] = MappingProxyType(
    {
        "select": "select",
        "ignore": "ignore",
        "hardware": "hardware",
        "topology": "topology",
        "mesh": "mesh",
        "target": "target",
        "entry-points": "entry_points",
        "baseline": "baseline",
        "budgets": "budgets",
        "rules": "rules",
        "min-saving-seconds": "min_saving_seconds",
        "min-saving-fraction": "min_saving_fraction",
        "baseline-tolerance": "baseline_tolerance",
        "timeout": "timeout",
        "cache": "cache",
        "cache-dir": "cache_dir",
        "cache-inputs": "cache_inputs",
        "xla-flags": "xla_flags",
    }
)

# Defaults of the negligible-saving filter (docs/rules.md, "Negligible findings"). A finding whose predicted
# saving per step is under the larger of the two is dropped by the runner (and counted in the report's notes).
# 10 us is ten ICI hops of latency (T_min ~ 1 us per hop on TPU v4/v5e/v5p, sharding chapter, "A note on ICI
# latency"): the latency floor of one or two small collectives, which is the resolution of the cost model
# (Problem 3's latency-bound AllGather is "about 2 us") and far below step-to-step noise. 1% of the predicted
# step (of its communication when the report has no step) is the share below which no engineer changes a
# sharding for it.
DEFAULT_MIN_SAVING_SECONDS = 10e-6
DEFAULT_MIN_SAVING_FRACTION = 0.01
# A baselined finding whose predicted seconds per step grew by more than this fraction over the baseline's
# figure is new again: the baseline accepted that cost, not any cost (a 500 MiB all-reduce in place of a
# 5 MiB one at the same line has the same fingerprint). 10% is well over the cost model's run-to-run
# stability (it is deterministic) and under any change a reviewer would want to see.
DEFAULT_BASELINE_TOLERANCE = 0.10
_BUDGET_KEYS: Mapping[str, str] = MappingProxyType(
    {"comm-seconds-per-step": "comm_seconds_per_step", "comm-compute-ratio": "comm_compute_ratio"}
)


@dataclass(frozen=True)
class Budgets:
    """Limits on a step's predicted communication. None means no limit.

    Attributes:
      comm_seconds_per_step: predicted communication seconds per call of the function.
      comm_compute_ratio: predicted communication seconds over compute seconds.
    """

    comm_seconds_per_step: float | None = None
    comm_compute_ratio: float | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None and number_problem(v, positive=True):  # NaN passed `v <= 0`
                raise ConfigError(f"budget {f.name.replace('_', '-')} must be a finite positive number, got {v!r}")


@dataclass(frozen=True)
class Config:
    """What the rules check and how.

    Attributes:
      select: rule codes or code prefixes to enable (default: every rule).
      ignore: codes or prefixes to disable; where select and ignore both match, the longer prefix wins.
      rules: per-rule options, keyed by rule code: {"HA301": {"min_count": 8, "severity": "error"}}.
      budgets: `Budgets`.
      hardware, topology, mesh, target: how to compile and price (used by `check` and reports).
      entry_points: `module:function` names `check` compiles.
      baseline: path of a baseline file (findings in it do not fail).
      baseline_tolerance: a baselined finding whose predicted seconds grew by more than this fraction over
        the baseline's figure is reported as new (default 0.10).
      min_saving_seconds: findings that predict a saving per step under this are negligible (dropped).
      timeout: seconds `check` allows each entry point (import, call, compile), and `@audit` its compile
        (in any thread; see `analyzer.compile.lower.time_limit`); None: no limit.
      min_saving_fraction: ... and so are those under this fraction of the predicted step
        (`Totals.step_seconds`, the time savings are in), or of the step's predicted communication when the
        report has no step. The threshold is the larger of the two; a rule's own `min-saving-seconds`
        option, when set, replaces both for that rule. Budget, memory and meta rules are exempt.
      cache: whether `check` keeps results in its cache (analyzer/workflows/cache.py); cache_dir: where
        (relative to the project root; default `.hlo-analyzer-cache`); cache_inputs: globs of files the
        entry points read at run time, part of every result's key.
      xla_flags: the run's XLA flags ({name: value}; `xla-flags`, a string or a list of `--xla_...=...`): `check`
        compiles with them and the step model reads them (analyzer.compile.xlaflags; docs/step.md, "The user's
        XLA flags").
      path: the file the config was read from, or None.
      origin: where `select`/`ignore` entries came from, for the unused-suppression rule (entry -> place).
    """

    select: tuple[str, ...] = ("HA",)
    ignore: tuple[str, ...] = ()
    rules: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    budgets: Budgets = field(default_factory=Budgets)
    hardware: str | None = None
    topology: str | None = None
    mesh: Mapping[str, int] | None = None
    target: str = "cpu"
    entry_points: tuple[str, ...] = ()
    baseline: str | None = None
    min_saving_seconds: float = DEFAULT_MIN_SAVING_SECONDS
    min_saving_fraction: float = DEFAULT_MIN_SAVING_FRACTION
    baseline_tolerance: float = DEFAULT_BASELINE_TOLERANCE
    timeout: float | None = None
    cache: bool = True
    cache_dir: str | None = None
    cache_inputs: tuple[str, ...] = ()
    xla_flags: Mapping[str, Any] = field(default_factory=dict)
    path: str | None = None
    origin: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, upper in (("min_saving_seconds", None), ("min_saving_fraction", 1.0),
                            ("baseline_tolerance", None)):
            v = getattr(self, name)
            if number_problem(v, minimum=0, maximum=upper):  # NaN passed `v < 0`: a tolerance of NaN accepted all
                err = ConfigError(f"{name.replace('_', '-')!r} must be a finite number from 0"
                                  + (f" to {upper:g}" if upper is not None else " up") + f", got {v!r}",
                                  path=self.path)
                err.key = name.replace("_", "-")
                raise err
            object.__setattr__(self, name, float(v))
        object.__setattr__(self, "select", tuple(self.select))
        object.__setattr__(self, "ignore", tuple(self.ignore))
        object.__setattr__(self, "entry_points", tuple(self.entry_points))
        from analyzer.rules.registry import check_codes, normalise_rule_options

        check_codes(self.select, key="select", path=self.path)
        check_codes(self.ignore, key="ignore", path=self.path)
        object.__setattr__(
            self, "rules", MappingProxyType(normalise_rule_options(self.rules, path=self.path))
        )

    def override(
        self,
        *,
        select: Iterable[str] | None = None,
        ignore: Iterable[str] | None = None,
        budgets: Budgets | Mapping[str, float] | None = None,
        rules: Mapping[str, Mapping[str, Any]] | None = None,
        where: str = "decorator",
        **others: Any,
    ) -> Config:
        """A copy with options from a decorator or the command line layered on top.

        `select` replaces the selection; `ignore` adds to the ignored codes; `budgets` and `rules` merge
        key by key. `where` names the source in unused-suppression messages.

        Example:
            >>> Config().override(ignore=["HA202"]).ignore
            ('HA202',)
        """
        changes: dict[str, Any] = dict(others)
        origin = dict(self.origin)
        if select is not None:
            changes["select"] = tuple(select)
        if ignore is not None:
            extra = tuple(ignore)
            changes["ignore"] = self.ignore + tuple(c for c in extra if c not in self.ignore)
            origin.update({c: where for c in extra})
        if budgets:
            if isinstance(budgets, Budgets):
                changes["budgets"] = budgets
            else:
                merged = {f.name: getattr(self.budgets, f.name) for f in fields(Budgets)}
                for k, v in budgets.items():
                    key = _BUDGET_KEYS.get(k, k)
                    if key not in merged:
                        raise ConfigError(
                            f"unknown budget {k!r}; " + valid_choices(k, _BUDGET_KEYS, what="budgets")
                        )
                    merged[key] = v
                changes["budgets"] = Budgets(**merged)
        if rules is not None:
            merged_rules = {k: dict(v) for k, v in self.rules.items()}
            for code, opts in rules.items():
                merged_rules.setdefault(code, {}).update(opts)
            changes["rules"] = merged_rules
        changes["origin"] = origin
        return replace(self, **changes)

    def option(self, code: str, name: str, default: Any) -> Any:
        """The configured value of rule `code`'s option `name` (snake_case), or `default`."""
        return self.rules.get(code, {}).get(name, default)

    def where(self, entry: str) -> str:
        """Where a select/ignore entry came from, in words (for messages)."""
        return self.origin.get(entry) or (f"{self.path} [{TABLE}]" if self.path else "the configuration")


def find_config(start: str | Path = ".") -> Path | None:
    """The nearest pyproject.toml at or above `start` that has a `[tool.hlo-analyzer]` table.

    Returns:
      its path, or None when there is none.
    """
    here = Path(start).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                data = tomllib.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, tomllib.TOMLDecodeError):
                continue
            if "hlo-analyzer" in data.get("tool", {}):
                return candidate
    return None


def load_config(path: str | Path | None = None) -> Config:
    """Read `[tool.hlo-analyzer]` from a TOML file (pyproject.toml).

    Args:
      path: the TOML file. A file without the table gives the default `Config` (with `path` set). None:
        the nearest pyproject.toml with the table at or above the working directory, else `Config()`.

    Returns:
      the `Config`.

    Raises:
      ConfigError: the file cannot be read or parsed, or a key, code or value is not valid; the message
        names the key, the file and the line, and lists the valid choices.

    Example:
        >>> load_config("pyproject.toml").select
        ('HA',)
    """
    if path is None:
        found = find_config()
        if found is None:
            return Config()
        path = found
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read config: {e.strerror or e}", path=str(p)) from None
    data = load_toml(text, path=str(p))
    table = data.get("tool", {}).get("hlo-analyzer", {})
    return config_from_table(table, path=str(p), text=text)


def as_config(value: Any, *, what: str = "config") -> Config:
    """The rules `Config` a public entry point was given: a `Config`, a mapping of `[tool.hlo-analyzer]` keys
    (checked like the TOML table: kebab- or snake_case keys, values, rule codes), a path to a pyproject.toml,
    or None (the defaults).

    Raises:
      ConfigError: a bad key or value in the mapping, naming it and the valid keys; or a value of another type,
        saying what is accepted.

    Example:
        >>> as_config({"ignore": ["HA202"], "min-saving-seconds": 0}).ignore
        ('HA202',)
        >>> as_config({"ignor": ["HA202"]})
        Traceback (most recent call last):
          ...
        analyzer.errors.ConfigError: error: unknown key 'ignor' in the config mapping; did you mean 'ignore'? valid keys: ...
    """
    if value is None:
        return Config()
    if isinstance(value, Config):
        return value
    if isinstance(value, Mapping):
        return config_from_table(value, label="the config mapping")
    if isinstance(value, (str, Path)):
        return load_config(value)
    raise ConfigError(f"{what}= takes a Config, a dict of [{TABLE}] keys (e.g. {{'ignore': ['HA202']}}), a path to "
                      f"a pyproject.toml, or None; got {type(value).__name__} {value!r:.80}")


def config_from_table(table: Mapping[str, Any], *, path: str | None = None, text: str | None = None,
                      label: str | None = None) -> Config:
    """Build a `Config` from the contents of a `[tool.hlo-analyzer]` table (already parsed TOML).

    Args:
      label: what to call the table in messages (default `[tool.hlo-analyzer]`; `as_config` says "the config
        mapping").

    Raises:
      ConfigError: naming the bad key (with its line in `text` when given) and the valid ones.
    """
    where = label or f"[{TABLE}]"

    def fail(message: str, key: str, table_name: str = TABLE) -> ConfigError:
        line = (find_key_line(text, key, table_name, deep=True) or find_value_line(text, key)) if text else None
        return ConfigError(message, path=path, line=line, source_line=toml_line(text, line))

    if not isinstance(table, Mapping):
        raise ConfigError(f"{where} must be a table", path=path)
    kwargs: dict[str, Any] = {"path": path}
    for raw_key, value in table.items():
        key = _top_key(raw_key)
        if key is None:
            raise fail(f"unknown key {raw_key!r} in {where}; " + valid_choices(str(raw_key), _TOP_KEYS, what="keys"),
                       raw_key)
        try:
            kwargs[key] = _READERS[key](raw_key, value)
        except _BadValue as e:
            raise fail(e.message, e.key or raw_key, e.table) from None
    # What to compile and price on is checked now, with its line, not after a compile.
    try:
        check_plan_keys(kwargs.get("hardware"), kwargs.get("topology"), kwargs.get("target"), mesh=kwargs.get("mesh"))
    except AnalyzerError as e:
        key = e.key or "hardware"
        raise fail(str(e), next(k for k in table if _top_key(k) == key)) from None
    try:
        return Config(**kwargs)
    except ConfigError as e:
        if e.line is None and text is not None and e.key:
            raise fail(e.message, e.key, e.table or TABLE) from None
        raise


def _top_key(raw_key: Any) -> str | None:
    """The `Config` field a key of the table sets (kebab- or snake-case), or None for an unknown key."""
    return _TOP_KEYS.get(raw_key) or _TOP_KEYS.get(str(raw_key).replace("_", "-"))


class _BadValue(Exception):
    """A table value of the wrong type or range: the message, and the key and table to place it at (default:
    the top-level key being read)."""

    def __init__(self, message: str, key: str | None = None, table: str = TABLE) -> None:
        super().__init__(message)
        self.message, self.key, self.table = message, key, table


def _strings(raw_key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _BadValue(f"{raw_key!r} must be a list of strings, got {value!r}")
    return tuple(value)


def _number(raw_key: str, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _BadValue(f"{raw_key!r} must be a number, got {value!r}")
    return value


def _switch(raw_key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _BadValue(f"{raw_key!r} must be true or false, got {value!r}")
    return value


def _string(raw_key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _BadValue(f"{raw_key!r} must be a string, got {value!r}")
    return value


def _timeout(raw_key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 7 * 86400:
        raise _BadValue(f"'timeout' must be a number of seconds above 0 (at most a week), got {value!r}")
    return float(value)


def _mesh(raw_key: str, value: Any) -> Mapping[str, int]:
    if not isinstance(value, Mapping) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value.values()
    ):
        raise _BadValue(f"'mesh' must be a table of axis name = positive size, got {value!r}")
    return MappingProxyType(dict(value))


def _budgets(raw_key: str, value: Any) -> Budgets:
    if not isinstance(value, Mapping):
        raise _BadValue("'budgets' must be a table")
    b: dict[str, Any] = {}
    for bk, bv in value.items():
        name = _BUDGET_KEYS.get(bk) or _BUDGET_KEYS.get(bk.replace("_", "-"))
        if name is None:
            raise _BadValue(f"unknown budget {bk!r}; " + valid_choices(bk, _BUDGET_KEYS, what="budgets"),
                            bk, f"{TABLE}.budgets")
        try:
            Budgets(**{name: bv})
        except ConfigError as e:
            raise _BadValue(e.message, bk, f"{TABLE}.budgets") from None
        b[name] = bv
    return Budgets(**b)


def _xla_flags(raw_key: str, value: Any) -> dict[str, Any]:
    from analyzer.compile.xlaflags import parse_xla_flags

    if isinstance(value, Mapping) or not (isinstance(value, str) or (
            isinstance(value, list) and all(isinstance(v, str) for v in value))):
        raise _BadValue(f"{raw_key!r} must be a string of flags or a list of them, e.g. "
                        "\"--xla_tpu_enable_async_collective_fusion_multiple_steps=true\"")
    try:
        return parse_xla_flags(value, where=repr(raw_key))
    except ConfigError as e:
        raise _BadValue(e.message) from None


def _rule_tables(raw_key: str, value: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(value, Mapping) or not all(isinstance(v, Mapping) for v in value.values()):
        raise _BadValue("'rules' must hold one table per rule: [tool.hlo-analyzer.rules.HA301]")
    return {k: dict(v) for k, v in value.items()}


# `Config` field -> the reader of its value in the table (checks the type and range, converts).
_READERS: Mapping[str, Callable[[str, Any], Any]] = MappingProxyType({
    "select": _strings, "ignore": _strings, "entry_points": _strings, "cache_inputs": _strings,
    "min_saving_seconds": _number, "min_saving_fraction": _number, "baseline_tolerance": _number,
    "cache": _switch, "hardware": _string, "topology": _string, "target": _string, "baseline": _string,
    "cache_dir": _string, "timeout": _timeout, "mesh": _mesh, "budgets": _budgets, "rules": _rule_tables,
    "xla_flags": _xla_flags,
})


def check_plan_keys(hardware: str | None, topology: str | None, target: str | None,
                    mesh: Mapping[str, int] | None = None) -> None:
    """Check hardware, topology and target values as a config gives them, before anything compiles; with a
    `mesh` and a `topology`, that the mesh has as many devices as the slice has chips.

    Raises:
      AnalyzerError: with a `key` attribute naming the bad one ("hardware", "topology", "target" or "mesh").
    """
    from analyzer.compile.lower import parse_target
    from analyzer.theory.hardware import load_hardware
    from analyzer.theory.topology import parse_slice

    hw = None
    for key, value, check in (("hardware", hardware, load_hardware), ("target", target, parse_target)):
        if value is None:
            continue
        try:
            result = check(value)
        except AnalyzerError as e:
            e.key = key
            raise
        if key == "hardware":
            hw = result
    if topology is not None:
        try:
            sl = parse_slice(topology, hw)
        except AnalyzerError as e:
            e.key = "topology"
            raise
        n = math.prod(mesh.values()) if mesh else None
        if n is not None and n != sl.size:
            err = MeshError(f"the mesh {', '.join(f'{k}={v}' for k, v in mesh.items())} has {n} devices but the "
                              f"topology {topology!r} has {sl.size} chips; give a mesh of {sl.size} devices or "
                              "another topology")
            err.key = "mesh"
            raise err
