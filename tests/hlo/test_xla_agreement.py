"""The forms where the differential fuzz (tests/hlo/differential.py) found `parse_hlo` and XLA's parser disagreeing
(issue 13): layouts, custom-call `literal=`, `domain=`, aliasing, shardings and replica groups, `dim_labels`,
dense literals, a computation's `}` on an instruction's line, send/recv channels, reshape counts, string escapes,
comments in operand lists, `origin=`, `input_output_alias` against the entry's root, `name:` names, a computation
on the `HloModule` line.

Each case is XLA's own verdict (jaxlib 0.10.2, `xla_client.hlo.hlo_module_from_text`, which runs the parser and
no HLO verifier), written beside it; a rejection must come with the line (and a column) of the bad text.
"""

from __future__ import annotations

import pytest

from analyzer.errors import HloSemanticError, HloSyntaxError
from analyzer.hlo.parser import parse_hlo


def _inst(line: str, params: str = "  p = f32[4] parameter(0)\n") -> str:
    """A module whose entry holds `params` then `line` (on line 4 when one parameter line comes first)."""
    return f"HloModule m\nENTRY e {{\n{params}  {line}\n}}\n"


def _cc(attr: str) -> str:
    return _inst(f'ROOT c = f32[4] custom-call(p), custom_call_target="x", {attr}')


def _sh(sharding: str) -> str:
    return _inst(f"ROOT q = f32[4,4] parameter(1), sharding={sharding}", "  p = f32[4] parameter(0)\n")


_AR = ("HloModule m\nadd {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT z = f32[] add(x, y)\n}\n"
       "ENTRY e {\n  p = f32[4] parameter(0)\n  ROOT a = f32[4] all-reduce(p), replica_groups=%s, to_apply=add\n}\n")


_ALIASED = ("HloModule m, %s\nENTRY e {\n  p = (f32[], f32[]) parameter(0)\n  a = f32[] get-tuple-element(p), index=0\n"
            "  b = f32[] get-tuple-element(p), index=1\n%s}\n")
_ALIASED_ROOT = "  ROOT t = (f32[], f32[]) tuple(a, b)\n"


def _conv(labels: str) -> str:
    return _inst(f"ROOT c = f32[1,4,4,1] convolution(a, b), window={{size=1x1}}, dim_labels={labels}",
                 "  a = f32[1,4,4,1] parameter(0)\n  b = f32[1,1,1,1] parameter(1)\n")


def _recv(recv_channel: str, done_channel: str) -> str:
    return ("HloModule m\nENTRY e {\n  t = token[] after-all()\n"
            f"  r = (f32[], u32[], token[]) recv(t){recv_channel}\n"
            f"  ROOT d = (f32[], token[]) recv-done(r){done_channel}\n}}\n")


CASES = [
    # ------------------------------------------------ layouts: XLA's item order, an item's error recovers
    ("layout_items_in_order", _inst("ROOT c = f32[4]{0:T(2)L(4)E(32)S(1)SC(0:1,2)M(4)} negate(p)"), None),
    ("layout_memory_space_unclosed", _inst("ROOT c = f32[4]{0:S(2} negate(p)"), None),        # XLA: accepts
    ("layout_negative_memory_space", _inst("ROOT c = f32[4]{0:S(-1)} negate(p)"), None),      # XLA: accepts
    ("layout_index_type_signed", _inst("ROOT c = f32[4]{0:#(s8)} negate(p)"), None),         # XLA: accepts
    ("layout_items_out_of_order", _inst("ROOT c = f32[4]{0:S(1)T(2)} negate(p)"), 4),         # expects layout to end
    ("layout_item_twice", _inst("ROOT c = f32[4]{0:S(1)S(2)} negate(p)"), 4),
    ("layout_stray_colon", _inst("ROOT c = f32[4]{0:T(128)S(6):} negate(p)"), 4),
    ("layout_tile_without_paren", _inst("ROOT c = f32[4]{0:T(8)2,1)} negate(p)"), 4),
    ("layout_split_config_name", _inst("ROOT c = f32[4]{0:SC(0:10)(1:%4,5)} negate(p)"), 4),
    ("layout_split_config_no_colon", _inst("ROOT c = f32[4]{0:SC(0)} negate(p)"), 4),
    ("layout_bad_level_type", _inst("ROOT c = f32[4]{0:D(X)} negate(p)"), 4),
    ("layout_physical_shape", _inst("ROOT c = f32[4]{0:P(f32[4])} negate(p)"), 4),
    ("layout_unknown_item", _inst("ROOT c = f32[4]{0:X} negate(p)"), 4),
    ("tuple_layout_unclosed", _inst("ROOT t = (f32[4]{0}, u32[]{:S(2), u32[]{:S(2)}) tuple(p, p, p)"), 4),
    # ------------------------------------------------ custom-call literal=
    ("literal_tuple", _cc("literal=( s32[2]{0} {1 2}, pred[] 1 )"), None),
    ("literal_scalar", _cc("literal=f32[] 0.1"), None),
    ("literal_without_shape", _cc("literal={1,2}"), 4),                 # XLA: expected primitive type
    ("literal_bad_type", _cc("literal=prd[2]{0} {1, 0}"), 4),
    ("literal_count", _cc("literal=s32[3]{0} {1, 2}"), 4),               # XLA: expects 3 elements
    ("literal_value_kind", _cc("literal=s32[2]{0} {1, 2.5}"), 4),         # XLA: expects integer
    ("literal_layout_not_permutation", _cc("literal=s32[2]{1} {1, 2}"), 4),   # XLA: aborts
    ("literal_bracket", _cc("literal=s32[4]{0} {4, ]128, 3, 1}"), 4),
    ("literal_token", _cc("literal=token[] 1"), 4),                        # XLA: aborts
    # ------------------------------------------------ outfeed_shape=, domain=, output_to_operand_aliasing=
    ("outfeed_shape_layout", _inst("ROOT o = token[] outfeed(p, t), outfeed_shape=(f32[4]{100}, pred[])",
                                   "  p = f32[4] parameter(0)\n  t = token[] after-all()\n"), 5),
    ("outfeed_shape_type", _inst("ROOT o = token[] outfeed(p, t), outfeed_shape=(f32[4]{0}, prd[])",
                                 "  p = f32[4] parameter(0)\n  t = token[] after-all()\n"), 5),
    ("domain", _inst('ROOT d = f32[4] domain(p), domain={kind="sharding", entry={maximal device=0}, '
                     'exit={maximal device=1}}'), None),
    ("domain_bad_sharding", _inst('ROOT d = f32[4] domain(p), domain={kind="sharding", entry={maxial device=0}, '
                                  'exit={maximal device=1}}'), 4),
    ("domain_kind", _inst('ROOT d = f32[4] domain(p), domain={kind="other", entry={maximal device=0}, '
                          'exit={maximal device=1}}'), 4),
    ("aliasing_trailing_comma", _cc("output_to_operand_aliasing={{0}: (0, {}),}"), None),
    ("aliasing_no_parens", _cc("output_to_operand_aliasing={{0}: 10, {})}"), 4),   # XLA: Expected format
    ("aliasing_kind", _cc("output_to_operand_aliasing={{0}: (0, {}, may-alias)}"), 4),
    # ------------------------------------------------ shardings: XLA's parser leaves these to its verifier
    ("sharding_device_twice", _sh("{devices=[2,2]0,2,2,3 last_tile_dim_replicate}"), None),
    ("sharding_device_count", _sh("{devices=[2,2]0,1,2}"), None),
    ("sharding_iota_size", _sh("{devices=[2,8]<=[4,2]T(1,0)}"), None),
    ("sharding_two_kinds", _sh("{replicated manual}"), None),
    ("sharding_iota_needs_transpose", _sh("{devices=[2,2]<=[2,2]}"), 4),      # XLA: expected 'T('
    ("sharding_iota_no_transpose", _sh("{devices=[2,2]<=[4]T(0)}"), 4),       # XLA: unexpected token
    ("sharding_one_device", _sh("{devices=[1]0}"), 4),
    ("sharding_devices_on_replicated", _sh("{devices=[2]0,1 replicated}"), 4),
    ("sharding_both_subgroup_forms", _sh("{devices=[2,2]<=[4] last_tile_dim_replicate last_tile_dims={manual}}"),
     4),                                                                        # XLA: aborts
    ("sharding_replicated_dim_misfit", _sh("{devices=[2,1,11]<=[4,2]T(1,0) last_tile_dim_replicate}"), 4),  # aborts
    ("replica_groups_iota_size", _AR % "[10,10]<=[6,5]T(1,0)", None),
    ("replica_groups_iota_needs_transpose", _AR % "[2,2]<=[2,2]", 9),
    # ------------------------------------------------ dim_labels: b/f/i/o may be missing
    ("dim_labels_no_batch", _conv("01f_01io->b01f"), None),
    ("dim_labels_no_output_feature", _conv("b01f_01o->b01f"), None),
    ("dim_labels_label_bound", _conv("b03f_01io->b01f"), None),                # '3' < the part's length
    ("dim_labels_repeated", _conv("bb1f_01io->b01f"), 5),
    ("dim_labels_spatial_count", _conv("012f_01io->b01f"), 5),
    # ------------------------------------------------ dense literals: commas are optional
    ("literal_commas_optional", _inst("ROOT c = s32[2,2] constant({{1 2}{3,,4,}})"), None),
    ("literal_leading_comma", _inst("ROOT c = f8e4m3b11fnuz[2] constant({,-nan, 7})"), None),
    ("complex_needs_comma", _inst("ROOT c = c64[] constant((1 2))"), 4),
    # ------------------------------------------------ send/recv channels, reshape, scan, escapes, metadata
    ("recv_done_same_channel", _recv(", channel_id=15", ", channel_id=15"), None),
    ("recv_done_other_channel", _recv(", channel_id=15", ", channel_id=16"), 5),
    ("recv_done_missing_channel", _recv(", channel_id=15", ""), 5),
    ("reshape_count", _inst("ROOT r = f32[5] reshape(p)"), 4),                      # XLA: aborts
    ("reshape_unbounded_operand", _inst("ROOT r = f32[7] reshape(p)", "  p = f32[2,?] parameter(0)\n"), None),
    ("string_escape_unknown", _cc('frontend_attributes={a="x\\%y"}'), 4),           # XLA: expects string
    ("string_escape_known", _cc('frontend_attributes={a="x\\u0041\\x4\\0\\?"}'), None),
    ("frontend_attributes_braced", _inst('ROOT c = f32[4] negate(p), frontend_attributes={a={x y},b.c="1"}'), None),
    ("frontend_attributes_key", _inst('ROOT c = f32[4] negate(p), frontend_attributes={a%b{x y}}'), 4),  # XLA: expects
    ("frontend_attributes_spaced_key", _inst('ROOT c = f32[4] negate(p), frontend_attributes={a = "1"}'), 4),
    ("frontend_attributes_unquoted", _inst('ROOT c = f32[4] negate(p), frontend_attributes={a=1}'), 4),
    ("metadata_integer", _inst('ROOT c = f32[4] negate(p), metadata={op_name="a" stack_frame_id=column}'), 4),
    # ------------------------------------------------ ASCII outside strings and comments (XLA's lexer)
    ("superscript_digit", _inst("ROOT c = f32[4] negate(p), sharding={maximal device=\u00b2}"), 4),
    ("arabic_digit_in_dims", _inst("ROOT c = f32[\u0664] negate(p)"), 4),          # int() would read it as 4
    ("letter_in_name", _inst("ROOT \u00e9 = f32[4] negate(p)"), 4),
    ("non_ascii_in_string_and_comment", _inst('ROOT c = f32[4] negate(p), metadata={op_name="\u00e9"} /* \u00fc */'),
     None),
    # ------------------------------------------------ comments in operand lists (the lexer skips them)
    ("comment_before_operand_names_none", _inst("ROOT c = f32[4] add(/*%q*/%p, /*%q*/%p)"), None),   # XLA: accepts
    ("comment_operand_count", _inst("ROOT c = f32[4] add(/*%p*/%p)"), 4),          # XLA: expects 2 operands
    # ------------------------------------------------ origin= (an original value): XLA's reader, token by token
    ("origin_tuple_tree", _inst('ROOT c = f32[4] negate(p), origin={({"a"}, {"b" {1,}})}'), None),
    ("origin_synthetic_call", _inst("ROOT c = f32[4] negate(p), origin={ [synthetic_call] }"), None),
    ("origin_any_order", _inst('ROOT c = f32[4] negate(p), origin={({"a"}(}'), None),       # XLA: accepts
    ("origin_stray_close_alone", _inst('ROOT c = f32[4] negate(p), origin={({"a"}))}'), None),  # XLA: accepts
    ("origin_array_unclosed", _inst('ROOT c = f32[4] negate(p), origin={(({"a"}, {"b"}), {"c"(})}'), 4),  # '}' at end
    ("origin_not_a_tree", _inst('ROOT c = f32[4] negate(p), origin={"a"}'), 4),   # XLA: expects [synthetic] or tree
    ("origin_synthetic_misspelled", _inst("ROOT c = f32[4] negate(p), origin={[synthetic]}"), 4),
    ("origin_synthetic_then_more", _inst('ROOT c = f32[4] negate(p), origin={[synthetic_call]{"a"}}'), 4),
    ("origin_name_unquoted", _inst("ROOT c = f32[4] negate(p), origin={{a}}"), 4),
    ("origin_shape_index_integer", _inst('ROOT c = f32[4] negate(p), origin={{"a" {1.0}}}'), 4),  # expects integer
    ("origin_shape_index_two", _inst('ROOT c = f32[4] negate(p), origin={{"a" {1}{2}}}'), 4),
    ("origin_comma_outside_tuple", _inst('ROOT c = f32[4] negate(p), origin={{"a"}, {"b"}}'), 4),   # XLA: aborts
    ("origin_array_after_stray_close", _inst('ROOT c = f32[4] negate(p), origin={){"a"}}'), 4),  # XLA: bad_alloc
    # ------------------------------------------------ input_output_alias / buffer_donor: on the entry's root shape
    ("alias_output_index", _ALIASED % ("input_output_alias={ {1}: (0, {1}, may-alias) }", _ALIASED_ROOT), None),
    ("alias_output_index_beyond_root", _ALIASED % ("input_output_alias={ {2}: (0, {0}) }", _ALIASED_ROOT), 1),
    ("alias_output_index_into_an_array", _ALIASED % ("input_output_alias={ {0,0}: (0, {0}) }", _ALIASED_ROOT), 1),
    ("alias_root_is_last_instruction", _ALIASED % ("input_output_alias={ {0}: (0, {0}) }", ""), 1),  # b: f32[]
    ("alias_whole_output_without_root", _ALIASED % ("input_output_alias={ {}: (0, {0}) }", ""), None),
    ("alias_not_on_layout_result", _ALIASED % ("input_output_alias={ {2}: (0, {0}) }, entry_computation_layout="
                                               "{((f32[], f32[]))->(f32[], f32[], f32[])}", _ALIASED_ROOT), 1),
    ("alias_comment_and_trailing_commas", _ALIASED % ("input_output_alias={ {0,}: (0, {0}), /* {7}: */ {1}: (0, {1}), }",
                                                      _ALIASED_ROOT), None),
    ("alias_empty_item", _ALIASED % ("input_output_alias={ {0}: (0, {0}),, }", _ALIASED_ROOT), 1),  # Expects '{'
    ("donor_trailing_comma", _ALIASED % ("buffer_donor={ (0, {0}), /*c*/ (0, {1}), }", _ALIASED_ROOT), None),
    # ------------------------------------------------ `name:` is a name (XLA's lexer), where a name may stand
    ("colon_instruction_name", _inst("p1: = f32[4] negate(p)"), None),
    ("colon_instruction_name_no_space", _inst("ROOT c:= f32[4] negate(p)"), None),
    ("colon_operand_name", _inst("ROOT c = f32[4] add(p:, f32[4] p:)"), None),
    ("colon_after_percent", _inst("ROOT %c: = f32[4] negate(p)"), 4),               # XLA: expects '='
    ("colon_twice", _inst("ROOT c:: = f32[4] negate(p)"), 4),
    ("colon_opcode", _inst("ROOT c = f32[4] negate:(p)"), 4),                     # XLA: expects opcode
    ("colon_nested_opcode", _inst("ROOT c = f32[4] add(p, f32[4] negate:(p))"), 4),
    ("colon_entry_name", "HloModule m\nENTRY e: (p: f32[4]) -> f32[4] {\n  p = f32[4] parameter(0)\n"
                         "  ROOT c = f32[4] negate(p)\n}\n", None),
    ("colon_computation_and_callee", "HloModule m\nf: {\n  x = f32[] parameter(0)\n  ROOT y = f32[] negate(x)\n}\n"
                                     "ENTRY e {\n  p = f32[] parameter(0)\n  ROOT c = f32[] call(p), to_apply=f:, "
                                     "control-predecessors={p:}\n}\n", None),
    # ------------------------------------------------ tuple: one operand per element of its (tuple) shape
    ("tuple_operand_too_few", _inst("ROOT t = (f32[4], f32[4]) tuple(p)"), 4),       # XLA: expects 2 operands
    ("tuple_operand_too_many", _inst("ROOT t = (f32[4]) tuple(p, p)"), 4),
    ("tuple_empty_shape_with_operand", _inst("ROOT t = () tuple(p)"), 4),
    ("tuple_empty", _inst("ROOT t = () tuple()"), None),
    ("tuple_shape_not_tuple", _inst("ROOT t = f32[4] tuple(p)"), 4),                  # XLA: aborts
    ("tuple_token_shape", _inst("ROOT t = token[] tuple()"), 4),                      # XLA: aborts
    ("tuple_buffer_shape", _inst("ROOT t = b(f32[4]) tuple(p)"), 4),                  # XLA: aborts
    ("tuple_comment_hides_operand", _inst("ROOT t = (f32[4], f32[4]) tuple(p /*, p*/)"), 4),
    ("tuple_nested_instruction_count", _inst("ROOT t = (f32[4], f32[4]) tuple(p, (f32[4], f32[4]) tuple(p))"), 4),
    ("tuple_element_shapes_not_compared", _inst("ROOT t = (s32[], f32[5]{0}) tuple(p, p)"), None),  # XLA: counts only
    ("tuple_layouts_written", _inst("ROOT t = (f32[4]{0}, f32[4]) tuple(p, p)"), None),
    ("tuple_nested_count_not_compared", _inst("ROOT t = ((f32[4]), f32[4]) tuple(w, p)",
                                              "  p = f32[4] parameter(0)\n  w = (f32[4], f32[4]) tuple(p, p)\n"), None),
    ("tuple_unnamed_operand_dropped", _inst("ROOT t = (f32[4]) tuple(f32[4], p)"), None),
    ("tuple_shape_left_out", _inst("ROOT t = tuple(p, p)"), None),
    ("get_tuple_element_shape_not_compared", _inst("ROOT g = s32[] get-tuple-element(w), index=0",
                                                   "  p = f32[4] parameter(0)\n  w = (f32[4], f32[4]) tuple(p, p)\n"),
     None),
    # ------------------------------------------------ the first computation on the `HloModule` line
    ("computation_on_header_line", "HloModule m:c1 {\n  x = f32[] parameter(0)\n}\nc2 {\n  ROOT y = f32[] constant(1)\n}\n",
     None),
    ("entry_on_header_line", "HloModule m, is_scheduled=true ENTRY %e {\n  ROOT x = f32[] parameter(0)\n}\n", None),
    ("computation_on_header_line_after_comma", "HloModule m, c1 {\n  ROOT x = f32[] parameter(0)\n}\n", 1),
]


@pytest.mark.parametrize("text, line", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_agrees_with_xla(text, line):
    if line is None:
        parse_hlo(text)
        return
    with pytest.raises((HloSyntaxError, HloSemanticError)) as e:
        parse_hlo(text)
    assert e.value.line == line and e.value.column is not None, str(e.value)


def test_non_ascii_column_and_shape():
    """The error points at the character (its column), and `parse_shape` says the same of a shape."""
    from analyzer.hlo.parser import parse_shape

    with pytest.raises(HloSyntaxError) as e:
        parse_hlo("HloModule m\nENTRY e {\n  ROOT p = f32[] parameter(\u00b2)\n}\n")
    assert (e.value.line, e.value.column) == (3, 28) and "U+00B2" in str(e.value)
    with pytest.raises(HloSyntaxError) as e:
        parse_shape("f32[\u0663]")
    assert (e.value.line, e.value.column) == (1, 5)


def test_origin_error_column():
    """A bad `origin=` is reported at the token XLA stops at (here the `(` where `}` should end the array)."""
    with pytest.raises(HloSyntaxError) as e:
        parse_hlo(_inst('ROOT c = f32[4] negate(p), origin={(({"a"}, {"b"}), {"c"(})}'))
    assert (e.value.line, e.value.column) == (4, 59) and "to end the original array" in e.value.message


def test_alias_output_index_in_a_lazy_parse():
    """A lazy parse checks the output indexes itself, against the entry's root shape read from its ROOT line
    without a parse of the entry (`parser._check_read`), at the same place as the full parse."""
    text = _ALIASED % ("input_output_alias={ {2}: (0, {0}) }", _ALIASED_ROOT)
    with pytest.raises(HloSemanticError) as full:
        parse_hlo(text)
    assert (full.value.line, full.value.column) == (1, 35) and "{2}" in full.value.message
    with pytest.raises(HloSemanticError) as lazy:
        parse_hlo(text, lazy=True)
    assert (lazy.value.line, lazy.value.column, lazy.value.message) == (1, 35, full.value.message)
    printed = ("HloModule m, input_output_alias={ {1}: (0, {0}) }\nENTRY %e {\n  %p = (f32[], f32[]) parameter(0)\n"
               "  %a = f32[] get-tuple-element(%p), index=0\n  %b = f32[] get-tuple-element(%p), index=1\n"
               "  ROOT %t = (f32[], f32[]) tuple(%a, %b)\n}\n")
    assert not parse_hlo(printed, lazy=True).entry.is_parsed  # (as XLA prints it: its ROOT line read alone)
    with pytest.raises(HloSemanticError, match=r"\{2\}"):
        parse_hlo(printed.replace("{ {1}:", "{ {2}:"), lazy=True)


def test_tuple_operand_count_at_xla_column_in_every_path():
    """A tuple with fewer operands than its shape has elements is rejected at the `(` of its operands, the column
    XLA gives (4:34 here), by the grammar, by the fast path of a full parse, and by a lazy parse's row reads
    (`select`, `users_of`), each time it is read (a tuple's check is not cached by signature)."""
    with pytest.raises(HloSemanticError) as e:
        parse_hlo(_inst("ROOT t = (f32[4], f32[4]) tuple(p)"))
    assert (e.value.line, e.value.column) == (4, 34) and "expects 2 operands, one per element, but has 1" in str(e.value)
    body = ("HloModule m\n\n%f (a: f32[2], b: s32[]) -> (f32[2], s32[]) {\n  %a = f32[2]{0} parameter(0)\n"
            "  %b = s32[] parameter(1)\n  ROOT %t = (f32[2]{0}, s32[]) tuple(%a)\n}\n\n"
            "ENTRY %e (p: f32[2], q: s32[]) -> (f32[2], s32[]) {\n  %p = f32[2]{0} parameter(0)\n"
            "  %q = s32[] parameter(1)\n  ROOT %r = (f32[2]{0}, s32[]) fusion(%p, %q), kind=kLoop, calls=%f\n}\n")
    one = body.replace("(f32[2], s32[]) {\n  %a", "(f32[2]) {\n  %a").replace("(f32[2]{0}, s32[]) tuple", "(f32[2]{0}) tuple")
    assert parse_hlo(one)["f"].root.opcode == "tuple"  # a valid tuple of one operand read first by the fast path
    with pytest.raises(HloSemanticError) as full:
        parse_hlo(body)
    assert (full.value.line, full.value.column) == (6, 37)
    for read in (lambda c: c.select("tuple"), lambda c: c.users_of("a")):
        for _ in range(2):
            with pytest.raises(HloSemanticError) as lazy:
                read(parse_hlo(body, lazy=True)["f"])
            assert (lazy.value.line, lazy.value.column, lazy.value.message) == (6, 37, full.value.message)
    assert parse_hlo(body.replace("tuple(%a)", "tuple(%a, %b)"), lazy=True)["f"].select("tuple")[0].name == "t"


def test_get_tuple_element_of_an_array_rejected_on_purpose():
    """XLA's parser takes `get-tuple-element` of an array operand (index=0 of an f32[4] parses; its HLO verifier
    rejects it), while an index past a tuple's last element crashes it (SIGSEGV): both read an element that is
    not there, so the parse rejects both, at the index, rather than build an instruction no shape describes."""
    params = "  p = f32[4] parameter(0)\n  w = (f32[4], f32[4]) tuple(p, p)\n"
    for line in ("ROOT g = f32[4] get-tuple-element(p), index=0", "ROOT g = f32[4] get-tuple-element(w), index=2"):
        with pytest.raises(HloSemanticError) as e:
            parse_hlo(_inst(line, params))
        assert (e.value.line, e.value.column) == (5, 47) and "outside its operand's" in e.value.message


def test_colon_names_read_without_the_colon():
    """`name:` is the name `name` (instruction, operand, computation, callee, control predecessor), in a module and
    in a header-less one whose first computation is written `f: {`."""
    body = ("f: {\n  x = f32[] parameter(0)\n  ROOT y = f32[] negate(x:)\n}\nENTRY e: {\n  p: = f32[] parameter(0)\n"
            "  ROOT c = f32[] call(p:), to_apply=f:, control-predecessors={p:}\n}\n")
    for text in ("HloModule m\n" + body, body):
        m = parse_hlo(text)
        assert [c.name for c in m.computations] == ["f", "e"] and m.entry.name == "e"
        root = m.entry.root
        assert (root.operand_names, root.called_computations, m.entry["p"].position.column) == (("p",), ("f",), 3)
        assert m["f"].root.operand_names == ("x",)


def test_opcode_named_operand_rejected_on_purpose():
    """XLA's parser drops an undefined operand spelled as a bare opcode (`custom-call(a, negate)` becomes
    `custom-call(a)`: it logs "cannot parse as an instruction name or as a nested instruction" and goes on), so it
    accepts the module when the operand count still fits. That is an accident of its error handling, and the
    module it keeps is not the one written: the parse reports the undefined operand instead."""
    with pytest.raises(HloSemanticError) as e:
        parse_hlo(_inst('ROOT c = f32[4] custom-call(p, negate), custom_call_target="x"'))
    assert (e.value.line, e.value.column) == (4, 34) and "'negate'" in e.value.message


def test_closing_brace_on_an_instruction_line():
    # XLA reads `}` after an instruction as the end of its computation, on that line or after spaces
    for close in ("}", "  }"):
        text = ("HloModule m\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                f"  ROOT c = f32[] add(a, b){close}\n\nENTRY e {{\n  p = f32[] parameter(0)\n"
                "  ROOT r = f32[] call(p, p), to_apply=add\n}\n")
        m = parse_hlo(text)
        assert [(c.name, c.root.name) for c in m.computations] == [("add", "c"), ("e", "r")]


def test_verifier_rules_reach_the_analysis_positioned():
    # XLA's parser takes a device twice (its verifier does not): the parse does too, and reading the sharding,
    # as the analysis does, gives a positioned error
    m = parse_hlo(_sh("{devices=[2,2]0,1,1,3}"))
    with pytest.raises(HloSyntaxError) as e:
        m.entry["q"].sharding
    assert (e.value.line, "twice" in e.value.message) == (4, True) and e.value.column is not None
    m = parse_hlo(_AR % "[10,10]<=[6,5]T(1,0)")
    with pytest.raises(HloSyntaxError) as e:
        m.entry["a"].replica_groups
    assert e.value.line == 9 and e.value.column is not None
