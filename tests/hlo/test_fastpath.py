"""The line-level fast path (analyzer/hlo/fastpath.py) builds exactly what the grammar builds.

For every fixture, sample and valid corpus module: the default parse (scanner + fast path, falling back to
the grammar per computation) equals one pass of the Lark grammar over the whole text, positions included.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.errors import HloSemanticError, HloSyntaxError
from analyzer.hlo.parser import _lark, parse_hlo
from analyzer.hlo.verifier import verify_attributes, verify_header

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
FILES = (sorted((ROOT / "fixtures").rglob("*.hlo")) + sorted((HERE / "samples").glob("*.hlo"))
         + sorted((HERE / "corpus").glob("*.hlo"))
         # every fifth mutation keeps the error paths covered without doubling the suite's time
         + sorted((HERE / "corpus" / "mutated").glob("*.hlo"))[::5])


def _grammar_only(text):
    m = _lark().parse(text, start="module")
    verify_attributes(m)
    verify_header(m, text)
    return m


def _positions(m):
    out = []
    for c in m.computations:
        out.append((c.name, c.position))
        for i in c.instructions:
            out.append((i.name, i.position, tuple(a.position for a in i.attributes),
                        tuple(a.position for a in c.attributes)))
    return out


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_fast_path_equals_grammar(path):
    text = path.read_text()
    try:
        slow = _grammar_only(text)
    except (HloSyntaxError, HloSemanticError):
        with pytest.raises((HloSyntaxError, HloSemanticError)):
            parse_hlo(text)
        return
    except Exception:  # the grammar path's own Lark errors: parse_hlo must turn them into ours
        with pytest.raises((HloSyntaxError, HloSemanticError)):
            parse_hlo(text)
        return
    fast = parse_hlo(text)
    assert fast == slow
    assert _positions(fast) == _positions(slow)
    assert fast.name == slow.name and fast.frames == slow.frames
