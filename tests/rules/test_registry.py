"""The rule registry, the config loader, baselines, the CLI and the generated docs (no compiles here)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from analyzer.cli import main
from analyzer.rules.config import Budgets, Config, load_config
from analyzer.diagnostics import Diagnostic, Location, Severity
from analyzer.errors import ConfigError
from analyzer.analysis.report import COLLECTIVE_COLUMNS, DOT_COLUMNS, Report, Totals
from analyzer.theory.mesh import MeshInfo
from analyzer.rules import all_rules, check_rules, get_rule, is_enabled
from analyzer.rules.baseline import read_baseline, write_baseline
from analyzer.rules.registry import DOC_SECTIONS

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------------------------------- registry
def test_every_rule_has_a_stable_code_name_and_full_doc():
    rules = all_rules()
    assert len({r.code for r in rules}) == len(rules) == len({r.name for r in rules})
    for r in rules:
        positions = [r.doc.index(f"## {s}") for s in DOC_SECTIONS]
        assert positions == sorted(positions), r.code
        assert "Scale Your Model" in r.doc or r.code.startswith("HA9"), r.code


def test_issue_rules_are_all_registered():
    names = {r.name for r in all_rules()}
    assert {"comm-bound-matmul", "gathered-larger-operand", "all-reduce-not-reduce-scatter", "idle-mesh-axis",
            "latency-bound-collectives", "missing-wraparound", "resharding-traffic", "full-rematerialization",
            "memory-over-hbm", "replicated-large-parameter", "slow-link", "comm-budget-exceeded",
            "comm-compute-ratio-exceeded", "unused-suppression"} <= names
    assert get_rule("HA303").severity == Severity.ERROR


@pytest.mark.parametrize("code,select,ignore,expected", [
    ("HA202", ["HA"], [], True),
    ("HA202", ["HA"], ["HA2"], False),
    ("HA202", ["HA202"], ["HA2"], True),
    ("HA101", ["HA2"], [], False),
])
def test_select_and_ignore_by_prefix(code, select, ignore, expected):
    assert is_enabled(code, select, ignore) is expected


def test_unknown_rule_names_the_valid_codes():
    with pytest.raises(ConfigError) as e:
        get_rule("HA1O1")
    assert "did you mean 'HA101'" in str(e.value) and "HA303" in str(e.value)


# --------------------------------------------------------------------------------------------------- config
PYPROJECT = """\
[project]
name = "demo"

[tool.hlo-analyzer]
select = ["HA1", "HA3"]
ignore = ["HA302"]
hardware = "tpu-v5p"
topology = "v5p:2x2x2"
mesh = { data = 4, model = 2 }
target = "cpu"
entry-points = ["model.train:step"]
baseline = "hlo-baseline.json"

[tool.hlo-analyzer.budgets]
comm-seconds-per-step = 0.002
comm-compute-ratio = 0.5

[tool.hlo-analyzer.rules.HA301]
min-count = 4
severity = "error"

[tool.hlo-analyzer.rules.comm-bound-matmul]
margin = 0.2
"""


def write(tmp_path, text):
    p = tmp_path / "pyproject.toml"
    p.write_text(text)
    return p


def test_load_config_reads_every_key(tmp_path):
    c = load_config(write(tmp_path, PYPROJECT))
    assert c.select == ("HA1", "HA3") and c.ignore == ("HA302",)
    assert (c.hardware, c.topology, c.target) == ("tpu-v5p", "v5p:2x2x2", "cpu")
    assert dict(c.mesh) == {"data": 4, "model": 2} and c.entry_points == ("model.train:step",)
    assert c.budgets == Budgets(comm_seconds_per_step=0.002, comm_compute_ratio=0.5)
    assert c.option("HA301", "min_count", 8) == 4 and c.option("HA301", "severity", None) == Severity.ERROR
    assert c.option("HA101", "margin", 0.0) == 0.2  # keyed by name, stored by code
    assert c.baseline == "hlo-baseline.json"


def test_missing_table_gives_defaults(tmp_path):
    c = load_config(write(tmp_path, "[project]\nname = 'x'\n"))
    assert c.select == ("HA",) and c.ignore == ()


@pytest.mark.parametrize("bad,line,words", [
    (PYPROJECT.replace("target =", "targett ="), 10, ["'targett'", "did you mean 'target'", "valid keys"]),
    (PYPROJECT.replace('ignore = ["HA302"]', 'ignore = ["HA3O2"]'), 6, ["'HA3O2'", "'ignore'", "HA302"]),
    (PYPROJECT.replace("min-count = 4", "min-cnt = 4"), 19, ["'min-cnt'", "HA301", "min-count"]),
    (PYPROJECT.replace("comm-compute-ratio", "comm-ratio"), 16, ["'comm-ratio'", "comm-compute-ratio"]),
    (PYPROJECT.replace("margin = 0.2", "margin = 'big'"), 23, ["margin", "must be a number"]),
    (PYPROJECT.replace('severity = "error"', 'severity = "fatal"'), 20, ["fatal", "info, warning, error"]),
    (PYPROJECT.replace("[tool.hlo-analyzer.rules.HA301]", "[tool.hlo-analyzer.rules.HA399]"), 18, ["HA399"]),
])
def test_bad_config_names_key_file_line_and_valid_choices(tmp_path, bad, line, words):
    path = write(tmp_path, bad)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}:{line}"), msg
    for w in words:
        assert w in msg, msg


def test_bad_toml_is_a_config_error_with_position(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, "[tool.hlo-analyzer]\nselect = [\n"))
    assert e.value.line is not None and "not valid TOML" in str(e.value)


def test_override_layers_decorator_options():
    c = Config(ignore=("HA2",)).override(select=["HA1"], ignore=["HA102"], budgets={"comm-seconds-per-step": 1e-3})
    assert c.select == ("HA1",) and c.ignore == ("HA2", "HA102")
    assert c.budgets.comm_seconds_per_step == 1e-3 and c.where("HA102") == "decorator"
    with pytest.raises(ConfigError):
        Config().override(budgets={"nonsense": 1})
    with pytest.raises(ConfigError):
        Config(budgets=Budgets(comm_seconds_per_step=-1))


# --------------------------------------------------------------------------------------------------- reports by hand
def hand_report(rows, *, comm=1e-3, compute=2e-3, mesh=None):
    frame = pd.DataFrame([{**{c: None for c in COLLECTIVE_COLUMNS}, **r} for r in rows], columns=COLLECTIVE_COLUMNS)
    return Report(collectives=frame, dots=pd.DataFrame(columns=DOT_COLUMNS),
                  totals=Totals(comm_seconds=comm, compute_seconds=compute), hlo=None,
                  mesh=mesh or MeshInfo(("X",), (8,), tuple(range(8))), hardware="tpu-v5e", topology="", target="cpu")


def test_rules_run_on_a_report_without_hlo():
    r = hand_report([dict(kind="all-gather", axes=("X",), notation="AllGather_X: [I_X] -> [I]", dtype="bf16",
                          bytes=1e6, count=1, seconds=1e-5, regime="bandwidth", source="m.py:3",
                          instruction="all-gather.1", group_size=8)])
    # Every finding shown, however small: this test is about running without the HLO, not about thresholds.
    res = check_rules(r, Config(budgets=Budgets(comm_seconds_per_step=5e-4), min_saving_seconds=0,
                                min_saving_fraction=0))
    found = {d.code: d for d in res.diagnostics}
    assert found["HA501"].location.file == "m.py" and found["HA501"].saving_seconds == pytest.approx(5e-4)
    assert "HA302" not in found  # without the HLO nobody can tell a reshard from a matmul's gather
    assert "HA202" in found  # an 8-chip v5e axis has no wraparound: known from the spec alone


def test_a_failing_rule_becomes_ha900_and_the_others_still_run(monkeypatch):
    from analyzer.rules import runner
    from analyzer.rules.registry import Rule, all_rules as real

    def broken(ctx):
        raise KeyError("dot.3")

    broken.__doc__ = "\n".join(f"## {s}\nx" for s in DOC_SECTIONS)
    bad = Rule(code="HA199", name="broken-rule", severity=Severity.WARNING, summary="x", check=broken)
    monkeypatch.setattr(runner, "all_rules", lambda: (*real(), bad))
    r = hand_report([], comm=1.0, compute=0.1)
    found = {d.code: d for d in check_rules(r, Config(budgets=Budgets(comm_compute_ratio=1.0))).diagnostics}
    assert "HA502" in found and "KeyError" in found["HA900"].message and "HA199" in found["HA900"].message


# --------------------------------------------------------------------------------------------------- baseline
def test_baseline_round_trip_counts_and_ignores_line_numbers(tmp_path):
    a = Diagnostic("HA302", "resharding-traffic", "m", location=Location("m.py", 3, instruction="all-to-all.2"),
                   notation="AllToAll_X: [I_X, J] -> [I, J_X]")
    moved = Diagnostic("HA302", "resharding-traffic", "m", location=Location("m.py", 9, instruction="all-to-all.7"),
                       notation="AllToAll_X: [I_X, J] -> [I, J_X]")
    path = write_baseline(tmp_path / "b.json", [a])
    b = read_baseline(path)
    new, accepted, stale = b.split([moved, moved])
    assert len(accepted) == 1 and len(new) == 1 and not stale
    assert b.split([])[2] == [a.fingerprint()]


@pytest.mark.parametrize("text,words", [
    ("{not json", ["not JSON"]),
    ('{"version": 1}', ["not a hlo-analyzer baseline"]),
    ('{"version": 9, "findings": []}', ["version 9", "valid versions: 1"]),
    ('{"version": 1, "findings": [{"code": "HA1"}]}', ["fingerprint"]),
])
def test_bad_baseline_files(tmp_path, text, words):
    p = tmp_path / "b.json"
    p.write_text(text)
    with pytest.raises(ConfigError) as e:
        read_baseline(p)
    for w in words:
        assert w in str(e.value)


# --------------------------------------------------------------------------------------------------- CLI and docs
def test_cli_lists_rules_and_prints_a_doc(capsys):
    assert main(["rules"]) == 0
    out = capsys.readouterr().out
    assert "HA101" in out and "comm-bound-matmul" in out and "error" in out
    assert main(["rule", "HA102"]) == 0
    out = capsys.readouterr().out
    assert "## Why is this bad?" in out and "min-ratio" in out
    assert main(["rules", "--json"]) == 0
    assert {r["code"] for r in json.loads(capsys.readouterr().out)} == {r.code for r in all_rules()}


def test_cli_unknown_code_exits_2_with_valid_codes(capsys):
    assert main(["rule", "HA999"]) == 2
    err = capsys.readouterr().err
    assert "HA999" in err and "HA101" in err


def test_cli_rules_takes_codes_prefixes_and_names(capsys):
    assert main(["rules", "HA2", "comm-bound-matmul"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert listed == ["HA101"] + sorted(r.code for r in all_rules() if r.code.startswith("HA2"))
    assert main(["rules", "--json", "ha301"]) == 0
    assert [r["code"] for r in json.loads(capsys.readouterr().out)] == ["HA301"]
    assert main(["rules", "HA999"]) == 2  # said as `rule HA999` says it, not "unrecognized arguments"
    err = capsys.readouterr().err
    assert "unknown rule 'HA999'" in err and "HA101" in err


def test_docs_rules_md_is_current():
    from analyzer.cli.rules import markdown

    path = ROOT / "docs" / "rules.md"
    assert path.read_text() == markdown(), "docs/rules.md is stale: run `hlo-analyzer rules --markdown > docs/rules.md`"
