"""`hlo-analyzer inspect FILE_OR_DUMP_DIR`: the collectives of an HLO dump, priced (analyzer.pipeline)."""

from __future__ import annotations

import argparse

from analyzer.cli._analysis_output import add_output_options, add_pricing_options, check_trace, emit

DESCRIPTION = """\
Read an HLO module (a file, or an --xla_dump_to folder) and list every collective in it: kind, the mesh axes
it runs over, the chapter's notation, bytes moved, executions per step, predicted seconds and the source
line that caused it; then totals per kind and per mesh axis.

From a dump folder the module right after SPMD partitioning is read when present
(--xla_dump_hlo_pass_re=spmd-partitioning), else the final optimized module; the report then opens with a
warning naming the collectives the backend may have rewritten. Without --mesh the axes are named axis_0,
axis_1... from the collectives' device groups."""

EPILOG = """\
examples:
  hlo-analyzer inspect dump/ --mesh data=4,model=2
  hlo-analyzer inspect step.hlo --mesh X=8,Y=4 --hardware tpu-v5p --topology v5p:4x4x2
  hlo-analyzer inspect dump/ --mesh data=4,model=2 --csv > collectives.csv
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("inspect", help="list and price the collectives of an HLO dump",
                              description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("path", metavar="FILE_OR_DUMP_DIR", help="HLO text file or --xla_dump_to folder")
    p.add_argument("--mesh", metavar="AXES", default=None,
                   help="the mesh the program was compiled for, major to minor, e.g. data=4,model=2")
    add_pricing_options(p)
    add_output_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from analyzer.pipeline import analyze_hlo

    from analyzer.fileio import check_input

    check_trace(args)
    check_input(args.path, what="HLO file")  # a FIFO would block, /dev/zero never end: refused before reading
    report = analyze_hlo(args.path, mesh=args.mesh, hardware=args.hardware, topology=args.topology,
                         model=args.model)
    return emit(report, args)
