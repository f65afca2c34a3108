"""How numbers print in every report."""

import math

import pytest

from analyzer.units import format_bytes, format_count, format_flops, format_ratio, format_seconds


@pytest.mark.parametrize("seconds, text", [
    (3.77e-4, "377 µs"), (5.6e-4, "560 µs"), (2.9e-6, "2.90 µs"), (1.2, "1.20 s"), (0.0123, "12.3 ms"),
    (4.5e-8, "45.0 ns"), (0.0, "0 s"), (-3.77e-4, "-377 µs"), (None, "—"), (math.nan, "—"), (math.inf, "∞"),
])
def test_seconds(seconds, text):
    assert format_seconds(seconds) == text


@pytest.mark.parametrize("n, text", [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.00 KiB"), (16384, "16.0 KiB"), (512 * 1024, "512 KiB"),
    (1 << 20, "1.00 MiB"), (5 * (1 << 30), "5.00 GiB"), (None, "—"),
])
def test_bytes(n, text):
    assert format_bytes(n) == text


def test_flops_ratio_count():
    assert format_flops(2.5e12) == "2.50 TFLOP"
    assert format_flops(1.0e15) == "1.00 PFLOP"
    assert format_ratio(0.4567) == "0.46"
    assert format_ratio(math.inf).startswith("∞")
    assert format_count(12000) == "12,000"
