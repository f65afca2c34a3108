"""Measure parse_hlo against XLA's own parser on the corpus (tests/hlo/corpus/*.hlo).

For every file: XLA's verdict (`xla_client.hlo.hlo_module_from_text`) and ours (`analyzer.parse_hlo`).
Valid modules must parse (acceptance rate printed); invalid ones must raise HloSyntaxError or
HloSemanticError with a line and a column. Run: `JAX_PLATFORMS=cpu python tests/hlo/corpus_check.py [-v]`.
"""

from __future__ import annotations

import sys
from pathlib import Path

CORPUS = Path(__file__).parent / "corpus"


def xla_accepts(text: str) -> tuple[bool, str]:
    from jax._src.lib import xla_client as xc

    try:
        xc.hlo.hlo_module_from_text(text)
        return True, ""
    except Exception as e:  # XLA raises XlaRuntimeError / ValueError
        return False, str(e).splitlines()[0][:200]


def ours(text: str) -> tuple[bool, str]:
    from analyzer.errors import HloSemanticError, HloSyntaxError
    from analyzer.hlo.parser import parse_hlo

    try:
        parse_hlo(text)
        return True, ""
    except (HloSyntaxError, HloSemanticError) as e:
        ok_pos = e.line is not None and e.column is not None
        return False, ("" if ok_pos else "[NO POSITION] ") + str(e).splitlines()[0][:200]


def xla_label(path: Path) -> bool | None:
    """The verdict recorded in a mutated file's name (`*.valid.hlo` / `*.invalid.hlo`), else None."""
    if path.name.endswith(".valid.hlo"):
        return True
    if path.name.endswith(".invalid.hlo"):
        return False
    return None


def check(paths, verbose=False):
    stats = {"valid": 0, "valid_ok": 0, "invalid": 0, "invalid_ok": 0}
    failures = []
    for p in paths:
        text = p.read_text()
        label = xla_label(p)
        xv, xmsg = (label, "recorded verdict") if label is not None else xla_accepts(text)
        ov, omsg = ours(text)
        if xv:
            stats["valid"] += 1
            if ov:
                stats["valid_ok"] += 1
            else:
                failures.append((p.name, "XLA accepts, we reject", omsg))
        else:
            stats["invalid"] += 1
            if not ov and not omsg.startswith("[NO POSITION]"):
                stats["invalid_ok"] += 1
            else:
                failures.append((p.name, "XLA rejects, we " + ("accept" if ov else "lack a position"), xmsg))
    return stats, failures


def main(argv):
    verbose = "-v" in argv
    files = [Path(a) for a in argv if not a.startswith("-")] or (
        sorted(CORPUS.glob("*.hlo")) + sorted((CORPUS / "mutated").glob("*.hlo")))
    stats, failures = check(files, verbose)
    for name, what, msg in failures:
        print(f"{name}: {what}: {msg}")
    v, i = stats["valid"], stats["invalid"]
    print(f"valid modules accepted: {stats['valid_ok']}/{v} ({100 * stats['valid_ok'] / max(v, 1):.1f}%)")
    print(f"invalid modules rejected with a position: {stats['invalid_ok']}/{i}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
