"""An activation layout names its change (issue 26, item 5's headline): where an embedding table splits its
features over the layout's mesh axis, the finding that could only say "find the argument or
with_sharding_constraint that puts 'data' on a feature dimension" names the table and the PartitionSpec to write,
the report's first sentence says it, and `--verify-fixes` applies it.

The program is tests/rules/plans.py's `embedding_plan` (token ids looked up with `jnp.take`, then the MLP, on
data=4, model=2), compiled once per session (tests/conftest.py's `planned("embedding")`, which test_roles.py
also reads).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from jax.sharding import PartitionSpec as P

import analyzer
from analyzer.diagnostics import Diagnostic
from analyzer.render._common import verified_text, what_to_do
from analyzer.rules.rootcause import _with_layout_change, layout_change
from analyzer.workflows.verify import fix_spec_of

CHANGE = "params['wte']['embedding']: P('model', 'data') -> P('model', None)"


def test_a_layout_finding_takes_the_named_change_and_the_others_carry_it():
    change = (CHANGE, {"params['wte']['embedding']": "P('model', None)"})
    generic = Diagnostic("HA101", "comm-bound-matmul", "m", fix="keep the activations sharded over 'data' ...",
                         details={"layout_axis": "data"})
    named = _with_layout_change(generic, change, "data")
    assert named.fix.startswith(CHANGE + ": the embedding table splits its features over 'data'")
    assert named.details["fix_spec"] == {"arguments": {"params['wte']['embedding']": "P('model', None)"}}
    assert named.details["layout_fix"] == generic.fix and named.details["root_cause_fix"] == CHANGE
    other = _with_layout_change(Diagnostic("HA302", "n", "m", fix="shard the producer's output as P()"), change, "data")
    assert other.fix == "shard the producer's output as P()" and other.details["root_cause_fix"] == CHANGE
    assert "fix_spec" not in other.details
    assert CHANGE in fix_spec_of(other, {"data": 4, "model": 2})  # not verified itself: says where the change is
    # a reshard of the layout that promises a saving takes the one change of its root cause (issue 26), its own
    # advice kept; one a with_sharding_constraint forced keeps its fix, which names that line
    reshard = Diagnostic("HA302", "n", "m", fix="shard the producer's output as P()", saving_seconds=2e-6)
    taken = _with_layout_change(reshard, change, "data")
    assert taken.fix.startswith(CHANGE + " (the one change for the activations' layout over 'data'")
    assert taken.details["fix_spec"] == named.details["fix_spec"] and taken.details["reconciled_fix"] == reshard.fix
    forced = replace(reshard, details={"forced_by": "m.py:7"})
    assert _with_layout_change(forced, change, "data").fix == reshard.fix


def test_the_first_sentence_names_the_root_cause_s_change():
    class Report:
        diagnostics = (Diagnostic("HA302", "reshard", "m", saving_seconds=2e-5, fix="make the consumer accept it",
                                  notation="AllToAll_data: [I, J, K_data] -> [I_data, J, K]",
                                  details={"root_cause_fix": CHANGE}),)
        collectives = None
        totals = None

    assert f"Change: {CHANGE}." in what_to_do(Report())


@pytest.fixture(scope="module")
def embedding(planned):
    return planned("embedding"), planned.plans.embedding_plan()


@pytest.mark.slow
def test_the_embedding_table_split_over_data_is_named_with_its_spec(embedding):
    report, _ = embedding
    assert layout_change(report, "data") == (CHANGE, {"params['wte']['embedding']": "P('model', None)"})
    assert layout_change(report, "model") is None  # the table's rows on 'model' index it: no feature dim
    layout = [d for d in report.diagnostics if d.details.get("root_cause") == "the activations' layout over 'data'"]
    assert layout and all(d.details["root_cause_fix"] == CHANGE for d in layout)
    # (the weight gradient's gather, and the all-to-all into the forward matmul: a reshard, not an expert's)
    named = [d for d in layout if d.details.get("layout_axis")]
    assert named and all(d.fix.startswith(CHANGE) for d in named)
    assert what_to_do(report).startswith("Fix the activations' layout over 'data' first")
    assert f"Change: {CHANGE}: the embedding table" in what_to_do(report)


@pytest.mark.slow
def test_the_named_change_recompiled_saves_at_least_half_its_promise(embedding):
    from analyzer.workflows.verify import verify_fixes

    report, (fn, args, kwargs) = embedding
    after = verify_fixes(report, fn, args, mesh=kwargs["mesh"])
    every = [d for d in after.diagnostics if d.details.get("layout_axis")]
    for named in every:
        assert named.details["verified_change"] == "params['wte']['embedding'] -> P('model', None)"
        assert named.details["verified_saving_seconds"] >= 0.5 * named.saving_seconds > 0
    named = max(every, key=lambda d: d.saving_seconds)
    # the layout's reshards (HA302) propose the same change: verified with it, each saves half its promise
    reshards = [d for d in after.diagnostics if d.code == "HA302" and d.details.get("reconciled")]
    for d in reshards:
        assert d.details["verified_change"] == named.details["verified_change"]
        assert d.details["verified_saving_seconds"] >= 0.5 * d.saving_seconds
    assert "Verified: saved" in what_to_do(after) and verified_text(named).startswith("verified: saved")


@pytest.mark.slow
def test_quiet_where_the_table_keeps_its_features_whole(planned):
    fn, args, kwargs = planned.plans.embedding_plan(P("model", None))
    report = analyzer.analyze(fn, *args, **kwargs)
    assert layout_change(report, "data") is None
    assert not any(d.details.get("root_cause_fix") for d in report.diagnostics)
