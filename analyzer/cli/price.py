"""`hlo-analyzer price 'AllGather_Y [E_Y, F] -> [E, F]' --mesh X=8,Y=4 --dims E=2048,F=8192`: one
collective, priced on a hardware model (analyzer.theory.cost)."""

from __future__ import annotations

import argparse
import json

from analyzer.errors import MeshError, ShardingError, valid_choices
from analyzer.units import format_count, format_seconds

DESCRIPTION = """\
Price one collective written in the notation of "How to Scale Your Model": the seconds it takes, whether it
is bandwidth- or latency-bound, the bytes V it moves, the hops on its longest path and the formula used.

The collective is KIND_AXES: BEFORE -> AFTER with KIND one of AllGather, ReduceScatter, AllReduce, AllToAll,
CollectivePermute, CollectiveBroadcast, RaggedAllToAll. Unreduced partial sums are written {U_X}."""

EPILOG = """\
examples:
  hlo-analyzer price 'AllGather_Y [E_Y, F] -> [E, F]' --mesh X=8,Y=4 --dims E=2048,F=8192 --hardware tpu-v5e
  hlo-analyzer price 'AllReduce_Z: [B_X, D_Y]{U_Z} -> [B_X, D_Y]' --mesh X=4,Y=4,Z=4 --dims B=1024,D=4096 \\
      --hardware tpu-v4p --topology v4p:4x4x4
  hlo-analyzer price 'ReduceScatter_X,F: [B, F]{U_X} -> [B, F_X]' --mesh X=8 --dims B=4096,F=8192 \\
      --hardware h100 --json
  hlo-analyzer price 'AllToAll_X: [I_X, J] -> [I, J_X]' --mesh X=16 --dims I=8192,J=8192 --hardware tpu-v5e \\
      --model ideal
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("price", help="price one collective written in the chapter's notation",
                              description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("collective", metavar="COLLECTIVE", help="e.g. 'AllGather_Y [E_Y, F] -> [E, F]'")
    p.add_argument("--mesh", required=True, metavar="AXES", help="mesh axes and sizes, major to minor: X=8,Y=4")
    p.add_argument("--dims", required=True, metavar="SIZES", help="global size of each dim letter: E=2048,F=8192")
    p.add_argument("--dtype", default="bf16", help="element type (default bf16)")
    p.add_argument("--hardware", default="tpu-v5e", help="a packaged spec name or a .toml path (default tpu-v5e)")
    p.add_argument("--topology", default=None,
                   help="physical slice, e.g. v5e:8x4, v5p:4x4x4, h100:4x8 (default: the smallest that holds the mesh)")
    p.add_argument("--model", choices=("topology", "ideal"), default="topology",
                   help="topology (default: hops, wraparound, latency) or ideal (the chapter's V/W formulas)")
    p.add_argument("--sharp", action="store_true", help="GPU AllReduce with in-network reduction (SHARP)")
    p.add_argument("--top-k", type=_top_k, default=None, help="ragged AllToAll: destinations per token (1 or more)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


# Limits that keep `price` exact and fast. A mesh of 2^20 (1,048,576) devices is over 100 of the largest TPU
# pods (tpu-7x: 9,216 chips); the topology model builds one record per device, so much larger meshes would
# take minutes and gigabytes. A dim of 2^48 elements (and an array of 2^60) keeps every byte count an exact
# integer in a float64 (2^53) after multiplying by the element size and the device count.
MAX_MESH_DEVICES = 1 << 20
MAX_DIM = 1 << 48
MAX_ELEMENTS = 1 << 60


def _top_k(text: str) -> int:
    if not text.strip().isascii() or not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"--top-k is the number of destinations per token, a whole number of at "
                                         f"least 1; got {text!r}")
    return int(text)


def parse_sizes(text: str, what: str) -> dict[str, int]:
    """`"X=8,Y=4"` -> `{"X": 8, "Y": 4}`; a MeshError (for --mesh) or ShardingError naming the bad item.

    Sizes are plain decimal integers (no `10**30`, no exponents) up to `MAX_DIM`; a mesh holds at most
    `MAX_MESH_DEVICES` devices.
    """
    err = MeshError if what == "mesh" else ShardingError
    out: dict[str, int] = {}
    for item in filter(None, (s.strip() for s in str(text).split(","))):
        name, eq, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not eq or not name or not value.isascii() or not value.isdigit() or int(value) <= 0:
            raise err(f"bad --{what} item {item!r}: expected NAME=SIZE with a positive decimal integer, e.g. X=8")
        if len(value) > 20 or int(value) > MAX_DIM:
            raise err(f"--{what} item {item!r} is too large: sizes up to 2^48 ({MAX_DIM:,}) are supported")
        if name in out:
            raise err(f"--{what} names {name!r} twice")
        out[name] = int(value)
    if not out:
        raise err(f"--{what} is empty: expected NAME=SIZE,... e.g. X=8,Y=4")
    if what == "mesh":
        n = 1
        for size in out.values():
            n *= size
        if n > MAX_MESH_DEVICES:
            raise err(f"--mesh {text!r} has {n:,} devices; price supports meshes of up to 2^20 "
                      f"({MAX_MESH_DEVICES:,}) devices, over 100 of the largest TPU pods")
    return out


def price(args: argparse.Namespace) -> dict:
    """Everything `run` prints, as a dict (also the --json object)."""
    from analyzer.theory.cost import collective_cost
    from analyzer.theory.hardware import load_hardware
    from analyzer.theory.notation import Collective, parse_collective
    from analyzer.theory.topology import Topology

    mesh = parse_sizes(args.mesh, "mesh")
    dims = parse_sizes(args.dims, "dims")
    coll = parse_collective(args.collective, mesh)
    needed = list(dict.fromkeys(d.name for n in (coll.before, coll.after) for d in n.dims))
    missing = [d for d in needed if d not in dims]
    if missing:
        raise ShardingError(f"--dims lacks {', '.join(missing)}: give a size for every dim of {coll}, "
                            f"e.g. --dims {','.join(f'{d}=1024' for d in needed)}")
    for name, shape in (("before", coll.before), ("after", coll.after)):
        n = 1
        for d in shape.dims:
            n *= dims[d.name]
        if n > MAX_ELEMENTS:
            raise ShardingError(f"the {name} array of {coll} has {n:.3g} elements; price supports arrays of up "
                                f"to 2^60 ({MAX_ELEMENTS:.3g}) elements")
    extra = [d for d in dims if d not in needed]
    if extra:
        raise ShardingError(f"--dims names {extra[0]!r}, which {coll} does not use; "
                            f"{valid_choices(extra[0], needed, what='dims')}")
    hw = load_hardware(args.hardware)
    topo = Topology.for_mesh(hw, tuple(mesh), tuple(mesh.values()), topology=args.topology)
    before = coll.before.with_mesh(mesh).with_shape([dims[d.name] for d in coll.before.dims], args.dtype)
    after = coll.after.with_mesh(mesh).with_shape([dims[d.name] for d in coll.after.dims], args.dtype)
    full = Collective(coll.kind, coll.axes, before, after, coll.scatter_dim)
    v = full.volume_bytes()
    cost = collective_cost(coll.kind, v, coll.axes, topo, model=args.model, sharp=args.sharp, top_k=args.top_k)
    return {
        "notation": str(full), "kind": coll.kind, "axes": list(coll.axes), "dtype": args.dtype,
        "dims": dims, "mesh": mesh, "hardware": hw.name, "topology": topo.slice.name,
        "topology_declared": topo.declared, "model": args.model,
        "seconds": cost.seconds, "regime": cost.regime, "bytes": cost.bytes, "hops": cost.hops,
        "formula": cost.formula, "per_device_bytes": before.bytes_per_device,
        "axes_detail": [topo.axis_info(a).describe() for a in coll.axes],
    }



def run(args: argparse.Namespace) -> int:
    result = price(args)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    where = result["topology"] + ("" if result["topology_declared"] else " (smallest slice that holds the mesh)")
    rows = [
        ("collective", result["notation"]),
        ("hardware", f"{result['hardware']} on {where}"),
        *(("axis", d) for d in result["axes_detail"]),
        ("model", result["model"]),
        ("bytes", f"{format_count(result['bytes'])} (V)"),
        ("seconds", format_seconds(result["seconds"])),
        ("regime", result["regime"]),
        ("hops", str(result["hops"])),
        ("formula", result["formula"]),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    return 0
