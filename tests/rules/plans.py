"""One small model, several plans: the programs behind the model-FLOPs and redundant-compute tests.

A two-layer MLP trained by one gradient step (`jax.value_and_grad` of a squared error), with its parameters
and its batch as pytrees (`params['w_in']`, `batch['x']`), on the mesh data=4, model=2 of 8 fake CPU devices,
priced on TPU v5p. The plans:
  - `good`: the batch split over 'data', the weights Megatron-style over 'model' (no chip repeats work);
  - `dp`: the batch over both axes, the weights replicated (pure data parallelism);
  - `replicated_batch`: the batch replicated, so every chip of a 'data' group computes the same tokens;
  - `wrong_dim`: the batch split over 'data' on its feature dim instead of its batch dim;
  - `shard_map`: the forward matmuls written per shard with jax.shard_map (batch over 'data', F over 'model');
  - `fsdp`: the batch over 'data', the weights over both axes (FSDP over 'data' on D, Megatron over 'model' on
    F): each weight gradient is reduce-scattered over 'data' (FSDP's cost, not Megatron's).
Every plan computes the same model: its model FLOPs are the same, whatever the chips do.
`moe_plan()` is another model: a Switch-style MoE layer (GShard's einsums) whose tokens go to their expert's
chips by an all-to-all over the 'expert' axis (expert=4, data=2).
`scanned_plan()` stacks L such layers (residual) and runs them by `jax.lax.scan`: the matmuls sit in a loop body.
`embedding_plan()` puts an embedding lookup (`jnp.take` of a [V, D] table) before the MLP, the table's features
over 'data' by default: every activation then carries 'data' on a feature dimension.
Written for jax 0.10.2, target cpu (compile only), 8 fake devices.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

B, S, D, F = 32, 256, 512, 2048
PLANS = ("good", "dp", "replicated_batch", "wrong_dim", "shard_map", "fsdp")


def _mesh() -> Any:
    return jax.sharding.AbstractMesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)


def _arg(m: Any, shape: tuple[int, ...], spec: P) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, jnp.bfloat16, sharding=NamedSharding(m, spec))


def _loss(params: dict[str, jax.Array], batch: dict[str, jax.Array]) -> jax.Array:
    h = jax.nn.relu(batch["x"] @ params["w_in"])
    out = h @ params["w_out"]
    return jnp.mean(jnp.square(out - batch["y"]).astype(jnp.float32))


def _shard_map_loss(m: Any) -> Any:
    def mlp(x: jax.Array, w_in: jax.Array, w_out: jax.Array) -> jax.Array:
        return jax.lax.psum(jax.nn.relu(x @ w_in) @ w_out, "model")

    mapped = jax.shard_map(mlp, mesh=m, in_specs=(P("data"), P(None, "model"), P("model", None)),
                           out_specs=P("data"))

    def loss(params: dict[str, jax.Array], batch: dict[str, jax.Array]) -> jax.Array:
        out = mapped(batch["x"], params["w_in"], params["w_out"])
        return jnp.mean(jnp.square(out - batch["y"]).astype(jnp.float32))

    return loss


def plan(name: str) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """(step function, abstract arguments (params, batch), keyword arguments for `analyzer.analyze`)."""
    m = _mesh()
    w_in, w_out, x = P(None, "model"), P("model", None), P("data")
    if name == "dp":
        w_in, w_out, x = P(), P(), P(("data", "model"))
    elif name == "replicated_batch":
        x = P()
    elif name == "wrong_dim":
        x = P(None, None, "data")
    elif name == "fsdp":
        w_in, w_out = P("data", "model"), P("model", "data")
    elif name not in ("good", "shard_map"):
        raise KeyError(name)
    loss = _shard_map_loss(m) if name == "shard_map" else _loss
    params = {"w_in": _arg(m, (D, F), w_in), "w_out": _arg(m, (F, D), w_out)}
    batch = {"x": _arg(m, (B, S, D), x), "y": _arg(m, (B, S, D), x)}
    step = jax.jit(jax.value_and_grad(loss))
    return step, (params, batch), dict(mesh=m, hardware="tpu-v5p")


# The MoE: G groups of S tokens, E experts of capacity C, model width D, expert width FE.
G, MS, E, C, FE = 8, 512, 4, 256, 2048


def _moe_loss(m: Any) -> Any:
    def loss(params: dict[str, jax.Array], batch: dict[str, jax.Array]) -> jax.Array:
        x, dispatch = batch["x"], batch["dispatch"]  # [G, S, D], [G, S, E, C] (the router's one-hot choice)
        routed = jnp.einsum("gsec,gsd->egcd", dispatch, x)  # tokens to their experts: all-to-all over 'expert'
        routed = jax.lax.with_sharding_constraint(routed, NamedSharding(m, P("expert", "data")))
        h = jax.nn.relu(jnp.einsum("egcd,edf->egcf", routed, params["w_in"]))
        out = jnp.einsum("egcf,efd->egcd", h, params["w_out"])
        out = jax.lax.with_sharding_constraint(out, NamedSharding(m, P("expert", "data")))
        back = jnp.einsum("gsec,egcd->gsd", dispatch, out)  # and back to their groups
        return jnp.mean(jnp.square(back - x).astype(jnp.float32))

    return loss


def moe_plan() -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """The MoE layer's step on expert=4, data=2: groups over both axes, each expert's weights on its chips."""
    m = jax.sharding.AbstractMesh((4, 2), ("expert", "data"), axis_types=(AxisType.Auto,) * 2)
    groups = P(("expert", "data"))
    params = {"w_in": _arg(m, (E, D, FE), P("expert")), "w_out": _arg(m, (E, FE, D), P("expert"))}
    batch = {"x": _arg(m, (G, MS, D), groups), "dispatch": _arg(m, (G, MS, E, C), groups)}
    step = jax.jit(jax.value_and_grad(_moe_loss(m)))
    return step, (params, batch), dict(mesh=m, hardware="tpu-v5p")


# The embedding model: token ids looked up in a [V, D] table (`jnp.take`, as Flax's Embed and Hugging Face do), then
# the MLP. The table is `P('model', 'data')`: its features over 'data', so every activation carries 'data' on D.
V = 8192


def _embedding_loss(params: dict[str, Any], batch: dict[str, jax.Array]) -> jax.Array:
    h = jnp.take(params["wte"]["embedding"], batch["ids"], axis=0)
    out = jax.nn.relu(h @ params["w_in"]) @ params["w_out"]
    return jnp.mean(jnp.square(out - batch["y"]).astype(jnp.float32))


def _normed_embedding_loss(params: dict[str, Any], batch: dict[str, jax.Array]) -> jax.Array:
    """The same with a layer norm between the lookup and the MLP, as a transformer has (Hugging Face's models):
    the first matmul's activation is computed, no view of the ids."""
    h = jnp.take(params["wte"]["embedding"], batch["ids"], axis=0)
    h = (h - h.mean(-1, keepdims=True)) * jax.lax.rsqrt(h.var(-1, keepdims=True) + 1e-6)
    out = jax.nn.relu(h @ params["w_in"]) @ params["w_out"]
    return jnp.mean(jnp.square(out - batch["y"]).astype(jnp.float32))


def embedding_plan(table: P | None = None, ids: P | None = None, norm: bool = False
                   ) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """The embedding model's step on data=4, model=2: ids and targets over 'data' (or `ids` for both), the MLP
    Megatron-style over 'model', the table as `table` (default its features over 'data': the activation-layout
    mistake); `norm`: a layer norm after the lookup."""
    m = _mesh()
    table = P("model", "data") if table is None else table
    ids = P("data") if ids is None else ids
    params = {"wte": {"embedding": _arg(m, (V, D), table)}, "w_in": _arg(m, (D, F), P(None, "model")),
              "w_out": _arg(m, (F, D), P("model", None))}
    batch = {"ids": jax.ShapeDtypeStruct((B, S), jnp.int32, sharding=NamedSharding(m, ids)), "y": _arg(m, (B, S, D), ids)}
    loss = _normed_embedding_loss if norm else _embedding_loss
    return jax.jit(jax.value_and_grad(loss)), (params, batch), dict(mesh=m, hardware="tpu-v5p")


# The scanned MLP: L layers stacked on a leading dim, run by `jax.lax.scan` (one while loop; each layer's weights
# a slice of the stacked ones, its activations the loop's carry).
L = 4


def _scanned_loss(params: dict[str, jax.Array], batch: dict[str, jax.Array]) -> jax.Array:
    def layer(h: jax.Array, w: dict[str, jax.Array]) -> tuple[jax.Array, None]:
        return h + jax.nn.relu(h @ w["w_in"]) @ w["w_out"], None

    h, _ = jax.lax.scan(layer, batch["x"], params)
    return jnp.mean(jnp.square(h - batch["y"]).astype(jnp.float32))


def scanned_plan(x: P | None = None) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """The scanned MLP's step on data=4, model=2: the stacked weights Megatron-style over 'model', the batch as
    `x` (default replicated: every chip of a 'data' group computes the same tokens in every layer)."""
    m = _mesh()
    x = P() if x is None else x
    params = {"w_in": _arg(m, (L, D, F), P(None, None, "model")), "w_out": _arg(m, (L, F, D), P(None, "model", None))}
    batch = {"x": _arg(m, (B, S, D), x), "y": _arg(m, (B, S, D), x)}
    return jax.jit(jax.value_and_grad(_scanned_loss)), (params, batch), dict(mesh=m, hardware="tpu-v5p")


def model_flops_by_hand() -> float:
    """The MLP's FLOPs of one step, each matmul 2 x B x S x D x F: two forward, three backward (the gradients
    of w_out, of the hidden activations and of w_in; none of x, which is not differentiated)."""
    return 2.0 * B * S * D * F * (2 + 3)
