"""The one FLOPs count (analyzer.analysis.dots): dots and convolutions from their dimension numbers, the same
on every target.

The TPU compiler spells most dots as `convolution`s: a plain matmul as `bf_io->bf`, a weight gradient as a
window over the contracted token dim (`0fb_0io->bf0`), and a dot's batch dims as spatial dims dilated so
that each output position reads one input position (`window={size=4x2 stride=3x1 lhs_dilate=4x2}`). Each
figure below is computed by hand from the shapes (2 x multiply-adds), and the cpu and TPU compiles of the
same program must agree (within 10% per step; here they agree exactly).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.analysis.dots import batch_dims, contracting_dims, dot_flops, extract_dots
from analyzer.analysis.graph import CallGraph
from analyzer.hlo.parser import parse_hlo

ROOT = Path(__file__).resolve().parents[2]
TPU_FIXTURE = ROOT / "fixtures/tpu-v5e-2x4/X2_Y4/fsdp_mlp_step.final.hlo"
CPU_FIXTURE = ROOT / "fixtures/cpu/X2_Y4/fsdp_mlp_step.spmd.hlo"


def _flops_per_step(path: Path) -> float:
    module = parse_hlo(path.read_text())
    return sum(d.flops * d.count for d in extract_dots(module, CallGraph.build(module)))


def _one(text: str):
    module = parse_hlo(text)
    return next(i for c in module.computations for i in c.instructions if i.opcode in ("dot", "convolution"))


def test_every_tpu_matmul_is_counted_from_its_convolution():
    """fsdp_mlp_step on v5e:2x4: 6 matmuls per layer, all convolutions; each one is In[4*32 tokens, 256] x
    W[256, 1024] on one chip: 2 x 128 x 256 x 1024 = 67,108,864 FLOPs (the old rules-side count gave 0)."""
    module = parse_hlo(TPU_FIXTURE.read_text())
    dots = extract_dots(module, CallGraph.build(module))
    assert len(dots) == 6 and {d.instruction.opcode for d in dots} == {"convolution"}
    for d in dots:
        assert d.flops == 2 * (4 * 32) * 256 * 1024
        assert d.count == 4  # 4 scanned layers


def test_cpu_and_tpu_fixtures_count_the_same_flops():
    assert _flops_per_step(TPU_FIXTURE) == _flops_per_step(CPU_FIXTURE) == 6 * 4 * 2 * 128 * 256 * 1024


def test_weight_gradient_convolution_contracts_its_window():
    """`0fb_0io->bf0` with window 4: the 4 x 32 tokens are contracted (spatial 0 of size 4 and the feature
    dim of 32): out [1024, 256] x 128 tokens."""
    inst = _one("""HloModule m
ENTRY e {
  a = bf16[4,32,1024]{2,1,0} parameter(0)
  b = bf16[4,32,256]{2,1,0} parameter(1)
  ROOT c = bf16[1024,256,1]{1,0,2} convolution(a, b), window={size=4}, dim_labels=0fb_0io->bf0
}
""")
    flops, contracting = dot_flops(inst)
    assert flops == 2 * 1024 * 256 * (4 * 32)
    assert contracting == (0, 1) and contracting_dims(inst, 1) == (0, 1)


def test_dilated_convolution_is_a_batched_dot():
    """The attention scores of the issue: q, k [B=4, S=1024, H=2, K=64] per chip -> [4, 2, 1024, 1024].
    The batch dims B and H are spatial dims with lhs_dilate = window = their size, so each output position
    reads one input position: 2 x (4 x 2 x 1024 x 1024) x 64 FLOPs, not x (4 x 2) more (the old count, 8x
    too high here and 64x on the issue's 8 x 8 batch)."""
    inst = _one("""HloModule m
ENTRY e {
  q = f32[4,1024,2,64]{3,2,1,0} parameter(0)
  k = f32[4,1024,2,64]{3,2,1,0} parameter(1)
  ROOT s = f32[4,2,1024,1024]{3,2,1,0} convolution(q, k), window={size=4x2 stride=3x1 lhs_dilate=4x2}, dim_labels=0b1f_0o1i->01bf
}
""")
    flops, contracting = dot_flops(inst)
    assert flops == 2 * (4 * 2 * 1024 * 1024) * 64
    assert contracting == (3,) and batch_dims(inst, 0) == (0, 2)


def test_plain_convolution_counts_every_tap_inside_the_input():
    """A real 1-D convolution, 10 inputs, window 3, no padding: 8 outputs x 3 taps x 16 input features x
    32 output features x batch 2 (padding taps that read zeros are not FLOPs)."""
    inst = _one("""HloModule m
ENTRY e {
  x = f32[2,10,16]{2,1,0} parameter(0)
  w = f32[3,16,32]{2,1,0} parameter(1)
  ROOT y = f32[2,8,32]{2,1,0} convolution(x, w), window={size=3}, dim_labels=b0f_0io->b0f
}
""")
    assert dot_flops(inst)[0] == 2 * 2 * 8 * 32 * 16 * 3
    padded = _one("""HloModule m
ENTRY e {
  x = f32[2,10,16]{2,1,0} parameter(0)
  w = f32[3,16,32]{2,1,0} parameter(1)
  ROOT y = f32[2,10,32]{2,1,0} convolution(x, w), window={size=3 pad=1_1}, dim_labels=b0f_0io->b0f
}
""")
    assert dot_flops(padded)[0] == 2 * 2 * 32 * 16 * (10 * 3 - 2)  # the two edge outputs miss one tap each


def test_grouped_convolution_counts_the_kernel_features_once():
    """feature_group_count = 4: the kernel's input features (8) are already per group; 2 x out x 8 x 3."""
    inst = _one("""HloModule m
ENTRY e {
  x = f32[1,5,32]{2,1,0} parameter(0)
  w = f32[3,8,32]{2,1,0} parameter(1)
  ROOT y = f32[1,3,32]{2,1,0} convolution(x, w), window={size=3}, dim_labels=b0f_0io->b0f, feature_group_count=4
}
""")
    assert dot_flops(inst)[0] == 2 * (1 * 3 * 32) * 8 * 3


def test_rules_ask_the_analysis_for_a_dots_flops_and_time():
    """No second FLOPs count and no second time: the rules read a dot's FLOPs from its `Dot` record and its seconds
    from the report's `ProgramCosts` (analyzer.analysis.costs), the object the step model and the dots table ask."""
    import inspect

    from analyzer.pipeline import analyze_hlo
    from analyzer.rules import compute, matmul
    from analyzer.rules.facts import Facts

    for module in (compute, matmul):
        source = inspect.getsource(module)
        assert "flops_per_second" not in source and "dot_flops(" not in source, module.__name__
    report = analyze_hlo(CPU_FIXTURE.read_text(), mesh="X=2,Y=4")
    facts = Facts.from_report(report)
    assert facts.costs is report.analysis.costs
    records = report.analysis.dots
    assert records and list(report.dots["seconds"]) == [facts.costs.dot_cost(d).peak_seconds for d in records]
    assert report.totals.matmul_seconds == pytest.approx(
        sum(facts.costs.dot_cost(d).peak_seconds * d.count for d in records if not d.branch))


# ---------------------------------------------------------------------------------- cpu vs TPU, compiled
TPU = "tpu:v5e:2x4"
PROGRAMS = ["matmul_case1", "matmul_case2", "matmul_case3", "matmul_case3_rs", "matmul_case4",
            "dp_step", "fsdp_step", "tp_step", "fsdp_tp_step", "ep_step",
            "fsdp_mlp_step", "tp_mlp_step", "fsdp_tp_mlp_step"]


def _attention_block(mesh):
    """Scaled dot-product attention of the issue: q, k, v [B=8, S=1024, H=8, K=64] f32, B over X, H over Y."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    def attention(q, k, v):
        weights = jax.nn.softmax(jnp.einsum("bshk,bthk->bhst", q, k) / 8.0, axis=-1)
        return jnp.einsum("bhst,bthk->bshk", weights, v)

    x = jax.ShapeDtypeStruct((8, 1024, 8, 64), jnp.float32, sharding=NamedSharding(mesh, P("X", None, "Y", None)))
    return jax.jit(attention), (x, x, x)


def _scanned_transformer(mesh):
    """The template transformer (analyzer.compile.models), FSDP+TP, 4 scanned layers, S=64: the scan, the
    attention and the sharded matmuls of a real step, at a size the TPU compiler takes 3 s CPU for (D=512,
    S=256 took 22 s and counts the same dots)."""
    from analyzer.compile.models import TransformerConfig, build

    config = TransformerConfig(d_model=128, d_ff=512, heads=4, kv_heads=4, layers=4, seq=64, batch=8)
    return build(config, "fsdp+tp", mesh)


@pytest.fixture(scope="session")
def extra_analysis():
    """`extra_analysis(name, target)` for the attention block and the scanned transformer, cached."""
    import analyzer
    from analyzer.compile.lower import make_mesh

    cache: dict[tuple[str, str], object] = {}
    builders = {"attention_block": _attention_block, "scanned_transformer": _scanned_transformer}

    def get(name: str, target: str):
        if (name, target) not in cache:
            mesh = make_mesh({"X": 4, "Y": 2})
            fn, args = builders[name](mesh)
            cache[(name, target)] = analyzer.analyze(fn, *args, mesh=mesh, target=target)
        return cache[(name, target)]

    return get


def _close(cpu: float, tpu: float) -> None:
    assert cpu > 0
    assert tpu == pytest.approx(cpu, rel=0.10), f"cpu {cpu:.4g} FLOPs/step, tpu {tpu:.4g}"


@pytest.mark.slow
@pytest.mark.tpu
@pytest.mark.parametrize("name", PROGRAMS)
def test_cpu_and_tpu_flops_agree_on_the_chapter(analysis, tpu_reason, name):
    if tpu_reason:
        pytest.skip(tpu_reason)
    _close(analysis(name, "xy", "cpu").totals.flops, analysis(name, "xy", TPU).totals.flops)


@pytest.mark.slow
@pytest.mark.tpu
@pytest.mark.parametrize("name", ["attention_block", "scanned_transformer"])
def test_cpu_and_tpu_flops_agree_with_attention(extra_analysis, tpu_reason, name):
    if tpu_reason:
        pytest.skip(tpu_reason)
    cpu, tpu = extra_analysis(name, "cpu"), extra_analysis(name, TPU)
    _close(cpu.totals.flops, tpu.totals.flops)
    if name == "attention_block":
        # per chip: B/X = 2, H/Y = 4; scores and output each 2 x (2 x 4 x 1024 x 1024) x 64 FLOPs
        assert cpu.totals.flops == 2 * (2 * 2 * 4 * 1024 * 1024 * 64)
