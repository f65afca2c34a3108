"""Rules read typed facts (issue 23): a report rebuilt from JSON prices on the Topology its `topology_spec` carries,
never on one read back from the sentence `Report.topology` says it in; a row's mesh axes are the typed tuple."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from analyzer.analysis.report import COLLECTIVE_COLUMNS, Report, Totals, report_from_dict
from analyzer.analysis.topology_json import topology_from_dict, topology_to_dict
from analyzer.errors import AnalyzerError
from analyzer.pipeline import analyze_hlo
from analyzer.rules import run_rules
from analyzer.rules.facts import Facts
from analyzer.theory.mesh import MeshInfo
from analyzer.theory.topology import Topology

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "cpu" / "X2_Y4" / "fsdp_tp_mlp_step.spmd.hlo"


@pytest.fixture(scope="module")
def live():
    return analyze_hlo(FIXTURE, mesh="X=2,Y=4", hardware="tpu-v5e")


def test_round_trip_gives_the_rules_the_same_topology_and_findings(live):
    """jax.make_mesh's placement on the v5e:2x4 the analysis chose: the rebuilt report's rules price every
    collective alike and find what the live report's find without the HLO (HA204 re-prices the whole step)."""
    data = json.loads(live.to_json())
    spec = data["topology_spec"]
    assert spec["origin"] == "jax.make_mesh" and spec["declared"] is False and spec["slice"] == "v5e:2x4"
    assert spec["placement"] == {"X": ["x", "y"], "Y": ["x", "y"]} and "device_coords" not in spec
    again = report_from_dict(data)
    a, b = Facts.from_report(live), Facts.from_report(again)
    assert b.topology.coords == a.topology.coords and b.topology.slice == a.topology.slice
    assert [b.price(c.kind, c.bytes, c.axes) for c in b.collectives] == \
        [a.price(c.kind, c.bytes, c.axes) for c in a.collectives]
    without_hlo = {"HA202", "HA203", "HA204", "HA501", "HA502"}  # the rules that read no HLO
    mine = [(d.code, d.message, d.saving_seconds) for d in run_rules(live) if d.code in without_hlo]
    assert mine and mine == [(d.code, d.message, d.saving_seconds) for d in run_rules(again) if d.code in without_hlo]


def test_the_sentence_is_never_read_back(live):
    """Without a spec (a report written before it), the words "placed where jax.make_mesh ... slice v5e:2x4"
    are not parsed into a topology: pricing says it cannot."""
    data = json.loads(live.to_json())
    del data["topology_spec"]
    again = report_from_dict(data)
    assert "placed where jax.make_mesh" in again.topology
    facts = Facts.from_report(again)
    assert facts.topology is None and facts.axes == {}
    with pytest.raises(AnalyzerError, match="no topology"):
        facts.price("all-gather", 1e6, ("X",))


@pytest.mark.parametrize("layout", [
    dict(topology="v5e:2x4@data=x,model=y"),  # an explicit mapping
    dict(topology="v5e:2x4", device_coords=[(0, 0), (1, 0), (0, 1), (1, 1), (1, 3), (0, 3), (1, 2), (0, 2)]),
    dict(topology="v5e:16x16*2"),  # two slices over DCN, in order
])
def test_every_placement_is_rebuilt_exactly(layout):
    sizes = (2, 4) if "16x16" not in layout["topology"] else (2, 256)
    t = Topology.for_mesh("tpu-v5e", ("data", "model"), sizes, **layout)
    spec = json.loads(json.dumps(topology_to_dict(t)))
    again = topology_from_dict(spec, ("data", "model"), sizes)
    assert (again.coords, again.slice, again.origin, again.declared) == (t.coords, t.slice, t.origin, t.declared)
    assert again.describe() == t.describe()


def test_a_placement_jax_would_make_differently_is_not_taken():
    """jax.make_mesh's placement computed again must land where the spec says each axis lay (another jax may
    place it otherwise): else the report has no topology rather than another one."""
    t = Topology.for_mesh("tpu-v5e", ("X", "Y"), (2, 4), topology="v5e:2x4")
    spec = {**topology_to_dict(t), "origin": "jax.make_mesh", "placement": {"X": ["y"], "Y": ["x", "y"]}}
    assert topology_from_dict(spec, ("X", "Y"), (2, 4)) is None


@pytest.mark.parametrize("change,says", [
    ({"origin": "zig-zag"}, "'origin' must be one of"),
    ({"physical_axes": [{"label": "x", "size": "2"}]}, "'physical_axes' must be"),
    ({"slice": "v5e:4x2"}, "make the slice 'v5e:2x4'"),
    ({"origin": "device coords", "device_coords": [[0, 0]] * 8}, "each of the 8 chips"),
    ({"declared": "yes"}, "'declared' must be true or false"),
])
def test_a_bad_spec_is_named(change, says):
    spec = {**topology_to_dict(Topology.for_mesh("tpu-v5e", ("X", "Y"), (2, 4), topology="v5e:2x4")), **change}
    with pytest.raises(AnalyzerError, match="topology_spec") as e:
        topology_from_dict(spec, ("X", "Y"), (2, 4))
    assert says in str(e.value)


def test_axes_are_the_rows_typed_tuple_never_split_from_text():
    def report(axes):
        row = {**{c: None for c in COLLECTIVE_COLUMNS}, "kind": "all-gather", "axes": axes, "bytes": 1e6,
               "seconds": 1e-5, "count": 1, "instruction": "all-gather.1"}
        return Report(collectives=pd.DataFrame([row], columns=list(COLLECTIVE_COLUMNS)), dots=pd.DataFrame(),
                      totals=Totals(1e-3, 2e-3), hlo=None, mesh=MeshInfo(("X", "Y"), (2, 4), tuple(range(8))),
                      hardware="tpu-v5e", topology="", target="cpu")

    assert Facts.from_report(report(("X", "Y"))).collectives[0].axes == ("X", "Y")
    assert Facts.from_report(report(None)).collectives[0].axes == ()
    with pytest.raises(AnalyzerError, match=r"collective row 0: 'axes' must be a sequence of mesh axis names"):
        Facts.from_report(report("('X', 'Y')"))
