"""`@analyzer.audit`: analyses once per new signature, never changes results, raises/warns on violations.

"No cost on later calls" is tested by counting (analyses run, and traces of the user's function), never by
timing. The programs are small matmuls on the 8 fake CPU devices tests/conftest.py provides.
"""

from __future__ import annotations

import warnings

import pytest

import analyzer
from analyzer.workflows.auditing import AuditError, AuditWarning, audit, signature_of

pytestmark = pytest.mark.slow  # compiles jax programs (about a second each)


@pytest.fixture(scope="module")
def mesh():
    import jax

    return jax.make_mesh((8,), ("X",), axis_types=(jax.sharding.AxisType.Auto,))


def _arrays(mesh, n=64, spec_x=(None, "X"), spec_w=("X", None), dtype="float32"):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    x = jnp.arange(n * 32, dtype=dtype).reshape(n, 32) / 100
    w = jnp.ones((32, 16), dtype=dtype) / 7
    return (jax.device_put(x, NamedSharding(mesh, P(*spec_x))), jax.device_put(w, NamedSharding(mesh, P(*spec_w))))


@pytest.fixture
def counting(monkeypatch):
    """Counts calls of analyzer.pipeline.analyze (the real one runs)."""
    import analyzer.pipeline as analysis

    calls = []
    real = analysis.analyze

    def counted(*args, **kwargs):
        calls.append(kwargs.get("mesh"))
        return real(*args, **kwargs)

    monkeypatch.setattr(analysis, "analyze", counted)
    return calls


def test_results_unchanged_and_one_analysis_per_signature(mesh, counting):
    import jax
    import numpy as np

    traces = []

    def matmul(x, w):
        traces.append(1)  # runs once per trace
        return x @ w

    plain = jax.jit(matmul)
    audited = audit(on_violation="off")(jax.jit(matmul))
    x, w = _arrays(mesh)
    expected = plain(x, w)
    traces.clear()

    first = audited(x, w)
    np.testing.assert_array_equal(np.asarray(first), np.asarray(expected))
    assert first.sharding == expected.sharding and first.dtype == expected.dtype
    assert len(counting) == 1 and audited.audit_count == 1
    traces_after_first = len(traces)

    for _ in range(5):  # the same signature: no analysis, no trace, same results
        again = audited(x, w)
        np.testing.assert_array_equal(np.asarray(again), np.asarray(expected))
    assert len(counting) == 1 and len(traces) == traces_after_first

    x2, w2 = _arrays(mesh, n=128)  # a new shape is a new signature
    audited(x2, w2)
    x3, w3 = _arrays(mesh, spec_x=("X", None), spec_w=(None, None))  # same shapes, other shardings
    audited(x3, w3)
    assert len(counting) == 3 and audited.audit_count == 3
    assert len(audited.audit_reports) == 3


def test_plain_functions_and_keyword_arguments(mesh, counting):
    import numpy as np

    def scaled(x, w, *, scale):
        return (x @ w) * scale

    audited = audit(on_violation="off")(scaled)
    x, w = _arrays(mesh)
    out = audited(x, w, scale=2.0)
    np.testing.assert_allclose(np.asarray(out), np.asarray(scaled(x, w, scale=2.0)))
    audited(x, w, scale=3.0)  # a Python scalar's value does not change the program
    assert len(counting) == 1
    report = next(iter(audited.audit_reports.values()))
    assert set(report.collectives["kind"]) >= {"all-reduce"} or set(report.collectives["kind"]) >= {"reduce-scatter"}


def test_the_report_has_the_contraction_collective(mesh):
    audited = audit(on_violation="off")(lambda x, w: x @ w)
    audited(*_arrays(mesh))
    report = next(iter(audited.audit_reports.values()))
    assert report.mesh.axis_names == ("X",)
    assert any(k in ("all-reduce", "reduce-scatter") for k in report.collectives["kind"])
    assert all(axes == ("X",) for axes in report.collectives["axes"])


def test_raise_carries_diagnostics_and_report_and_does_not_run_the_step(mesh, counting):
    import jax

    ran = []

    @audit(budgets={"comm-seconds-per-step": 1e-12})  # any communication breaks this budget
    def step(x, w):
        jax.debug.callback(lambda: ran.append(1))  # runs when the step executes, not when it is traced
        return x @ w

    x, w = _arrays(mesh)
    with pytest.raises(AuditError) as info:
        step(x, w)
    err = info.value
    assert isinstance(err, analyzer.AnalyzerError)
    assert err.diagnostics and err.report is not None and err.report.totals.comm_seconds > 0
    assert all(d in err.report.diagnostics for d in err.diagnostics)
    assert "audit of" in str(err) and err.diagnostics[0].code in str(err)
    assert not ran  # the violating step did not run
    with pytest.raises(AuditError):  # still violating, still raised, without a new analysis
        step(x, w)
    assert len(counting) == 1


def test_warn_once_per_signature(mesh):
    @audit(budgets={"comm-seconds-per-step": 1e-12}, on_violation="warn")
    def step(x, w):
        return x @ w

    x, w = _arrays(mesh)
    with pytest.warns(AuditWarning, match="comm"):
        step(x, w)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        step(x, w)  # no second warning


def test_select_and_ignore_reach_the_rules(mesh):
    @audit(budgets={"comm-seconds-per-step": 1e-12}, on_violation="off")
    def loud(x, w):
        return x @ w

    loud(*_arrays(mesh))
    codes = {d.code for r in loud.audit_reports.values() for d in r.diagnostics}
    assert codes
    code = sorted(codes)[0]

    @audit(budgets={"comm-seconds-per-step": 1e-12}, ignore=[code], on_violation="off")
    def quiet(x, w):
        return x @ w

    quiet(*_arrays(mesh))
    assert code not in {d.code for r in quiet.audit_reports.values() for d in r.diagnostics}


def test_report_path_is_written(mesh, tmp_path):
    import json

    step = audit(on_violation="off", report_path=tmp_path / "audit.json")(lambda x, w: x @ w)
    step(*_arrays(mesh))
    step(*_arrays(mesh, n=128))
    first = json.loads((tmp_path / "audit.json").read_text())
    assert first["collectives"] and (tmp_path / "audit-2.json").exists()


def test_jit_attributes_stay_reachable(mesh):
    import jax

    step = audit(on_violation="off")(jax.jit(lambda x, w: x @ w))
    assert "HloModule" in step.lower(*_arrays(mesh)).compile().as_text() or step.lower(*_arrays(mesh))
    assert step.audit_count == 0  # lowering through the wrapper is not a call


@pytest.mark.parametrize("kwargs, message", [
    ({"on_violation": "warning"}, "did you mean .warn."),
    ({"fail_on": "fatal"}, "not a severity"),
    ({"report_path": "audit.pdf"}, "cannot tell the format"),
    ({"budgets": {"comm-second-per-step": 1e-3}}, "did you mean 'comm-seconds-per-step'"),
])
def test_bad_options_fail_when_decorating(kwargs, message):
    with pytest.raises(analyzer.AnalyzerError, match=message):
        audit(**kwargs)


def test_signature_ignores_values_but_not_shapes():
    import numpy as np

    assert signature_of((np.zeros((2, 3)), 1.0), {}) == signature_of((np.ones((2, 3)), 5.0), {})
    assert signature_of((np.zeros((2, 3)),), {}) != signature_of((np.zeros((3, 2)),), {})
    assert signature_of((np.zeros(3, "float32"),), {}) != signature_of((np.zeros(3, "float64"),), {})
    assert signature_of((np.zeros(3),), {"mode": "a"}) != signature_of((np.zeros(3),), {"mode": "b"})


def test_calls_inside_another_trace_are_not_audited_and_say_so(mesh):
    import jax
    import numpy as np

    inner = audit(on_violation="raise", budgets={"comm-seconds-per-step": 1e-12})(lambda x, w: x @ w)

    @jax.jit
    def outer(x, w):
        return inner(x, w) * 2

    x, w = _arrays(mesh)
    with pytest.warns(AuditWarning, match="inside a jax transformation"):
        out = outer(x, w)
    np.testing.assert_allclose(np.asarray(out), np.asarray((x @ w) * 2), rtol=1e-6)
    assert inner.audit_count == 0  # tracers carry no shardings: nothing honest to analyse


def test_analyzer_audit_stays_the_decorator_whatever_was_imported_first():
    import subprocess
    import sys

    code = ("from analyzer.workflows.auditing import AuditWarning\n"  # the module is analyzer.workflows.auditing, so analyzer.audit stays the decorator
            "import analyzer\n"
            "bare = analyzer.audit(lambda x: x)\n"
            "configured = analyzer.audit(on_violation='warn')(lambda x: x)\n"
            "print(type(bare).__name__, type(configured).__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["Audited", "Audited"]


def test_a_failed_analysis_warns_and_runs_the_step_unless_raise(monkeypatch):
    import numpy as np

    import analyzer.pipeline as analysis
    from analyzer.errors import LoweringError

    def broken(*args, **kwargs):
        raise LoweringError("cannot compile this for tpu:v9")

    monkeypatch.setattr(analysis, "analyze", broken)
    watched = audit(on_violation="warn")(lambda x: x + 1)
    with pytest.warns(AuditWarning, match="runs unaudited: cannot compile this for tpu:v9"):
        assert watched(np.float32(1)) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert watched(np.float32(2)) == 3  # same signature: no retry, no second warning
    strict = audit(lambda x: x + 1)
    with pytest.raises(LoweringError):
        strict(np.float32(1))
