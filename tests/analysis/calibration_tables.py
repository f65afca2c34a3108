"""Writing and checking analyzer/_data/calibration.json, the error bars' residuals (analyzer.analysis.calibration).

Each measured-table test owns its table in the file: tests/analysis/test_measured_v5p_maxtext.py the v5p table,
tests/analysis/test_measured_v6e.py the v6e table; each, run as a script with `--write-calibration`, rewrites its
own table from today's step model and keeps the other. Both check theirs in a slow test, so a change to the step
model that moves a prediction fails until the file is rewritten.
"""

from __future__ import annotations

import json
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


def write(hardware: str, table: str, source: str, prediction: str, table_rows: list[dict]) -> Path:
    """Replace `hardware`'s table in the calibration file (the others kept), whole or not at all. `table`: its name
    as the report's range basis says it; `source`: where it is published; `prediction`: what was predicted."""
    path = ROOT / "analyzer" / "_data" / CALIBRATION
    try:
        tables = [t for t in load()["tables"] if t["hardware"] != hardware]
    except (KeyError, FileNotFoundError, json.JSONDecodeError):
        tables = []
    tables.append({"table": table, "source": source, "hardware": hardware, "prediction": prediction,
                   "rows": table_rows,
                   "leave_one_out": f"{leave_one_out(table_rows)} of {len(table_rows)}"})
    tables.sort(key=lambda t: t["hardware"])
    write_atomic(path, json.dumps({"tables": tables, "how": HOW}, indent=1) + "\n", what="calibration file")
    return path


def check(hardware: str, predicted: dict[str, float], published: dict[str, float]) -> None:
    """The file's `hardware` table is today's model's (each run's q to 1e-6)."""
    written = {r["run"]: r["ratio"] for t in load()["tables"] if t["hardware"] == hardware for r in t["rows"]}
    now = {r["run"]: r["ratio"] for r in rows(predicted, published)}
    assert written.keys() == now.keys(), f"{hardware}: rewrite the file ({HOW})"
    for run, ratio in now.items():
        assert written[run] == pytest.approx(ratio, rel=1e-6), f"{run}: rewrite the file ({HOW})"


@dataclass(frozen=True)
class Table:
    """One published table in the calibration file, as its measured-table test owns it.

    Attributes:
      hardware: the chip's hardware spec name ("tpu-v5p"); name: the table as the report's range basis says it;
      source: where it is published; prediction: what was predicted of each run.
    """

    hardware: str
    name: str
    source: str
    prediction: str

    def write(self, predicted: dict[str, float], published: dict[str, float]) -> Path:
        """This table's rows from today's predictions, written into the file (`write`)."""
        return write(self.hardware, self.name, self.source, self.prediction, rows(predicted, published))

    def check(self, predicted: dict[str, float], published: dict[str, float]) -> None:
        """The file's rows of this table are today's predictions' (`check`)."""
        check(self.hardware, predicted, published)
