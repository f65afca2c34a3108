"""The whole-step model (analyzer.analysis.step) and its Chrome trace, on checked-in fixtures (no compile).

Invariants checked by hand-derivable bounds: the compute stream waits only for links, so
compute <= step <= compute + comm; exposed = step - compute and the rows' exposed_seconds add up to it;
the trace's durations per track add up to the model's busy time per track.
"""

import json
from pathlib import Path

import pytest

import analyzer
from analyzer.errors import AnalyzerError
from analyzer.render.trace import WAIT_TRACK, check_trace_path, trace_events, write_trace

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CASES = [("cpu/X8/fsdp_mlp_step.spmd.hlo", "X=8"), ("tpu-v5e-2x4/X2_Y4/fsdp_mlp_step.final.hlo", "X=2,Y=4"),
         ("tpu-v5e-2x4/X2_Y4/fsdp_step.spmd.hlo", "X=2,Y=4")]


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def report(request):
    path, mesh = request.param
    return analyzer.analyze_hlo(FIXTURES / path, mesh=mesh, hardware="tpu-v5e")


def test_step_between_compute_and_compute_plus_comm(report):
    t = report.totals
    assert t.compute_seconds > 0
    assert t.compute_seconds - 1e-12 <= t.step_seconds <= t.compute_seconds + t.comm_seconds + 1e-12
    assert t.exposed_comm_seconds == pytest.approx(t.step_seconds - t.compute_seconds, rel=1e-9, abs=1e-15)
    assert float(report.collectives["exposed_seconds"].sum()) == pytest.approx(t.exposed_comm_seconds, rel=1e-6,
                                                                               abs=1e-12)
    assert 0 < t.mfu <= t.hfu <= 1


def test_trace_tracks_add_up_to_busy_time(report, tmp_path):
    path = write_trace(report, tmp_path / "step.json")
    data = json.loads(path.read_text())
    names = {e["tid"]: e["args"]["name"] for e in data["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    sums: dict[str, float] = {}
    for e in data["traceEvents"]:
        if e["ph"] == "X":
            sums[names[e["tid"]]] = sums.get(names[e["tid"]], 0.0) + e["dur"] * 1e-6
    step = report.analysis.step
    assert "compute" in sums and any(k not in ("compute", WAIT_TRACK) for k in sums)
    for track, busy in step.busy.items():
        if busy > 0:
            assert sums[track] == pytest.approx(busy, rel=1e-6)
    assert sums.get(WAIT_TRACK, 0.0) == pytest.approx(report.totals.exposed_comm_seconds, rel=1e-6, abs=1e-12)


def test_trace_path_checked(tmp_path):
    with pytest.raises(AnalyzerError, match="does not exist"):
        check_trace_path(tmp_path / "missing" / "step.json")
    with pytest.raises(AnalyzerError, match="folder"):
        check_trace_path(tmp_path)


def test_trace_needs_a_step(report):
    from analyzer.analysis.report import report_from_dict

    with pytest.raises(AnalyzerError, match="no step prediction"):
        trace_events(report_from_dict(report.to_dict()))
