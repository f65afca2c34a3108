"""The CSV output format: a report's collectives table, one row per collective (`analyze --csv`).

The columns are `analyzer.analysis.schema.COLLECTIVE_COLUMNS` as the report holds them; a row's mesh axes are
joined by commas (`data,model`) and its global shape by `x` (`4096x1024`), so every cell is one value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from analyzer.analysis.report import Report

__all__ = ["render"]


def render(report: Report) -> str:
    """The collectives table as CSV text (header line first)."""
    frame = report.collectives.copy()
    frame["axes"] = frame["axes"].map(lambda a: ",".join(a))
    frame["global_shape"] = frame["global_shape"].map(lambda s: "x".join(str(d) for d in s))
    return frame.to_csv(index=False)
