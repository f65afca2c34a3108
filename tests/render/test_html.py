"""The HTML report: one self-contained file with plots, tables and findings; report text is escaped."""

import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

from analyzer.render import html, plots
from analyzer.workflows.sweep import SweepEntry, SweepResult, rank_entries


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = []
        self.ids = set()
        self.external = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        for key in ("src", "href"):
            value = attrs.get(key) or ""
            if value and not value.startswith("#"):
                self.external.append(value)


def _sweep():
    return SweepResult(rank_entries([
        SweepEntry("fsdp", "data=8,model=1", 8e-3, 2e-2, memory_bytes=6 << 30, hbm_bytes=16 << 30),
        SweepEntry("tp", "data=1,model=8", 4e-2, 2e-2, memory_bytes=20 << 30, hbm_bytes=16 << 30),
        SweepEntry("ep", "data=8,model=1", error="MeshError: no expert axis"),
    ]), hardware="tpu-v5e")


def test_self_contained_with_plots_and_tables(report):
    text = html.render(report, sweep=_sweep())
    parser = _Collect()
    parser.feed(text)
    assert parser.external == []  # no scripts, stylesheets, images or fonts fetched
    assert "<link" not in text and "<script" not in text
    assert {"summary", "sweep", "plan", "plots", "findings", "collectives", "notes", "collectives-table",
            "sweep-table", "plot-kind", "plot-axis", "plot-layer", "plot-sweep", "step", "step-table",
            "plot-breakdown"} <= parser.ids
    # kind, axis, layer, sweep and the step breakdown; no timeline: a hand-built report has no step spans
    assert parser.tags.count("svg") == 5 and "plot-timeline" not in parser.ids
    rows = re.search(r'<table id="collectives-table">(.*?)</table>', text, re.S).group(1)
    assert rows.count("<tr>") == len(report.collectives) + 1  # header + one per collective


def test_report_text_is_escaped(report):
    text = html.render(report)
    assert "<script>alert(1)</script>" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "{U_model} -&gt; [B_data, S, D]" in text
    assert "<code>data</code>" in text  # inline Markdown in messages becomes code


def test_svg_plots_are_well_formed(report):
    for svg in (plots.kind_plot(report), plots.axis_plot(report), plots.layer_plot(report),
                plots.sweep_plot(_sweep())):
        root = ET.fromstring(svg)
        assert root.tag.endswith("svg") and root.get("viewBox")
        assert root.get("aria-label")


def test_layer_blocks_split_the_step(report):
    """A scanned layer's collectives and dots form one block per pass; what runs once is another."""
    blocks = {b.label: b for b in plots.layer_blocks(report)}
    assert set(blocks) == {"forward, per layer (x4)", "backward, per layer (x4)", "outside layers (once per step)"}
    fwd = blocks["forward, per layer (x4)"]
    assert abs(fwd.comm_seconds - (3.1e-4 + 1.5e-3 + 2.0e-4)) < 1e-12
    assert abs(fwd.compute_seconds - (1.1e-3 + 5.5e-4)) < 1e-12


def test_no_collectives(empty_report):
    text = html.render(empty_report)
    assert "XLA inserted no communication into this program." in text
    assert "No findings" in text
    assert "<svg" not in text
