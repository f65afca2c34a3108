"""Root causes (issue 11 item 2): findings grouped by the sharding decision behind them, judged and ranked by
the group's summed saving."""

from __future__ import annotations

import pandas as pd
import pytest

from analyzer.analysis.report import COLLECTIVE_COLUMNS, Report, Totals
from analyzer.diagnostics import Diagnostic, Location
from analyzer.render._common import headline, what_to_do
from analyzer.rules.rootcause import group_findings, split_negligible_groups, top_cause
from analyzer.rules.runner import split_negligible
from analyzer.rules.config import Config


def report_with(arrays: dict[str, str], diagnostics=(), comm=20e-3) -> Report:
    rows = [{**{c: None for c in COLLECTIVE_COLUMNS}, "instruction": name, "array": array}
            for name, array in arrays.items()]
    return Report(collectives=pd.DataFrame(rows, columns=list(COLLECTIVE_COLUMNS)), dots=pd.DataFrame(),
                  totals=Totals(comm, 0.0), hlo=None, mesh=None, hardware="tpu-v5e", topology="", target="dump",
                  diagnostics=tuple(diagnostics))


def reshard(i: int, saving: float, axis: str = "data") -> Diagnostic:
    return Diagnostic("HA302", "resharding-traffic", f"layer {i}", location=Location("m.py", 10 + i,
                      instruction=f"all-to-all.{i}"), notation=f"AllToAll_{axis}: [I_{axis}, J] -> [I, J_{axis}]",
                      seconds=2 * saving, saving_seconds=saving)


def test_eleven_small_reshards_of_one_layout_stand_together():
    # 11 instances of 0.5% each of 20 ms: each under the 1% threshold (200 us), 5.5% together.
    small = [reshard(i, 100e-6) for i in range(11)]
    report = report_with({})
    kept, dropped = split_negligible(small, Config(), 20e-3, report=report)
    assert len(kept) == 11 and not dropped
    (group,) = group_findings(small, report)
    assert group.kind == "activation layout" and group.subject == "data"
    assert group.saving_seconds == pytest.approx(11 * 100e-6)
    # one instance alone is still negligible
    kept, dropped = split_negligible(small[:1], Config(), 20e-3, report=report)
    assert not kept and dropped == small[:1]


def test_layers_of_one_argument_are_one_decision_and_each_collective_counts_once():
    arrays = {f"all-gather.{i}": f"params['layers_{i}']['w_in']['kernel']" for i in range(3)}
    found = [Diagnostic("HA101", "comm-bound-matmul", "m", location=Location("m.py", 5, instruction=f"all-gather.{i}"),
                        saving_seconds=1e-3) for i in range(3)]
    # a second rule pricing the same collective: the larger saving counts, once
    found.append(Diagnostic("HA102", "gathered-larger-operand", "m",
                            location=Location("m.py", 5, instruction="all-gather.0"), saving_seconds=4e-4))
    groups = group_findings(found, report_with(arrays))
    assert [(g.kind, g.subject) for g in groups] == [("argument", "params['layers_*']['w_in']['kernel']")]
    assert groups[0].saving_seconds == pytest.approx(3e-3)
    assert groups[0].title == "the sharding of params['layers_*']['w_in']['kernel']"


def test_the_headline_is_the_largest_root_cause_and_never_a_budget_overage():
    budget = Diagnostic("HA501", "comm-budget-exceeded", "141 ms over", saving_seconds=141e-3)
    small = [reshard(i, 100e-6) for i in range(11)]
    big = Diagnostic("HA101", "comm-bound-matmul", "m", location=Location("m.py", 5, instruction="all-gather.1"),
                     saving_seconds=800e-6, fix="shard w_in's F over model")
    report = report_with({"all-gather.1": "params['w_in']"}, [budget, big, *small])
    top = top_cause(report.diagnostics, report)
    assert top.kind == "activation layout" and top.saving_seconds == pytest.approx(1.1e-3)  # 11 x 100 us > 800 us
    assert dict(headline(report))["Top fix saves / step"] == "1.10 ms"
    text = what_to_do(report)
    assert text.startswith("Fix the activations' layout over 'data' first: 11 findings (HA302), 1.10 ms per step")
    # the overage is no saving: alone, there is nothing to headline
    alone = report_with({}, [budget])
    assert top_cause(alone.diagnostics, alone) is None and what_to_do(alone) is None
    assert "Top fix saves / step" not in dict(headline(alone))


def test_the_group_filter_keeps_exempt_rules():
    memory = Diagnostic("HA401", "memory-over-hbm", "over", saving_seconds=None)
    kept, dropped = split_negligible_groups([memory], None, lambda code: None)
    assert kept == [memory] and not dropped


def test_a_root_cause_saves_at_most_the_steps_exposed_communication():
    """Savings are in step time (issue 10): eleven 100 us findings sum to 1.1 ms, but a step that waits 0.6 ms
    for communication in all cannot lose more than 0.6 ms by any change of its collectives."""
    small = [reshard(i, 100e-6) for i in range(11)]
    base = report_with({}, small)
    stepped = Report(**{**base.__dict__, "totals": Totals(20e-3, 10e-3, step_seconds=10.6e-3,
                                                          exposed_comm_seconds=0.6e-3)})
    (group,) = group_findings(small, stepped)
    assert group.saving_seconds == pytest.approx(0.6e-3)
    assert dict(headline(stepped))["Top fix saves / step"] == "600 µs"
    (uncapped,) = group_findings(small, base)  # no predicted step: the findings' own sum
    assert uncapped.saving_seconds == pytest.approx(1.1e-3)


def test_a_cause_named_by_its_line_prints_the_path_as_locations_do(tmp_path, monkeypatch):
    """Issue 11: fallback titles printed absolute paths. They are relative to the working folder, as the
    reports print locations, and `check` makes them relative to the project root with the locations."""
    from pathlib import Path

    from analyzer.rules.rootcause import annotate
    from analyzer.workflows.check import EntryPoint, relative_to_root

    project = tmp_path / "proj"
    (project / "model").mkdir(parents=True)
    d = Diagnostic("HA101", "comm-bound-matmul", "m", location=Location(str(project / "model" / "train.py"), 44),
                   notation="AllGather_data: [I_data, J] -> [I, J]", saving_seconds=1e-3)
    monkeypatch.chdir(project)
    (titled,) = annotate([d])
    assert titled.details["root_cause"] == "HA101 comm-bound-matmul over 'data' at model/train.py:44"
    # `check` run from elsewhere: the title follows the location to the root-relative path
    monkeypatch.chdir(tmp_path)
    (titled,) = annotate([d])
    assert titled.details["root_cause"] == "HA101 comm-bound-matmul over 'data' at proj/model/train.py:44"
    moved = relative_to_root(titled, project, EntryPoint("model/train.py:step", None, None))
    assert str(moved.location) == "model/train.py:44"
    assert moved.details["root_cause"] == "HA101 comm-bound-matmul over 'data' at model/train.py:44"
    assert str(Path(d.location.file)) not in str(moved.details)


def test_an_argument_s_root_cause_proposes_its_largest_finding_s_spec():
    """One change per root cause (issue 26): HA104 writes batch['x']'s PartitionSpec; HA201's advice for the same
    argument ("shard it over 'model' too") and a mesh change of the same root cause take it, keeping their own."""
    from analyzer.rules.rootcause import RootCause, reconcile, spec_change

    h104 = Diagnostic("HA104", "redundant-compute", "m", fix="batch['x']: P() -> P('data')", saving_seconds=7e-5,
                      details={"argument": "batch['x']", "partition_spec": "P()", "proposed_partition_spec": "P('data')"})
    h201 = Diagnostic("HA201", "idle-links", "m", fix="add model to the PartitionSpec entry", saving_seconds=8e-6)
    fold = Diagnostic("HA101", "comm-bound-matmul", "m", fix="fold 'model' into 'data'", saving_seconds=5e-6,
                      details={"fix_mesh": {"model": 1, "data": 8}})
    info = Diagnostic("HA202", "no-wraparound", "m", fix="lay it on a ring")  # no saving: its own words stay
    g = RootCause("argument", "batch['x']", (h104, h201, fold, info), 9e-5)
    (out,) = reconcile([g], {"data": 4, "model": 2})
    lead, a, b, c = out.findings
    assert lead is h104 and c is info
    for d, own in ((a, h201), (b, fold)):
        assert spec_change(d) == {"batch['x']": "P('data')"} and not d.details["fix_mesh"]
        assert d.fix.startswith("batch['x']: P() -> P('data') (the one change for the sharding of batch['x']")
        assert d.details["reconciled"] and d.details["reconciled_fix"] == own.fix
    # a root cause led by a mesh change is reconcile's as before; one of another kind is left alone
    led = RootCause("argument", "params['w']", (fold, h201), 1e-5)
    assert reconcile([led], {"data": 4, "model": 2})[0].findings == (fold, h201)


def test_no_root_cause_writes_another_spec_for_an_argument_a_larger_one_changes():
    """The embedding plan (issue 26): the activations' layout over 'data' changes the table to P('model', None);
    a reshard of the table itself would write P(None, 'data') for it, undoing that: it proposes no change."""
    from analyzer.rules.rootcause import RootCause, reconcile, spec_change

    table = "params['wte']['embedding']"
    layout = Diagnostic("HA101", "comm-bound-matmul", "m", fix=f"{table}: P('model', 'data') -> P('model', None)",
                        saving_seconds=5e-5, details={"fix_spec": {"arguments": {table: "P('model', None)"}}})
    reshard = Diagnostic("HA302", "resharding-traffic", "m", fix=f"{table}: P('model', 'data') -> P(None, 'data')",
                         saving_seconds=1e-5, details={"argument": table, "proposed_partition_spec": "P(None, 'data')",
                                                       "fix_spec": {"arguments": {table: "P(None, 'data')"}}})
    other = Diagnostic("HA302", "resharding-traffic", "m", fix="y: P() -> P('data')", saving_seconds=1e-6,
                       details={"fix_spec": {"arguments": {"y": "P('data')"}}})
    groups = [RootCause("activation layout", "data", (layout,), 5e-5),
              RootCause("argument", table, (reshard,), 1e-5), RootCause("argument", "y", (other,), 1e-6)]
    out = reconcile(groups, {"data": 4, "model": 2})
    (kept,), (superseded,), (alone,) = (g.findings for g in out)
    assert kept is layout and alone is other
    assert spec_change(superseded) == {} and superseded.details["superseded_by"] == "the activations' layout over 'data'"
    assert superseded.fix.startswith(f"no change of its own: its own ({table} -> P(None, 'data')) would undo")
    assert superseded.details["superseded_fix"] == reshard.fix
