"""Error bars on the predicted step and MFU, from the step model's residuals on the calibration runs.

The calibration runs are MaxText's published v5p table (docs/measurements.md; the only table the step model was
built against). For each run i, its fixture analysed as a user's program is (`write_calibration()` in tests/analysis/test_measured.py,
run as that script with the option it documents):

    q_i = predicted MFU_i / published MFU_i  =  measured step_i / predicted step_i

(the model FLOPs are the same on both sides). `analyzer/_data/calibration.json` keeps each q_i with its run. A new
prediction P is then given the range the runs' measured steps fell in around theirs:

    step in [P x min q, P x max q],   MFU in [MFU / max q, MFU / min q]

This is an empirical range, not a statistical interval: it covers every calibration run by construction; held out
one at a time (each run's range made from the other runs), it covered `leave_one_out` of them (the file says how
many). It says how far the model has been off on real training steps, not what this program will do: for another
chip generation, another kind of program, or a step far from a training step of a transformer, the true error
can be larger, which `Interval.basis` says in words.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

__all__ = ["Interval", "interval", "leave_one_out", "load"]

CALIBRATION = "calibration.json"


@dataclass(frozen=True)
class Interval:
    """The range of a predicted step and its MFU.

    Attributes:
      step_low, step_high: seconds.
      mfu_low, mfu_high: fractions.
      basis: where the range comes from, in words (shown beside it).
    """

    step_low: float
    step_high: float
    mfu_low: float
    mfu_high: float
    basis: str

    def overlaps(self, other: Interval) -> bool:
        """Whether two predicted steps cannot be told apart (a tie in a ranking)."""
        return self.step_low <= other.step_high and other.step_low <= self.step_high


def load() -> dict:
    """The calibration file as `write_calibration()` of tests/analysis/test_measured.py writes it (read each call:
    nothing is kept between calls)."""
    text = resources.files("analyzer").joinpath("_data", CALIBRATION).read_text()
    return json.loads(text)


def interval(step_seconds: float, mfu: float, data: dict | None = None) -> Interval | None:
    """The range of a predicted step (and its MFU) from the calibration residuals; None without a step.

    Example:
      >>> data = {"rows": [{"run": "a", "ratio": 0.9}, {"run": "b", "ratio": 1.2}], "table": "t", "hardware": "v5p"}
      >>> r = interval(1.0, 0.5, data)
      >>> round(r.step_low, 3), round(r.step_high, 3), round(r.mfu_low, 3), round(r.mfu_high, 3)
      (0.9, 1.2, 0.417, 0.556)
    """
    if step_seconds <= 0:
        return None
    data = load() if data is None else data
    ratios = [float(r["ratio"]) for r in data["rows"]]
    if not ratios:
        return None
    low, high = min(ratios), max(ratios)
    basis = (f"the measured step of the {len(ratios)} runs of {data['table']} was {low:.2f}x to {high:.2f}x its "
             f"prediction (calibrated on {data['hardware']} training steps only)")
    return Interval(step_seconds * low, step_seconds * high, mfu / high if mfu > 0 else 0.0,
                    mfu / low if mfu > 0 else 0.0, basis)


def leave_one_out(rows: list[dict]) -> int:
    """How many runs fall inside the range made from the other runs (the coverage the file reports)."""
    covered = 0
    for i, row in enumerate(rows):
        others = [float(r["ratio"]) for j, r in enumerate(rows) if j != i]
        if others and min(others) <= float(row["ratio"]) <= max(others):
            covered += 1
    return covered
