"""A reshard that a `with_sharding_constraint` forces points at that constraint's line, with the constraint whose
layout it starts from as its context (issue 26, item 6): never at the line between the two constraints, which is
the op XLA's partitioner happened to hang the collective on (its metadata: `jit(step)/add` below).

The program is written here, so the lines the tests expect are read off it (`inspect`), not typed in.
"""

import importlib.util
import inspect
from pathlib import Path

import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import analyzer  # noqa: E402

pytestmark = pytest.mark.slow


def _mesh() -> Mesh:
    return Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "model"))


def two_constraints(mesh):
    def step(x):
        y = jnp.tanh(x)
        y = jax.lax.with_sharding_constraint(y, NamedSharding(mesh, P("data", None)))  # FIRST
        z = y * 2.0 + 1.0  # BETWEEN
        z = jax.lax.with_sharding_constraint(z, NamedSharding(mesh, P(None, "data")))  # SECOND
        return jnp.sin(z)
    return step


def one_constraint(mesh):
    def step(x):
        z = jnp.tanh(x) * 2.0  # PRODUCER
        z = jax.lax.with_sharding_constraint(z, NamedSharding(mesh, P(None, "data")))  # ONLY
        return jnp.sin(z)
    return step


def _line(fn, marker: str) -> str:
    lines, first = inspect.getsourcelines(fn)
    at = next(i for i, text in enumerate(lines) if text.rstrip().endswith(f"# {marker}"))
    return f"{inspect.getsourcefile(fn)}:{first + at}"


def _analyse(make, target: str = "cpu"):
    mesh = _mesh()
    x = jax.ShapeDtypeStruct((1024, 2048), jnp.float32, sharding=NamedSharding(mesh, P("data", None)))
    return analyzer.analyze(make(mesh), x, mesh=mesh, target=target)


@pytest.fixture(scope="module")
def report():
    return _analyse(two_constraints)


def test_the_reshard_row_points_at_the_constraint_that_forced_it(report):
    rows = report.collectives
    assert list(rows["kind"]) == ["all-to-all"]  # [I_data, J] -> [I, J_data]: the second constraint's layout
    row = rows.iloc[0]
    second, first = _line(two_constraints, "SECOND"), _line(two_constraints, "FIRST")
    assert row["source"] == second
    assert row["source"] != _line(two_constraints, "BETWEEN")  # where XLA's metadata put it
    assert row["declared"] == second
    assert row["context"] == f"from the layout of the with_sharding_constraint at line {first.rpartition(':')[2]}"
    assert row["op"] == "reshard for with_sharding_constraint"
    assert row["op_name"].endswith("/add")  # XLA's own metadata is kept as it is


def test_the_finding_points_there_and_names_the_constraint_to_change(report):
    (d,) = [d for d in report.diagnostics if d.code == "HA302"]
    second, first = _line(two_constraints, "SECOND"), _line(two_constraints, "FIRST")
    assert str(d.location) == second
    assert d.location.context.endswith(f"line {first.rpartition(':')[2]}")
    assert d.details["forced_by"] == second
    # the change HA304 names at that constraint (one change per root cause), its path relative to the project root
    path, _, line = second.rpartition(":")
    at = f"{Path(path).resolve().relative_to(Path(__file__).resolve().parents[2])}:{line}"
    assert f"write P('data', None) in the with_sharding_constraint at {at} (today P(None, 'data'))" in d.fix
    assert "the layout its value already has" in d.fix


def test_one_constraint_has_the_producer_as_context():
    rows = _analyse(one_constraint).collectives
    row = rows.iloc[0]
    assert row["source"] == _line(one_constraint, "ONLY")
    assert row["context"] == f"reshards the value made at {_line(one_constraint, 'PRODUCER')}"


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="libtpu is not installed")
def test_the_tpu_compilers_final_hlo_points_there_too():
    """libtpu's final HLO keeps neither constraint: the program before partitioning finds them."""
    rows = _analyse(two_constraints, "tpu:v5e:2x4").collectives
    moving = rows[rows["kind"] == "all-to-all"]
    assert len(moving) == 1
    assert moving.iloc[0]["source"] == _line(two_constraints, "SECOND")
    assert moving.iloc[0]["context"].endswith(f"line {_line(two_constraints, 'FIRST').rpartition(':')[2]}")


def test_a_matmuls_gather_keeps_the_matmuls_line():
    """An all-gather a dot needs is the dot's, even when a constraint follows the dot."""
    mesh = _mesh()

    def step(x, w):
        y = x @ w  # DOT
        return jax.lax.with_sharding_constraint(y, NamedSharding(mesh, P("data", None)))

    x = jax.ShapeDtypeStruct((256, 512), jnp.float32, sharding=NamedSharding(mesh, P("data", None)))
    w = jax.ShapeDtypeStruct((512, 256), jnp.float32, sharding=NamedSharding(mesh, P("model", None)))
    rows = analyzer.analyze(step, x, w, mesh=mesh).collectives
    assert len(rows) and set(rows["source"]) == {_line(step, "DOT")}
