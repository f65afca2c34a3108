"""diff says, for each added or grown collective, what changed in the plan between the sides (issue 29): the
argument with its old and new PartitionSpec, a changed mesh or config value, and the changed line of the code,
with check's own definition (`analyzer.workflows.check.plan_changes`). The same on real compiles, a git
revision against the working tree, is checked in tests/workflow/test_diff_cache.py's slow test, which compiles
that diff once for its cache checks too.
"""

from __future__ import annotations

import json

from analyzer.render import diff as render
from analyzer.workflows.diff import Side, diff_sides

OLD_SRC = 'def step(mesh):\n    w = P("model", None)\n    return w\n'
NEW_SRC = 'def step(mesh):\n    w = P(None, "model")\n    return w\n'


def _row(kind, notation, seconds, source="m.py:9"):
    return {"kind": kind, "axes": ["model"], "notation": notation, "bytes": 1024, "count": 1,
            "total_seconds": seconds, "source": source}


def _plan(spec, mesh=None, config=None):
    return {"form": "spec", "arguments": {"params['w']": spec, "x": "P('data', None)"},
            "mesh": mesh or {"data": 4, "model": 2}, "config": config or {"hardware": "tpu-v5e"}}


def test_an_added_row_names_the_argument_its_specs_and_the_changed_line():
    old = Side({"step": [_row("all-reduce", "AllReduce_model: [I, J]{U_model} -> [I, J]", 3e-6)]},
               {"step": {"plan": _plan("P('model', None)"), "sources": {"m.py": OLD_SRC}}})
    new = Side({"step": [_row("all-gather", "AllGather_model: [I, J_model] -> [I, J]", 6e-6),
                         _row("all-reduce", "AllReduce_model: [I, J]{U_model} -> [I, J]", 3e-6)]},
               {"step": {"plan": _plan("P(None, 'model')"), "sources": {"m.py": NEW_SRC}}})
    d = diff_sides(old, new)
    (change,) = d.programs[0].changes
    assert change.status == "added"
    assert change.why == ("params['w']: P('model', None) -> P(None, 'model') at m.py:2: "
                          "`w = P(None, \"model\")`")
    text = render.render_text(d)
    assert f"      changed in the plan: {change.why}" in text
    assert json.loads(render.render_json(d))["programs"][0]["changes"][0]["why"] == change.why


def test_a_mesh_and_a_config_change_are_named_and_shrunk_or_removed_rows_say_nothing():
    old = Side({"step": [_row("all-gather", "AllGather_model: [I_model] -> [I]", 6e-6),
                         _row("all-reduce", "AllReduce_data: [I]{U_data} -> [I]", 4e-6, "m.py:3")]},
               {"step": {"plan": _plan("P('model', None)"), "sources": {"m.py": OLD_SRC}}})
    new = Side({"step": [dict(_row("all-gather", "AllGather_model: [I_model] -> [I]", 9e-6), bytes=2048)]},
               {"step": {"plan": _plan("P('model', None)", mesh={"data": 2, "model": 4},
                                       config={"hardware": "tpu-v5p"}), "sources": {"m.py": OLD_SRC}}})
    d = diff_sides(old, new)
    grown = next(c for c in d.programs[0].changes if c.status == "changed")
    removed = next(c for c in d.programs[0].changes if c.status == "removed")
    assert grown.why == "mesh data=4,model=2 -> data=2,model=4"  # the axes it runs over; config is on no axis
    assert removed.why is None
    shrunk = diff_sides(new, old).programs[0]
    assert all(c.why is None for c in shrunk.changes if c.status != "added")


def test_sides_that_do_not_say_their_plan_explain_nothing():
    rows = [_row("all-gather", "AllGather_model: [I_model] -> [I]", 6e-6)]
    d = diff_sides(Side({"step": []}), Side({"step": rows}))
    assert d.programs[0].changes[0].why is None
    assert "changed in the plan" not in render.render_text(d)
