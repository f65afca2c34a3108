"""Dumps whose header gives no device count: the count comes from the collectives' device ids."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from analyzer.analysis.devices import DeviceCount, device_count
from analyzer.hlo.parser import parse_hlo
from analyzer.pipeline import analyze_hlo

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "fixtures" / "cpu" / "data4_model2" / "fsdp_tp_mlp_step.spmd.hlo"


def _without_device_count(text: str) -> str:
    stripped = re.sub(r", (num_partitions|replica_count)=\d+", "", text)
    assert "num_partitions=" not in stripped and stripped != text
    return stripped


def test_header_count_is_used_when_present():
    assert device_count(parse_hlo(FIXTURE.read_text())) == DeviceCount(8, "header")


def test_count_read_from_collectives_without_header():
    module = parse_hlo(_without_device_count(FIXTURE.read_text()))
    assert module.num_partitions == 1
    assert device_count(module) == DeviceCount(8, "collectives")


def test_dump_without_header_count_reports_the_same_collectives():
    """A manual count: the same module with and without num_partitions gives the same bytes per call."""
    text = FIXTURE.read_text()
    with_header = analyze_hlo(text, mesh="data=4,model=2")
    without = analyze_hlo(_without_device_count(text))
    assert without.mesh is not None and without.mesh.size == 8
    cols = ["kind", "bytes", "count"]
    a = with_header.collectives[cols].sort_values(cols).reset_index(drop=True)
    b = without.collectives[cols].sort_values(cols).reset_index(drop=True)
    assert a.equals(b)
    assert any("read 8 devices from the device ids" in n for n in without.notes)


def test_single_device_module_stays_one():
    module = parse_hlo("HloModule m\nENTRY e {\n  ROOT p = f32[4] parameter(0)\n}\n")
    assert device_count(module) == DeviceCount(1, "header")


@pytest.mark.parametrize("pairs, expected", [("{{0,1},{1,2},{2,3},{3,0}}", 4), ("{{0,5}}", 6)])
def test_count_from_source_target_pairs(pairs, expected):
    module = parse_hlo("HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n"
                       f"  ROOT c = f32[4] collective-permute(p), channel_id=1, source_target_pairs={pairs}\n}}\n")
    assert device_count(module).devices == expected


def test_dump_from_another_xla_version_is_read_leniently():
    """An attribute this XLA does not know is an error for parse_hlo, but a dump is read with a warning."""
    from analyzer.errors import HloSyntaxError

    text = FIXTURE.read_text().replace("channel_id=1,", "channel_id=1, frobnicate=3,", 1)
    with pytest.raises(HloSyntaxError):
        parse_hlo(text)
    report = analyze_hlo(text, mesh="data=4,model=2")
    warnings = [w for w in report.warnings if "does not know" in w]
    assert len(warnings) == 1 and "1 HLO construct(s)" in warnings[0] and "frobnicate" in warnings[0]
