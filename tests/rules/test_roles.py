"""Each dot's role before its roofline, one per-chip batch per report, and advice that agrees with itself
(issue 26 items 4 and 5). The programs are the plans of tests/rules/plans.py, analysed once per session by the
`planned` fixture; the MoE (`moe_plan`) once per module here."""

from __future__ import annotations

import pytest

from analyzer.diagnostics import Diagnostic
from analyzer.rules.matmul import roofline_change
from analyzer.rules.rootcause import RootCause, opposite_changes, reconcile


def _ha101(report):
    return [d for d in report.diagnostics if d.code == "HA101"]


def _sizes(report):
    return dict(zip(report.mesh.axis_names, report.mesh.axis_sizes))


@pytest.fixture(scope="module")
def moe(planned):
    import analyzer

    fn, args, kwargs = planned.plans.moe_plan()
    return analyzer.analyze(fn, *args, **kwargs)


# ------------------------------------------------------------------------------------------ no compile
def test_no_fractional_ways_and_no_invented_width():
    # F/Y = 1,024 over 2 ways is under C/W_ici even 2-way: said in words, not "at most F/2,550 = 0.8 ways"
    fix = roofline_change("megatron", 1024, 2550, ("model",), 2, [("data", 4)], 2048, 2550, features=2048).text
    assert "no sharding of this dimension over 'model' is compute-bound" in fix and "F = 2,048 over 2 ways" in fix
    assert " = 0." not in fix and "F/2,550" not in fix
    # a width the model does not have is not named (F/Y x ways of several matmuls)
    fix = roofline_change("megatron", 13824, 20400, ("model",), 8, [("data", 4)], 512, 2550, features=None).text
    assert "F = " not in fix and "F >= " not in fix


def test_expert_parallel_advice_moves_no_devices():
    change = roofline_change("expert", 512, 2550, ("expert",), 4, [("data", 2)], None, 2550)
    assert change.mesh == {} and change.batch_factor == 1.0
    assert "expert parallelism" in change.text and "'data' (" not in change.text and "fold" not in change.text


def _d(code, saving, mesh, fix):
    return Diagnostic(code, "comm-bound-matmul", "m", fix=fix, saving_seconds=saving, details={"fix_mesh": mesh})


def test_reconcile_keeps_one_change_per_cause_and_none_opposite():
    sizes = {"data": 4, "model": 2}
    fold = _d("HA101", 3e-5, {"model": 1, "data": 8}, "fold 'model' into 'data'")
    other = _d("HA101", 1e-5, {"model": 1, "data": 8, "x": 1}, "shrink differently")
    give = _d("HA101", 2e-5, {"data": 1, "model": 8}, "give the 4 devices of 'data' to 'model'")
    assert len(opposite_changes([fold, give], sizes)) == 1
    groups = [RootCause("rule", "a", (fold, other), 4e-5), RootCause("rule", "b", (give,), 2e-5)]
    out = [d for g in reconcile(groups, sizes) for d in g.findings]
    assert opposite_changes(out, sizes) == []
    assert out[1].fix.startswith("fold 'model' into 'data'") and out[1].details["reconciled"]
    assert out[2].details["fix_mesh"] == {} and out[2].details["superseded_by"] == "a"
    assert "make that change first" in out[2].fix and out[2].details["superseded_fix"] == give.fix


# ------------------------------------------------------------------------------------------ compiled plans
TOKENS = {"good": 32 * 256 / 4, "replicated_batch": 32 * 256, "wrong_dim": 32 * 256, "fsdp": 32 * 256 / 4}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TOKENS))
def test_one_per_chip_batch_per_report_in_tokens(planned, name):
    report = planned(name)
    found = _ha101(report)
    assert found
    assert {d.details["per_chip_batch"] for d in found} == {TOKENS[name]}
    for d in found:  # every per-chip batch a finding prints is that one (or the one after its own move)
        assert f"per-chip batch {TOKENS[name]:,.0f}" in d.message + d.fix or \
            f"the per-chip batch is {TOKENS[name]:,.0f} tokens" in d.message or \
            d.details["quantity_value"] == pytest.approx(TOKENS[name])


@pytest.mark.slow
def test_the_batch_gathered_is_its_layout_not_fsdp(planned):
    report = planned("wrong_dim")
    # never FSDP: the batch is no weight (jax 0.12's partitioner computes this plan without gathering it)
    assert not [d for d in _ha101(report) if d.details["roofline"] == "fsdp"]
    found = [d for d in _ha101(report) if d.details["roofline"] == "layout"]
    if not found:
        pytest.skip("this jax's partitioner does not gather the batch split on its feature dim")
    (d,) = found
    assert d.details["argument"] == "batch['x']" and "FSDP" not in d.message
    assert d.fix == "batch['x']: P(None, None, 'data') -> P('data', None, None)"
    # one root cause with HA104's finding: the batch's spec
    (h,) = [x for x in report.diagnostics if x.code == "HA104"]
    assert d.details["root_cause"] == h.details["root_cause"] == "the sharding of batch['x']"


@pytest.mark.slow
def test_weight_gradient_is_its_role(planned):
    from analyzer.analysis.roles import arguments, dot_role

    report = planned("fsdp")
    args = arguments(report.analysis.model_flops, _sizes(report))
    assert args.batch >= {"batch['x']"} and args.weights == {"params['w_in']", "params['w_out']"}
    entry = report.analysis.module.entry
    roles = {}
    for inst in entry.instructions:
        if inst.opcode == "dot":
            roles.setdefault(dot_role(report.analysis.module, entry, inst, args), []).append(inst)
    # x^T dy for w_in and h^T dy for w_out: the batch argument read is no weight
    assert len(roles.get("weight gradient", ())) == 2
    assert len(roles.get("forward", ())) == 2 and len(roles.get("activation gradient", ())) == 1


@pytest.mark.slow
def test_moe_token_exchange_is_expert_parallel(moe):
    found = _ha101(moe)
    # the tokens' exchange is expert parallelism's, never Megatron's; the only other collective worth a finding is
    # the reduction over 'data' of an expert's weight gradient (jax 0.12 prices it above the permute grouped with
    # it): data parallelism's, on the FSDP roofline, read as the weight gradient it is (it was "attention")
    assert not [d for d in found if d.details["roofline"] == "megatron"]
    assert all(d.details["roofline"] == "expert" or d.details["roofline"] == "fsdp"
               and d.details["role"] == "weight gradient" and d.notation.startswith("AllReduce") for d in found)
    assert not [d for d in found if d.details.get("role") == "attention"]
    # an expert's weight gradient contracts the tokens sent to that expert: named so, beside the one per-chip batch
    for d in found:
        if d.details["roofline"] == "fsdp":
            assert d.details["quantity"] == "tokens per expert per chip" and "per-chip batch B/X" not in d.message
            assert "(the per-chip batch is 512 tokens)" in d.message
    found = [d for d in found if d.details["roofline"] == "expert"]
    assert found
    for d in found:
        assert d.details["fix_mesh"] == {} and "expert parallelism" in d.fix
        assert "tensor-parallel" not in d.message and "FSDP" not in d.fix
    # the widest dimension of the MoE is 2,048: no finding names a wider F
    assert not any("F = 32,768" in d.fix or "F = 4,096" in d.fix for d in found)


def _dot_roles(report, args):
    """(the einsum of its op_name, its role) of each dot of the partitioned module."""
    from analyzer.analysis.roles import dot_role

    module = report.analysis.module
    for comp in module.computations:
        for inst in comp.instructions:
            if inst.opcode == "dot":
                yield inst.metadata.op_name.rpartition("/")[0].rpartition("/")[2], dot_role(module, comp, inst, args)


@pytest.mark.slow
def test_moe_dots_roles(moe):
    """The MoE's dots by role, on jax 0.10 and 0.12 alike: the dispatch `gsec,gsd->egcd`, the combine
    `gsec,egcd->gsd` and the combine's backward route tokens (whichever collectives move them: jax 0.12 sends the
    dispatched tokens by permutes, not an all-to-all); the experts' FFNs read their weights; their batched weight
    gradients (experts as the batch dim) are weight gradients, not attention. The dispatch mask `[G, S, E, C]`
    holds one entry per token of `x` `[G, S, D]`: batch, not a weight."""
    from analyzer.analysis.roles import arguments

    args = arguments(moe.analysis.model_flops, _sizes(moe), moe.analysis.module)
    assert args.batch == {"batch['x']", "batch['dispatch']"} and args.weights == {"params['w_in']", "params['w_out']"}
    assert args.batch_name == "batch['x']" and args.per_chip_tokens == 512  # [G, S, D] = [8, 512, 1024] over 8 chips
    roles = {}
    for einsum, role in _dot_roles(moe, args):
        roles.setdefault(role, set()).add(einsum)
    assert roles == {
        "moe dispatch/combine": {"jvp(gsec,gsd->egcd)", "jvp(gsec,egcd->gsd)", "transpose(jvp(gsec,egcd->gsd))"},
        "forward": {"jvp(egcd,edf->egcf)", "jvp(egcf,efd->egcd)"},
        "activation gradient": {"transpose(jvp(egcf,efd->egcd))"},
        "weight gradient": {"transpose(jvp(egcd,edf->egcf))", "transpose(jvp(egcf,efd->egcd))"},
    }


def test_an_expert_weight_gradient_in_a_dump_is_one():
    """The chapter's MoE step read from its dump (no program before partitioning to name the weights): the
    reductions over 'X' of the experts' batched weight gradients (`egcd,edf->egcf` transposed, experts as the batch
    dim; in the scanned layers' loop body) are data parallelism's weight-gradient reductions, not attention's."""
    from pathlib import Path

    import analyzer

    path = Path(__file__).resolve().parents[2] / "fixtures/tpu-v5e-2x4/X2_Y4/ep_step.spmd.hlo"
    report = analyzer.analyze_hlo(path.read_text(), mesh="X=2,Y=4")
    found = _ha101(report)
    assert found and not [d for d in found if d.details["role"] == "attention"]
    grads = [d for d in found if d.details["role"] == "weight gradient"]
    assert grads and all(d.details["roofline"] == "fsdp" and d.notation.startswith("AllReduce") for d in grads)
    # the quantity is the tokens each expert contracts per chip, named so: never called the per-chip batch
    for d in grads:
        assert d.details["quantity"] == "tokens per expert per chip"
        assert f"tokens per expert per chip = {d.details['quantity_value']:,.0f} tokens" in d.message
        assert "per-chip batch" not in d.message + d.fix and "raise the tokens each expert multiplies" in d.fix


def test_an_expert_s_fsdp_advice_names_its_tokens():
    """FSDP's advice for a weight stacked over experts: the tokens per expert per chip, and how to raise them."""
    change = roofline_change("fsdp", 1024, 3825, ("data",), 2, [("expert", 4)], None, 2550, per_expert=True)
    assert change.text.startswith("raise the tokens each expert multiplies per chip 3.7x (tokens per expert per "
                                  "chip >= 3,825: a larger batch or capacity factor, or fewer experts)")
    assert "per-chip batch" not in change.text
    plain = roofline_change("fsdp", 1024, 3825, ("data",), 2, [("expert", 4)], None, 2550)
    assert plain.text.startswith("raise the batch per chip 3.7x (per-chip batch >= 3,825)")


@pytest.mark.slow
def test_attention_stays_attention():
    """A batched matmul of two activations with no expert beside it is attention, forward and backward."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    import analyzer
    from analyzer.analysis.roles import arguments

    mesh = jax.sharding.Mesh(__import__("numpy").array(jax.devices()[:8]).reshape(4, 2), ("data", "model"))

    def loss(params, x):
        q, k, v = (jnp.einsum("bsd,dh->bsh", x, params[n]) for n in ("q", "k", "v"))
        p = jax.nn.softmax(jnp.einsum("bsh,bth->bst", q, k), axis=-1)
        return jnp.mean(jnp.einsum("bst,bth->bsh", p, v) ** 2)

    w = jax.ShapeDtypeStruct((256, 256), jnp.float32, sharding=NamedSharding(mesh, P(None, "model")))
    x = jax.ShapeDtypeStruct((8, 128, 256), jnp.float32, sharding=NamedSharding(mesh, P("data")))
    report = analyzer.analyze(jax.jit(jax.grad(loss)), {"q": w, "k": w, "v": w}, x, mesh=mesh)
    args = arguments(report.analysis.model_flops, _sizes(report), report.analysis.module)
    roles = {}
    for einsum, role in _dot_roles(report, args):
        roles.setdefault(einsum, set()).add(role)
    batched = {e: r for e, r in roles.items() if "bst" in e}
    assert batched and all(r == {"attention"} for r in batched.values()), roles


@pytest.mark.slow
@pytest.mark.parametrize("name", ["good", "dp", "replicated_batch", "wrong_dim", "shard_map", "fsdp", "moe",
                                  "embedding"])
def test_no_report_proposes_opposite_changes(planned, moe, name):
    report = moe if name == "moe" else planned(name)
    assert opposite_changes(report.diagnostics, _sizes(report)) == []
    # one proposed mesh per root cause
    by_cause: dict[str, set] = {}
    for d in report.diagnostics:
        if d.details.get("fix_mesh"):
            by_cause.setdefault(d.details["root_cause"], set()).add(tuple(sorted(d.details["fix_mesh"].items())))
    assert all(len(v) == 1 for v in by_cause.values())
    # and one PartitionSpec per argument in the whole report
    from analyzer.rules.rootcause import spec_change

    specs: dict[str, set] = {}
    for d in report.diagnostics:
        for path, spec in spec_change(d).items():
            specs.setdefault(path, set()).add(spec)
    assert all(len(v) == 1 for v in specs.values()), specs
