"""`hlo-analyzer maxtext [CONFIG.yml] KEY=VALUE...`: MaxText's own train step from train_compile's arguments
(analyzer.integrations.maxtext)."""

from __future__ import annotations

import argparse
import sys

from analyzer.cli._analysis_output import add_timeout_option, add_trace_option, check_trace, emit_trace, exit_status
from analyzer.formats import for_path, renderer

DESCRIPTION = """\
Build MaxText's own training step through MaxText's code, from the arguments of its ahead-of-time check
(`python3 -m maxtext.trainers.pre_train.train_compile [CONFIG.yml] KEY=VALUE...`), and audit it: every
collective in MaxText's mesh axis names (fsdp, tensor, expert, stage...) and model source lines, the
predicted step, exposed communication, MFU, memory and findings.

CONFIG.yml defaults to MaxText's own configs/base.yml; compile_topology (e.g. v5e-256) and
compile_topology_num_slices name the chips, as for train_compile, and also the hardware priced on (v5e ->
tpu-v5e, v5p -> tpu-v5p, v6e -> tpu-v6e, v4 -> tpu-v4p, tpu7x -> tpu-7x) unless --hardware says otherwise.

Targets: `cpu` (default) builds the step with hardware=cpu (MaxText's portable kernels) on one fake CPU device
per chip and reads the HLO right after SPMD partitioning; `tpu` compiles ahead of time with libtpu exactly as
train_compile does (its mesh over libtpu's devices, unsafe_rbg PRNG, your LIBTPU_INIT_ARGS honoured) and
reads the final TPU program, with libtpu's memory analysis.

Needs Python 3.12+ and the `maxtext` extra (and the `tpu` extra for --target tpu): pip install -e '.[maxtext,tpu]'
in a checkout of hlo-analyzer.

exit status: 0 analysed (findings do not fail it; use `hlo-analyzer check` as a gate), 2 bad usage, a
configuration MaxText refuses, MaxText missing, or a step that could not be built or compiled."""

EPILOG = """\
examples:
  hlo-analyzer maxtext model_name=llama2-7b compile_topology=v5e-256 compile_topology_num_slices=1 \\
      per_device_batch_size=2 max_target_length=2048 ici_fsdp_parallelism=-1 remat_policy=full
  hlo-analyzer maxtext model_name=llama2-7b compile_topology=v5e-256 compile_topology_num_slices=1 \\
      per_device_batch_size=2 ici_fsdp_parallelism=-1 --target tpu --json
  hlo-analyzer maxtext my_run.yml compile_topology=v5p-128 compile_topology_num_slices=2 -o audit.html
  hlo-analyzer maxtext model_name=mixtral-8x7b compile_topology=v5p-64 ici_expert_parallelism=8 --trace step.json
"""

_FORMATS = ("html", "markdown", "json", "text", "sarif")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("maxtext", help="audit MaxText's own train step from train_compile's arguments",
                              description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("maxtext_args", nargs="*", metavar="[CONFIG.yml] KEY=VALUE",
                   help="train_compile's arguments: an optional MaxText config file, then MaxText keys")
    p.add_argument("--target", choices=("cpu", "tpu"), default="cpu",
                   help="cpu: fake CPU devices (default); tpu: ahead of time with libtpu, as train_compile")
    p.add_argument("--hardware", metavar="NAME", default=None,
                   help="hardware spec to price on (default: compile_topology's; `hlo-analyzer hardware list`)")
    p.add_argument("--topology", metavar="SLICE", default=None,
                   help="physical slice to price on, e.g. v5e:16x16 (default: compile_topology's)")
    p.add_argument("--model", choices=("topology", "ideal"), default="topology",
                   help="cost model: hops, wraparound and latency (topology, default) or the chapter's V/W (ideal)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the whole report as JSON")
    fmt.add_argument("-o", "--output", metavar="FILE", default=None,
                     help="write the report here; the extension picks the format: .html, .md, .json, .txt, "
                          ".sarif (the findings as SARIF 2.1.0)")
    p.add_argument("--limit", type=int, default=50, metavar="N", help="most collectives to list (text output)")
    add_trace_option(p)
    add_timeout_option(p, "building and compiling MaxText's step")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from analyzer.integrations import maxtext

    maxtext.check_available()  # before anything else: the install command, no work
    fmt = for_path(args.output) if args.output else None  # a bad extension fails before the build
    if args.output:
        from analyzer.fileio import check_writable

        check_writable(args.output, what="report")
    check_trace(args)
    from analyzer.rules.config import check_plan_keys

    check_plan_keys(args.hardware, args.topology, None)
    parsed = maxtext.parse_args(args.maxtext_args)
    if args.target == "cpu":
        maxtext.request_cpu_devices(maxtext.plan(parsed).chips)
    from analyzer.compile.lower import time_limit

    with time_limit(args.timeout, f"maxtext:{parsed}", hard_exit=True):
        report = maxtext.analyze_maxtext(args.maxtext_args, target=args.target, hardware=args.hardware,
                                         topology=args.topology, model=args.model)
    emit_trace(report, args)
    if args.json:
        sys.stdout.write(renderer("json", "report")(report) + "\n")
    elif args.output:
        from analyzer.units import format_seconds

        from analyzer.render import write

        path = write(report, args.output)
        n = len(report.diagnostics)
        print(f"wrote {path} ({fmt}): {len(report.collectives)} collectives, "
              f"{format_seconds(report.totals.comm_seconds)} communication / step, {n} finding{'s' if n != 1 else ''}")
    else:
        from analyzer.render.terminal import print_report

        print_report(report, limit=args.limit)
    return exit_status(report)

