"""MaxText's v5p table predicted from MaxText's own train step (issue 24, item 4; docs/measurements.md, "MaxText on
TPU v5p", "Predicted from MaxText's own step"), beside the built-in template's prediction (tests/analysis/test_measured.py).

The published runs: MaxText repository, MaxText/configs/v5p/README.md (PUBLISHED_MFU in test_measured.py). Each row's
step was built by MaxText's code with the keys of its launch script (MaxText/configs/v5p/<scale>b.sh) and compiled
for the cpu target (one fake device per chip) by fixtures/maxtext_v5p/generate.py, which recorded the HLO after SPMD
partitioning and the HLO jax handed XLA (gzipped, with jax, jaxlib and maxtext versions, the MaxText arguments and the
target in their headers). This test analyses both with today's model on TPU v5p on the run's slices, with the runs'
XLA flags (LIBTPU_INIT_ARGS of the scripts, `MAXTEXT_V5P_XLA_FLAGS`), and the runs' attention='flash' (the Pallas
splash kernel), which the cpu target compiled as dot_product, priced as the kernel (`analyze_lowered(
flash_attention=True)`, as `hlo-analyzer maxtext` and test_measured_v6e.py do). Nothing is fitted.

`python tests/analysis/test_measured_v5p_maxtext.py` prints the table (with the template's prediction per row).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

try:  # under pytest the root is on sys.path; run as a script, this folder is sys.path[0]
    from tests.analysis import calibration_tables
except ImportError:
    import calibration_tables

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures" / "maxtext_v5p"


# fixtures/maxtext_v5p/generate.py (ROWS, the fixture readers), under a name of its own (`generate` is taken)
_spec = importlib.util.spec_from_file_location("maxtext_v5p_generate", FIXTURES / "generate.py")
v5p_fixtures = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = v5p_fixtures  # (dataclasses look their module up)
_spec.loader.exec_module(v5p_fixtures)
ROWS = [r for r in v5p_fixtures.ROWS if v5p_fixtures.path_of(r.name, "spmd").exists()]
_reports: dict[tuple[str, bool], object] = {}


def _template():
    """tests/analysis/test_measured.py: the published MFU, the runs' flags, the template's rows and prediction."""
    sys.path.insert(0, str(ROOT))
    from tests.analysis import test_measured

    return test_measured


def _args(row) -> dict[str, str]:
    head, _ = v5p_fixtures.split_header(v5p_fixtures.read_fixture(v5p_fixtures.path_of(row.name, "spmd")))
    return v5p_fixtures.program_args(head)


def _report(row, flash: bool = True):
    """The row's report: MaxText's step as compiled, priced on v5p with the runs' XLA flags, attention as the flash
    kernel (`flash` True, as the runs ran it) or as the cpu target's dot-product program (`flash` False)."""
    if (row.name, flash) not in _reports:
        import dataclasses

        from analyzer.compile.xlaflags import parse_xla_flags
        from analyzer.pipeline import analyze_lowered

        flags = parse_xla_flags(_template().MAXTEXT_V5P_XLA_FLAGS, where=row.name)
        lowered = dataclasses.replace(v5p_fixtures.lowered_from_fixtures(row.name), xla_flags=flags)
        _reports[row.name, flash] = analyze_lowered(lowered, hardware="tpu-v5p", topology=row.topology,
                                                    flash_attention=flash)
    return _reports[row.name, flash]


def _template_row(row):
    return next(r for r in _template().ROWS if r.name == row.name)


def maxtext_model_flops(row) -> float:
    """Model FLOPs of one step as the table counts them (MaxText's `calculate_tflops_training_per_device`, not halved
    for the causal mask, times chips): test_measured.py's formula on the run's shapes (the template's row of the same
    name has them: MaxText's base.yml scaled by global_parameter_scale), checked here against the recorded
    arguments."""
    t = _template_row(row)
    args = _args(row)
    assert int(args["global_parameter_scale"]) == t.scale and int(args["per_device_batch_size"]) == t.per_device_batch
    return _template().maxtext_model_flops(t)


def _iota_embedding_flops(row) -> float:
    """`use_iota_embed`'s one-hot embedding matmul (forward and its gradient), 2 x 2 x tokens x vocab x d_model: the
    runs execute it, MaxText's count leaves it out."""
    c = _template_row(row).config
    return 4 * c.batch * c.seq * c.vocab * c.d_model if _args(row).get("use_iota_embed") == "true" else 0.0


def predicted_mfu(row, flash: bool = True) -> float:
    """Predicted MFU (percent) by the table's count: MaxText's model FLOPs over the predicted step x the chips' peak
    (the tool's own MFU counts the dots the program has, the iota embedding's included)."""
    t = _report(row, flash).totals
    return 100 * t.mfu * maxtext_model_flops(row) / t.model_flops


def template_mfu(row) -> float:
    """The template's prediction for the same row (tests/analysis/test_measured.py, fixtures/maxtext/)."""
    return 100 * _template()._report(_template_row(row)).totals.mfu


def _param(row):
    return pytest.param(row, id=row.name, marks=(pytest.mark.slow,))  # 10-40 s a row on 2 loaded cores


def test_every_row_has_fixtures_made_from_its_launch_script():
    published = _template().PUBLISHED_MFU
    assert {r.name for r in v5p_fixtures.ROWS} == set(published)  # the table's rows, the template's names
    assert ROWS, "no fixtures: python fixtures/maxtext_v5p/generate.py (needs the maxtext extra)"
    for row in ROWS:
        t = _template_row(row)
        args = dict(a.split("=", 1) for a in row.argv)
        assert args["compile_topology"] == f"v5p-{2 * t.chips_per_slice}", row.name  # v5p-N: N cores, N/2 chips
        assert int(args["compile_topology_num_slices"]) == t.slices and row.chips == t.chips, row.name
        assert int(args["ici_tensor_parallelism"]) == t.tensor and args["remat_policy"] == t.remat, row.name
        for stage in ("spmd", "global"):
            head, _ = v5p_fixtures.split_header(v5p_fixtures.read_fixture(v5p_fixtures.path_of(row.name, stage)))
            assert head["program"] == "maxtext " + " ".join(row.argv), (row.name, stage)  # not stale
            assert head["target"].startswith("cpu"), row.name
            assert "jax " in head["versions"] and "maxtext " in head["versions"], row.name
        # MaxText's mesh: the tensor axis as the script sets it, the rest fsdp, the slices on data (DCN)
        head, _ = v5p_fixtures.split_header(v5p_fixtures.read_fixture(v5p_fixtures.path_of(row.name, "spmd")))
        mesh = {k: int(v) for k, v in (item.split("=") for item in head["mesh"].split(","))}
        assert mesh["tensor"] == t.tensor and mesh["fsdp"] == t.chips_per_slice // t.tensor, (row.name, mesh)
        assert mesh["data"] == t.slices, (row.name, mesh)


@pytest.mark.parametrize("row", [_param(r) for r in ROWS])
def test_model_flops_are_maxtexts_and_the_embedding_matmul(row):
    # The published MFU's numerator is MaxText's count; the tool counts the model's dots in the program jax handed
    # XLA: the same, plus the iota embedding's one-hot matmul MaxText's count leaves out.
    expected = maxtext_model_flops(row) + _iota_embedding_flops(row)
    assert _report(row).totals.model_flops == pytest.approx(expected, rel=1e-3)


@pytest.mark.parametrize("row", [_param(r) for r in ROWS])
def test_analysed_as_the_run_ran(row):
    # The runs' flags reach the step model (as the template's rows' do) and attention is priced as the flash kernel:
    # the cpu target's dot-product program puts the S x S scores through HBM, which the kernel keeps on chip.
    from analyzer.compile.xlaflags import parse_xla_flags

    report = _report(row)
    assert dict(report.analysis.xla_flags) == parse_xla_flags(_template().MAXTEXT_V5P_XLA_FLAGS, where=row.name)
    assert report.analysis.flash_attention and _args(row)["attention"] == "flash"


@pytest.mark.slow
def test_the_flash_term_shortens_the_step_without_changing_the_flops():
    # One row (a second analysis per row would double the suite's time): the kernel keeps the scores on chip.
    row = ROWS[0]
    report, plain = _report(row), _report(row, False)
    assert plain.totals.model_flops == report.totals.model_flops
    assert report.totals.memory_bound_seconds < plain.totals.memory_bound_seconds
    assert report.totals.step_seconds < plain.totals.step_seconds


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_a_published_run_gets_no_memory_finding(row):
    # HA401 on MaxText's real step (issue 25 item 4): the runs fit in v5p's 95 GB.
    report = _report(row)
    found = [d.message for d in report.diagnostics if d.code == "HA401"]
    assert not found, found


TARGET_MEAN, TARGET_MAX = 3.0, 6.0  # issue 24: mean |error| <= 3 MFU points, max <= 6 (test_measured_v6e.py's)


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="missing terms (docs/measurements.md, 'Predicted from MaxText's own step'): "
                   "14 rows, mean |error| 3.69, max 9.96. Over 6 points: three two-slice rows, 128b-2x-v5p-512 "
                   "+9.96, 256b-2x-v5p-1024 +7.72, 1024b-2x-v5p-2048 +9.75, where the model hides the DCN "
                   "all-reduces under the backward pass and predicts the second slice at 0.01-0.10 s of exposure "
                   "(the published second slices cost 2.0-9.2 points; no per-collective DCN figure is published); "
                   "the one-slice 1024B row's parallelism is a reconstruction (+5.97)")
def test_v5p_table_within_the_target():
    published = _template().PUBLISHED_MFU
    errors = {row.name: predicted_mfu(row) - published[row.name] for row in ROWS}
    worst = max(errors, key=lambda n: abs(errors[n]))
    mean = sum(abs(e) for e in errors.values()) / len(errors)
    assert len(errors) == len(published) and mean <= TARGET_MEAN and abs(errors[worst]) <= TARGET_MAX, (
        f"mean |error| {mean:.2f} points (target {TARGET_MEAN}), worst {worst} {errors[worst]:+.2f} "
        f"(target {TARGET_MAX}): " + ", ".join(f"{n} {e:+.2f}" for n, e in errors.items()))


CALIBRATION = calibration_tables.Table(
    "tpu-v5p", "MaxText's v5p table", "MaxText/configs/v5p/README.md; docs/measurements.md",
    "MaxText's own step of each run (fixtures/maxtext_v5p), its attention as the flash kernel, the runs' XLA flags",
    predicted=lambda: {row.name: predicted_mfu(row) for row in ROWS}, published=lambda: _template().PUBLISHED_MFU)


@pytest.mark.slow
def test_the_calibration_file_is_todays_model():
    """The error bars on v5p come from this table's residuals with the model as it is: a change to the step model
    that moves a row must rewrite them (`python tests/analysis/test_measured_v5p_maxtext.py --write-calibration`)."""
    CALIBRATION.check()


def table() -> str:
    """The comparison, one line per row, and the mean and largest |error| (`python
    tests/analysis/test_measured_v5p_maxtext.py` prints it): predicted MFU by the table's count with attention priced
    as the flash kernel, MaxText's step as dot-product (the scores through HBM), the template's prediction
    (test_measured.py); then each one's step split as the step model splits it (matmul-bound and HBM-bound compute,
    exposed communication)."""
    published = _template().PUBLISHED_MFU
    lines = [("| run | chips | MaxText's mesh | published MFU | predicted MFU | error (points) | as dot_product | "
             "template's predicted | template's error | step s (template's) | matmul-bound s (template's) | "
             "HBM-bound s (template's) | exposed comm s (template's) |"),
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    errors, template_errors = {}, {}
    for row in ROWS:
        t, tt = _report(row).totals, _template()._report(_template_row(row)).totals
        pub, predicted, tmpl = published[row.name], predicted_mfu(row), template_mfu(row)
        errors[row.name], template_errors[row.name] = predicted - pub, tmpl - pub
        head, _ = v5p_fixtures.split_header(v5p_fixtures.read_fixture(v5p_fixtures.path_of(row.name, "spmd")))
        mesh = ",".join(item for item in head["mesh"].split(",") if not item.endswith("=1"))
        lines.append(f"| {row.name} | {row.chips} | {mesh} | {pub:.2f}% | {predicted:.2f}% | {predicted - pub:+.2f} | "
                     f"{predicted_mfu(row, False):.2f}% | {tmpl:.2f}% | {tmpl - pub:+.2f} | "
                     f"{t.step_seconds:.2f} ({tt.step_seconds:.2f}) | {t.matmul_seconds:.2f} ({tt.matmul_seconds:.2f})"
                     f" | {t.memory_bound_seconds:.2f} ({tt.memory_bound_seconds:.2f}) | "
                     f"{t.exposed_comm_seconds:.2f} ({tt.exposed_comm_seconds:.2f}) |")
    for name, errs in (("MaxText's step", errors), ("template (same rows)", template_errors)):
        absolute = {k: abs(v) for k, v in errs.items()}
        worst = max(absolute, key=absolute.get)
        lines.append(f"\n{name}: {len(errs)} rows, mean |error| {sum(absolute.values()) / len(errs):.2f} points, "
                     f"max {absolute[worst]:.2f} ({worst})")
    return "\n".join(lines)


def differences() -> str:
    """Where MaxText's step and the template's differ, per row (`--why`): model FLOPs as each program has them over
    MaxText's count, compute (HBM-bound part), and per mesh axis the collectives' busy and exposed seconds,
    MaxText's (template's)."""
    lines = [("| run | model FLOPs / MaxText's count | compute s | HBM-bound s | collectives busy s by axis | "
             "exposed s by axis |"), "|---|---:|---:|---:|---|---|"]
    for row in ROWS:
        ours, theirs = _report(row), _template()._report(_template_row(row))
        count = maxtext_model_flops(row)

        def both(attr: str, ours=ours, theirs=theirs) -> str:
            return f"{getattr(ours.totals, attr):.2f} ({getattr(theirs.totals, attr):.2f})"

        def by_axis(field: str, ours=ours, theirs=theirs) -> str:
            a, b = getattr(ours.analysis.step, field), getattr(theirs.analysis.step, field)
            keys = sorted(k for k in set(a) | set(b) if k != "compute" and max(a.get(k, 0), b.get(k, 0)) >= 0.005)
            return ", ".join(f"{k} {a.get(k, 0.0):.2f} ({b.get(k, 0.0):.2f})" for k in keys)

        lines.append(f"| {row.name} | {ours.totals.model_flops / count:.4f} ({theirs.totals.model_flops / count:.4f}) | "
                     f"{both('compute_seconds')} | {both('memory_bound_seconds')} | {by_axis('busy')} | "
                     f"{by_axis('exposed_by_axis')} |")
    return "\n".join(lines)


if __name__ == "__main__":
    if "--write-calibration" in sys.argv[1:]:  # the error bars' v5p residuals (analyzer/analysis/calibration.py)
        written = CALIBRATION.write()
        print(f"wrote {written.relative_to(ROOT)}")
    print(table())
    if "--why" in sys.argv[1:]:
        print(differences())
