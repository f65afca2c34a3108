"""analyzer.testing: `assert_collectives` and the `collectives_snapshot` fixture (a pytest plugin)."""

from __future__ import annotations

import importlib.metadata
import textwrap

import pytest

from analyzer.testing import CollectivesMismatch, assert_collectives, collectives_of, compare_snapshot

AR = dict(kind="all-reduce", axes=("X",), notation="AllReduce_X: [B, F]{U_X} -> [B, F]", dtype="f32",
          bytes=1 << 20, count=2)
AG = dict(kind="all-gather", axes=("Y",), notation="AllGather_Y: [E_Y, F] -> [E, F]", dtype="bf16",
          bytes=1 << 21, count=1)


def test_expected_items_match_by_notation_kind_or_columns(make_report):
    r = make_report([AR, AG])
    assert_collectives(r, expected=["AllGather_Y:[E_Y,F]->[E,F]", "all-reduce"])  # spaces do not matter
    assert_collectives(r, expected=[{"kind": "all-gather", "axes": ("Y",)}, {"bytes": 1 << 20}])
    with pytest.raises(CollectivesMismatch) as info:
        assert_collectives(r, expected=["all-reduce"])
    assert "+ unexpected: AllGather_Y: [E_Y, F] -> [E, F]" in str(info.value)
    with pytest.raises(CollectivesMismatch, match="- missing:    'all-to-all'"):
        assert_collectives(r, expected=["all-reduce", "all-gather", "all-to-all"])
    with pytest.raises(CollectivesMismatch):
        assert_collectives(r, expected=[])  # "no collectives at all"


def test_snapshot_comparison_is_a_multiset_without_timings(make_report):
    before = collectives_of(make_report([AR]))
    assert "seconds" not in before[0]
    same = compare_snapshot(collectives_of(make_report([{**AR, "seconds": 9.0}])), before)
    assert not same.added and not same.removed  # a new price is not a new collective
    more = compare_snapshot(collectives_of(make_report([{**AR, "count": 3}])), before)
    assert len(more.added) == 1 and len(more.removed) == 1  # runs more often: counts as an addition


@pytest.mark.slow
def test_assert_collectives_on_a_real_program():
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = jax.make_mesh((4, 2), ("X", "Y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    x = jax.ShapeDtypeStruct((64, 128), jnp.float32, sharding=NamedSharding(mesh, P(None, "X")))
    w = jax.ShapeDtypeStruct((128, 32), jnp.float32, sharding=NamedSharding(mesh, P("X", None)))
    # Contracting over X leaves partial sums: one AllReduce over X (and nothing over Y).
    assert_collectives(lambda x, w: x @ w, x, w, mesh=mesh, expected=[{"kind": "all-reduce", "axes": ("X",)}])
    x_dp = jax.ShapeDtypeStruct((64, 128), jnp.float32, sharding=NamedSharding(mesh, P("X", None)))
    w_rep = jax.ShapeDtypeStruct((128, 32), jnp.float32, sharding=NamedSharding(mesh, P()))
    assert_collectives(lambda x, w: x @ w, x_dp, w_rep, mesh=mesh, expected=[])


def test_the_plugin_is_registered_through_the_pytest11_entry_point():
    eps = importlib.metadata.entry_points(group="pytest11")
    assert any(ep.name == "hlo_analyzer" and ep.value == "analyzer.testing" for ep in eps)


SNAPSHOT_TESTS = textwrap.dedent("""\
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P


    def matmul(x_spec, w_spec):
        mesh = jax.make_mesh((8,), ("X",), axis_types=(jax.sharding.AxisType.Auto,))
        x = jax.ShapeDtypeStruct((64, 128), jnp.float32, sharding=NamedSharding(mesh, P(*x_spec)))
        w = jax.ShapeDtypeStruct((128, 32), jnp.float32, sharding=NamedSharding(mesh, P(*w_spec)))
        return (lambda x, w: x @ w), (x, w), mesh


    def test_step(collectives_snapshot):  # In[B_X, D] . W[D, F]: no communication
        fn, args, mesh = matmul(("X", None), ())
        collectives_snapshot(fn, *args, mesh=mesh, name="step")


    def test_step_sharded_on_the_contraction(collectives_snapshot):  # In[B, D_X] . W[D_X, F]: AllReduce_X
        fn, args, mesh = matmul((None, "X"), ("X", None))
        collectives_snapshot(fn, *args, mesh=mesh, name="step")


    def test_never_recorded(collectives_snapshot):
        fn, args, mesh = matmul(("X", None), ())
        collectives_snapshot(fn, *args, mesh=mesh, name="never-recorded")
    """)


@pytest.mark.slow
def test_snapshot_fixture_records_then_fails_on_new_collectives(pytester):
    # A pytest session of the user's tests, run in this process (pytester): the plugin comes in through its
    # pytest11 entry point as in a user's run, and the programs compile on this process's 8 CPU devices.
    pytester.makepyfile(test_model=SNAPSHOT_TESTS)
    recorded = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--hlo-snapshot-update",
                                            "-k", "test_step and not contraction")
    assert recorded.ret == 0, recorded.stdout.str()
    snapshot = pytester.path / "__hlo_snapshots__" / "test_model" / "step.json"
    assert snapshot.is_file()

    compared = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rA")
    out = compared.stdout.str()
    assert compared.ret == 1, out
    assert "PASSED test_model.py::test_step" in out  # same program, same snapshot
    assert "FAILED test_model.py::test_step_sharded_on_the_contraction" in out
    assert "gained collectives" in out and "+ AllReduce_X" in out
    assert "FAILED test_model.py::test_never_recorded" in out and "--hlo-snapshot-update" in out
