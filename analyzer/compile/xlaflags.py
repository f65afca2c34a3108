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
from typing import Union

from analyzer.errors import ConfigError

__all__ = ["FlagValue", "parse_xla_flags", "format_xla_flags", "UNKNOWN_OPTION", "OWN_FLAGS"]

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
