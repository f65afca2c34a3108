"""The flash-attention term of the step model (analyzer.analysis.costs.FlashScores; docs/step.md, "Flash
attention"): a program whose attention the TPU runs as a flash kernel, analysed through dot-product attention (the
cpu target cannot lower the Pallas kernel), is priced with its S x S scores in VMEM: the scores' bytes leave the
step, the dots' FLOPs stay; without flash nothing changes."""

from __future__ import annotations

import pytest

B, S, H, D = 8, 1024, 4, 64  # batch (8 fake devices, one row each), sequence, heads, head_dim


@pytest.fixture(scope="module")
def lowered():
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    from analyzer.compile.lower import lower

    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    spec = NamedSharding(mesh, P("data", None, None, None))
    q = jax.ShapeDtypeStruct((B, S, H, D), jnp.bfloat16, sharding=spec)

    def attention(q, k, v):
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / D ** 0.5
        mask = jnp.tril(jnp.ones((S, S), bool))
        probs = jax.nn.softmax(jnp.where(mask, scores, -1e9).astype(jnp.float32), axis=-1).astype(q.dtype)
        return jnp.einsum("bhqk,bkhd->bqhd", probs, v)

    def step(q, k, v):  # the forward and the backward's gradients of Q, K, V
        return jax.value_and_grad(lambda q, k, v: attention(q, k, v).astype(jnp.float32).sum(), argnums=(0, 1, 2))(q, k, v)

    return lower(step, q, q, q, mesh=mesh)


@pytest.fixture(scope="module")
def reports(lowered):
    from analyzer.pipeline import analyze_lowered

    return {flash: analyze_lowered(lowered, hardware="tpu-v6e", flash_attention=flash) for flash in (False, True)}


def _on_scores(report) -> tuple[float, float]:
    """(seconds of the step's instructions other than dots that read or write the scores: the softmax's chain, the
    mask, the converts; FLOPs of the step's dots)."""
    from analyzer.analysis.costs import flash_scores

    scores = flash_scores(report.analysis.dots)
    costs = report.analysis.costs
    seconds = flops = 0.0
    for span in report.analysis.step.spans:
        inst = span.instruction
        if span.track != "compute" or inst is None:
            continue
        dot = costs.dot(span.computation, span.name)
        if dot is not None:
            flops += dot.flops
        elif scores.touches(inst):
            seconds += span.seconds
    return seconds, flops


def test_the_scores_are_found_from_the_dots(reports):
    from analyzer.analysis.costs import flash_scores

    scores = flash_scores(reports[False].analysis.dots)
    assert scores is not None and scores.lengths == {S}
    # one chip's scores: its batch row, every head, S x S
    assert scores.elements == {(B // 8) * H * S * S}
    assert reports[False].analysis.costs.flash is None  # found only when asked


def test_flash_removes_the_scores_bytes_and_keeps_the_dots_flops(reports):
    plain, flash = reports[False], reports[True]
    plain_chain, plain_flops = _on_scores(plain)
    flash_chain, flash_flops = _on_scores(flash)
    assert flash_flops == pytest.approx(plain_flops) and flash_flops > 0
    assert flash.totals.model_flops == plain.totals.model_flops
    assert flash.totals.matmul_seconds == pytest.approx(plain.totals.matmul_seconds)
    assert plain_chain > 0 and flash_chain == 0  # the softmax on the scores: through HBM, then in VMEM
    assert flash.totals.step_seconds < plain.totals.step_seconds - plain_chain
    assert flash.totals.memory_bound_seconds < plain.totals.memory_bound_seconds - plain_chain
    assert flash.analysis.flash_attention and any("flash kernel" in n for n in flash.notes)


def test_a_score_dot_moves_only_its_other_operands(reports):
    # QK^T reads Q and K and writes the scores, PV reads the probabilities and V: as the kernel's, each moves only
    # what is not the scores through HBM, and its FLOPs run at the MXU's rate (padded to its tiles), as without flash.
    from analyzer.analysis.costs import flash_scores

    plain, flash = reports[False], reports[True]
    costs, hw = flash.analysis.costs, flash.analysis.hardware
    module = flash.analysis.module
    scores = flash_scores(flash.analysis.dots)
    seen = 0
    for d in flash.analysis.dots:
        inst = d.instruction
        if not scores.touches(inst):
            continue
        comp = module.by_name[d.computation]
        cost = costs.dot_cost(d)
        moved = sum(o.shape.byte_size for o in inst.operands if not scores.holds(o.shape)) + (
            0 if scores.holds(inst.shape) else inst.shape.byte_size)
        assert moved < costs.hbm_bytes(inst) / 2
        seconds, _ = costs.op_time(comp, inst)
        assert seconds == pytest.approx(max(d.flops * cost.padding / hw.flops_per_second(d.dtype),
                                            moved / hw.hbm_rate) + cost.fill_seconds)
        assert seconds < plain.analysis.costs.op_time(comp, inst)[0]
        seen += 1
    assert seen == 6  # forward QK^T and PV; backward dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q


def test_without_flash_nothing_changes(lowered, reports):
    from analyzer.pipeline import analyze_lowered

    again = analyze_lowered(lowered, hardware="tpu-v6e")  # lowered.flash_attention is False: the default
    assert not again.analysis.flash_attention
    assert again.to_json() == reports[False].to_json()
    assert not any("flash kernel" in n for n in again.notes)


def test_the_lowered_fact_turns_the_term_on(lowered, reports):
    from dataclasses import replace

    from analyzer.pipeline import analyze_lowered

    report = analyze_lowered(replace(lowered, flash_attention=True), hardware="tpu-v6e")
    assert report.totals.step_seconds == reports[True].totals.step_seconds


def test_no_attention_no_term():
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    from analyzer.compile.lower import lower
    from analyzer.pipeline import analyze_lowered

    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    x = jax.ShapeDtypeStruct((64, 256), jnp.float32, sharding=NamedSharding(mesh, P("data", None)))
    w = jax.ShapeDtypeStruct((256, 256), jnp.float32, sharding=NamedSharding(mesh, P()))
    low = lower(lambda x, w: x @ w, x, w, mesh=mesh)
    plain, flash = (analyze_lowered(low, hardware="tpu-v6e", flash_attention=f) for f in (False, True))
    assert flash.analysis.costs.flash is None and flash.totals.step_seconds == plain.totals.step_seconds
    assert any("no attention scores were found" in n for n in flash.notes)
