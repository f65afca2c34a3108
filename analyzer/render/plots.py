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
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from analyzer.units import format_seconds, seconds_unit

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from analyzer.analysis.report import Report
    from analyzer.workflows.sweep import SweepResult

__all__ = ["Block", "layer_blocks", "kind_plot", "axis_plot", "layer_plot", "sweep_plot", "KIND_COLORS",
           "Panel", "part_colors", "layer_windows", "layer_timeline", "timeline_plot", "breakdown_plot", "STEP_COLORS"]

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
COMPUTE_COLOR = "#2a7f8f"  # teal: not a collective kind's colour (the timeline draws both)
MEMORY_COLOR = "#9fd3da"
WAIT_COLOR = "#9aa3ad"
HIDDEN_COLOR = "#e8c4c1"
# The parts of the step (render._common.step_breakdown), the same in the breakdown and timeline plots.
STEP_COLORS: dict[str, str] = {"flops": COMPUTE_COLOR, "memory": MEMORY_COLOR, "exposed": COMM_COLOR,
                               "hidden": HIDDEN_COLOR, "wait": WAIT_COLOR}
# Exposed communication of each axis set: shades of the communication colour, most exposed first.
_AXIS_SHADES = ("#c8463d", "#8e2a23", "#e27d72", "#5e1a16", "#f0aba3")
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
    """Predicted step of each candidate: compute and the communication it waits for (exposed) stacked, best at
    the top (entries without a predicted step: all their communication)."""
    entries = [e for e in sweep.entries if e.ok]
    if not entries:
        return None
    fig = _figure(FULL_WIDTH, 1.0 + 0.34 * max(len(entries), 2))
    ax = fig.add_subplot()
    _style(ax)
    y = list(range(len(entries)))[::-1]
    compute = [e.compute_seconds for e in entries]
    comm = [e.step_seconds - e.compute_seconds for e in entries]  # the wait: exposed communication
    ax.barh(y, compute, color=COMPUTE_COLOR, height=0.62, label="compute")
    ax.barh(y, comm, left=compute, color=COMM_COLOR, height=0.62, label="exposed communication")
    labels = [f"#{e.rank} {e.label}" + ("" if e.fits is not False else " (does not fit)") for e in entries]
    ax.set_yticks(y, labels)
    totals = [a + b for a, b in zip(compute, comm)]
    unit = _seconds_axis(ax, totals)
    top = max(totals)
    ax.set_xlim(0, top * 1.22 if top > 0 else 1)
    for yi, t in zip(y, totals):
        ax.text(t + top * 0.01, yi, format_seconds(t), va="center", fontsize=8.5, color=_TEXT)
    ax.set_xlabel(f"predicted step, compute + exposed communication ({unit})", color=_TEXT, fontsize=9)
    _legend(ax, 2)
    return _to_svg(fig, "Predicted step time per candidate plan")


# ---------------------------------------------------------------------- the step
def part_colors(parts: Sequence[Any]) -> list[str]:
    """The colour of each part of the step breakdown (`render._common.step_breakdown`), in order: compute in
    blues, each exposed axis set its own shade of the communication red,
    hidden communication pale.

    Example:
        >>> from analyzer.render._common import StepPart
        >>> part_colors([StepPart("a", 1.0, "memory"), StepPart("b", 1.0, "exposed", "X"),
        ...              StepPart("c", 1.0, "exposed", "Y")])
        ['#9fd3da', '#c8463d', '#8e2a23']
    """
    out, k = [], 0
    for p in parts:
        if p.part == "exposed":
            out.append(_AXIS_SHADES[k % len(_AXIS_SHADES)])
            k += 1
        else:
            out.append(STEP_COLORS[p.part])
    return out


def breakdown_plot(report: Report) -> str | None:
    """The predicted step as one stacked bar (compute bound by FLOPs, by HBM bandwidth, exposed communication
    per axis set: they add up to `step_seconds`), and the communication hidden behind it as a second bar."""
    from analyzer.render._common import step_breakdown

    parts = step_breakdown(report)
    if not parts:
        return None
    colors = dict(zip((p.label for p in parts), part_colors(parts)))
    on = [p for p in parts if p.on_step and p.seconds > 0]
    hidden = [p for p in parts if not p.on_step]
    rows = ["predicted step"] + (["communication hidden"] if hidden else [])
    fig = _figure(FULL_WIDTH, 1.3 + 0.42 * len(rows))
    ax = fig.add_subplot()
    _style(ax)
    y = list(range(len(rows)))[::-1]
    left = 0.0
    for p in on:
        ax.barh(y[0], p.seconds, left=left, color=colors[p.label], height=0.6,
                label=f"{p.label} ({format_seconds(p.seconds)})")
        left += p.seconds
    h_left = 0.0
    for p in hidden:
        ax.barh(y[1], p.seconds, left=h_left, color=HIDDEN_COLOR, edgecolor="#ffffff", linewidth=1.0, height=0.6)
        h_left += p.seconds
    top = max(left, h_left)
    h_left = 0.0
    for p in hidden:  # name each axis where its segment is wide enough to hold the name
        if p.seconds >= 0.06 * top:
            ax.text(h_left + p.seconds / 2, y[1], p.axis or "—", ha="center", va="center", fontsize=8, color=_TEXT)
        h_left += p.seconds
    ax.set_yticks(y, rows)
    unit = _seconds_axis(ax, [top])
    ax.set_xlim(0, top * 1.16 if top > 0 else 1)
    ax.text(left + top * 0.01, y[0], format_seconds(report.totals.step_seconds), va="center", fontsize=8.5,
            color=_TEXT)
    if hidden:
        ax.text(h_left + top * 0.01, y[1], format_seconds(h_left), va="center", fontsize=8.5, color=_TEXT)
    ax.set_xlabel(f"seconds per step ({unit})", color=_TEXT, fontsize=9)
    ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=max(1, min(len(on), 3)), fontsize=8, frameon=False,
              borderaxespad=0.2, handlelength=1.2, columnspacing=1.2)
    return _to_svg(fig, "The predicted step, part by part")


@dataclass(frozen=True)
class Panel:
    """One layer's stretch of the predicted step, ready to draw.

    Attributes:
      label: the window's label (`forward layer (while.34, iteration 1 of 4)`).
      start, end: the window on the step's clock (seconds).
      tracks: the tracks drawn, top to bottom: `compute`, `compute waits`, then the links.
      bars: the trace's slices (`analyzer.render.trace.Slice`) that overlap the window, clipped to it, with
        `start` relative to the window's start.
    """

    label: str
    start: float
    end: float
    tracks: tuple[str, ...]
    bars: tuple[Any, ...]


def layer_windows(windows: Sequence[tuple[str, float, float]]) -> list[tuple[str, float, float]]:
    """The windows of one layer to draw: the first forward and the first backward one.

    Of the step model's windows (`StepPrediction.windows`) only the innermost count (a loop over micro-batches
    holds the layer loops); among them the first labelled `forward layer` and the first labelled
    `backward layer`, or, when the op names said neither, the first two in time.

    Example:
        >>> layer_windows([("layer (while.1, iteration 1 of 2)", 0.0, 9.0), ("forward layer (while.2, ...)", 1.0, 2.0),
        ...                ("backward layer (while.3, ...)", 4.0, 6.0)])
        [('forward layer (while.2, ...)', 1.0, 2.0), ('backward layer (while.3, ...)', 4.0, 6.0)]
    """
    inner = [w for w in windows if not any(v != w and w[1] <= v[1] and v[2] <= w[2] for v in windows)]
    chosen = []
    for prefix in ("forward layer", "backward layer"):
        first = next((w for w in inner if w[0].startswith(prefix)), None)
        if first is not None:
            chosen.append(first)
    if not chosen:
        chosen = sorted(inner, key=lambda w: w[1])[:2]
    return sorted(chosen, key=lambda w: w[1])


def layer_timeline(report: Report) -> list[Panel]:
    """The predicted step of one layer, forward and backward, as panels of bars on tracks; empty when the
    report has no step prediction or no layer window (`layer_windows`)."""
    from analyzer.analysis.step import COMPUTE_TRACK
    from analyzer.render.trace import WAIT_TRACK, step_slices

    step = getattr(getattr(report, "analysis", None), "step", None)
    if step is None:
        return []
    windows = layer_windows(step.windows)
    if not windows:
        return []
    slices = step_slices(report)  # once: source lines looked up once for every window
    cut: list[tuple[tuple[str, float, float], list[Any]]] = []
    for label, a, b in windows:
        bars = []
        for s in slices:
            lo, hi = max(s.start, a), min(s.start + s.seconds, b)
            if lo < hi:  # overlaps (a, b) with a positive length
                bars.append(replace(s, start=lo - a, seconds=hi - lo))
        cut.append(((label, a, b), bars))
    present = {s.track for _, bars in cut for s in bars}
    links = sorted(present - {COMPUTE_TRACK, WAIT_TRACK})
    tracks = tuple(t for t in (COMPUTE_TRACK, WAIT_TRACK) if t in present) + tuple(links)
    return [Panel(label, a, b, tracks, tuple(bars)) for (label, a, b), bars in cut]


_KIND_NAMES = {"matmul": "compute, bound by FLOPs", "memory": "compute, bound by HBM bandwidth",
               "wait": "compute waits"}


def _bar_color(s: Any) -> str:
    if s.kind == "collective":
        return KIND_COLORS.get(s.collective, COMM_COLOR)
    return {"matmul": COMPUTE_COLOR, "memory": MEMORY_COLOR, "wait": WAIT_COLOR}.get(s.kind, "#777777")


def _bar_title(s: Any) -> str:
    kind = s.collective if s.kind == "collective" else _KIND_NAMES.get(s.kind, s.kind)
    lines = [f"{s.name}: {format_seconds(s.seconds)} ({kind})"]
    if s.notation:
        lines.append(s.notation)
    lines.append(f"source: {s.source}" if s.source else f"in {s.computation}")
    return "\n".join(lines)


def timeline_plot(report: Report) -> str | None:
    """One layer of the predicted step, forward and backward: a panel each, one row per track (compute, its
    waits, each link), a bar per instruction coloured by kind. Hovering a bar shows the HLO instruction, its
    time, kind, collective notation and the user's source line (an SVG `<title>`).

    Bars carry ids `tl-P-T-K` (panel P, track T in `Panel.tracks`, bar K) so the page and tests can find them.
    """
    from matplotlib.patches import Patch, Rectangle

    panels = layer_timeline(report)
    if not panels:
        return None
    tracks = panels[0].tracks
    fig = _figure(FULL_WIDTH, 0.9 + len(panels) * (0.75 + 0.36 * max(len(tracks), 2)))
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    titles: dict[str, str] = {}
    kinds: dict[str, str] = {}
    for p, (panel, ax) in enumerate(zip(panels, axes)):
        _style(ax)
        row = {t: len(tracks) - 1 - k for k, t in enumerate(tracks)}
        for k, s in enumerate(panel.bars):
            gid = f"tl-{p}-{tracks.index(s.track)}-{k}"
            color = _bar_color(s)
            ax.add_patch(Rectangle((s.start, row[s.track] - 0.32), s.seconds, 0.64, facecolor=color,
                                   edgecolor="none", gid=gid))
            titles[gid] = _bar_title(s)
            name = s.collective if s.kind == "collective" else _KIND_NAMES.get(s.kind, s.kind)
            kinds.setdefault(name, color)
        width = panel.end - panel.start
        ax.set_ylim(-0.6, len(tracks) - 0.4)
        ax.set_xlim(0, width if width > 0 else 1)
        ax.set_yticks(list(row.values()), list(row))
        unit = _seconds_axis(ax, [width])
        ax.set_title(f"{panel.label}: {format_seconds(width)}", loc="left", fontsize=9, color=_TEXT)
        ax.set_xlabel(f"time from the layer's start ({unit})", color=_TEXT, fontsize=9)
    handles = [Patch(facecolor=c, label=n) for n, c in kinds.items()]
    fig.legend(handles=handles, loc="outside upper left", ncol=max(len(handles), 1), fontsize=8, frameon=False,
               handlelength=1.2, columnspacing=1.2)
    svg = _to_svg(fig, "One layer of the predicted step, forward and backward")
    return re.sub(r'<g id="(tl-\d+-\d+-\d+)">',
                  lambda m: f'<g id="{m.group(1)}"><title>{_text(titles.get(m.group(1), ""))}</title>', svg)


def _text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
