"""The template's remat policies and microbatching (gradient accumulation): checked configs, the same step
as one pass over the whole batch, and the FLOPs and communication each one implies (hand-computed)."""

from __future__ import annotations

import re

import pytest

from analyzer.compile.models import REMAT_POLICIES, TransformerConfig, build
from analyzer.errors import ConfigError, ShardingError

# A bare block (In . W_in . W_out, no attention, no norm), so the dots are two matmuls per layer.
B, S, D, F, L = 16, 16, 64, 128, 3
BARE = dict(d_model=D, d_ff=F, heads=4, kv_heads=2, layers=L, seq=S, batch=B, attention=False, norm=False)


@pytest.mark.parametrize("kwargs, message", [
    ({"remat": "fulll"}, "did you mean 'full'"),
    ({"remat": "nothing"}, "valid remat policies: dots, full, minimal, none"),
    ({"batch": 16, "microbatches": 3}, "batch=16 is not a multiple of microbatches=3"),
    ({"microbatches": 0}, "microbatches must be a positive integer"),
])
def test_config_errors(kwargs, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        TransformerConfig(**kwargs)


def test_a_microbatch_the_data_axes_do_not_divide():
    # 16 / 4 microbatches = 4 sequences per microbatch, over 8 data devices.
    with pytest.raises(ShardingError, match="batch / microbatches divisible by the data axes"):
        build(TransformerConfig(**BARE, microbatches=4), "fsdp", {"data": 8})


@pytest.mark.slow
def test_microbatches_and_remat_compute_the_same_step():
    """Accumulating over microbatches and recomputing activations change how the step runs, not what it
    computes: the loss and the updated parameters equal one pass over the whole batch (f32, to 1e-5)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding

    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "model"))
    results = {}
    for remat, micro in (("none", 1), ("full", 4), ("dots", 2)):
        config = TransformerConfig(**{**BARE, "batch": 32}, dtype="float32", remat=remat, microbatches=micro)
        step, args = build(config, "fsdp+tp", {"data": 4, "model": 2})
        leaves, tree = jax.tree.flatten(args)
        values = [jax.device_put(jax.random.normal(jax.random.PRNGKey(i), leaf.shape, leaf.dtype) * 0.1,
                                 NamedSharding(mesh, leaf.sharding.spec)) for i, leaf in enumerate(leaves)]
        with jax.set_mesh(mesh):
            params, _, loss = step(*jax.tree.unflatten(tree, values))
        results[remat, micro] = (float(loss), jax.tree.leaves(params))
    loss0, params0 = results["none", 1]
    for key, (loss, params) in results.items():
        assert loss == pytest.approx(loss0, rel=1e-5), key
        assert max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(params, params0)) < 1e-5, key


@pytest.fixture(scope="module")
def priced():
    """dp over 8 devices on tpu-v5e: FLOPs per device and collectives for (remat, microbatches)."""
    import analyzer

    out = {}
    for remat, micro in (("none", 1), ("full", 1), ("dots", 1), ("none", 2)):
        step, args = build(TransformerConfig(**BARE, remat=remat, microbatches=micro), "dp", {"data": 8})
        out[remat, micro] = analyzer.analyze(step, *args, mesh={"data": 8}, hardware="tpu-v5e")
    return out


@pytest.mark.slow
def test_remat_flops(priced):
    # Per layer and sequence token: forward x.W_in and h.W_out are 2DF FLOPs each; backward takes twice the
    # forward (the input and the weight gradients): 12DF with everything saved. Full remat recomputes the
    # block's forward, but the backward needs only the output matmul's input h, so XLA recomputes x.W_in
    # and drops the rest: 14DF. `dots` saves both matmul outputs and recomputes only the gelu: 12DF.
    per_device = B * S * D * F * L / 8
    assert priced["none", 1].totals.flops == pytest.approx(12 * per_device, rel=1e-6)
    assert priced["full", 1].totals.flops == pytest.approx(14 * per_device, rel=1e-6)
    assert priced["dots", 1].totals.flops == pytest.approx(12 * per_device, rel=1e-6)
    # What remat buys is memory: fewer activations kept for the backward pass.
    # (the temporaries' peak wherever it lives: these small programs' fit in v5e's VMEM, `vmem_temp_bytes`)
    temp = {k: v.memory["temp_bytes"] + v.memory.get("vmem_temp_bytes", 0) for k, v in priced.items()}
    assert temp["full", 1] < temp["none", 1] and temp["dots", 1] < temp["none", 1]


@pytest.mark.slow
def test_microbatches_repeat_the_gradient_all_reduce(priced):
    # The same FLOPs, in two passes; the dp gradient AllReduce sits in the accumulation loop, so it runs once
    # per microbatch: twice the communication per step.
    one, two = priced["none", 1], priced["none", 2]
    assert two.totals.flops == pytest.approx(one.totals.flops, rel=1e-6)
    assert two.totals.comm_seconds == pytest.approx(2 * one.totals.comm_seconds, rel=1e-6)
    assert set(two.collectives["kind"]) == {"all-reduce"}
