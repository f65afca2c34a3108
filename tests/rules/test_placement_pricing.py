"""HA204 prices the step's collectives again on each explicit placement of the mesh. A collective the cost
model cannot price on a placement leaves what that placement saves unknown: the placement is not offered,
rather than that collective counted as free there (docs/rules.md, HA204).

The report is a committed fixture (real XLA output, analysed without compiling): the FSDP+TP MLP step on
{X: 2, Y: 4} of v5e:2x4, where jax.make_mesh lays X across x and y and the in-order placement takes some of
the step's exposed communication away (tests/rules/test_rules.py checks such savings against worked answers).
"""

from pathlib import Path

import pytest

import analyzer
from analyzer.rules import run_rules
from analyzer.rules.mesh import explicit_placements
from analyzer.theory import cost

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures/tpu-v5e-2x4/X2_Y4/fsdp_tp_mlp_step.final.hlo"


@pytest.fixture(scope="module")
def report():
    return analyzer.analyze_hlo(FIXTURE, mesh="X=2,Y=4", hardware="tpu-v5e")


def straddling(diagnostics):
    return [d for d in diagnostics if d.code == "HA204"]


def test_the_in_order_placement_is_offered(report):
    (d,) = straddling(run_rules(report))
    assert d.details["placement"] == "v5e:2x4@in-order" and d.details["axis"] == "X"
    assert d.saving_seconds > 0


def test_a_placement_with_an_unpriceable_collective_is_not_offered(report, monkeypatch):
    """The step's all-reduce over (X, Y) made unpriceable on the in-order placement (and only there): had it
    been taken as free, the placement would claim that collective's time (8 us per step) as a saving too."""
    (text, placed), = explicit_placements(report.analysis.topology)
    assert text == "v5e:2x4@in-order"
    priced = cost.collective_cost

    def collective_cost(kind, nbytes, axes, topology, **kw):
        if kind == "all-reduce" and tuple(topology.coords) == tuple(placed.coords):
            raise cost.CostModelError(f"cannot price {kind} over {axes} here (test)")
        return priced(kind, nbytes, axes, topology, **kw)

    monkeypatch.setattr(cost, "collective_cost", collective_cost)
    assert straddling(run_rules(report)) == []
