"""analyzer/formats.py is the one table of output formats: every renderer it names exists and answers its kind's
call, and the commands and `Report.to_*` read it (adding a format is one entry plus its renderer module)."""

from __future__ import annotations

import inspect
import json

import pytest

from analyzer import formats
from analyzer.errors import AnalyzerError


def test_every_renderer_named_exists_and_takes_its_kinds_call():
    calls = {"report": {"sweep", "whatif"}, "table": set(), "check": {"show_baselined"}, "diff": {"threshold"}}
    for fmt in formats.FORMATS:
        assert fmt.suffixes == tuple(s.lower() for s in fmt.suffixes) and all(s.startswith(".") for s in fmt.suffixes)
        for kind in formats.KINDS:
            if not fmt.renders(kind):
                with pytest.raises(AnalyzerError, match=f"unknown {kind} format '{fmt.name}'"):
                    formats.renderer(fmt.name, kind)
                continue
            fn = formats.renderer(fmt.name, kind)
            params = inspect.signature(fn).parameters
            assert calls[kind] <= set(params), (fmt.name, kind, list(params))
            assert fn.__module__.startswith("analyzer.render."), fn.__module__


def test_suffixes_name_one_format_each_and_only_formats_that_write_that_kind():
    seen = [s for f in formats.FORMATS for s in f.suffixes]
    assert len(seen) == len(set(seen))
    assert formats.for_path("x.sarif") == "sarif" and formats.for_path("x.csv", "table") == "csv"
    with pytest.raises(AnalyzerError, match="cannot tell the report format of 'x.csv'"):
        formats.for_path("x.csv")  # CSV is the collectives table, not a report
    assert formats.names("check") == ("text", "json", "github", "sarif")
    assert formats.choices_text("check", "text") == "text (default), json, github (workflow annotations) or sarif (SARIF 2.1.0)"


def test_the_report_methods_and_the_commands_render_through_the_table(report):
    from analyzer.cli import check as cli_check
    from analyzer.render import render

    assert report.to_markdown() == render(report, "markdown") == formats.renderer("markdown", "report")(report)
    assert report.to_html() == render(report, "html")
    assert report.to_text() == render(report, "text")
    assert report.to_json() == render(report, "json")
    assert json.loads(report.to_json()) == report.to_dict()
    assert cli_check.OUTPUT_FORMATS == formats.names("check")
    csv = formats.renderer("csv", "table")(report)
    assert csv.splitlines()[0].split(",") == list(report.collectives.columns)
    assert len(csv.splitlines()) == len(report.collectives) + 1
    sarif = json.loads(render(report, "sarif"))
    assert sarif["version"] == "2.1.0" and len(sarif["runs"][0]["results"]) == len(report.diagnostics)
