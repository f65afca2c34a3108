"""Every command explains itself: `--help` exits 0 with a description and an example; bad arguments get a
message on stderr and exit 2 (argparse's usage errors and the tool's own AnalyzerErrors alike)."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from analyzer.cli import build_parser, main


def _commands() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(sub.choices)


def _help(argv, capsys) -> str:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    return capsys.readouterr().out


def test_the_commands_of_this_issue_are_registered():
    assert {"check", "diff", "demo"} <= set(_commands())


@pytest.mark.parametrize("command", _commands())
def test_help_has_a_description_and_an_example(command, capsys):
    text = _help([command, "--help"], capsys)
    assert text.startswith(f"usage: hlo-analyzer {command}")
    assert re.search(r"^examples?:", text, re.MULTILINE), f"`hlo-analyzer {command} --help` shows no example"
    example_lines = [ln.strip() for ln in text.split("example", 1)[1].splitlines() if ln.strip()]
    assert any(ln.startswith(f"hlo-analyzer {command}") for ln in example_lines)


def test_top_level_help_lists_the_commands(capsys):
    text = _help(["--help"], capsys)
    for command in ("check", "diff", "demo"):
        assert command in text


@pytest.mark.parametrize("command", _commands())
def test_an_unknown_option_exits_2_with_a_message(command, capsys):
    with pytest.raises(SystemExit) as info:
        main([command, "--no-such-option"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"hlo-analyzer {command}: error:" in err  # the subcommand's own usage and message


def test_an_unknown_command_exits_2():
    proc = subprocess.run([sys.executable, "-m", "analyzer", "chekc"], capture_output=True, text=True)
    assert proc.returncode == 2 and "invalid choice: 'chekc'" in proc.stderr
