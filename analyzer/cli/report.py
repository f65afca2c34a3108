"""`hlo-analyzer report CONFIG.toml`: an audit report of a training config (HTML, Markdown, JSON or text)."""

from __future__ import annotations

import argparse
import sys

from analyzer.units import format_seconds
from analyzer.cli._analysis_output import add_trace_option, check_trace, emit_trace, exit_status

DESCRIPTION = """\
Compile the training step a config describes (your entry point, or the built-in transformer template with a
sharding strategy), find every collective XLA inserted, price it on the hardware, run the rules, and write an
audit report. The format follows the output file's extension: .html (one self-contained file with plots),
.md, .json (schema: docs/report-schema.json), .txt; without -o the report prints to the terminal.

What-if: --hardware/--topology price the same compile on other hardware; --what-if adds a table of the
plan repriced on each alternative without recompiling. --verify-fixes (or `verify-fixes = true` in the config)
applies each finding's proposed change, recompiles, and shows the predicted step after it beside the saving
promised.

exit status: 0 report written (findings do not fail it; use `hlo-analyzer check` as a gate), 2 bad usage,
bad config or a program that could not be analysed."""

EPILOG = """\
config (TOML; see examples/configs/):
  name = "8B transformer, FSDP+TP on TPU v5e-8"
  strategy = "fsdp+tp"            # or: entry = "mypkg.train:step"
  hardware = "tpu-v5e"
  [mesh]
  data = 4
  model = 2
  [model]
  d_model = 4096
  d_ff = 14336
  heads = 32
  kv_heads = 8
  layers = 32
  seq = 4096
  batch = 16
  dtype = "bf16"
  optimizer = "adam"

examples:
  hlo-analyzer report examples/configs/fsdp-tp-v5e-8.toml -o report.html
  hlo-analyzer report examples/configs/tp-h100-8.toml -o report.md
  hlo-analyzer report examples/configs/fsdp-v5e-8.toml --hardware tpu-v5p --topology v5p:2x2x2
  hlo-analyzer report examples/configs/fsdp-v5e-8.toml --what-if tpu-v5p,tpu-v6e,h100 -o whatif.html
  hlo-analyzer report examples/configs/fsdp-tp-v5e-8.toml --verify-fixes -o verified.md
"""


def _alternatives(text: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError("give HARDWARE[@TOPOLOGY] names separated by commas, e.g. tpu-v5p,h100")
    return items


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("report", help="audit report of a training config (HTML, Markdown, JSON)",
                              description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("config", metavar="CONFIG.toml", help="the training config")
    p.add_argument("-o", "--output", metavar="FILE", help="write the report here; the extension picks the format "
                   "(.html, .md, .json, .txt); default: print to the terminal")
    p.add_argument("--hardware", metavar="NAME", help="price on this hardware instead of the config's "
                   "(`hlo-analyzer hardware list`, or a spec file)")
    p.add_argument("--topology", metavar="SLICE", help="lay the mesh on this slice instead of the config's, "
                   "e.g. v5e:2x4, v5p:2x2x2, h100:8")
    p.add_argument("--what-if", metavar="HW[@SLICE],...", type=_alternatives, action="extend", default=[],
                   help="also price the same compile on these (comma-separated, repeatable), e.g. "
                   "tpu-v5p@v5p:2x2x2,h100")
    p.add_argument("--verify-fixes", action="store_true",
                   help="apply each finding's proposed change (an argument's PartitionSpec, a mesh's sizes), "
                        "recompile with it and show the predicted step after it beside the promised saving "
                        "(one compile per distinct change; --timeout covers them too); the config's "
                        "`verify-fixes = true` does the same")
    p.add_argument("--limit", type=int, default=30, metavar="N", help="collectives listed in the terminal "
                   "report (default: 30)")
    from analyzer.cli._analysis_output import add_timeout_option, add_xla_flags_option

    add_timeout_option(p, "building and compiling the program")
    add_xla_flags_option(p, "replaces the config's `xla-flags`")
    add_trace_option(p)
    p.add_argument("--no-cache", action="store_true", help="compute the report even when the result cache "
                   "(.hlo-analyzer-cache/ at the project root) holds it; a report written with -o is cached")
    p.set_defaults(func=run)


def _refuse_inputs(args: argparse.Namespace, config) -> None:
    """Refuse, before any work, a report or trace path that is a file this run reads (the config, the entry
    point's sources, the baseline, a hardware spec): analyzer/fileio.py."""
    from analyzer.fileio import refuse_inputs

    inputs = config.input_files(args.hardware, *(getattr(args, "what_if", None) or ()))
    refuse_inputs(args.output, inputs, what="report (-o)")
    refuse_inputs(getattr(args, "trace", None), inputs, what="trace (--trace)")


def _cached(args: argparse.Namespace, fmt: str):
    """The result cache's entry for this run (analyzer/workflows/reportcache.py), or None: only a report
    written to a file, without --trace, is cached."""
    if not args.output or getattr(args, "trace", None):
        return None
    from analyzer.workflows.reportcache import open_report_cache

    options = {"hardware": args.hardware, "topology": args.topology, "what_if": list(args.what_if or ()),
               "format": fmt, "timeout": args.timeout, "xla_flags": args.xla_flags,
               # only when given: the keys of runs without it stay as they were
               **({"verify_fixes": True} if getattr(args, "verify_fixes", False) else {})}
    return open_report_cache(args.config, options, no_cache=args.no_cache)


def _refuse_raw_inputs(args: argparse.Namespace) -> None:
    """`_refuse_inputs` from the config as written (no validation, no import of the analysis): on a cache hit
    the config is never loaded."""
    import tomllib

    from analyzer.fileio import refuse_inputs
    from analyzer.workflows.reportcache import report_inputs

    try:
        from pathlib import Path

        data = tomllib.loads(Path(args.config).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return
    entry = data.get("entry") if isinstance(data.get("entry"), str) else None
    inputs = report_inputs(args.config, entry, (data.get("hardware"), args.hardware, *(args.what_if or ())))
    refuse_inputs(args.output, inputs, what="report (-o)")


def run(args: argparse.Namespace) -> int:
    from analyzer.formats import for_path

    fmt = for_path(args.output) if args.output else "text"  # fail on a bad extension before compiling
    if args.output:
        from analyzer.fileio import check_writable

        check_writable(args.output, what="report")  # ... and on an unwritable path
    check_trace(args)  # and on a trace path that cannot be written
    cached = _cached(args, fmt)
    if cached is not None:
        _refuse_raw_inputs(args)  # before the cache writes anything
        replayed = cached.replay(args.output)
        if replayed is not None:
            print(replayed[0])
            return replayed[1]
    from analyzer.compile.lower import time_limit
    from analyzer.render import render
    from analyzer.rules.config import check_plan_keys
    from analyzer.workflows.reportconfig import load_report_config
    from analyzer.workflows.sweep import analyze_config

    config = load_report_config(args.config)
    check_plan_keys(args.hardware, args.topology, None)
    if args.xla_flags:
        from dataclasses import replace

        from analyzer.compile.xlaflags import parse_xla_flags

        config = replace(config, xla_flags=tuple(parse_xla_flags(args.xla_flags).items()))
    _refuse_inputs(args, config)
    if config.maxtext_argv is not None and config.target == "cpu":  # one fake CPU device per MaxText chip
        from analyzer.integrations.maxtext import request_cpu_devices

        request_cpu_devices(config.maxtext_argv)
    if getattr(args, "verify_fixes", False) and config.maxtext_argv is not None:
        from analyzer.errors import ConfigError

        raise ConfigError("--verify-fixes with a maxtext: entry: MaxText builds its own arguments from its keys, so "
                          "a finding's PartitionSpec cannot be applied to them", path=config.path)
    with time_limit(args.timeout, config.entry or config.title, hard_exit=True):
        report = analyze_config(config, hardware=args.hardware, topology=args.topology)
        if getattr(args, "verify_fixes", False) or config.verify_fixes:
            from analyzer.workflows.verify import verify_config_fixes

            report = verify_config_fixes(report, config, hardware=args.hardware, topology=args.topology)
    whatif = None
    if args.what_if:
        from analyzer.workflows.whatif import compare

        whatif = compare(report, args.what_if)
    emit_trace(report, args)
    if args.output:
        from analyzer.fileio import write_atomic

        text = render(report, fmt, whatif=whatif)
        path = write_atomic(args.output, text, what="report")
        n = len(report.diagnostics)
        message = (f"wrote {{path}} ({fmt}): {len(report.collectives)} collectives, "
                   f"{format_seconds(report.totals.comm_seconds)} communication / step, "
                   f"{n} finding{'s' if n != 1 else ''}")
        print(message.replace("{path}", str(path)))
        code = exit_status(report)
        if cached is not None:
            cached.store(text, message, code)
            if cached.cache.note:
                print(f"hlo-analyzer: {cached.cache.note}", file=sys.stderr)
        return code
    from rich.console import Console

    from analyzer.render.terminal import print_report

    print_report(report, Console(file=sys.stdout, width=None if sys.stdout.isatty() else 160), whatif=whatif,
                 limit=args.limit)
    return exit_status(report)
