"""Reports stay readable at any size (issue 11 item 6): rows grouped by (notation, user line) with counts,
long HTML folded, terminal tables that say which columns they hid, paths never split across lines.

A deep model is built by hand like the conftest's report: 12 unrolled layers whose collectives come from the
same few lines of the layer's code, 46 per layer (552 rows, the size of the real model in the issue).
"""

from __future__ import annotations

import re
from dataclasses import replace

import pandas as pd
import pytest

from analyzer.analysis.report import COLLECTIVE_COLUMNS, DOT_COLUMNS
from analyzer.diagnostics import Diagnostic, Location, Severity
from analyzer.render import html, markdown, terminal
from analyzer.render._common import collective_groups

from .conftest import _collective, make_report

LAYERS = 12
# (kind, axes, notation, bytes, seconds, line) of one layer's collectives, at the lines of a layer's code.
LAYER = [
    ("all-gather", ["data"], "AllGather_data: [I_data, J_model] -> [I, J_model]", 8 << 20, 2.4e-4, 41),
    ("reduce-scatter", ["data"], "ReduceScatter_data,I: [I, J_model]{U_data} -> [I_data, J_model]", 16 << 20,
     4.8e-4, 41),
    ("all-reduce", ["model"], "AllReduce_model: [I, J, K]{U_model} -> [I, J, K]", 4 << 20, 1.2e-4, 58),
    ("all-gather", ["model"], "AllGather_model: [I, J, K_model] -> [I, J, K]", 1 << 20, 3.0e-5, 63),
]
SITES_PER_LINE = 46 // len(LAYER)  # 11 collectives per (notation, line) and layer: 44 per layer, plus 2 below


def deep_report():
    rows = []
    k = 0
    for layer in range(LAYERS):
        for kind, axes, notation, nbytes, seconds, line in LAYER:
            for _ in range(SITES_PER_LINE):
                k += 1
                rows.append(_collective(kind, axes, notation, "bf16", nbytes, 1, seconds, "bandwidth",
                                        "jit(step)/layer/dot_general", f"model/layer.py:{line}", "forward", 4,
                                        instruction=f"{kind}.{k}", array=f"params['layers_{layer}']['w']"))
        for line in (90, 91):  # two one-off collectives per layer, each at a line of its own
            k += 1
            rows.append(_collective("all-reduce", ["data"], "AllReduce_data: []{U_data} -> []", "f32", 4, 1, 2e-6,
                                    "latency", "jit(step)/loss/psum", f"model/layer.py:{line + 10 * layer}", "", 8,
                                    instruction=f"all-reduce.{k}"))
    frame = pd.DataFrame(rows, columns=list(COLLECTIVE_COLUMNS))
    base = make_report(with_findings=False, name="12-layer model (hand-built)")
    comm = float((frame["seconds"] * frame["count"]).sum())
    findings = tuple(
        Diagnostic("HA302", "resharding-traffic", f"layer {i}: the activation is resharded", Severity.WARNING,
                   Location("model/layer.py", 58, instruction=f"all-reduce.{i}"),
                   notation=LAYER[2][2], seconds=1.2e-4, saving_seconds=1e-4)
        for i in range(86))
    return replace(base, collectives=frame, totals=replace(base.totals, comm_seconds=comm), diagnostics=findings)


@pytest.fixture(scope="module")
def deep():
    return deep_report()


def test_rows_are_grouped_by_notation_and_line_with_sums(deep):
    groups = collective_groups(deep)
    assert len(deep.collectives) == LAYERS * (len(LAYER) * SITES_PER_LINE + 2) == 552
    # 4 (notation, line) pairs shared by every layer, plus 2 one-off lines per layer.
    assert len(groups) == len(LAYER) + 2 * LAYERS
    top = groups[0]  # the reduce-scatters: 12 layers x 11 sites x 480 us = 63.36 ms per step
    assert top.notation == LAYER[1][2] and top.sites == LAYERS * SITES_PER_LINE == 132
    assert top.total_value == pytest.approx(132 * 4.8e-4)
    assert top.count == "132" and top.total_seconds == "63.4 ms"
    share = 100 * 132 * 4.8e-4 / deep.totals.comm_seconds
    assert top.share == f"{share:.0f}%"
    # the array it moves is named, with * where the layers differ
    assert top.label == "ReduceScatter_data,I: params['layers_*']['w'][I, J_model]{U_data} -> [I_data, J_model]"
    assert sum(g.sites for g in groups) == 552


def test_text_and_markdown_print_the_groups_with_their_counts(deep):
    text = terminal.render(deep, width=200, limit=None)
    assert "(132 sites)" in text and "552 grouped by notation and line" in text
    md = markdown.render(deep)
    assert "(132 sites)" in md and "The 552 collectives are grouped by notation and source line (28 rows)" in md
    assert md.count("\n| `") < 40  # one Markdown row per group, not 552


def test_html_folds_long_tables_and_groups(deep):
    page = html.render(deep)
    main_table = re.search(r'<table id="collectives-table">(.*?)</table>', page, re.S).group(1)
    assert main_table.count("<tr>") == 1 + html.COLLECTIVES_OPEN  # header + the open rows
    assert '<details id="collectives-more"><summary>8 more rows' in page
    assert page.count('<details class="sites-list">') == 4  # the 4 groups with more than one site
    assert "132 sites" in page


@pytest.mark.parametrize("width", [80, 100, 108, 112, 120, 127, 140])
def test_terminal_table_fits_the_width_and_says_what_it_hid(deep, width):
    text = terminal.render(deep, width=width, limit=10)
    table = text[text.index("Collectives (per step"):text.index("Totals (per step)")]
    assert all(len(line) <= width for line in table.splitlines())
    hidden = re.search(r"columns hidden to fit (\d+) characters: ([a-z ,]+) \(", " ".join(table.split()))
    # paths are never split across lines, nor cut short by the table (rich crops a no-wrap cell that does not fit)
    assert "model/layer.py:41" in table and "model/layer.py:58" in table
    if hidden is None:  # everything fitted
        assert "columns hidden" not in table
        return
    assert int(hidden.group(1)) == width
    names = [h.strip() for h in hidden.group(2).split(",")]
    header = next(line for line in table.splitlines() if "collective" in line and "source" in line)
    for column in ("collective", "axes", "bytes", "count", "each", "per step", "share", "regime", "source"):
        assert (column in names) != (column in header.split("  ") or f" {column} " in f" {header} "), column
    # paths are never split across lines
    assert "model/layer.py:41" in table and "model/layer.py:58" in table


def test_terminal_shows_every_column_when_there_is_room(deep):
    text = terminal.render(deep, width=220, limit=10)
    assert "columns hidden" not in text
    header = next(line for line in text.splitlines() if "collective" in line and "source" in line)
    assert all(c in header for c in ("axes", "bytes", "count", "each", "per step", "share", "regime"))


@pytest.mark.slow
def test_html_of_a_12_layer_model_is_under_8000_px_in_chromium(deep, chromium, tmp_path):
    """The acceptance figure of issue 11: the page of a 12-layer model, groups folded, in a real browser."""
    from .test_chromium import ARTIFACTS, _render

    page = tmp_path / "deep.html"
    page.write_text(html.render(deep), encoding="utf-8")
    ARTIFACTS.mkdir(exist_ok=True)
    layout, _ = _render(chromium, page, ["#collectives-table", "#findings"], ARTIFACTS / "deep-chromium.png")
    assert layout["items"]["#collectives-table"]["rows"] == html.COLLECTIVES_OPEN
    assert layout["height"] < 8000, f"the page is {layout['height']} px tall"


def test_html_plan_lists_fold_past_their_open_lines(deep):
    """The plan's per-pass lists and the largest matmuls show their costliest lines open and fold the rest:
    15 distinct forward collectives (12 open, 3 folded) and 9 matmuls (6 open, 3 folded)."""
    rows = [_collective("all-gather", ["data"], f"AllGather_data: [I_data, J{k}] -> [I, J{k}]", "bf16", 1 << 20, 1,
                        (k + 1) * 1e-5, "bandwidth", "jit(step)/layer/dot_general", f"model/layer.py:{k + 1}",
                        "forward", 4, instruction=f"all-gather.{k}") for k in range(15)]
    dots = pd.DataFrame([{**{c: None for c in DOT_COLUMNS}, "instruction": f"dot.{k}", "flops": 1e9 * (k + 1),
                          "count": 1, "seconds": 1e-6 * (k + 1), "notation": f"[B, D{k}] x [D{k}, F] -> [B, F]"}
                         for k in range(9)], columns=list(DOT_COLUMNS))
    page = html.render(replace(deep, collectives=pd.DataFrame(rows, columns=list(COLLECTIVE_COLUMNS)), dots=dots))
    assert page.count('<details class="plan-more">') == 2
    assert "<summary>3 more, each costing less</summary>" in page and "<summary>3 more matmuls</summary>" in page
    plan = page[page.index("<h3>Forward pass</h3>"):page.index("<summary>3 more, each costing less")]
    assert plan.count("<li>") == html.PLAN_OPEN == 12
    assert "J14" in plan and "J2]" not in plan  # the costliest open, the cheapest folded
