"""`analyze_hlo` reads a lazily parsed module: the call graph and each fusion's bytes from the lazy module
equal those of the full parse on every fixture and sample, with fusion bodies left unparsed where they can be."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.analysis.dataflow import users_map
from analyzer.analysis.graph import CallGraph
from analyzer.analysis.costs import _fusion_bytes
from analyzer.errors import AnalyzerError, HloSemanticError
from analyzer.hlo.parser import LazyComputation, parse_hlo

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
        numbers = sorted(i.parameter_number for i in want.instructions if i.opcode == "parameter")
        for n in numbers:  # (the dot walk into a fusion asks its parameter by number: no line read)
            assert comp.parameter_name(n) == want.parameter_name(n) == next(
                i.name for i in want.instructions if i.parameter_number == n)
        assert comp.parameter_name(len(numbers)) is None
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


def test_a_lazy_parse_reports_an_undefined_callee_in_an_unparsed_body():
    """The module-level checks of a full parse run in the lazy parse itself (no caller has to ask for them), on
    the call lines of the bodies it has not parsed."""
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
    with pytest.raises(HloSemanticError) as e:
        parse_hlo(text, lazy=True)
    assert e.value.line == 6 and "'nowhere'" in str(e.value)
    add = "%add (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n" \
          "  ROOT %s = f32[] add(%a, %b)\n}\n\n"
    lazy = parse_hlo(text.replace("%fused (", add + "%fused (").replace("%nowhere", "%add"), lazy=True)
    assert not lazy.by_name["fused"].is_parsed  # (its call line read, not the body)


CORPUS = [p for p in sorted((ROOT / "tests" / "hlo" / "corpus").glob("*.hlo")) if ".invalid" not in p.name]


def _full_or_none(text: str):
    try:
        return parse_hlo(text, lenient=True)
    except AnalyzerError:
        return None


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_index_answers_equal_full_parse_on_xla_forms(path):
    """Every question `analyze_hlo` asks of an unparsed computation (`written`, `select`, `call_instructions`,
    `line_head`, `users_of`) gives the full parse's answer on XLA's own test modules, those the index reads and
    those with a line it does not (shape-less instructions, buffer shapes, deep tuples: those parse)."""
    text = path.read_text()
    full = _full_or_none(text)
    if full is None or not isinstance(parse_hlo(text, lenient=True, lazy=True).entry, LazyComputation):
        pytest.skip("rejected by the full parse, or not laid out for the lazy parse (the grammar reads it whole)")
    for comp in full.computations:
        opcodes = {i.opcode for i in comp.instructions}
        fresh = lambda: parse_hlo(text, lenient=True, lazy=True)[comp.name]  # noqa: E731 - one question each
        assert fresh().written == opcodes
        assert fresh().select(*sorted(opcodes)[::2]) == comp.select(*sorted(opcodes)[::2])
        asked = fresh()  # the same answer again when asked with opcodes it does not write (one read, kept)
        assert asked.select(*sorted(opcodes)[::2]) == asked.select(*sorted(opcodes)[::2], "no-such-op") == comp.select(
            *sorted(opcodes)[::2])
        assert all(fresh().parameter_name(i.parameter_number) == i.name for i in comp.instructions
                   if i.opcode == "parameter")
        assert fresh().call_instructions() == tuple(i for i in comp.instructions if i.called_computations)
        users = users_map(comp)
        for inst in comp.instructions:
            assert fresh().users_of(inst.name) == users.get(inst.name, ())
            head = fresh().line_head(inst.name)
            assert head in (None, (inst.opcode, inst.shape, inst.operand_names[0] if inst.operands else None))


@pytest.mark.parametrize("path", VALID[::3] + CORPUS[::5], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_module_holding_equals_each_computations_mentions(path):
    """`HloModule.holding` (which computations write which opcodes: the analyses ask it for each fusion body)
    names the computations whose `mentions` is true, for the full parse and the lazy one alike, and leaves the
    lazy module's bodies unparsed."""
    text = path.read_text()
    full = _full_or_none(text)
    if full is None:
        pytest.skip("rejected by the full parse")
    lazy = parse_hlo(text, lenient=True, lazy=True)
    parsed_before = {c.name for c in lazy.computations if c.is_parsed}
    asked = [("dot", "convolution"), ("all-gather", "all-reduce", "fusion"), ("parameter",), ("no-such-op",), ()]
    opcodes = sorted({i.opcode for c in full.computations for i in c.instructions})
    asked += [tuple(opcodes[::2]), tuple(opcodes[1::3])]
    for ops in asked:
        want = frozenset(c.name for c in full.computations if c.mentions(*ops))
        assert full.holding(*ops) == want == lazy.holding(*ops), ops
        assert full.holding(*ops) is full.holding(*ops)  # (kept)
    assert all(c.name in full.holding(*c.written) for c in full.computations if c.instructions)
    index_read = all(isinstance(c, LazyComputation) and c._index is not None for c in lazy.computations)
    if index_read:  # every body in XLA's form: none parsed to answer
        assert {c.name for c in lazy.computations if c.is_parsed} == parsed_before


def test_index_of_a_body_with_a_line_out_of_xla_form_parses_it():
    """A body the index cannot read line by line (here an instruction split over two lines) parses on the first
    question; one in XLA's form is answered from its lines: `written` is the opcodes (not ` dot(` in a
    metadata string), a call attribute after a comment is found, a name defined twice is left to the parse."""
    text = """HloModule m

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%split (x: f32[8]) -> f32[8] {
  %x = f32[8] parameter(0)
  ROOT %n = f32[8]
    negate(%x)
}

%meta (x: f32[8]) -> f32[] {
  %x = f32[8] parameter(0)
  %z = f32[] constant(0), metadata={op_name="jit(f)/ dot(x)"}
  ROOT %r = f32[] reduce(%x, %z), dimensions={0}, to_apply=%add
}

%commented (x: f32[8]) -> f32[] {
  %x = f32[8] parameter(0)
  %z = f32[] constant(0)
  ROOT %r = f32[] reduce(%x, %z), dimensions={0}, /*to the adder*/ to_apply=%add
}

ENTRY %main (e: f32[8]) -> f32[] {
  %e = f32[8] parameter(0)
  %f = f32[8] fusion(%e), kind=kLoop, calls=%split
  %g = f32[] fusion(%f), kind=kLoop, calls=%meta
  ROOT %h = f32[] fusion(%f), kind=kLoop, calls=%commented
}
"""
    full = parse_hlo(text)
    lazy = parse_hlo(text, lazy=True)
    split, meta = lazy.by_name["split"], lazy.by_name["meta"]
    assert split.line_head() == ("negate", full["split"].root.shape, "x") and split.is_parsed
    assert meta.written == {"parameter", "constant", "reduce"} and not meta.mentions("dot")
    assert meta.users_of("x") == ((full["meta"].by_name["r"], 0),) and not meta.is_parsed
    assert [i.name for i in meta.call_instructions()] == ["r"] and not meta.is_parsed
    # (the fast path leaves a line with a comment to the grammar: the body parses)
    assert [i.name for i in lazy.by_name["commented"].call_instructions()] == ["r"]
    # (a name defined twice: the lazy parse's own checks read the call line, which reads `%x`, so the body parses)
    with pytest.raises(HloSemanticError, match="'x' is already defined"):
        parse_hlo(text.replace("%z = f32[] constant(0)", "%x = f32[] constant(0)"), lazy=True)
