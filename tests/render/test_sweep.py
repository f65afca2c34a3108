"""Sweep ranking: by the predicted step (compute + comm for entries made without one), plans that fit in HBM
first, failures last."""

import math

import pytest

from analyzer.errors import ConfigError
from analyzer.workflows.reportconfig import parse_report_config
from analyzer.workflows.sweep import (
    Candidate,
    SweepEntry,
    SweepResult,
    candidates,
    memory_per_device,
    plan_note,
    rank_entries,
)

CONFIG = """\
strategy = "fsdp+tp"
[mesh]
data = 4
model = 2
[model]
d_model = 256
d_ff = 1024
layers = 2
"""


def test_rank_by_step_time_then_fit_then_failures():
    hbm = 16 << 30
    ranked = rank_entries(
        [
            SweepEntry(
                "tp", "data=1,model=8", comm_seconds=3e-3, compute_seconds=1e-3, memory_bytes=1 << 30, hbm_bytes=hbm
            ),
            SweepEntry("ep", "data=8,model=1", error="MeshError: x"),
            SweepEntry(
                "dp", "data=8,model=1", comm_seconds=1e-4, compute_seconds=1e-3, memory_bytes=40 << 30, hbm_bytes=hbm
            ),  # fastest but does not fit
            SweepEntry(
                "fsdp", "data=8,model=1", comm_seconds=2e-3, compute_seconds=1e-3, memory_bytes=2 << 30, hbm_bytes=hbm
            ),
        ]
    )
    assert [e.strategy for e in ranked] == ["fsdp", "tp", "dp", "ep"]
    assert [e.rank for e in ranked] == [1, 2, 3, 4]
    assert ranked[0].step_seconds == pytest.approx(3e-3) and ranked[0].overlap_step_seconds == pytest.approx(2e-3)
    assert ranked[2].fits is False and ranked[3].ok is False
    result = SweepResult(ranked, hardware="tpu-v5e")
    assert result.best.strategy == "fsdp"
    data = result.to_dict()
    assert data["entries"][3]["step_seconds"] is None and data["best"] == "fsdp @ data=8,model=1"


def test_rank_by_the_predicted_step_not_the_sum_of_collectives():
    """Issue 10: the same 3 ms of communication hidden behind compute (fsdp: step 1.2 ms) beats 2 ms of it
    exposed (tp: step 2.9 ms). The entries show the wait and the MFU the step model predicted."""
    tp = SweepEntry("tp", "data=1,model=8", comm_seconds=2e-3, compute_seconds=1e-3, predicted_step_seconds=2.9e-3,
                    exposed_comm_seconds=1.9e-3, mfu=0.21)
    fsdp = SweepEntry("fsdp", "data=8,model=1", comm_seconds=3e-3, compute_seconds=1e-3,
                      predicted_step_seconds=1.2e-3, exposed_comm_seconds=0.2e-3, mfu=0.52)
    ranked = rank_entries([tp, fsdp])
    assert [e.strategy for e in ranked] == ["fsdp", "tp"]
    assert ranked[0].step_seconds == pytest.approx(1.2e-3) and ranked[0].serial_step_seconds == pytest.approx(4e-3)
    data = SweepResult(ranked, hardware="tpu-v5e").to_dict()["entries"][0]
    assert data["step_seconds"] == pytest.approx(1.2e-3) and data["exposed_comm_seconds"] == pytest.approx(0.2e-3)
    assert data["mfu"] == pytest.approx(0.52) and data["serial_step_seconds"] == pytest.approx(4e-3)
    # by hand (no step model): compute + comm, and no exposed/MFU figures
    plain = SweepEntry("dp", "data=8", 1e-3, 1e-3).to_dict()
    assert plain["step_seconds"] == pytest.approx(2e-3) and plain["mfu"] is None and plain["exposed_comm_seconds"] is None


def test_tables_show_exposed_communication_and_mfu():
    from analyzer.render.markdown import sweep_section

    e = SweepEntry("fsdp", "data=8,model=1", comm_seconds=3e-3, compute_seconds=1e-3, predicted_step_seconds=1.2e-3,
                   exposed_comm_seconds=0.2e-3, mfu=0.52)
    text = sweep_section(SweepResult(rank_entries([e]), hardware="tpu-v5e"))
    assert "| exposed comm | MFU |" in text and "| 1.20 ms | 200 µs | 52.0% |" in text


def test_equal_predictions_are_marked():
    ranked = rank_entries(
        [
            SweepEntry("fsdp", "data=8,model=1", 1e-3, 1e-3, memory_bytes=5),
            SweepEntry("fsdp", "data=4,model=2", 1e-3, 1e-3, memory_bytes=5),
        ]
    )
    assert ranked[0].same_as is None and ranked[1].same_as == 1


def test_memory_per_device():
    assert memory_per_device({"argument_bytes": 10, "output_bytes": 10, "temp_bytes": 5, "alias_bytes": 10}) == 15
    assert memory_per_device(None) is None and memory_per_device({"other": 1}) is None


def test_candidates():
    cfg = parse_report_config(CONFIG)
    cands = candidates(cfg, [(8, 1), (4, 2)], ["fsdp", "tp"])
    assert cands == (
        Candidate((8, 1), "fsdp"),
        Candidate((4, 2), "fsdp"),
        Candidate((8, 1), "tp"),
        Candidate((4, 2), "tp"),
    )
    assert candidates(cfg) == (Candidate((4, 2), "fsdp+tp"),)  # default: the config's own plan
    with pytest.raises(ConfigError, match="different numbers of devices"):
        candidates(cfg, [(8, 1), (2, 2)], ["fsdp"])
    with pytest.raises(ConfigError, match="has 3 axes"):
        candidates(cfg, [(2, 2, 2)], ["fsdp"])
    assert "no tensor parallelism" in plan_note(cfg.with_plan((8, 1), "tp"))
    assert plan_note(cfg.with_plan((4, 2), "tp")) == ""


def test_entry_configs_sweep_shapes_only():
    cfg = parse_report_config('entry = "m:f"\n[mesh]\ndata = 4\nmodel = 2\n')
    assert candidates(cfg, [(8, 1)]) == (Candidate((8, 1), None),)
    with pytest.raises(ConfigError, match="built-in"):
        candidates(cfg, [(8, 1)], ["fsdp"])


def test_nan_when_failed():
    e = SweepEntry("tp", "m", error="x")
    assert math.isnan(e.step_seconds) and e.fits is None


def test_none_fit_is_flagged():
    result = SweepResult(
        rank_entries(
            [SweepEntry("dp", "a", 1e-3, 1e-3, memory_bytes=2, hbm_bytes=1), SweepEntry("tp", "b", error="x")]
        ),
        hardware="h",
    )
    assert result.none_fit
    assert not SweepResult(rank_entries([SweepEntry("dp", "a", 1e-3, 1e-3)]), hardware="h").none_fit


def test_plans_whose_step_ranges_overlap_are_a_tie():
    """Two plans whose calibration ranges overlap cannot be told apart (issue 25 item 6): `tied_with` says so."""
    from analyzer.workflows.sweep import SweepEntry, rank_entries

    def entry(name: str, step: float) -> SweepEntry:
        return SweepEntry(name, "data=8", 1e-3, 1e-3, predicted_step_seconds=step, step_low=0.97 * step,
                          step_high=1.16 * step)

    a, b, c = rank_entries([entry("tp", 1.10e-3), entry("fsdp", 1.00e-3), entry("dp", 2.0e-3)])
    assert [e.strategy for e in (a, b, c)] == ["fsdp", "tp", "dp"]
    assert (a.tied_with, b.tied_with, c.tied_with) == (None, 1, None)
    assert b.to_dict()["tied_with"] == 1 and b.to_dict()["step_range"] == [pytest.approx(1.067e-3), pytest.approx(1.276e-3)]
