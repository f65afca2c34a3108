"""`hlo-analyzer diff OLD NEW`: collectives added, removed and changed between two analyses (analyzer/workflows/diff.py)."""

from __future__ import annotations

import argparse
import sys

DESCRIPTION = """\
Compare the collectives of two versions of a program: what was added, removed or changed (bytes, count,
shape), with the predicted time per step of each change and of the whole step.

OLD and NEW are each an HLO dump (file or --xla_dump_to folder), a JSON report (hlo-analyzer report -o r.json),
or REV:path, a config at a git revision (a report CONFIG.toml, or a pyproject.toml whose [tool.hlo-analyzer]
lists entry points): the repository's tree at REV is exported and analysed, model code included. REV must
name a commit; the path is relative to the repository root (or ./ and ../ to the current folder) and must
lie inside it. Sides and source lines are printed relative to the repository root.

A config side (working tree or REV:path) is answered from the result cache (.hlo-analyzer-cache/ at the
project root, as `check` keeps it) when its config, the code its entry points import, the hardware specs,
the installed packages and XLA_FLAGS/LIBTPU_INIT_ARGS/JAX_* are unchanged: a revision is keyed on its files'
contents, not on the commit, so HEAD~1:pyproject.toml hits after a commit that left them alone.

exit status: 0 within the threshold (or none given), 1 a program's communication per step regressed by more
than --max-regression, 2 bad usage or input."""

EPILOG = """\
examples:
  hlo-analyzer diff before.json after.json
  hlo-analyzer diff main:pyproject.toml pyproject.toml --max-regression 5%
  hlo-analyzer diff HEAD~1:configs/llama.toml configs/llama.toml --max-regression 200us
  hlo-analyzer diff dump_old/ dump_new/ --mesh data=4,model=2 --hardware tpu-v5p --json
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("diff", help="collectives added, removed and changed between two analyses",
                              description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("old", metavar="OLD", help="dump, JSON report, or REV:path")
    p.add_argument("new", metavar="NEW", help="dump, JSON report, or REV:path")
    p.add_argument("--max-regression", metavar="LIMIT", help="exit 1 when a program's predicted communication per "
                   "step grows by more than LIMIT: a percentage (5%%) or a time (200us, 1.5ms)")
    p.add_argument("--mesh", metavar="AXES", help="mesh of dump sides, e.g. data=4,model=2")
    p.add_argument("--hardware", metavar="NAME", help="hardware dumps and configs are priced on (default tpu-v5e)")
    p.add_argument("--json", action="store_true", help="print the diff as JSON")
    p.add_argument("--no-cache", action="store_true", help="analyse config sides even when the result cache "
                   "(.hlo-analyzer-cache/) holds them, and store nothing")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from analyzer.workflows.diff import diff_sides, load_side, parse_threshold, side_label
    from analyzer.formats import renderer

    threshold = parse_threshold(args.max_regression) if args.max_regression else None
    old = load_side(args.old, mesh=args.mesh, hardware=args.hardware, no_cache=args.no_cache)
    new = load_side(args.new, mesh=args.mesh, hardware=args.hardware, no_cache=args.no_cache)
    for note in dict.fromkeys(n for n in (old.cache_note, new.cache_note) if n):
        print(f"hlo-analyzer: note: {note}", file=sys.stderr)
    # Both sides named relative to the repository root (the old one REV:path), as the rows' source lines are.
    result = diff_sides(old, new, old_label=side_label(args.old), new_label=side_label(args.new))
    text = renderer("json" if args.json else "text", "diff")(result, threshold=threshold)
    sys.stdout.write(text)
    if threshold is not None and any(threshold.exceeded(p.old_seconds, p.new_seconds) for p in result.programs):
        return 1
    return 0
