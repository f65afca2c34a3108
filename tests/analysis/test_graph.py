"""Call graph, loop trip counts and executions per step, on small hand-written HLO modules."""

from __future__ import annotations

import pytest

from analyzer.analysis.graph import CallGraph
from analyzer.hlo.parser import parse_hlo


def loop_module(*, init: int, bound: int, step: int, direction: str, swap: bool = False,
                config: str = "") -> str:
    cmp = (f"compare(%b, %i), direction={direction}" if swap else f"compare(%i, %b), direction={direction}")
    op = "add" if step >= 0 else "subtract"
    return f"""HloModule loop, num_partitions=1

%body (p: (s32[], f32[4])) -> (s32[], f32[4]) {{
  %p = (s32[], f32[4]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %one = s32[] constant({abs(step)})
  %next = s32[] {op}(%i, %one)
  %x = f32[4] get-tuple-element(%p), index=1
  ROOT %t = (s32[], f32[4]) tuple(%next, %x)
}}

%cond (p.1: (s32[], f32[4])) -> pred[] {{
  %p.1 = (s32[], f32[4]) parameter(0)
  %i = s32[] get-tuple-element(%p.1), index=0
  %b = s32[] constant({bound})
  ROOT %lt = pred[] {cmp}
}}

ENTRY %main (a: f32[4]) -> (s32[], f32[4]) {{
  %a = f32[4] parameter(0)
  %zero = s32[] constant({init})
  %init = (s32[], f32[4]) tuple(%zero, %a)
  ROOT %w = (s32[], f32[4]) while(%init), condition=%cond, body=%body{config}
}}
"""


@pytest.mark.parametrize("init,bound,step,direction,swap,expected", [
    (0, 5, 1, "LT", False, 5),
    (0, 5, 1, "LE", False, 6),
    (10, 0, -2, "GT", False, 5),
    (0, 7, 2, "LT", False, 4),
    (0, 5, 1, "GT", True, 5),   # 5 > i  is  i < 5
    (3, 3, 1, "LT", False, 0),
])
def test_trip_count_inferred_from_condition(init, bound, step, direction, swap, expected):
    g = CallGraph.build(parse_hlo(loop_module(init=init, bound=bound, step=step, direction=direction, swap=swap)))
    tc = g.trip_count("main", "w")
    assert (tc.n, tc.source) == (expected, "condition")
    assert g.multiplicity("body") == expected
    assert g.multiplicity("cond") == expected + 1


def test_known_trip_count_wins():
    text = loop_module(init=0, bound=5, step=1, direction="LT",
                       config=', backend_config={"known_trip_count":{"n":"12"}}')
    g = CallGraph.build(parse_hlo(text))
    assert g.trip_count("main", "w").n == 12 and g.trip_count("main", "w").source == "backend_config"
    assert g.multiplicity("body") == 12


def test_unknown_trip_count_counts_once():
    text = loop_module(init=0, bound=5, step=1, direction="LT").replace("%b = s32[] constant(5)",
                                                                       "%b = s32[] get-tuple-element(%p.1), index=0")
    g = CallGraph.build(parse_hlo(text))
    assert g.trip_count("main", "w").source == "unknown" and g.multiplicity("body") == 1


NESTED = """HloModule nested, num_partitions=1

%inner_body (p: (s32[])) -> (s32[]) {
  %p = (s32[]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %one = s32[] constant(1)
  %n = s32[] add(%i, %one)
  ROOT %t = (s32[]) tuple(%n)
}

%inner_cond (p: (s32[])) -> pred[] {
  %p = (s32[]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %b = s32[] constant(4)
  ROOT %lt = pred[] compare(%i, %b), direction=LT
}

%outer_body (q: (s32[])) -> (s32[]) {
  %q = (s32[]) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %z = s32[] constant(0)
  %it = (s32[]) tuple(%z)
  %w2 = (s32[]) while(%it), condition=%inner_cond, body=%inner_body
  %one = s32[] constant(1)
  %n = s32[] add(%j, %one)
  ROOT %t = (s32[]) tuple(%n)
}

%outer_cond (q: (s32[])) -> pred[] {
  %q = (s32[]) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %b = s32[] constant(3)
  ROOT %lt = pred[] compare(%j, %b), direction=LT
}

%branch_a (x: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  ROOT %y = f32[] negate(%x)
}

%branch_b (x: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  ROOT %y = f32[] exponential(%x)
}

%called (x: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  ROOT %y = f32[] sqrt(%x)
}

ENTRY %main (k: s32[], v: f32[]) -> f32[] {
  %k = s32[] parameter(0)
  %v = s32[] constant(0)
  %t0 = (s32[]) tuple(%v)
  %w = (s32[]) while(%t0), condition=%outer_cond, body=%outer_body
  %f = f32[] parameter(1)
  %c = f32[] call(%f), to_apply=%called
  ROOT %r = f32[] conditional(%k, %c, %c), branch_computations={%branch_a, %branch_b}
}
"""


def test_nested_loops_calls_and_branches():
    g = CallGraph.build(parse_hlo(NESTED))
    assert g.multiplicity("outer_body") == 3
    assert g.multiplicity("inner_body") == 12  # loops multiply
    assert g.multiplicity("inner_cond") == 3 * 5
    assert g.multiplicity("called") == 1  # `call` spells its callee to_apply=, and it runs
    assert g.branch_counts("branch_a") == {(("r", 0),): 1.0}
    assert g.branch_counts("branch_b") == {(("r", 1),): 1.0}
    assert {s.role for s in g.callees("main")} == {"body", "condition", "call", "branch"}
    assert [u.name for u in g.users("main", "c")] == ["r"]
