"""Device groups to the user's mesh axes, sub-axes, permutes, inferred meshes, source frames and passes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from analyzer.errors import MeshError
from analyzer.analysis.mapping import (
    collective_notation,
    groups_to_axes,
    infer_mesh,
    mesh_from_any,
    op_label,
    pairs_to_axes,
    parse_mesh_spec,
    pass_of,
)
from analyzer.theory.mesh import MeshInfo, parse_mesh_spec

XY = MeshInfo(("X", "Y"), (4, 2), tuple(range(8)))
XYZ = MeshInfo(("X", "Y", "Z"), (2, 2, 2), tuple(range(8)))


def groups_over(mesh: MeshInfo, axes: tuple[str, ...]) -> list[tuple[int, ...]]:
    """The replica groups of a collective over `axes` (in that order, major to minor), as XLA lists them."""
    ids = np.arange(mesh.size).reshape(mesh.axis_sizes)
    dims = [mesh.axis_names.index(a) for a in axes]
    rest = [d for d in range(len(mesh.axis_sizes)) if d not in dims]
    moved = np.transpose(ids, rest + dims).reshape(-1, int(np.prod([mesh.axis_sizes[d] for d in dims])))
    return [tuple(int(v) for v in row) for row in moved]


@pytest.mark.parametrize("mesh", [XY, XYZ], ids=["XY", "XYZ"])
def test_every_axis_subset_and_order_maps_back(mesh):
    for r in range(1, len(mesh.axis_names) + 1):
        for axes in itertools.permutations(mesh.axis_names, r):
            span = groups_to_axes(groups_over(mesh, axes), mesh)
            assert span.axes == axes and span.regular


def test_device_ids_do_not_matter_positions_do():
    """A mesh with permuted devices: partition i is mesh position i, so the axes are the same."""
    permuted = MeshInfo(("X", "Y"), (4, 2), (5, 2, 7, 0, 3, 6, 1, 4))
    assert groups_to_axes([(0, 2, 4, 6), (1, 3, 5, 7)], permuted).axes == ("X",)
    assert groups_to_axes([(0, 1), (2, 3), (4, 5), (6, 7)], permuted).axes == ("Y",)


def test_sub_axes():
    x8 = MeshInfo(("X",), (8,), tuple(range(8)))
    assert groups_to_axes([(0, 4), (1, 5), (2, 6), (3, 7)], x8).axes == ("X:(1)2",)  # the major factor
    assert groups_to_axes([(0, 1, 2, 3), (4, 5, 6, 7)], x8).axes == ("X:(2)4",)  # the minor factor
    assert groups_to_axes([(0, 2), (1, 3), (4, 6), (5, 7)], x8).axes == ("X:(2)2",)  # the middle one
    # a sub-axis of X together with a whole Y
    xy = MeshInfo(("X", "Y"), (4, 2), tuple(range(8)))
    assert groups_to_axes([(0, 1, 2, 3), (4, 5, 6, 7)], xy).axes == ("X:(2)2", "Y")


def test_irregular_groups_are_flagged():
    span = groups_to_axes([(0, 3), (1, 2), (4, 7), (5, 6)], XY)
    assert not span.regular and set(span.axes) == {"X", "Y"}


def test_single_device_groups_span_nothing():
    assert groups_to_axes([(i,) for i in range(8)], XY).axes == ()


def test_ids_outside_the_mesh_are_an_error():
    with pytest.raises(MeshError, match="outside mesh"):
        groups_to_axes([(0, 9)], XY)


def test_permute_pairs():
    ring = [(i * 2 + j, ((i + 1) % 4) * 2 + j) for i in range(4) for j in range(2)]
    span, hops = pairs_to_axes(ring, XY)
    assert span.axes == ("X",) and hops == 1
    span, hops = pairs_to_axes([(0, 7)], XY)  # (0,0) -> (3,1): X wraps to 1 hop, Y 1 hop
    assert span.axes == ("X", "Y") and hops == 2


def test_infer_mesh_from_groups():
    inferred = infer_mesh([groups_over(XY, ("X",)), groups_over(XY, ("Y",))], 8)
    assert inferred.axis_sizes == (4, 2) and inferred.axis_names == ("axis_0", "axis_1")
    inferred = infer_mesh([groups_over(XYZ, ("Z",)), groups_over(XYZ, ("X",))], 8)
    assert inferred.axis_sizes == (2, 2, 2)
    assert infer_mesh([], 8).axis_names == ("devices",)


def test_mesh_specs():
    assert parse_mesh_spec("data=4,model=2") == MeshInfo(("data", "model"), (4, 2), tuple(range(8)))
    assert mesh_from_any({"X": 2, "Y": 4}).axis_sizes == (2, 4)
    for bad in ("data", "data=0", "data=2,data=2", ""):
        with pytest.raises(MeshError):
            parse_mesh_spec(bad)
    with pytest.raises(MeshError, match="not a mesh"):
        mesh_from_any(42)


def test_pass_and_op():
    assert pass_of("jit(step)/transpose(jvp())/while/body/dot_general") == "backward"
    assert pass_of("jit(step)/jvp()/while/body/dot_general") == "forward"
    assert pass_of("jit(f)/dot_general") == ""
    assert op_label("jit(step)/transpose(jvp())/while/body/closed_call/dot_general") == "dot_general"


def test_notation_forms():
    assert collective_notation("all-gather", ("Y",), 2, dims=(0,))[0] == "AllGather_Y: [I_Y, J] -> [I, J]"
    assert collective_notation("all-reduce", ("X",), 2)[0] == "AllReduce_X: [I, J]{U_X} -> [I, J]"
    assert collective_notation("reduce-scatter", ("X",), 2, dims=(1,))[0] == (
        "ReduceScatter_X,J: [I, J]{U_X} -> [I, J_X]")
    assert collective_notation("all-to-all", ("X",), 2, a2a=(0, 1))[0] == "AllToAll_X: [I_X, J] -> [I, J_X]"
    assert collective_notation("all-gather", ("X",), 2, dims=(0,), base=(("X",), ("Y",)))[0] == (
        "AllGather_X: [I_X, J_Y] -> [I, J_Y]")
    assert collective_notation("all-gather", ("X", "Y"), 2, dims=(0,))[0] == "AllGather_XY: [I_XY, J] -> [I, J]"
    assert collective_notation("all-gather", ("data", "model"), 1, dims=(0,))[0] == (
        "AllGather_{data,model}: [I_{data,model}] -> [I]")
