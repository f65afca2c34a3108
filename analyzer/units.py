"""Human-readable numbers for every renderer: seconds, bytes, FLOPs, ratios.

One place decides how a figure looks, so the terminal, Markdown and HTML reports print the same value the
same way. Pure functions of a number; no locale, no state.
"""

from __future__ import annotations

import math

__all__ = ["seconds_unit", "format_seconds", "format_bytes", "format_flops", "format_ratio", "format_count"]

_TIME_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))
_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
_FLOP_UNITS = ((1e18, "EFLOP"), (1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP"))


def _is_missing(value: float | int | None) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _three_digits(x: float) -> str:
    """x with three significant digits, no exponent: 377, 37.7, 3.77."""
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def seconds_unit(seconds: float) -> tuple[float, str]:
    """The largest time unit that keeps `seconds` at least 1 (ns below that), as (scale, name).

    Example:
      >>> seconds_unit(3.77e-4)
      (1e-06, 'µs')
    """
    magnitude = abs(seconds)
    return next(((scale, unit) for scale, unit in _TIME_UNITS if magnitude >= scale), _TIME_UNITS[-1])


def format_seconds(seconds: float | None) -> str:
    """Seconds in the largest unit that keeps the number at least 1, three significant digits.

    Args:
      seconds: a duration; None or NaN prints as an em dash.

    Returns:
      e.g. "377 µs".

    Example:
      >>> format_seconds(3.77e-4)
      '377 µs'
    """
    if _is_missing(seconds):
        return "—"
    if seconds == 0:
        return "0 s"
    if math.isinf(seconds):
        return "∞"
    sign, magnitude = ("-" if seconds < 0 else ""), abs(seconds)
    scale, unit = seconds_unit(magnitude)
    if magnitude < scale:  # under a nanosecond
        return f"{sign}{magnitude / scale:.2g} {unit}"
    return f"{sign}{_three_digits(magnitude / scale)} {unit}"


def format_bytes(n: float | None) -> str:
    """Bytes in binary units (KiB = 1024 B), three significant digits.

    Example:
      >>> format_bytes(1048576)
      '1.00 MiB'
    """
    if _is_missing(n):
        return "—"
    value = float(n)
    if abs(value) < 1024:
        return f"{int(value)} B"
    for unit in _BYTE_UNITS[1:]:
        value /= 1024.0
        if abs(value) < 1024 or unit == _BYTE_UNITS[-1]:
            return f"{_three_digits(value)} {unit}"
    raise AssertionError("unreachable")


def format_flops(flops: float | None) -> str:
    """A FLOP count with an SI prefix.

    Example:
      >>> format_flops(2.5e12)
      '2.50 TFLOP'
    """
    if _is_missing(flops):
        return "—"
    for scale, unit in _FLOP_UNITS:
        if abs(flops) >= scale:
            return f"{_three_digits(flops / scale)} {unit}"
    return f"{flops:.0f} FLOP"


def format_ratio(ratio: float | None) -> str:
    """A dimensionless ratio such as comm/compute.

    Example:
      >>> format_ratio(0.4567)
      '0.46'
    """
    if _is_missing(ratio):
        return "—"
    if math.isinf(ratio):
        return "∞ (no compute)"
    return f"{ratio:.3g}" if ratio >= 10 else f"{ratio:.2f}"


def format_count(n: int | float | None) -> str:
    """An execution count with thousands separators.

    Example:
      >>> format_count(12000)
      '12,000'
    """
    if _is_missing(n):
        return "—"
    return f"{int(n):,}"
