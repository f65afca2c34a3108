"""The named opcode classes of analyzer/hlo/opcodes.py: every member is an opcode XLA's parser knows, and no module
outside analyzer/hlo/ writes its own set of opcodes (each class is defined once; issue 23 found the "passes a value
through" list written eight times, two of them spelling `optimization-barrier`, which XLA never prints)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from analyzer.hlo import opcodes
from analyzer.hlo.opcodes import OPCODE_CLASSES, OPCODES, is_known_opcode

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(OPCODE_CLASSES))
def test_every_member_is_an_opcode_xla_knows(name):
    unknown = sorted(op for op in OPCODE_CLASSES[name] if not is_known_opcode(op))
    assert not unknown, f"{name} holds opcodes XLA's parser does not know: {unknown}"


def test_classes_are_exported_and_registered():
    for name, members in OPCODE_CLASSES.items():
        assert getattr(opcodes, name) is members
        assert name in opcodes.__all__


def test_nop_and_pass_through_are_what_xla_prints():
    assert "opt-barrier" in opcodes.NOP and "opt-barrier" in opcodes.PASS_THROUGH
    assert "optimization-barrier" not in OPCODES
    assert opcodes.RELABEL <= opcodes.PASS_THROUGH
    assert not opcodes.DOTS & opcodes.NOP


def _opcode_sets(path: Path) -> list[tuple[int, list[str]]]:
    """(line, members) of every module-level name bound to a set/frozenset/tuple/list literal of three or more strings
    that are (three quarters at least) opcodes: a class of opcodes. Not one: a test inside a function
    (`op in ("while", "call")`), or a few members added to a named class (`RELABEL | {"slice", ...}`)."""
    found = []
    for stmt in ast.parse(path.read_text(encoding="utf-8")).body:
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or stmt.value is None:
            continue
        value = stmt.value
        if isinstance(value, ast.Call) and value.args:  # frozenset({...}), tuple(...)
            value = value.args[0]
        for node in [value]:
            if not isinstance(node, (ast.Set, ast.Tuple, ast.List)):
                continue
            values = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            known = [v for v in values if is_known_opcode(v)]
            # (three quarters known: a misspelt member, `optimization-barrier`, does not hide a class)
            if len(values) >= 3 and len(values) == len(node.elts) and len(known) >= 0.75 * len(values):
                found.append((node.lineno, values))
    return found


def test_no_module_above_hlo_writes_its_own_opcode_class():
    """Three or more opcodes written together outside analyzer/hlo/ are a class: it belongs in hlo/opcodes.py."""
    offenders = []
    for path in sorted((ROOT / "analyzer").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("analyzer/hlo/"):
            continue
        offenders += [f"{rel}:{line}: {members}" for line, members in _opcode_sets(path)]
    assert not offenders, "opcode classes written outside analyzer/hlo/opcodes.py:\n" + "\n".join(offenders)


def test_the_search_finds_a_class_written_elsewhere(tmp_path):
    """The check above can fail: a class written out (one member misspelt) is found, a union with a class is not."""
    f = tmp_path / "m.py"
    f.write_text('X = frozenset({"bitcast", "reshape", "copy", "optimization-barrier"})\n'
                 'Y = RELABEL | {"slice", "dynamic-slice", "gather"}\n'
                 'def f(op):\n    return op in ("while", "call", "conditional")\n')
    assert [line for line, _ in _opcode_sets(f)] == [1]
