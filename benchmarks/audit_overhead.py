"""What `@analyzer.audit` costs on calls after the first: per-call time of an audited jitted step against
the same jitted step, in one process, on the same arrays.

The decorator's promise is that later calls only look their signature up (flatten the arguments, hash
shapes, dtypes and shardings). This prints the per-call times and the added microseconds for a small step
(where the lookup weighs most) and for a pytree of many parameters (where flattening weighs most). Both
steps are free of collectives: thousands of in-flight steps with collectives can stall the CPU runtime's
rendezvous on a 2-core machine, which would measure the runtime, not the decorator.

    python benchmarks/audit_overhead.py
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")


def _per_call(fn, args, n: int) -> float:
    """Best per-call seconds over several rounds (the minimum filters other processes' noise)."""
    import jax

    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(n):
            out = fn(*args)
        jax.block_until_ready(out)
        best = min(best, (time.perf_counter() - start) / n)
    return best


def main() -> None:
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    import analyzer

    mesh = jax.make_mesh((8,), ("X",), axis_types=(jax.sharding.AxisType.Auto,))
    cases = {
        "matmul, 2 arrays": (
            lambda x, w: x @ w,
            (jax.device_put(jnp.ones((64, 128)), NamedSharding(mesh, P("X", None))),
             jax.device_put(jnp.ones((128, 32)), NamedSharding(mesh, P()))),
        ),
        "update of 200 parameters": (
            lambda params: {k: p * 0.5 for k, p in params.items()},
            ({f"w{i}": jax.device_put(jnp.ones((8, 16)), NamedSharding(mesh, P("X", None))) for i in range(200)},),
        ),
    }
    print("Decorator cost alone: a Python function that returns at once, plain and audited (after its one")
    print("analysis), on the same arguments. Then the same around the jitted step, where the dispatch of the")
    print("step itself (hundreds of µs, noisy on a shared machine) dwarfs it.")
    print(f"{'case':<26}{'lookup (µs/call)':>18}{'jit (µs/call)':>15}{'audited jit':>13}{'ratio':>8}")
    for name, (fn, args) in cases.items():
        def noop(*a):
            return None

        audited_noop = analyzer.audit(on_violation="off")(noop)
        n = 20000
        lookup = _per_call(audited_noop, args, n) - _per_call(noop, args, n)
        plain = jax.jit(fn)
        audited = analyzer.audit(on_violation="off")(jax.jit(fn))
        m = 1000 if len(jax.tree_util.tree_leaves(args)) < 10 else 100
        t_plain = _per_call(plain, args, m)
        t_audited = _per_call(audited, args, m)
        assert audited.audit_count == 1 and audited_noop.audit_count == 1
        print(f"{name:<26}{lookup * 1e6:>18.1f}{t_plain * 1e6:>15.1f}{t_audited * 1e6:>13.1f}"
              f"{t_audited / t_plain:>8.2f}")


if __name__ == "__main__":
    main()
