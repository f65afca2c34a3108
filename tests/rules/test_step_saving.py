"""Savings in step time (issue 10 item 4; docs/rules.md, "Savings in step time"): a change to some collectives
is worth the exposed time it removes, max(0, min(e_C, t_C - t'_C)), never more than it takes off the links."""

from __future__ import annotations

import pytest

from analyzer.rules.facts import Coll, step_saving


def coll(seconds: float, exposed: float, count: float = 1.0, row: int = 0) -> Coll:
    return Coll(row=row, kind="all-gather", axes=("X",), notation="", dtype="bf16", bytes=1e6, count=count,
                seconds=seconds, regime="bandwidth", op_name="", source="", per_device_bytes=0, group_size=8,
                computation="", instruction=f"all-gather.{row}", hlo_line=None, overlapped=False,
                exposed_seconds=exposed)


def test_a_hidden_collective_saves_nothing():
    s = step_saving([(coll(1e-3, 0.0), 0.0)])
    assert s.comm == pytest.approx(1e-3) and s.seconds == 0.0 and s.hidden


def test_an_exposed_collective_saves_up_to_its_wait():
    # 2 calls of 1 ms, 0.5 ms of the step waited for them; halving them takes 1 ms off the links
    s = step_saving([(coll(1e-3, 0.5e-3, count=2), 0.5e-3)])
    assert s.comm == pytest.approx(1e-3) and s.exposed == pytest.approx(0.5e-3) and s.seconds == pytest.approx(0.5e-3)
    # all exposed: the saving is what leaves the links
    s = step_saving([(coll(1e-3, 2e-3, count=2), 0.5e-3)])
    assert s.seconds == pytest.approx(1e-3)


def test_exposure_beyond_a_collectives_own_time_is_not_its_own():
    """The step model can charge a wait to a collective queued behind another on the same link; a collective
    is never credited with more exposed time than it takes itself."""
    s = step_saving([(coll(1e-3, 5e-3), 0.0)])
    assert s.exposed == pytest.approx(1e-3) and s.seconds == pytest.approx(1e-3)


def test_a_change_that_costs_elsewhere_is_netted():
    """A placement can make one axis cheaper and another dearer: the saving is bounded by the net change."""
    cheaper, dearer = coll(1e-3, 1e-3, row=0), coll(1e-3, 0.0, row=1)
    s = step_saving([(cheaper, 0.2e-3), (dearer, 1.5e-3)])
    assert s.comm == pytest.approx(0.3e-3) and s.exposed == pytest.approx(1e-3) and s.seconds == pytest.approx(0.3e-3)
    assert step_saving([(cheaper, 0.9e-3), (dearer, 1.5e-3)]).seconds == 0.0


def test_without_a_step_the_comm_saving_is_taken():
    s = step_saving([(coll(1e-3, 0.0), 0.25e-3)], known=False)
    assert s.seconds == pytest.approx(0.75e-3) and not s.hidden
    assert s.fields() == {"comm_saving": pytest.approx(0.75e-3), "exposed_seconds": None, "step_saving": None}
