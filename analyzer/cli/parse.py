"""`hlo-analyzer parse FILE...`: what a module holds, as XLA's parser would see it.

Prints, per file: the computations, instruction counts by opcode, and every collective with its expanded
device groups (or source-target pairs). `--json` prints the same as one JSON object per run. Bad HLO is an
`HloSyntaxError` / `HloSemanticError`: its message (with the source line and a caret) and exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any
from analyzer.hlo.opcodes import ASYNC_COLLECTIVE_STARTS, COLLECTIVES

__all__ = ["register", "summarize"]

_COLLECTIVE_OPCODES = COLLECTIVES | ASYNC_COLLECTIVE_STARTS


def summarize(module) -> dict[str, Any]:
    """A JSON-ready summary of a parsed module: computations, opcode counts and collectives.

    Args:
      module: an `analyzer.hlo.ir.HloModule`.

    Returns:
      `{"module", "path", "num_partitions", "replica_count", "entry", "computations": [...],
      "opcodes": {opcode: count}, "instructions": N, "collectives": [...]}`; each collective has its
      computation, name, opcode, shape, channel_id, `groups` (explicit device ids, `{}` expanded to every
      participant) or `source_target_pairs`, op_name and source `file:line` when the metadata has them.
    """
    from analyzer.hlo import attributes
    from analyzer.hlo.printer import format_shape

    opcodes: Counter[str] = Counter()
    comps = []
    collectives = []
    for comp in module.computations:
        comps.append({"name": comp.name, "entry": comp.is_entry, "instructions": len(comp.instructions)})
        for inst in comp.instructions:
            opcodes[inst.opcode] += 1
            if inst.opcode not in _COLLECTIVE_OPCODES:
                continue
            row: dict[str, Any] = {
                "computation": comp.name,
                "name": inst.name,
                "opcode": inst.opcode,
                "shape": format_shape(inst.shape),
                "channel_id": inst.channel_id,
            }
            if inst.attr("source_target_pairs") is not None:
                row["source_target_pairs"] = [list(p) for p in inst.source_target_pairs]
            else:
                groups = attributes.expand_replica_groups(inst, module)
                row["groups"] = [list(g) for g in groups] if groups is not None else None
            md = inst.metadata
            if md is not None:
                row["op_name"] = md.op_name
                frames = module.frame_chain(md.stack_frame_id)
                if frames:
                    row["source"] = f"{frames[0].file}:{frames[0].line}"
                elif md.source_file:
                    row["source"] = f"{md.source_file}:{md.source_line}"
            collectives.append(row)
    return {
        "module": module.name,
        "path": module.path,
        "num_partitions": module.num_partitions,
        "replica_count": module.replica_count,
        "entry": module.entry.name,
        "computations": comps,
        "instructions": sum(opcodes.values()),
        "opcodes": dict(sorted(opcodes.items(), key=lambda kv: (-kv[1], kv[0]))),
        "collectives": collectives,
    }


def _print_text(s: dict[str, Any], out) -> None:
    print(f"{s['path'] or s['module']}: module {s['module']}, {len(s['computations'])} computations, "
          f"{s['instructions']} instructions, entry {s['entry']}, num_partitions={s['num_partitions']}, "
          f"replica_count={s['replica_count']}", file=out)
    print("  opcodes: " + ", ".join(f"{k} {v}" for k, v in s["opcodes"].items()), file=out)
    if not s["collectives"]:
        print("  collectives: none", file=out)
        return
    print(f"  collectives ({len(s['collectives'])}):", file=out)
    for c in s["collectives"]:
        if "source_target_pairs" in c:
            who = "pairs " + " ".join(f"{a}->{b}" for a, b in c["source_target_pairs"])
        else:
            who = "groups " + (" ".join("{" + ",".join(map(str, g)) + "}" for g in c["groups"])
                               if c["groups"] is not None else "(none)")
        where = f"  [{c['source']}]" if c.get("source") else ""
        print(f"    {c['opcode']:<26} %{c['name']} {c['shape']}  {who}{where}", file=out)


def _run(args: argparse.Namespace) -> int:
    from analyzer.fileio import check_input
    from analyzer.hlo.memo import scope
    from analyzer.hlo.parser import parse_hlo_file

    for path in args.files:  # a FIFO or /dev/zero is refused before anything is read
        check_input(path, what="HLO file")
    summaries = []
    for path in args.files:
        with scope():  # (the parse and the summary in one call: device groups and metadata decoded once a text)
            module = parse_hlo_file(path, lazy=args.lazy)
            summaries.append(summarize(module))
    if args.json:
        json.dump({"modules": summaries}, sys.stdout, indent=2)
        print()
    else:
        for s in summaries:
            _print_text(s, sys.stdout)
    return 0


def register(subparsers) -> None:
    """Add `parse` to the `hlo-analyzer` command line."""
    p = subparsers.add_parser(
        "parse",
        help="parse HLO text files and summarise them (computations, opcodes, collectives)",
        description="Parse HLO text as XLA prints it (compiled.as_text(), --xla_dump_to files) and summarise "
                    "each module: computations, instruction counts by opcode, and the collectives with their "
                    "device groups expanded. Exit 2 with the error (line, column, caret) on bad input.",
        epilog="example:\n  hlo-analyzer parse dump/module_0001.after_spmd-partitioning.txt\n"
               "  hlo-analyzer parse --json step.hlo > step.json",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="HLO text files")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--lazy", action="store_true",
                   help="split computations with the fast scanner and parse each only as needed")
    p.set_defaults(func=_run)
