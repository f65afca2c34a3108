"""Third-party models and plans for the analyzer's findings (issue 26 item 9): real library code trained as a user
writes it, each under a good plan and two bad ones, on the mesh data=4, model=2 of 8 fake CPU devices, priced on
TPU v5p.

Programs (`PROGRAMS`):
  - Hugging Face Flax `gpt2`, `bert`, `mistral`, `llama`: the library's own model classes (`FlaxGPT2LMHeadModel`,
    `FlaxBertForMaskedLM`, `FlaxMistralForCausalLM`, `FlaxLlamaForCausalLM`) built from its config classes with
    one layer and small dims (the compile is the test's cost; one layer has every op kind of the model), trained
    by one optax AdamW step on a language-modelling loss. Weights Megatron-style over 'model' (attention and MLP
    input projections on their output dim, output projections on their input dim, the vocabulary on 'model').
    Needs `transformers<5` (Flax models were removed in transformers 5): `hf_missing()` says why not.
  - `shard_map`: a two-layer MLP whose matmuls are written per shard with `jax.shard_map` (the user's psum over
    'model'), AdamW.
  - `wsc`: the same MLP under `jax.jit`, the hidden activation pinned by `jax.lax.with_sharding_constraint`: the
    plan is the constraint's spec.
  - `moe`: a Switch-style layer (a top-1 router with capacity, GShard's dispatch/combine einsums), its experts over
    the 'expert' axis of a data=4, expert=2 mesh (the routed tokens constrained to `P('expert')`: the user pins the
    experts, the tokens' groups follow the batch), AdamW. The good plan splits the groups over 'data' (each
    'expert' pair holds the same tokens: the dispatch is local, the combine a reduction over 'expert'). A
    constraint that pinned the groups too (`P('expert', 'data')`, as this program once had) makes the batch's spec
    moot: XLA slices a replicated batch to the constraint's groups with no chip repeating work (compiled: the
    router's dot [2, 512, 4] per chip on the replicated plan), so its "bad" plans were predicted faster than the
    good one (101, 115 us against 120 us) and were no mistake.

Plans (`PLANS`): `good`; `replicated` (the batch on every chip: each chip of a 'data' group computes the same
tokens); `wrong_dim` (the batch split over 'data' on the wrong dimension: the token ids' sequence dim for the
language models, the features for the MLPs and the MoE; for `wsc` the constraint puts 'data' on the hidden
features). `program(name, plan)` -> `Program` (the jitted step, its abstract arguments, `analyze`'s keywords,
the batch argument's path and the spec a user should write).

Written for jax 0.10.2 / flax 0.12.8 / optax 0.2.8 / transformers 4.57.6 and jax 0.12 (the non-HF programs);
target cpu, compile only: no array is ever allocated (the arguments are `jax.ShapeDtypeStruct`s).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

HF_MODELS = ("gpt2", "bert", "mistral", "llama")
PROGRAMS = (*HF_MODELS, "shard_map", "wsc", "moe")
PLANS = ("good", "replicated", "wrong_dim")
HARDWARE = "tpu-v5p"

# the language models: vocabulary, width, heads (key/value heads), MLP width, batch x sequence (8,192 tokens)
VOCAB, D_MODEL, HEADS, KV_HEADS, D_FF, BATCH, SEQ = 8192, 512, 8, 4, 2048, 32, 256
# the MLPs (shard_map, wsc): batch x sequence x width, hidden width
B, S, D, F = 32, 256, 512, 2048
# the MoE: groups x tokens per group x width, experts, capacity per group, expert width
G, GS, E, C, FE = 8, 512, 4, 160, 2048


@dataclass(frozen=True)
class Program:
    """One program under one plan, ready for `analyzer.analyze(fn, *args, **kwargs)`."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    batch_path: str  # the batch argument's pytree path as jax names it (`batch['input_ids']`)
    batch_spec: str  # the spec a user should write for it (the good plan's)
    notes: dict[str, Any] = field(default_factory=dict)


def hf_missing() -> str:
    """Why the Hugging Face models cannot run here ("" when they can)."""
    try:
        import transformers
    except ImportError:
        return ("transformers is not installed: the test extra installs transformers<5 on Python < 3.12, the last "
                "major version with Flax models")
    if int(transformers.__version__.split(".")[0]) >= 5 or not hasattr(transformers, "FlaxGPT2LMHeadModel"):
        return (f"transformers {transformers.__version__} has no Flax models (removed in transformers 5; this "
                "stack's maxtext extra needs transformers>=5.17): the Hugging Face Flax models run on the Python 3.11 "
                "stack, whose test extra installs transformers<5")
    try:
        import flax  # noqa: F401
        import optax  # noqa: F401
    except ImportError as e:
        return f"{e.name} is not installed (the test extra)"
    return ""


_SIZES: dict[str, int] = {}  # a mesh change under verification: axis -> size (`program(..., mesh=...)`)


# the batch argument's spec by plan (the wsc program's batch is P('data') in every plan: its plan is the constraint)
PLAN_SPECS: dict[str, dict[str, P]] = {
    **{m: {"good": P("data", None), "replicated": P(None, None), "wrong_dim": P(None, "data")} for m in HF_MODELS},
    "shard_map": {"good": P("data"), "replicated": P(), "wrong_dim": P(None, None, "data")},
    "wsc": {"good": P("data"), "replicated": P("data"), "wrong_dim": P("data")},
    "moe": {"good": P("data"), "replicated": P(), "wrong_dim": P(None, None, "data")},
}


def _mesh(axes: tuple[str, str] = ("data", "model")) -> Any:
    sizes = tuple(_SIZES.get(a, n) for a, n in zip(axes, (4, 2)))
    return jax.sharding.AbstractMesh(sizes, axes, axis_types=(AxisType.Auto,) * 2)


def _optimizer() -> Any:
    import optax

    return optax.adamw(1e-3)


def _adamw_step(loss_fn: Callable[[Any, dict[str, jax.Array]], jax.Array]) -> Callable[..., Any]:
    """The train step a user writes: loss and gradients, AdamW's update, the new parameters."""
    import optax

    optimizer = _optimizer()

    def train_step(params: Any, opt_state: Any, batch: dict[str, jax.Array]) -> tuple[Any, Any, jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(params, batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train_step


def _placed(mesh: Any, shapes: Any, spec_of: Callable[[str, Any], P]) -> tuple[Any, Any]:
    """(params, AdamW state) as ShapeDtypeStructs with NamedShardings: each array's spec by its path
    (`spec_of('transformer/h/0/attn/c_attn/kernel', leaf)`); AdamW's moments take their parameter's."""
    def place(path: Any, leaf: Any) -> jax.ShapeDtypeStruct:
        names = "/".join(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", "")))) for k in path)
        spec = spec_of(names, leaf) if leaf.ndim else P()
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(mesh, spec))

    params = jax.tree_util.tree_map_with_path(place, shapes)
    state = jax.eval_shape(_optimizer().init, shapes)
    # the moments mirror the parameters' tree under optax's state: their paths end in the parameter's path
    return params, jax.tree_util.tree_map_with_path(place, state)


# ---------------------------------------------------------------------------------------------- Hugging Face
# Megatron by the parameter's name: (substring of its path, spec of its kernel). Flax `nn.Dense` kernels are
# [in, out]; GPT-2's `FlaxConv1D` kernels are [out, in].
_HF_SPECS: dict[str, tuple[tuple[str, P], ...]] = {
    "gpt2": (("wte", P("model", None)), ("c_attn", P("model", None)), ("c_fc", P("model", None)),
             ("c_proj", P(None, "model"))),
    "bert": (("word_embeddings", P("model", None)), ("self/query", P(None, "model")), ("self/key", P(None, "model")),
             ("self/value", P(None, "model")), ("attention/output/dense", P("model", None)),
             ("intermediate/dense", P(None, "model")), ("layer/0/output/dense", P("model", None))),
    "mistral": (("embed_tokens", P("model", None)), ("q_proj", P(None, "model")), ("k_proj", P(None, "model")),
                ("v_proj", P(None, "model")), ("gate_proj", P(None, "model")), ("up_proj", P(None, "model")),
                ("o_proj", P("model", None)), ("down_proj", P("model", None)), ("lm_head", P(None, "model"))),
}
_HF_SPECS["llama"] = _HF_SPECS["mistral"]


@functools.cache
def _hf_model(name: str) -> Any:
    """The library's model class built from its own config class: one layer, small dims, no dropout (built once per
    process: a mesh change under verification rebuilds the step, not the model)."""
    import transformers as t

    common = {"vocab_size": VOCAB}
    if name == "gpt2":
        cfg = t.GPT2Config(n_positions=SEQ, n_embd=D_MODEL, n_layer=1, n_head=HEADS, n_inner=D_FF, resid_pdrop=0.0,
                           embd_pdrop=0.0, attn_pdrop=0.0, **common)
        return t.FlaxGPT2LMHeadModel(cfg, input_shape=(1, SEQ), _do_init=False)
    if name == "bert":
        cfg = t.BertConfig(hidden_size=D_MODEL, num_hidden_layers=1, num_attention_heads=HEADS, intermediate_size=D_FF,
                           max_position_embeddings=SEQ, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                           **common)
        return t.FlaxBertForMaskedLM(cfg, input_shape=(1, SEQ), _do_init=False)
    llama_like = dict(hidden_size=D_MODEL, num_hidden_layers=1, num_attention_heads=HEADS,
                      num_key_value_heads=KV_HEADS, intermediate_size=D_FF, max_position_embeddings=SEQ, **common)
    if name == "mistral":
        return t.FlaxMistralForCausalLM(t.MistralConfig(sliding_window=None, **llama_like), input_shape=(1, SEQ),
                                        _do_init=False)
    if name == "llama":
        return t.FlaxLlamaForCausalLM(t.LlamaConfig(**llama_like), input_shape=(1, SEQ), _do_init=False)
    raise KeyError(name)


def _hf_program(name: str, plan: str) -> Program:
    import optax

    model = _hf_model(name)
    causal = name != "bert"

    def loss_fn(params: Any, batch: dict[str, jax.Array]) -> jax.Array:
        ids = batch["input_ids"]
        logits = model(ids, params=params, train=False).logits  # the model's forward, as the HF examples call it
        if causal:  # next-token prediction
            return optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], ids[:, 1:]).mean()
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"]).mean()  # masked LM

    mesh = _mesh()
    rules = _HF_SPECS[name]

    def spec_of(path: str, leaf: Any) -> P:
        if leaf.ndim != 2:
            return P()
        return next((spec for key, spec in rules if key in path), P())

    shapes = jax.eval_shape(lambda: model.init_weights(jax.random.key(0), (1, SEQ)))
    params, opt_state = _placed(mesh, shapes, spec_of)
    ids = jax.ShapeDtypeStruct((BATCH, SEQ), jnp.int32, sharding=NamedSharding(mesh, PLAN_SPECS[name][plan]))
    batch = {"input_ids": ids} if causal else {"input_ids": ids, "labels": ids}
    return Program(jax.jit(_adamw_step(loss_fn)), (params, opt_state, batch), {"mesh": mesh, "hardware": HARDWARE},
                   "batch['input_ids']", "P('data', None)")


# ------------------------------------------------------------------------------------------ the MLP programs
def _arg(mesh: Any, shape: tuple[int, ...], spec: P) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, jnp.bfloat16, sharding=NamedSharding(mesh, spec))


def _mlp_params(mesh: Any) -> dict[str, Any]:
    return {f"layer{i}": {"w_in": _arg(mesh, (D, F), P(None, "model")), "w_out": _arg(mesh, (F, D), P("model", None))}
            for i in range(2)}


def _mlp_args(mesh: Any, x_spec: P) -> tuple[Any, Any, dict[str, Any]]:
    params = _mlp_params(mesh)
    shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), params)
    state = jax.eval_shape(_optimizer().init, shapes)
    specs = {f"layer{i}": {"w_in": P(None, "model"), "w_out": P("model", None)} for i in range(2)}

    def place(path: Any, leaf: Any) -> Any:  # a moment takes its parameter's spec (its path ends like it)
        keys = [getattr(k, "key", None) for k in path]
        spec = specs[keys[-2]][keys[-1]] if len(keys) >= 2 and keys[-2] in specs else P()
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(mesh, spec if leaf.ndim else P()))

    opt_state = jax.tree_util.tree_map_with_path(place, state)
    batch = {"x": _arg(mesh, (B, S, D), x_spec), "y": _arg(mesh, (B, S, D), x_spec)}
    return params, opt_state, batch


def _shard_map_program(plan: str) -> Program:
    mesh = _mesh()
    x_spec = PLAN_SPECS["shard_map"][plan]
    body_spec = P() if plan == "replicated" else P("data")  # what each shard's body computes on

    def block(x: jax.Array, w_in: jax.Array, w_out: jax.Array) -> jax.Array:
        return jax.lax.psum(jax.nn.relu(x @ w_in) @ w_out, "model")  # Megatron: F split, the output summed

    mlp = jax.shard_map(block, mesh=mesh, in_specs=(body_spec, P(None, "model"), P("model", None)),
                        out_specs=body_spec)

    def loss_fn(params: Any, batch: dict[str, jax.Array]) -> jax.Array:
        h = batch["x"]
        for i in range(2):
            h = h + mlp(h, params[f"layer{i}"]["w_in"], params[f"layer{i}"]["w_out"])
        return jnp.mean(jnp.square(h - batch["y"]).astype(jnp.float32))

    return Program(jax.jit(_adamw_step(loss_fn)), _mlp_args(mesh, x_spec), {"mesh": mesh, "hardware": HARDWARE},
                   "batch['x']", "P('data', None, None)", {"in_specs": str(body_spec)})


# the wsc program's constraint, by plan: the hidden activation [B, S, F]
WSC_SPECS = {"good": P("data", None, "model"), "replicated": P(None, None, "model"), "wrong_dim": P(None, None, "data")}


def _wsc_program(plan: str) -> Program:
    mesh = _mesh()
    hidden = NamedSharding(mesh, WSC_SPECS[plan])

    def loss_fn(params: Any, batch: dict[str, jax.Array]) -> jax.Array:
        h = batch["x"]
        for i in range(2):
            z = jax.nn.relu(h @ params[f"layer{i}"]["w_in"])
            z = jax.lax.with_sharding_constraint(z, hidden)  # WSC: the user's layout of the hidden activation
            h = h + z @ params[f"layer{i}"]["w_out"]
        return jnp.mean(jnp.square(h - batch["y"]).astype(jnp.float32))

    return Program(jax.jit(_adamw_step(loss_fn)), _mlp_args(mesh, P("data")), {"mesh": mesh, "hardware": HARDWARE},
                   "batch['x']", "P('data', None, None)", {"constraint": str(WSC_SPECS["good"])})


def _moe_program(plan: str) -> Program:
    mesh = _mesh(("data", "expert"))
    groups = PLAN_SPECS["moe"][plan]

    def loss_fn(params: Any, batch: dict[str, jax.Array]) -> jax.Array:
        x = batch["x"]  # [G, GS, D]: G groups of GS tokens
        probs = jax.nn.softmax((x @ params["router"]).astype(jnp.float32), axis=-1)  # [G, GS, E]
        choice = jax.nn.one_hot(jnp.argmax(probs, axis=-1), E, dtype=jnp.float32)  # top-1 (Switch)
        position = (jnp.cumsum(choice, axis=1) * choice).astype(jnp.int32) - 1  # the token's slot in its expert
        dispatch = choice[..., None] * jax.nn.one_hot(position, C, dtype=jnp.float32)  # [G, GS, E, C]; over C dropped
        combine = (dispatch * jnp.max(probs, axis=-1)[..., None, None]).astype(x.dtype)
        routed = jnp.einsum("gsec,gsd->egcd", dispatch.astype(x.dtype), x)  # tokens to their experts
        routed = jax.lax.with_sharding_constraint(routed, NamedSharding(mesh, P("expert")))  # experts over 'expert'
        h = jax.nn.relu(jnp.einsum("egcd,edf->egcf", routed, params["w_in"]))
        out = jnp.einsum("egcf,efd->egcd", h, params["w_out"])
        y = jnp.einsum("gsec,egcd->gsd", combine, out)  # and back to their groups
        return jnp.mean(jnp.square(x + y - batch["y"]).astype(jnp.float32))

    params = {"router": _arg(mesh, (D, E), P()), "w_in": _arg(mesh, (E, D, FE), P("expert")),
              "w_out": _arg(mesh, (E, FE, D), P("expert"))}
    specs = {"router": P(), "w_in": P("expert"), "w_out": P("expert")}
    shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), params)

    def place(path: Any, leaf: Any) -> Any:
        key = getattr(path[-1], "key", None) if path else None
        spec = specs.get(key, P()) if leaf.ndim else P()
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(mesh, spec))

    opt_state = jax.tree_util.tree_map_with_path(place, jax.eval_shape(_optimizer().init, shapes))
    batch = {"x": _arg(mesh, (G, GS, D), groups), "y": _arg(mesh, (G, GS, D), groups)}
    return Program(jax.jit(_adamw_step(loss_fn)), (params, opt_state, batch), {"mesh": mesh, "hardware": HARDWARE},
                   "batch['x']", "P('data', None, None)")


def program(name: str, plan: str, mesh: str = "") -> Program:
    """`name` (of PROGRAMS) under `plan` (of PLANS); `mesh` ("data=8,model=1") resizes the mesh's axes (the
    entry point `--verify-fixes` calls for a mesh change: a shard_map or a constraint names its mesh itself)."""
    if plan not in PLANS:
        raise KeyError(plan)
    _SIZES.clear()
    _SIZES.update({a: int(n) for a, _, n in (part.partition("=") for part in mesh.split(",") if part)})
    try:
        return _build(name, plan)
    finally:
        _SIZES.clear()


def _build(name: str, plan: str) -> Program:
    if name in HF_MODELS:
        return _hf_program(name, plan)
    if name == "shard_map":
        return _shard_map_program(plan)
    if name == "wsc":
        return _wsc_program(plan)
    if name == "moe":
        return _moe_program(plan)
    raise KeyError(name)


def analysed(name: str, plan: str) -> Any:
    """The report of `name` under `plan` with each finding's change applied and recompiled (`--verify-fixes`; a
    mesh change rebuilds the program on the new mesh)."""
    import analyzer
    from analyzer.workflows.verify import verify_fixes

    prog = program(name, plan)
    report = analyzer.analyze(prog.fn, *prog.args, **prog.kwargs)

    def rebuild(mesh: str) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
        new = program(name, plan, mesh)
        return new.fn, new.args, {}

    return verify_fixes(report, prog.fn, prog.args, mesh=prog.kwargs["mesh"], rebuild=rebuild)
