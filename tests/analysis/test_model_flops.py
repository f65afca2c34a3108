"""Model FLOPs are the model's, not the plan's: the dots of the program before partitioning, once per program.

The plans of tests/rules/plans.py (one MLP step: good, pure data parallel, batch replicated, batch split on the
wrong dim, shard_map) must report the same model FLOPs, equal to the count by hand; a plan that repeats work
shows it as HFU over MFU and as the redundancy of its dots. A one-device mesh analyses (no collectives).
"""

from __future__ import annotations

import math

import pytest

from analyzer.analysis.dots import ModelFlops


def test_redundancy_is_executed_over_model():
    m = ModelFlops(100.0, {"dot_general at a.py:1": 100.0})
    assert m.redundancy("dot_general at a.py:1", 400.0) == 4.0
    assert math.isnan(m.redundancy("dot_general at b.py:2", 400.0))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["good", "dp", "replicated_batch", "wrong_dim", "shard_map"])
def test_model_flops_agree_across_plans(planned, name):
    by_hand = planned.plans.model_flops_by_hand()
    t = planned(name).totals
    assert t.model_flops == pytest.approx(by_hand, rel=0.01)
    assert t.hfu >= t.mfu * 0.999


@pytest.mark.slow
def test_replicated_batch_shows_redundancy(planned):
    good, bad = planned("good"), planned("replicated_batch")
    assert good.totals.hfu == pytest.approx(good.totals.mfu)
    assert set(good.dots["redundancy"].round(3)) == {1.0}
    # every chip of a 'data' group (4) computes the same tokens: the chips run 4x the model's FLOPs
    assert bad.totals.hfu == pytest.approx(4 * bad.totals.mfu, rel=0.01)
    assert set(bad.dots["redundancy"].round(3)) == {4.0}
    assert "HFU (repeated work)" in bad.to_text()
    assert "HFU (repeated work)" not in good.to_text()


def _shard_map_flops(x_spec, *, device_id: bool = False) -> float:
    """Model FLOPs of `x @ w` written per shard with jax.shard_map (x's in_specs `x_spec`, w's P(None, 'model')) on
    data=4, model=2, counted on the program jax hands XLA (lowered only: no compile)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    from analyzer.analysis.dots import model_flops
    from analyzer.hlo.parser import parse_hlo

    mesh = jax.sharding.AbstractMesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)

    def body(x, w):
        y = x @ w
        return y * jax.lax.axis_index("data").astype(y.dtype) if device_id else y

    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(x_spec, P(None, "model")), out_specs=P("data", "model")))
    x = jax.ShapeDtypeStruct((256, 512), jnp.float32, sharding=NamedSharding(mesh, x_spec))
    w = jax.ShapeDtypeStruct((512, 128), jnp.float32, sharding=NamedSharding(mesh, P(None, "model")))
    text = f.trace(x, w).lower(lowering_platforms=("cpu",)).as_text(dialect="hlo")
    return model_flops(parse_hlo(text, lenient=True), {"data": 4, "model": 2}).total


def test_shard_map_body_counts_once_per_distinct_shard():
    from jax.sharding import PartitionSpec as P

    by_hand = 2 * 256 * 512 * 128
    # x split over 'data': 8 distinct shards, each 1/8 of the work
    assert _shard_map_flops(P("data")) == pytest.approx(by_hand)
    # x whole on every chip (in_specs P()): the 4 chips of a 'data' group compute the same values, the model's once
    assert _shard_map_flops(P()) == pytest.approx(by_hand)
    # a body that reads its device's id differs on every chip whatever its operands: every shard counts
    assert _shard_map_flops(P(), device_id=True) == pytest.approx(4 * by_hand)


@pytest.mark.slow
def test_shard_map_dots_count_once_per_shard(planned):
    r = planned("shard_map")
    assert set(r.dots["redundancy"].round(3)) == {1.0}


@pytest.mark.slow
def test_one_device_mesh_is_the_unsharded_baseline(analysis):
    one = analysis("fsdp_step", "one")
    eight = analysis("fsdp_step", "xy")  # the 8-device X=4, Y=2 analysis that test_chapter.py has compiled
    assert len(one.collectives) == 0
    assert one.totals.step_seconds > 0 and one.totals.mfu > 0
    assert one.totals.model_flops == pytest.approx(eight.totals.model_flops, rel=1e-9)
    assert "(1 device)" in one.to_text()
    assert any("one device" in n for n in one.notes)


@pytest.mark.slow
def test_one_device_mesh_from_the_command_line(capfd, monkeypatch):
    # The command's wiring, in this process (a child would spend its time starting jax): capfd reads the file
    # descriptors, so XLA's own messages on stderr count too. The chapter's bare-MLP step (a third of the
    # compile of fsdp_step, which the test above analyses on one device in the library): the same command path.
    from pathlib import Path

    from analyzer.cli import main

    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    returncode = main(["analyze", "examples.chapter:fsdp_mlp_step", "--mesh", "X=1"])
    done = capfd.readouterr()
    assert returncode == 0, done.err[-2000:]
    assert "No collectives" in done.out
    assert len(done.err) < 2000
