"""Derive mutated modules from the corpus and label each with XLA's verdict.

tests/hlo/corpus/*.hlo are HLO strings from XLA's own tests (each file names its source test in its first
line; `*.invalid.hlo` are XLA's negative tests, which its parser rejects). This script makes deterministic mutations of them (a character deleted or inserted, a token replaced,
a line dropped or duplicated, an operand renamed, a second ROOT...) and asks XLA's parser
(`xla_client.hlo.hlo_module_from_text`) about each. It writes them to tests/hlo/corpus/mutated/ as
`<source>.m<N>.valid.hlo` or `<source>.m<N>.invalid.hlo`, so the tests know what XLA decided without
re-asking it. Run: `JAX_PLATFORMS=cpu python tests/hlo/make_corpus.py [--per-file N]`.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from pathlib import Path

HERE = Path(__file__).parent
CORPUS = HERE / "corpus"
OUT = CORPUS / "mutated"

_WORD = re.compile(r"%?[A-Za-z_][\w.\-]*|-?\d+(?:\.\d+)?|\S")


def _mutations(text: str, rng: random.Random) -> str:
    """One random mutation of `text` (the provenance line is kept)."""
    head, _, body = text.partition("\n")
    kind = rng.randrange(9)
    lines = body.split("\n")
    if kind == 0 and body:  # delete a character
        i = rng.randrange(len(body))
        body = body[:i] + body[i + 1:]
    elif kind == 1:  # insert a structural character
        i = rng.randrange(len(body) + 1)
        body = body[:i] + rng.choice("{}()[],=%:\"'x0-") + body[i:]
    elif kind == 2:  # replace a token by another token of the module
        toks = list(_WORD.finditer(body))
        if toks:
            a, b = rng.choice(toks), rng.choice(toks)
            body = body[:a.start()] + b.group() + body[a.end():]
    elif kind == 3 and len(lines) > 2:  # drop a line
        del lines[rng.randrange(len(lines))]
        body = "\n".join(lines)
    elif kind == 4 and len(lines) > 2:  # duplicate an instruction line
        cands = [i for i, l in enumerate(lines) if " = " in l]
        if cands:
            i = rng.choice(cands)
            lines.insert(i + 1, lines[i])
            body = "\n".join(lines)
    elif kind == 5:  # rename one operand reference
        refs = list(re.finditer(r"(?<=[(, ])%?([A-Za-z_][\w.\-]*)(?=[,)])", body))
        if refs:
            r = rng.choice(refs)
            body = body[:r.start()] + "undefined_" + r.group().lstrip("%") + body[r.end():]
    elif kind == 6:  # a second ROOT
        cands = [i for i, l in enumerate(lines) if " = " in l and "ROOT" not in l]
        if cands:
            i = rng.choice(cands)
            lines[i] = re.sub(r"^(\s*)", r"\1ROOT ", lines[i], count=1)
            body = "\n".join(lines)
    elif kind == 7:  # break an element type or a number
        toks = [m for m in re.finditer(r"\b(f32|s32|bf16|pred|u32|f16)\[|\b\d+\b", body)]
        if toks:
            m = rng.choice(toks)
            rep = {"f32[": "g32[", "s32[": "s33[", "bf16[": "bf17[", "pred[": "prd[", "u32[": "u31[",
                   "f16[": "f15["}.get(m.group(), str(int(m.group()) + rng.choice((1, 7, 100))) if m.group().isdigit()
                                        else m.group())
            body = body[:m.start()] + rep + body[m.end():]
    else:  # truncate
        body = body[: rng.randrange(len(body) + 1)]
    return head + "\n" + body


def _worker(conn) -> None:
    from jax._src.lib import xla_client as xc

    while True:
        text = conn.recv()
        if text is None:
            return
        try:
            xc.hlo.hlo_module_from_text(text)
            conn.send("valid")
        except Exception:
            conn.send("invalid")


class XlaJudge:
    """XLA's parser in a child process: some malformed modules make it abort (a CHECK failure), which
    counts as a rejection; the child is restarted."""

    def __init__(self) -> None:
        self._proc = None
        self._conn = None

    def _start(self) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_worker, args=(child,), daemon=True)
        self._proc.start()

    def verdict(self, text: str) -> str:
        if self._proc is None or not self._proc.is_alive():
            self._start()
        try:
            self._conn.send(text)
            if self._conn.poll(60):
                return self._conn.recv()
        except (EOFError, OSError):
            pass
        self._proc.join(1)
        self._proc = None
        return "invalid"  # XLA aborted on it

    def close(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._conn.send(None)
            self._proc.join(5)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--per-file", type=int, default=4)
    ap.add_argument("--seed", type=int, default=20261202)
    args = ap.parse_args(argv)
    judge = XlaJudge()
    OUT.mkdir(exist_ok=True)
    for old in OUT.glob("*.hlo"):
        old.unlink()
    rng = random.Random(args.seed)
    counts = {"valid": 0, "invalid": 0}
    for src in sorted(p for p in CORPUS.glob("*.hlo") if not p.name.endswith(".invalid.hlo")):
        text = src.read_text()
        seen = {text}
        for n in range(args.per_file):
            for _ in range(10):
                m = _mutations(text, rng)
                if m not in seen:
                    break
            if m in seen:
                continue
            seen.add(m)
            verdict = judge.verdict(m)
            counts[verdict] += 1
            note = f"// mutation {n} of {src.name} by tests/hlo/make_corpus.py (seed {args.seed}); XLA: {verdict}\n"
            (OUT / f"{src.stem}.m{n}.{verdict}.hlo").write_text(note + m)
    judge.close()
    print(f"wrote {counts['valid']} valid and {counts['invalid']} invalid mutations to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
