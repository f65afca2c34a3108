"""`hlo-analyzer analyze module:function`: compile an entry point and price its collectives (analyzer.pipeline)."""

from __future__ import annotations

import argparse

from analyzer.cli._analysis_output import (add_output_options, add_pricing_options, add_timeout_option, check_trace,
                                           emit)

DESCRIPTION = """\
Compile a JAX function for a mesh and list every collective XLA inserted: kind, mesh axes, the chapter's
notation, bytes, executions per step, predicted seconds and source line; then totals per kind and per axis
and the comm/compute ratio.

The entry point is `module:function` (or `path/to/file.py:function`): a function that takes the mesh (or
nothing) and returns `(fn, args)` or `(fn, args, kwargs)`, the jitted function and its abstract arguments
(jax.ShapeDtypeStructs with NamedShardings on that mesh).

Targets: `cpu` compiles on fake CPU devices (a child process when this one has too few) and reads the HLO
right after SPMD partitioning; `tpu:<gen>:<shape>` (e.g. tpu:v5e:2x4) compiles ahead of time with libtpu
(libtpu: pip install 'jax[tpu]==<your jax version>') and reads the final TPU program; `tpu:<gen>:<shape>*N` (e.g. tpu:v5e:2x2*2)
compiles for N slices joined by DCN and reads the whole program after SPMD partitioning."""

EPILOG = """\
examples:
  hlo-analyzer analyze examples.chapter:matmul_case3 --mesh X=4,Y=2
  hlo-analyzer analyze examples.chapter:fsdp_tp_step --mesh X=4,Y=2 --target tpu:v5e:2x4 --json
  hlo-analyzer analyze train.py:step --mesh data=8,model=4 --hardware tpu-v5p --csv
  hlo-analyzer analyze examples.chapter:fsdp_step --mesh X=8 --trace step.json   # open in ui.perfetto.dev
  hlo-analyzer analyze train.py:step --mesh data=4,model=2 --verify-fixes   # recompile each proposed fix
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("analyze", help="compile an entry point and price the collectives XLA inserted",
                              description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("entry", metavar="MODULE:FUNCTION", help="entry point returning (fn, args)")
    p.add_argument("--mesh", metavar="AXES", required=True, help="mesh, major to minor, e.g. data=4,model=2")
    p.add_argument("--target", default="cpu", metavar="TARGET",
                   help="cpu (default) or tpu:<gen>:<shape>[*N], e.g. tpu:v5e:2x4, tpu:v5e:2x2*2")
    p.add_argument("--xla-flags", metavar="FLAGS", default=None,
                   help="XLA flags for the target's compiler, written with '=': --xla-flags='--xla_tpu_enable_async_"
                        "collective_fusion=true ...' (a TPU target takes all; cpu those its compiler knows; the "
                        "report names them)")
    p.add_argument("--verify-fixes", action="store_true",
                   help="apply each finding's proposed change (an argument's PartitionSpec, a mesh's sizes), "
                        "recompile with it and show the predicted step after it beside the promised saving "
                        "(one compile per distinct change; --timeout covers them too)")
    add_pricing_options(p)
    add_output_options(p)
    add_timeout_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import os
    import sys

    from analyzer.pipeline import analyze
    from analyzer.compile.lower import load_entry, parse_target, time_limit
    from analyzer.rules.config import check_plan_keys

    check_trace(args)  # a trace path that cannot be written fails before the compile
    check_plan_keys(args.hardware, args.topology, None)  # before the compile, not after it
    parse_target(args.target)
    from analyzer.compile.xlaflags import parse_xla_flags

    flags = parse_xla_flags(args.xla_flags)  # a malformed flag fails before the compile
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # `module:function` names modules of the current project
    with time_limit(args.timeout, args.entry, hard_exit=True):
        fn, fargs, kwargs = load_entry(args.entry, args.mesh)
        report = analyze(fn, *fargs, mesh=args.mesh, target=args.target, hardware=args.hardware,
                         topology=args.topology, model=args.model, **({"xla_flags": flags} if flags else {}),
                         **kwargs)
        if args.verify_fixes:
            from analyzer.workflows.verify import verify_fixes

            entry = args.entry
            report = verify_fixes(report, fn, fargs, kwargs, mesh=args.mesh, rebuild=lambda m: load_entry(entry, m),
                                  topology=args.topology)
    return emit(report, args)
