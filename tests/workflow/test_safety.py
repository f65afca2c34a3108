"""Safe where users point it (issue 27): one group of tests per class of the audit.

Outputs never replace what they should not; git revisions stay arguments; SIGTERM/SIGHUP end a command like
Ctrl-C; NaN, infinities and denormals are refused with the key and file:line; strings are escaped for the
format they go into; inputs that are not regular files are refused; and the workflow edges (the baseline
line to add, repository-relative diff labels, the width of a pipe). No test here compiles.
"""

from __future__ import annotations

import io
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from analyzer.cli import main
from analyzer.errors import AnalyzerError, ConfigError, HardwareError, HloSyntaxError, OutputError
from analyzer.fileio import check_writable, locked, write_atomic

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "fixtures/cpu/X2_Y4/matmul_case3.spmd.hlo"
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


# ------------------------------------------------------------------------------------ outputs


def test_a_fifo_is_written_through_not_replaced(tmp_path):
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    check_writable(fifo)
    write_atomic(fifo, "through\n")
    reader.join(10)
    assert got == ["through\n"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_a_character_device_is_written_through_not_replaced(tmp_path):
    null = tmp_path / "null"  # a /dev/null of our own: the real one is never touched
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    write_atomic(null, "secret\n")
    assert stat.S_ISCHR(os.lstat(null).st_mode)
    assert null.read_text() == ""
    assert [p.name for p in tmp_path.iterdir()] == ["null"]


@pytest.mark.parametrize("name", ["-", "/dev/stdout"])
def test_dash_and_dev_stdout_mean_standard_output(name, capfd):
    write_atomic(name, "to stdout\n")
    assert capfd.readouterr().out == "to stdout\n"


def test_a_symlink_target_is_rewritten_and_a_dangling_one_refused(tmp_path):
    (tmp_path / "real.json").write_text("old")
    (tmp_path / "link.json").symlink_to("real.json")
    write_atomic(tmp_path / "link.json", "new")
    assert (tmp_path / "link.json").is_symlink() and (tmp_path / "real.json").read_text() == "new"
    (tmp_path / "dangling.json").symlink_to(tmp_path / "planted")
    with pytest.raises(OutputError, match="symbolic link"):
        check_writable(tmp_path / "dangling.json")
    with pytest.raises(OutputError, match="symbolic link"):
        write_atomic(tmp_path / "dangling.json", "x")
    assert not (tmp_path / "planted").exists()


def test_a_planted_lock_symlink_is_not_followed(tmp_path):
    (tmp_path / ".b.json.lock").symlink_to(tmp_path / "victim")
    with pytest.raises(OutputError, match="symbolic link"):
        with locked(tmp_path / "b.json"):
            pass
    assert not (tmp_path / "victim").exists()


def test_a_new_file_gets_the_umask_mode(tmp_path):
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "t.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "t.json").st_mode) == 0o644


@pytest.mark.parametrize("argv, message", [
    (["-o", "pyproject.toml"], "it is the config"),
    (["-o", "model/train.py"], "source of entry point 'model.train:step'"),
    (["--write-baseline", "--baseline", "pyproject.toml"], "it is the config"),
])
def test_check_refuses_an_output_that_is_an_input(project, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(project)
    before = {p: p.read_bytes() for p in project.rglob("*") if p.is_file()}
    code, _, err = run_cli(capsys, "check", *argv)
    assert code == 2 and message in err
    assert {p: p.read_bytes() for p in project.rglob("*") if p.is_file()} == before


def test_write_baseline_never_overwrites_a_file_that_is_not_a_baseline(project, monkeypatch, capsys):
    monkeypatch.chdir(project)
    (project / "b.json").write_text('{"not": "a baseline"}\n')
    code, _, err = run_cli(capsys, "check", "--write-baseline", "--baseline", "b.json")
    assert code == 2 and "refusing to overwrite" in err
    assert (project / "b.json").read_text() == '{"not": "a baseline"}\n'
    from analyzer.rules.baseline import update_baseline

    with pytest.raises(ConfigError, match="refusing to overwrite"):
        update_baseline(project / "b.json", {}, complete=True)
    assert (project / "b.json").read_text() == '{"not": "a baseline"}\n'


# ------------------------------------------------------------------------------------ git revisions


def _git(repo, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo), *args], check=True,
                   capture_output=True)


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "repo"
    (r / "sub").mkdir(parents=True)
    (r / "pyproject.toml").write_text('[tool.hlo-analyzer]\nentry-points = []\nmesh = { X = 2 }\n')
    (r / "sub" / "keep.txt").write_text("x\n")
    _git(r, "init", "-q")
    _git(r, "add", ".")
    _git(r, "commit", "-q", "-m", "init")
    return r


def test_a_revision_that_looks_like_an_option_never_reaches_git(repo, monkeypatch, capsys):
    precious = repo.parent / "precious.txt"
    precious.write_text("keep me\n")
    monkeypatch.chdir(repo)
    for rev in ("--output=../precious.txt", "--list"):
        code, _, err = run_cli(capsys, "diff", "--", f"{rev}:pyproject.toml", "pyproject.toml")
        assert code == 2 and "is not a git revision" in err and "internal error" not in err
    assert precious.read_text() == "keep me\n"


def test_a_path_outside_the_repository_is_refused_whatever_tmpdir_holds(repo, tmp_path, monkeypatch, capsys):
    planted = tmp_path / "tmp"
    planted.mkdir()
    (planted / "x.toml").write_text("[tool.hlo-analyzer]\nentry-points = ['boom:f']\n")
    monkeypatch.setenv("TMPDIR", str(planted))
    monkeypatch.chdir(repo / "sub")
    code, _, err = run_cli(capsys, "diff", "HEAD:../../x.toml", "../pyproject.toml")
    assert code == 2 and "outside the git repository" in err
    code, _, err = run_cli(capsys, "diff", "HEAD:../x.toml", "../pyproject.toml")
    assert code == 2 and "no file 'x.toml' at git revision" in err


@pytest.mark.parametrize("target", ["/etc/hostname", "../../outside"])
def test_a_repository_with_a_symlink_out_of_it_works(repo, monkeypatch, capsys, target):
    (repo / "link").symlink_to(target)
    _git(repo, "add", "link")
    _git(repo, "commit", "-q", "-m", "link")
    monkeypatch.chdir(repo)
    code, _, err = run_cli(capsys, "diff", "HEAD:pyproject.toml", "pyproject.toml")
    assert code == 2 and "internal error" not in err
    assert "lists no entry-points" in err  # the config itself was reached and read


def test_diff_names_sides_relative_to_the_repository(repo, monkeypatch):
    from analyzer.workflows.diff import _relative_sources, side_label

    monkeypatch.chdir(repo / "sub")
    assert side_label("HEAD:../pyproject.toml") == "HEAD:pyproject.toml"
    assert side_label("HEAD:keep.txt") == "HEAD:sub/keep.txt"
    assert side_label(str(repo / "pyproject.toml")) == "pyproject.toml"
    report = {"collectives": [{"source": f"{repo}/model.py:12"}, {"source": "/elsewhere/x.py:3"}]}
    assert [r["source"] for r in _relative_sources(report, repo)["collectives"]] == ["model.py:12",
                                                                                       "/elsewhere/x.py:3"]


# ------------------------------------------------------------------------------------ signals


# `python -m analyzer ARGV...` started as a shell would start it, SIGTERM and SIGHUP at their default: under `nohup`
# the test run inherits SIGHUP ignored, and the command keeps an ignored signal ignored (by design, `stop_signals`).
# (Set in the child's own first lines: a preexec_fn would run Python in a fork of this multithreaded process.)
_AS_FROM_A_SHELL = ("import runpy, signal\n"
                    "for s in (signal.SIGTERM, signal.SIGHUP):\n    signal.signal(s, signal.SIG_DFL)\n"
                    "runpy.run_module('analyzer', run_name='__main__', alter_sys=True)\n")


def _start(argv, cwd, tmp, mark):
    env = {**ENV, "TMPDIR": str(tmp), "HLO_TEST_MARK": str(mark)}
    return subprocess.Popen([sys.executable, "-c", _AS_FROM_A_SHELL, *argv], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _wait_for(path: Path, proc, seconds=60.0):
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the command never reached the user code"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie of ours is not alive
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


HANG = "import os, pathlib, time\ndef step(mesh):\n" \
       "    pathlib.Path(os.environ['HLO_TEST_MARK']).write_text(str(os.getpid()))\n    while True:\n" \
       "        time.sleep(0.05)\n"


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143),
                                       pytest.param(signal.SIGHUP, 129, marks=pytest.mark.slow)])
def test_analyze_ends_on_sigterm_and_sighup_like_ctrl_c(tmp_path, sig, code):
    (tmp_path / "u.py").write_text(HANG)
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    mark = tmp_path / "mark"
    proc = _start(["analyze", "u.py:step", "--mesh", "X=2"], tmp_path, tmp, mark)
    _wait_for(mark, proc)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "Traceback" not in err and f"stopped by {signal.Signals(sig).name}" in err
    assert list(tmp.iterdir()) == []


def test_diff_on_sigterm_stops_its_child_and_removes_the_export(repo, tmp_path):
    (repo / "m.py").write_text(HANG)
    (repo / "pyproject.toml").write_text('[tool.hlo-analyzer]\nentry-points = ["m:step"]\nmesh = { X = 2 }\n')
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "hang")
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    mark = tmp_path / "mark"
    proc = _start(["diff", "HEAD:pyproject.toml", "pyproject.toml"], repo, tmp, mark)
    _wait_for(mark, proc)
    child = int(mark.read_text())
    os.kill(proc.pid, signal.SIGTERM)  # the command only, as `kill PID` or docker stop does
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the analysing child outlived the diff"
    assert list(tmp.iterdir()) == []  # the exported tree is gone


def test_the_cli_puts_back_the_signal_handlers_it_found(capsys):
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)
    run_cli(capsys, "rules")
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)) == before


# ------------------------------------------------------------------------------------ numbers


def test_check_refuses_a_nan_tolerance_flag(project, monkeypatch, capsys):
    monkeypatch.chdir(project)
    with pytest.raises(SystemExit) as e:
        main(["check", "--baseline-tolerance", "nan"])
    assert e.value.code == 2 and "finite number" in capsys.readouterr().err


@pytest.mark.parametrize("line", ["baseline-tolerance = nan", "min-saving-seconds = inf",
                                  "budgets = { comm-seconds-per-step = nan }"])
def test_config_numbers_must_be_finite(project, monkeypatch, capsys, line):
    monkeypatch.chdir(project)
    with (project / "pyproject.toml").open("a") as f:
        f.write(line + "\n")
    code, _, err = run_cli(capsys, "check")
    assert code == 2 and "finite" in err and "pyproject.toml:" in err


def test_a_baseline_entry_with_nan_seconds_is_refused_at_its_line(tmp_path):
    from analyzer.rules.baseline import read_baseline

    path = tmp_path / "b.json"
    path.write_text('{"version": 1, "tool": "hlo-analyzer", "findings": [\n'
                    '  {"fingerprint": "f", "count": 1, "seconds": NaN}\n]}\n')
    with pytest.raises(ConfigError, match=r"b\.json:2:.*NaN"):
        read_baseline(path)


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_json_report_with_a_non_finite_number_is_refused_at_its_line(tmp_path, capsys, value):
    ok = {"name": "p", "collectives": [{"kind": "all-gather", "axes": ["X"], "seconds": 1e-6, "count": 1}]}
    (tmp_path / "old.json").write_text(json.dumps(ok))
    (tmp_path / "new.json").write_text(json.dumps(ok, indent=1).replace("1e-06", value))
    code, _, err = run_cli(capsys, "diff", str(tmp_path / "old.json"), str(tmp_path / "new.json"),
                           "--max-regression", "5%")
    assert code == 2 and "new.json:" in err and "finite" in err


def test_a_regression_limit_must_be_finite():
    from analyzer.workflows.diff import Threshold, parse_threshold

    with pytest.raises(AnalyzerError, match="finite"):
        parse_threshold("1e999%")
    assert Threshold(0.05, True).exceeded(1.0, float("nan"))


@pytest.mark.parametrize("key, value", [("link_bandwidth_one_way", "nan"), ("link_bandwidth_one_way", "1e-320"),
                                        ("hop_latency", "inf"), ("link_bandwidth_bidi", "-4e10")])
def test_hardware_numbers_must_be_finite_positive_and_normal(tmp_path, key, value):
    from analyzer.theory.hardware import load_hardware

    spec = (ROOT / "analyzer/_data/hardware/tpu-v5e.toml").read_text()
    lines = spec.splitlines()
    n = next(i for i, line in enumerate(lines) if line.startswith(f"{key} ="))
    lines[n] = f"{key} = {value}"
    (tmp_path / "hw.toml").write_text("\n".join(lines) + "\n")
    with pytest.raises(HardwareError, match=rf"hw\.toml:{n + 1}: error: key '{key}'"):
        load_hardware(tmp_path / "hw.toml")


# ------------------------------------------------------------------------------------ strings


def test_markdown_escapes_html_and_markdown_in_input_strings(make_report):
    from dataclasses import replace

    from analyzer.render import markdown

    report = replace(make_report(name="<img src=x onerror=alert(1)>"),
                     notes=("Read <script>alert(1)</script> from the dump folder",))
    text = markdown.render(report)
    assert "<img" not in text and "<script" not in text
    assert "&lt;img src=x onerror=alert(1)&gt;" in text
    assert markdown._code("a``b").startswith("```")


def test_the_terminal_never_receives_control_characters(make_report, tmp_path, capsys):
    from dataclasses import replace

    from analyzer.render import terminal

    report = replace(make_report(name="step\x1b[2J"), notes=("file a\x1b]0;title\x07b.hlo",))
    text = terminal.render(report)
    assert "\x1b" not in text and "\\x1b[2J" in text
    code, _, err = run_cli(capsys, "inspect", str(tmp_path / "missing\x1b[2J.hlo"))
    assert code == 2 and "\x1b" not in err


def test_an_error_on_a_huge_line_prints_a_bounded_excerpt(tmp_path):
    e = HloSyntaxError("bad token", path="x.hlo", line=1, column=5_000_001,
                       source_line="a" * 5_000_000 + "@" + "b" * 5_000_000)
    text = str(e)
    assert len(text) < 500 and "x.hlo:1:5000001" in text
    shown, caret = text.splitlines()[1:3]
    assert shown[len(caret) - 1] == "@"


# ------------------------------------------------------------------------------------ inputs


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_inspect_refuses_what_is_not_a_regular_file(tmp_path, kind):
    path = tmp_path / "d.hlo"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path = Path(kind)
    r = subprocess.run([sys.executable, "-m", "analyzer", "inspect", str(path)], capture_output=True, text=True,
                       env=ENV, timeout=60)
    assert r.returncode == 2 and "not a regular file" in r.stderr


def test_hlo_over_the_size_limit_is_refused_with_the_limit(monkeypatch, capsys):
    monkeypatch.setenv("HLO_ANALYZER_MAX_INPUT_BYTES", "1000")
    code, _, err = run_cli(capsys, "inspect", str(FIXTURE), "--mesh", "X=2,Y=4")
    assert code == 2 and "over the limit of 1,000 bytes" in err and "HLO_ANALYZER_MAX_INPUT_BYTES" in err


# ------------------------------------------------------------------------------------ workflow edges


def test_write_baseline_says_the_config_line_to_add(project, monkeypatch, capsys):
    from analyzer.workflows import check

    monkeypatch.chdir(project)
    monkeypatch.setattr(check, "prepare_cpu_devices", lambda n: None)
    monkeypatch.setattr(check, "run_check", lambda config, **k: check.CheckResult(root=project, config_path=None,
                                                                                 outcomes=()))
    code, _, err = run_cli(capsys, "check", "--write-baseline", "--no-cache")
    assert code == 0
    assert 'add  baseline = ".hlo-analyzer-baseline.json"  to [tool.hlo-analyzer]' in err


def test_a_pipe_gets_a_table_wide_enough(monkeypatch):
    from analyzer.render.terminal import PIPE_WIDTH, console_for

    monkeypatch.delenv("COLUMNS", raising=False)
    assert console_for(io.StringIO()).width == PIPE_WIDTH >= 120

def test_inspect_into_a_pipe_is_not_wrapped_at_80_columns(monkeypatch, capsys):
    monkeypatch.delenv("COLUMNS", raising=False)
    code, out, _ = run_cli(capsys, "inspect", str(FIXTURE), "--mesh", "X=2,Y=4")  # stdout captured: not a tty
    assert code == 0 and max(len(line) for line in out.splitlines()) > 80
