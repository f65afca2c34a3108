"""Digests of `analyze_hlo(...).to_json()` over every fixture, sample and corpus module, to show a change to the
analysis path leaves every report byte-identical.

Inputs: fixtures/**/*.hlo and fixtures/maxtext/*.hlo.gz with the mesh their `// mesh:` header line names;
tests/hlo/samples/*.hlo and tests/hlo/corpus/*.hlo (valid and `.invalid`) with no mesh (inferred); with
`--synthetic`, the 22 MB module of benchmarks/parse_speed.py with mesh fsdp=4,tp=2. Each input gives the sha256
of its report's JSON, or, where `analyze_hlo` raises, the error's class and message (positions included).

Run: `JAX_PLATFORMS=cpu python scripts/report_identity.py --out build/identity_before.json` on the old code, the
same with `--out build/identity_after.json` on the new, then `python scripts/report_identity.py --compare
build/identity_before.json build/identity_after.json` (exit 1 and the names that differ when any does).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import sys
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
ROOT = Path(__file__).resolve().parent.parent
_MESH = re.compile(r"^// mesh: (\S+)", re.M)


def _inputs(synthetic: bool) -> list[tuple[str, str, str | None]]:
    """(name, text, mesh) for every input."""
    out = []
    for p in sorted((ROOT / "fixtures").rglob("*.hlo")) + sorted((ROOT / "fixtures").rglob("*.hlo.gz")):
        text = gzip.decompress(p.read_bytes()).decode() if p.suffix == ".gz" else p.read_text()
        m = _MESH.search(text[:4000])
        out.append((str(p.relative_to(ROOT)), text, m.group(1) if m else None))
    for folder in ("tests/hlo/samples", "tests/hlo/corpus"):
        for p in sorted((ROOT / folder).glob("*.hlo")):
            out.append((str(p.relative_to(ROOT)), p.read_text(), None))
    if synthetic:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from parse_speed import synthetic_module

        p = synthetic_module(64)
        out.append(("synthetic:" + p.name, p.read_text(), "fsdp=4,tp=2"))
    return out


def digests(synthetic: bool, drop: tuple[str, ...] = ()) -> dict[str, str]:
    from analyzer.errors import AnalyzerError
    from analyzer.pipeline import analyze_hlo

    sys.setrecursionlimit(10000)
    out = {}
    for name, text, mesh in _inputs(synthetic):
        try:
            report = analyze_hlo(text, mesh=mesh)
            if drop:  # (top-level keys a change added, so the rest can be compared with a run made before it)
                from analyzer.analysis.serialize import dumps  # (what to_json writes with)

                js = dumps({k: v for k, v in report.to_dict().items() if k not in drop}, indent=2)
            else:
                js = report.to_json()
            out[name] = hashlib.sha256(js.encode()).hexdigest()
        except AnalyzerError as e:
            out[name] = f"{type(e).__name__}: {e}"
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the digests here (JSON)")
    ap.add_argument("--synthetic", action="store_true", help="also the 22 MB synthetic module")
    ap.add_argument("--drop", action="append", default=[], metavar="KEY",
                    help="leave this top-level key of every report out of its digest (one a change added); repeatable")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two digest files")
    args = ap.parse_args(argv)
    if args.compare:
        a, b = (json.loads(Path(f).read_text()) for f in args.compare)
        differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
        for k in differ:
            print(f"differs: {k}\n  before: {str(a.get(k))[:300]}\n  after:  {str(b.get(k))[:300]}")
        errors = sum(":" in v for v in a.values())
        print(f"{len(a)} inputs ({errors} raise), {len(differ)} differ")
        return 1 if differ else 0
    from analyzer.fileio import write_atomic

    d = digests(args.synthetic, tuple(args.drop))
    if args.out:
        write_atomic(args.out, json.dumps(d, indent=1, sort_keys=True))
    errors = sum(":" in v for v in d.values())
    print(f"{len(d)} inputs, {errors} raise")
    return 0


if __name__ == "__main__":
    sys.exit(main())
