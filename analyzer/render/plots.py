"""Report plots, drawn with matplotlib and returned as inline SVG text.

Each function takes a `Report` (or a sweep ranking) and returns an `<svg>` element as a string, or None
when there is nothing to plot. Figures are built with the object API (`matplotlib.figure.Figure`), never
pyplot, so no global state changes and no display is needed. Text stays text in the SVG (selectable,
crisp at any zoom) and output is deterministic (no timestamps).
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from analyzer.units import format_seconds, seconds_unit

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from analyzer.analysis.report import Report
    from analyzer.workflows.sweep import SweepResult

__all__ = ["Block", "layer_blocks", "kind_plot", "axis_plot", "layer_plot", "sweep_plot", "KIND_COLORS"]

# One colour per collective kind, the same in every plot and in the HTML legend.
KIND_COLORS: dict[str, str] = {
    "all-gather": "#3b6fb6",
    "reduce-scatter": "#e08a2c",
    "all-reduce": "#c8463d",
    "all-to-all": "#7b55a8",
    "collective-permute": "#3a9a6a",
    "collective-broadcast": "#8c8c3a",
    "ragged-all-to-all": "#a0527a",
}
# Figure widths in inches: half a report column and the whole column (the HTML page is about 1120 px wide;
# matplotlib's SVG unit is the point, 1/72 in, shown at 4/3 px).
HALF_WIDTH = 5.5
FULL_WIDTH = 11.4
COMM_COLOR = "#c8463d"
COMPUTE_COLOR = "#3b6fb6"
_TEXT = "#222831"
_GRID = "#e3e6ea"


def _figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    return fig


def _style(ax: Axes) -> None:
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    for side in ("left", "bottom"):
        ax.spines[side].set_color("#9aa3ad")
    ax.tick_params(colors=_TEXT, labelsize=9)
    ax.xaxis.grid(True, color=_GRID, linewidth=0.8)
    ax.set_axisbelow(True)


def _seconds_axis(ax: Axes, values: Sequence[float]) -> str:
    """Scale the x axis to a readable unit; returns the unit label."""
    from matplotlib.ticker import FuncFormatter

    top = max([v for v in values if v == v] or [0.0])
    scale, unit = seconds_unit(top) if top > 0 else (1.0, "s")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x / scale:g}"))
    return unit


def _to_svg(fig: Figure, title: str) -> str:
    """The figure as an `<svg>` element (no XML prolog), titled for screen readers."""
    from matplotlib import rc_context

    buffer = io.StringIO()
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "hlo-analyzer"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": "hlo-analyzer (matplotlib)"},
                    transparent=True)
    text = buffer.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<svg ", f'<svg role="img" aria-label="{_attr(title)}" ', text, count=1)
    # The natural size (width/height in pt) stays: the page scales plots down to fit, never up, so text in
    # every plot prints at the same size.
    return text


def _legend(ax: Axes, n: int) -> None:
    """A legend in one row above the plot, where it never covers a bar."""
    ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=max(n, 1), fontsize=8, frameon=False,
              borderaxespad=0.2, handlelength=1.2, columnspacing=1.2)


def _attr(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")


def _barh(labels: Sequence[str], values: Sequence[float], colors: Sequence[str], title: str, xlabel: str) -> str:
    fig = _figure(HALF_WIDTH, 0.7 + 0.36 * max(len(labels), 2))
    ax = fig.add_subplot()
    _style(ax)
    y = list(range(len(labels)))[::-1]
    bars = ax.barh(y, values, color=colors, height=0.62)
    ax.set_yticks(y, labels)
    unit = _seconds_axis(ax, values)
    ax.set_xlabel(f"{xlabel} ({unit})", color=_TEXT, fontsize=9)
    top = max(values) if values else 0
    ax.set_xlim(0, top * 1.22 if top > 0 else 1)
    for bar, v in zip(bars, values):
        ax.text(bar.get_width() + top * 0.01, bar.get_y() + bar.get_height() / 2, format_seconds(v),
                va="center", fontsize=8.5, color=_TEXT)
    return _to_svg(fig, title)


def kind_plot(report: Report) -> str | None:
    """Communication seconds per step by collective kind, largest first."""
    items = sorted(((k, float(v)) for k, v in report.totals.by_kind.items() if v > 0), key=lambda kv: -kv[1])
    if not items:
        return None
    labels = [k for k, _ in items]
    colors = [KIND_COLORS.get(k, "#777777") for k in labels]
    return _barh(labels, [v for _, v in items], colors, "Communication time per step by collective kind",
                 "time per step")


def axis_plot(report: Report) -> str | None:
    """Communication seconds per step by mesh axis (or axis group), stacked by collective kind."""
    frame = report.collectives
    if frame is None or len(frame) == 0:
        return None
    totals: dict[str, dict[str, float]] = {}
    for rec in frame.to_dict(orient="records"):
        axes = rec.get("axes")
        key = ",".join(axes) if isinstance(axes, (tuple, list)) else str(axes or "—")
        seconds = rec.get("total_seconds")
        if seconds is None or seconds != seconds:
            seconds = float(rec.get("seconds") or 0.0) * float(rec.get("count") or 1)
        totals.setdefault(key or "—", {})
        totals[key or "—"][rec["kind"]] = totals[key or "—"].get(rec["kind"], 0.0) + float(seconds)
    order = sorted(totals, key=lambda k: -sum(totals[k].values()))
    if not any(sum(v.values()) > 0 for v in totals.values()):
        return None
    kinds = [k for k in KIND_COLORS if any(k in totals[a] for a in order)]
    kinds += sorted({k for a in order for k in totals[a]} - set(kinds))
    fig = _figure(HALF_WIDTH, 1.0 + 0.36 * max(len(order), 2))
    ax = fig.add_subplot()
    _style(ax)
    y = list(range(len(order)))[::-1]
    left = [0.0] * len(order)
    for kind in kinds:
        widths = [totals[a].get(kind, 0.0) for a in order]
        ax.barh(y, widths, left=left, color=KIND_COLORS.get(kind, "#777777"), height=0.62, label=kind)
        left = [l + w for l, w in zip(left, widths)]
    ax.set_yticks(y, [f"over {a}" for a in order])
    unit = _seconds_axis(ax, left)
    ax.set_xlabel(f"time per step ({unit})", color=_TEXT, fontsize=9)
    top = max(left)
    ax.set_xlim(0, top * 1.22 if top > 0 else 1)
    for yi, total in zip(y, left):
        ax.text(total + top * 0.01, yi, format_seconds(total), va="center", fontsize=8.5, color=_TEXT)
    _legend(ax, len(kinds))
    return _to_svg(fig, "Communication time per step by mesh axis")


@dataclass(frozen=True)
class Block:
    """A repeated part of the step (a loop body: one layer of a scanned model) or the part outside loops.

    Attributes:
      label: what the reader sees, e.g. `forward, per layer (x32)`; `outside layers (x1)` for what runs
        once per step.
      comm_seconds: communication seconds of one execution of the block.
      compute_seconds: compute seconds of one execution of the block.
      executions: times the block runs per step.
    """

    label: str
    comm_seconds: float
    compute_seconds: float
    executions: int


def _records(frame: Any) -> list[dict]:
    if frame is None or len(frame) == 0:
        return []
    return frame.to_dict(orient="records")


def _num(value: Any, default: float = 0.0) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return default
    return default if v != v else v


def layer_blocks(report: Report) -> list[Block]:
    """Communication and compute of one execution of each repeated block of the step.

    A block is the set of collectives and dots that run the same number of times per step in the same pass
    (forward / backward / neither). In a model scanned over L layers the loop body runs L times, so the block
    that runs L times is one layer; what runs once is the embedding, the loss and the optimizer.

    Returns:
      Blocks ordered by pass (forward, backward, other) then by executions, most repeated first.
    """
    groups: dict[tuple[str, int], list[float]] = {}
    for kind, frame in (("comm", report.collectives), ("compute", report.dots)):
        for rec in _records(frame):
            count = max(int(_num(rec.get("count"), 1)), 1)
            seconds = _num(rec.get("seconds"))
            pass_ = rec.get("pass_")  # the analysis's answer (mapping.pass_of), the same for collectives and dots
            pass_ = pass_ if isinstance(pass_, str) else ""
            if count == 1:
                pass_ = ""  # what runs once (embedding, loss, optimizer) is one block whatever its pass
            slot = groups.setdefault((pass_, count), [0.0, 0.0])
            slot[0 if kind == "comm" else 1] += seconds
    order = {"forward": 0, "backward": 1, "": 2}
    blocks = []
    for (pass_, count), (comm, compute) in sorted(groups.items(), key=lambda kv: (order.get(kv[0][0], 3), -kv[0][1])):
        if count == 1:
            label = "outside layers (once per step)"
        else:
            label = f"{pass_ or 'other'}, per layer (x{count})"
        blocks.append(Block(label=label, comm_seconds=comm, compute_seconds=compute, executions=count))
    return blocks


def layer_plot(report: Report) -> str | None:
    """Communication against compute for one execution of each repeated block (one layer of a scanned model)."""
    blocks = [b for b in layer_blocks(report) if b.comm_seconds > 0 or b.compute_seconds > 0]
    if not blocks:
        return None
    fig = _figure(FULL_WIDTH, 1.0 + 0.5 * max(len(blocks), 2))
    ax = fig.add_subplot()
    _style(ax)
    h = 0.36
    y = list(range(len(blocks)))[::-1]
    comm = [b.comm_seconds for b in blocks]
    compute = [b.compute_seconds for b in blocks]
    ax.barh([v + h / 2 for v in y], comm, height=h, color=COMM_COLOR, label="communication")
    ax.barh([v - h / 2 for v in y], compute, height=h, color=COMPUTE_COLOR, label="compute")
    ax.set_yticks(y, [b.label for b in blocks])
    unit = _seconds_axis(ax, comm + compute)
    top = max(comm + compute)
    ax.set_xlim(0, top * 1.25 if top > 0 else 1)
    for yi, c, k in zip(y, comm, compute):
        ax.text(c + top * 0.01, yi + h / 2, format_seconds(c), va="center", fontsize=8, color=_TEXT)
        ax.text(k + top * 0.01, yi - h / 2, format_seconds(k), va="center", fontsize=8, color=_TEXT)
    ax.set_xlabel(f"time per execution of the block ({unit})", color=_TEXT, fontsize=9)
    _legend(ax, 2)
    return _to_svg(fig, "Communication against compute per layer")


def sweep_plot(sweep: SweepResult) -> str | None:
    """Predicted step time of each candidate: compute and communication stacked, best at the top."""
    entries = [e for e in sweep.entries if e.ok]
    if not entries:
        return None
    fig = _figure(FULL_WIDTH, 1.0 + 0.34 * max(len(entries), 2))
    ax = fig.add_subplot()
    _style(ax)
    y = list(range(len(entries)))[::-1]
    compute = [e.compute_seconds for e in entries]
    comm = [e.comm_seconds for e in entries]
    ax.barh(y, compute, color=COMPUTE_COLOR, height=0.62, label="compute")
    ax.barh(y, comm, left=compute, color=COMM_COLOR, height=0.62, label="communication")
    labels = [f"#{e.rank} {e.label}" + ("" if e.fits is not False else " (does not fit)") for e in entries]
    ax.set_yticks(y, labels)
    totals = [a + b for a, b in zip(compute, comm)]
    unit = _seconds_axis(ax, totals)
    top = max(totals)
    ax.set_xlim(0, top * 1.22 if top > 0 else 1)
    for yi, t in zip(y, totals):
        ax.text(t + top * 0.01, yi, format_seconds(t), va="center", fontsize=8.5, color=_TEXT)
    ax.set_xlabel(f"predicted step time, compute + communication ({unit})", color=_TEXT, fontsize=9)
    _legend(ax, 2)
    return _to_svg(fig, "Predicted step time per candidate plan")
