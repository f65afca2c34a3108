"""jax 0.11+'s tuple-element references (`%param#0`): read as the get-tuple-element XLA's parser makes of them."""

from __future__ import annotations

import pytest

from analyzer.errors import HloSemanticError
from analyzer.hlo.parser import parse_hlo
from analyzer.hlo.tuplerefs import LineMap, expand, has_tuple_refs

BODY = """HloModule m

%body (param: (s32[], (f32[4]{0}, f32[2,3]{1,0}))) -> s32[] {
  %param = (s32[], (f32[4]{0}, /*index=1*/f32[2,3]{1,0})) parameter(0)
  %one = s32[] constant(1)
  %add = s32[] add(%param#0, %one), metadata={op_name="a#0 in a string"}
  %neg = f32[2,3]{1,0} negate(%param#1#1)
  ROOT %sum = s32[] add(%param#0, %add)
}

ENTRY %e (p: (s32[], (f32[4], f32[2,3]))) -> s32[] {
  %p = (s32[], (f32[4]{0}, f32[2,3]{1,0})) parameter(0)
  ROOT %c = s32[] call(%p), to_apply=%body
}
"""


def test_each_reference_is_the_get_tuple_element_it_stands_for():
    m = parse_hlo(BODY)
    body = m["body"]
    gte = {i.name: i for i in body.instructions if i.opcode == "get-tuple-element"}
    assert set(gte) == {"param_0", "param_1", "param_1_1"}  # one per element, shared by its users
    assert (gte["param_0"].operands[0].name, gte["param_0"].attr("index"), str(gte["param_0"].shape)) == \
        ("param", "0", "s32[]")
    assert gte["param_1_1"].operands[0].name == "param_1" and gte["param_1_1"].shape.dims == (2, 3)
    assert [o.name for o in body.by_name["sum"].operands] == ["param_0", "add"]
    assert body.by_name["add"].metadata.op_name == "a#0 in a string"  # (strings are not read for references)


def test_lines_and_columns_are_those_written():
    text, lines = expand(BODY)
    m = parse_hlo(BODY)
    add = m["body"].by_name["add"]
    assert m.written_line(add.position.line) == 6 and add.position.column == BODY.splitlines()[5].index("%add") + 1
    assert text.splitlines()[m.written_line(add.position.line) + len(lines.made[:1]) - 1].lstrip().startswith("%add")
    assert m.written_line(m["body"].by_name["param_0"].position.line) == 6  # a made line: its first user's
    assert LineMap((3, 4, 9)).original(5) == 3 and LineMap((3, 4, 9)).original(10) == 7


@pytest.mark.parametrize("bad, message, column", [
    ("%param#2", "names element 2 of `%param`, which is a tuple of 2 elements", 20),
    ("%one#0", "names element 0 of `%one`, which is not a tuple", 20),
    ("%later#0", "`%later`, which is not defined before it", 20),
])
def test_bad_references_are_positioned_errors(bad, message, column):
    text = BODY.replace("add(%param#0, %one)", f"add({bad}, %one)")
    with pytest.raises(HloSemanticError, match=message) as e:
        parse_hlo(text)
    assert (e.value.line, e.value.column) == (6, column)


def test_a_taken_name_gets_another_of_the_same_length():
    text = BODY.replace("%one = s32[] constant(1)", "%param_0 = s32[] constant(1)").replace(", %one)", ", %param_0)")
    m = parse_hlo(text)
    gte = [i for i in m["body"].instructions if i.opcode == "get-tuple-element" and i.attr("index") == "0"]
    assert [g.name for g in gte] == ["param-0"]


def test_text_without_references_is_not_touched():
    plain = BODY.replace("%param#0", "%one").replace("  %neg = f32[2,3]{1,0} negate(%param#1#1)\n", "")
    assert not has_tuple_refs(plain) and has_tuple_refs(BODY)
    assert parse_hlo(plain).made_lines == ()


def test_xla_reads_the_same_module():
    """Where the installed XLA reads `#` references (jaxlib 0.11+), it makes the same get-tuple-elements."""
    xc = pytest.importorskip("jax._src.lib").xla_client
    try:
        printed = xc.hlo.hlo_module_from_text(BODY).to_string()
    except Exception:  # noqa: BLE001 - jaxlib 0.10's XLA rejects '#' in a name
        pytest.skip("this jaxlib's XLA does not read tuple references (jax 0.11 added them)")
    ours = parse_hlo(BODY)
    xla_gtes = sorted(line.split("=")[0].strip().lstrip("%") for line in printed.splitlines()
                      if "get-tuple-element(" in line)
    assert xla_gtes == sorted(i.name for c in ours.computations for i in c.instructions
                              if i.opcode == "get-tuple-element")
