"""`analyze_hlo` reads a lazily parsed module: the call graph and each fusion's bytes from the lazy module
equal those of the full parse on every fixture and sample, with fusion bodies left unparsed where they can be."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.analysis.dataflow import users_map
from analyzer.analysis.graph import CallGraph
from analyzer.analysis.step import _fusion_bytes
from analyzer.errors import HloSemanticError
from analyzer.hlo.parser import check_read, parse_hlo

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
VALID = sorted((ROOT / "fixtures").rglob("*.hlo")) + sorted((ROOT / "tests" / "hlo" / "samples").glob("*.hlo"))


def _edges(g: CallGraph) -> list:
    return [(u, v, d["site"]) for u, v, d in g.graph.edges(data=True)]


@pytest.mark.parametrize("path", VALID, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.name}")
def test_lazy_call_graph_and_fusion_bytes_equal_full_parse(path):
    text = path.read_text()
    full = parse_hlo(text, lenient=True)
    lazy = parse_hlo(text, lenient=True, lazy=True)
    gf, gl = CallGraph.build(full), CallGraph.build(lazy)
    assert _edges(gl) == _edges(gf)  # every call site, in the same order (the order fixes the walk's)
    assert gl.trip_counts == gf.trip_counts
    assert gl.calling == gf.calling
    fusions = [(c, i) for c, insts in gl.calling.items() for i in insts if i.opcode == "fusion"]
    for comp, inst in fusions:
        assert _fusion_bytes(inst, lazy) == _fusion_bytes(full[comp].by_name[inst.name], full), (comp, inst.name)


@pytest.mark.parametrize("path", VALID[::4] + VALID[-12:], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_users_and_line_heads_of_unparsed_computations_equal_full_parse(path):
    """`LazyComputation.users_of` and `line_head` (what the rules' dot walk and the step model read of a fusion
    body) give the full parse's users (order and operand index) and opcode, shape and first operand."""
    text = path.read_text()
    full = parse_hlo(text, lenient=True)
    lazy = parse_hlo(text, lenient=True, lazy=True)
    read = 0
    for comp in lazy.computations:
        want = full[comp.name]
        users = users_map(want)
        root = want.root
        assert comp.line_head() in (None, (root.opcode, root.shape, root.operand_names[0] if root.operands else None))
        for inst in want.instructions:
            assert comp.users_of(inst.name) == users.get(inst.name, ()), (comp.name, inst.name)
            head = comp.line_head(inst.name)
            assert head in (None, (inst.opcode, inst.shape, inst.operand_names[0] if inst.operands else None))
            read += head is not None
        assert comp.line_head("no such name") is None
    assert read


def test_call_instructions_of_an_unparsed_computation():
    """Call lines read by `select` (a reduce's `to_apply=`, a nested fusion's `calls=`) without the rest."""
    text = """HloModule m

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%inner (p: f32[8]) -> f32[8] {
  %p = f32[8] parameter(0)
  ROOT %n = f32[8] negate(%p)
}

%fused (x: f32[8]) -> f32[] {
  %x = f32[8] parameter(0)
  %f = f32[8] fusion(%x), kind=kLoop, calls=%inner
  %z = f32[] constant(0)
  ROOT %r = f32[] reduce(%f, %z), dimensions={0}, to_apply=%add
}

ENTRY %main (e: f32[8]) -> f32[] {
  %e = f32[8] parameter(0)
  ROOT %g = f32[] fusion(%e), kind=kLoop, calls=%fused
}
"""
    lazy = parse_hlo(text, lazy=True)
    fused = lazy.by_name["fused"]
    calls = fused.call_instructions()
    assert [(i.name, i.called_computations) for i in calls] == [("f", ("inner",)), ("r", ("add",))]
    assert not fused.is_parsed
    assert fused.line_head()[0] == "reduce" and str(fused.line_head()[1]) == "f32[]"
    assert fused.line_head()[2] == "f" and fused.line_head("f")[:1] == ("fusion",)
    assert calls == parse_hlo(text).by_name["fused"].select("fusion", "reduce")
    g = CallGraph.build(lazy)
    assert not fused.is_parsed and lazy.entry.is_parsed
    assert g.multiplicity("inner") == 1.0
    # no slice, update, link or nested... `fused` holds a nested fusion: its body is read; `inner` is plain
    assert _fusion_bytes(lazy.entry.root, lazy) == 8 * 4 + 4 and fused.is_parsed
    inner_call = fused.by_name["f"]
    lazy2 = parse_hlo(text, lazy=True)
    assert _fusion_bytes(inner_call, lazy2) == 8 * 4 + 8 * 4  # operand read whole, output written
    assert not lazy2.by_name["inner"].is_parsed


def test_check_read_reports_an_undefined_callee_in_an_unparsed_body():
    text = """HloModule m

%fused (x: f32[8]) -> f32[] {
  %x = f32[8] parameter(0)
  %z = f32[] constant(0)
  ROOT %r = f32[] reduce(%x, %z), dimensions={0}, to_apply=%nowhere
}

ENTRY %main (e: f32[8]) -> f32[] {
  %e = f32[8] parameter(0)
  ROOT %g = f32[] fusion(%e), kind=kLoop, calls=%fused
}
"""
    lazy = parse_hlo(text, lazy=True)
    g = CallGraph.build(lazy)
    with pytest.raises(HloSemanticError) as e:
        check_read(lazy, g.calling)
    assert e.value.line == 6 and "'nowhere'" in str(e.value)
    assert not lazy.by_name["fused"].is_parsed
