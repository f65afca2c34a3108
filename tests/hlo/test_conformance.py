"""Conformance with XLA's own parser on real modules.

- every fixture (fixtures/**/*.hlo, made by fixtures/generate.py), every sample (tests/hlo/samples) and every
  corpus module XLA accepts parses, with the instruction count and opcode multiset XLA's parser sees;
- printing the IR back gives text XLA's parser accepts and that parses to an equal IR;
- on the corpus (XLA test strings, tests/hlo/corpus, and their mutations labelled with XLA's verdict by
  tests/hlo/make_corpus.py) the valid modules are accepted and the invalid ones rejected with a position,
  except the gaps listed below, each with its reason.
"""

from __future__ import annotations

import collections
import re
from pathlib import Path

import pytest

from analyzer.errors import HloSemanticError, HloSyntaxError
from analyzer.hlo.opcodes import OPCODES
from analyzer.hlo.parser import parse_hlo
from analyzer.hlo.printer import print_hlo

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
FIXTURES = sorted((ROOT / "fixtures").rglob("*.hlo"))
SAMPLES = sorted((HERE / "samples").glob("*.hlo"))
CORPUS = sorted(p for p in (HERE / "corpus").glob("*.hlo") if not p.name.endswith(".invalid.hlo"))
CORPUS_INVALID = sorted((HERE / "corpus").glob("*.invalid.hlo"))  # XLA's own negative tests
MUTATED = sorted((HERE / "corpus" / "mutated").glob("*.hlo"))

# Known gaps, with reasons (none left: the stray comma after an operand shape and the dot algorithm values are
# read as XLA reads them). Valid modules we reject:
KNOWN_REJECTED_VALID: set[str] = set()
# Invalid modules we accept:
KNOWN_ACCEPTED_INVALID: set[str] = set()

# The corpus above is labelled by jaxlib 0.10's XLA (its file names); where a later XLA decides otherwise, its
# verdict (measured with its own parser): file -> {first jaxlib (major, minor) deciding so: valid?}.
LATER_VERDICTS: dict[str, dict[tuple[int, int], bool]] = {
    # jaxlib 0.12's XLA no longer checks that an async-done continues an async chain (attributes.XLA_CHANGES)
    "Issue13AsyncDoneTwoOperands.invalid.hlo": {(0, 12): True},
    "Issue13AsyncDoneWithoutStart.invalid.hlo": {(0, 12): True},
}

# Every module string of XLA's parser tests (tests/hlo/corpus/xla, by tests/hlo/extract_xla_corpus.py), with the
# verdict of each installed jaxlib's XLA in its manifest.
XLA_CORPUS = HERE / "corpus" / "xla"
# Known gaps there, with reasons (none left: a computation written inline in an attribute, `calls=\n{ ... }`, is
# read as XLA reads it). Valid modules we reject:
XLA_KNOWN_REJECTED_VALID: set[str] = set()


def _jaxlib() -> tuple[str, tuple[int, int]]:
    import jaxlib

    v = jaxlib.__version__
    return v, tuple(int(x) for x in v.split(".")[:2])


def _enum_to_opcode() -> dict[str, str]:
    """XLA's enum names (kAllGather) -> opcode spellings (all-gather); hlo_opcode.h's irregular ones listed."""
    special = {"kClz": "count-leading-zeros", "kCos": "cosine", "kExp": "exponential",
               "kExpm1": "exponential-minus-one", "kLog1p": "log-plus-one", "kOptimizationBarrier": "opt-barrier",
               "kPopulationCount": "popcnt", "kSin": "sine", "kTopK": "topk"}
    table = {"k" + "".join(p.capitalize() for p in op.split("-")): op for op in OPCODES}
    table.update(special)
    return table


def _xla_module(text: str):
    from jax._src.lib import xla_client as xc

    return xc.hlo.hlo_module_from_text(text)


def _our_opcodes(module) -> collections.Counter:
    """Our opcodes, with XLA's async sugar (`custom-call-start(...)`) counted as XLA expands it: an
    async-start plus the wrapped op and one parameter per operand in its implicit computation."""
    out: collections.Counter = collections.Counter()
    for _, inst in module.instructions():
        op = inst.opcode
        if op in OPCODES:
            out[op] += 1
            continue
        base, _, phase = op.rpartition("-")
        out["async-" + phase] += 1
        if phase == "start":
            out[base] += 1
            out["parameter"] += len(inst.operands)
    return out


def _xla_opcodes(text: str) -> collections.Counter:
    names = _enum_to_opcode()
    x = _xla_module(text)
    return collections.Counter(names.get(i.opcode.name, i.opcode.name) for c in x.computations()
                               for i in c.instructions())


def _valid_texts():
    files = FIXTURES + SAMPLES + [p for p in CORPUS if p.name not in KNOWN_REJECTED_VALID]
    return files


@pytest.mark.parametrize("path", _valid_texts(), ids=lambda p: str(p.relative_to(ROOT)))
def test_same_instructions_as_xla_and_round_trip(path):
    text = path.read_text()
    m = parse_hlo(text, path=str(path))
    assert _our_opcodes(m) == _xla_opcodes(text)
    printed = print_hlo(m)
    _xla_module(printed)  # XLA accepts what we print
    again = parse_hlo(printed)
    assert again == m


def test_fixtures_exist():
    assert FIXTURES or SAMPLES, "no HLO fixtures found"


def _label(p: Path) -> bool:
    valid = p.name.endswith(".valid.hlo") or (p.parent.name == "corpus" and not p.name.endswith(".invalid.hlo"))
    installed = _jaxlib()[1]
    for since, verdict in sorted(LATER_VERDICTS.get(p.name, {}).items()):
        if installed >= since:
            valid = verdict
    return valid


def test_corpus_acceptance():
    """Valid modules accepted (>= 99% outside the listed gaps: 100%), invalid ones rejected with a position."""
    rejected_valid, accepted_invalid, no_position = [], [], []
    valid = list(CORPUS)
    cases = [(p, _label(p)) for p in valid + CORPUS_INVALID + MUTATED]
    for p, is_valid in cases:
        try:
            parse_hlo(p.read_text())
            ok = True
        except (HloSyntaxError, HloSemanticError) as e:
            ok = False
            if e.line is None or e.column is None:
                no_position.append(p.name)
        if is_valid and not ok and p.name not in KNOWN_REJECTED_VALID:
            rejected_valid.append(p.name)
        if not is_valid and ok and p.name not in KNOWN_ACCEPTED_INVALID:
            accepted_invalid.append(p.name)
    assert not rejected_valid
    assert not accepted_invalid
    assert not no_position
    n_valid = sum(1 for _, v in cases if v)
    assert (n_valid - len([p for p, v in cases if v and p.name in KNOWN_REJECTED_VALID])) / n_valid >= 0.99


def test_known_gaps_still_exist():
    """If a listed gap gets fixed, take it off the list (keeps the list honest)."""
    for name in KNOWN_ACCEPTED_INVALID:
        p = HERE / "corpus" / "mutated" / name
        if p.exists():
            try:
                parse_hlo(p.read_text())
            except (HloSyntaxError, HloSemanticError):
                pytest.fail(f"{name} is rejected now; remove it from KNOWN_ACCEPTED_INVALID")


def _xla_manifest() -> dict:
    import json

    return json.loads((XLA_CORPUS / "manifest.json").read_text())


def test_xla_parser_tests_corpus():
    """Every module string of XLA's parser tests: accepted where the installed jaxlib's XLA accepts it, rejected
    with a line and a column where it rejects it (its verdicts recorded in the manifest, so no XLA call)."""
    manifest = _xla_manifest()
    version = _jaxlib()[0]
    key = f"jaxlib-{version}"
    if key not in manifest["xla"]:
        pytest.skip(f"the corpus manifest has no verdicts of jaxlib {version} (it has {sorted(manifest['xla'])}); "
                    "run tests/hlo/extract_xla_corpus.py --label with this Python")
    files = {p.name for p in XLA_CORPUS.glob("*.hlo")}
    assert files == set(manifest["modules"]), "the manifest does not list exactly the corpus files"
    rejected_valid, accepted_invalid, no_position = [], [], []
    for name, verdicts in sorted(manifest["modules"].items()):
        valid = verdicts[key]["verdict"] == "valid"
        try:
            parse_hlo((XLA_CORPUS / name).read_bytes().decode())
            ok = True
        except (HloSyntaxError, HloSemanticError) as e:
            ok = False
            if e.line is None or e.column is None:
                no_position.append(name)
        if valid and not ok and name not in XLA_KNOWN_REJECTED_VALID:
            rejected_valid.append(name)
        if not valid and ok:
            accepted_invalid.append(name)
    assert (rejected_valid, accepted_invalid, no_position) == ([], [], [])


def test_xla_corpus_known_gaps_still_exist():
    for name in XLA_KNOWN_REJECTED_VALID:
        with pytest.raises((HloSyntaxError, HloSemanticError)):
            parse_hlo((XLA_CORPUS / name).read_bytes().decode())


def test_xla_versions_disagree_only_where_listed():
    """The modules the two ends' XLA decide differently are the ones attributes.XLA_CHANGES accounts for."""
    manifest = _xla_manifest()
    keys = sorted(manifest["xla"])
    differ = sorted(n for n, v in manifest["modules"].items() if len({v[k]["verdict"] for k in keys}) > 1)
    if len(keys) > 1:
        assert differ == ["AsyncDoneNoAsyncStart.hlo", "AsyncOpSharedComputation.hlo",
                          "AsyncUpdateAndAsyncDoneNoAsyncStart.hlo"]
