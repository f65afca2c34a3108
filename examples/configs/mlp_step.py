"""An example entry point for `hlo-analyzer report examples/configs/entry-point.toml`.

The function takes the mesh and returns `(jitted step, abstract arguments)`. Nothing is allocated: the
arguments are `jax.ShapeDtypeStruct`s carrying their shardings.
"""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

B, D, F = 256, 1024, 4096


def train_step(mesh):
    def loss(params, x, y):
        h = jax.nn.relu(x @ params["w_in"])
        return jnp.mean((h @ params["w_out"] - y) ** 2)

    def step(params, x, y):
        grads = jax.grad(loss)(params, x, y)
        return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads)

    def sds(shape, spec):
        return jax.ShapeDtypeStruct(shape, jnp.bfloat16, sharding=NamedSharding(mesh, spec))

    params = {"w_in": sds((D, F), P(None, "model")), "w_out": sds((F, D), P("model", None))}
    x = sds((B, D), P("data", None))
    y = sds((B, D), P("data", None))
    return jax.jit(step), (params, x, y)
