"""The template's knobs for the models of published runs (issue 25 item 5; analyzer.compile.models): each is checked
in the program it compiles to, not in the config alone.

Two tiny language models are compiled once for the module on `data=8` (fsdp): `GATED` (the defaults but a gated
GELU MLP) and `KNOBS` (parallel block, ReLU MLP, f32 weights with bf16 compute, flash attention, 8 heads of
head_dim 16 on d_model 64, an iota embedding tied to the logits). The embedding's sharding is compared on two
meshes, one with a replica `slice` axis (a DCN axis of a two-slice run).
"""

from __future__ import annotations

import inspect
import re

import pytest

from analyzer.compile import models
from analyzer.compile.lower import lower
from analyzer.compile.models import TransformerConfig, build
from analyzer.errors import ConfigError
from analyzer.hlo.parser import parse_hlo

SIZES = dict(d_model=64, d_ff=128, heads=8, kv_heads=4, layers=2, seq=64, batch=16, vocab=128)
GATED = TransformerConfig(**SIZES, mlp="gated_gelu")
KNOBS = TransformerConfig(**SIZES, head_dim=16, block="parallel", mlp="relu", weight_dtype="float32",
                          flash_attention=True, embedding="iota", tied_embedding=True)
MESH = {"data": 8}


# ------------------------------------------------------------------------------------------------ validation
@pytest.mark.parametrize("field, value, message", [
    ("block", "paralel", "block 'paralel': did you mean 'parallel'? valid blocks: parallel, sequential"),
    ("mlp", "gatedsilu", "did you mean 'gated_silu'? valid MLPs: gated_gelu, gated_relu, gated_silu, gelu, relu, "
                         "silu"),
    ("embedding", "one_hot", "valid embeddings: gather, iota"),
    ("embedding_sharding", "pined", "did you mean 'pinned'? valid embedding shardings: pinned, xla"),
    ("weight_dtype", "fp32", "weight_dtype 'fp32': valid weight dtypes: bfloat16, float16, float32 (or \"\": the "
                             "same as dtype)"),
    ("tied_embedding", "yes", "tied_embedding must be true or false, got 'yes'"),
    ("flash_attention", 1, "flash_attention must be true or false, got 1"),
])
def test_a_bad_value_names_the_field_and_the_valid_values(field, value, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        TransformerConfig(**{**SIZES, field: value})


@pytest.mark.parametrize("given, message", [
    (dict(embedding="iota"), "embedding='iota' needs an embedding table: set vocab > 0"),
    (dict(tied_embedding=True), "tied_embedding=True needs an embedding table"),
    (dict(embedding_sharding="pinned"), "embedding_sharding='pinned' needs an embedding table"),
    (dict(block="parallel", attention=False), "block='parallel' adds attention and MLP side by side: it needs "
                                              "attention=True"),
    (dict(flash_attention=True, attention=False), "flash_attention=True marks the attention as a flash kernel: it "
                                                  "needs attention=True"),
])
def test_a_knob_without_the_part_it_needs_is_refused(given, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        TransformerConfig(**given)


def test_the_knobs_are_model_keys_of_a_report_config():
    from analyzer.workflows.reportconfig import parse_report_config

    text = ('strategy = "fsdp"\n[mesh]\ndata = 8\n[model]\nvocab = 128\nblock = "parallel"\nmlp = "relu"\n'
            'weight-dtype = "f32"\ndtype = "bf16"\nembedding = "iota"\ntied-embedding = true\n'
            'embedding-sharding = "pinned"\nflash-attention = true\nhead_dim = 16\nnorm = true\n')
    c = parse_report_config(text, path="cfg.toml").transformer_config()
    assert (c.block, c.mlp, c.weight_dtype, c.dtype, c.embedding, c.tied_embedding, c.embedding_sharding,
            c.flash_attention, c.head_dim) == ("parallel", "relu", "float32", "bfloat16", "iota", True, "pinned",
                                               True, 16)
    with pytest.raises(ConfigError) as info:
        parse_report_config(text.replace('block = "parallel"', 'block = "paralel"'), path="cfg.toml")
    assert info.value.line == 6 and "did you mean 'parallel'" in str(info.value)
    with pytest.raises(ConfigError) as info:
        parse_report_config(text.replace('"f32"', '"f31"'), path="cfg.toml")
    assert info.value.line == 8 and "[model] weight_dtype 'f31'" in str(info.value)


def test_zero_head_dim_and_vocab_are_the_documented_defaults_in_a_report_config():
    from analyzer.workflows.reportconfig import parse_report_config

    text = 'strategy = "fsdp"\n[mesh]\ndata = 8\n[model]\nhead_dim = 0\nvocab = 0\n'
    c = parse_report_config(text, path="cfg.toml").transformer_config()
    assert (c.head_dim, c.vocab) == (0, 0)
    with pytest.raises(ConfigError, match=re.escape("[model] 'head_dim' must be a non-negative integer (0: not "
                                                    "used), got -1")):
        parse_report_config(text.replace("head_dim = 0", "head_dim = -1"), path="cfg.toml")


def test_defaults_are_the_template_as_it_was():
    c = TransformerConfig()
    assert (c.block, c.weight_dtype, c.param_dtype, c.embedding, c.tied_embedding, c.embedding_sharding,
            c.flash_attention, c.gated, c.activation) == ("sequential", "", "bfloat16", "gather", False, "xla",
                                                          False, False, "gelu")


# ------------------------------------------------------------------------------------------------ the programs
def _compile(config: TransformerConfig, strategy: str = "fsdp", mesh: dict | None = None, **roles):
    mesh = mesh or MESH
    step, args = build(config, strategy, mesh, **roles)
    return lower(step, *args, mesh=mesh), args


@pytest.fixture(scope="module")
def gated():
    return _compile(GATED)


@pytest.fixture(scope="module")
def knobs():
    return _compile(KNOBS)


def _forward_block(lowered) -> list:
    """The instructions of the forward pass's layer loop (a while loop whose body, with what it calls, has the
    norm's rsqrt; the backward loop has none without remat), from the program before partitioning."""
    module = parse_hlo(lowered.global_hlo)
    comps = {c.name: c for c in module.computations}

    def reach(name: str, seen: set) -> set:
        if name in seen or name not in comps:
            return seen
        seen.add(name)
        for inst in comps[name]:
            for called in inst.called_computations:
                reach(called, seen)
        return seen

    loops = []
    for comp in module.computations:
        for w in comp.select("while"):
            names = reach(str(w.attr("body")).lstrip("%"), set())
            insts = [(i, comps[n]) for n in names for i in comps[n]]
            if any(i.opcode == "rsqrt" for i, _ in insts):
                loops.append(insts)
    assert len(loops) == 1, f"expected one forward layer loop, found {len(loops)}"
    return loops[0]


def _op(inst) -> str:
    md = inst.metadata
    return (md.op_name or "") if md else ""


def _mlp_dots(block) -> list:
    return [i for i, _ in block if i.opcode == "dot" and re.search(r"bsd,df->bsf|bsf,fd->bsd", _op(i))]


@pytest.mark.slow  # compiles the template
def test_parallel_block_reads_one_norm_and_adds_attention_to_mlp(gated, knobs):
    # Sequential: a norm before attention and one before the MLP, each output added to the residual stream.
    # Parallel: one norm read by both, and the MLP's output W_out added to attention's W_o before the residual.
    def shape(lowered):
        block = _forward_block(lowered)
        by_name = {(c.name, i.name): i for i, c in block}
        summed = []  # the einsums of the dots an add sums, for each add of two dots
        for inst, comp in block:
            producers = [by_name.get((comp.name, o.name)) for o in inst.operands]
            if inst.opcode == "add" and all(p is not None and p.opcode == "dot" for p in producers):
                summed += sorted(re.search(r"[a-z]+,[a-z]+->[a-z]+", _op(p)).group(0) for p in producers)
        return sum(i.opcode == "rsqrt" for i, _ in block), summed

    assert shape(gated[0]) == (2, [])
    assert shape(knobs[0]) == (1, ["bsf,fd->bsd", "bshk,hkd->bsd"])


@pytest.mark.slow  # compiles the template
def test_mlp_activation_and_matrix_count(gated, knobs):
    gated_block, relu_block = _forward_block(gated[0]), _forward_block(knobs[0])
    assert len(_mlp_dots(gated_block)) == 3  # W_in, W_gate, W_out
    assert len(_mlp_dots(relu_block)) == 2  # W_in, W_out
    assert "w_gate" in gated[1][0] and "w_gate" not in knobs[1][0]

    def opcodes(block):
        return {i.opcode for i, _ in block}

    assert "tanh" in opcodes(gated_block)  # jax.nn.gelu (tanh approximation)
    assert "maximum" in opcodes(relu_block) and "tanh" not in opcodes(relu_block)  # max(x, 0)


@pytest.mark.slow  # compiles the template
def test_f32_weights_with_bf16_compute(gated, knobs):
    lowered, args = knobs
    params = args[0]
    assert {str(p.dtype) for p in params.values()} == {"float32"}
    assert {str(p.dtype) for p in gated[1][0].values()} == {"bfloat16"}
    module = parse_hlo(lowered.global_hlo)
    dots = [i for c in module.computations for i in c.select("dot")]
    assert dots and {o.shape.element_type for d in dots for o in d.operands} == {"bf16"}
    # each weight is cast where the layer uses it (MaxText: jnp.asarray(kernel, dtype)): f32 -> bf16 converts of
    # the layer's weight slices in the forward loop, one per weight of the block
    block = _forward_block(lowered)
    by_name = {(c.name, i.name): i for i, c in block}
    casts = {tuple(i.shape.dims) for i, c in block if i.opcode == "convert" and i.shape.element_type == "bf16"
             and i.operands[0].shape is not None and i.operands[0].shape.element_type == "f32"
             and by_name.get((c.name, i.operands[0].name)) is not None}
    layer_shapes = {tuple(p.shape[1:]) for k, p in params.items() if k not in ("w_emb",)}
    assert layer_shapes <= casts, (layer_shapes, casts)


@pytest.mark.slow  # compiles the template
def test_head_dim_is_in_the_q_projection(knobs):
    lowered, args = knobs
    assert args[0]["w_q"].shape == (2, 64, 8, 16)  # [L, D, H, K]: H x K = 128, not d_model 64
    q = [i for i, _ in _forward_block(lowered) if i.opcode == "dot" and "bsd,dhk->bshk" in _op(i)]
    assert [tuple(i.shape.dims) for i in q] == [(16, 64, 8, 16)]  # [B, S, H, K]


@pytest.mark.slow  # compiles the template
def test_flash_attention_marks_the_step_and_the_analysis_prices_it(gated, knobs):
    from analyzer.pipeline import analyze_lowered

    assert knobs[0].flash_attention is True and gated[0].flash_attention is False
    report = analyze_lowered(knobs[0], hardware="tpu-v5e")
    assert report.analysis.costs.flash is not None and report.analysis.costs.flash.lengths == {64}
    assert any("flash kernel" in n for n in report.notes)
    assert analyze_lowered(gated[0], hardware="tpu-v5e").analysis.costs.flash is None


@pytest.mark.slow  # compiles the template
def test_tied_iota_embedding(gated, knobs):
    lowered, args = knobs
    assert "w_unemb" not in args[0] and "w_unemb" in gated[1][0]
    module = parse_hlo(lowered.global_hlo)
    insts = [i for c in module.computations for i in c]
    assert not any(i.opcode == "gather" for i in insts)  # no gather: the one-hot matmul
    assert any(i.opcode == "gather" for c in parse_hlo(gated[0].global_hlo).computations for i in c)
    assert any(i.opcode == "iota" and tuple(i.shape.dims)[-1:] == (128,) for i in insts)
    dims = {tuple(o.shape.dims) for i in insts if i.opcode == "dot" for o in i.operands}
    # the read: one-hot [B, S, V] . W_emb[V, D]; the logits: out [B, S, D] . W_emb^T (the same table, [V, D] or
    # its transpose [D, V]: there is no other [D, V] weight)
    assert (16, 64, 128) in dims and ((128, 64) in dims or (64, 128) in dims)
    logits = [i for i in insts if i.opcode == "dot" and tuple(i.shape.dims) == (16, 64, 128)
              and "transpose(" not in _op(i)]
    assert logits, "no logits dot [B, S, V]"


# ------------------------------------------------------------------------------------------------ the embedding's sharding
EMBED_LINES = range(inspect.getsourcelines(models._embed)[1],
                    inspect.getsourcelines(models._embed)[1] + len(inspect.getsourcelines(models._embed)[0]))
ONE_SLICE = ({"fsdp": 4, "tensor": 2}, {"model_axis": "tensor"})
TWO_SLICES = ({"slice": 2, "fsdp": 2, "tensor": 2}, {"model_axis": "tensor", "replica_axes": ("slice",)})
LM = TransformerConfig(d_model=64, d_ff=128, heads=4, kv_heads=4, layers=1, seq=16, batch=16, vocab=512,
                       attention=False)


def _embedding_collectives(config: TransformerConfig, plan) -> tuple[set, set]:
    """(forward, backward) sets of (kind, axes) of the collectives XLA placed for the embedding read."""
    from analyzer.pipeline import analyze_lowered

    mesh, roles = plan
    lowered, _ = _compile(config, "fsdp+tp", mesh, **roles)
    frame = analyze_lowered(lowered, hardware="tpu-v5p").collectives
    forward, backward = set(), set()
    for row in frame.itertuples():
        file, _, line = str(row.source).rpartition(":")
        if file.endswith("compile/models.py") and line.isdigit() and int(line) in EMBED_LINES:
            (backward if "transpose(" in row.op_name else forward).add((row.kind, tuple(row.axes)))
    return forward, backward


@pytest.fixture(scope="module")
def pinned():
    config = TransformerConfig(**{**LM.to_dict(), "embedding_sharding": "pinned"})
    return {name: _embedding_collectives(config, plan) for name, plan in (("one", ONE_SLICE), ("two", TWO_SLICES))}


@pytest.mark.slow  # compiles the template
def test_pinned_embedding_has_the_same_collectives_on_every_mesh(pinned):
    (fwd1, bwd1), (fwd2, bwd2) = pinned["one"], pinned["two"]
    # forward: the ids gathered over fsdp, the masked rows of the vocabulary summed over tensor, the rows moved to
    # the residual stream's layout by an all-to-all over fsdp; nothing over the DCN slice axis
    assert fwd1 == fwd2 == {("all-gather", ("fsdp",)), ("all-reduce", ("tensor",)), ("all-to-all", ("fsdp",))}
    # backward: the same, plus the table gradient's data-parallel all-reduce over the replica axis (every weight's)
    assert bwd2 - bwd1 == {("all-reduce", ("slice",))} and bwd1 <= bwd2


@pytest.mark.slow  # compiles the template
def test_xla_partitions_the_gather_by_the_mesh_shape():
    # Why `pinned` exists (issue 25): left to XLA, the same gather is partitioned one way on one slice and another
    # on two (jax 0.10's XLA all-gathers the rows over the DCN slice axis in the forward pass there; jax 0.12's
    # reduce-scatters them over tensor), with sub-axis collectives (fsdp:(1)2) on one slice.
    one, _ = _embedding_collectives(LM, ONE_SLICE)
    two, _ = _embedding_collectives(LM, TWO_SLICES)
    assert one != two
