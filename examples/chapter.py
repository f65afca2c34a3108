"""The programs of "How to Scale Your Model", chapter 3 (sharded matmuls), as hlo-analyzer entry points.

Each entry point takes the mesh and returns `(fn, args)`: a jitted function and its abstract arguments
(`jax.ShapeDtypeStruct`s with `NamedSharding`s), the convention of `analyzer.compile.lower.lower_entry`:

    hlo-analyzer analyze examples.chapter:matmul_case2 --mesh X=2,Y=4
    analyzer.compile.lower.lower_entry("examples.chapter:fsdp_step", mesh={"X": 8})

Axis roles: the chapter's X is the mesh's first axis and Y its second (the entry points that need a second
axis say so with a MeshError on a one-axis mesh; further axes are left unused). The shard_map collectives
act over X. Arrays are bf16 with distinct dimension sizes so that every dimension is recognisable in the
HLO: I=512, J=256, K=1024 (K > J, so that in case 2 gathering A moves fewer bytes than reducing C
and XLA makes the chapter's choice).

What the chapter predicts (section "Sharded matmuls", A[I, J] ·_J B[J, K] -> C[I, K]):

| entry point     | program                                      | communication                               |
|-----------------|----------------------------------------------|---------------------------------------------|
| matmul_case1    | A[I_X, J] · B[J, K_Y] -> C[I_X, K_Y]         | none                                        |
| matmul_case2    | A[I_X, J_Y] · B[J, K] -> C[I_X, K]           | AllGather_Y A: [I_X, J_Y] -> [I_X, J]       |
| matmul_case3    | A[I, J_X] · B[J_X, K] -> C[I, K]             | AllReduce_X C: [I, K]{U_X} -> [I, K]        |
| matmul_case3_rs | same, output C[I_X, K]                       | ReduceScatter_X C: [I, K]{U_X} -> [I_X, K]  |
| matmul_case4    | A[I_X, J] · B[J, K_X] -> C[I_X, K]           | AllGather_X B: [J, K_X] -> [J, K]           |
| reshard         | A[I_X, J] -> A[I, J_X]                       | AllToAll_X                                  |
| psum, all_gather, psum_scatter, all_to_all, ppermute | `shard_map` over X | one of each                  |
| fsdp_step, tp_step, fsdp_tp_step (and *_mlp_step)    | training steps, L=4 scanned layers | see analyzer.compile.models |
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from analyzer.errors import MeshError
from analyzer.compile.models import TransformerConfig, build

__all__ = [
    "I", "J", "K", "LAYERS",
    "matmul_case1", "matmul_case2", "matmul_case3", "matmul_case3_rs", "matmul_case4", "reshard",
    "psum", "all_gather", "psum_scatter", "all_to_all", "ppermute",
    "dp_step", "fsdp_step", "tp_step", "fsdp_tp_step", "ep_step",
    "fsdp_mlp_step", "tp_mlp_step", "fsdp_tp_mlp_step",
    "ENTRY_POINTS",
]

I, J, K = 512, 256, 1024
LAYERS = 4
DTYPE = jnp.bfloat16
# The training steps: small enough to compile in seconds on CPU, every size divisible by meshes up to 16.
STEP_CONFIG = TransformerConfig(d_model=256, d_ff=1024, heads=8, kv_heads=8, layers=LAYERS, seq=32, batch=32)


def _axes(mesh: Any, needed: int, entry: str) -> tuple[str, ...]:
    names = tuple(mesh.axis_names)
    if len(names) < needed:
        raise MeshError(f"{entry} needs a mesh with at least {needed} axes (the chapter's "
                        f"{' and '.join('XYZ'[:needed])}); got {names}")
    return names


def _array(mesh: Any, shape: tuple[int, ...], spec: P) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, DTYPE, sharding=NamedSharding(mesh, spec))


def _matmul(mesh: Any, a_spec: P, b_spec: P, out_spec: P) -> tuple[Any, tuple[Any, ...]]:
    def matmul(a: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.einsum("ij,jk->ik", a, b)

    fn = jax.jit(matmul, out_shardings=NamedSharding(mesh, out_spec))
    return fn, (_array(mesh, (I, J), a_spec), _array(mesh, (J, K), b_spec))


def matmul_case1(mesh: Any) -> tuple[Any, tuple[Any, ...]]:
    """Case 1, neither multiplicand sharded on the contracting dim: A[I_X, J] · B[J, K_Y] -> C[I_X, K_Y], no
    communication. On a one-axis mesh: A[I_X, J] · B[J, K] -> C[I_X, K]."""
    names = _axes(mesh, 1, "matmul_case1")
    y = names[1] if len(names) > 1 else None
    return _matmul(mesh, P(names[0], None), P(None, y), P(names[0], y))


def matmul_case2(mesh: Any) -> tuple[Any, tuple[Any, ...]]:
    """Case 2, one multiplicand sharded on the contracting dim: A[I_X, J_Y] · B[J, K] -> C[I_X, K];
    AllGather_Y A[I_X, J_Y] -> A[I_X, J], then a local matmul."""
    x, y = _axes(mesh, 2, "matmul_case2")[:2]
    return _matmul(mesh, P(x, y), P(None, None), P(x, None))


def matmul_case3(mesh: Any) -> tuple[Any, tuple[Any, ...]]:
    """Case 3, both sharded on the contracting dim: A[I, J_X] · B[J_X, K] -> C[I, K]{U_X}, then
    AllReduce_X to a replicated C[I, K]."""
    x = _axes(mesh, 1, "matmul_case3")[0]
    return _matmul(mesh, P(None, x), P(x, None), P())


def matmul_case3_rs(mesh: Any) -> tuple[Any, tuple[Any, ...]]:
    """Case 3 with a sharded output: C[I, K]{U_X} -> ReduceScatter_X -> C[I_X, K] (half an AllReduce)."""
    x = _axes(mesh, 1, "matmul_case3_rs")[0]
    return _matmul(mesh, P(None, x), P(x, None), P(x, None))


def matmul_case4(mesh: Any) -> tuple[Any, tuple[Any, ...]]:
    """Case 4, both sharded on a non-contracting dim along the same axis: A[I_X, J] · B[J, K_X] is invalid
    as is; AllGather_X B[J, K_X] -> B[J, K], then C[I_X, K]."""
    x = _axes(mesh, 1, "matmul_case4")[0]
    return _matmul(mesh, P(x, None), P(None, x), P(x, None))


def reshard(mesh: Any) -> tuple[Any, tuple[Any, ...]]:
    """A[I_X, J] -> A[I, J_X]: an AllToAll_X."""
    x = _axes(mesh, 1, "reshard")[0]

    def move(a: jax.Array) -> jax.Array:
        return a

    fn = jax.jit(move, out_shardings=NamedSharding(mesh, P(None, x)))
    return fn, (_array(mesh, (I, J), P(x, None)),)


def _shard_map(mesh: Any, body: Any, in_spec: Any, out_spec: Any, name: str,
               check_vma: bool = True) -> tuple[Any, tuple[Any, ...]]:
    x = _axes(mesh, 1, name)[0]
    mapped = jax.shard_map(lambda a: body(a, x), mesh=mesh, in_specs=in_spec(x), out_specs=out_spec(x),
                           check_vma=check_vma)

    def program(a: jax.Array) -> jax.Array:
        return mapped(a)

    program.__name__ = name
    return jax.jit(program), (_array(mesh, (I, J), in_spec(x)),)


def psum(mesh: Any) -> tuple[Any, tuple[Any, ...]]:
    """`jax.lax.psum` over X of each device's block of A[I_X, J]: AllReduce_X: [I/X, J]{U_X} -> [I/X, J]."""
    return _shard_map(mesh, lambda a, x: jax.lax.psum(a, x), lambda x: P(x, None), lambda x: P(None, None),
                      "psum")


def all_gather(mesh: Any) -> tuple[Any, tuple[Any, ...]]:
    """`jax.lax.all_gather(tiled=True)` over X: AllGather_X: A[I_X, J] -> A[I, J]."""
    return _shard_map(mesh, lambda a, x: jax.lax.all_gather(a, x, axis=0, tiled=True), lambda x: P(x, None),
                      lambda x: P(None, None), "all_gather", check_vma=False)  # the gathered block is
    # the same on every device, which jax's replication check cannot infer from a tiled all_gather


def psum_scatter(mesh: Any) -> tuple[Any, tuple[Any, ...]]:
    """`jax.lax.psum_scatter(tiled=True)` over X of a replicated A[I, J] treated as partial sums:
    ReduceScatter_X: A[I, J]{U_X} -> A[I_X, J]."""
    return _shard_map(mesh, lambda a, x: jax.lax.psum_scatter(a, x, scatter_dimension=0, tiled=True),
                      lambda x: P(None, None), lambda x: P(x, None), "psum_scatter")


def all_to_all(mesh: Any) -> tuple[Any, tuple[Any, ...]]:
    """`jax.lax.all_to_all(tiled=True)` over X: AllToAll_X: A[I_X, J] -> A[I, J_X]."""
    return _shard_map(mesh, lambda a, x: jax.lax.all_to_all(a, x, split_axis=1, concat_axis=0, tiled=True),
                      lambda x: P(x, None), lambda x: P(None, x), "all_to_all")


def ppermute(mesh: Any) -> tuple[Any, tuple[Any, ...]]:
    """`jax.lax.ppermute` over X, each device sending its block of A[I_X, J] to the next one on the ring."""
    def shift(a: jax.Array, x: str) -> jax.Array:
        n = dict(zip(mesh.axis_names, mesh.axis_sizes))[x]
        return jax.lax.ppermute(a, x, perm=[(i, (i + 1) % n) for i in range(n)])

    return _shard_map(mesh, shift, lambda x: P(x, None), lambda x: P(x, None), "ppermute")


def _step(mesh: Any, strategy: str, attention: bool = True) -> tuple[Any, tuple[Any, ...]]:
    config = STEP_CONFIG if attention else TransformerConfig(**{**STEP_CONFIG.to_dict(), "attention": False,
                                                                "norm": False})
    return build(config, strategy, mesh)


def dp_step(mesh: Any) -> tuple[Any, tuple[Any, ...]]:
    """Data-parallel training step: In[B_XY, D], weights replicated; gradients all-reduced."""
    return _step(mesh, "dp")


def fsdp_step(mesh: Any) -> tuple[Any, tuple[Any, ...]]:
    """FSDP training step over every mesh axis: In[B_X, D] · W_in[D_X, F] (attention + MLP, L scanned)."""
    return _step(mesh, "fsdp")


def tp_step(mesh: Any) -> tuple[Any, tuple[Any, ...]]:
    """Tensor-parallel step (data over the other axes): W_in[D, F_Y], W_out[F_Y, D], heads over Y."""
    return _step(mesh, "tp")


def fsdp_tp_step(mesh: Any) -> tuple[Any, tuple[Any, ...]]:
    """FSDP + tensor parallelism: In[B_X, D_Y] · W_in[D_X, F_Y], W_out[F_Y, D_X]; needs two axes."""
    return _step(mesh, "fsdp+tp")


def ep_step(mesh: Any) -> tuple[Any, tuple[Any, ...]]:
    """Expert parallelism: a mixture-of-experts block, experts over the last axis, AllToAll dispatch."""
    return _step(mesh, "ep")


def fsdp_mlp_step(mesh: Any) -> tuple[Any, tuple[Any, ...]]:
    """FSDP step of the chapter's bare MLP block (no attention, no norm) In[B_X, D] · W_in[D_X, F] ·
    W_out[F, D_X], residual, L scanned layers."""
    return _step(mesh, "fsdp", attention=False)


def tp_mlp_step(mesh: Any) -> tuple[Any, tuple[Any, ...]]:
    """Tensor-parallel step of the bare MLP block: W_in[D, F_Y], W_out[F_Y, D]."""
    return _step(mesh, "tp", attention=False)


def fsdp_tp_mlp_step(mesh: Any) -> tuple[Any, tuple[Any, ...]]:
    """FSDP+TP step of the bare MLP block: In[B_X, D_Y] · W_in[D_X, F_Y] · W_out[F_Y, D_X]."""
    return _step(mesh, "fsdp+tp", attention=False)


# name -> minimum number of mesh axes it needs
ENTRY_POINTS: dict[str, int] = {
    "matmul_case1": 1, "matmul_case2": 2, "matmul_case3": 1, "matmul_case3_rs": 1, "matmul_case4": 1,
    "reshard": 1, "psum": 1, "all_gather": 1, "psum_scatter": 1, "all_to_all": 1, "ppermute": 1,
    "dp_step": 1, "fsdp_step": 1, "tp_step": 1, "fsdp_tp_step": 2, "ep_step": 1,
    "fsdp_mlp_step": 1, "tp_mlp_step": 1, "fsdp_tp_mlp_step": 2,
}
