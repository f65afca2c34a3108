"""Fixture programs for the plan-check rules: for each rule, one that fires and a well-sharded counterpart.

Each function returns a `Program`: the function, its abstract arguments (with shardings) and the keyword
arguments for `analyzer.analyze` (mesh, hardware, topology, model). Shapes are large enough to be
bandwidth-bound on the target (we only compile, never run) and small enough to compile in seconds.
Written for jax 0.10.2, target cpu on the test session's fake devices (64, tests/conftest.py: the 64-device
Problem 2 case compiles in the test process too).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

BF16 = jnp.bfloat16


@dataclass(frozen=True)
class Program:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)


def mesh(shape: tuple[int, ...], names: tuple[str, ...]) -> Any:
    """An Auto-typed abstract mesh (XLA picks intermediate shardings)."""
    return jax.sharding.AbstractMesh(shape, names, axis_types=(AxisType.Auto,) * len(names))


def arg(m: Any, shape: tuple[int, ...], spec: P, dtype: Any = BF16) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(m, spec))


# ---------------------------------------------------------------------------------------------- HA101
FSDP_D, FSDP_F = 4096, 8192


def fsdp_matmul(tokens_per_chip: int) -> Program:
    """In[B_X, D] . W[D_X, F] -> [B_X, F] on 8 chips of TPU v5p, ideal model: W is all-gathered."""
    m = mesh((8,), ("X",))
    x = arg(m, (8 * tokens_per_chip, FSDP_D), P("X", None))
    w = arg(m, (FSDP_D, FSDP_F), P("X", None))
    return Program(lambda x, w: x @ w, (x, w), dict(mesh=m, hardware="tpu-v5p", model="ideal"))


# ---------------------------------------------------------------------------------------------- HA102
def gather_wide_operand(n: int, m_: int, k: int, out: P = P(None, "X")) -> Program:
    """A[N, M_X] . B[M, K] with B replicated (case 2) -> C[N, K_X]: XLA can gather A (N*M elements) and
    slice B, or multiply the local shards and reduce-scatter C (N*K)."""
    mm = mesh((8,), ("X",))
    a = arg(mm, (n, m_), P(None, "X"))
    b = arg(mm, (m_, k), P())
    out = NamedSharding(mm, out)
    fn = jax.jit(lambda a, b: a @ b, out_shardings=out)
    return Program(fn, (a, b), dict(mesh=mm, hardware="tpu-v5p", model="ideal"))


def gather_wide_operand_2d() -> Program:
    """A[N, M_X] . B[M, K_Y] on X=4, Y=2: B replicated over X but split over Y on K; XLA gathers A over X. HA102's
    spec for B shards M over X and keeps K on Y (`P('X', 'Y')`, never `P('X')`)."""
    mm = mesh((4, 2), ("X", "Y"))
    a = arg(mm, (1024, 8192), P(None, "X"))
    b = arg(mm, (8192, 1024), P(None, "Y"))
    fn = jax.jit(lambda a, b: a @ b, out_shardings=NamedSharding(mm, P(None, ("Y", "X"))))
    return Program(fn, (a, b), dict(mesh=mm, hardware="tpu-v5p", model="ideal"))


# ---------------------------------------------------------------------------------------------- HA302
def resharded_argument() -> Program:
    """tanh(x) * y on X=4, Y=2 with x [I_X, J] and y [I, J_X]: XLA reshards y by an all-to-all over X to x's layout
    (the output's); the change is y's in-sharding, `P('X', None)`."""
    mm = mesh((4, 2), ("X", "Y"))
    x = arg(mm, (4096, 4096), P("X"))
    y = arg(mm, (4096, 4096), P(None, "X"))
    fn = jax.jit(lambda x, y: jnp.tanh(x) * y, out_shardings=NamedSharding(mm, P("X")))
    return Program(fn, (x, y), dict(mesh=mm, hardware="tpu-v5p"))


# ---------------------------------------------------------------------------------------------- HA103
def psum_then_slice(scatter: bool, n: int = 8 * 1024, d: int = 2048) -> Program:
    """shard_map: AllReduce then keep my shard (fires), against psum_scatter (quiet)."""
    m = mesh((8,), ("X",))
    x = arg(m, (8 * n, d), P("X", None))

    def body(x):
        if scatter:
            return jnp.tanh(jax.lax.psum_scatter(x, "X", scatter_dimension=0, tiled=True))
        y = jnp.tanh(jax.lax.psum(x, "X"))
        i = jax.lax.axis_index("X")
        return jax.lax.dynamic_slice_in_dim(y, i * (n // 8), n // 8, axis=0)

    fn = jax.shard_map(body, mesh=m, in_specs=P("X", None), out_specs=P("X", None))
    return Program(jax.jit(fn), (x,), dict(mesh=m, hardware="tpu-v5p", model="ideal"))


# ---------------------------------------------------------------------------------------------- HA201
def idle_axis(use_z: bool, b: int = 1024, d: int = 4096, shape: tuple[int, int, int] = (2, 2, 2),
              hardware: str = "tpu-v5p", topology: str | None = None, model: str = "ideal",
              out: P = P(None, "Y")) -> Program:
    """[B_X, D_Y] gathered to [B, D_Y] (Problem 2), replicated over Z (fires) or sharded [B_XZ, D_Y] (quiet);
    with `out=P()` the gather is over X and Y (Problem 2 part 2)."""
    m = mesh(shape, ("X", "Y", "Z"))
    x = arg(m, (b, d), P(("X", "Z") if use_z else "X", "Y"))
    fn = jax.jit(lambda x: x * 2, out_shardings=NamedSharding(m, out))
    kw: dict[str, Any] = dict(mesh=m, hardware=hardware, model=model)
    if topology:
        kw["topology"] = topology
    return Program(fn, (x,), kw)


# ---------------------------------------------------------------------------------------------- HA202
def gather_on_axis(axis: str, e: int = 2048, f: int = 8192) -> Program:
    """Pop quiz 2 on v5e: `AllGather_axis [E_axis, F] -> [E, F]` on a {Y: 4, X: 2} mesh laid on a v5e 4x2
    slice, where neither physical axis has the 16 chips that give wraparound. The book lays Y on the 4-chip
    axis x and X on y, so the slice is declared with that mapping (without one, the mesh would be placed
    where jax.make_mesh puts it)."""
    m = mesh((4, 2), ("Y", "X"))
    x = arg(m, (e, f), P(axis, None))
    fn = jax.jit(lambda x: x * 2, out_shardings=NamedSharding(m, P()))
    return Program(fn, (x,), dict(mesh=m, hardware="tpu-v5e", topology="v5e:4x2@Y=x,X=y"))


def gathers_on_one_and_two_axes(e: int = 2048, f: int = 8192) -> Program:
    """gather_on_axis('Y') beside a gather of another array over both axes (`AllGather_{Y,X}`): only the first
    is Y's own collective (issue 26: HA202 counted collectives over several axes as the axis's)."""
    m = mesh((4, 2), ("Y", "X"))
    x = arg(m, (e, f), P("Y", None))
    y = arg(m, (e, f), P(("Y", "X"), None))
    fn = jax.jit(lambda x, y: (x * 2, y * 2), out_shardings=(NamedSharding(m, P()), NamedSharding(m, P())))
    return Program(fn, (x, y), dict(mesh=m, hardware="tpu-v5e", topology="v5e:4x2@Y=x,X=y"))


# ---------------------------------------------------------------------------------------------- HA301
def many_small_psums(big: bool, k: int = 6) -> Program:
    """k independent psums of small arrays (fires: latency-bound) or one large psum (quiet)."""
    m = mesh((8,), ("X",))
    size = 256 * 1024 if big else 1024
    xs = tuple(arg(m, (8 * 8, size // 8), P("X", None), jnp.float32) for _ in range(1 if big else k))

    def body(*xs):
        return tuple(jax.lax.psum(x, "X") for x in xs)

    fn = jax.shard_map(body, mesh=m, in_specs=(P("X", None),) * len(xs), out_specs=(P("X", None),) * len(xs))
    return Program(jax.jit(fn), xs, dict(mesh=m, hardware="tpu-v5e", model="ideal"))


# ---------------------------------------------------------------------------------------------- HA302/HA303
def reshard(kind: str, i: int = 4096, j: int = 4096) -> Program:
    """A layout change with no contraction: [I_X, J] -> [I, J_X] (all-to-all), or none ('same')."""
    m = mesh((8,), ("X",))
    x = arg(m, (i, j), P("X", None))
    target = {"transpose": P(None, "X"), "same": P("X", None)}[kind]
    fn = jax.jit(lambda x: jnp.sin(x), out_shardings=NamedSharding(m, target))
    return Program(fn, (x,), dict(mesh=m, hardware="tpu-v5p", model="ideal"))


def gather_then_slice(full: bool, i: int = 4096, j: int = 4096) -> Program:
    """shard_map: all_gather then keep a slice of it (full rematerialization), against all_to_all."""
    m = mesh((8,), ("X",))
    x = arg(m, (i, j), P("X", None))

    def body(x):
        if full:
            g = jnp.sin(jax.lax.all_gather(x, "X", axis=0, tiled=True))
            k = jax.lax.axis_index("X")
            return jax.lax.dynamic_slice_in_dim(g, k * (j // 8), j // 8, axis=1)
        return jnp.sin(jax.lax.all_to_all(x, "X", 1, 0, tiled=True))

    fn = jax.shard_map(body, mesh=m, in_specs=P("X", None), out_specs=P(None, "X"))
    return Program(jax.jit(fn), (x,), dict(mesh=m, hardware="tpu-v5p", model="ideal"))


# ---------------------------------------------------------------------------------------------- HA401/HA402
def big_weight(sharded: bool, gb: float = 20.0) -> Program:
    """A `gb`-GB f32 weight W[D, F], replicated (fires on v5e's 16 GB) or sharded W[D, F_X] so the matmul
    needs no gather (quiet). f32 keeps the CPU backend from adding bf16->f32 conversion temporaries."""
    m = mesh((8,), ("X",))
    rows = 8 * 1024
    cols = int(gb * 1e9 / 4 / rows) // 8 * 8
    w = arg(m, (rows, cols), P(None, "X") if sharded else P(), jnp.float32)
    x = arg(m, (16, rows), P(), jnp.float32)
    fn = jax.jit(lambda x, w: x @ w, out_shardings=NamedSharding(m, P(None, "X")))
    return Program(fn, (x, w), dict(mesh=m, hardware="tpu-v5e"))


# ---------------------------------------------------------------------------------------------- HA203
def gpu_gather(axis: str, e: int = 4096, f: int = 8192) -> Program:
    """H100, 2 nodes of 8 GPUs (16 devices: compiled in a child process): shard_map all_gather over `axis`
    of [E_axis, F]; 'node' crosses the scale-out network, 'gpu' stays inside NVLink."""
    m = mesh((2, 8), ("node", "gpu"))
    x = arg(m, (e, f), P(axis, None))
    fn = jax.shard_map(lambda x: jax.lax.all_gather(x, axis, axis=0, tiled=True) * 2, mesh=m,
                       in_specs=P(axis, None), out_specs=P(), check_vma=False)
    return Program(jax.jit(fn), (x,), dict(mesh=m, hardware="h100", topology="h100:2x8"))


def ring_of_16(e: int = 2048, f: int = 8192) -> Program:
    """AllGather over an axis of 16 v5e chips: a full ring with wraparound (16 devices: a child compile)."""
    m = mesh((16,), ("Y",))
    x = arg(m, (e, f), P("Y", None))
    fn = jax.jit(lambda x: x * 2, out_shardings=NamedSharding(m, P()))
    return Program(fn, (x,), dict(mesh=m, hardware="tpu-v5e", topology="v5e:16x1"))


# ---------------------------------------------------------------------------------------------- suppressions
def reshard_suppressed(i: int = 4096, j: int = 4096) -> Program:
    """The all-to-all of `reshard('transpose')`, accepted on purpose by an inline comment."""
    m = mesh((8,), ("X",))
    x = arg(m, (i, j), P("X", None))
    fn = jax.jit(lambda x: jnp.sin(x), out_shardings=NamedSharding(m, P(None, "X")))  # hlo-analyzer: ignore[HA302]
    return Program(fn, (x,), dict(mesh=m, hardware="tpu-v5p", model="ideal"))


def stale_inline(i: int = 4096, j: int = 4096) -> Program:
    """An inline suppression on a line where nothing fires any more (shardings agree)."""
    m = mesh((8,), ("X",))
    x = arg(m, (i, j), P("X", None))
    fn = jax.jit(lambda x: jnp.sin(x), out_shardings=NamedSharding(m, P("X", None)))  # hlo-analyzer: ignore[HA302]
    return Program(fn, (x,), dict(mesh=m, hardware="tpu-v5p", model="ideal"))


def idle_axis_scan(use_z: bool, layers: int = 4, b: int = 1024, d: int = 4096) -> Program:
    """Problem 2's gather inside a `lax.scan` over layers: each layer's W[B_X, D_Y] (replicated over Z, or
    sharded [B_XZ, D_Y]) is added to a carry h[B, D_Y], so XLA gathers it over X (or X and Z) every layer."""
    m = mesh((2, 2, 2), ("X", "Y", "Z"))
    w = arg(m, (layers, b, d), P(None, ("X", "Z") if use_z else "X", "Y"))
    h = arg(m, (b, d), P(None, "Y"))

    def f(h, w):
        def body(h, wl):
            return jnp.tanh(h + wl), None

        return jax.lax.scan(body, h, w)[0]

    fn = jax.jit(f, out_shardings=NamedSharding(m, P(None, "Y")))
    return Program(fn, (h, w), dict(mesh=m, hardware="tpu-v5p", model="ideal"))


def matmul_then_activation(scatter_early: bool, b: int = 8192, d: int = 4096, f: int = 2048) -> Program:
    """jit: H[B, D_X] . W[D_X, F] -> [B, F]{U_X}, then gelu, with the result wanted as [B_X, F]. Either
    the reduction's result is constrained to [B_X, F] right away (reduce-scatter), or only after the gelu."""
    m = mesh((8,), ("X",))
    h = arg(m, (b, d), P(None, "X"))
    w = arg(m, (d, f), P("X", None))
    out = NamedSharding(m, P("X", None))

    def fn(h, w):
        y = h @ w
        if scatter_early:
            y = jax.lax.with_sharding_constraint(y, out)
        else:
            y = jax.lax.with_sharding_constraint(y, NamedSharding(m, P()))
        return jax.nn.gelu(y)

    return Program(jax.jit(fn, out_shardings=out), (h, w), dict(mesh=m, hardware="tpu-v5p", model="ideal"))


def small_psum_in_loop(steps: int = 16, size: int = 1024) -> Program:
    """shard_map with a `fori_loop` of `steps` iterations, each psum-ing a 4 kB array: one latency-bound
    collective executed `steps` times per call (nothing to combine within an iteration)."""
    m = mesh((8,), ("X",))
    x = arg(m, (8 * 8, size // 8), P("X", None), jnp.float32)

    def body(x):
        return jax.lax.fori_loop(0, steps, lambda i, y: jnp.tanh(jax.lax.psum(y, "X")), x)

    fn = jax.shard_map(body, mesh=m, in_specs=P("X", None), out_specs=P("X", None), check_vma=False)
    return Program(jax.jit(fn), (x,), dict(mesh=m, hardware="tpu-v5e", model="ideal"))


def dcn_gather(axis: str, e: int = 4096, f: int = 8192) -> Program:
    """Two v5e 2x2 slices joined by DCN ({slice: 2, chip: 4}): AllGather over `axis` of [E_axis, F];
    'slice' crosses DCN (3.125e9 B/s per chip on v5e), 'chip' stays on ICI."""
    m = mesh((2, 4), ("slice", "chip"))
    x = arg(m, (e, f), P(axis, None))
    fn = jax.shard_map(lambda x: jax.lax.all_gather(x, axis, axis=0, tiled=True) * 2, mesh=m,
                       in_specs=P(axis, None), out_specs=P(), check_vma=False)
    return Program(jax.jit(fn), (x,), dict(mesh=m, hardware="tpu-v5e", topology="v5e:2x2*2"))


def megatron_mlp(y: int = 8, b: int = 4096, d: int = 1024, f: int = 8192) -> Program:
    """Megatron MLP on a 1-D ring of `y` v5p chips: In[B, D] . W_in[D, F_Y] -> gelu -> . W_out[F_Y, D] ->
    AllReduce_Y. Comm-bound when F / Y < C / W_ici = 2550 (the chapter's F / 2550 bound)."""
    m = mesh((y,), ("Y",))
    x = arg(m, (b, d), P())
    w_in = arg(m, (d, f), P(None, "Y"))
    w_out = arg(m, (f, d), P("Y", None))
    fn = jax.jit(lambda x, a, c: jax.nn.gelu(x @ a) @ c, out_shardings=NamedSharding(m, P()))
    return Program(fn, (x, w_in, w_out), dict(mesh=m, hardware="tpu-v5p", model="ideal"))


def sliced_weight_then_psum(gather: bool, n: int = 1024, m_: int = 1024, k: int = 8192) -> Program:
    """shard_map: A[N, M_X] . B[M, K] with B replicated. Either each device slices its rows of B, multiplies
    and all-reduces C[N, K] (N*K moved), or all-gathers A (N*M moved) and multiplies: Problem 9's choice."""
    mm = mesh((8,), ("X",))
    a = arg(mm, (n, m_), P(None, "X"))
    b = arg(mm, (m_, k), P())

    def body(a, b):
        if gather:
            return jax.lax.all_gather(a, "X", axis=1, tiled=True) @ b
        i = jax.lax.axis_index("X")
        return jax.lax.psum(a @ jax.lax.dynamic_slice_in_dim(b, i * (m_ // 8), m_ // 8, axis=0), "X")

    fn = jax.shard_map(body, mesh=mm, in_specs=(P(None, "X"), P()), out_specs=P(), check_vma=False)
    return Program(jax.jit(fn), (a, b), dict(mesh=mm, hardware="tpu-v5p", model="ideal"))


# ---------------------------------------------------------------------------------------------- HA204
def straddled_all_to_all(topology: str = "v5e:2x4", i: int = 4096, j: int = 8192) -> Program:
    """[I_data, J] -> [I, J_data] (AllToAll_data) on a {data: 2, model: 4} mesh of v5e:2x4, waited for at the
    end of the step. jax.make_mesh lays 'data' across x and y there (its tray ring order; tests/cost/
    test_placement.py); `topology="v5e:2x4@in-order"` lays it on x."""
    m = mesh((2, 4), ("data", "model"))
    x = arg(m, (i, j), P("data", None))
    fn = jax.jit(lambda x: jnp.sin(x), out_shardings=NamedSharding(m, P(None, "data")))
    return Program(fn, (x,), dict(mesh=m, hardware="tpu-v5e", topology=topology))


def straddled_fsdp(topology: str = "v5e:2x4", b: int = 2048, d: int = 4096, f: int = 16384) -> Program:
    """FSDP + TP MLP on {data: 4, model: 2} of v5e:2x4 (issue 10's case): jax.make_mesh lays 'data' across x
    and y, and its weight gathers are cheaper there than on any explicit placement (3 links)."""
    m = mesh((4, 2), ("data", "model"))
    x = arg(m, (4 * b, d), P("data", None))
    w1 = arg(m, (d, f), P("data", "model"))
    w2 = arg(m, (f, d), P("model", "data"))
    fn = jax.jit(lambda x, a, c: jax.nn.gelu(x @ a) @ c, out_shardings=NamedSharding(m, P("data", None)))
    return Program(fn, (x, w1, w2), dict(mesh=m, hardware="tpu-v5e", topology=topology))


def gather_behind_matmul(d: int, b: int = 128, f: int = 8192, g: int = 256) -> Program:
    """h = x[B_X, D] . W1[D, F] (W1 replicated: no communication), then h . W2[F_X, G] with W2 gathered over X
    (FSDP, per-chip batch b = 128 < 2550 on v5p: comm-bound against its own FLOPs). XLA's latency-hiding
    scheduler (the overlap model, docs/step.md) issues the gather at the start of the first matmul: with
    d = 8192 that matmul (37 us) hides the gather (23 us); with d = 512 (2.3 us) it does not."""
    m = mesh((8,), ("X",))
    x = arg(m, (8 * b, d), P("X", None))
    w1 = arg(m, (d, f), P())
    w2 = arg(m, (f, g), P("X", None))
    fn = jax.jit(lambda c, x, a: jnp.tanh(x @ a) @ c, out_shardings=NamedSharding(m, P("X", None)))
    return Program(fn, (w2, x, w1), dict(mesh=m, hardware="tpu-v5p", model="ideal"))
