"""Terminal and Markdown reports show the same content, in their own markup."""

from analyzer.formats import for_path, suffixes
from analyzer.render import render, write
from analyzer.render import markdown, terminal
from analyzer.errors import AnalyzerError

import pytest


def test_terminal_report(report):
    text = terminal.render(report, width=160)
    assert "AllReduce_model: [B_data, S, D]{U_model} -> [B_data, S, D]" in text
    lines = text.splitlines()
    # Costliest per step first: the all-reduce (4 x 1.5 ms) before the reduce-scatter (4 x 620 us).
    first = next(i for i, l in enumerate(lines) if "AllReduce_model" in l)
    second = next(i for i, l in enumerate(lines) if "ReduceScatter_data" in l)
    assert first < second
    assert "6.00 ms" in text and "Findings (3)" in text
    findings = text[text.index("Findings (3)"):]  # (the report's first line names the top root cause's codes)
    assert findings.index("HA106") < findings.index("HA103") < findings.index("HA105")  # error, warning, info
    assert "\x1b[" not in text
    assert "\x1b[" in terminal.render(report, color=True)


def test_terminal_limit_and_empty(report, empty_report):
    text = terminal.render(report, limit=2)
    assert "3 more collectives not shown" in text
    from dataclasses import replace

    many = replace(report, diagnostics=tuple(report.diagnostics) * 3)
    text = terminal.render(many, per_rule=2)
    assert text.count("HA103 all-reduce-where") == 2 and "... and 1 more HA103 finding" in text
    assert terminal.render(many, per_rule=None).count("HA103 all-reduce-where") == 3
    assert "No collectives" in terminal.render(empty_report)


def test_markdown_report(report):
    text = markdown.render(report)
    assert text.startswith("# hlo-analyzer report: fsdp+tp step (hand-built)")
    assert "| `AllReduce_model: [B_data, S, D]{U_model} -> [B_data, S, D]` | model |" in text
    assert "### ERROR HA106 `missing-wraparound`" in text
    assert "**Saves 2.48 ms per step**" in text
    assert "## Notes and assumptions" in text
    # every table row has the header's number of cells
    for block in text.split("\n\n"):
        rows = [l for l in block.splitlines() if l.startswith("|")]
        if rows:
            widths = {l.replace("\\|", "").count("|") for l in rows}
            assert len(widths) == 1, block


def test_format_dispatch(report, tmp_path):
    assert for_path("a/b/report.md") == "markdown"
    assert for_path("R.HTML") == "html"
    with pytest.raises(AnalyzerError, match="valid extensions"):
        for_path("report.pdf")
    with pytest.raises(AnalyzerError, match="did you mean 'markdown'"):
        render(report, "markdwn")
    for ext in suffixes("report"):
        path = write(report, tmp_path / f"r{ext}")
        assert path.read_text(encoding="utf-8")
