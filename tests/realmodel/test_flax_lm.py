"""A real model through the analyzer: a small language model written with Flax linen, trained with optax
AdamW, under four sharding plans on a `data=4, model=2` mesh (issue 11 item 8).

The findings must point at this file's own lines (never into flax, optax or jax), rank the plans as their
predicted communication does, and name what each bad plan does wrong. Needs the test extra's flax and
optax (`pip install -e '.[test]'`); skips without them. Every plan is compiled once per session (the
`reports` fixture), small (d_model 256, 2 layers, 16 x 64 tokens) so the four compile in seconds.

The model is ordinary Flax: `nn.Embed`, `nn.Dense`, `nn.LayerNorm`, `nn.SelfAttention`-free blocks (an MLP
per layer keeps the compile short) and a vocabulary projection. What matters to the analyzer is that the
ops are traced inside flax's own files (linear.py, normalization.py), called from the lines below: the
findings must point at these lines, with flax's frame as context.

Plans (PartitionSpecs by parameter name, the batch over `data` in all of them):
  - "fsdp+tp": weights FSDP over `data` on their d_model dim and Megatron over `model` on d_ff / vocab; the
    embedding table sharded on its vocabulary dim. The good plan.
  - "embed-d-on-data": the same, but the embedding table's d_model dim sharded on `data`: every activation
    leaves the lookup as [B_data?, S, D_data] and is resharded layer after layer (issue 11's first plan).
  - "megatron-swapped": the MLP's two kernels sharded over `model` on the wrong dims (w_in on its contracting
    d_model dim, w_out on its output dim): the hidden activation is all-reduced instead of staying sharded.
  - "replicated": every weight on every chip; only the batch is split: plain data parallelism.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

nn = pytest.importorskip("flax.linen", reason="the real-model test needs flax (the test extra)")
optax = pytest.importorskip("optax", reason="the real-model test needs optax (the test extra)")

VOCAB, D_MODEL, D_FF, LAYERS, BATCH, SEQ = 1024, 256, 1024, 2, 16, 64


def kernel(logical: bool, names: tuple[str, str]):
    """Dense's default initializer; with `logical`, its dims named as Flax's logical axes (the boxes carry them)."""
    init = nn.initializers.lecun_normal()
    return nn.with_logical_partitioning(init, names) if logical else init


class Block(nn.Module):
    logical: bool = False

    @nn.compact
    def __call__(self, x):
        h = nn.LayerNorm(name="norm")(x)
        h = nn.Dense(D_FF, use_bias=False, name="w_in", kernel_init=kernel(self.logical, ("embed", "mlp")))(h)
        h = nn.gelu(h)
        h = nn.Dense(D_MODEL, use_bias=False, name="w_out", kernel_init=kernel(self.logical, ("mlp", "embed")))(h)
        return x + h


class LM(nn.Module):
    logical: bool = False

    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(VOCAB, D_MODEL, name="embed")(tokens)
        for i in range(LAYERS):
            x = Block(self.logical, name=f"layers_{i}")(x)
        x = nn.LayerNorm(name="final_norm")(x)
        return nn.Dense(VOCAB, use_bias=False, name="unembed", kernel_init=kernel(self.logical, ("embed", "vocab")))(x)


MODEL = LM()
LOGICAL_MODEL = LM(logical=True)  # the same model, its kernels declared with logical axis names
LOGICAL_RULES = (("embed", "data"), ("mlp", "model"), ("vocab", "model"))  # the "fsdp+tp" plan, by name
OPTIMIZER = optax.adamw(1e-3)


def step_of(model):
    def train_step(params, opt_state, tokens, labels):
        def loss_fn(p):
            logits = model.apply({"params": p}, tokens)
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = OPTIMIZER.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train_step


train_step = step_of(MODEL)


PLANS: dict[str, dict[str, P]] = {
    "fsdp+tp": {"embedding": P("model", None), "w_in": P("data", "model"), "w_out": P("model", "data"),
                "unembed": P("data", "model")},
    "embed-d-on-data": {"embedding": P(None, "data"), "w_in": P("data", "model"), "w_out": P("model", "data"),
                        "unembed": P("data", "model")},
    "megatron-swapped": {"embedding": P("model", None), "w_in": P("model", "data"), "w_out": P("data", "model"),
                         "unembed": P("data", "model")},
    "replicated": {},
}


def _spec(plan: dict[str, P], path) -> P:
    names = [getattr(k, "key", getattr(k, "name", "")) for k in path]
    for name in reversed(names):
        if name in plan:
            return plan[name]
        if name == "kernel" and len(names) >= 2 and names[-2] in plan:
            return plan[names[-2]]
    return P()


def abstract_step(plan_name: str, mesh, logical: bool = False):
    """The jitted train step and its abstract arguments (params, AdamW state, tokens, labels) for a plan.

    With `logical`, the model declares its kernels' dims by logical axis name and the step takes the boxed
    parameters as Flax's SPMD guide does: each box's sharding from `LOGICAL_RULES`
    (`nn.logical_to_mesh_axes`), the other arrays' from the plan."""
    plan = PLANS[plan_name]
    model = LOGICAL_MODEL if logical else MODEL
    tokens = jax.ShapeDtypeStruct((BATCH, SEQ), jnp.int32, sharding=NamedSharding(mesh, P("data", None)))
    shapes = jax.eval_shape(model.init, jax.random.key(0), jax.ShapeDtypeStruct((BATCH, SEQ), jnp.int32))["params"]

    def boxed(x):
        return isinstance(x, nn.LogicallyPartitioned)

    def place(path, leaf):
        if boxed(leaf):
            spec = nn.logical_to_mesh_axes(leaf.names, LOGICAL_RULES)
            return leaf.replace_boxed(jax.ShapeDtypeStruct(leaf.value.shape, leaf.value.dtype,
                                                           sharding=NamedSharding(mesh, spec)))
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(
            mesh, _spec(plan, path) if leaf.ndim else P()))

    def sharded(tree):
        return jax.tree_util.tree_map_with_path(place, tree, is_leaf=boxed)

    params = sharded(shapes)
    opt_state = sharded(jax.eval_shape(OPTIMIZER.init, shapes))
    out = (jax.tree.map(lambda a: a.sharding, params), jax.tree.map(lambda a: a.sharding, opt_state),
           NamedSharding(mesh, P()))
    return jax.jit(step_of(model), out_shardings=out), (params, opt_state, tokens, tokens)


# ------------------------------------------------------------------------------------------------ the tests
HERE = Path(__file__).resolve()
TEXT = HERE.read_text(encoding="utf-8").splitlines()


def line_of(marker: str) -> int:
    """The line of this file that holds `marker` (the model's own lines, so the test survives edits)."""
    (found,) = [n for n, text in enumerate(TEXT, start=1) if marker in text and "line_of" not in text]
    return found


W_IN, W_OUT, NORM = line_of('name="w_in"'), line_of('name="w_out"'), line_of('name="norm"')


@pytest.fixture(scope="session")
def reports():
    """The four plans, analysed once per session on TPU v5e prices."""
    import analyzer

    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    out = {}
    for plan in PLANS:
        fn, args = abstract_step(plan, mesh)
        out[plan] = analyzer.analyze(fn, *args, mesh=mesh, hardware="tpu-v5e")
    return out


def _file(source: str) -> Path:
    return Path(source.rpartition(":")[0]).resolve()


@pytest.mark.slow
def test_every_collective_and_finding_points_at_this_file(reports):
    for plan, r in reports.items():
        sources = set(r.collectives["source"])
        assert sources and all(_file(s) == HERE for s in sources), (plan, sources - {""})
        for d in r.diagnostics:
            if d.location.file:
                assert Path(d.location.file).resolve() == HERE, (plan, d.code, str(d.location))
                assert "site-packages" not in str(d.location)
    # the MLP's collectives come from the two Dense lines of Block, not from flax's linear.py
    good = reports["fsdp+tp"].collectives
    mlp = good[good["array"].str.contains("w_in|w_out", regex=True)]
    assert set(mlp["source"].map(lambda s: int(s.rpartition(":")[2]))) == {W_IN, W_OUT}


@pytest.mark.slow
def test_each_collective_names_the_argument_it_moves(reports):
    good = reports["fsdp+tp"].collectives
    gathers = good[(good["kind"] == "all-gather") & (good["array"] != "")]
    names = set(gathers["array"])
    # FSDP gathers every layer's MLP kernels over `data`, each named by its pytree path
    for i in range(LAYERS):
        assert f"params['layers_{i}']['w_in']['kernel']" in names
        assert f"params['layers_{i}']['w_out']['kernel']" in names
    row = gathers[gathers["array"] == "params['layers_0']['w_in']['kernel']"].iloc[0]
    # w_in is P('data', 'model'): the gather over data keeps its model sharding
    assert row["notation"] == "AllGather_data: [I_data, J_model] -> [I, J_model]"


@pytest.mark.slow
def test_the_plans_rank_by_their_communication(reports):
    comm = {plan: r.totals.comm_seconds for plan, r in reports.items()}
    # The good plan ranks above both bad plans. (Against replicated weights it is close on a model this
    # small: with the mesh placed as jax.make_mesh places it on v5e:2x4, `data` straddles x and y, and the
    # replicated plan's one gradient all-reduce costs about as much as FSDP's gathers and scatters.)
    assert comm["fsdp+tp"] < comm["embed-d-on-data"] and comm["fsdp+tp"] < comm["megatron-swapped"], comm
    # ... and both bad plans cost more than doing nothing clever at all (replicated weights)
    assert comm["embed-d-on-data"] > comm["replicated"] and comm["megatron-swapped"] > comm["replicated"], comm
    # The same FLOPs in every sharded plan: only the communication differs (compute per chip is the matmul
    # FLOPs over 8 chips; replicated weights make every chip do the weight-gradient work of the whole batch).
    flops = {plan: r.totals.flops for plan, r in reports.items()}
    assert flops["fsdp+tp"] == flops["embed-d-on-data"] == flops["megatron-swapped"]


@pytest.mark.slow
def test_each_bad_plan_is_found_for_what_it_does_wrong(reports):
    def found(plan):
        return [(d.code, d.location.line, d.notation or "") for d in reports[plan].diagnostics]

    # The embedding table's d_model on `data`: activations leave the lookup as [.., D_data] and are
    # resharded at the layer that reads them (the norm), where the batch wants `data`.
    resharded = [f for f in found("embed-d-on-data") if f[0] == "HA302"]
    assert any(line == NORM for _, line, _ in resharded), found("embed-d-on-data")
    assert not [f for f in found("fsdp+tp") if f[0] == "HA302"], found("fsdp+tp")
    # Megatron with the kernels' dims swapped: the MLP's activations are all-reduced over `model` at both
    # Dense lines, and HA101 says those matmuls are communication-bound on the Megatron roofline.
    swapped = {(line, n.split(":")[0]) for code, line, n in found("megatron-swapped") if code == "HA101"}
    assert {(W_IN, "AllReduce_model"), (W_OUT, "AllReduce_model")} <= swapped, swapped
    # The good plan all-reduces over `model` too (the backward pass's input gradient of a Megatron layer), but
    # the [B, S, F] activations of the swapped plan make that traffic several times larger.
    def model_reduces(plan):
        c = reports[plan].collectives
        lines = c["source"].map(lambda s: int(s.rpartition(":")[2] or 0))
        rows = c[c["notation"].str.startswith("AllReduce_model") & lines.isin([W_IN, W_OUT])]
        return float(rows["total_seconds"].sum())

    assert model_reduces("megatron-swapped") > 3 * model_reduces("fsdp+tp") > 0
    # Replicated weights: every gradient is all-reduced over `data` at its Dense line.
    grads = {(line, n.split(":")[0]) for code, line, n in found("replicated") if code == "HA101"}
    assert {(W_IN, "AllReduce_data"), (W_OUT, "AllReduce_data")} <= grads, grads


@pytest.mark.slow
def test_one_bad_layout_is_one_root_cause_kept_whole(reports):
    """The embedding's layout reshards activations at many lines, each instance small: judged as one root
    cause, none of them is dropped as negligible, and the group's saving is its members' summed."""
    from analyzer.rules.rootcause import group_findings

    r = reports["embed-d-on-data"]
    layout = next(g for g in group_findings(r.diagnostics, r) if g.kind == "activation layout")
    assert layout.subject == "data" and len(layout.findings) >= 5
    assert not any("HA302" in n for n in r.notes if "dropped as negligible" in n), r.notes
    by_instruction: dict[str, float] = {}
    for d in layout.findings:
        by_instruction[d.location.instruction] = max(by_instruction.get(d.location.instruction, 0.0), d.saving_seconds)
    assert layout.saving_seconds == pytest.approx(sum(by_instruction.values()))
    assert all(d.details["root_cause"] == "the activations' layout over 'data'" for d in layout.findings)


@pytest.mark.slow
def test_fixes_are_judged_by_the_memory_of_the_plan_they_lead_to(reports):
    """HA101's roofline fix on the swapped Megatron plan gives `model`'s 2 devices to `data` (4 -> 8) and raises
    the batch: its plan's per-device bytes, worked here from the arguments' shapes and XLA's figures; on a chip
    too small for it, it is no saving and the report opens with the largest fix that fits (issue 11 item 3)."""
    import dataclasses
    import math

    from analyzer.analysis.tpumemory import vmem_budget
    from analyzer.render._common import what_to_do
    from analyzer.rules.rootcause import group_findings, top_cause
    from analyzer.rules.runner import check_rules

    r = reports["megatron-swapped"]
    mem = r.memory
    moved = [d for d in r.diagnostics if d.code == "HA101" and d.details.get("fix_mesh")]
    assert moved and all(d.details["fix_mesh"] == {"model": 1, "data": 8} for d in moved), \
        [(d.code, d.details.get("fix_mesh")) for d in r.diagnostics]

    def per_device(sizes):
        total = 0
        fn, args = abstract_step("megatron-swapped", jax.make_mesh((4, 2), ("data", "model")))
        for path, leaf in jax.tree_util.tree_flatten_with_path(args)[0]:
            spec = leaf.sharding.spec
            n = leaf.dtype.itemsize
            for k, dim in enumerate(leaf.shape):
                entry = spec[k] if k < len(spec) else None
                n *= math.ceil(dim / (sizes[entry] if entry else 1))
            total += n
        return total

    ratio = per_device({"data": 8, "model": 1}) / per_device({"data": 4, "model": 2})
    assert ratio > 1  # the embedding table is P('model', None): whole on every chip once 'model' is gone
    for d in moved:
        # arguments and outputs re-sharded (ratio); temporaries follow the tokens per chip (data 4 -> 8 halves
        # them), grow with `model` 2 -> 1 (taken to shard them too), times the batch the fix asks for
        # (the temporaries' peak wherever it lives; still inside v5e's VMEM budget after the change: none in HBM)
        temps = (mem["temp_bytes"] + mem.get("vmem_temp_bytes", 0)) * (4 / 8) * (2 / 1) * d.details["fix_batch_factor"]
        want = ((mem["argument_bytes"] + mem["output_bytes"] - mem["alias_bytes"]) * ratio
                + (0.0 if temps <= vmem_budget(r.analysis.hardware) else temps))
        assert d.details["fix_batch_factor"] > 1
        assert d.details["fix_memory_bytes"] == pytest.approx(want, rel=1e-9)
        assert d.details["fix_fits"] is True and d.saving_seconds > 0  # 16 GiB of v5e holds it

    # A chip of 40 MB and no VMEM to keep temporaries in: the plan now fits, no HA101 fix of this plan does
    hw = dataclasses.replace(r.analysis.hardware, hbm_bytes=40e6, mxu=None)
    small = dataclasses.replace(r, analysis=dataclasses.replace(r.analysis, hardware=hw))
    found = check_rules(small).diagnostics
    reshaping = [d for d in found if d.details.get("fix_mesh") or d.details.get("fix_batch_factor", 1.0) != 1.0]
    assert reshaping and all(d.saving_seconds is None and d.details["fix_fits"] is False for d in reshaping)
    assert all("Not counted as a saving" in d.message and "38.1 MiB of HBM" in d.message for d in reshaping)
    top = top_cause(found, small)
    fitting = [g for g in group_findings(found, small) if g.saving_seconds > 0]
    assert top is not None and top == fitting[0] and all(d.saving_seconds is not None for d in top.findings)
    assert not any(d in reshaping for g in fitting for d in g.findings)
    assert what_to_do(dataclasses.replace(small, diagnostics=found)).startswith(f"Fix {top.title} first")


@pytest.fixture(scope="module")
def logical_report():
    """The good plan with the kernels declared by Flax logical axis names (compiled once, for the tests below)."""
    import analyzer

    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    fn, args = abstract_step("fsdp+tp", mesh, logical=True)
    return analyzer.analyze(fn, *args, mesh=mesh, hardware="tpu-v5e")


@pytest.mark.slow
def test_flax_logical_axis_names_are_the_notations_letters(logical_report, reports):
    """Issue 11 item 7: where the program names its dimensions (`nn.with_logical_partitioning(init,
    ('embed', 'mlp'))`), the collectives and the arguments table use those names instead of I, J, K."""
    from analyzer.analysis.arguments import argument_rows

    c = logical_report.collectives
    row = c[(c["kind"] == "all-gather") & (c["array"] == "params['layers_0']['w_in']['kernel'].value")].iloc[0]
    # w_in is [embed, mlp] -> P('data', 'model'): the FSDP gather over data keeps its model sharding
    assert row["notation"] == "AllGather_data: [embed_data, mlp_model] -> [embed, mlp_model]"
    out = c[(c["kind"] == "all-gather") & (c["array"] == "params['layers_1']['w_out']['kernel'].value")].iloc[0]
    assert out["notation"] == "AllGather_data: [mlp_model, embed_data] -> [mlp_model, embed]"
    # the same plan as "fsdp+tp" declared by name: the same collectives, the same predicted communication
    assert logical_report.totals.comm_seconds == pytest.approx(reports["fsdp+tp"].totals.comm_seconds, rel=1e-9)
    rows = {r["name"]: r for r in argument_rows(logical_report.analysis, logical_report.mesh)}
    (w_in,) = [r for name, r in rows.items() if "layers_0" in name and "w_in" in name and name.startswith("arg0")]
    assert w_in["notation"] == "[embed_data, mlp_model]"
    (mu,) = [r for name, r in rows.items() if "layers_0" in name and "w_in" in name and ".mu" in name]
    assert mu["notation"] == "[embed_data, mlp_model]"  # optax's moments keep the boxes, so the names
    # an unboxed array keeps I, J: the embedding table (flax's default initializer)
    (table,) = [r for name, r in rows.items() if name.startswith("arg0") and "embedding" in name]
    assert table["notation"] == "[I_model, J]"


@pytest.mark.slow
def test_the_embedding_layout_is_the_top_cause_and_saves_what_the_plans_differ_by(reports):
    """Issue 11's acceptance on this model: the embedding's d_model on `data` is the first plan's top root
    cause, its matmuls' activation traffic over `data` included (a layout, not a mesh, to fix), and its saving is
    within 25% of the step time (and of the communication) the tool predicts between that plan and the fixed one."""
    from analyzer.rules.rootcause import top_cause

    bad, good = reports["embed-d-on-data"], reports["fsdp+tp"]
    top = top_cause(bad.diagnostics, bad)
    assert top is not None and top.title == "the activations' layout over 'data'"
    matmuls = [d for d in top.findings if d.code == "HA101"]
    # the fix names the table and the spec to write (issue 26), not "find the argument that puts 'data' there"
    change = "params['embed']['embedding']: P(None, 'data') -> P(None, None)"
    assert matmuls and all(not d.details["fix_mesh"] and d.fix.startswith(change)
                           and d.details["root_cause_fix"] == change for d in matmuls)
    assert all("the activations' layout is the cause" in d.message for d in matmuls)
    # savings are step time: against the predicted steps' difference, and the communication's
    for difference in (bad.totals.step_seconds - good.totals.step_seconds,
                       bad.totals.comm_seconds - good.totals.comm_seconds):
        assert top.saving_seconds == pytest.approx(difference, rel=0.25), (top.saving_seconds, difference)
