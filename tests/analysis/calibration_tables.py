"""Writing and checking analyzer/_data/calibration.json, the error bars' residuals (analyzer.analysis.calibration).

Each measured-table test owns its table in the file: tests/analysis/test_measured_v5p_maxtext.py the v5p table,
tests/analysis/test_measured_v6e.py the v6e table; each, run as a script with `--write-calibration`, rewrites its
own table from today's step model and keeps the other. Both check theirs in a slow test, so a change to the step
model that moves a prediction fails until the file is rewritten.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from analyzer.analysis.calibration import CALIBRATION, leave_one_out, load
from analyzer.fileio import write_atomic

ROOT = Path(__file__).resolve().parents[2]
HOW = ("python tests/analysis/test_measured_v5p_maxtext.py --write-calibration; "
       "python tests/analysis/test_measured_v6e.py --write-calibration")


def rows(predicted: dict[str, float], published: dict[str, float]) -> list[dict]:
    """Each run's residual as the error bars read it: q = predicted MFU / published MFU (= measured step /
    predicted step), both in percent by the table's count."""
    return [{"run": run, "predicted_mfu": round(p, 6), "published_mfu": published[run],
             "ratio": round(p / published[run], 9)} for run, p in predicted.items()]


@dataclass(frozen=True)
class Table:
    """One published table in the calibration file, as its measured-table test owns it.

    Attributes:
      hardware: the chip's hardware spec name ("tpu-v5p"); name: the table as the report's range basis says it;
      source: where it is published; prediction: what was predicted of each run.
      predicted: today's predicted MFU of each run (run -> percent by the table's count; it analyses the runs);
      published: each run's published MFU (run -> percent).
    """

    hardware: str
    name: str
    source: str
    prediction: str
    predicted: Callable[[], dict[str, float]]
    published: Callable[[], dict[str, float]]

    def write(self) -> Path:
        """Replace this chip's table in the calibration file with today's predictions (the others kept), whole or not
        at all."""
        path = ROOT / "analyzer" / "_data" / CALIBRATION
        try:
            tables = [t for t in load()["tables"] if t["hardware"] != self.hardware]
        except (KeyError, FileNotFoundError, json.JSONDecodeError):
            tables = []
        table_rows = rows(self.predicted(), self.published())
        tables.append({"table": self.name, "source": self.source, "hardware": self.hardware,
                       "prediction": self.prediction, "rows": table_rows,
                       "leave_one_out": f"{leave_one_out(table_rows)} of {len(table_rows)}"})
        tables.sort(key=lambda t: t["hardware"])
        write_atomic(path, json.dumps({"tables": tables, "how": HOW}, indent=1) + "\n", what="calibration file")
        return path

    def check(self) -> None:
        """The file's rows of this table are today's predictions' (each run's q to 1e-6)."""
        written = {r["run"]: r["ratio"] for t in load()["tables"] if t["hardware"] == self.hardware
                   for r in t["rows"]}
        now = {r["run"]: r["ratio"] for r in rows(self.predicted(), self.published())}
        assert written.keys() == now.keys(), f"{self.hardware}: rewrite the file ({HOW})"
        for run, ratio in now.items():
            assert written[run] == pytest.approx(ratio, rel=1e-6), f"{run}: rewrite the file ({HOW})"
