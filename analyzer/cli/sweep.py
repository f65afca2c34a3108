"""`hlo-analyzer sweep CONFIG.toml`: compile candidate plans (mesh shape x strategy x template sizes) and rank
them, on this machine's processes or as Ray tasks."""

from __future__ import annotations

import argparse
import sys
from typing import Any

DESCRIPTION = """\
Compile the config's training step for every combination of mesh shape and strategy, predict each one's
step time and per-device memory on the hardware, and rank them: plans that fit in HBM first, then by
the predicted step (compute plus the communication it waits for, docs/step.md), with each plan's exposed
communication and MFU shown. Candidates compile in parallel worker processes, one per core
while memory allows, or with --executor ray as Ray tasks (one compile per task) on a Ray cluster.

Mesh shapes give one size per axis of the config's [mesh], in order, and must all use the same number of
devices. For the built-in template, batch sizes, remat policies and microbatches are further dimensions of
the search. Defaults come from the config's [sweep] table, else its own mesh, strategy and sizes.
The ranking does not depend on where the plans compiled.

A worker that dies (killed for memory) fails only the plan it was compiling; the others go on. Ctrl-C stops
the sweep within a second or two: queued plans are dropped and the workers terminated.

exit status: 0 every plan ranked, 2 bad usage, a bad config, Ray missing for --executor ray, or a plan that
could not be analysed (the ranking and the report of the best analysed plan are still written, and the failed
plans are listed), 130 on Ctrl-C."""

EPILOG = """\
examples:
  hlo-analyzer sweep examples/configs/fsdp-tp-v5e-8.toml --mesh-shapes 8x1,4x2,2x4 --strategies fsdp,tp,fsdp+tp
  hlo-analyzer sweep examples/configs/fsdp-tp-v5e-8.toml -o ranking.html      # uses the config's [sweep]
  hlo-analyzer sweep examples/configs/fsdp-v5e-8.toml --strategies dp,fsdp --hardware tpu-v5p --jobs 1
  hlo-analyzer sweep examples/configs/fsdp-tp-v5e-8.toml --strategies fsdp --remat none,full --microbatches 1,2
  hlo-analyzer sweep examples/configs/fsdp-tp-v5e-8.toml --executor ray:ray://head:10001 --ray-memory 8GiB
"""


def _shapes(text: str) -> list[tuple[int, ...]]:
    from analyzer.errors import ConfigError
    from analyzer.workflows.reportconfig import parse_mesh_shape

    try:
        shapes = [parse_mesh_shape(t) for t in text.split(",") if t.strip()]
    except ConfigError as e:
        raise argparse.ArgumentTypeError(e.message) from None
    if not shapes:
        raise argparse.ArgumentTypeError("give mesh shapes separated by commas, e.g. 8x1,4x2,2x4")
    return shapes


def _strategies(text: str) -> list[str]:
    from analyzer.errors import valid_choices
    from analyzer.workflows.reportconfig import STRATEGIES

    items = [t.strip() for t in text.split(",") if t.strip()]
    for s in items:
        if s not in STRATEGIES:
            raise argparse.ArgumentTypeError(f"unknown strategy {s!r}; " + valid_choices(s, STRATEGIES,
                                                                                     what="strategies"))
    if not items:
        raise argparse.ArgumentTypeError("give strategies separated by commas, e.g. fsdp,tp,fsdp+tp")
    return items


def _jobs(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"--jobs must be a positive integer, got {text!r}")
    return n


def _positive_ints(text: str) -> list[int]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    try:
        values = [int(t) for t in items]
    except ValueError:
        values = []
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"give positive integers separated by commas, e.g. 16,32; got {text!r}")
    return values


def _remat(text: str) -> list[str]:
    from analyzer.compile.models import REMAT_POLICIES
    from analyzer.errors import valid_choices

    items = [t.strip() for t in text.split(",") if t.strip()]
    for s in items:
        if s not in REMAT_POLICIES:
            raise argparse.ArgumentTypeError(f"unknown remat policy {s!r}; " + valid_choices(s, REMAT_POLICIES,
                                                                                             what="remat policies"))
    if not items:
        raise argparse.ArgumentTypeError("give remat policies separated by commas, e.g. none,full")
    return items


def _executor(text: str) -> str:
    from analyzer.errors import ConfigError
    from analyzer.workflows.executors import parse_executor

    try:
        parse_executor(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(e.message) from None
    return text.strip()


def _cpus(text: str) -> float:
    try:
        n = float(text)
    except ValueError:
        n = 0.0
    if not n > 0:
        raise argparse.ArgumentTypeError(f"--ray-cpus must be a positive number, got {text!r}")
    return n


def _memory(text: str) -> int:
    from analyzer.errors import ConfigError
    from analyzer.workflows.executors import parse_memory

    try:
        return parse_memory(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(e.message) from None


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("sweep", help="rank candidate meshes and strategies by predicted step time",
                              description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("config", metavar="CONFIG.toml", help="the training config")
    p.add_argument("--mesh-shapes", type=_shapes, metavar="AxB,...", help="candidate shapes of the config's mesh, "
                   "e.g. 8x1,4x2,2x4 (default: [sweep] mesh-shapes, else the config's mesh)")
    p.add_argument("--strategies", type=_strategies, metavar="S,...", help="dp, fsdp, tp, fsdp+tp, ep "
                   "(default: [sweep] strategies, else the config's strategy)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the best plan's report with the ranking here "
                   "(.html, .md, .json, .txt)")
    p.add_argument("--hardware", metavar="NAME", help="price on this hardware instead of the config's")
    p.add_argument("--topology", metavar="SLICE", help="lay the mesh on this slice instead of the config's")
    p.add_argument("--jobs", type=_jobs, metavar="N", help="candidates compiled at once (default: one per core "
                   "while memory allows)")
    p.add_argument("--batch-sizes", type=_positive_ints, metavar="N,...", help="template batch sizes to try "
                   "(default: [sweep] batch-sizes, else the config's batch)")
    p.add_argument("--remat", type=_remat, metavar="P,...", help="template remat policies to try: none, full, "
                   "dots (default: [sweep] remat, else the config's)")
    p.add_argument("--microbatches", type=_positive_ints, metavar="N,...", help="template gradient-accumulation "
                   "microbatches to try (default: [sweep] microbatches, else the config's)")
    p.add_argument("--executor", type=_executor, metavar="local|ray[:ADDRESS]", help="where the plans compile: "
                   "local worker processes (default), or Ray tasks on a cluster (ray: RAY_ADDRESS, a running local "
                   "cluster, else a new local one; ray:ADDRESS such as ray://head:10001). Default: [sweep] executor")
    p.add_argument("--ray-cpus", type=_cpus, metavar="N", help="CPUs one compile asks Ray for (default 1)")
    p.add_argument("--ray-memory", type=_memory, metavar="SIZE", help="memory one compile asks Ray for, e.g. "
                   "8GiB (default 2GiB)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    from analyzer.cli._analysis_output import add_timeout_option, add_xla_flags_option

    add_timeout_option(p, "a plan (in its worker process; the plan is marked failed)")
    add_xla_flags_option(p, "for every plan; replaces the config's `xla-flags`")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from analyzer.errors import AnalyzerError
    from analyzer.formats import for_path
    from analyzer.render import write
    from analyzer.render.terminal import sweep_table
    from analyzer.units import format_seconds
    from analyzer.workflows.reportconfig import load_report_config
    from analyzer.workflows.sweep import candidates, default_jobs, run_sweep

    if args.output:
        from analyzer.fileio import check_writable

        for_path(args.output)
        check_writable(args.output, what="sweep report")
    from analyzer.rules.config import check_plan_keys

    config = load_report_config(args.config)
    check_plan_keys(args.hardware, args.topology, None)
    if args.xla_flags:
        from dataclasses import replace

        from analyzer.compile.xlaflags import parse_xla_flags

        config = replace(config, xla_flags=tuple(parse_xla_flags(args.xla_flags).items()))
    if args.output:  # the report must not replace a file the sweep reads (analyzer/fileio.py), before any work
        from analyzer.fileio import refuse_inputs

        refuse_inputs(args.output, config.input_files(args.hardware), what="sweep report (-o)")
    cands = candidates(config, args.mesh_shapes or (), args.strategies or (), batch_sizes=args.batch_sizes or (),
                       remat=args.remat or (), microbatches=args.microbatches or ())
    executor = _make_executor(args, config)  # Ray missing: stops here, before any compile
    jobs = args.jobs or default_jobs(len(cands))
    if config.maxtext_argv is not None and config.target == "cpu" and jobs == 1 and executor is None:
        from analyzer.integrations.maxtext import request_cpu_devices  # this process compiles: its devices
        from analyzer.workflows.sweep import devices_of

        request_cpu_devices(max(devices_of(config, c) for c in cands))
    err = Console(file=sys.stderr)
    out = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 160)
    progress = Progress(TextColumn("[bold]sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.description}"), console=err, transient=True,
                        disable=args.no_progress)
    with progress:
        where = executor.describe() if executor is not None else f"{jobs} at a time"
        task = progress.add_task(f"compiling {len(cands)} plans, {where}", total=len(cands))

        def done(cand, entry):
            shown = "x".join(map(str, cand.mesh_shape)) or entry.mesh  # (a maxtext: plan: the mesh MaxText made)
            status = format_seconds(entry.step_seconds) if entry.ok else "failed"
            plan = entry.plan if cand.strategy else (cand.label if cand.maxtext else "entry")
            progress.console.print(f"  {plan}{f' @ {shown}' if shown else ''}: {status}", highlight=False)
            progress.advance(task)

        result = run_sweep(config, cands, hardware=args.hardware, topology=args.topology, jobs=jobs, progress=done,
                           executor=executor, timeout=args.timeout)
    out.print(sweep_table(result))
    if result.none_fit:
        out.print("[bold red]No candidate fits in HBM[/]: the ranking is by step time alone. Shard more (fsdp), "
                  "shrink the batch or sequence, or choose hardware with more HBM.")
    best = result.best
    failed = [e for e in result.entries if not e.ok]
    if best is None:
        reasons = "; ".join(f"{e.label}: {e.error}" for e in result.entries)
        raise AnalyzerError(f"no candidate could be analysed: {reasons}")
    analysed = len(result.entries) - len(failed)
    if args.output:
        from dataclasses import replace

        title = config.name or config.path or "sweep"
        of = f"{analysed} analysed plans ({len(failed)} failed)" if failed else f"{analysed} plans"
        report = replace(result.best_report(), name=f"{title}: best of {of} is {best.label}")
        path = write(report, args.output, sweep=result)
        out.print(f"wrote {path}: ranking of {of} and the report of the best, {best.label}", highlight=False)
    if failed:
        print(f"hlo-analyzer: {len(failed)} of {len(result.entries)} plans could not be analysed:", file=sys.stderr)
        for e in failed:
            print(f"  {e.label}: {e.error}", file=sys.stderr)
        return 2
    return 0


def _make_executor(args: argparse.Namespace, config: Any) -> Any:
    """The executor the options and the config's [sweep] ask for; None: local worker processes.

    Raises:
      RayMissingError: Ray is asked for and not installed (exit 2, with the install command).
    """
    from analyzer.workflows.executors import RayExecutor, import_ray, parse_executor

    spec = parse_executor(args.executor or config.sweep_executor or "local")
    ray_options = args.ray_cpus is not None or args.ray_memory is not None
    if spec.kind == "local":
        if ray_options:
            from analyzer.errors import ConfigError

            raise ConfigError("--ray-cpus and --ray-memory apply to --executor ray; this sweep runs on local "
                              "worker processes (size those with --jobs)", path="command line")
        return None
    if args.jobs is not None:
        from analyzer.errors import ConfigError

        raise ConfigError("--jobs sizes the local worker pool; with --executor ray each compile is a Ray task: "
                          "size them with --ray-cpus and --ray-memory", path="command line")
    import_ray()
    cpus = args.ray_cpus or config.sweep_ray_cpus or 1
    memory = args.ray_memory or config.sweep_ray_memory or (2 << 30)
    return RayExecutor(address=spec.address, cpus=cpus, memory_bytes=memory)
