"""`hlo-analyzer hardware list` and `hlo-analyzer hardware show NAME`: the packaged hardware specs."""

from __future__ import annotations

import argparse
import json

DESCRIPTION = """\
The hardware models collectives are priced on. Every number in a spec comes from "How to Scale Your Model",
with the section named next to it in the spec file (`show` prints the file). A spec file of your own can be
given wherever a hardware name is accepted (--hardware path/to/spec.toml)."""

EPILOG = """\
examples:
  hlo-analyzer hardware list
  hlo-analyzer hardware show tpu-v5e
  hlo-analyzer hardware show h100 --json
  hlo-analyzer hardware show ./my-cluster.toml
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("hardware", help="list the hardware specs, or show one with its sources",
                              description=DESCRIPTION, epilog=EPILOG)
    sub = p.add_subparsers(dest="hardware_command", metavar="{list,show}")
    ls = sub.add_parser("list", help="one line per packaged spec", description="One line per packaged spec.",
                        epilog="example:\n  hlo-analyzer hardware list --json",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    ls.add_argument("--json", action="store_true", help="print a JSON list")
    ls.set_defaults(func=run_list)
    show = sub.add_parser("show", help="every number of one spec, with its source",
                          description="Every number of one spec; the text form prints the spec file with its sources.",
                          epilog="example:\n  hlo-analyzer hardware show tpu-v5p",
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    show.add_argument("name", metavar="NAME", help="a packaged name (see `hardware list`) or a .toml path")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(func=run_show)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _row(hw) -> dict:
    if hw.ici is not None:
        net = (f"ICI {hw.ici.link_bandwidth_one_way:.3g} B/s/link one way, {hw.ici.rank}D torus "
               f"(max {'x'.join(map(str, hw.ici.max_topology))})")
    else:
        net = f"NVLink {hw.nvlink.gpu_egress:.3g} B/s/GPU, domain {hw.nvlink.domain_size}"
        if hw.scale_out is not None:
            net += f", node egress {hw.scale_out.node_egress:.3g} B/s"
    return {"name": hw.name, "kind": hw.kind, "bf16_flops": hw.flops_per_second("bf16"),
            "hbm_bytes": hw.hbm_bytes, "hbm_bandwidth": hw.hbm_bandwidth, "network": net}


def run_list(args: argparse.Namespace) -> int:
    from analyzer.theory.hardware import list_hardware, load_hardware

    rows = [_row(load_hardware(n)) for n in list_hardware()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    header = ("name", "kind", "bf16 FLOPs/s", "HBM", "HBM B/s", "network")
    table = [header] + [(r["name"], r["kind"], f"{r['bf16_flops']:.3g}", f"{r['hbm_bytes'] / 1e9:.0f} GB",
                         f"{r['hbm_bandwidth']:.3g}", r["network"]) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    for row in table:
        print("  ".join(f"{c:<{w}}" for c, w in zip(row, widths)) + "  " + row[-1])
    return 0


def run_show(args: argparse.Namespace) -> int:
    from pathlib import Path

    from analyzer.theory.hardware import hardware_dir, load_hardware

    hw = load_hardware(args.name)
    if args.json:
        print(json.dumps(hw.summary(), indent=2))
        return 0
    if Path(str(args.name)).is_file():
        text = Path(str(args.name)).read_text(encoding="utf-8")
    else:
        text = (hardware_dir() / f"{hw.name}.toml").read_text(encoding="utf-8")
    print(text.rstrip())
    if hw.ici is not None:
        print(f"\n# derived: latency-bound below {hw.ici.latency_threshold_bytes:,.0f} B per hop "
              f"(W_one x T_min); C/W_ici = {hw.peak_flops / hw.ici.link_bandwidth_bidi:,.0f}; "
              f"C/W_hbm = {hw.peak_flops / hw.hbm_bandwidth:,.0f}")
    else:
        print(f"\n# derived: C/W_nvlink = {hw.peak_flops / hw.nvlink.gpu_egress:,.0f}; "
              f"C/W_hbm = {hw.peak_flops / hw.hbm_bandwidth:,.0f}"
              + (f"; C/W_node = {hw.peak_flops / hw.scale_out.node_egress:,.0f}" if hw.scale_out else ""))
    return 0
