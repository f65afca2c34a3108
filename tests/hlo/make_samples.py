"""Write small real HLO dumps for the parser tests into tests/hlo/samples/.

How: jax (version recorded in each file's header) compiles a few sharded programs on 8 fake CPU devices
(final optimized HLO, and the dump right after SPMD partitioning) and, when libtpu is installed, ahead of
time for a TPU v5e:2x2 topology. Run: `JAX_PLATFORMS=cpu python tests/hlo/make_samples.py`.
"""

from __future__ import annotations

import glob
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

OUT = Path(__file__).parent / "samples"


def _header(desc: str, target: str) -> str:
    return f"// {desc}\n// made by tests/hlo/make_samples.py with jax {jax.__version__}, target {target}\n"


def _mlp(x, w1, w2):
    h = jax.nn.relu(x @ w1)
    return jnp.sum((h @ w2) ** 2)


def _scan_step(ws, x):
    def layer(h, w):
        return jnp.tanh(h @ w), None

    def loss(ws):
        h, _ = jax.lax.scan(layer, x, ws)
        return jnp.mean(h**2)

    return jax.grad(loss)(ws)


def programs(mesh):
    f32 = jnp.float32
    bf16 = jnp.bfloat16
    S = lambda *spec: NamedSharding(mesh, P(*spec))  # noqa: E731
    x = jax.ShapeDtypeStruct((64, 128), bf16, sharding=S("data", None))
    w1 = jax.ShapeDtypeStruct((128, 256), bf16, sharding=S(None, "model"))
    w2 = jax.ShapeDtypeStruct((256, 128), bf16, sharding=S("model", None))
    yield "mlp_dp_tp", jax.jit(jax.grad(_mlp, argnums=(1, 2))), (x, w1, w2)
    ws = jax.ShapeDtypeStruct((4, 128, 128), f32, sharding=S(None, "data", "model"))
    xs = jax.ShapeDtypeStruct((32, 128), f32, sharding=S("data", None))
    yield "scan_fsdp_tp", jax.jit(_scan_step), (ws, xs)

    from jax import shard_map

    def collectives(a):
        s = jax.lax.psum(a, "data")
        g = jax.lax.all_gather(a, "model", tiled=True)
        r = jax.lax.psum_scatter(g, "model", tiled=True)
        n = mesh.shape["data"]
        p = jax.lax.ppermute(a, "data", [(i, (i + 1) % n) for i in range(n)])
        t = jax.lax.all_to_all(a, "data", 0, 1, tiled=True)
        return s + r + p, t

    sm = jax.jit(shard_map(collectives, mesh=mesh, in_specs=P("data", "model"), out_specs=(P("data", "model"), P("data", "model"))))
    a = jax.ShapeDtypeStruct((64, 64), f32, sharding=S("data", "model"))
    yield "shard_map_collectives", sm, (a,)
    x16 = jax.ShapeDtypeStruct((16, 16), f32, sharding=S(None, None))
    idx = jax.ShapeDtypeStruct((4,), jnp.int32, sharding=S(None))
    key = jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=S(None))
    yield "op_zoo", jax.jit(_zoo), (x16, idx, key)


def _zoo(x, idx, key):
    """Many op kinds in one program: control flow, sort, scatter/gather, fft, conv, linalg, rng, reductions."""
    a = jnp.fft.rfft(x[:, :8]).real.sum()
    s = jnp.sort(x, axis=1)[:, :4]
    top = jax.lax.top_k(x, 3)[0]
    g = x[idx]
    sc = jnp.zeros_like(x).at[idx].add(1.0)
    cs = jnp.cumsum(x, axis=1)
    conv = jax.lax.conv_general_dilated(x[None, None], jnp.ones((1, 1, 3, 3)), (1, 1), "SAME")[0, 0]
    w = jax.lax.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, c[1] * 1.5), (0, x))[1]
    c = jax.lax.cond(a > 0, lambda: x * 2, lambda: x - 1)
    ch = jnp.linalg.cholesky(x @ x.T + 16 * jnp.eye(x.shape[0]))
    r = jax.random.uniform(key, x.shape)
    rp = jax.lax.reduce_precision(x, exponent_bits=5, mantissa_bits=10)
    i = jnp.argmax(x, axis=1).astype(jnp.float32)
    return (s.sum() + top.sum() + g.sum() + sc.sum() + cs.sum() + conv.sum() + w.sum() + c.sum() + ch.sum()
            + r.sum() + rp.sum() + i.sum() + a)


def dump(name, fn, args, target, extra_opts=None):
    lowered = fn.lower(*args)
    with tempfile.TemporaryDirectory() as d:
        opts = {"xla_dump_to": d, "xla_dump_hlo_pass_re": "spmd-partitioning", "xla_dump_hlo_as_text": True}
        opts.update(extra_opts or {})
        compiled = lowered.compile(compiler_options=opts)
        (OUT / f"{name}.{target}.final.hlo").write_text(
            _header(f"{name}: compiled.as_text()", target) + compiled.as_text())
        spmd = sorted(glob.glob(os.path.join(d, "*after_spmd-partitioning*.txt")))
        if spmd:
            (OUT / f"{name}.{target}.spmd.hlo").write_text(
                _header(f"{name}: after spmd-partitioning", target) + Path(spmd[-1]).read_text())


def main() -> int:
    OUT.mkdir(exist_ok=True)
    auto = (AxisType.Auto,) * 2
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=auto)
    for name, fn, args in programs(mesh):
        dump(name, fn, args, "cpu")
    try:
        from jax.experimental import topologies

        topo = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2")
    except Exception as e:  # libtpu missing or unusable: say so, keep the cpu samples
        print(f"no TPU samples: {e}", file=sys.stderr)
        return 0
    import numpy as np

    tmesh = jax.sharding.Mesh(np.array(topo.devices).reshape(2, 2), ("data", "model"), axis_types=auto)
    for name, fn, args in programs(tmesh):
        dump(name, fn, args, "tpu-v5e-2x2")
    return 0


if __name__ == "__main__":
    sys.exit(main())
