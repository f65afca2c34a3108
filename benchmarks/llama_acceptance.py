"""Issue 11's acceptance on a real third-party model: Hugging Face transformers' `FlaxLlamaForCausalLM`.

12 layers, d_model 1024, d_ff 2816, 16 heads over 4 KV heads (GQA), vocabulary 32,000, trained with optax
AdamW, FSDP over `data` + Megatron over `model` on 8 fake CPU devices (data=4, model=2), priced on TPU v5e.
Two plans differ only in the embedding table: `embed-d-on-data` shards its d_model dim on `data` (every
activation leaves the lookup as [.., D_data], issue 11's first plan); `fixed` shards its vocabulary on `model`.

Prints, per plan: predicted communication and step, XLA's per-device bytes, the root causes (largest summed
saving first) and every finding with its user line, library context and the fix's memory when it reshapes the
plan; then the acceptance figure: the top root cause's saving against the predicted step and communication
the two plans differ by. `--html DIR` writes both HTML reports there.

Needs transformers 4.x (Flax Llama is gone from 5.x); it is not a dependency of hlo-analyzer. Install it
apart, e.g. `pip install --target /tmp/llama/lib/python3.11/site-packages --no-deps 'transformers<5'
'huggingface_hub<1' 'tokenizers<=0.23.0' safetensors tqdm` and run with that folder on PYTHONPATH (a folder
named site-packages, so its frames count as a library's). Run: `python benchmarks/llama_acceptance.py
[--batch 16] [--html DIR]`; each plan compiles in about 15 s.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
_FLAG = "--xla_force_host_platform_device_count"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" {_FLAG}=8").strip()

COLUMN = {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "lm_head"}  # [D, F]: FSDP on D, Megatron on F
ROW = {"o_proj", "down_proj"}                                               # [F, D]
SEQ = 1024


def spec(plan: str, path, leaf):
    from jax.sharding import PartitionSpec as P

    names = {str(getattr(k, "key", getattr(k, "name", ""))) for k in path}
    if leaf.ndim < 2:
        return P()
    if "embed_tokens" in names:
        return P(None, "data") if plan == "embed-d-on-data" else P("model", None)
    if names & COLUMN:
        return P("data", "model")
    if names & ROW:
        return P("model", "data")
    return P()


def abstract(plan: str, mesh, batch: int):
    """The jitted AdamW step of the model and its abstract arguments under `plan`."""
    import jax
    import jax.numpy as jnp
    import optax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    from transformers import FlaxLlamaForCausalLM, LlamaConfig

    config = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
                         num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=SEQ)
    model = FlaxLlamaForCausalLM(config, _do_init=False)
    opt = optax.adamw(1e-4)

    def train_step(params, opt_state, ids, labels):
        def loss_fn(p):
            logits = model(ids, params=p).logits
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    shapes = jax.eval_shape(lambda k: model.init_weights(k, (1, 8)), jax.random.key(0))

    def place(tree):
        return jax.tree_util.tree_map_with_path(lambda p, leaf: jax.ShapeDtypeStruct(
            leaf.shape, leaf.dtype, sharding=NamedSharding(mesh, spec(plan, p, leaf))), tree)

    params, opt_state = place(shapes), place(jax.eval_shape(opt.init, shapes))
    ids = jax.ShapeDtypeStruct((batch, SEQ), jnp.int32, sharding=NamedSharding(mesh, P("data", None)))
    out = (jax.tree.map(lambda a: a.sharding, params), jax.tree.map(lambda a: a.sharding, opt_state),
           NamedSharding(mesh, P()))
    return jax.jit(train_step, out_shardings=out), (params, opt_state, ids, ids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--html", default=None, help="folder to write both plans' HTML reports to")
    ns = parser.parse_args()
    try:
        import transformers  # noqa: F401
    except ImportError:
        sys.exit("needs transformers<5 (see this script's docstring); it is not a dependency of hlo-analyzer")
    import jax

    import analyzer
    from analyzer.render import html
    from analyzer.rules.rootcause import group_findings
    from analyzer.units import format_bytes, format_seconds

    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    reports = {}
    for plan in ("embed-d-on-data", "fixed"):
        fn, args = abstract(plan, mesh, ns.batch)
        r = reports[plan] = analyzer.analyze(fn, *args, mesh=mesh, hardware="tpu-v5e")
        t = r.totals
        print(f"{plan}: communication {format_seconds(t.comm_seconds)}, step {format_seconds(t.step_seconds)}, "
              f"{len(r.collectives)} rows, memory {r.memory}")
        for i, g in enumerate(group_findings(r.diagnostics, r), start=1):
            print(f"  root cause {i}: {g.title}: {format_seconds(g.saving_seconds)} per step, {len(g.findings)} findings")
        for d in r.diagnostics:
            fit = d.details.get("fix_memory_bytes")
            print(f"    {d.code} {d.location} ({d.location.context or 'no library frame'}): saving "
                  f"{format_seconds(d.saving_seconds) if d.saving_seconds is not None else 'none'}"
                  + (f", plan after the fix {format_bytes(fit)} per device" if fit else ""))
        if ns.html:
            os.makedirs(ns.html, exist_ok=True)
            with open(os.path.join(ns.html, f"{plan}.html"), "w", encoding="utf-8") as f:
                f.write(html.render(r))
    bad, good = reports["embed-d-on-data"], reports["fixed"]
    top = group_findings(bad.diagnostics, bad)[0]
    step = bad.totals.step_seconds - good.totals.step_seconds
    comm = bad.totals.comm_seconds - good.totals.comm_seconds
    print(f"top root cause of embed-d-on-data: {top.title}, {format_seconds(top.saving_seconds)} per step; the plans "
          f"differ by {format_seconds(step)} of predicted step ({top.saving_seconds / step:.1%}) and "
          f"{format_seconds(comm)} of communication ({top.saving_seconds / comm:.1%})")


if __name__ == "__main__":
    main()
