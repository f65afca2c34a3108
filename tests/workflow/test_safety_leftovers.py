"""Issue 27's remaining cases: check's and diff's text escape control characters as the terminal report does;
report and sweep refuse an output that is one of their inputs before any work; per-rule options refuse NaN,
infinities and denormals with the key and file:line. None of these compiles.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from analyzer.cli import main
from analyzer.diagnostics import Diagnostic, Location
from analyzer.errors import ConfigError
from analyzer.workflows.check import CheckResult, EntryOutcome, EntryPoint

ROOT = Path(__file__).resolve().parents[2]
EVIL = "a\x1b[2Jb\u202ec\x07"


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


# ------------------------------------------------------------------------------------ escaping


def test_check_text_escapes_control_characters_in_file_names_and_messages(tmp_path):
    from analyzer.render import findings

    d = Diagnostic("HA901", "comm-budget", f"over {EVIL}", location=Location(file=f"m{EVIL}.py", line=3),
                   fix=f"shard {EVIL}")
    entry = EntryPoint(f"m{EVIL}:f", tmp_path / "m.py", 1)
    result = CheckResult(root=tmp_path, config_path=None,
                         outcomes=(EntryOutcome(entry, findings=(d,)),
                                   EntryOutcome(entry, error=f"boom {EVIL}")), notes=(f"note {EVIL}",))
    text = findings.render_text(result, show_baselined=True)
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    assert r"ma\x1b[2Jb\u202ec\x07.py:3: HA901" in text
    assert text.count(r"\x1b[2J") == 6  # file, message, fix, the error's entry and message, note
    assert "\n" in text  # newlines between findings are kept


def test_diff_text_escapes_control_characters_in_names_and_sources():
    from analyzer.render import diff as render
    from analyzer.workflows.diff import diff_sides

    row = {"kind": "all-gather", "axes": ["data"], "notation": f"AllGather_data{EVIL}", "bytes": 8, "count": 1,
           "total_seconds": 1e-5, "source": f"m{EVIL}.py:3"}
    text = render.render_text(diff_sides({f"p{EVIL}": []}, {f"p{EVIL}": [row]}, old_label=f"old{EVIL}",
                                         new_label="new"))
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    assert text.count(r"\x1b[2J") == 4  # label, program, notation, source


# ------------------------------------------------------------------------------------ outputs that are inputs


@pytest.fixture
def entry_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "layers.py").write_text("def dense(x):\n    return x\n")
    (tmp_path / "model.py").write_text("import layers\n\n\ndef step(mesh):\n    raise SystemExit('compiled')\n")
    (tmp_path / "plan.toml").write_text('name = "t"\nentry = "model.py:step"\n[mesh]\ndata = 2\n')
    return tmp_path


@pytest.mark.parametrize("command", ["report", "sweep"])
@pytest.mark.parametrize("target,kind", [("plan.toml", "config"), ("model.py", "source of entry point"),
                                         ("layers.py", "source of entry point")])
def test_report_and_sweep_refuse_an_output_that_is_an_input(entry_config, capsys, command, target, kind):
    os.symlink(target, entry_config / "out.md")  # a report path whose file is the input
    before = (entry_config / target).read_bytes()
    code, out, err = run_cli(capsys, command, "plan.toml", "-o", "out.md")
    assert code == 2
    assert "refusing to write" in err and kind in err and "compiled" not in out + err
    assert (entry_config / target).read_bytes() == before


def test_report_refuses_a_hardware_spec_and_a_trace_over_an_input(entry_config, capsys):
    spec = ROOT / "analyzer/_data/hardware"
    hw = entry_config / "hw.toml"
    hw.write_text(next(p for p in sorted(spec.iterdir()) if p.suffix == ".toml").read_text())
    os.symlink("hw.toml", entry_config / "out.json")
    code, _, err = run_cli(capsys, "report", "plan.toml", "--hardware", "./hw.toml", "-o", "out.json")
    assert code == 2 and "hardware spec" in err
    code, _, err = run_cli(capsys, "report", "plan.toml", "--trace", "plan.toml")
    assert code == 2 and "trace" in err and "config" in err


# ------------------------------------------------------------------------------------ numbers in rule options


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e-320"])
def test_rule_options_refuse_non_finite_and_denormal_numbers_at_their_line(tmp_path, value):
    from analyzer.rules.config import load_config

    path = tmp_path / "pyproject.toml"
    path.write_text('[tool.hlo-analyzer]\nentry-points = ["m:f"]\n\n[tool.hlo-analyzer.rules.HA201]\n'
                    f"min-fraction = {value}\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert e.value.line == 5 and "min-fraction" in str(e.value) and "finite, normal number" in str(e.value)


@pytest.mark.parametrize("table,value", [("rules.HA201", "min-fraction = nan"),
                                         ("budgets", "comm-seconds-per-step = inf")])
def test_report_config_numbers_are_refused_at_their_line(tmp_path, capsys, table, value):
    path = tmp_path / "r.toml"
    path.write_text(f'name = "x"\nstrategy = "fsdp"\n[mesh]\ndata = 8\n[model]\nd_model = 64\n[{table}]\n{value}\n')
    code, _, err = run_cli(capsys, "report", str(path))
    assert code == 2 and f"{path}:8:" in err and value.split()[0] in err
