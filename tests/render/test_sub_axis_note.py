"""A sub-axis label (`data:(1)2`) is explained wherever a report shows one (issue 26, item 8): the report's notes
in every format, and the trace whose tracks are named by it (`ICI data:(1)2`). The explanation is one function,
`analyzer.theory.notation.sub_axes_note`, whose meaning the test checks against the devices of the groups."""

import json

import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import analyzer  # noqa: E402
from analyzer.formats import renderer  # noqa: E402
from analyzer.theory.notation import SUB_AXIS, sub_axes_note, sub_axis_meaning  # noqa: E402


def test_the_meaning_matches_the_groups_the_label_is_read_from():
    """mapping.groups_to_axes names the groups {0,4} (and {1,5}, ...) of X=8 `X:(1)2` and {0,1} `X:(4)2`: the
    note's 'positions apart' is the distance between a group's members."""
    from analyzer.analysis.mapping import groups_to_axes
    from analyzer.theory.mesh import MeshInfo

    mesh = MeshInfo(("X",), (8,), tuple(range(8)))
    for groups in ([(0, 4), (1, 5), (2, 6), (3, 7)], [(0, 1), (2, 3), (4, 5), (6, 7)], [(0, 2), (1, 3), (4, 6), (5, 7)]):
        (label,) = groups_to_axes(groups, mesh).axes
        apart = groups[0][1] - groups[0][0]
        meaning = sub_axis_meaning(label, {"X": 8})
        assert (f"2 positions {apart} apart" in meaning) or (apart == 1 and "neighbouring positions, 1 apart" in meaning)
    assert sub_axis_meaning("X:(1)2", {"X": 8}).endswith("(1 x 2 x 4: the major factor: 2 positions 4 apart)")


def test_no_sub_axis_no_note_and_an_unknown_axis_by_size():
    assert sub_axes_note([("data",), ("model",)], {"data": 4, "model": 2}) is None
    assert sub_axes_note(["q:(1)2"], {"data": 4}) == f"Sub-axes: {SUB_AXIS}. Here: q:(1)2 is 2 of q's devices."


@pytest.fixture(scope="module")
def report():
    """An [4, 1024] array on data=4 reshaped to [2, 2, 1024] and constrained to P('data'): XLA gathers over each
    half of 'data' (`AllGather_{data:(1)2}`, `AllGather_{data:(2)2}`)."""
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "model"))

    def step(x):
        y = x.reshape(2, 2, 1024) * 2.0
        return jax.lax.with_sharding_constraint(y, NamedSharding(mesh, P("data", None, None)))

    x = jax.ShapeDtypeStruct((4, 1024), jnp.float32, sharding=NamedSharding(mesh, P("data", None)))
    return analyzer.analyze(step, x, mesh=mesh)


@pytest.mark.slow
def test_every_format_explains_the_labels_it_shows(report):
    labels = {a for axes in report.collectives["axes"] for a in axes if ":(" in a}
    assert labels == {"data:(1)2", "data:(2)2"}
    note = sub_axes_note(list(report.collectives["axes"]), {"data": 4, "model": 2})
    assert "data:(1)2 is 2 of data's 4 (1 x 2 x 2: the major factor: 2 positions 2 apart)" in note
    assert note in report.notes
    assert note in json.loads(report.to_json())["notes"]
    for name in ("text", "markdown", "html"):
        out = " ".join(renderer(name, "report")(report).split())  # (the terminal wraps its lines)
        assert "data:(1)2" in out and "the major factor: 2 positions 2 apart" in out, name
    from analyzer.render.trace import trace_events

    trace = trace_events(report)
    tracks = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert any(":(1)2" in t for t in tracks)
    assert trace["otherData"]["sub_axes"] == note
