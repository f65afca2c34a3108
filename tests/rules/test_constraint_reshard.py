"""HA304 constraint-reshard (issue 26 item 6): a with_sharding_constraint whose layout is not its value's own is named
at its line with the PartitionSpec to write there, the findings of the collectives it forces take that change (a
reshard pointing at the constraint's line), a mesh change for the same matmuls waits for it, and `--verify-fixes`
rewrites the constraint in the traced program and recompiles.

One small forward MLP on data=4, model=2, compiled once for the module (and once more with the constraint changed).
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import analyzer
from analyzer.diagnostics import Diagnostic, Location
from analyzer.errors import AnalyzerError
from analyzer.rules.rootcause import annotate
from analyzer.workflows.verify import FixSpec, apply_fix, fix_spec_of, verify_fixes
from programs import arg, mesh



def _program():
    m = mesh((4, 2), ("data", "model"))

    def mlp(x, w_in, w_out):
        z = jax.nn.relu(x @ w_in)  # [B_data, F_model] from its operands
        z = jax.lax.with_sharding_constraint(z, NamedSharding(m, P(None, "model")))  # drops 'data': gathers B
        return jnp.tanh(z @ w_out)

    args = (arg(m, (2048, 1024), P("data")), arg(m, (1024, 4096), P(None, "model")),
            arg(m, (4096, 1024), P("model", None)))
    return jax.jit(mlp, out_shardings=NamedSharding(m, P("data"))), args, m


# the constraint's line in `_program` (the first line that says so)
LINE = next(n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "drops 'data': gathers B" in text)


@pytest.fixture(scope="module")
def checked():
    fn, args, m = _program()
    report = analyzer.analyze(fn, *args, mesh=m, hardware="tpu-v5p", model="ideal")
    return verify_fixes(report, fn, args, mesh=m), fn, args


def test_the_constraint_is_named_at_its_line_with_its_spec(checked):
    report, _, _ = checked
    [d] = [d for d in report.diagnostics if d.code == "HA304"]
    assert d.location.line == LINE and d.location.file == __file__
    assert d.details["partition_spec"] == "P(None, 'model')" and d.details["constraint_spec"] == "P('data', 'model')"
    assert "write P('data', 'model') in the with_sharding_constraint at" in d.fix
    assert d.details["fix_spec"]["constraints"] == {f"{__file__}:{LINE}": "P('data', 'model')"}
    # applied and recompiled: the step loses the reshards, at least half of the promise
    assert d.saving_seconds > 0 and d.details["verified_saving_seconds"] >= 0.5 * d.saving_seconds
    # the other findings of its collectives take its change; a reshard points at the constraint's line
    for other in report.diagnostics:
        if other.details.get("root_cause") == d.details["root_cause"] and other is not d and other.saving_seconds:
            assert other.details.get("fix_spec", {}).get("constraints") == d.details["fix_spec"]["constraints"], other
            if other.code in ("HA302", "HA303"):
                assert other.location.line == LINE, other


def test_a_changed_constraint_is_rewritten_in_the_traced_program(checked):
    _, fn, args = checked
    site = f"{__file__}:{LINE}"
    new_fn, _, _, _ = apply_fix(FixSpec(constraints={site: "P('data', 'model')"}), fn, args, {}, None)
    before, after = str(jax.make_jaxpr(fn)(*args)), str(jax.make_jaxpr(new_fn)(*args))
    assert "P(None, 'model')" in before and "P('data', 'model')" not in before
    assert "P('data', 'model')" in after and "P(None, 'model')" not in after
    with pytest.raises(AnalyzerError, match="no with_sharding_constraint of the program comes from"):
        apply_fix(FixSpec(constraints={f"{__file__}:{LINE + 1}": "P('data', 'model')"}), fn, args, {}, None)
    assert fix_spec_of(Diagnostic("HA304", "constraint-reshard", "m", details={"fix_spec": {
        "constraints": {site: "P('data', 'model')"}}}), {}).constraints == {site: "P('data', 'model')"}


def test_a_mesh_change_at_the_constraints_matmuls_waits_for_it():
    site = "m.py:11"
    lead = Diagnostic("HA304", "constraint-reshard", "m", location=Location("m.py", 11), saving_seconds=1e-4,
                      fix="write P('data', 'model') in the with_sharding_constraint at m.py:11",
                      details={"constraint": site, "collectives": ["all-gather.1"], "lines": ["m.py:10", "m.py:12"],
                               "fix_spec": {"constraints": {site: "P('data', 'model')"}}})
    gather = Diagnostic("HA303", "full-rematerialization", "m", saving_seconds=4e-5, fix="keep them equal",
                        location=Location("m.py", 10, instruction="all-gather.1"))
    fold = Diagnostic("HA101", "comm-bound-matmul", "m", saving_seconds=3e-5, fix="give 'model' to 'data'",
                      location=Location("m.py", 12, instruction="all-reduce.3"),
                      details={"fix_mesh": {"data": 8, "model": 1}})
    out = {d.code: d for d in annotate([lead, gather, fold])}
    assert out["HA303"].location.line == 11 and out["HA303"].details["fix_spec"] == lead.details["fix_spec"]
    assert out["HA303"].details["root_cause"] == "the with_sharding_constraint at m.py:11"
    assert out["HA101"].details["fix_mesh"] == {} and out["HA101"].details["superseded_by"] == \
        "the with_sharding_constraint at m.py:11"
