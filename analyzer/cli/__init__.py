"""`hlo-analyzer` command line.

Each subcommand lives in its own module under `analyzer/cli/` and exposes `register(subparsers)`, which
adds its parser and sets `func(args) -> int`. Exit codes follow ruff: 0 clean, 1 findings, 2 usage, input or
internal error, 130 on Ctrl-C. Every `AnalyzerError` becomes its message on stderr and exit 2; any other
exception (a bug of ours) a one-line "internal error" and exit 2. A traceback only with `--debug`. SIGTERM and
SIGHUP end a command like Ctrl-C (its cleanup runs, its children stop) with status 143 and 129
(analyzer/_signals.py). Messages are printed with control characters escaped.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from analyzer.errors import AnalyzerError

__all__ = ["main", "build_parser"]

# Subcommand modules, in the order `--help` lists them.
_COMMANDS: tuple[str, ...] = (
    "demo",      # issue: user-facing
    "analyze",   # issue: analysis
    "inspect",   # issue: analysis
    "check",     # issue: user-facing
    "report",    # issue: user-facing
    "maxtext",   # issue 24: MaxText's own train step
    "sweep",     # issue: user-facing
    "diff",      # issue: user-facing
    "rules",     # issue: rules (rules, rule CODE)
    "price",     # issue: cost model
    "hardware",  # issue: cost model
    "parse",     # issue: parser
)


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with a one-line hint on bad arguments (its default), and keeps examples."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="hlo-analyzer",
        description="See the communication XLA inserts into a sharded JAX program, priced on real hardware.",
        epilog="example:\n  hlo-analyzer demo\n  hlo-analyzer inspect dump/ --mesh data=4,model=2 --hardware tpu-v5e",
    )
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks of errors (for bug reports)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in _COMMANDS:
        try:
            module = importlib.import_module(f"analyzer.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"analyzer.cli.{name}":
                continue  # command not built yet
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # The command line only compiles, it never runs a program: keep jax on the host CPU so an installed
    # libtpu (the `tpu` extra, used for ahead-of-time TPU targets) does not probe for TPU chips and log
    # warnings on machines that have none. A user who set JAX_PLATFORMS keeps their choice.
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    argv = list(sys.argv[1:] if argv is None else argv)
    # --debug is accepted anywhere on the line (before or after the command).
    debug = "--debug" in argv[: argv.index("--")] if "--" in argv else "--debug" in argv
    if debug:
        argv = [a for a in argv if a != "--debug"]
    if debug:  # a failing rule shows its traceback instead of becoming HA900
        from analyzer.rules import runner

        runner.RAISE_RULE_ERRORS = True
    from analyzer._signals import Terminated, stop_signals

    try:
        with stop_signals():
            return _run(argv, debug)
    except Terminated as e:  # kill, timeout, CI cancellation, a closed terminal: cleaned up like Ctrl-C
        if debug:
            raise
        print(f"hlo-analyzer: stopped by {e.name}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        if debug:
            raise
        print("hlo-analyzer: interrupted", file=sys.stderr)
        return 130
    finally:
        if debug:
            runner.RAISE_RULE_ERRORS = False


def _run(argv: list[str], debug: bool) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:  # name the subcommand in the error and show its usage, not the top-level one
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        chosen = sub.choices.get(getattr(args, "command", None) or "") if sub is not None else None
        (chosen or parser).error(f"unrecognized arguments: {' '.join(extras)}")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # here, not at exit, so that a closed pipe is caught below
        return code
    except AnalyzerError as e:
        if debug:
            raise
        print(f"hlo-analyzer: {_printable(e)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `hlo-analyzer ... | head`: the reader left; not an error worth a traceback
        return _closed_pipe()
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as e:  # noqa: BLE001 - a bug of ours: one line, exit 2, the traceback with --debug
        if debug:
            raise
        where = _innermost(e)
        print(f"hlo-analyzer: internal error in `{args.command}` ({type(e).__name__}: {_printable(e)}){where}; rerun with "
              "--debug for the traceback and report it", file=sys.stderr)
        return 2


def _printable(error: BaseException) -> str:
    """The message with control characters escaped (a file name's ESC[2J must not clear the terminal)."""
    from analyzer.render.terminal import printable

    return printable(error)


def _innermost(error: BaseException) -> str:
    import traceback

    frames = traceback.extract_tb(error.__traceback__)
    return f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""


def _closed_pipe() -> int:
    """The reader of stdout went away (`hlo-analyzer rule HA101 | head`): stop quietly, as CLIs do on SIGPIPE.

    Python's own advice (the `signal` module docs, "Note on SIGPIPE"): point stdout at devnull so the flush
    at exit does not raise again, and exit with an error status. The status is 141 (128 + SIGPIPE), what the
    shell reports for a tool the signal stopped; in a pipeline the shell reports the last command's anyway.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (captured in tests)
        pass
    return 141


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
