"""The built-in transformer template: training steps sharded by the chapter's strategies.

`build(config, strategy, mesh)` returns `(step, args)`: a jitted training step (forward, backward and the
optimizer update of a stack of transformer blocks, the layers in a `lax.scan`) and its abstract arguments,
`jax.ShapeDtypeStruct`s with `NamedSharding`s on the mesh. It feeds `analyzer.compile.lower` / `analyzer.analyze`, the
demo, report configs and sweeps.

A block is a pre-norm transformer layer: parameter-free RMSNorm (optional), grouped-query causal attention
(`W_q[D, H, K]`, `W_k[D, KV, K]`, `W_v[D, KV, K]`, `W_o[H, K, D]`) and an MLP (`W_in[D, F]`, `W_out[F, D]`; with
`mlp="gated_silu"` also `W_gate[D, F]`), or for `ep` a mixture-of-experts MLP (router `W_r[D, E]`, experts
`W_in[E, D, F]`, `W_out[E, F, D]`, top-1 routing with a capacity, GShard-style dispatch). By default the loss is
the mean squared error of the stack's output against a target of the input's shape (no embedding or vocabulary:
the blocks are what the sharding is about); with `vocab=V` the step is a language model's (token ids in, an
embedding `W_emb[V, D]`, an unembedding `W_unemb[D, V]`, cross-entropy), configured like MaxText's runs in
`examples/maxtext_v5p.py`.

Knobs for the models of published runs (each a `TransformerConfig` field and a `[model]` key of report configs;
the defaults give the programs the template always gave):
- `block="parallel"`: attention and MLP read the same normed input and are added together,
  `x + (mlp(norm x) + attn(norm x))` (GPT-J, PaLM; MaxText's default `DecoderLayer`).
- `mlp`: the activation and the matrix count: "gelu", "relu", "silu" (W_in, W_out) or "gated_silu",
  "gated_gelu", "gated_relu" (W_in, W_gate, W_out; MaxText's `mlp_activations: [act, "linear"]`).
- `embedding="iota"`: the table is read as MaxText's `use_iota_embed=true` reads it, a one-hot matmul
  `(ids[..., None] == iota(V)) @ W_emb` instead of a gather; `tied_embedding=True`: no W_unemb, the logits
  are `out @ W_emb^T / sqrt(D)` (MaxText's `logits_via_embedding` with `normalize_embedding_logits`).
- `embedding_sharding="pinned"`: the embedding read is partitioned the same way on every mesh (see
  `_embed`); "xla" (default) leaves it to XLA's sharding propagation, whose choice for the gather depends on
  the mesh shape (jax 0.10's XLA, with a replica axis such as a DCN `slice`, all-gathers the looked-up rows
  over it).
- `weight_dtype`: the parameters' dtype when it differs from `dtype`, the compute dtype (MaxText's
  `weight_dtype: float32` with `dtype: bfloat16`): each weight is cast to `dtype` where it is used
  (`jnp.asarray(kernel, dtype)`, as MaxText's layers write it), so matmuls run in `dtype` while the
  parameters, their gradients and the update stay in `weight_dtype`.
- `flash_attention=True`: on the TPU the attention is a flash kernel; the template still lowers dot-product
  attention (portable to every target) and marks the step (`analyzer.compile.lower.mark_flash_attention`), so
  `Lowered.flash_attention` is set and the step model prices the S x S scores in VMEM (docs/step.md, "Flash
  attention").
- `head_dim`: K independent of d_model / heads (e.g. 8 heads of 256 with d_model 2048).

Mesh axes and roles. The mesh is the user's, with the user's axis names. Each strategy gives the axes roles:
the *model* axis is the mesh's last axis, the *data* axes are all the others (override with `data_axes=` and
`model_axis=`). In the chapter's notation, with data axis X and model axis Y (B batch, D d_model, F d_ff):

| strategy  | activations        | weights                                  | a one-axis mesh X         |
|-----------|--------------------|------------------------------------------|---------------------------|
| `dp`      | In[B_XY, D]        | replicated                               | In[B_X, D]                |
| `fsdp`    | In[B_XY, D]        | W_in[D_XY, F], W_out[F, D_XY]            | In[B_X, D], W_in[D_X, F]  |
| `tp`      | In[B_X, D]         | W_in[D, F_Y], W_out[F_Y, D], heads H_Y   | In[B, D], W_in[D, F_X]    |
| `fsdp+tp` | In[B_X, D_Y]       | W_in[D_X, F_Y], W_out[F_Y, D_X], H_Y     | needs two axes            |
| `ep`      | In[B_XY, D]        | experts W_in[E_Y, D, F], attention repl. | In[B_X, D], W_in[E_X,...] |

`dp` and `fsdp` use every axis as a data axis; axes named in `replica_axes=` split the batch but never the
weights (data parallelism beside FSDP: MaxText's `data` axis, DCN slices). In `ep` the tokens are sharded over
all axes and the experts over the model axis; dispatching tokens to experts is an AllToAll over it (and back).
The template lets XLA choose intermediate shardings: `build`'s arguments live on an `AxisType.Auto` copy of
the mesh, `with_sharding_constraint` pins the residual stream at each layer boundary, and when the step is
traced on a mesh with Explicit axes (e.g. `lower(..., mesh={"X": (2, "explicit"), ...})`) the forward and
backward pass run under `jax.sharding.auto_axes`, so both give the same program.

Example:
    >>> from analyzer.compile.models import TransformerConfig, build
    >>> step, args = build(TransformerConfig(layers=2, attention=False), "fsdp", {"data": 8})
    >>> from analyzer.compile.lower import lower
    >>> lowered = lower(step, *args, mesh={"data": 8})
    >>> "all-gather(" in lowered.spmd_hlo     # FSDP gathers W_in[D_data, F] before using it
    True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from analyzer.errors import ConfigError, MeshError, ShardingError, valid_choices


def _config_error(message: str, where: str = "TransformerConfig") -> ConfigError:
    """A ConfigError that names the input (`TransformerConfig` or the strategy argument) as its place."""
    return ConfigError(message, path=where)

__all__ = ["STRATEGIES", "OPTIMIZERS", "REMAT_POLICIES", "MLPS", "BLOCKS", "EMBEDDINGS", "EMBEDDING_SHARDINGS",
           "TransformerConfig", "Roles", "roles", "build",
           "param_specs"]
STRATEGIES = ("dp", "fsdp", "tp", "fsdp+tp", "ep")
OPTIMIZERS = ("sgd", "adam")
DTYPES = ("float32", "bfloat16", "float16")
# Rematerialisation policies of a block (what the backward pass keeps from the forward pass):
# "none" keeps every activation; "full" keeps only the block's input and recomputes the rest
# (jax.checkpoint with nothing saveable); "dots" keeps the matmul outputs and recomputes the
# elementwise work between them (jax.checkpoint_policies.checkpoint_dots); "minimal" keeps only the outputs of
# matmuls without batch dimensions, i.e. the projections by weights, and recomputes attention's score and value
# matmuls (jax.checkpoint_policies.dots_with_no_batch_dims_saveable, MaxText's `remat_policy=minimal`).
REMAT_POLICIES = ("none", "full", "dots", "minimal")
# MLP of a block: "gelu" is GELU(x W_in) W_out; "gated_silu" is (SiLU(x W_in) * (x W_gate)) W_out, the gated
# linear unit of LLaMA-style models (MaxText's `mlp_activations: ["silu", "linear"]`), a third matrix W_gate[D, F].
# "gelu", "relu" and "silu" are the two-matrix MLP act(x W_in) W_out with that activation (MaxText's
# `mlp_activations: ["relu"]`); "gated_gelu" and "gated_relu" the gated one with another activation (Gemma's
# ["gelu", "linear"]).
MLPS = ("gelu", "gated_silu", "relu", "silu", "gated_gelu", "gated_relu")
# Blocks: "sequential" is x + attn(norm x), then + mlp(norm x); "parallel" is x + (mlp(norm x) + attn(norm x)),
# one norm read by both (GPT-J, PaLM; MaxText's default DecoderLayer).
BLOCKS = ("sequential", "parallel")
# How token ids become the residual stream: "gather" (jnp.take of the rows) or "iota" (MaxText's use_iota_embed:
# a one-hot [B, S, V] matmul with the table).
EMBEDDINGS = ("gather", "iota")
# Who partitions the embedding read: "xla" (sharding propagation; its choice depends on the mesh shape) or
# "pinned" (the template's constraints fix it: the same collectives on every mesh, see `_embed`).
EMBEDDING_SHARDINGS = ("xla", "pinned")
# Fields where 0 means "not used" (no embedding; head dim from d_model // heads).
_ZERO_MEANS_DEFAULT = ("vocab", "head_dim")
# Fields with a fixed set of values: name -> (values, what to call them in an error).
_CHOICES = {"dtype": (DTYPES, "dtypes"), "optimizer": (OPTIMIZERS, "optimizers"), "mlp": (MLPS, "MLPs"),
            "remat": (REMAT_POLICIES, "remat policies"), "block": (BLOCKS, "blocks"),
            "embedding": (EMBEDDINGS, "embeddings"), "embedding_sharding": (EMBEDDING_SHARDINGS, "embedding shardings")}
# Fields that only mean something with an embedding (vocab > 0), with their default.
_NEEDS_VOCAB = {"embedding": "gather", "tied_embedding": False, "embedding_sharding": "xla"}


@dataclass(frozen=True)
class TransformerConfig:
    """Sizes of the template transformer and its optimizer.

    Attributes:
      d_model: D, the residual width.
      d_ff: F, the MLP hidden width (per expert for `ep`).
      heads: H, query heads; `d_model` must be a multiple unless `head_dim` is set.
      kv_heads: KV heads for grouped-query attention; divides `heads`.
      head_dim: K, the width of one head; 0 (default) means d_model // heads. With it set, H x K need not be
        d_model (MaxText keeps K = 128 while scaling heads and d_model).
      layers: L, blocks in the `lax.scan`.
      seq: S, tokens per sequence.
      batch: B, sequences per step (global).
      dtype: the compute dtype (activations, matmul operands) and, unless `weight_dtype` is set, the parameters':
        "bfloat16", "float32" or "float16".
      optimizer: "sgd" or "adam" (Adam keeps two moments sharded like the parameters).
      experts: E, experts of the `ep` block.
      capacity_factor: expert capacity = ceil(capacity_factor * tokens per group / experts) for `ep`.
      attention: include the attention sub-block.
      norm: RMSNorm before each sub-block. With D sharded (fsdp+tp) a norm costs a small AllReduce of the
        per-token sums; `attention=False, norm=False` is the chapter's bare block In · W_in · W_out.
      learning_rate: step size of the update.
      remat: what the backward pass keeps of each block's forward pass: one of `REMAT_POLICIES`.
      microbatches: gradient accumulation: the step runs forward and backward on `batch // microbatches`
        sequences at a time (a `lax.scan`), sums the gradients, then updates once; `batch` must be a multiple.
      mlp: the MLP of a block, one of `MLPS`: "gelu", "relu", "silu" (two matrices, act(x W_in) W_out) or
        "gated_silu", "gated_gelu", "gated_relu" (three, (act(x W_in) * x W_gate) W_out).
      vocab: V. 0 (default): the blocks alone, input and target are activations [B, S, D] and the loss is their
        mean squared error. V > 0: a language model: the input and target are token ids int32[B, S], an
        embedding table W_emb[V, D] turns ids into the residual stream (a gather), an unembedding W_unemb[D, V]
        turns the last block's (normed) output into logits, and the loss is the mean cross-entropy.
      block: "sequential" (default) or "parallel": attention and MLP on the same normed input, summed
        (`x + (mlp(norm x) + attn(norm x))`); needs `attention`.
      weight_dtype: the parameters' dtype ("bfloat16", "float32", "float16"); "" (default) means `dtype`. With
        f32 weights and bf16 `dtype` each weight is cast to bf16 where it is used, as MaxText's layers do.
      embedding: "gather" (default) or "iota" (one-hot matmul, MaxText's `use_iota_embed`); needs `vocab`.
      tied_embedding: the logits are read from the embedding table (`out @ W_emb^T / sqrt(D)`; MaxText's
        `logits_via_embedding`); no W_unemb. Needs `vocab`.
      embedding_sharding: "xla" (default: XLA partitions the embedding read, differently on different mesh
        shapes) or "pinned" (the template fixes it; the same collectives on every mesh). Needs `vocab`.
      flash_attention: the attention runs on the TPU as a flash kernel: the step is marked so the analysis prices
        the S x S scores in VMEM (`Lowered.flash_attention`). Needs `attention`.
    """

    d_model: int = 256
    d_ff: int = 1024
    heads: int = 4
    kv_heads: int = 4
    layers: int = 2
    seq: int = 64
    batch: int = 16
    dtype: str = "bfloat16"
    optimizer: str = "sgd"
    experts: int = 8
    capacity_factor: float = 1.25
    attention: bool = True
    norm: bool = True
    learning_rate: float = 1e-3
    remat: str = "none"
    microbatches: int = 1
    head_dim: int = 0
    mlp: str = "gelu"
    vocab: int = 0
    block: str = "sequential"
    weight_dtype: str = ""
    embedding: str = "gather"
    tied_embedding: bool = False
    embedding_sharding: str = "xla"
    flash_attention: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "bool" and not isinstance(value, bool):
                raise _config_error(f"{f.name} must be true or false, got {value!r}")
            if f.type != "int":
                continue
            low = 0 if f.name in _ZERO_MEANS_DEFAULT else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                what = "a non-negative integer (0: not used)" if low == 0 else "a positive integer"
                raise _config_error(f"{f.name} must be {what}, got {value!r}")
        for name, (choices, what) in _CHOICES.items():
            value = getattr(self, name)
            if value not in choices:
                raise _config_error(f"{name} {value!r}: " + valid_choices(str(value), choices, what=what))
        if self.weight_dtype not in ("", *DTYPES):
            raise _config_error(f"weight_dtype {self.weight_dtype!r}: "
                                + valid_choices(str(self.weight_dtype), DTYPES, what="weight dtypes")
                                + ' (or "": the same as dtype)')
        if not self.head_dim and self.d_model % self.heads:
            raise _config_error(f"d_model={self.d_model} is not a multiple of heads={self.heads} "
                                "(or set head_dim)")
        if self.heads % self.kv_heads:
            raise _config_error(f"heads={self.heads} is not a multiple of "
                              f"kv_heads={self.kv_heads}")
        if not self.capacity_factor > 0:
            raise _config_error(f"capacity_factor must be positive, got {self.capacity_factor!r}")
        if self.batch % self.microbatches:
            raise _config_error(f"batch={self.batch} is not a multiple of microbatches={self.microbatches}")
        self._check_knobs()

    def _check_knobs(self) -> None:
        """The knobs that need another part of the model: an embedding knob needs `vocab`, the parallel block and
        flash attention need `attention`."""
        if not self.vocab:
            for name, default in _NEEDS_VOCAB.items():
                if getattr(self, name) != default:
                    raise _config_error(f"{name}={getattr(self, name)!r} needs an embedding table: set vocab > 0 "
                                        f"(vocab=0 is the blocks alone), or {name}={default!r}")
        if not self.attention:
            if self.block == "parallel":
                raise _config_error("block='parallel' adds attention and MLP side by side: it needs attention=True "
                                    "(without attention use block='sequential')")
            if self.flash_attention:
                raise _config_error("flash_attention=True marks the attention as a flash kernel: it needs "
                                    "attention=True")

    @property
    def param_dtype(self) -> str:
        """The parameters' dtype: `weight_dtype`, or `dtype` when it is ""."""
        return self.weight_dtype or self.dtype

    @property
    def gated(self) -> bool:
        """Whether the MLP has a third matrix W_gate (`mlp` "gated_*")."""
        return self.mlp.startswith("gated_")

    @property
    def activation(self) -> str:
        """The MLP's activation: "gelu", "relu" or "silu"."""
        return self.mlp.removeprefix("gated_")

    @property
    def k(self) -> int:
        """K, the width of one head: `head_dim`, or d_model // heads when it is 0."""
        return self.head_dim or self.d_model // self.heads

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Roles:
    """Which mesh axes play which part: `data` axes shard the batch, the `model` axis the weights (tp) or
    experts (ep); `fsdp` are the axes the weights are sharded over for FSDP (the data axes). `replica` axes
    shard the batch too but never the weights (plain data parallelism next to FSDP, e.g. across DCN slices)."""

    data: tuple[str, ...]
    model: str | None
    replica: tuple[str, ...] = ()

    @property
    def batch(self) -> tuple[str, ...]:
        """The axes the batch is split over, major to minor: the replica axes, then the data axes."""
        return self.replica + tuple(a for a in self.data if a not in self.replica)


def roles(strategy: str, axis_names: Sequence[str], *, data_axes: Sequence[str] | None = None,
          model_axis: str | None = None, replica_axes: Sequence[str] = ()) -> Roles:
    """The roles of the mesh axes under a strategy.

    Args:
      strategy: one of `STRATEGIES`.
      axis_names: the mesh's axis names, major to minor.
      data_axes, model_axis: explicit choices; by default the model axis is the last axis and the data axes
        the others (`dp` and `fsdp` use every axis as a data axis; a one-axis mesh gives its axis to the
        strategy's own role).
      replica_axes: axes that split the batch but keep every weight whole (taken out of the default data
        axes); e.g. MaxText's `data` axis next to `fsdp`, or the DCN axis of a multi-slice run.

    Example:
        >>> roles("fsdp+tp", ("data", "model"))
        Roles(data=('data',), model='model', replica=())
        >>> roles("fsdp+tp", ("slice", "fsdp", "tensor"), replica_axes=("slice",)).batch
        ('slice', 'fsdp')
    """
    names = tuple(axis_names)
    if strategy not in STRATEGIES:
        raise _config_error(f"unknown strategy {strategy!r}: " + valid_choices(strategy, STRATEGIES, what="strategies"),
                            where="strategy")
    replica = tuple(replica_axes)
    for axis in (*(data_axes or ()), *((model_axis,) if model_axis else ()), *replica):
        if axis not in names:
            raise MeshError(f"strategy {strategy!r}: mesh axis {axis!r} is not in the mesh {names}; "
                            + valid_choices(axis, names, what="axes"))
    both = set(replica) & set(data_axes or ()) | ({model_axis} & set(replica))
    if both:
        raise MeshError(f"strategy {strategy!r}: axes {sorted(both)} cannot be replica axes and also data or "
                        "model axes")
    rest = tuple(n for n in names if n not in replica)
    if strategy in ("dp", "fsdp"):
        if model_axis is not None:
            raise MeshError(f"strategy {strategy!r} has no model axis; got model_axis={model_axis!r}")
        return Roles(tuple(data_axes) if data_axes is not None else rest, None, replica)
    model = model_axis if model_axis is not None else names[-1]
    if model in replica:
        raise MeshError(f"strategy {strategy!r}: the model axis {model!r} cannot be a replica axis; name the "
                        "model axis with model_axis=")
    if data_axes is not None:
        data = tuple(data_axes)
    elif strategy == "ep":
        data = rest  # tokens over every axis; experts over the model axis
    else:
        data = tuple(n for n in rest if n != model)
    if strategy != "ep" and model in data:
        raise MeshError(f"strategy {strategy!r}: axis {model!r} cannot be both a data axis and the model axis")
    if strategy == "fsdp+tp" and not data:
        raise MeshError(f"strategy 'fsdp+tp' needs two mesh axes (data and model); the mesh has only {names}")
    return Roles(data, model, replica)


def _spec_entry(axes: Sequence[str]) -> Any:
    """A PartitionSpec entry for a tuple of axes: None, one name, or a tuple."""
    axes = tuple(axes)
    return None if not axes else axes[0] if len(axes) == 1 else axes


def param_specs(config: TransformerConfig, strategy: str, r: Roles,
                sizes: dict[str, int] | None = None) -> dict[str, Any]:
    """PartitionSpecs of the stacked parameters (leading layer dimension L, never sharded).

    Args:
      config, strategy: as for `build`.
      r: the axis roles (`roles`).
      sizes: mesh axis sizes; when the model axis does not divide `kv_heads`, the K/V projections stay
        unsharded over it (as Megatron does for grouped-query attention).

    Returns:
      dict name -> PartitionSpec for "w_q", "w_k", "w_v", "w_o" (when `config.attention`), "w_in", "w_out",
      "w_gate" (gated MLP), "w_r" for `ep`, and "w_emb", "w_unemb" (not stacked by layer; no "w_unemb" with
      `tied_embedding`) when `config.vocab`.
      The embedding tables are sharded as MaxText shards them: vocabulary over the model axis, d_model over
      the FSDP axes.
    """
    from jax.sharding import PartitionSpec as P

    d = _spec_entry(r.data)
    m = r.model
    kv = m if (m is not None and (sizes is None or config.kv_heads % sizes[m] == 0)) else None
    specs: dict[str, Any] = {}
    if strategy == "dp":
        attn = dict(w_q=P(), w_k=P(), w_v=P(), w_o=P())
        mlp = dict(w_in=P(), w_out=P())
    elif strategy == "fsdp":
        attn = dict(w_q=P(None, d), w_k=P(None, d), w_v=P(None, d), w_o=P(None, None, None, d))
        mlp = dict(w_in=P(None, d, None), w_out=P(None, None, d))
    elif strategy == "tp":
        attn = dict(w_q=P(None, None, m), w_k=P(None, None, kv), w_v=P(None, None, kv), w_o=P(None, m))
        mlp = dict(w_in=P(None, None, m), w_out=P(None, m, None))
    elif strategy == "fsdp+tp":
        attn = dict(w_q=P(None, d, m), w_k=P(None, d, kv), w_v=P(None, d, kv), w_o=P(None, m, None, d))
        mlp = dict(w_in=P(None, d, m), w_out=P(None, m, d))
    else:  # ep: attention data parallel, experts over the model axis
        attn = dict(w_q=P(), w_k=P(), w_v=P(), w_o=P())
        mlp = dict(w_r=P(), w_in=P(None, m), w_out=P(None, m))
    if config.gated:
        mlp["w_gate"] = mlp["w_in"]
    if config.attention:
        specs.update(attn)
    specs.update(mlp)
    if config.vocab:
        fsdp_d = d if strategy in ("fsdp", "fsdp+tp") else None
        vocab_m = m if strategy in ("tp", "fsdp+tp") else None
        specs["w_emb"] = P(vocab_m, fsdp_d)
        if not config.tied_embedding:
            specs["w_unemb"] = P(fsdp_d, vocab_m)
    return specs


def _activation_spec(strategy: str, r: Roles) -> Any:
    """PartitionSpec of the residual stream [B, S, D] between blocks."""
    from jax.sharding import PartitionSpec as P

    if strategy == "fsdp+tp":
        return P(_spec_entry(r.batch), None, r.model)
    return P(_spec_entry(r.batch), None, None)


def _param_shapes(c: TransformerConfig, strategy: str) -> dict[str, tuple[int, ...]]:
    L, D, F, H, KV, K, E = c.layers, c.d_model, c.d_ff, c.heads, c.kv_heads, c.k, c.experts
    shapes: dict[str, tuple[int, ...]] = {}
    if c.attention:
        shapes.update(w_q=(L, D, H, K), w_k=(L, D, KV, K), w_v=(L, D, KV, K), w_o=(L, H, K, D))
    if strategy == "ep":
        shapes.update(w_r=(L, D, E), w_in=(L, E, D, F), w_out=(L, E, F, D))
    else:
        shapes.update(w_in=(L, D, F), w_out=(L, F, D))
    if c.gated:
        shapes["w_gate"] = shapes["w_in"]
    if c.vocab:
        shapes["w_emb"] = (c.vocab, D)
        if not c.tied_embedding:
            shapes["w_unemb"] = (D, c.vocab)
    return shapes


# Parameters outside the scanned stack of blocks.
_TOP_LEVEL = ("w_emb", "w_unemb")


def _check_divides(shape: Sequence[int], spec: Any, sizes: dict[str, int], what: str, hint: str) -> None:
    for dim, entry in enumerate(tuple(spec)):
        if entry is None:
            continue
        axes = (entry,) if isinstance(entry, str) else tuple(entry)
        n = math.prod(sizes[a] for a in axes)
        if shape[dim] % n:
            raise ShardingError(f"{what}: dimension {dim} of shape {tuple(shape)} is sharded over {'x'.join(axes)} "
                                f"({n} devices) but {shape[dim]} is not a multiple of {n}; {hint}")


# --------------------------------------------------------------------------------------------------------------
# The model


def _rms_norm(x: Any) -> Any:
    import jax
    import jax.numpy as jnp

    x32 = x.astype(jnp.float32)
    return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-6)).astype(x.dtype)


def _attention(x: Any, p: dict[str, Any], c: TransformerConfig) -> Any:
    """Grouped-query causal self-attention; x [B, S, D]."""
    import jax
    import jax.numpy as jnp

    B, S, _ = x.shape
    groups = c.heads // c.kv_heads
    q = jnp.einsum("bsd,dhk->bshk", x, p["w_q"])
    k = jnp.einsum("bsd,dgk->bsgk", x, p["w_k"])
    v = jnp.einsum("bsd,dgk->bsgk", x, p["w_v"])
    q = q.reshape(B, S, c.kv_heads, groups, c.k)
    scores = jnp.einsum("bsgrk,btgk->bgrst", q, k).astype(jnp.float32) / math.sqrt(c.k)
    causal = jnp.tril(jnp.ones((S, S), dtype=bool))
    scores = jnp.where(causal, scores, -1e30)
    weights = jax.nn.softmax(scores, axis=-1).astype(x.dtype)
    out = jnp.einsum("bgrst,btgk->bsgrk", weights, v).reshape(B, S, c.heads, c.k)
    return jnp.einsum("bshk,hkd->bsd", out, p["w_o"])


def _activate(h: Any, gate: Callable[[], Any], c: TransformerConfig) -> Any:
    """The MLP's nonlinearity on x W_in: act(h), or act(h) * (x W_gate) for a gated MLP (`gate()` computes
    x W_gate), the activation a `jax.nn` function as MaxText takes it (`getattr(jax.nn, name)`)."""
    import jax

    a = getattr(jax.nn, c.activation)(h)
    return a * gate() if c.gated else a


def _mlp(x: Any, p: dict[str, Any], c: TransformerConfig) -> Any:
    import jax.numpy as jnp

    h = jnp.einsum("bsd,df->bsf", x, p["w_in"])
    h = _activate(h, lambda: jnp.einsum("bsd,df->bsf", x, p["w_gate"]), c)
    return jnp.einsum("bsf,fd->bsd", h, p["w_out"])


def _as_compute(w: Any, c: TransformerConfig) -> Any:
    """A weight in the compute dtype where it is used (MaxText's `jnp.asarray(kernel, self.dtype)`); the weight
    itself when it already is (the defaults: no cast in the program)."""
    import jax.numpy as jnp

    return jnp.asarray(w, c.dtype) if c.param_dtype != c.dtype else w


def _moe(x: Any, p: dict[str, Any], c: TransformerConfig, r: Roles, groups: int) -> Any:
    """Top-1 mixture of experts with capacity (GShard dispatch). Tokens are split into `groups` groups (one per
    data shard); the dispatched tensor [E, G, C, D] is sharded over experts on the model axis, so moving tokens
    from group-sharded to expert-sharded layout is an AllToAll over the model axis."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    B, S, D = x.shape
    E = c.experts
    tokens = x.reshape(groups, B * S // groups, D)  # [G, T, D]
    T = tokens.shape[1]
    capacity = max(1, math.ceil(c.capacity_factor * T / E))
    logits = jnp.einsum("gtd,de->gte", tokens, p["w_r"]).astype(jnp.float32)
    probs = jax.nn.softmax(logits, axis=-1)
    expert = jnp.argmax(probs, axis=-1)  # [G, T]
    gate = jnp.max(probs, axis=-1)
    onehot = jax.nn.one_hot(expert, E, dtype=jnp.int32)  # [G, T, E]
    position = jnp.cumsum(onehot, axis=1) * onehot - 1  # slot of each token in its expert's buffer
    keep = (position >= 0) & (position < capacity)
    dispatch = (jax.nn.one_hot(position, capacity, dtype=x.dtype) * keep[..., None].astype(x.dtype))  # [G,T,E,C]
    combine = dispatch * gate[..., None, None].astype(x.dtype)
    by_group = P(None, _spec_entry(r.batch), None, None)  # [E, G_data, C, D]: where the tokens are
    by_expert = P(r.model, _spec_entry(tuple(a for a in r.batch if a != r.model)), None, None)  # [E_model, ...]
    expert_in = jax.lax.with_sharding_constraint(jnp.einsum("gtec,gtd->egcd", dispatch, tokens), by_group)
    expert_in = jax.lax.with_sharding_constraint(expert_in, by_expert)  # AllToAll: tokens to their experts
    h = jnp.einsum("egcd,edf->egcf", expert_in, p["w_in"])
    h = _activate(h, lambda: jnp.einsum("egcd,edf->egcf", expert_in, p["w_gate"]), c)
    expert_out = jax.lax.with_sharding_constraint(jnp.einsum("egcf,efd->egcd", h, p["w_out"]), by_expert)
    expert_out = jax.lax.with_sharding_constraint(expert_out, by_group)  # AllToAll: results back home
    out = jnp.einsum("egcd,gtec->gtd", expert_out, combine)
    out = jax.lax.with_sharding_constraint(out, P(_spec_entry(r.batch), None, None))
    return out.reshape(B, S, D)


def _remat(block: Callable[..., Any], policy: str) -> Callable[..., Any]:
    """The block under a rematerialisation policy (`REMAT_POLICIES`)."""
    import jax

    if policy == "full":
        return jax.checkpoint(block, policy=jax.checkpoint_policies.nothing_saveable)
    if policy == "dots":
        return jax.checkpoint(block, policy=jax.checkpoint_policies.checkpoint_dots)
    if policy == "minimal":
        return jax.checkpoint(block, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)
    return block


def _accumulate(grad_fn: Callable[..., Any], params: Any, batch: tuple[Any, Any], microbatches: int,
                act: Any) -> tuple[Any, Any]:
    """`grad_fn(params, x, y)` over the batch in `microbatches` pieces, run one after another (`lax.scan`):
    the mean of the losses and of the gradients, which equals one pass over the whole batch. Each piece
    keeps the batch's sharding (`act`), so every data shard works on its share of every microbatch."""
    import jax
    import jax.numpy as jnp

    if microbatches == 1:
        return grad_fn(params, *batch)
    x, y = batch

    def split(a: Any) -> Any:
        # [B, S, D] -> [M, B/M, S, D] with microbatch m = rows m, m+M, m+2M, ...: each data shard's block of
        # rows holds its share of every microbatch, so splitting moves no data between devices.
        return jnp.swapaxes(a.reshape(a.shape[0] // microbatches, microbatches, *a.shape[1:]), 0, 1)

    def body(carry: tuple[Any, Any], xy: tuple[Any, Any]) -> tuple[tuple[Any, Any], None]:
        loss_sum, grad_sum = carry
        mx, my = (jax.lax.with_sharding_constraint(v, act) for v in xy)
        loss, grads = grad_fn(params, mx, my)
        grad_sum = jax.tree.map(lambda s, g: s + g.astype(jnp.float32), grad_sum, grads)
        return (loss_sum + loss, grad_sum), None

    zeros = jax.tree.map(lambda w: jnp.zeros(w.shape, jnp.float32), params)
    (loss_sum, grad_sum), _ = jax.lax.scan(body, (jnp.zeros((), jnp.float32), zeros), (split(x), split(y)))
    grads = jax.tree.map(lambda g, w: (g / microbatches).astype(w.dtype), grad_sum, params)
    return loss_sum / microbatches, grads


def _make_step(c: TransformerConfig, strategy: str, r: Roles, sizes: dict[str, int],
               shardings: tuple[Any, Any, Any]) -> Callable[..., Any]:
    """The training step `(params, opt_state, batch) -> (params, opt_state, loss)`, jitted."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    act = _activation_spec(strategy, r)
    tokens_spec = P(_spec_entry(r.batch), None)
    groups = math.prod(sizes[a] for a in r.batch) if r.batch else 1

    param_specs_tree = {k: v.spec for k, v in shardings[0].items()}

    def block(x: Any, p: dict[str, Any]) -> tuple[Any, None]:
        norm = _rms_norm if c.norm else (lambda v: v)
        p = {k: _as_compute(w, c) for k, w in p.items()}

        def ffn(h: Any) -> Any:
            return _moe(h, p, c, r, groups) if strategy == "ep" else _mlp(h, p, c)

        if c.block == "parallel":  # MaxText's DecoderLayer: mlp_lnx + attention_lnx, then + inputs
            h = norm(x)
            x = x + (ffn(h) + _attention(h, p, c))
        else:
            if c.attention:
                x = x + _attention(norm(x), p, c)
            x = x + ffn(norm(x))
        x = jax.lax.with_sharding_constraint(x, act)
        return x, None

    block = _remat(block, c.remat)

    def loss_fn(params: dict[str, Any], x: Any, y: Any) -> Any:
        stack = {k: v for k, v in params.items() if k not in _TOP_LEVEL}
        if c.vocab:
            x = _embed(params["w_emb"], x, c, r, act, param_specs_tree["w_emb"])  # ids [B, S] -> [B, S, D]
        x = jax.lax.with_sharding_constraint(x, act)
        out, _ = jax.lax.scan(block, x, stack)
        if not c.vocab:
            return jnp.mean(jnp.square((out - y).astype(jnp.float32)))
        out = _rms_norm(out) if c.norm else out
        logits = _logits(out, params, c)
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.sum(logp * jax.nn.one_hot(y, c.vocab, dtype=jnp.float32), axis=-1))

    def step(params: dict[str, Any], opt_state: Any, batch: tuple[Any, Any]) -> tuple[Any, Any, Any]:
        grad_fn = jax.value_and_grad(loss_fn)
        # On a mesh with Explicit axes (sharding in types) the forward and backward pass run with those axes
        # made Auto, so XLA chooses the intermediate shardings as the template intends; the gradients come
        # back sharded like the parameters.
        context = jax.sharding.get_abstract_mesh()
        explicit = tuple(n for n, t in zip(context.axis_names, context.axis_types) if t == AxisType.Explicit)
        if explicit:
            grad_fn = jax.sharding.auto_axes(grad_fn, axes=explicit, out_sharding=(P(), param_specs_tree))
        loss, grads = _accumulate(grad_fn, params, batch, c.microbatches, tokens_spec if c.vocab else act)
        lr = c.learning_rate
        if c.optimizer == "sgd":
            new_params = jax.tree.map(lambda w, g: w - (lr * g).astype(w.dtype), params, grads)
            return new_params, opt_state, loss
        b1, b2, eps = 0.9, 0.999, 1e-8
        count = opt_state["count"] + 1
        mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g.astype(jnp.float32), opt_state["mu"], grads)
        nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * jnp.square(g.astype(jnp.float32)), opt_state["nu"],
                          grads)
        t = count.astype(jnp.float32)
        scale = lr * jnp.sqrt(1 - b2**t) / (1 - b1**t)
        new_params = jax.tree.map(lambda w, m, v: (w - scale * m / (jnp.sqrt(v) + eps)).astype(w.dtype),
                                  params, mu, nu)
        return new_params, {"count": count, "mu": mu, "nu": nu}, loss

    param_sh, opt_sh, _ = shardings
    mesh = jax.tree.leaves(param_sh)[0].mesh
    step.__name__ = f"train_step_{strategy.replace('+', '_')}"
    step.__qualname__ = step.__name__
    jitted = jax.jit(step, out_shardings=(param_sh, opt_sh, NamedSharding(mesh, P())))
    if c.flash_attention:
        from analyzer.compile.lower import mark_flash_attention

        mark_flash_attention(jitted)
    return jitted


def _embed(table: Any, ids: Any, c: TransformerConfig, r: Roles, act: Any, table_spec: Any) -> Any:
    """Token ids [B, S] -> the residual stream [B, S, D], read from the table W_emb[V, D] (sharded `table_spec`:
    vocabulary over the model axis, d_model over the FSDP axes) in the compute dtype.

    `embedding="gather"` takes the rows (`jnp.take`); "iota" multiplies a one-hot [B, S, V] by the table, as
    MaxText's `use_iota_embed` writes it (`jnp.array(ids[..., None] == iota, dtype)`, then `jnp.dot`).

    `embedding_sharding="xla"` leaves the partitioning to XLA's sharding propagation. For the gather it depends on
    the mesh shape: the ids are split over every batch axis, the table's d_model over the FSDP axes, and the
    partitioner picks a plan for each mesh anew: on `fsdp=4,tensor=2` jax 0.10's XLA moves the rows with
    sub-axis collectives (an all-gather over `fsdp:(1)2`, an all-to-all over `fsdp:(2)2`), on
    `slice=2,fsdp=2,tensor=2` (slice a replica axis, the DCN of a two-slice run) it all-gathers the looked-up rows
    over `slice`, a DCN collective in the forward pass that the batch split does not need (jax 0.12's XLA
    chooses other plans again).

    "pinned" fixes it with sharding constraints, so every mesh gets the same kinds of collectives:
    - gather: the ids are split over the batch axes that do not shard the table's d_model (all-gathered over the
      FSDP axes, a few int32 per token), each device takes its rows of its slice of the table's d_model (the rows
      of a vocabulary sharded over the model axis masked and all-reduced over it), and the rows
      [B_(batch axes but FSDP), S, D_FSDP] are moved to the residual stream's layout by an all-to-all over the
      FSDP axes. Nothing crosses a replica axis in the forward pass.
    - iota: the table is all-gathered over the FSDP axes (as every FSDP weight is) and the one-hot keeps the
      batch split and the vocabulary sharded as the table: a local matmul, summed over the model axis.
    """
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import PartitionSpec as P

    table = _as_compute(table, c)  # MaxText: jnp.asarray(embedding, self.dtype)
    pinned = c.embedding_sharding == "pinned"
    vocab_axes, d_axes = (tuple(table_spec) + (None, None))[:2]
    constrain = jax.lax.with_sharding_constraint
    batch = _spec_entry(r.batch)
    if c.embedding == "iota":
        one_hot = jnp.array(ids[..., jnp.newaxis] == lax.iota(jnp.int32, c.vocab), dtype=c.dtype)
        if pinned:
            one_hot = constrain(one_hot, P(batch, None, vocab_axes))
        x = jnp.dot(one_hot, table)
        return constrain(x, act) if pinned else x
    if not pinned:
        return jnp.take(table, ids, axis=0)
    fsdp = () if d_axes is None else (d_axes,) if isinstance(d_axes, str) else tuple(d_axes)
    rows = _spec_entry(tuple(a for a in r.batch if a not in fsdp))
    x = constrain(jnp.take(table, constrain(ids, P(rows, None)), axis=0), P(rows, None, d_axes))
    return constrain(constrain(x, P(batch, None, None)), act)


def _logits(out: Any, params: dict[str, Any], c: TransformerConfig) -> Any:
    """The logits [B, S, V] in float32 of the last block's (normed) output: by W_unemb, or with `tied_embedding`
    by the embedding table as MaxText's `logits_via_embedding` computes them (`attend_on_embedding`: the table in
    the compute dtype, transposed; then divided by sqrt(D), `normalize_embedding_logits`)."""
    import jax.numpy as jnp

    if not c.tied_embedding:
        return jnp.einsum("bsd,dv->bsv", out, _as_compute(params["w_unemb"], c)).astype(jnp.float32)
    logits = jnp.dot(out, jnp.asarray(params["w_emb"], c.dtype).T, preferred_element_type=c.dtype)
    return (logits / jnp.sqrt(out.shape[-1])).astype(jnp.float32)


def build(config: TransformerConfig, strategy: str, mesh: Any, *, data_axes: Sequence[str] | None = None,
          model_axis: str | None = None,
          replica_axes: Sequence[str] = ()) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """A training step of the template transformer sharded by a strategy, and its abstract arguments.

    Args:
      config: the sizes and optimizer.
      strategy: "dp", "fsdp", "tp", "fsdp+tp" or "ep" (see the module doc for the shardings).
      mesh: a `jax.sharding.Mesh`, `AbstractMesh`, dict `{"data": 4, "model": 2}` or string "data=4,model=2";
        only its axis names and sizes matter.
      data_axes, model_axis: override the default roles (model = last axis, data = the others).
      replica_axes: axes that split the batch and keep the weights whole (see `roles`).

    Returns:
      `(step, (params, opt_state, (x, y)))`: `step` is jitted; the arguments are `jax.ShapeDtypeStruct`s with
      `NamedSharding`s on an Auto-typed `AbstractMesh` of the same axes. `params` maps "w_q", "w_k", "w_v",
      "w_o", "w_in", "w_out" (and "w_gate" for a gated MLP, "w_r" for ep) to stacked arrays with a leading
      layer dimension, and "w_emb", "w_unemb" to the embedding tables when `config.vocab`; `opt_state` is `()`
      for sgd and `{"count", "mu", "nu"}` for adam. `x` and `y` are activations [B, S, D], or token ids
      int32[B, S] when `config.vocab`.

    Raises:
      ConfigError: unknown strategy. MeshError: roles that do not fit the mesh. ShardingError: a size that an
      axis does not divide (the message names the config field).

    Example:
        >>> step, args = build(TransformerConfig(), "fsdp+tp", {"X": 2, "Y": 4})
        >>> args[0]["w_in"].sharding.spec
        P(None, 'X', 'Y')
    """
    import jax
    import jax.numpy as jnp
    from jax.sharding import AbstractMesh, AxisType, NamedSharding

    from analyzer.compile.lower import make_mesh

    user_mesh = make_mesh(mesh)
    abstract = AbstractMesh(tuple(user_mesh.axis_sizes), tuple(user_mesh.axis_names),
                            axis_types=(AxisType.Auto,) * len(user_mesh.axis_names))
    sizes = dict(zip(abstract.axis_names, abstract.axis_sizes))
    r = roles(strategy, abstract.axis_names, data_axes=data_axes, model_axis=model_axis, replica_axes=replica_axes)
    c = config
    specs = param_specs(c, strategy, r, sizes)
    if strategy == "ep" and r.model is not None and c.experts % sizes[r.model]:
        raise ShardingError(f"ep: experts={c.experts} is not a multiple of the model axis "
                            f"{r.model!r} ({sizes[r.model]} devices)")
    shapes = _param_shapes(c, strategy)
    dtype = jnp.dtype(c.dtype)
    param_dtype = jnp.dtype(c.param_dtype)
    hints = {"w_q": "d_model and heads", "w_k": "d_model and kv_heads", "w_v": "d_model and kv_heads",
             "w_o": "heads and d_model", "w_in": "d_model, d_ff (and experts)", "w_out": "d_ff, d_model (and experts)",
             "w_r": "d_model and experts", "w_gate": "d_model, d_ff (and experts)",
             "w_emb": "vocab and d_model", "w_unemb": "d_model and vocab"}
    params = {}
    for name, shape in shapes.items():
        _check_divides(shape, specs[name], sizes, f"{strategy}: parameter {name}",
                       f"choose {hints[name]} divisible by the mesh axes")
        params[name] = jax.ShapeDtypeStruct(shape, param_dtype, sharding=NamedSharding(abstract, specs[name]))
    act = _activation_spec(strategy, r)
    x_shape = (c.batch, c.seq, c.d_model)
    _check_divides(x_shape, act, sizes, f"{strategy}: activations [batch, seq, d_model]",
                   "choose batch (and d_model) divisible by the mesh axes")
    if c.microbatches > 1:
        _check_divides((c.batch // c.microbatches, c.seq, c.d_model), act, sizes,
                       f"{strategy}: a microbatch [batch/microbatches, seq, d_model]",
                       "choose batch / microbatches divisible by the data axes")
    if strategy == "ep":
        groups = math.prod(sizes[a] for a in r.batch) if r.batch else 1
        tokens = c.batch // c.microbatches * c.seq
        if tokens % groups:
            raise ShardingError(f"ep: {tokens} tokens per microbatch (batch/microbatches*seq) do not split into "
                                f"{groups} groups")
    if c.vocab:
        from jax.sharding import PartitionSpec as P

        ids = NamedSharding(abstract, P(_spec_entry(r.batch), None))
        x = jax.ShapeDtypeStruct((c.batch, c.seq), jnp.int32, sharding=ids)
        y = jax.ShapeDtypeStruct((c.batch, c.seq), jnp.int32, sharding=ids)
    else:
        x = jax.ShapeDtypeStruct(x_shape, dtype, sharding=NamedSharding(abstract, act))
        y = jax.ShapeDtypeStruct(x_shape, dtype, sharding=NamedSharding(abstract, act))
    param_sh = {k: v.sharding for k, v in params.items()}
    if c.optimizer == "adam":
        from jax.sharding import PartitionSpec as P

        moments = {k: jax.ShapeDtypeStruct(v.shape, jnp.float32, sharding=v.sharding) for k, v in params.items()}
        count = jax.ShapeDtypeStruct((), jnp.int32, sharding=NamedSharding(abstract, P()))
        opt_state: Any = {"count": count, "mu": moments, "nu": dict(moments)}
        opt_sh: Any = {"count": count.sharding, "mu": param_sh, "nu": dict(param_sh)}
    else:
        opt_state, opt_sh = (), ()
    step = _make_step(c, strategy, r, sizes, (param_sh, opt_sh, None))
    return step, (params, opt_state, (x, y))
