"""`hlo-analyzer demo`: audit a built-in transformer training step and write an HTML report (analyzer/workflows/demo.py)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

DESCRIPTION = """\
Audit a built-in transformer training step (4 scanned layers of attention + MLP, backward pass, Adam),
sharded FSDP + tensor parallel over a mesh data=4, model=2 of 8 fake CPU devices, priced for a TPU v5e 4x2
slice. Prints the plan in the notation of "How to Scale Your Model", every collective XLA inserted with its
predicted time, the totals and the rules' findings, and writes an HTML report. No accelerator needed."""

EPILOG = """\
examples:
  hlo-analyzer demo
  hlo-analyzer demo --strategy tp -o tp-report.html
  hlo-analyzer demo --hardware tpu-v5p --no-html
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    from analyzer.compile.models import STRATEGIES

    p = subparsers.add_parser("demo", help="audit a built-in transformer step (start here)", description=DESCRIPTION,
                              epilog=EPILOG)
    p.add_argument("-o", "--output", metavar="FILE", default="demo-report.html",
                   help="where to write the HTML report (default: demo-report.html)")
    p.add_argument("--no-html", action="store_true", help="print only; write no report file")
    p.add_argument("--strategy", choices=STRATEGIES, help="sharding strategy (default: fsdp+tp)")
    p.add_argument("--hardware", metavar="NAME", help="hardware to price on (default: tpu-v5e)")
    p.add_argument("--topology", metavar="SLICE", help="physical slice, e.g. v5e:2x4 (default: v5e:4x2 for "
                   "tpu-v5e, else the smallest slice of the hardware that holds 8 chips)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from analyzer.workflows.check import mesh_size, prepare_cpu_devices
    from analyzer.workflows.demo import next_steps, plan_from, run_demo
    from analyzer.render import terminal

    plan = plan_from(args.strategy, args.hardware, args.topology)
    if not args.no_html:
        from analyzer.fileio import check_writable

        check_writable(args.output, what="demo report")  # before the compile, not after it
    prepare_cpu_devices(mesh_size(plan.mesh_dict))  # compile in this process, not in a child
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
    err = Console(stderr=True, highlight=False)
    start = time.perf_counter()
    with err.status(f"Compiling and auditing the demo step: {plan.describe()} ..."):
        report = run_demo(plan)
    terminal.print_report(report, console)
    html_path = None
    if not args.no_html:
        from analyzer.render import write

        html_path = write(report, Path(args.output))
    console.print()
    console.print(next_steps(html_path), end="", markup=False)
    err.print(f"[dim]demo finished in {time.perf_counter() - start:.1f} s[/dim]")
    from analyzer.cli._analysis_output import exit_status

    return exit_status(report)
