"""Acceptance: the HTML audit report renders in a real browser with its plots and tables visible.

A training config goes through the real pipeline (`hlo-analyzer report`: compile on 8 fake CPU devices,
analyse, price on TPU v5e, run the rules) into report.html; headless Chromium loads it (one browser for the
session, a tab per page: tests/render/conftest.py), a probe script measures where each plot and table landed,
and a screenshot of the whole page is checked pixel by pixel: every plot's box holds drawn bars in the
report's colours, every table has rows. The screenshots stay in test-artifacts/ (gitignored) for people to
look at.

Needs Debian's `chromium` package (`apt-get install -y chromium`); skips with that reason without it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from analyzer.cli import main
from analyzer.render import html, plots
from analyzer.workflows.sweep import SweepEntry, SweepResult, rank_entries

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
WIDTH = 1280

CONFIG = """\
name = "Transformer, FSDP+TP on TPU v5e-8 (acceptance)"
strategy = "fsdp+tp"
target = "cpu"
hardware = "tpu-v5e"

[mesh]
data = 4
model = 2

[model]
d_model = 256
d_ff = 1024
heads = 4
kv_heads = 2
layers = 2
seq = 128
batch = 16
dtype = "bf16"
optimizer = "adam"
"""

# Measures each element's page box and visibility, and the page's size, as JSON text.
PROBE = """JSON.stringify((function (sel) {
  var out = {height: document.documentElement.scrollHeight, width: document.documentElement.scrollWidth, items: {}};
  sel.forEach(function (s) {
    var el = document.querySelector(s);
    if (!el) { return; }
    var r = el.getBoundingClientRect(), cs = getComputedStyle(el);
    out.items[s] = {x: r.left + scrollX, y: r.top + scrollY, w: r.width, h: r.height,
                    visible: cs.visibility === 'visible' && cs.display !== 'none' && parseFloat(cs.opacity) > 0,
                    rows: el.querySelectorAll('tbody tr').length};
  });
  return out;
})(%s))"""


def _render(chromium, page: Path, selectors: list[str], shot: Path) -> tuple[dict, np.ndarray]:
    """Load the page in the session's Chromium (tests/render/conftest.py) at WIDTH; return the probe's layout
    and a screenshot of the whole page (the viewport as tall as the page) as RGB pixels."""
    layout, console = chromium.load(page, PROBE % json.dumps(selectors), width=WIDTH, screenshot=shot)
    # The page has no script of its own: any console message (an error, a failed load) is a fault of the page.
    assert not console, f"console messages while loading {page.name}: {console[:5]}"
    assert shot.exists(), "no screenshot"
    pixels = np.asarray(Image.open(shot).convert("RGB"))
    return layout, pixels


def _hex(color: str) -> np.ndarray:
    return np.array([int(color[i:i + 2], 16) for i in (1, 3, 5)])


def _region(pixels: np.ndarray, box: dict) -> np.ndarray:
    x0, y0 = int(box["x"]), int(box["y"])
    return pixels[y0:y0 + int(box["h"]), x0:x0 + int(box["w"])]


def _share_of(region: np.ndarray, color: str, tolerance: int = 24) -> float:
    """Fraction of the region's pixels within `tolerance` of `color` (per channel)."""
    close = np.all(np.abs(region.astype(int) - _hex(color)) <= tolerance, axis=-1)
    return float(close.mean())


def _check_plot(pixels: np.ndarray, layout: dict, selector: str, colors: list[str]) -> None:
    box = layout["items"].get(selector)
    assert box is not None, f"{selector} missing from the page"
    assert box["visible"], f"{selector} is hidden"
    assert box["w"] >= 300 and box["h"] >= 100, f"{selector} is too small to read: {box}"
    region = _region(pixels, box)
    assert region.shape[0] >= 100 and region.shape[1] >= 300, f"{selector} lies outside the screenshot"
    inked = np.any(region < 200, axis=-1).mean()
    assert inked > 0.02, f"{selector} looks blank ({inked:.1%} of its pixels drawn)"
    for color in colors:
        share = _share_of(region, color)
        assert share > 0.002, f"{selector}: no bars in {color} ({share:.2%} of pixels)"


def _check_table(layout: dict, selector: str, min_rows: int, min_width: int = 200) -> None:
    box = layout["items"].get(selector)
    assert box is not None and box["visible"], f"{selector} missing or hidden"
    assert box["rows"] >= min_rows, f"{selector}: {box['rows']} rows, expected at least {min_rows}"
    assert box["h"] >= 20 * min_rows and box["w"] >= min_width, f"{selector} too small: {box}"


@pytest.mark.slow
def test_report_renders_in_chromium(chromium, tmp_path):
    """The real report of a training config: plots, tables and findings visible in a browser."""
    config = tmp_path / "fsdp-tp.toml"
    config.write_text(CONFIG)
    page = tmp_path / "report.html"
    assert main(["report", str(config), "-o", str(page), "--what-if", "tpu-v5p"]) == 0
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copy(page, ARTIFACTS / "report.html")
    selectors = ["#plot-kind svg", "#plot-axis svg", "#plot-layer svg", "#collectives-table", "#mesh-table",
                 "#what-if-table", "#summary", "#findings", "#plan", "#plot-breakdown svg", "#plot-timeline svg",
                 "#step-table"]
    layout, pixels = _render(chromium, page, selectors, ARTIFACTS / "report-chromium.png")
    assert layout["width"] <= WIDTH, "the page scrolls sideways"
    kinds = [plots.KIND_COLORS["all-gather"], plots.KIND_COLORS["reduce-scatter"]]
    _check_plot(pixels, layout, "#plot-kind svg", kinds)
    _check_plot(pixels, layout, "#plot-axis svg", kinds)
    _check_plot(pixels, layout, "#plot-layer svg", [plots.COMM_COLOR, plots.COMPUTE_COLOR])
    # The step: its breakdown (HBM-bound compute and exposed communication at this size) and one layer's
    # timeline (compute bars, gathers on a link).
    _check_plot(pixels, layout, "#plot-breakdown svg", [plots.MEMORY_COLOR, plots.COMM_COLOR])
    _check_plot(pixels, layout, "#plot-timeline svg", [plots.MEMORY_COLOR, plots.KIND_COLORS["all-gather"]])
    _check_table(layout, "#step-table", 4)
    _check_table(layout, "#collectives-table", 4, min_width=800)
    _check_table(layout, "#mesh-table", 2)
    _check_table(layout, "#what-if-table", 2)
    for selector in ("#summary", "#findings", "#plan"):
        assert layout["items"][selector]["visible"] and layout["items"][selector]["h"] > 50, selector
    # The page is not one colour: the header band, cards and plots all drew.
    assert pixels.std() > 20


@pytest.mark.slow
def test_sweep_ranking_renders_in_chromium(chromium, report, tmp_path):
    """The sweep section (ranking plot and table) of a report, visible in a browser."""
    sweep = SweepResult(rank_entries([
        SweepEntry("fsdp", "data=8,model=1", 8e-3, 2e-2, memory_bytes=6 << 30, hbm_bytes=16 << 30, findings=1),
        SweepEntry("fsdp+tp", "data=4,model=2", 2.0e-2, 2.0e-2, memory_bytes=5 << 30, hbm_bytes=16 << 30),
        SweepEntry("tp", "data=1,model=8", 4e-2, 2e-2, memory_bytes=20 << 30, hbm_bytes=16 << 30),
        SweepEntry("ep", "data=8,model=1", error="MeshError: no expert axis"),
    ]), hardware="tpu-v5e")
    page = tmp_path / "sweep.html"
    page.write_text(html.render(report, sweep=sweep), encoding="utf-8")
    ARTIFACTS.mkdir(exist_ok=True)
    layout, pixels = _render(chromium, page, ["#plot-sweep svg", "#sweep-table"], ARTIFACTS / "sweep-chromium.png")
    _check_plot(pixels, layout, "#plot-sweep svg", [plots.COMM_COLOR, plots.COMPUTE_COLOR])
    _check_table(layout, "#sweep-table", 4)
