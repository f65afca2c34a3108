"""The user's XLA flags (`--xla-flags`, `xla-flags` in `[tool.hlo-analyzer]`, `lower(xla_flags=...)`), read as data.

Flags reach the compilers as per-compile options (`CompileOptions.env_option_overrides`, what
`jax.jit(f).lower(...).compile(compiler_options)` sets), not through the environment: libtpu reads
`LIBTPU_INIT_ARGS` once, when it starts, and for the whole process, while the compile options reach its compiler
for this one compile (libtpu's compile-only client accepts `xla_tpu_*` flags there; it refuses a name it does not
know with "No such compile option"). The CPU compiler knows only the generic `DebugOptions` flags: the cpu target
passes the flags it knows and keeps the others (TPU flags such as `xla_tpu_enable_async_collective_fusion`) as data
for the step model (`Lowered.xla_flags`, `Report.analysis.xla_flags`), which the report names.

Example:
    >>> parse_xla_flags("--xla_tpu_enable_async_collective_fusion=true --xla_tpu_overlap_compute_collective_tc")
    {'xla_tpu_enable_async_collective_fusion': True, 'xla_tpu_overlap_compute_collective_tc': True}
    >>> parse_xla_flags(["--xla_dump_max_hlo_modules=3", "--xla_foo=0.5", "--xla_bar=abc"])
    {'xla_dump_max_hlo_modules': 3, 'xla_foo': 0.5, 'xla_bar': 'abc'}
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Union

from analyzer.errors import ConfigError

__all__ = ["FlagValue", "parse_xla_flags", "format_xla_flags", "UNKNOWN_OPTION", "OWN_FLAGS", "OverlapFlags",
           "overlap_flags"]

FlagValue = Union[bool, int, float, str]
_NAME = re.compile(r"xla_[a-z0-9_]+")
# What XLA (CPU client and libtpu alike) says of a compile option it does not know.
UNKNOWN_OPTION = re.compile(r"No such compile option: '([^']+)'")
# Flags the tool sets itself for every compile: a user's value would break what the analysis reads.
OWN_FLAGS = ("xla_dump_to", "xla_dump_hlo_pass_re", "xla_dump_hlo_as_text", "xla_force_host_platform_device_count")


def _value(text: str) -> FlagValue:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return text
    return number if number == number and abs(number) != float("inf") else text


def parse_xla_flags(flags: str | Sequence[str] | Mapping[str, object] | None,
                    where: str = "--xla-flags") -> dict[str, FlagValue]:
    """The flags as `{name: value}` (names without `--`; `true`/`false` as bools, numbers as numbers, a bare
    flag with no value as True). Later flags override earlier ones, as on XLA's own command line.

    Raises:
      ConfigError: a token that is not `--xla_<name>[=<value>]` (named with its column in the text), or one of
        the flags the tool sets itself (`OWN_FLAGS`).
    """
    if flags is None:
        return {}
    if isinstance(flags, Mapping):
        items = [(str(k).lstrip("-"), v) for k, v in flags.items()]
        out: dict[str, FlagValue] = {}
        for name, value in items:
            _check_name(name, where, None, None)
            if not isinstance(value, (bool, int, float, str)):
                raise ConfigError(f"{where}: flag {name!r} has a {type(value).__name__} value; give a bool, a "
                                  "number or a string")
            out[name] = value
        return out
    text = flags if isinstance(flags, str) else " ".join(str(f) for f in flags)
    out = {}
    for m in re.finditer(r"\S+", text):
        token = m.group(0)
        column = m.start() + 1
        if not token.startswith("--"):
            raise ConfigError(f"{where}: {token!r} is not an XLA flag; write --xla_<name>=<value> (e.g. "
                              "--xla_tpu_enable_async_collective_fusion=true)", column=column, source_line=text,
                              line=1)
        name, eq, value = token[2:].partition("=")
        _check_name(name, where, column, text)
        out[name] = _value(value) if eq else True
    return out


def _check_name(name: str, where: str, column: int | None, text: str | None) -> None:
    if not _NAME.fullmatch(name):
        raise ConfigError(f"{where}: {name!r} is not an XLA flag name; names are lower case and start with xla_ "
                          "(e.g. xla_tpu_enable_async_collective_fusion)", column=column, source_line=text,
                          line=1 if text is not None else None)
    if name in OWN_FLAGS:
        raise ConfigError(f"{where}: {name} is set by hlo-analyzer for every compile (it reads the dumps); "
                          f"leave it out", column=column, source_line=text, line=1 if text is not None else None)


def format_xla_flags(flags: Mapping[str, FlagValue]) -> str:
    """The flags as XLA's command line writes them: `--NAME=VALUE` (each flag), bools as true/false.

    >>> format_xla_flags({"xla_a": True, "xla_b": 3})
    '--xla_a=true --xla_b=3'
    """
    def show(v: FlagValue) -> str:
        return ("true" if v else "false") if isinstance(v, bool) else str(v)

    return " ".join(f"--{k}={show(v)}" for k, v in flags.items())


# ------------------------------------------------------------------------------------------ what the step model reads
# Sources for what each flag does on TPU: jax's docs/xla_flags.md ("TPU XLA flags", "Common XLA flags") and OpenXLA's
# docs/flags_guidance.md (defaults and which flags work together). The step model's overlap model of unscheduled
# HLO (analyzer/analysis/step.py, docs/step.md "The user's XLA flags") reads the `OverlapFlags` below.
_ASYNC_KIND_FLAGS = {
    # an all-gather is asynchronous (issued behind the compute before its use) when all three allow it: OpenXLA's
    # flags guidance, "These 3 flags should be used in conjunction to activate asynchronous all-gather operations"
    # (defaults: kAuto, true, true, i.e. on)
    "all-gather": ("xla_enable_async_all_gather", "xla_tpu_enable_async_collective_fusion",
                   "xla_tpu_enable_async_collective_fusion_fuse_all_gather"),
    "reduce-scatter": ("xla_enable_async_reduce_scatter",),
    "all-reduce": ("xla_enable_async_all_reduce",),
    # "Rewrites all collective-permute operations to their asynchronous variants" (default kAuto)
    "collective-permute": ("xla_enable_async_collective_permute",),
    "all-to-all": ("xla_enable_async_all_to_all", "xla_tpu_enable_async_all_to_all"),
}
_MODELLED = {
    "xla_tpu_enable_async_collective_fusion_multiple_steps":
        "an asynchronous collective spans several compute ops: issued as soon as its operands exist, not behind "
        "the last dot before its use",
    "xla_tpu_enable_data_parallel_all_reduce_opt":
        "a DCN collective of a loop body (the data-parallel gradient all-reduce) finishes under the next "
        "iteration; without it, inside its own iteration",
    "xla_tpu_data_parallel_opt_different_sized_ops": "part of the data-parallel all-reduce pipelining above",
    "xla_tpu_enable_windowed_einsum_for_all_gather":
        "collective matmul: an all-gather feeding a dot runs during that dot (one shard's transfer exposed "
        "before it, and whatever the transfer outlasts the dot)",
    "xla_tpu_enable_windowed_einsum_for_reduce_scatter":
        "collective matmul: a reduce-scatter of a dot's result runs during that dot (one shard's transfer "
        "exposed after it, and whatever the transfer outlasts the dot)",
}
for _kind, _names in _ASYNC_KIND_FLAGS.items():
    for _n in _names:
        _MODELLED.setdefault(_n, f"{_kind}s asynchronous (issued ahead of their use) unless set to false, then "
                                 "synchronous (the compute waits where they stand)")
_NOT_MODELLED = {
    "xla_tpu_overlap_compute_collective_tc":
        "overlap of compute and communication on one TensorCore: the overlap model already lets compute run "
        "while a collective is in flight",
    "xla_tpu_megacore_fusion_allow_ags": "megacore fusion of all-gathers: the model does not split a chip's cores",
    "xla_tpu_enable_ag_backward_pipelining":
        "megascale (DCN) all-gathers fetched an iteration ahead in scan loops: not modelled (nothing is fetched "
        "an iteration ahead)",
    "xla_tpu_spmd_rng_bit_generator_unsafe": "how random numbers are partitioned: no effect on the overlap",
}


def _on(value: FlagValue) -> bool:
    """A flag's value as on/off: true/1/kEnabled/kAuto/auto are on (kAuto: on where the platform implements it,
    as TPUs do), false/0/kDisabled off."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 0
    return str(value).strip().lower() not in ("false", "0", "kdisabled", "disabled", "off", "no")


@dataclass(frozen=True)
class OverlapFlags:
    """What the user's XLA flags change in the step model's overlap model (analyzer/analysis/step.py).

    Attributes:
      synchronous_kinds: collective kinds a flag set to false makes synchronous (the compute stream waits for
        them where they stand).
      multiple_steps: `xla_tpu_enable_async_collective_fusion_multiple_steps`: an asynchronous collective is
        issued as soon as its operands exist (it may span several compute ops), not behind the last dot before
        its first use.
      dcn_pipelined: `xla_tpu_enable_data_parallel_all_reduce_opt`: a DCN collective of a loop body whose result
        the next iteration does not compute with finishes under the next iteration.
      windowed_all_gather, windowed_reduce_scatter: collective matmul (`xla_tpu_enable_windowed_einsum_for_*`).
      modelled, not_modelled, unknown: the flags given, by what the step model does with them ({name: what}).
    """

    synchronous_kinds: frozenset[str] = frozenset()
    multiple_steps: bool = False
    dcn_pipelined: bool = False
    windowed_all_gather: bool = False
    windowed_reduce_scatter: bool = False
    modelled: dict[str, str] = field(default_factory=dict)
    not_modelled: dict[str, str] = field(default_factory=dict)
    unknown: tuple[str, ...] = ()

    def note(self) -> str | None:
        """The report's sentence on the flags: which the step model modelled and which not (None: no flags)."""
        if not (self.modelled or self.not_modelled or self.unknown):
            return None
        parts = []
        if self.modelled:
            parts.append("modelled: " + "; ".join(f"{k} ({v})" for k, v in self.modelled.items()))
        if self.not_modelled:
            parts.append("not modelled: " + "; ".join(f"{k} ({v})" for k, v in self.not_modelled.items()))
        if self.unknown:
            parts.append("unknown to the step model (no effect on the prediction): " + ", ".join(self.unknown))
        return "XLA flags in the step model (docs/step.md, \"The user's XLA flags\"): " + ". ".join(parts) + "."


def overlap_flags(flags: Mapping[str, FlagValue] | None) -> OverlapFlags:
    """Read the user's flags (`parse_xla_flags`'s dict) as the step model's overlap settings.

    Without flags the model is as documented in docs/step.md (collectives asynchronous, the data-parallel DCN
    pipelining off, no collective matmul); each flag below moves one setting.

    Example:
        >>> f = overlap_flags(parse_xla_flags("--xla_tpu_enable_data_parallel_all_reduce_opt=true "
        ...                                   "--xla_enable_async_all_gather=false --xla_foo=1"))
        >>> f.dcn_pipelined, sorted(f.synchronous_kinds), f.unknown
        (True, ['all-gather'], ('xla_foo',))
    """
    flags = dict(flags or {})
    sync = {kind for kind, names in _ASYNC_KIND_FLAGS.items() if any(n in flags and not _on(flags[n]) for n in names)}
    modelled = {k: _MODELLED[k] for k in flags if k in _MODELLED}
    not_modelled = {k: _NOT_MODELLED[k] for k in flags if k in _NOT_MODELLED}
    unknown = tuple(k for k in flags if k not in _MODELLED and k not in _NOT_MODELLED)

    def on(name: str) -> bool:
        return name in flags and _on(flags[name])

    return OverlapFlags(
        synchronous_kinds=frozenset(sync), multiple_steps=on("xla_tpu_enable_async_collective_fusion_multiple_steps"),
        dcn_pipelined=on("xla_tpu_enable_data_parallel_all_reduce_opt"),
        windowed_all_gather=on("xla_tpu_enable_windowed_einsum_for_all_gather"),
        windowed_reduce_scatter=on("xla_tpu_enable_windowed_einsum_for_reduce_scatter"),
        modelled=modelled, not_modelled=not_modelled, unknown=unknown)
