"""Faults, bad input and interruptions (issue 12): clear messages, documented exit codes, no partial files.

No test here compiles: user-code failures happen before the compile, and the CLI cases stop at validation.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from analyzer.cli import main
from analyzer.errors import AnalyzerError, CompileTimeout, EntryPointError, OutputError
from analyzer.fileio import check_writable, locked, write_atomic

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*argv, capsys):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


# ------------------------------------------------------------------------------------------- atomic writes


def test_full_disk_leaves_the_old_file_whole(tmp_path, monkeypatch):
    target = tmp_path / "report.json"
    target.write_text('{"old": true}\n')

    def full(fd):  # the data was buffered; the disk fills when it is flushed
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OutputError, match="no space left"):
        write_atomic(target, "x" * 100_000)
    monkeypatch.undo()
    assert json.loads(target.read_text()) == {"old": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # no temporary file left


@pytest.mark.parametrize("kind", ["folder-named-like-file", "parent-is-a-file"])
def test_unwritable_outputs_are_found_before_the_work(tmp_path, kind):
    if kind == "folder-named-like-file":
        (tmp_path / "r.json").mkdir()
        path = tmp_path / "r.json"
    else:
        (tmp_path / "f").write_text("")
        path = tmp_path / "f" / "r.json"
    with pytest.raises(OutputError):
        check_writable(path)
    with pytest.raises(OutputError):
        write_atomic(path, "x")


def test_read_only_folder(tmp_path, monkeypatch):
    import tempfile

    def denied(*a, **k):
        raise PermissionError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkstemp", denied)
    with pytest.raises(OutputError, match="read-only"):
        check_writable(tmp_path / "r.json")


def test_lock_serialises_read_merge_write(tmp_path):
    path = tmp_path / "b.json"
    write_atomic(path, "[]")

    def add(n):
        for i in range(10):
            with locked(path):
                items = json.loads(path.read_text())
                time.sleep(0.001)
                write_atomic(path, json.dumps(items + [f"{n}-{i}"]))

    threads = [threading.Thread(target=add, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(json.loads(path.read_text())) == 40  # nothing lost
    assert not list(tmp_path.glob(".*lock"))


# ------------------------------------------------------------------------------------------- baselines


def test_write_baseline_with_paths_keeps_the_other_entry_points(tmp_path):
    from analyzer.diagnostics import Diagnostic, Location, Severity
    from analyzer.rules.baseline import read_baseline, update_baseline

    def d(file):
        return Diagnostic(code="HA101", name="comm-bound-matmul", message="m", severity=Severity("warning"),
                          location=Location(file=file, line=1))

    path = tmp_path / "b.json"
    update_baseline(path, {"a:step": [d("a.py")], "b:step": [d("b.py")]}, configured=["a:step", "b:step"],
                    complete=True)
    update_baseline(path, {"a:step": []}, configured=["a:step", "b:step"])  # only a ran; b's entry stays
    assert len(read_baseline(path).counts) == 1
    entries = json.loads(path.read_text())["findings"]
    assert [e["entry_point"] for e in entries] == ["b:step"]


def test_concurrent_baseline_writers_lose_nothing(tmp_path):
    code = (
        "import sys\n"
        "from analyzer.diagnostics import Diagnostic, Location, Severity\n"
        "from analyzer.rules.baseline import update_baseline\n"
        "n = sys.argv[1]\n"
        "for i in range(5):\n"
        "    d = Diagnostic(code='HA101', name='x', message='m', severity=Severity('warning'),\n"
        "                   location=Location(file=f'{n}.py', line=i))\n"
        "    update_baseline(sys.argv[2], {f'{n}:step{i}': [d]})\n"
    )
    path = tmp_path / "b.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", code, name, str(path)], env=env) for name in "abc"]
    assert all(p.wait(60) == 0 for p in procs)
    entries = json.loads(path.read_text())["findings"]
    assert len({e["entry_point"] for e in entries}) == 15


def test_non_utf8_baseline_is_a_config_error(tmp_path):
    from analyzer.rules.baseline import read_baseline

    p = tmp_path / "b.json"
    p.write_bytes(b"\xff\xfe{")
    with pytest.raises(AnalyzerError, match="not UTF-8"):
        read_baseline(p)


# ------------------------------------------------------------------------------------------- user code


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "synerr.py").write_text("def f(mesh)\n    return 1\n")
    (tmp_path / "nameerr.py").write_text("x = undefined_name + 1\ndef f(mesh):\n    return None\n")
    (tmp_path / "latin.py").write_bytes(b"def f(mesh):\n    return 'caf\xe9'\n")
    (tmp_path / "bad.py").write_text(
        "import time\n"
        "def ret(mesh):\n    return (lambda x: x, (), [1, 2])\n"
        "def boom(mesh):\n    raise ValueError('user bug')\n"
        "def quit(mesh):\n    import sys; sys.exit(3)\n"
        "def hang(mesh):\n    while True:\n        time.sleep(0.01)\n"
    )
    return tmp_path


@pytest.mark.parametrize("entry, message, line", [
    ("synerr.py:f", "SyntaxError", 1),
    ("nameerr.py:f", "NameError: name 'undefined_name' is not defined", 1),
    ("latin.py:f", "utf-8", None),
    ("bad.py:ret", "returned [1, 2] (list) as kwargs", None),
    ("bad.py:boom", "ValueError: user bug", 5),
    ("bad.py:quit", "sys.exit(3)", 7),
])
def test_user_code_failures_name_the_entry_point_and_place(user_module, entry, message, line):
    from analyzer.compile.lower import load_entry

    with pytest.raises(EntryPointError) as info:
        load_entry(entry, {"X": 2})
    text = str(info.value)
    assert entry in text and message in text
    if line is not None:
        assert f"{entry.split(':')[0]}:{line}" in text


def test_a_limit_never_interrupts_jaxs_first_import():
    """A cold process whose limit would run out while jax is first imported (about a second): jax is imported
    before the limit is armed, so the limit bounds what runs after it and jax stays whole (an exception raised
    into numpy's first import left it unable to import, or crashed the process)."""
    code = ("import sys\n"
            "from analyzer.compile.lower import time_limit\n"
            "assert 'jax' not in sys.modules and 'numpy' not in sys.modules\n"
            "with time_limit(0.01, 'cold:start'):\n"
            "    import jax.numpy as jnp\n"
            "print(int(jnp.arange(3).sum()))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0 and done.stdout.strip() == "3", done.stderr[-2000:]


def test_a_hang_is_reported_as_such(user_module):
    from analyzer.compile.lower import load_entry, time_limit

    start = time.monotonic()
    with pytest.raises(CompileTimeout, match=r"did not finish within 0.5 s") as info:
        with time_limit(0.5, "bad.py:hang"):
            load_entry("bad.py:hang", {"X": 2})
    assert time.monotonic() - start < 5
    assert "bad.py:" in str(info.value)


@pytest.mark.parametrize("body", ["hang", "except-exception"])
def test_a_hang_in_another_thread_is_reported_too(user_module, body):
    """The limit is a signal in the main thread; elsewhere (an @audit-ed call in a worker thread) it is raised
    into the thread, which a user's `except Exception` does not swallow."""
    from analyzer.compile.lower import load_entry, time_limit

    (user_module / "busy.py").write_text(
        "def f(mesh):\n"
        "    while True:\n"
        "        try:\n"
        "            sum(range(1000))\n"
        "        except Exception:\n"
        "            pass\n")
    entry = "bad.py:hang" if body == "hang" else "busy.py:f"
    box = {}

    def work():
        start = time.monotonic()
        try:
            with time_limit(0.5, entry):
                load_entry(entry, {"X": 2})
        except BaseException as e:  # noqa: BLE001 - what reached the thread is the point
            box["error"] = e
        box["seconds"] = time.monotonic() - start

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
    assert isinstance(box.get("error"), CompileTimeout), box
    assert "did not finish within 0.5 s" in str(box["error"]) and f"{entry.split(':')[0]}:" in str(box["error"])
    assert box["seconds"] < 3


def test_a_thread_limit_that_does_not_expire_leaves_nothing_behind():
    from analyzer.compile.lower import time_limit

    def work():
        for _ in range(50):
            with time_limit(0.01, "quick:f"):
                pass
        time.sleep(0.1)  # past every limit: no late exception may arrive here
        box["ok"] = True

    box = {}
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(10)
    assert box == {"ok": True}


def test_cli_user_code_errors_exit_2_without_traceback(user_module, capsys):
    for entry in ("synerr.py:f", "bad.py:quit", "bad.py:ret"):
        code, _, err = run_cli("analyze", entry, "--mesh", "X=2", capsys=capsys)
        assert code == 2 and entry in err


# ------------------------------------------------------------------------------------------- CLI inputs


@pytest.mark.parametrize("argv, message", [
    (["price", "AllGather_Y [E_Y, F] -> [E, F]", "--mesh", "X=100000000,Y=4", "--dims", "E=8,F=8"], "2^20"),
    (["price", "AllGather_Y [E_Y, F] -> [E, F]", "--mesh", "X=8,Y=4", "--dims", "E=10**30,F=8"], "decimal"),
    (["price", "AllGather_Y [E_Y, F] -> [E, F]", "--mesh", "X=8,Y=4", "--dims", "E=" + "9" * 31 + ",F=8"],
     "too large"),
])
def test_price_limits(argv, message, capsys):
    start = time.monotonic()
    code, _, err = run_cli(*argv, capsys=capsys)
    assert code == 2 and message in err
    assert time.monotonic() - start < 5


def test_negative_top_k_is_rejected(capsys):
    with pytest.raises(SystemExit) as info:
        main(["price", "RaggedAllToAll_X: [I_X, J] -> [I, J_X]", "--mesh", "X=8", "--dims", "I=64,J=64",
              "--top-k", "-3"])
    assert info.value.code == 2
    assert "at least 1" in capsys.readouterr().err


def test_zero_links_in_a_hardware_spec_is_rejected(tmp_path):
    from analyzer.theory.hardware import hardware_dir, load_hardware

    text = (hardware_dir() / "tpu-v5e.toml").read_text()
    assert "links_per_axis" in text
    import re

    spec = tmp_path / "zero.toml"
    spec.write_text(re.sub(r"links_per_axis\s*=\s*\d+", "links_per_axis = 0", text))
    with pytest.raises(AnalyzerError, match="links_per_axis.*positive integer"):
        load_hardware(spec)


def test_config_hardware_is_checked_with_its_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.hlo-analyzer]\nentry-points = ["m:f"]\nmesh = { X = 2 }\nhardware = "tpu-v9"\n')
    code, _, err = run_cli("check", capsys=capsys)
    assert code == 2 and "pyproject.toml:4" in err and "tpu-v9" in err


def test_check_of_a_missing_path_fails(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli("check", "nope.py", capsys=capsys)
    assert code == 2 and "nope.py" in err


def test_report_to_an_unwritable_path_fails_before_compiling(tmp_path, capsys):
    (tmp_path / "out.html").mkdir()
    cfg = ROOT / "examples" / "configs" / "fsdp-v5e-8.toml"
    start = time.monotonic()
    code, _, err = run_cli("report", str(cfg), "-o", str(tmp_path / "out.html"), capsys=capsys)
    assert code == 2 and "folder" in err
    assert time.monotonic() - start < 10


def test_internal_errors_are_one_line_and_debug_shows_the_traceback(monkeypatch, capsys):
    import analyzer.cli.price as price_cli

    def bug(args):
        raise KeyError("oops")

    monkeypatch.setattr(price_cli, "run", bug)
    argv = ["price", "AllGather_Y [E_Y, F] -> [E, F]", "--mesh", "X=8,Y=4", "--dims", "E=8,F=8"]
    code, _, err = run_cli(*argv, capsys=capsys)
    assert code == 2 and "internal error" in err and "--debug" in err
    with pytest.raises(KeyError):
        main(["--debug", *argv])


# ------------------------------------------------------------------------------------------- @audit threads


def test_audit_raise_in_every_thread(monkeypatch):
    from analyzer.diagnostics import Diagnostic, Location, Severity
    from analyzer.workflows import auditing

    calls = []

    def fake_analyse(self, args, kwargs):
        calls.append(1)
        time.sleep(0.2)
        d = Diagnostic(code="HA101", name="x", message="m", severity=Severity("warning"), location=Location())
        return auditing._Outcome(None, (d,))

    monkeypatch.setattr(auditing.Audited, "_analyse", fake_analyse)
    audited = auditing.audit(lambda x: x, on_violation="raise")
    raised = []

    def call():
        try:
            audited(1)
        except auditing.AuditError:
            raised.append(1)

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1  # analysed once per signature
    assert len(raised) == 4  # and every thread with the violating signature raised


def test_audit_in_a_worker_thread_keeps_the_config_timeout(monkeypatch):
    import jax.numpy as jnp

    import analyzer.pipeline
    from analyzer.workflows import auditing

    def endless(*args, **kwargs):
        while True:
            sum(range(1000))

    monkeypatch.setattr(analyzer.pipeline, "analyze", endless)
    audited = auditing.audit(lambda x: x * 2, on_violation="raise", config={"timeout": 0.5})
    box = {}

    def call():
        start = time.monotonic()
        try:
            audited(jnp.ones(4))
        except BaseException as e:  # noqa: BLE001 - what reached the thread is the point
            box["error"] = e
        box["seconds"] = time.monotonic() - start

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(20)
    assert isinstance(box.get("error"), CompileTimeout), box
    assert "did not finish within 0.5 s" in str(box["error"]) and "@audit" in str(box["error"])
    assert box["seconds"] < 10


# ------------------------------------------------------------------------------------------- property test


def test_cli_argument_space_never_tracebacks(tmp_path, monkeypatch):
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import given, settings, strategies as st

    monkeypatch.chdir(tmp_path)
    texts = st.sampled_from(["X=8", "X=0", "X=-1", "X=8,Y=4", "E=10**30", "", "=", "X=²", "X=8,X=8", "nope",
                             "X=100000000,Y=4", "E=2048,F=8192", "Y=9" * 3])
    commands = st.one_of(
        st.tuples(st.just("price"), st.sampled_from(["AllGather_Y [E_Y, F] -> [E, F]", "AllGather", "",
                                                     "RaggedAllToAll_X: [I_X, J] -> [I, J_X]"]),
                  st.just("--mesh"), texts, st.just("--dims"), texts,
                  st.sampled_from(["--json", "--hardware=tpu-v9", "--top-k=-3", "--top-k=2", "--dtype=f32"])),
        st.tuples(st.just("hardware"), st.sampled_from(["list", "show", "nope"]), st.sampled_from(["tpu-v5e",
                                                                                                  "x.toml", ""])),
        st.tuples(st.just("rules"), st.sampled_from(["", "--json", "HA999"])),
        st.tuples(st.just("parse"), st.sampled_from(["missing.hlo", str(tmp_path), "/etc/hostname"])),
        st.tuples(st.sampled_from(["report", "sweep"]), st.sampled_from(["missing.toml", "/etc/hostname"]),
                  st.just("-o"), st.sampled_from([str(tmp_path), str(tmp_path / "x.json"), "/etc/passwd/x.md"])),
        st.tuples(st.just("check"), st.sampled_from(["nope.py", "--timeout=-1", "--output-format=json"])),
    )

    @settings(max_examples=40, deadline=None, derandomize=True)
    @given(commands)
    def run(argv):
        argv = [a for a in argv if a != ""]
        import contextlib
        import io

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as e:  # argparse usage errors
                code = e.code
        assert code in (0, 1, 2), (argv, code, err.getvalue())
        assert "Traceback" not in out.getvalue() + err.getvalue(), argv
        leftovers = [p.name for p in tmp_path.iterdir() if p.name.endswith((".tmp", ".probe", ".lock"))]
        assert not leftovers, (argv, leftovers)

    run()


# ------------------------------------------------------------------------------------------- API values

FIXTURE = ROOT / "fixtures" / "cpu" / "X2_Y4" / "matmul_case3.spmd.hlo"


def test_a_dict_config_is_checked_like_the_toml_table():
    import analyzer

    plain = analyzer.analyze_hlo(FIXTURE, mesh="X=2,Y=4", config={"min-saving-seconds": 0})
    assert any(d.code == "HA101" for d in plain.diagnostics)
    ignored = analyzer.analyze_hlo(FIXTURE, mesh="X=2,Y=4", config={"ignore": ["HA101"], "min_saving_seconds": 0})
    assert not any(d.code == "HA101" for d in ignored.diagnostics)
    with pytest.raises(analyzer.ConfigError, match=r"unknown key 'ignor' in the config mapping; did you mean 'ignore'"):
        analyzer.analyze_hlo(FIXTURE, mesh="X=2,Y=4", config={"ignor": ["HA101"]})
    with pytest.raises(analyzer.ConfigError, match=r"'min_saving_seconds' must be a number, got 'x'"):
        analyzer.analyze_hlo(FIXTURE, mesh="X=2,Y=4", config={"min_saving_seconds": "x"})
    with pytest.raises(analyzer.ConfigError, match=r"config= takes a Config, a dict .* got int 3"):
        analyzer.analyze_hlo(FIXTURE, mesh="X=2,Y=4", config=3)


def test_analyze_checks_a_dict_config_before_lowering():
    import analyzer

    def never(x):  # lowering this would fail differently: the config must be refused first
        raise AssertionError("lowered")

    with pytest.raises(analyzer.ConfigError, match="unknown key 'bogus'"):
        analyzer.analyze(never, 1, config={"bogus": 1})


def test_reprice_refuses_what_it_cannot_reprice():
    import analyzer

    report = analyzer.analyze_hlo(FIXTURE, mesh="X=2,Y=4")
    with pytest.raises(AnalyzerError, match="reprice takes a Report .* not a report's JSON form"):
        analyzer.reprice(report.to_dict())
    with pytest.raises(analyzer.HardwareError, match=r"the hardware dict: unknown key 'ignore' .* valid keys: .*flops"):
        analyzer.reprice(report, {"ignore": ["HA202"]})
    with pytest.raises(analyzer.HardwareError, match="hardware takes a name .* got int 5"):
        analyzer.reprice(report, 5)


# ------------------------------------------------------------------------------------------- diff inputs


def test_diff_non_utf8_sides_are_input_errors(tmp_path, capsys):
    (tmp_path / "r.json").write_bytes(b"\xff\xfe{")
    (tmp_path / "c.toml").write_bytes(b'a = "\xff"\n')
    for side, what in (("r.json", "report is UTF-8 JSON"), ("c.toml", "config is UTF-8 TOML")):
        code, _, err = run_cli("diff", str(tmp_path / side), str(tmp_path / side), capsys=capsys)
        assert code == 2 and f"{side}: error: not UTF-8 (byte 0xff" in err and what in err


@pytest.mark.parametrize("side, message", [
    ("HEAD:/etc/passwd", "'/etc/passwd' is outside the git repository"),
    ("HEAD:../../../../etc/passwd", "'/etc/passwd' is outside the git repository"),
    ("HEAD:README.md", "'README.md' is not one"),
    ("HEAD:no/such.toml", "no file 'no/such.toml' at git revision 'HEAD'"),
])
def test_diff_git_sides_that_are_not_configs(side, message, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    if subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    code, _, err = run_cli("diff", side, "pyproject.toml", capsys=capsys)
    assert code == 2 and message in err, err


@pytest.fixture(scope="module")
def report_dict():
    import analyzer

    return analyzer.analyze_hlo(FIXTURE, mesh="X=2,Y=4").to_dict()


@pytest.mark.parametrize("field, value, message", [
    ("bytes", "lots", "'bytes' must be an integer or null, got 'lots'"),
    ("bytes", 1.5, "'bytes' must be an integer or null, got 1.5"),
    ("count", -1, "'count' must not be negative, got -1"),
    ("axes", "X", "'axes' must be a list of strings or null, got 'X'"),
    ("seconds", True, "'seconds' must be a number or null, got True"),
    ("kind", None, "'kind' must be a string"),
])
def test_report_rows_of_the_wrong_type_name_file_row_and_field(report_dict, tmp_path, field, value, message,
                                                               capsys):
    import copy

    from analyzer.analysis.report import report_from_dict

    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(report_dict))
    data = copy.deepcopy(report_dict)
    data["collectives"][0][field] = value
    bad.write_text(json.dumps(data))
    code, _, err = run_cli("diff", str(bad), str(good), capsys=capsys)
    assert code == 2 and f"{bad}: collectives[0]" in err and message in err, err
    with pytest.raises(AnalyzerError, match=r"collectives\[0\].*" + message.split(" must")[0]):
        report_from_dict(data)


# ------------------------------------------------------------------------------------------- rules and messages


@pytest.mark.parametrize("mesh", ["X=4,Y=2", "X=8", "X=1,Y=8"])
def test_a_mesh_of_the_right_size_but_another_shape_is_analysed(mesh):
    """The dump was partitioned for X=2,Y=4; on another mesh of 8 its all-reduce runs over a sub-axis, which
    HA101 prices (it used to crash on it: HA900)."""
    import analyzer

    report = analyzer.analyze_hlo(FIXTURE, mesh=mesh)
    assert not [d.message for d in report.diagnostics if d.code == "HA900"]
    assert any(d.code == "HA101" for d in report.diagnostics)


def test_a_failing_rule_exits_2_and_debug_shows_its_traceback(monkeypatch, capsys):
    from analyzer.rules.registry import Rule

    call = Rule.__call__

    def broken(self, ctx):
        if self.code == "HA101":
            raise IndexError("list index out of range")
        return call(self, ctx)

    monkeypatch.setattr(Rule, "__call__", broken)
    code, out, err = run_cli("inspect", str(FIXTURE), "--mesh", "X=2,Y=4", capsys=capsys)
    assert code == 2 and "HA900" in out and "rules HA101 failed" not in err and "rule HA101 failed" in err
    assert "--debug" in err
    with pytest.raises(IndexError):
        main(["--debug", "inspect", str(FIXTURE), "--mesh", "X=2,Y=4"])
    code, _, _ = run_cli("inspect", str(FIXTURE), "--mesh", "X=2,Y=4", capsys=capsys)  # --debug did not stick
    assert code == 2


def _cli_options():
    import argparse

    from analyzer.cli import build_parser

    found = set()

    def walk(parser):
        for action in parser._actions:
            found.update(o for o in action.option_strings if o.startswith("--"))
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    walk(sub)

    walk(build_parser())
    return found


# Options in the package's strings that are not ours: XLA flags (--xla_*), git's (the diff runs git) and the
# pytest option of analyzer.testing.
_NOT_OURS = {"--format", "--show-toplevel", "--hlo-snapshot-update",
             # git's, in the git command lines of diff and check
             "--end-of-options", "--verify", "--quiet", "--no-color", "--no-ext-diff"}


def test_no_message_names_an_option_the_cli_does_not_have():
    import ast
    import re

    known = _cli_options()
    assert {"--debug", "--timeout", "--mesh"} <= known
    flag = re.compile(r"(?<![\w-])--[a-z][a-z0-9_-]*")
    unknown = []
    for path in sorted((ROOT / "analyzer").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for m in flag.finditer(node.value):
                    name = m.group(0).rstrip("-")
                    if not name.startswith("--xla") and name not in known and name not in _NOT_OURS:
                        unknown.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if "hlo-analyzer " in line:
                unknown += [f"{path.relative_to(ROOT)}:{n}: {m.group(0)}" for m in flag.finditer(line)
                            if not m.group(0).startswith("--xla") and m.group(0).rstrip("-") not in known | _NOT_OURS]
    assert not unknown, unknown


# ------------------------------------------------------------------------------------------- config places


def test_one_toml_key_finder_for_every_config():
    from analyzer.errors import find_key_line, find_table_line
    from analyzer.rules import config
    from analyzer.workflows import reportconfig

    assert reportconfig.find_key_line is find_key_line  # the report config's is the same function
    assert not hasattr(config, "_find_key_line")
    text = ('name = "x"\n[tool.hlo-analyzer]\nmesh = { X = 0 }\n"min_saving_seconds" = 1\n'
            "[tool.hlo-analyzer.rules.HA301]\nmin-count = 8\n[model]\nd_model = 2\n")
    assert find_key_line(text, "name") == 1
    assert find_key_line(text, "X", "tool.hlo-analyzer.mesh") == 3
    assert find_key_line(text, "min-saving-seconds", "tool.hlo-analyzer") == 4
    assert find_key_line(text, "HA301", "tool.hlo-analyzer", deep=True) == 5
    assert find_key_line(text, "min_count", "tool.hlo-analyzer", deep=True) == 6
    assert find_key_line(text, "min_count", "tool.hlo-analyzer") is None  # in a sub-table: only when deep
    assert find_key_line(text, "d-model", "model") == 8
    assert find_table_line(text, "model") == 7 and find_table_line(text, "tool.hlo-analyzer.mesh") == 3


@pytest.mark.parametrize("edit, line_of, message", [
    (("links_per_axis", "links_per_axis = 0"), "links_per_axis = 0", "'links_per_axis' in [ici] must be a positive"),
    (("[ici]", "[ici]\nbogus = 1"), "bogus = 1", "unknown key 'bogus' in [ici]"),
    (("bf16", "bf8 = 1.97e14"), "bf8 =", "unknown dtype 'bf8' in [flops]"),
    (("max_topology", "max_topology = [0]"), "max_topology = [0]", "[ici] max_topology must be a list"),
    (("hop_latency", ""), "[ici]", "missing key 'hop_latency' in [ici]"),
])
def test_hardware_spec_errors_name_file_and_line(tmp_path, edit, line_of, message):
    from analyzer.theory.hardware import hardware_dir, load_hardware

    lines = (hardware_dir() / "tpu-v5e.toml").read_text().splitlines()
    key, new = edit
    i = next(n for n, text in enumerate(lines) if text.startswith(key))
    lines[i:i + 1] = new.split("\n") if new else []
    spec = tmp_path / "spec.toml"
    spec.write_text("\n".join(lines) + "\n")
    want = next(n for n, text in enumerate(lines, start=1) if text.startswith(line_of))
    with pytest.raises(AnalyzerError) as info:
        load_hardware(spec)
    assert str(info.value).startswith(f"{spec}:{want}: error: ") and message in str(info.value)
    assert str(info.value).endswith("\n" + lines[want - 1])


def _example_with(tmp_path, **changes):
    text = (ROOT / "examples" / "configs" / "fsdp-tp-v5e-8.toml").read_text()
    for old, new in changes.values():
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return path, text.splitlines()


def test_a_mesh_that_does_not_fill_the_topology_is_placed_at_mesh(tmp_path, capsys):
    path, lines = _example_with(tmp_path, mesh=("data = 4", "data = 8"))
    start = time.monotonic()
    code, _, err = run_cli("report", str(path), "-o", str(tmp_path / "r.json"), capsys=capsys)
    assert code == 2 and f"{path}:{lines.index('[mesh]') + 1}: error: the mesh data=8, model=2 has 16" in err
    assert "topology 'v5e:2x4' has 8 chips" in err and time.monotonic() - start < 10


def test_a_dimension_the_mesh_does_not_divide_is_placed_at_its_line(tmp_path):
    from analyzer.errors import ConfigError
    from analyzer.workflows.reportconfig import load_report_config

    path, lines = _example_with(tmp_path, batch=("batch = 8", "batch = 7"))
    cfg = load_report_config(path)
    with pytest.raises(ConfigError) as info:
        cfg.build()
    assert info.value.line == lines.index("batch = 7") + 1 and "7 is not a multiple of 4" in str(info.value)
    # A sweep's plan has its own mesh: its message is not placed at the file's lines.
    with pytest.raises(AnalyzerError) as info:
        cfg.with_plan((8, 1)).build()
    assert getattr(info.value, "line", None) is None


def test_pyproject_mesh_and_topology_are_checked_together(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.hlo-analyzer]\nentry-points = ["m:f"]\nmesh = { X = 3 }\ntopology = "v5e:2x4"\n')
    code, _, err = run_cli("check", capsys=capsys)
    assert code == 2 and "pyproject.toml:3: error: the mesh X=3 has 3 devices" in err
