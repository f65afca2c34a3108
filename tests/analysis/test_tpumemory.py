"""The TPU-memory estimate of the cpu target (issue 25 item 4): layouts, liveness, loops, outputs."""

from __future__ import annotations

from analyzer.analysis.tpumemory import estimate_tpu_memory, tpu_bytes
from analyzer.hlo.parser import parse_hlo
from analyzer.hlo.shapes import decode_shape


def test_tiles_pad_the_two_minor_dimensions_choosing_the_cheaper_layout():
    assert tpu_bytes(decode_shape("bf16[4,32,8,32]")) == 4 * 32 * 8 * 128 * 2  # 32 lanes -> 128
    assert tpu_bytes(decode_shape("bf16[4,1024,32]")) == 4 * 1024 * 32 * 2  # libtpu's {1,2,0}: no padding
    assert tpu_bytes(decode_shape("f32[]")) == 512
    assert tpu_bytes(decode_shape("(f32[128,128], token[])")) == 128 * 128 * 4


def test_fused_elementwise_ops_make_no_buffer_and_dead_buffers_are_freed():
    m = parse_hlo("""HloModule m
ENTRY e {
  a = f32[256,256] parameter(0)
  b = f32[256,256] dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  e = f32[256,256] exponential(b)
  c = f32[256,256] dot(e, e), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d = f32[256,256] dot(c, c), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT r = f32[256,256] add(d, d)
}""")
    est = estimate_tpu_memory(m)
    # b and c are temporaries, never live together with e (fused into c's dot); d is the output
    assert est.temp_bytes == 2 * 256 * 256 * 4
    assert est.argument_bytes == est.output_bytes == 256 * 256 * 4


def test_an_all_reduce_of_the_output_reuses_its_operand_and_aliases_count():
    m = parse_hlo("""HloModule m, input_output_alias={ {}: (0, {}, may-alias) }
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY e {
  a = f32[512,256] parameter(0)
  b = f32[256,256] parameter(1)
  c = f32[512,256] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT r = f32[512,256] all-reduce(c), replica_groups={{0,1}}, to_apply=add
}""")
    est = estimate_tpu_memory(m)
    assert est.temp_bytes == 0  # the dot writes into the output buffer the all-reduce reduces in place
    assert est.alias_bytes == 512 * 256 * 4


def test_a_loop_counts_its_state_once_and_sinks_invariant_constants():
    m = parse_hlo("""HloModule m
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
cond {
  p = (s32[], f32[8,128,128], f32[128,128]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(8)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[8,128,128], f32[128,128]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  stack = f32[8,128,128] get-tuple-element(p), index=1
  mask = f32[128,128] get-tuple-element(p), index=2
  h = f32[128,128] dot(mask, mask), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  h3 = f32[1,128,128] reshape(h)
  z = s32[] constant(0)
  upd = f32[8,128,128] dynamic-update-slice(stack, h3, i, z, z)
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[8,128,128], f32[128,128]) tuple(j, upd, mask)
}
ENTRY e {
  zero = s32[] constant(0)
  f = f32[] constant(0)
  init = f32[8,128,128] broadcast(f), dimensions={}
  one = f32[] constant(1)
  mask = f32[128,128] broadcast(one), dimensions={}
  t = (s32[], f32[8,128,128], f32[128,128]) tuple(zero, init, mask)
  w = (s32[], f32[8,128,128], f32[128,128]) while(t), condition=cond, body=body
  s = f32[8,128,128] get-tuple-element(w), index=1
  ROOT r = f32[128,128] reduce(s, f), dimensions={0}, to_apply=add
}
""")
    est = estimate_tpu_memory(m)
    # the stacked state (8 x 64 KiB) and the counter's tile; the body's one 64 KiB dot while it runs; the
    # invariant broadcast mask is sunk into the body; the stack is updated in place
    assert est.temp_bytes == 8 * 128 * 128 * 4 + 512 + 128 * 128 * 4


def test_temporaries_that_fit_in_vmem_leave_hbm_and_a_larger_peak_stays():
    """libtpu keeps a peak that fits in VMEM (less the fusions' scoped 16 MiB) out of HBM (module doc: the
    chapter's fsdp step on v5e, 18.4 MiB of temporaries, got 1.0 MiB of HBM temporaries)."""
    from analyzer.analysis.tpumemory import SCOPED_VMEM_BYTES, TpuMemory, vmem_budget
    from analyzer.theory.hardware import load_hardware

    budget = vmem_budget(load_hardware("tpu-v5e"))
    assert budget == (128 << 20) - SCOPED_VMEM_BYTES  # v5e: 128 MiB per TensorCore
    small = TpuMemory(argument_bytes=1 << 20, output_bytes=1 << 20, alias_bytes=0, temp_bytes=18 << 20)
    kept = small.in_vmem(budget)
    assert (kept.temp_bytes, kept.vmem_temp_bytes) == (0, 18 << 20)
    assert kept.as_memory()["vmem_temp_bytes"] == 18 << 20 and kept.total_bytes == 2 << 20
    edge = TpuMemory(argument_bytes=0, output_bytes=0, alias_bytes=0, temp_bytes=budget + 1)
    assert edge.in_vmem(budget) == edge and "vmem_temp_bytes" not in edge.as_memory()
    assert small.in_vmem(vmem_budget(load_hardware("h100"))) == small  # no VMEM in a GPU's spec: nothing moves


def test_the_cpu_target_report_says_where_the_temporaries_live():
    """The report's memory on the cpu target for a TPU: the peak in VMEM, stated in a note from its fields."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import analyzer
    from analyzer.compile.lower import make_mesh
    from analyzer.units import format_bytes

    mesh = make_mesh("X=1")
    a = jax.ShapeDtypeStruct((256, 256), jnp.float32, sharding=NamedSharding(mesh, P()))
    report = analyzer.analyze(jax.jit(lambda x: jnp.tanh(x @ x) @ x), a, mesh="X=1", hardware="tpu-v5e")
    assert report.memory["temp_bytes"] == 0 and report.memory["vmem_temp_bytes"] > 0
    (note,) = [n for n in report.notes if "VMEM" in n]
    assert f"({format_bytes(report.memory['vmem_temp_bytes'])})" in note and "112 MiB of a tpu-v5e" in note


def test_a_flash_kernels_scores_and_their_stack_make_no_hbm_buffer():
    """Attention lowered as dot-product that the TPU runs as flash: the scores [B, S, S] and a stack of them for
    the backward stay in VMEM; Q, K and the outputs do not."""
    from analyzer.analysis.costs import FlashScores

    m = parse_hlo("""HloModule m
add {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT c = bf16[] add(a, b)
}
ENTRY e {
  q = bf16[2,512,64] parameter(0)
  k = bf16[2,512,64] parameter(1)
  s = bf16[2,512,512] dot(q, k), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}
  x = bf16[2,512,512] exponential(s)
  st = bf16[4,2,512,512] custom-call(x), custom_call_target="stack"
  o = bf16[2,512,64] dot(x, q), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  z = bf16[] constant(0)
  r = bf16[4,2,512] reduce(st, z), dimensions={3}, to_apply=add
  ROOT t = (bf16[2,512,64], bf16[4,2,512]) tuple(o, r)
}""")
    flash = FlashScores(lengths=frozenset({512}), elements=frozenset({2 * 512 * 512}))
    plain, held = estimate_tpu_memory(m), estimate_tpu_memory(m, flash)
    scores = 2 * 512 * 512 * 2
    assert plain.temp_bytes == scores + 4 * scores  # s is read by o after the stack is made: both live then
    assert held.temp_bytes == 0
    assert (held.argument_bytes, held.output_bytes) == (plain.argument_bytes, plain.output_bytes)


_ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
"""


def test_an_instruction_that_frees_memory_runs_before_a_loop_it_does_not_need():
    """The loss's reduction printed after the backward loop (MaxText's Llama 3.1 70B step): it is the last reader
    of the logits, so it runs as soon as they exist, and they are not live while the loop runs: the estimate is
    the one of the same program printed with the reduction before the loop."""
    loop = """cond {
  p = (s32[], f32[256,256]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[256,256]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  h = f32[256,256] get-tuple-element(p), index=1
  d = f32[256,256] dot(h, h), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  e = f32[256,256] dot(d, h), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[256,256]) tuple(j, e)
}
"""
    head = """ENTRY e {
  x = f32[256,256] parameter(0)
  logits = f32[256,1024] dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  g = f32[256,256] dot(logits, x), lhs_contracting_dims={1}, rhs_contracting_dims={1}
  zero = f32[] constant(0)
"""
    loss = "  loss = f32[] reduce(logits, zero), dimensions={0,1}, to_apply=add\n"
    run = """  z = s32[] constant(0)
  init = (s32[], f32[256,256]) tuple(z, g)
  w = (s32[], f32[256,256]) while(init), condition=cond, body=body
  out = f32[256,256] get-tuple-element(w), index=1
"""
    tail = "  ROOT r = (f32[256,256], f32[]) tuple(out, loss)\n}"
    after = estimate_tpu_memory(parse_hlo("HloModule m\n" + _ADD + loop + head + run + loss + tail))
    before = estimate_tpu_memory(parse_hlo("HloModule m\n" + _ADD + loop + head + loss + run + tail))
    logits = 256 * 1024 * 4
    assert after.temp_bytes == before.temp_bytes
    assert after.temp_bytes < logits + 256 * 256 * 4 * 3  # the logits never live beside the loop's buffers


def test_an_expensive_value_saved_to_a_stack_and_read_again_is_written_to_memory():
    """XLA never duplicates an expensive producer (exp) into several consumers: saved to the loop's stack and summed,
    it is a buffer of its own; a cheap one (a multiply) or an exp read once is fused into its consumers."""
    def module(op):
        return parse_hlo("HloModule m\n" + _ADD + f"""ENTRY e {{
  x = f32[512,512] parameter(0)
  st = f32[4,512,512] parameter(1)
  s = f32[512,512] dot(x, x), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  e = f32[512,512] {op}(s, s)
  e3 = f32[1,512,512] reshape(e)
  i = s32[] constant(0)
  upd = f32[4,512,512] dynamic-update-slice(st, e3, i, i, i)
  zero = f32[] constant(0)
  sum = f32[512] reduce(e, zero), dimensions={{1}}, to_apply=add
  ROOT r = (f32[4,512,512], f32[512]) tuple(upd, sum)
}}""".replace("(s, s)", "(s)" if op == "exponential" else "(s, s)"))
    block = 512 * 512 * 4
    expensive, cheap = estimate_tpu_memory(module("exponential")), estimate_tpu_memory(module("multiply"))
    assert expensive.temp_bytes == cheap.temp_bytes + block  # the exp's own buffer beside the dot's
    assert cheap.temp_bytes == block  # the dot's output, read through the fused multiply
    from analyzer.analysis.tpumemory import _materialised

    assert _materialised(module("exponential").entry) == {"e"}
