"""The JSON report follows its documented, versioned schema (docs/report-schema.json)."""

import json
from pathlib import Path

import jsonschema
import pytest

from analyzer.analysis.report import COLLECTIVE_COLUMNS, DOT_COLUMNS, REPORT_SCHEMA_VERSION, report_to_dict
from analyzer.analysis.serialize import to_jsonable
from analyzer.render.json import render
from analyzer.workflows.sweep import SweepEntry, SweepResult, rank_entries

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "docs" / "report-schema.json"


@pytest.fixture(scope="module")
def schema():
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def _validate(data, schema):
    jsonschema.Draft202012Validator(schema).validate(data)


def test_schema_version_matches_report_module(schema):
    assert schema["properties"]["schema_version"]["const"] == REPORT_SCHEMA_VERSION


def test_schema_lists_exactly_the_report_columns(schema):
    """A column added to the Report must reach the schema (and bump its version when it changes a type)."""
    collective = schema["properties"]["collectives"]["items"]
    assert list(collective["properties"]) == list(COLLECTIVE_COLUMNS)
    assert set(collective["required"]) == set(COLLECTIVE_COLUMNS)
    dot = schema["properties"]["dots"]["items"]
    assert list(dot["properties"]) == list(DOT_COLUMNS)


def test_report_validates(report, schema):
    data = json.loads(render(report))
    _validate(data, schema)
    assert data["schema_version"] == REPORT_SCHEMA_VERSION
    assert len(data["collectives"]) == len(report.collectives)
    first = data["collectives"][0]
    assert first["axes"] == ["data"] and first["notation"].startswith("AllGather_data")
    assert data["diagnostics"][0]["severity"] in {"info", "warning", "error"}
    assert data["totals"]["comm_seconds"] == pytest.approx(report.totals.comm_seconds, rel=1e-12)


def test_empty_report_validates(empty_report, schema):
    data = report_to_dict(empty_report)
    _validate(data, schema)
    assert data["collectives"] == [] and data["mesh"] is None
    assert data["totals"]["comm_compute_ratio"] is None  # 0/0 has no value; JSON has no NaN


def test_sweep_validates(report, schema):
    sweep = SweepResult(rank_entries([
        SweepEntry("fsdp", "data=8,model=1", 1e-3, 2e-3, memory_bytes=10, hbm_bytes=100),
        SweepEntry("tp", "data=1,model=8", error="LoweringError: no"),
    ]), hardware="tpu-v5e")
    data = json.loads(render(report, sweep=sweep))
    _validate(data, schema)
    assert data["sweep"]["best"] == "fsdp @ data=8,model=1"
    assert data["sweep"]["entries"][1]["step_seconds"] is None


def test_bad_output_fails_the_schema(report, schema):
    """The schema is strict enough to catch a renamed or retyped field."""
    data = report_to_dict(report)
    data["collectives"][0]["bytes"] = "64 MiB"
    with pytest.raises(jsonschema.ValidationError):
        _validate(data, schema)
    data = report_to_dict(report)
    data["totals"]["comm_secs"] = data["totals"].pop("comm_seconds")
    with pytest.raises(jsonschema.ValidationError):
        _validate(data, schema)


def test_strict_json_and_plain_types():
    import numpy as np

    assert to_jsonable({"a": (np.int64(3), np.float32(0.5), float("nan"))}) == {"a": [3, 0.5, None]}
    assert json.loads(json.dumps(to_jsonable({"x": float("inf")}), allow_nan=False)) == {"x": None}


def test_round_trip(report, schema):
    """report_from_dict(report_to_dict(r)) renders the same JSON: sweeps rely on it to skip a recompile."""
    from analyzer.analysis.report import report_from_dict

    data = report_to_dict(report)
    again = report_from_dict(json.loads(json.dumps(data)))
    assert report_to_dict(again) == data
    with pytest.raises(Exception, match="schema version"):
        report_from_dict({"schema_version": "0"})
