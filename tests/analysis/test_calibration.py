"""The error bars (analyzer.analysis.calibration; docs/step.md, "Error bars"): each chip's range from its own
table's residuals, every table's where no table has the chip, and the report carrying what it was given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyzer.analysis.calibration import interval, leave_one_out, load, table_for
from analyzer.pipeline import analyze_hlo, reprice

SPMD = Path(__file__).resolve().parents[1] / "hlo" / "samples" / "scan_fsdp_tp.cpu.spmd.hlo"  # data=4, model=2


def _q(hardware: str) -> list[float]:
    return [float(r["ratio"]) for t in load()["tables"] if t["hardware"] == hardware for r in t["rows"]]


def test_the_file_has_both_published_tables_with_their_coverage():
    tables = {t["hardware"]: t for t in load()["tables"]}
    assert set(tables) == {"tpu-v5p", "tpu-v6e"}
    assert len(tables["tpu-v5p"]["rows"]) == 14 and len(tables["tpu-v6e"]["rows"]) == 5
    for t in tables.values():
        assert t["leave_one_out"] == f"{leave_one_out(t['rows'])} of {len(t['rows'])}"
        for r in t["rows"]:  # q is the predicted over the published MFU, both as written
            assert r["ratio"] == pytest.approx(r["predicted_mfu"] / r["published_mfu"], rel=1e-6)


@pytest.mark.parametrize("hardware", ["tpu-v5p", "tpu-v6e"])
def test_a_chip_with_a_table_gets_its_own_tables_range(hardware):
    q = _q(hardware)
    r = interval(2.0, 0.5, hardware)
    assert (r.step_low, r.step_high) == pytest.approx((2.0 * min(q), 2.0 * max(q)))
    assert (r.mfu_low, r.mfu_high) == pytest.approx((0.5 / max(q), 0.5 / min(q)))
    assert f"({hardware})" in r.basis and f"{min(q):.2f}x to {max(q):.2f}x" in r.basis


def test_a_chip_without_a_table_gets_every_runs_range_and_says_so():
    every = _q("tpu-v5p") + _q("tpu-v6e")
    r = interval(1.0, 0.5, "h100")
    assert (r.step_low, r.step_high) == pytest.approx((min(every), max(every)))
    assert "no table has h100" in r.basis and "tpu-v5p, tpu-v6e" in r.basis
    ratios, words = table_for(None, load())
    assert sorted(ratios) == sorted(every) and "this hardware" in words


def test_no_step_no_range():
    assert interval(0.0, 0.0, "tpu-v5p") is None


def test_the_report_carries_the_range_of_the_chip_it_was_priced_on():
    v5p = analyze_hlo(SPMD, mesh="data=4,model=2", hardware="tpu-v5p")
    v6e = reprice(v5p, hardware="tpu-v6e")
    for report, hardware in ((v5p, "tpu-v5p"), (v6e, "tpu-v6e")):
        t, q = report.totals, _q(hardware)
        assert t.step_low == pytest.approx(t.step_seconds * min(q)) and t.step_high == pytest.approx(
            t.step_seconds * max(q))
        assert f"({hardware})" in t.range_basis
        totals = json.loads(report.to_json())["totals"]
        assert totals["step_range"] == pytest.approx([t.step_low, t.step_high])
        assert totals["range_basis"] == t.range_basis
