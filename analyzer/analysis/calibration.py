"""Error bars on the predicted step and MFU, from the step model's residuals on the calibration runs.

The calibration runs are MaxText's two published tables (docs/measurements.md): its v5p table (14 runs, 128 to
2,048 chips) and its v6e table (5 runs on one or two v6e-256 slices), each run's step built by MaxText's own code
and analysed as `hlo-analyzer maxtext` analyses it (tests/analysis/test_measured_v5p_maxtext.py and
test_measured_v6e.py each write their table when run as a script; tests/analysis/calibration_tables.py says how).
For each run i:

    q_i = predicted MFU_i / published MFU_i  =  measured step_i / predicted step_i

(the model FLOPs are the same on both sides). `analyzer/_data/calibration.json` keeps each q_i with its run, by
table, and each table's chip (the hardware spec's name). A new prediction P on hardware H is given the range the
runs' measured steps fell in around theirs, from the runs on H where a table has H, else from every run:

    step in [P x min q, P x max q],   MFU in [MFU / max q, MFU / min q]

The range is per chip because the residuals are: on v5p the model is up to 5% pessimistic and up to 19% optimistic,
on v6e 13% to 51% optimistic on every run (docs/measurements.md names what is missing). One range for both would
tell a v6e user that the published runs fell near the prediction when none did.

This is an empirical range, not a statistical interval: it covers every calibration run of its table by
construction; held out one at a time (each run's range made from the other runs of its table), it covered
`leave_one_out` of them (the file says how many per table). It says how far the model has been off on real training
steps, not what this program will do: for a chip no table has, another kind of program, or a step far from a
training step of a transformer, the true error can be larger, which `Interval.basis` says in words.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

__all__ = ["Interval", "interval", "leave_one_out", "load", "table_for"]

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
    """The calibration file as the measured-table tests write it (read each call: nothing is kept between calls)."""
    text = resources.files("analyzer").joinpath("_data", CALIBRATION).read_text()
    return json.loads(text)


def table_for(hardware: str | None, data: dict) -> tuple[list[float], str]:
    """The residuals q of the runs a prediction on `hardware` (a spec's name, e.g. "tpu-v6e") is given, and which
    runs they are, in words: the tables of that chip, else every table."""
    tables = data["tables"]
    own = [t for t in tables if t["hardware"] == hardware]
    chosen = own or tables
    ratios = [float(r["ratio"]) for t in chosen for r in t["rows"]]
    runs = f"the {len(ratios)} runs of " + " and ".join(t["table"] for t in chosen)
    if own:
        return ratios, f"{runs} ({hardware})"
    chips = ", ".join(sorted({t["hardware"] for t in tables}))
    return ratios, f"{runs} (no table has {hardware or 'this hardware'}; they are {chips} training steps)"


def interval(step_seconds: float, mfu: float, hardware: str | None = None, data: dict | None = None) -> Interval | None:
    """The range of a predicted step (and its MFU) on `hardware` from the calibration residuals; None without a step.

    Example:
      >>> data = {"tables": [{"table": "t", "hardware": "tpu-v5p", "rows": [{"run": "a", "ratio": 0.9},
      ...                                                                   {"run": "b", "ratio": 1.2}]},
      ...                    {"table": "u", "hardware": "tpu-v6e", "rows": [{"run": "c", "ratio": 1.5}]}]}
      >>> r = interval(1.0, 0.5, "tpu-v5p", data)
      >>> round(r.step_low, 3), round(r.step_high, 3), round(r.mfu_low, 3), round(r.mfu_high, 3)
      (0.9, 1.2, 0.417, 0.556)
      >>> r = interval(1.0, 0.5, "h100", data)  # no table of that chip: every run
      >>> round(r.step_low, 3), round(r.step_high, 3)
      (0.9, 1.5)
    """
    if step_seconds <= 0:
        return None
    data = load() if data is None else data
    ratios, runs = table_for(hardware, data)
    if not ratios:
        return None
    low, high = min(ratios), max(ratios)
    basis = f"the measured step of {runs} was {low:.2f}x to {high:.2f}x its prediction"
    return Interval(step_seconds * low, step_seconds * high, mfu / high if mfu > 0 else 0.0,
                    mfu / low if mfu > 0 else 0.0, basis)


def leave_one_out(rows: list[dict]) -> int:
    """How many runs fall inside the range made from the other runs of their table (the coverage the file reports)."""
    covered = 0
    for i, row in enumerate(rows):
        others = [float(r["ratio"]) for j, r in enumerate(rows) if j != i]
        if others and min(others) <= float(row["ratio"]) <= max(others):
            covered += 1
    return covered
