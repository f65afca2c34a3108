"""The predicted step in the reports: the breakdown that adds up to the step, and the timeline of one layer.

Reports come from checked-in fixtures (real XLA output of `examples.chapter`, analysed without compiling),
once per module: a scanned FSDP MLP step on the cpu target (unscheduled after-SPMD HLO, 4 layers in a
`lax.scan`), the same on the TPU v5e 2x4 target (scheduled final HLO), and the FSDP+TP transformer step.
An unrolled model is compiled once (a 3-layer Python loop, slow).
"""

import math
from collections import Counter
import re
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

import analyzer
from analyzer.analysis.step import COMPUTE_TRACK
from analyzer.render import html, markdown, plots, terminal
from analyzer.render._common import step_breakdown, step_rows
from analyzer.render.trace import WAIT_TRACK, step_slices

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
LAYERS = 4  # examples.chapter's training steps scan L=4 layers (fixtures/README.md)
CASES = [("cpu/X8/fsdp_mlp_step.spmd.hlo", "X=8"), ("tpu-v5e-2x4/X2_Y4/fsdp_mlp_step.final.hlo", "X=2,Y=4"),
         ("tpu-v5e-2x4/X2_Y4/fsdp_tp_step.spmd.hlo", "X=2,Y=4")]


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def report(request):
    path, mesh = request.param
    return analyzer.analyze_hlo(FIXTURES / path, mesh=mesh, hardware="tpu-v5e")


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.external, self.scripts = set(), [], 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.ids.add(attrs.get("id"))
        self.scripts += tag == "script"
        for key in ("src", "href"):
            if attrs.get(key) and not attrs[key].startswith("#"):
                self.external.append(attrs[key])


def test_breakdown_adds_up_to_the_step(report):
    t = report.totals
    parts = step_breakdown(report)
    on = {p.label: p.seconds for p in parts if p.on_step}
    # Worked from the totals: FLOPs-bound compute + HBM-bound compute + exposed per axis = step.
    assert on["compute, bound by FLOPs (matmuls)"] == pytest.approx(t.compute_seconds - t.memory_bound_seconds)
    assert on["compute, bound by HBM bandwidth"] == pytest.approx(t.memory_bound_seconds)
    for axis, seconds in t.exposed_by_axis.items():
        if seconds > 1e-6 * t.step_seconds:
            assert on[f"communication exposed over {axis}"] == pytest.approx(seconds, rel=1e-12)
    assert math.fsum(on.values()) == pytest.approx(t.step_seconds, rel=1e-9)
    for p in parts:
        if not p.on_step:  # hidden = what the axis carries - what is exposed of it
            assert p.seconds == pytest.approx(t.by_axis[p.axis] - t.exposed_by_axis.get(p.axis, 0.0), rel=1e-9)
    # The same figures in every report format.
    rows = step_rows(report)
    assert ("predicted step", analyzer.units.format_seconds(t.step_seconds), "100%") in rows
    text = markdown.render(report)
    assert "### The step, part by part" in text
    assert all(f"| {label} | {seconds} | {share} |" in text for label, seconds, share in rows
               if label != "predicted step")
    assert "The step, part by part" in terminal.render(report, width=140)


def test_timeline_is_one_layer(report):
    """Each panel is one iteration of a layer loop: its compute bars are the compute spans of the loop's body
    and condition in one iteration (all iterations' spans / L)."""
    step = report.analysis.step
    panels = plots.layer_timeline(report)
    assert [p.label.split(" (")[0] for p in panels] == ["forward layer", "backward layer"]
    module = report.analysis.module
    slices = step_slices(report)
    for panel in panels:
        loop = re.search(r"\((while[.\d]*),", panel.label).group(1)
        inst = next(i for c in module.computations for i in c.instructions if i.name == loop)
        own = {inst.attr(k).lstrip("%") for k in ("body", "condition")}
        per_layer = sum(1 for s in slices if s.track == COMPUTE_TRACK and s.computation in own) / LAYERS
        bars = [b for b in panel.bars if b.track == COMPUTE_TRACK]
        assert len(bars) == per_layer
        assert all(b.computation in own for b in bars)
        assert panel.tracks[0] == COMPUTE_TRACK and any(t not in (COMPUTE_TRACK, WAIT_TRACK) for t in panel.tracks)
        # clipped to the window: every bar lies inside the layer
        width = panel.end - panel.start
        assert all(0 <= b.start and b.start + b.seconds <= width * (1 + 1e-9) for b in panel.bars)
        assert (panel.label, panel.start, panel.end) in step.windows


def test_timeline_plot_draws_each_bar_with_its_title(report):
    svg = plots.timeline_plot(report)
    root = ET.fromstring(svg)
    assert root.get("aria-label") == "One layer of the predicted step, forward and backward"
    panels = plots.layer_timeline(report)
    ns = "{http://www.w3.org/2000/svg}"
    groups = {g.get("id"): g for g in root.iter(f"{ns}g") if (g.get("id") or "").startswith("tl-")}
    for p, panel in enumerate(panels):
        compute = [g for k, g in groups.items() if k.startswith(f"tl-{p}-0-")]
        assert len(compute) == sum(1 for b in panel.bars if b.track == COMPUTE_TRACK)
        assert len([k for k in groups if k.startswith(f"tl-{p}-")]) == len(panel.bars)
    bar = panels[0].bars[0]  # a compute slice, or the layer's first gather when it starts with the window
    title = groups[f"tl-0-{panels[0].tracks.index(bar.track)}-0"].find(f"{ns}title").text
    assert title.startswith(f"{bar.name}: {analyzer.units.format_seconds(bar.seconds)}")
    if bar.source:
        assert f"source: {bar.source}" in title


def test_html_has_the_step_section_and_stays_self_contained(report):
    text = html.render(report)
    page = _Page()
    page.feed(text)
    assert {"step", "step-table", "plot-breakdown", "plot-timeline"} <= page.ids
    assert page.external == [] and page.scripts == 0 and "<link" not in text
    section = text[text.index('<section id="step">'):text.index("</section>", text.index('<section id="step">'))]
    table = section[section.index('<table id="step-table">'):section.index("</table>")]
    cells = re.findall(r'<td class="num">([^<]*)</td>', table)
    for label, seconds, share in step_rows(report):
        assert label in table and seconds in cells and share in cells


@pytest.mark.slow
def test_unrolled_model_timeline_is_one_repeat():
    """A 3-layer unrolled transformer step (benchmarks/analyze_overhead.py's build): each panel holds the dots
    of one layer, one of each source line of the block."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from analyze_overhead import build

    fn, args, mesh = build(3, True)
    report = analyzer.analyze(fn, *args, mesh=mesh)
    panels = plots.layer_timeline(report)
    assert [p.label.split(" (")[0] for p in panels] == ["forward layer", "backward layer"]
    forward = panels[0]
    dots = [b for b in forward.bars if b.track == COMPUTE_TRACK and b.name.startswith(("dot", "convolution"))]
    # The block has 8 einsums (q, k, v, scores, values, out; the MLP's in and out share one line): one dot
    # each per layer.
    assert len(dots) == 8
    assert sorted(Counter(b.source for b in dots).values()) == [1, 1, 1, 1, 1, 1, 2]
    assert "plot-timeline" in html.render(report)


def test_timeline_colours_tell_compute_from_every_collective_kind():
    """The timeline draws compute bars and collective bars side by side with one legend: no colour may mean
    both (compute bound by FLOPs once shared the all-gather's blue)."""
    own = {plots.COMPUTE_COLOR, plots.MEMORY_COLOR, plots.WAIT_COLOR}
    assert len(own) == 3 and not own & set(plots.KIND_COLORS.values())
