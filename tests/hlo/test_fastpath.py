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


def test_fast_builders_set_every_field():
    """`ir.new_instruction/new_operand/new_attribute` make what the constructors make, every field set
    (a field added to the IR without its builder fails here, not as a missing slot deep in an analysis)."""
    import dataclasses

    from analyzer.hlo import ir

    shape = ir.Shape("f32", (2,))
    cases = [
        (ir.new_attribute("dimensions", "{0}", 7), ir.Attribute("dimensions", "{0}", 7)),
        (ir.new_operand("x", shape), ir.Operand("x", shape)),
        (ir.new_instruction("a", "add", shape, ("x",), (shape,), ("k", "v", 3), True, 9, None, None),
         ir.Instruction("a", "add", shape, (ir.Operand("x", shape),), (ir.Attribute("k", "v", 3),), True, 9, None, None)),
        (ir.new_instruction("a", "add", shape, ("x",), (shape,), (ir.Attribute("k", "v", 3),), True, 9, None, None),
         ir.Instruction("a", "add", shape, (ir.Operand("x", shape),), (ir.Attribute("k", "v", 3),), True, 9, None, None)),
        (ir.new_instruction("p", "parameter", shape, (), (), (), False, 4, 0, None),
         ir.Instruction("p", "parameter", shape, (), (), False, 4, 0, None)),
    ]
    for fast, slow in cases:
        assert type(fast) is type(slow)
        names = [f.name for f in dataclasses.fields(slow)] if dataclasses.is_dataclass(slow) else slow.__slots__
        for name in names:
            assert getattr(fast, name) == getattr(slow, name), name
        assert fast == slow and hash(fast) == hash(slow)
    # Every slot of an Instruction set by both (a slot added without its builder raises AttributeError above).
    assert set(ir.Instruction.__slots__) == {"name", "opcode", "shape", "operand_names", "operand_shapes",
                                             "attribute_row", "is_root", "at", "parameter_number", "literal"}


_SELECTED = ("all-gather", "all-gather-start", "all-reduce", "all-reduce-start", "reduce-scatter", "all-to-all",
             "collective-permute", "collective-permute-start", "dot", "parameter", "constant")
VALID = sorted((ROOT / "fixtures").rglob("*.hlo")) + sorted((HERE / "samples").glob("*.hlo"))


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_lazy_select_equals_full_parse(path):
    """`LazyComputation.select` on an unparsed computation (only the matching lines and their operands'
    definitions read) gives the full parse's instructions of those opcodes, operand shapes and positions too."""
    text = path.read_text()
    full = parse_hlo(text)
    lazy = parse_hlo(text, lazy=True)
    for comp in lazy.computations:
        got = comp.select(*_SELECTED)
        want = full[comp.name].select(*_SELECTED)
        assert got == want, comp.name
        assert [(i.position, tuple(a.position for a in i.attributes)) for i in got] == \
            [(i.position, tuple(a.position for a in i.attributes)) for i in want]


@pytest.mark.parametrize("lazy", [False, True])
def test_int64_range_checked_lazily_too(lazy):
    """A lazy parse looks for 19-digit numbers per computation as it reads it, not in the whole text first:
    the error is the same, at the same place, once the computation is read."""
    text = ("HloModule m\nENTRY e {\n  p = f32[8] parameter(0)\n"
            "  ROOT r = f32[8] slice(p), slice={[0:99999999999999999999]}\n}\n")
    with pytest.raises(HloSyntaxError, match="out of range for an int64") as e:
        parse_hlo(text, lazy=lazy).entry.instructions
    assert (e.value.line, e.value.column) == (4, 39)


@pytest.mark.parametrize("text, spans", [
    ("  %a = (f32[], /*index=1*/f32[]) tuple(%x, %y)\n", False),
    ("  %a = f32[] add(%x, %y) /* a\n  b */\n", True),
    ("// generated with --only '*/*/*step' /* not an opener\n", False),
    ("/a*/**/* /\n", False),  # the second `/*` shares its `/` with the first comment's `*/`
    ("x /* a /* b */ c\n", False),
    ("x /* never closed", True),
])
def test_multiline_comment_scan(text, spans):
    """The scanner sends a text with a `/* ... */` over several lines to the grammar; a one-line comment, or a `/*`
    inside a `//` line, does not count."""
    from analyzer.hlo.parser import _has_multiline_comment

    assert _has_multiline_comment(text) is spans


def _long_tuple(n: int, missing: int | None = None) -> str:
    ops = ", ".join((f"/*index={i}*/" if i and i % 5 == 0 else "") + f"%p.{i if i != missing else 'x'}"
                    for i in range(n))
    params = "\n".join(f"  %p.{i} = f32[2]{{0}} parameter({i})" for i in range(n))
    shape = "(" + ", ".join(["f32[2]{0}"] * n) + ")"
    return f"HloModule m\n\nENTRY %e {{\n{params}\n  ROOT %t = {shape} tuple({ops})\n}}\n"


_STREAMED = {
    # an undefined operand, then a line the fast path leaves to the grammar, which finds a syntax error further on
    "undefined-then-syntax": "HloModule m\n\nENTRY %e {\n  %p = f32[2]{0} parameter(0)\n  %a = f32[2]{0} add(%p, %q)\n"
                             "  ROOT %t = (f32[2]{0}, f32[2]{0}) tuple(%a,\n    %p))\n}\n",
    # an undefined operand, then a line whose own check fails (an attribute add does not take)
    "undefined-then-line-check": "HloModule m\n\nENTRY %e {\n  %p = f32[2]{0} parameter(0)\n"
                                 "  %a = f32[2]{0} add(%p, %q)\n  ROOT %b = f32[2]{0} add(%a, %a), dimensions={0}\n}\n",
    "nested-operands": "HloModule m\n\nENTRY %e {\n  %p = f32[2]{0} parameter(0)\n"
                       "  ROOT %a = f32[2]{0} add(f32[2]{0} parameter(1), %p)\n}\n",
    "duplicate-name": "HloModule m\n\nENTRY %e {\n  %p = f32[2]{0} parameter(0)\n  %p = f32[2]{0} negate(%p)\n"
                      "  ROOT %r = f32[2]{0} copy(%p)\n}\n",
    "parameter-missing": "HloModule m\n\nENTRY %e {\n  %p = f32[2]{0} parameter(0)\n  %q = f32[2]{0} parameter(2)\n"
                         "  ROOT %r = f32[2]{0} add(%p, %q)\n}\n",
    "parameter-twice": "HloModule m\n\nENTRY %e {\n  %p = f32[2]{0} parameter(0)\n  %q = f32[2]{0} parameter(0)\n"
                       "  ROOT %r = f32[2]{0} add(%p, %q)\n}\n",
    "parameter-beyond": "HloModule m\n\nENTRY %e {\n  %p = f32[2]{0} parameter(0)\n  %q = f32[2]{0} parameter(7)\n"
                        "  ROOT %r = f32[2]{0} add(%p, %q)\n}\n",
    "control-predecessor-later": "HloModule m\n\nENTRY %e {\n  %p = f32[2]{0} parameter(0)\n"
                                 "  %a = f32[2]{0} negate(%p), control-predecessors={%b}\n"
                                 "  ROOT %b = f32[2]{0} copy(%a)\n}\n",
    "long-operand-list": _long_tuple(1200),
    "long-operand-list-undefined": _long_tuple(1200, missing=777),
    "signature-less-parameters": "HloModule m\n\nENTRY %e {\n  %q = f32[3]{0} parameter(1)\n"
                                 "  %p = f32[2]{0} parameter(0)\n  ROOT %t = (f32[2]{0}, f32[3]{0}) tuple(%p, %q)\n}\n",
}


@pytest.mark.parametrize("text", _STREAMED.values(), ids=_STREAMED.keys())
def test_streamed_lines_give_what_the_grammar_gives(text):
    """A computation's lines are built as they are read (`parser._parse_lines`); what that returns or reports, with
    its position, is what one pass of the grammar over the whole text gives (forced here by a comment that spans
    lines at the end, which the line scanner leaves to the grammar)."""
    def outcome(t):
        try:
            m = parse_hlo(t)
        except (HloSyntaxError, HloSemanticError) as e:
            return type(e).__name__, e.message, e.line, e.column
        return m, _positions(m), [c.parameter_shapes for c in m.computations]

    fast, slow = outcome(text), outcome(text + "/* a comment\nover two lines */\n")
    assert fast == slow


def _tails(*lines: str) -> str:
    body = "".join(f"  {line}\n" for line in lines)
    return f"HloModule m\n\nENTRY %e {{\n  %p = f32[2]{{0}} parameter(0)\n{body}  ROOT %r = f32[2]{{0}} copy(%p)\n}}\n"


_MD = 'metadata={op_name="a/b" stack_frame_id=1}'
_TAIL_LINES = {
    # the same tail (from `, metadata=` on) on lines whose heads differ in length: read once, placed on each
    "repeated": _tails(f"%a = f32[2]{{0}} negate(%p), {_MD}, backend_config={{\"k\":[1]}}",
                       f"%bb.1 = f32[2]{{0}} negate(%a), {_MD}, backend_config={{\"k\":[1]}}",
                       f"%c = f32[2]{{0}} add(%a, %bb.1), sharding={{replicated}}, {_MD}, backend_config={{\"k\":[1]}}"),
    "metadata-first": _tails(f"%a = f32[2]{{0}} negate(%p), {_MD}", f"%b = f32[2]{{0}} negate(%a), {_MD}"),
    # `, metadata=` inside a string: before the real one, and after it (the last one found is in the string)
    "in-a-string-before": _tails(
        f'%a = f32[2]{{0}} custom-call(%p), custom_call_target="x, metadata=y", {_MD}',
        f'%b = f32[2]{{0}} custom-call(%a), custom_call_target="x, metadata=y", {_MD}'),
    "in-a-string-after": _tails(f'%a = f32[2]{{0}} negate(%p), {_MD}, backend_config="q, metadata={{z}}"',
                                f'%b = f32[2]{{0}} negate(%a), {_MD}, backend_config="q, metadata={{z}}"'),
    "device-ids-in-tail": _tails(f"%a = f32[8]{{0}} all-gather(%p), channel_id=1, dimensions={{0}}, {_MD}, "
                                 "replica_groups=mesh['x'=2,'y'=2], device_ids=(0,2,1,3) {'y'}"),
    # a tail read on one opcode, then on one that does not take an attribute of it
    "tail-not-allowed-later": _tails(f"%a = f32[2,2]{{1,0}} broadcast(%p), {_MD}, dimensions={{0}}",
                                     f"%b = f32[2]{{0}} negate(%p), {_MD}, dimensions={{0}}"),
    # a metadata field XLA does not take, in a tail seen before on a valid line
    "bad-field-later": _tails(f"%a = f32[2]{{0}} negate(%p), {_MD}", f"%b = f32[2]{{0}} negate(%a), {_MD[:-1]} x=1}}"),
    # 19-digit numbers (XLA's int64 range) after a line of the same signature was vetted: in a decoded value, in
    # one not decoded, in the tail; and one in range, twice
    "long-int-decoded": _tails("%a = f32[1]{0} slice(%p), slice={[0:1]}",
                               "%b = f32[1]{0} slice(%p), slice={[0:99999999999999999999]}"),
    "long-int-not-decoded": _tails("%a = f32[2]{0} custom-call(%p), custom_call_target=\"x\", schedule=S1",
                                   "%b = f32[2]{0} custom-call(%p), custom_call_target=\"x\", "
                                   "schedule=S99999999999999999999"),
    "long-int-in-tail": _tails(f"%a = f32[2]{{0}} negate(%p), {_MD}",
                               '%b = f32[2]{0} negate(%a), metadata={op_name="a/b" stack_frame_id=99999999999999999999}'),
    "long-int-in-range": _tails('%a = f32[2]{0} negate(%p), metadata={op_name="a/b" stack_frame_id=1000000000000000000}',
                                '%b = f32[2]{0} negate(%a), metadata={op_name="a/b" stack_frame_id=1000000000000000000}'),
    # a line ending in spaces (its attributes read up to them), and attributes longer than the texts kept read
    "trailing-spaces": _tails(f"%a = f32[2]{{0}} negate(%p), {_MD}   ", f"%b = f32[2]{{0}} negate(%a), {_MD}\t"),
    "long-attributes": _tails(f'%a = f32[2]{{0}} negate(%p), {_MD[:-1]} source_file="{"x" * 300}"}}',
                              f'%b = f32[2]{{0}} negate(%a), {_MD[:-1]} source_file="{"x" * 300}"}}'),
    "escapes-in-tail": _tails('%a = f32[2]{0} negate(%p), metadata={op_name="a\\\"b"}',
                              '%b = f32[2]{0} negate(%a), metadata={op_name="a\\qb"}'),
}


@pytest.mark.parametrize("text", _TAIL_LINES.values(), ids=_TAIL_LINES.keys())
def test_line_tails_read_once_give_what_the_grammar_gives(text):
    """A line's tail from `, metadata=` on is read once a computation (`fastpath._read_tail`) and placed on each
    line that ends with it; and each line is vetted as it is read (`verify_instructions` then checks only the
    others): the computation, its positions, or the error and its place, are what the grammar gives."""
    def outcome(t, **kw):
        try:
            m = parse_hlo(t, **kw)
            comps = [(c.name, c.instructions, c.parameter_shapes) for c in m.computations]
        except (HloSyntaxError, HloSemanticError) as e:
            return type(e).__name__, e.message, e.line, e.column
        return comps, _positions(m), m.notes

    slow = outcome(text + "/* a comment\nover two lines */\n")
    assert outcome(text) == slow and outcome(text, lazy=True) == slow


_TAIL_OPCODES = ("parameter", "negate", "add", "copy", "custom-call", "all-gather", "broadcast", "slice")


@pytest.mark.parametrize("text", _TAIL_LINES.values(), ids=_TAIL_LINES.keys())
def test_rows_read_alone_give_what_the_grammar_gives(text):
    """A lazy `select` reads each line alone: a whole attribute text once a parse (`fastpath._tiled_attributes`,
    placed at each line that repeats it), and what `verifier.vetted` passes is not verified again. The instructions
    and their positions, or the error and its place, are what the grammar gives, and the same on the module with its
    lines moved (each instruction a line lower and two columns right)."""
    def outcome(t, lazy):
        try:
            m = parse_hlo(t, lazy=lazy)
            found = [(c.name, c.select(*_TAIL_OPCODES)) for c in m.computations]
        except (HloSyntaxError, HloSemanticError) as e:
            return type(e).__name__, e.message, e.line, e.column
        return found, [(i.name, i.position, tuple(a.position for a in i.attributes)) for _, f in found for i in f]

    moved = text.replace("\n  %", "\n\n    %")  # (each instruction line a line lower and two columns right)
    for t in (text, moved):
        slow = outcome(t + "/* a comment\nover two lines */\n", lazy=False)
        assert outcome(t, lazy=True) == slow


def test_frames_read_alike_in_any_spelling():
    """Stack-frame rows as XLA prints them (read by one match, frames set through their slots) and the same rows
    spelt otherwise (fields reordered, spaced: the general reading) give the Frames the constructor gives."""
    from analyzer.hlo.ir import Frame

    def module(locs, frames):
        return ('HloModule m\n\nFileNames\n1 "a.py"\n\nFunctionNames\n1 "f"\n2 "g"\n\nFileLocations\n' + locs
                + "\n\nStackFrames\n" + frames + "\n\nENTRY %e {\n  ROOT %p = f32[] parameter(0)\n}\n")

    canonical = module("1 {file_name_id=1 function_name_id=1 line=5 end_line=6 column=2 end_column=9}\n"
                       "2 {file_name_id=1 function_name_id=2 line=7 end_line=7 column=1 end_column=3}",
                       "1 {file_location_id=1 parent_frame_id=1}\n2 {file_location_id=2 parent_frame_id=2}")
    other = module("1 { column=2 end_column=9 file_name_id=1 function_name_id=1 line=5 end_line=6 }\n"
                   "2 {file_name_id=1  function_name_id=2 line=7 end_line=7 column=1 end_column=3}",
                   "1 {parent_frame_id=1 file_location_id=1}\n2 { file_location_id=2 parent_frame_id=2 }")
    want = {1: Frame(1, "a.py", "f", 5, 2, 6, 9, None), 2: Frame(2, "a.py", "g", 7, 1, 7, 3, 1)}
    for text in (canonical, other):
        got = parse_hlo(text).frames
        assert got == want
        assert [tuple(getattr(f, k) for k in Frame.__slots__) for f in got.values()] == \
            [tuple(getattr(f, k) for k in Frame.__slots__) for f in want.values()]


def test_select_checks_int64_ranges_of_what_it_reads():
    """A lazy `select` range-checks the integers of the instructions it returns (it looks for 19-digit runs in
    their attributes), with the position; a long number elsewhere in the fusion is the full parse's business."""
    fusion = ('HloModule m\n\n%f (a: f32[2,2], b: f32[2,2]) -> f32[2,2] {\n  %a = f32[2,2]{1,0} parameter(0)\n'
              '  %b = f32[2,2]{1,0} parameter(1), frontend_attributes={n="OTHER"}\n'
              '  ROOT %d = f32[2,2]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={DOT}\n}\n\n'
              'ENTRY %e (p: f32[2,2]) -> f32[2,2] {\n  %p = f32[2,2]{1,0} parameter(0)\n'
              '  ROOT %r = f32[2,2]{1,0} fusion(%p, %p), kind=kOutput, calls=%f\n}\n')
    long = "99999999999999999999"
    lazy = parse_hlo(fusion.replace("OTHER", "1").replace("DOT", long), lazy=True)
    with pytest.raises(HloSyntaxError, match="out of range for an int64") as e:
        lazy["f"].select("dot")
    assert (e.value.line, e.value.column) == (6, 88)  # the number's first digit, as the full parse says
    with pytest.raises(HloSyntaxError, match="out of range for an int64") as full:
        parse_hlo(fusion.replace("OTHER", "1").replace("DOT", long))
    assert (full.value.line, full.value.column) == (6, 88)
    elsewhere = parse_hlo(fusion.replace("OTHER", long).replace("DOT", "0"), lazy=True)
    assert [i.name for i in elsewhere["f"].select("dot")] == ["d"]


def test_flat_array_constants_read_as_the_grammar_reads_them():
    """`constant({0, 1, 2})` lines (XLA's spelling of a flat array) are read by the fast path as the grammar reads
    them, positions of every element included, or rejected with the grammar's error at its place."""
    import random

    from analyzer.hlo.parser import _line_reader, _parse_interactive

    def norm(x):
        if isinstance(x, str) and hasattr(x, "line"):
            return (str(x), x.line, x.column)
        return tuple(norm(y) for y in x) if isinstance(x, (tuple, list)) else x

    def outcome(fn):
        try:
            return ("ok", norm(fn()))
        except (HloSyntaxError, HloSemanticError) as e:
            return ("error", e.message, e.line, e.column)

    rng = random.Random(13)
    shapes = ["u32[4]{0}", "s8[3]{0}", "pred[2]{0}", "f32[2]{0}", "u8[2]{0}", "s32[0]{0}", "f32[2,2]{1,0}",
              "u32[1]{0:T(128)}"]
    values = ["0", "1", "-1", "300", "true", "inf", "-inf", "nan", "1.5", "1e5", "99999999999", ".5", "2."]
    read = 0
    for _ in range(300):
        items = ", ".join(rng.choice(values) for _ in range(rng.randint(0, 4)))
        line = f"  %c = {rng.choice(shapes)} constant({{{items}}})" + rng.choice(["", ', metadata={op_name="x"}'])
        fast = outcome(lambda: _line_reader().instruction("\n" + line, 1, len(line) + 1, 7))
        if fast != ("ok", None):
            read += 1
            assert fast == outcome(lambda: _parse_interactive(line, "instruction", 7)), line
    assert read > 250


def _outcome(fn):
    """What `fn()` gives: ("ok", value) or ("error", type, message, line, column)."""
    try:
        return ("ok", fn())
    except (HloSyntaxError, HloSemanticError) as e:
        return ("error", type(e), e.message, e.line, e.column)


def _fields(comp):
    """Every field of the computation's instructions, their attributes and operands (`LineReader.build` builds
    these objects through `ir.new_*`, slot by slot: a field it leaves unset fails here)."""
    import dataclasses

    def every(obj):  # (each field read, so an unset one raises; an Instruction's fields are its slots)
        names = [f.name for f in dataclasses.fields(obj)] if dataclasses.is_dataclass(obj) else obj.__slots__
        return tuple(getattr(obj, name) for name in names)

    return [(comp.name, comp.position, comp.result_shape, comp.parameter_shapes)] + [
        every(i) + (tuple(map(every, i.attributes)), tuple(map(every, i.operands))) for i in comp.instructions]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_one_pass_build_equals_two_steps(path):
    """`LineReader.build` (lines read and built in one pass) gives what the two steps give (every line read,
    then `build_computation`), every field and position, or declines; when it raises, the two steps raise too (and
    the parser reports theirs). On every computation of every file the tests know, mutants included."""
    from analyzer.hlo.fastpath import parse_head_fast
    from analyzer.hlo.parser import _line_reader, _parse_lines_listed, _split
    from analyzer.hlo.transformer import callee_table

    text = path.read_text()
    split = _split(text)
    if split is None:
        return
    for start, end, line, *_ in split[1]:
        first, last = text.find("\n", start, end), text.rfind("\n", start, end)
        head = parse_head_fast(text[start:first], line) if first >= 0 else None
        if head is None or first == last or text[last + 1:end].strip() != "}":
            continue
        with callee_table({}):
            one = _outcome(lambda: _line_reader().build(text, first + 1, last, line + 1, head))
        if one == ("ok", None):
            continue  # declined: the two steps read it
        with callee_table({}):
            two = _outcome(lambda: _parse_lines_listed(_line_reader(), text, first + 1, last, line + 1, head))
        if one[0] == "ok":
            assert two[0] == "ok" and one[1] == two[1] and _fields(one[1]) == _fields(two[1])
        else:
            assert two[0] == "error"


_COMMENTED = ["/*%x*/ %b, %a", "/*%x*/%b, %a", "%b, /*%a*/%a", "/*index=0*/%b, /*index=1*/%a", "%b /*c*/, %a",
              "/* x */ %b, %a", "/*a,b*/%b, %a"]


@pytest.mark.parametrize("ops", _COMMENTED)
def test_comments_in_operand_lists_lazy_equals_full(ops):
    """A `/*...*/` comment in an operand list, before or after a name, with or without a space (XLA prints
    `/*index=5*/%x`; its lexer skips any comment): the full parse, the grammar alone and every lazy answer
    (`line_head`, `users_of`, `select`) read the operands `b, a`, never a name inside the comment."""
    from analyzer.analysis.dataflow import users_map

    text = ("HloModule m\nENTRY %e (a: f32[4], b: f32[4], x: f32[4]) -> f32[4] {\n  %a = f32[4] parameter(0)\n"
            "  %b = f32[4] parameter(1)\n  %x = f32[4] parameter(2)\n"
            f"  %c = f32[4] add({ops})\n  ROOT %d = f32[4] multiply({ops})\n}}\n")
    full = parse_hlo(text)
    assert [i.operand_names for i in full.entry.instructions[3:]] == [("b", "a")] * 2
    assert full == _grammar_only(text) and _positions(full) == _positions(_grammar_only(text))
    users = users_map(full.entry)
    printed = "*/ " not in ops and " /*" not in ops  # XLA's spelling: the fast path reads the lines, no parse
    for name in ("a", "b", "x", "c", "d"):
        lazy = parse_hlo(text, lazy=True).entry
        assert lazy.users_of(name) == users.get(name, ()), name
        assert not (printed and lazy.is_parsed)
    for name in (None, "c", "d"):
        lazy = parse_hlo(text, lazy=True).entry
        want = full.entry.root if name is None else full.entry[name]
        assert lazy.line_head(name) == (want.opcode, want.shape, "b")
        assert not (printed and lazy.is_parsed)  # (its row only; another spelling is not a row: the parse reads it)
    assert parse_hlo(text, lazy=True).entry.select("add", "multiply") == full.entry.select("add", "multiply")
