"""Host offload (analyzer.analysis.offload; docs/step.md, "Host offload"): the copies a remat policy makes between
HBM and host memory, read from the program jax handed XLA, priced on the host link and overlapped with the loop
iteration that makes them."""

from __future__ import annotations

import dataclasses

import pytest

L, B, D = 4, 8 * 4096, 256  # layers, rows (4096 per fake device), width: [B, D] f32 per layer copied out and back


@pytest.fixture(scope="module")
def offloaded():
    """A scanned layer whose remat policy offloads one activation to pinned host memory, lowered on the cpu target
    with jax's TPU lowering of `device_put` (as `hlo-analyzer maxtext` lowers MaxText's step), and the same program
    lowered plainly."""
    import jax
    import jax.numpy as jnp
    from jax.ad_checkpoint import checkpoint_name
    from jax.sharding import NamedSharding, PartitionSpec as P

    from analyzer.compile.lower import lower
    from analyzer.integrations.maxtext import _host_placements_kept

    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    policy = jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[], names_which_can_be_offloaded=["hidden"], offload_src="device",
        offload_dst="pinned_host")

    def layer(x, w):
        h = checkpoint_name(jnp.tanh(x @ w), "hidden")
        return jnp.tanh(h @ w)

    def loss(x, ws):
        def body(c, w):
            return jax.checkpoint(layer, policy=policy)(c, w), None

        y, _ = jax.lax.scan(body, x, ws)
        return y.sum()

    def make_step():  # a new function each time: jax caches a function's lowering
        def step(x, ws):
            return jax.grad(loss, argnums=1)(x, ws)

        return step

    x = jax.ShapeDtypeStruct((B, D), jnp.float32, sharding=NamedSharding(mesh, P("data", None)))
    ws = jax.ShapeDtypeStruct((L, D, D), jnp.float32, sharding=NamedSharding(mesh, P()))
    with _host_placements_kept() as kept:
        with_copies = lower(make_step(), x, ws, mesh=mesh)
    plain = lower(make_step(), x, ws, mesh=mesh)
    return kept, with_copies, plain


def test_the_cpu_lowering_keeps_the_offload_only_inside_the_context(offloaded):
    from jax._src import dispatch
    from jax._src.interpreters import mlir

    kept, with_copies, plain = offloaded
    assert kept
    assert with_copies.global_hlo.count('_xla_buffer_placement="pinned_host"') == 1
    assert "pinned_host" not in plain.global_hlo  # jax's own cpu lowering drops it, and it is put back after
    assert dispatch.device_put_p not in mlir._platform_specific_lowerings["cpu"]
    assert _instructions(with_copies.spmd_hlo) == _instructions(plain.spmd_hlo)  # XLA:CPU drops the annotations


def _instructions(text: str) -> list[str]:
    """The instruction lines of an HLO text without their metadata (the two programs differ in source lines)."""
    import re

    return [re.sub(r", metadata=\{[^}]*\}", "", line) for line in text.splitlines() if " = " in line]


def test_copies_are_priced_on_the_host_link_and_bound_the_layer(offloaded):
    from analyzer.analysis.offload import HOST_TRACK
    from analyzer.pipeline import analyze_lowered
    from analyzer.render._common import step_breakdown
    from analyzer.theory.hardware import load_hardware

    _, with_copies, plain = offloaded
    hw = load_hardware("tpu-v6e")
    report = analyze_lowered(with_copies, hardware=hw)
    before = analyze_lowered(plain, hardware=hw)
    per_layer = B // 8 * D * 4  # one chip's rows of the [B, D] f32 activation
    seconds = 2 * L * per_layer / hw.pcie_bandwidth_per_chip  # out in the forward loop, back in the backward
    step = report.analysis.step
    assert step.busy[HOST_TRACK] == pytest.approx(seconds)
    # a layer of this size computes for less than its copy takes: each iteration lasts as long as its copy
    assert step.exposed_by_axis[HOST_TRACK] > 0
    assert report.totals.step_seconds > before.totals.step_seconds
    assert report.totals.step_seconds >= seconds
    assert HOST_TRACK not in before.analysis.step.busy and not any("Host offload" in n for n in before.notes)
    assert any(n.startswith("Host offload: the program copies") for n in report.notes)
    parts = step_breakdown(report)
    assert sum(p.seconds for p in parts if p.on_step) == pytest.approx(report.totals.step_seconds)
    assert any(HOST_TRACK in p.label for p in parts if p.on_step)
    # every report format shows the waits as a part of the step; JSON keeps them
    from analyzer.analysis.report import report_from_dict, report_to_dict
    from analyzer.formats import names
    from analyzer.render import render

    for fmt in names("report"):
        out = render(report, fmt)
        assert fmt not in ("text", "markdown", "html") or HOST_TRACK in out, fmt
    from analyzer.render.trace import trace_events

    events = trace_events(report)["traceEvents"]
    assert any(e.get("cat") == "transfer" for e in events)  # the copies on their own track of the trace
    again = report_from_dict(report_to_dict(report))
    assert again.totals.exposed_by_axis[HOST_TRACK] == pytest.approx(step.exposed_by_axis[HOST_TRACK])
    # a host link four times as fast (nothing else changed): the same copies take a quarter of the time
    fast_hw = dataclasses.replace(hw, pcie_bandwidth_per_chip=4 * hw.pcie_bandwidth_per_chip)
    fast = analyze_lowered(with_copies, hardware=fast_hw)
    assert fast.analysis.step.busy[HOST_TRACK] == pytest.approx(seconds / 4)


def test_the_offloaded_stack_is_left_out_of_the_memory_estimate(offloaded):
    """The forward loop stacks the offloaded activation in host memory and the backward loop takes it apart there
    (`offload.host_loop_state`): the TPU estimate's temporaries lose exactly that stack, L x one chip's [B, D]."""
    from analyzer.analysis.offload import host_loop_state
    from analyzer.hlo.parser import parse_hlo
    from analyzer.pipeline import analyze_lowered

    _, with_copies, plain = offloaded
    report, before = analyze_lowered(with_copies, hardware="tpu-v6e"), analyze_lowered(plain, hardware="tpu-v6e")
    state = host_loop_state(parse_hlo(with_copies.global_hlo, lenient=True), report.analysis.module,
                            report.analysis.graph)
    assert len(state) == 2 and all(len(e) == 1 for e in state.values())  # the forward loop's stack, the backward's
    assert host_loop_state(parse_hlo(plain.global_hlo, lenient=True), before.analysis.module,
                           before.analysis.graph) == {}

    def temps(r):
        return r.memory["temp_bytes"] + r.memory.get("vmem_temp_bytes", 0)

    assert temps(before) - temps(report) == L * (B // 8) * D * 4
    assert any("offloads kept in host memory" in n for n in report.notes)


# ---------------------------------------------------------------------------------------------------- MaxText's step
def _v6e_row(name: str):
    from tests.analysis.test_measured_v6e import v6e_fixtures

    return next(r for r in v6e_fixtures.ROWS if r.name == name), v6e_fixtures


def test_maxtexts_remat_offload_is_read_from_its_program():
    # Llama 3.1 8B on v6e-256 (fixtures/maxtext_v6e): remat_policy=custom with decoder_layer_input, query_proj,
    # key_proj, value_proj and out_proj offloaded; 4 x 8192 tokens per chip; d_model 4096, 32 query and 8 KV
    # heads of 128: 4096 + 4096 + 1024 + 1024 + 4096 = 14,336 bf16 values per token copied out per layer, and back.
    from analyzer.analysis.graph import CallGraph
    from analyzer.analysis.offload import host_offload
    from analyzer.hlo.parser import parse_hlo
    from analyzer.theory.hardware import load_hardware

    row, fx = _v6e_row("llama3.1-8b-v6e-256")
    lowered = fx.lowered_from_fixtures(row.name)
    before = parse_hlo(lowered.global_hlo, lenient=True)
    module = parse_hlo(lowered.spmd_hlo, lenient=True)
    hw = load_hardware("tpu-v6e")
    sizes = dict(zip(lowered.mesh.axis_names, lowered.mesh.axis_sizes))
    off = host_offload(before, module, CallGraph.build(module), hw, sizes, 256)
    assert off is not None
    per_layer = 4 * 8192 * 14336 * 2
    out = [t for t in off.transfers if t.direction == "to_host"]
    back = [t for t in off.transfers if t.direction == "to_device"]
    assert len(out) == len(back) == 5
    assert all(t.sharded and t.shards == 256 and t.executions == 32 for t in off.transfers)
    assert sum(t.bytes for t in out) == sum(t.bytes for t in back) == per_layer
    assert off.bytes_per_step("to_host") == 32 * per_layer
    # one loop of the partitioned program each way (the forward and the backward scan), nothing outside them
    assert sorted(off.per_iteration.values()) == pytest.approx([per_layer / hw.pcie_bandwidth_per_chip] * 2)
    assert off.outside_seconds == 0 and not off.unmatched


@pytest.mark.slow
def test_maxtexts_copies_hide_under_the_layer_unless_the_link_is_slower():
    # At v6e's host link (3.2e10 B/s per chip) a forward layer of Llama 3.1 8B (31.5 ms) outlasts its copies
    # (29.4 ms): nothing waits. At half that rate each forward layer waits for its copies (58.7 ms); the backward
    # layer (76 ms) still hides them. A what-if on the same program, not a calibration.
    from analyzer.analysis.offload import HOST_TRACK
    from analyzer.pipeline import analyze_lowered
    from analyzer.theory.hardware import load_hardware

    row, fx = _v6e_row("llama3.1-8b-v6e-256")
    hw = load_hardware("tpu-v6e")
    per_layer = 4 * 8192 * 14336 * 2
    spec = analyze_lowered(fx.lowered_from_fixtures(row.name), hardware=hw, topology=row.topology,
                           flash_attention=True)
    slow_hw = dataclasses.replace(hw, pcie_bandwidth_per_chip=hw.pcie_bandwidth_per_chip / 2)
    slow = analyze_lowered(fx.lowered_from_fixtures(row.name), hardware=slow_hw, topology=row.topology,
                           flash_attention=True)
    assert spec.analysis.step.busy[HOST_TRACK] == pytest.approx(2 * 32 * per_layer / hw.pcie_bandwidth_per_chip)
    assert spec.analysis.step.exposed_by_axis.get(HOST_TRACK, 0.0) == 0.0
    forward = next(e - s for label, s, e in slow.analysis.step.windows if label.startswith("forward layer"))
    assert forward == pytest.approx(per_layer / slow_hw.pcie_bandwidth_per_chip)
    waited = slow.analysis.step.exposed_by_axis[HOST_TRACK]
    assert slow.totals.step_seconds == pytest.approx(spec.totals.step_seconds + waited)
    assert 0.5 < waited < 1.0
