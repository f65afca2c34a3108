"""The pipeline bubble in the predicted step (analyzer.analysis.step, docs/step.md "Pipeline bubble").

A GPipe-style pipeline written as MaxText writes it: one SPMD loop of microbatches + stages - 1 iterations, each
device running its stage every iteration and passing its output on with a ppermute over `stage`. The bubble
read from the program (the permute's axis, the loop's trip count) must be the schedule's own
(stages - 1) / (microbatches + stages - 1) of each pipeline loop; a ring over the same axis (as many iterations
as devices, ring attention's shape) is not a pipeline.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from analyzer import analyze

STAGES, DATA, WIDTH, BATCH = 4, 2, 128, 8


def _program(iterations: int, microbatches: int):
    mesh = jax.make_mesh((STAGES, DATA), ("stage", "data"))
    perm = [(k, (k + 1) % STAGES) for k in range(STAGES)]

    def per_device(w, xs):  # w: this stage's [1, D, D]; xs: [M, B/data, D]
        def step(carry, i):
            state, outs = carry
            first = jax.lax.axis_index("stage") == 0
            x = jnp.where(first, xs[jnp.minimum(i, microbatches - 1)], state)
            y = jnp.tanh(x @ w[0])
            outs = outs.at[jnp.clip(i - (STAGES - 1), 0, microbatches - 1)].set(y)
            return (jax.lax.ppermute(y, "stage", perm), outs), None

        (_, outs), _ = jax.lax.scan(step, (jnp.zeros_like(xs[0]), jnp.zeros_like(xs)), jnp.arange(iterations))
        return outs[None]

    def fn(w, xs):
        return jax.shard_map(per_device, mesh=mesh, in_specs=(P("stage"), P(None, "data")),
                             out_specs=P("stage", None, "data"), check_vma=False)(w, xs)

    w = jax.ShapeDtypeStruct((STAGES, WIDTH, WIDTH), jnp.float32, sharding=NamedSharding(mesh, P("stage")))
    xs = jax.ShapeDtypeStruct((microbatches, BATCH, WIDTH), jnp.float32,
                              sharding=NamedSharding(mesh, P(None, "data")))
    return jax.jit(fn), (w, xs), mesh


@pytest.fixture(scope="module")
def pipelined():
    microbatches = 8
    fn, args, mesh = _program(microbatches + STAGES - 1, microbatches)
    return analyze(fn, *args, mesh=mesh), microbatches


def test_the_bubble_is_the_schedules_own_share_of_the_pipeline_loop(pipelined):
    report, microbatches = pipelined
    step = report.analysis.step
    assert len(step.pipelines) == 1, step.pipelines
    loop, stages, iterations, bubble, loop_seconds = step.pipelines[0]
    assert (stages, iterations) == (STAGES, microbatches + STAGES - 1)  # read from the permute and the trip count
    assert bubble / loop_seconds == pytest.approx((STAGES - 1) / (microbatches + STAGES - 1), rel=1e-9)
    assert step.bubble_seconds == pytest.approx(bubble) and 0 < bubble < step.step_seconds
    assert report.totals.bubble_seconds == pytest.approx(step.bubble_seconds)


def test_the_bubble_is_in_the_json_totals(pipelined):
    import json

    report, _ = pipelined
    assert json.loads(report.to_json())["totals"]["bubble_seconds"] == pytest.approx(report.totals.bubble_seconds)


def test_a_ring_of_as_many_iterations_as_devices_is_no_pipeline():
    fn, args, mesh = _program(STAGES, STAGES)  # ring attention's shape: S iterations around S devices
    report = analyze(fn, *args, mesh=mesh)
    assert report.analysis.step.pipelines == () and report.totals.bubble_seconds == 0.0
    assert "bubble_seconds" not in report.to_json()
