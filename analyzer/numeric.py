"""Numbers read from users: finite, in range and normal, or an error naming the key and where it was (issue 27).

(Not `numbers`: a module of that name beside the package's others would shadow the standard library's for a child
process that has the package folder on its path.)

`nan` passes every `x < 0` test and `inf` every `x > 0` one, and a denormal such as `1e-320` divides into
infinity: a gate on such a value lets anything through, and a price computed from one is nonsense. Every
numeric input (command-line flags, `[tool.hlo-analyzer]`, report configs, baselines, JSON reports, hardware
specs) goes through `check_number`, or `loads_finite_json` for JSON text, which refuses `NaN`, `Infinity`
and numbers too large for a float at their line and column.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

from analyzer.errors import ConfigError

__all__ = ["check_number", "finite_float", "loads_finite_json", "number_problem"]


def number_problem(value: Any, *, minimum: float | None = None, positive: bool = False,
                   maximum: float | None = None) -> str | None:
    """What is wrong with `value` as a number, in words, or None when it is a usable one.

    Example:
        >>> number_problem(float("nan")), number_problem(1e-320, positive=True), number_problem(2.0)
        ('it is NaN (not a number)', 'it is 1e-320, a denormal too small to compute with', None)
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"it is {value!r}, not a number"
    if isinstance(value, float) and math.isnan(value):
        return "it is NaN (not a number)"
    if isinstance(value, float) and math.isinf(value):
        return f"it is {'-' if value < 0 else ''}infinite"
    if value != 0 and abs(value) < sys.float_info.min:
        return f"it is {value!r}, a denormal too small to compute with"
    if positive and value <= 0:
        return f"it is {value!r}; it must be above 0"
    if minimum is not None and value < minimum:
        return f"it is {value!r}; it must be at least {minimum:g}"
    if maximum is not None and value > maximum:
        return f"it is {value!r}; it must be at most {maximum:g}"
    return None


def check_number(value: Any, key: str, *, path: str | None = None, line: int | None = None,
                 minimum: float | None = None, positive: bool = False, maximum: float | None = None) -> float:
    """`value` as a float, or a `ConfigError` naming `key`, the file and the line.

    Example:
        >>> check_number(float("inf"), "hop_latency", path="hw.toml", line=12, minimum=0)
        Traceback (most recent call last):
        analyzer.errors.ConfigError: hw.toml:12: error: hop_latency: it is infinite; give a finite number
    """
    problem = number_problem(value, minimum=minimum, positive=positive, maximum=maximum)
    if problem is not None:
        hint = "; give a finite number" if "NaN" in problem or "infinite" in problem else ""
        raise ConfigError(f"{key}: {problem}{hint}", path=path, line=line)
    return float(value)


def finite_float(flag: str, *, minimum: float | None = None, maximum: float | None = None):
    """An argparse `type=` for a flag taking a finite number (NaN, infinities and denormals refused).

    Example:
        >>> finite_float("--baseline-tolerance", minimum=0)("nan")
        Traceback (most recent call last):
        argparse.ArgumentTypeError: --baseline-tolerance takes a finite number, got 'nan' (it is NaN (not a number))
    """
    import argparse

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} takes a number, got {text!r}") from None
        problem = number_problem(value, minimum=minimum, maximum=maximum)
        if problem is not None:
            raise argparse.ArgumentTypeError(f"{flag} takes a finite number, got {text!r} ({problem})")
        return value

    return parse


class _Refused(ValueError):
    def __init__(self, token: str) -> None:
        super().__init__(token)
        self.token = token


def _constant(token: str) -> float:
    raise _Refused(token)


def _float(token: str) -> float:
    value = float(token)
    if math.isinf(value) or (value != 0 and abs(value) < sys.float_info.min):
        raise _Refused(token)
    return value


def loads_finite_json(text: str, *, path: str | None = None) -> Any:
    """`json.loads`, refusing `NaN`, `Infinity`, `-Infinity` (Python's json reads them; JSON has no such
    numbers) and numbers that overflow a float or are denormal, as a `ConfigError` at their line and column.
    Other syntax errors raise `json.JSONDecodeError` as `json.loads` does.

    Example:
        >>> loads_finite_json('{"a": 1,\\n "seconds": NaN}', path="r.json")
        Traceback (most recent call last):
        analyzer.errors.ConfigError: r.json:2:13: error: NaN is not a finite number; JSON numbers here must be finite
        ...
    """
    try:
        return json.loads(text, parse_constant=_constant, parse_float=_float)
    except _Refused as e:
        line = column = None
        source = None
        m = re.search(r"(?<![\w.])" + re.escape(e.token) + r"(?![\w.])", text)
        if m:
            line = text.count("\n", 0, m.start()) + 1
            start = text.rfind("\n", 0, m.start()) + 1
            column = m.start() - start + 1
            end = text.find("\n", m.start())
            source = text[start:end if end >= 0 else len(text)]
        raise ConfigError(f"{e.token[:40]} is not a finite number; JSON numbers here must be finite", path=path,
                          line=line, column=column, source_line=source) from None
