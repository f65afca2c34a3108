"""analyzer.compile.models: the template transformer's configs, axis roles, shardings, and that every strategy compiles
to the communication its layout implies."""

from __future__ import annotations

import re

import pytest
from jax.sharding import PartitionSpec as P

from analyzer.errors import ConfigError, MeshError, ShardingError
from analyzer.compile.lower import lower
from analyzer.compile.models import STRATEGIES, Roles, TransformerConfig, build, roles

SMALL = TransformerConfig(d_model=64, d_ff=128, heads=4, kv_heads=2, layers=3, seq=16, batch=8, experts=4)
MESH = {"X": 2, "Y": 4}


def _ops(hlo: str) -> list[str]:
    return re.findall(r"\s(all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute)(?:-start)?\(", hlo)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("d_model", 0, "d_model must be a positive integer"),
        ("heads", 3, "d_model=256 is not a multiple of heads=3"),
        ("kv_heads", 3, "heads=4 is not a multiple of kv_heads=3"),
        ("dtype", "bf16", "did you mean 'bfloat16'"),
        ("optimizer", "adamw", "did you mean 'adam'"),
        ("mlp", "gatedsilu", "did you mean 'gated_silu'"),
        ("vocab", -1, "vocab must be a non-negative integer (0: not used)"),
        ("head_dim", 1.5, "head_dim must be a non-negative integer"),
        ("remat", "minimum", "did you mean 'minimal'"),
    ],
)
def test_config_errors(field, value, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        TransformerConfig(**{field: value})


def test_roles():
    assert roles("fsdp+tp", ("data", "model")) == Roles(("data",), "model")
    assert roles("tp", ("X",)) == Roles((), "X")
    assert roles("fsdp", ("X", "Y")) == Roles(("X", "Y"), None)
    assert roles("ep", ("X", "Y")) == Roles(("X", "Y"), "Y")
    assert roles("tp", ("X", "Y", "Z"), model_axis="X") == Roles(("Y", "Z"), "X")
    with pytest.raises(MeshError, match="needs two mesh axes"):
        roles("fsdp+tp", ("X",))
    with pytest.raises(MeshError, match="valid axes: X, Y"):
        roles("tp", ("X", "Y"), model_axis="model")
    with pytest.raises(ConfigError, match="did you mean 'fsdp'"):
        roles("fsdpp", ("X",))
    # Replica axes split the batch and keep the weights whole (MaxText's data axis, DCN slices).
    r = roles("fsdp+tp", ("slice", "fsdp", "tensor"), replica_axes=("slice",))
    assert r == Roles(("fsdp",), "tensor", ("slice",)) and r.batch == ("slice", "fsdp")
    assert roles("fsdp", ("D", "F"), replica_axes=("D",)) == Roles(("F",), None, ("D",))
    with pytest.raises(MeshError, match="model axis 'Y' cannot be a replica axis"):
        roles("tp", ("X", "Y"), replica_axes=("Y",))
    with pytest.raises(MeshError, match="valid axes: X, Y"):
        roles("fsdp", ("X", "Y"), replica_axes=("Z",))


def test_head_dim_need_not_divide_d_model():
    c = TransformerConfig(d_model=96, heads=4, head_dim=32)  # H x K = 128 != D
    assert c.k == 32 and TransformerConfig().k == 256 // 4
    _, (params, _, _) = build(c, "dp", {"X": 2})
    assert params["w_q"].shape == (2, 96, 4, 32) and params["w_o"].shape == (2, 4, 32, 96)


def test_language_model_shardings():
    """Gated MLP: W_gate sharded like W_in. Vocabulary: token ids in, W_emb[V_Y, D_X] and W_unemb[D_X, V_Y]
    (MaxText's layout); replica axes shard the batch only."""
    config = TransformerConfig(**{**SMALL.to_dict(), "mlp": "gated_silu", "vocab": 512, "batch": 16})
    mesh = {"R": 2, "X": 2, "Y": 4}
    _, (params, _, (x, y)) = build(config, "fsdp+tp", mesh, replica_axes=("R",))
    assert params["w_gate"].sharding.spec == params["w_in"].sharding.spec == P(None, "X", "Y")
    assert params["w_emb"].shape == (512, 64) and params["w_emb"].sharding.spec == P("Y", "X")
    assert params["w_unemb"].shape == (64, 512) and params["w_unemb"].sharding.spec == P("X", "Y")
    assert x.shape == y.shape == (16, 16) and str(x.dtype) == "int32" and x.sharding.spec == P(("R", "X"), None)
    _, (params, _, _) = build(config, "fsdp", {"X": 8})
    assert params["w_emb"].sharding.spec == P(None, "X") and params["w_unemb"].sharding.spec == P("X", None)
    _, (params, _, _) = build(config, "tp", MESH)
    assert params["w_emb"].sharding.spec == P("Y", None) and params["w_unemb"].sharding.spec == P(None, "Y")


def test_shardings_follow_the_chapter():
    """The parameter and activation layouts in the chapter's notation (L, the scanned layer dim, unsharded)."""
    def specs(strategy):
        _, (params, _, (x, _)) = build(SMALL, strategy, MESH)
        return {k: v.sharding.spec for k, v in params.items()}, x.sharding.spec

    params, x = specs("fsdp")  # In[B_XY, D], W_in[D_XY, F], W_out[F, D_XY]
    assert x == P(("X", "Y"), None, None)
    assert params["w_in"] == P(None, ("X", "Y"), None) and params["w_out"] == P(None, None, ("X", "Y"))
    params, x = specs("tp")  # In[B_X, D], W_in[D, F_Y], W_out[F_Y, D]; kv_heads=2 does not split over Y=4
    assert x == P("X", None, None)
    assert params["w_in"] == P(None, None, "Y") and params["w_out"] == P(None, "Y", None)
    assert params["w_q"] == P(None, None, "Y") and params["w_k"] == P(None, None, None)
    params, x = specs("fsdp+tp")  # In[B_X, D_Y], W_in[D_X, F_Y], W_out[F_Y, D_X]
    assert x == P("X", None, "Y")
    assert params["w_in"] == P(None, "X", "Y") and params["w_out"] == P(None, "Y", "X")
    params, x = specs("ep")  # experts over Y, tokens over X and Y
    assert params["w_in"] == P(None, "Y") and x == P(("X", "Y"), None, None)
    params, _ = specs("dp")
    assert all(spec == P() for spec in params.values())


def test_sizes_the_mesh_does_not_divide():
    with pytest.raises(ShardingError, match=r"parameter w_in.*not a multiple of 4; choose d_model, d_ff"):
        build(TransformerConfig(d_ff=1026, attention=False), "tp", MESH)
    with pytest.raises(ShardingError, match="experts=6 is not a multiple of the model axis 'Y'"):
        build(TransformerConfig(experts=6), "ep", MESH)


@pytest.fixture(scope="module")
def lowered_strategy():
    """`lowered_strategy(strategy)` -> the template compiled on MESH, once per module (the explicit-axes test
    compares against the same fsdp+tp program the strategy test checks)."""
    cache = {}

    def get(strategy):
        if strategy not in cache:
            # The bare block keeps the compile short; tp also runs the full block (grouped-query attention with
            # kv_heads=2 < Y=4, so K/V stay unsharded over Y).
            config = SMALL if strategy == "tp" else TransformerConfig(**{**SMALL.to_dict(), "attention": False})
            step, args = build(config, strategy, MESH)
            cache[strategy] = (step, args, lower(step, *args, mesh=MESH))
        return cache[strategy]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_compiles_to_its_communication(strategy, lowered_strategy):
    hlo = lowered_strategy(strategy)[2].spmd_hlo
    # The layers stay loops (forward and backward) over the stacked weights.
    assert len(re.findall(r"= \(.*\) while\(", hlo)) == 2
    assert re.search(r"s32\[\] constant\(%d\)" % SMALL.layers, hlo)
    ops = set(_ops(hlo))
    expected = {
        "dp": {"all-reduce"},  # gradients only
        "fsdp": {"all-gather", "all-reduce"},  # weights gathered, gradients reduced (all-reduce + slice on cpu)
        # Megatron all-reduces; with kv_heads=2 < Y=4 the replicated K/V projections' update is computed
        # split over Y and all-gathered back.
        "tp": {"all-reduce", "all-gather"},
        "fsdp+tp": {"all-gather", "all-reduce"},
        "ep": {"all-to-all", "all-reduce"},
    }[strategy]
    assert ops == expected, (strategy, ops)


@pytest.mark.slow
def test_adam_state_is_sharded_like_the_parameters():
    config = TransformerConfig(**{**SMALL.to_dict(), "optimizer": "adam", "attention": False})
    step, (params, opt_state, batch) = build(config, "fsdp", {"X": 8})
    assert opt_state["mu"]["w_in"].sharding.spec == params["w_in"].sharding.spec
    lowered = lower(step, params, opt_state, batch, mesh={"X": 8})
    # Parameters and both moments in, parameters and both moments out: 3 copies of the sharded weights.
    weights = sum(2 * s.size // 8 for s in params.values())  # bf16, sharded 8 ways
    moments = sum(4 * s.size // 8 for s in params.values())  # f32
    assert lowered.memory["output_bytes"] >= weights + 2 * moments


@pytest.mark.slow
def test_explicit_axes_give_the_same_program(lowered_strategy):
    """Traced on a mesh whose axes are Explicit, the template runs under auto_axes: same collectives."""
    step, args, auto = lowered_strategy("fsdp+tp")
    explicit = lower(step, *args, mesh={"X": (2, "explicit"), "Y": (4, "explicit")})
    assert explicit.mesh.axis_types == ("explicit", "explicit")
    assert sorted(_ops(explicit.spmd_hlo)) == sorted(_ops(auto.spmd_hlo))


@pytest.mark.slow
def test_minimal_remat_recomputes_only_attentions_batch_matmuls():
    """remat="minimal" (MaxText's policy) saves the projections by weights and recomputes the S x S score and
    value matmuls; "full" recomputes projections too. jax names recomputation `.../rematted_computation/...`."""
    def recomputed(remat):
        config = TransformerConfig(**{**SMALL.to_dict(), "remat": remat, "mlp": "gated_silu", "vocab": 128})
        step, args = build(config, "fsdp", {"X": 2})
        hlo = lower(step, *args, mesh={"X": 2}).spmd_hlo
        return {m.group(1) for m in re.finditer(r'dot\(.*op_name="[^"]*rematted_computation/([^"/]*)/dot_general',
                                                hlo)}

    assert recomputed("minimal") == {"bsgrk,btgk->bgrst", "bgrst,btgk->bsgrk"}
    assert {"bsd,df->bsf", "bsd,dhk->bshk"} <= recomputed("full")
