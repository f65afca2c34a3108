"""Output shared by `hlo-analyzer analyze` and `hlo-analyzer inspect`: the report as a table, JSON or CSV."""

from __future__ import annotations

import argparse
import sys

from analyzer.analysis.report import Report
from analyzer.formats import renderer

__all__ = ["exit_status", "add_output_options", "add_pricing_options", "add_timeout_option", "add_trace_option", "check_trace",
           "emit", "emit_trace"]


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 7 * 86400:
        raise argparse.ArgumentTypeError(f"--timeout takes seconds above 0 (at most a week), got {text!r}")
    return value


def add_timeout_option(p: argparse.ArgumentParser, what: str = "the entry point and its compile") -> None:
    p.add_argument("--timeout", type=_seconds, metavar="SECONDS", default=None,
                   help=f"give up on {what} after this many seconds and say where it was (default: no limit)")


def add_xla_flags_option(p: argparse.ArgumentParser, instead: str) -> None:
    p.add_argument("--xla-flags", metavar="FLAGS", default=None,
                   help=f"the run's XLA flags, written with '=': --xla-flags='--xla_tpu_enable_async_collective_"
                        f"fusion_multiple_steps=true ...' ({instead}); passed to the target's compiler and read by "
                        "the step model (the report says which it modelled)")


def add_pricing_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hardware", metavar="NAME", default="tpu-v5e",
                   help="hardware spec to price on (default tpu-v5e; `hlo-analyzer hardware list`)")
    p.add_argument("--topology", metavar="SLICE", default=None,
                   help="physical slice the mesh is laid on, e.g. v5e:4x2 (default: from the TPU devices, or the "
                        "smallest slice that holds the mesh)")
    p.add_argument("--model", choices=("topology", "ideal"), default="topology",
                   help="cost model: hops, wraparound and latency (topology, default) or the chapter's V/W (ideal)")


def add_output_options(p: argparse.ArgumentParser) -> None:
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the whole report as JSON")
    fmt.add_argument("--csv", action="store_true", help="print the collectives table as CSV")
    p.add_argument("--limit", type=int, default=50, metavar="N", help="most collectives to list (text output)")
    add_trace_option(p)


def add_trace_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", metavar="FILE.json", default=None,
                   help="also write the predicted step as a Chrome trace (Perfetto, TensorBoard/XProf trace viewer)")


def check_trace(args: argparse.Namespace) -> None:
    """Fail on a trace path that cannot be written before anything is compiled (exit 2)."""
    if getattr(args, "trace", None):
        from analyzer.render.trace import check_trace_path

        check_trace_path(args.trace)


def emit_trace(report: Report, args: argparse.Namespace) -> None:
    """Write the trace when `--trace` asks for one, and say so on stderr."""
    if getattr(args, "trace", None):
        from analyzer.render.trace import write_trace

        path = write_trace(report, args.trace)
        print(f"wrote the predicted step's trace to {path} (open it in ui.perfetto.dev)", file=sys.stderr)


def exit_status(report: Report) -> int:
    """0, or 2 when a rule failed on the program (HA900: an internal error; its findings are missing), said on
    stderr so that the run does not look clean."""
    failed = sorted({str(d.details.get("rule", "?")) for d in report.diagnostics if d.code == "HA900"})
    if not failed:
        return 0
    print(f"hlo-analyzer: internal error: rule{'s' if len(failed) > 1 else ''} {', '.join(failed)} failed on this "
          "program (HA900 above), so the findings are incomplete; rerun with --debug for the traceback and report it",
          file=sys.stderr)
    return 2


def emit(report: Report, args: argparse.Namespace) -> int:
    """Write the report in the format the arguments ask for (and the trace `--trace` asks for); the exit status
    (`exit_status`)."""
    emit_trace(report, args)
    if args.json:
        sys.stdout.write(renderer("json", "report")(report) + "\n")
    elif args.csv:
        sys.stdout.write(renderer("csv", "table")(report))
    else:
        from analyzer.render.terminal import print_report

        print_report(report, limit=args.limit)
    return exit_status(report)
