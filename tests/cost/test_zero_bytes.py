"""A collective that moves no bytes is priced without error on every kind of hardware: a GPU's tree formula divided
by its own time to write its bandwidth (a raw ZeroDivisionError for 0 bytes). It moves nothing: no bandwidth time."""

from __future__ import annotations

import math

import pytest

from analyzer.theory.cost import collective_cost
from analyzer.theory.hardware import load_hardware
from analyzer.theory.topology import Topology


@pytest.mark.parametrize("hardware", ["h100", "tpu-v5e"])
@pytest.mark.parametrize("kind", ["all-gather", "reduce-scatter", "all-reduce"])
def test_zero_bytes_are_priced(hardware, kind):
    topology = Topology.for_mesh(load_hardware(hardware), ("x",), (8,))
    cost = collective_cost(kind, 0, "x", topology)
    assert math.isfinite(cost.seconds) and cost.bytes == 0
    assert (cost.bandwidth_seconds or 0.0) == 0.0
    assert "nan" not in cost.formula and "inf" not in cost.formula
