"""Predictions against published measurements (issue 10, item 5; docs/measurements.md).

1. The book's measured collectives (How to Scale Your Model, shared/reference/scaling_book_numbers.md): what the
   cost model predicts for the book's v5e AllGather against what the book measured.
2. MaxText's published v5p MFU table: the template configured like each run (examples/maxtext_v5p.py), its HLO
   recorded by fixtures/maxtext/generate.py (cpu target, one fake device per chip), analysed on the run's v5p
   slice; the predicted MFU must be within 10 MFU points of the published one, with no per-row fitting.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import analyzer
from analyzer.theory.cost import collective_cost
from analyzer.theory.notation import parse_collective
from analyzer.theory.topology import Topology

ROOT = Path(__file__).resolve().parents[2]
MAXTEXT = ROOT / "fixtures" / "maxtext"
if __name__ == "__main__":  # run as a script (the README's command): the repository's examples/ must import
    import sys

    sys.path.insert(0, str(ROOT))


# ------------------------------------------------------------------------------------------ the book's collectives
def _collective(text: str, mesh: dict[str, int], dims: dict[str, int], dtype: str = "bf16"):
    c = parse_collective(text, mesh)
    before = c.before.with_mesh(mesh).with_shape([dims[d.name] for d in c.before.dims], dtype)
    after = c.after.with_mesh(mesh).with_shape([dims[d.name] for d in c.after.dims], dtype)
    return c, type(c)(c.kind, c.axes, before, after, c.scatter_dim).volume_bytes()


@pytest.fixture(scope="module")
def v5e_8x4():
    return Topology.for_mesh("tpu-v5e", ("X", "Y"), (8, 4), topology="v5e:8x4")


def test_book_measured_allgather_680us(v5e_8x4):
    # Measured: How to Scale Your Model, sharding.md, Pop Quiz 2 (scaling_book_numbers.md, "Pop Quiz 2 [AllGather
    # time] (1)"): AllGather_Y([E_Y, F]) on a v5e 8x4, E=2048, F=8192, bf16, measured 680 us (the book predicts
    # 560 us: one direction over 3 hops, no wraparound on an axis of 4).
    # Tolerance 20%: the bandwidth model leaves out the per-hop overheads that make the measurement 18% slower.
    c, v = _collective("AllGather_Y [E_Y, F] -> [E, F]", {"X": 8, "Y": 4}, {"E": 2048, "F": 8192})
    predicted = collective_cost(c.kind, v, c.axes, v5e_8x4).seconds
    measured = 680e-6
    assert abs(predicted - measured) <= 0.20 * measured, predicted


def test_book_measured_latency_bound_allgather_8us(v5e_8x4):
    # Measured: sharding.md, Pop Quiz 2 (2) (scaling_book_numbers.md): the same AllGather with E=F=256 (32 kB
    # shards, latency-bound), book's estimate 3 hops x 1 us = 3 us, measured about 8 us. Tolerance 50%.
    # The book's formula (`seconds`) stays 3 us; with the ring's synchronisation (analyzer.theory.cost, module doc
    # "Synchronisation": the entry barrier with both neighbours and a ready signal per latency-bound step, from
    # jax's Pallas distributed guide) it is max(0.7, 2 x 3) + 1 = 7 us.
    c, v = _collective("AllGather_Y [E_Y, F] -> [E, F]", {"X": 8, "Y": 4}, {"E": 256, "F": 256})
    cost = collective_cost(c.kind, v, c.axes, v5e_8x4)
    assert cost.seconds == pytest.approx(3e-6)  # the book's estimate, unchanged
    predicted = cost.synchronised_seconds
    measured = 8e-6
    assert predicted == pytest.approx(7e-6)
    assert abs(predicted - measured) <= 0.5 * measured, predicted


def test_synchronisation_adds_only_the_barrier_to_a_bandwidth_bound_gather(v5e_8x4):
    # the 680 us AllGather: the ready signals travel under the transfers, the entry barrier (1 us) does not
    c, v = _collective("AllGather_Y [E_Y, F] -> [E, F]", {"X": 8, "Y": 4}, {"E": 2048, "F": 8192})
    cost = collective_cost(c.kind, v, c.axes, v5e_8x4)
    assert cost.sync_seconds == pytest.approx(1e-6)
    assert abs(cost.synchronised_seconds - 680e-6) <= 0.20 * 680e-6


# ------------------------------------------------------------------------------------------ MaxText on v5p
# Published MFU (percent): MaxText repository, MaxText/configs/v5p/README.md, "High Performance Model Configs on
# TPU v5p", MFU column (the runs of MaxText/configs/v5p/{32b,...,1024b}.sh; docs/measurements.md copies the table).
PUBLISHED_MFU = {
    "32b-1x-v5p-128": 71.47, "32b-2x-v5p-128": 69.43,
    "64b-1x-v5p-128": 70.31, "64b-2x-v5p-128": 67.26,
    "128b-1x-v5p-256": 68.68, "128b-2x-v5p-256": 66.34,
    "128b-1x-v5p-512": 68.83, "128b-2x-v5p-512": 59.66,
    "256b-1x-v5p-1024": 67.09, "256b-2x-v5p-1024": 62.99,
    "512b-1x-v5p-1024": 63.99, "512b-2x-v5p-1024": 61.45,
    "1024b-1x-v5p-2048": 55.35, "1024b-2x-v5p-2048": 51.55,
}
# The XLA flags every one of those runs set (LIBTPU_INIT_ARGS in MaxText/configs/v5p/{32b,64b,128b,256b,512b,1024b}.sh,
# the same line in each): the step model reads them as the runs' compiler did (docs/step.md, "The user's XLA flags").
MAXTEXT_V5P_XLA_FLAGS = (
    "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true --xla_tpu_megacore_fusion_allow_ags=false "
    "--xla_enable_async_collective_permute=true --xla_tpu_enable_ag_backward_pipelining=true "
    "--xla_tpu_enable_data_parallel_all_reduce_opt=true --xla_tpu_data_parallel_opt_different_sized_ops=true "
    "--xla_tpu_enable_async_collective_fusion=true --xla_tpu_enable_async_collective_fusion_multiple_steps=true "
    "--xla_tpu_overlap_compute_collective_tc=true --xla_enable_async_all_gather=true")
_flags: str | None = MAXTEXT_V5P_XLA_FLAGS  # what the rows are analysed with (the script's --xla-flags= replaces it)
TOLERANCE_POINTS = 10.0  # issue 10: within 10 MFU points on every row up to v5p-2048 (1,024 chips)
ISSUE10_CHIPS = 1024  # issue 10's rows; the 2,048-chip row (issue 25 item 7) is in the table, the mean and the max
# Rows analysed in the fast loop (one per slice kind); the others are slow-marked (a few seconds each).
FAST = ("32b-1x-v5p-128", "128b-2x-v5p-256")


def _rows():
    from examples.maxtext_v5p import ROWS

    return list(ROWS)


def _param(row):
    marks = () if row.name in FAST else (pytest.mark.slow,)
    return pytest.param(row, id=row.name, marks=marks)


ROWS = _rows()
_reports: dict[str, object] = {}


def _fixture(row) -> str:
    return gzip.decompress((MAXTEXT / f"{row.name}.spmd.hlo.gz").read_bytes()).decode()


def _report(row):
    if row.name not in _reports:
        _reports[row.name] = analyzer.analyze_hlo(_fixture(row), mesh=row.mesh, hardware="tpu-v5p",
                                                  topology=row.topology, xla_flags=_flags)
    return _reports[row.name]


def maxtext_model_flops(row) -> float:
    """Model FLOPs of one step as MaxText counts them (`calculate_tflops_training_per_device`, times chips):
    3 x (forward matmuls with weights + the logits), plus 3 x attention's two S x S matmuls (not halved for the
    causal mask), for the global batch."""
    c = row.config
    tokens = c.batch * c.seq
    d, f, h, kv, k = c.d_model, c.d_ff, c.heads, c.kv_heads, c.k
    per_layer = 2 * tokens * (3 * d * f + d * (h + 2 * kv) * k + h * k * d)  # gated MLP, q/k/v, output projection
    attention = 4 * c.batch * c.seq**2 * h * k
    return 3 * (c.layers * (per_layer + attention) + 2 * tokens * d * c.vocab)


def test_every_row_has_a_fixture_made_from_its_config():
    assert len(ROWS) == 14 and set(PUBLISHED_MFU) == {r.name for r in ROWS}
    for row in ROWS:
        text = _fixture(row)
        config = next(line for line in text.splitlines() if line.startswith("// config: "))
        # not stale (a template field added since the fixture was made takes its default, which gives the program
        # the template gave before the field existed)
        assert type(row.config)(**json.loads(config[len("// config: "):])) == row.config, row.name


@pytest.mark.parametrize("row", [_param(r) for r in ROWS])
def test_model_flops_are_maxtexts(row):
    # The template counts what MaxText counts: its model FLOPs (dots of one forward + backward, remat excluded)
    # equal MaxText's formula (exactly today; 1e-6 allows for float rounding).
    assert _report(row).totals.model_flops == pytest.approx(maxtext_model_flops(row), rel=1e-6)


def _within_10(row):
    if row.chips <= ISSUE10_CHIPS:
        return _param(row)
    # the 2,048-chip row, predicted since the cpu target goes past 1,024 devices (issue 25 item 7)
    return pytest.param(row, id=row.name, marks=(pytest.mark.slow, pytest.mark.xfail(strict=True, reason=(
        "1024B on 2x v5p-2048: predicted 62.93% against 51.55% (+11.38 points; the one-slice row +7.55). The "
        "missing terms, docs/measurements.md: the run's parallelism is not known (the script's does not parse; "
        "TP 16 x FSDP 64 is a reconstruction) and the second slice's cost beyond DCN bandwidth (the other "
        "two-slice rows: 0.2-1.9 ms per DCN collective, unsourced)"))))


@pytest.mark.parametrize("row", [_within_10(r) for r in ROWS])
def test_predicted_mfu_within_10_points_of_published(row):
    t = _report(row).totals
    predicted = 100 * t.mfu
    published = PUBLISHED_MFU[row.name]
    assert abs(predicted - published) <= TOLERANCE_POINTS, (
        f"{row.name}: predicted MFU {predicted:.1f}% vs published {published:.2f}%: step {t.step_seconds:.3f} s = "
        f"compute {t.compute_seconds:.3f} s (matmul {t.matmul_seconds:.3f} s, HBM-bound {t.memory_bound_seconds:.3f}"
        f" s) + exposed communication {t.exposed_comm_seconds:.3f} s")


@pytest.mark.parametrize("row", [_param(r) for r in ROWS])
def test_a_published_run_gets_no_memory_finding(row):
    """HA401 is silent on every published run (issue 25 item 4): the runs fit. The rows ran flash attention (the
    table's header), which the fixtures (the template, lowered on the cpu target) wrote as dot-product: the TPU
    estimate of each fixture with its scores held by the kernel (`tpumemory`, `flash_held`) is checked by HA401
    itself. The template donates nothing (MaxText donates its state), so the outputs count in full."""
    import dataclasses

    from analyzer.analysis.costs import flash_scores
    from analyzer.analysis.tpumemory import estimate_tpu_memory, vmem_budget
    from analyzer.rules.config import Config
    from analyzer.rules.runner import check_rules

    r = _report(row)
    hw = r.analysis.hardware
    flash = flash_scores(r.analysis.dots)
    assert flash is not None and flash.lengths == {2048}  # the rows' sequence length
    memory = estimate_tpu_memory(r.analysis.module, flash).in_vmem(vmem_budget(hw)).as_memory()
    found = check_rules(dataclasses.replace(r, memory=memory), Config(select=("HA401",))).diagnostics
    assert not found, [d.message for d in found]
    # and without the kernel (the scores of dot-product attention in HBM) the 32B row would not fit: the check can fail
    if row.name == "32b-1x-v5p-128":
        plain = estimate_tpu_memory(r.analysis.module).in_vmem(vmem_budget(hw)).as_memory()
        assert check_rules(dataclasses.replace(r, memory=plain), Config(select=("HA401",))).diagnostics


def table() -> str:
    """The comparison, one line per run, and the mean and largest |error| (`python tests/analysis/test_measured.py`
    prints it)."""
    lines = ["| run | chips | mesh | published MFU | predicted MFU | error (points) | step s | exposed comm s |",
             "|---|---:|---|---:|---:|---:|---:|---:|"]
    for row in ROWS:
        t = _report(row).totals
        predicted, published = 100 * t.mfu, PUBLISHED_MFU[row.name]
        mesh = ",".join(f"{k}={v}" for k, v in row.mesh.items())
        lines.append(f"| {row.name} | {row.chips} | {mesh} | {published:.2f}% | {predicted:.2f}% | "
                     f"{predicted - published:+.2f} | {t.step_seconds:.2f} | {t.exposed_comm_seconds:.2f} |")
    errors = {row.name: abs(100 * _report(row).totals.mfu - PUBLISHED_MFU[row.name]) for row in ROWS}
    worst = max(errors, key=errors.get)
    lines.append(f"\nmean |error| {sum(errors.values()) / len(errors):.2f} points, max {errors[worst]:.2f} ({worst})")
    return "\n".join(lines)


def _dcn(report) -> tuple[float, float, float, float]:
    """(executions, bytes per chip, busy seconds, exposed seconds) of a report's collectives over the DCN `slice` axis
    per step."""
    df = report.collectives
    over = df[df["axes"].apply(lambda axes: "slice" in axes)]
    step = report.analysis.step
    busy = sum(v for k, v in step.busy.items() if k.startswith("DCN"))
    exposed = sum(v for k, v in step.exposed_by_axis.items() if "slice" in k.split(","))
    return float(over["count"].sum()), float((over["per_device_bytes"] * over["count"]).sum()), busy, exposed


def dcn_table() -> str:
    """What a second slice costs, per pair of runs (`python tests/analysis/test_measured.py --dcn`): the step each
    published MFU implies (the predicted step x predicted MFU / published MFU; the same chips' work on one slice
    and two) on one slice and two, the difference against the model's, and the model's DCN collectives: executions
    and bytes per chip per step, their time on the DCN track and the part exposed; the last column is the measured
    loss the model lacks per DCN collective, and beside it the error with the DCN's bytes doubled (MaxText's f32
    gradients: the bandwidth halved)."""
    import dataclasses

    from analyzer.theory.hardware import load_hardware

    hw = load_hardware("tpu-v5p")
    half = dataclasses.replace(hw, dcn_bandwidth_per_chip=hw.dcn_bandwidth_per_chip / 2)
    lines = [("| two slices | implied step 1 -> 2 slices (s) | published loss (s) | predicted loss (s) | DCN collectives "
              "per step | DCN bytes per chip (GB) | DCN busy (s) | DCN exposed (s) | loss not predicted per DCN "
              "collective (ms) | error now -> with f32 gradients over DCN (points) |"),
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    by_name = {r.name: r for r in ROWS}
    for row in ROWS:
        if "-2x-" not in row.name or row.name.replace("-2x-", "-1x-") not in by_name:
            continue
        one = by_name[row.name.replace("-2x-", "-1x-")]
        implied = {}
        for r in (one, row):
            t = _report(r).totals
            implied[r.name] = (t.step_seconds * 100 * t.mfu / PUBLISHED_MFU[r.name], t.step_seconds)
        (m1, p1), (m2, p2) = implied[one.name], implied[row.name]
        count, nbytes, busy, exposed = _dcn(_report(row))
        slow = analyzer.analyze_hlo(_fixture(row), mesh=row.mesh, hardware=half, topology=row.topology,
                                    xla_flags=_flags)
        now = 100 * _report(row).totals.mfu - PUBLISHED_MFU[row.name]
        f32 = 100 * slow.totals.mfu - PUBLISHED_MFU[row.name]
        lines.append(f"| {row.name} | {m1:.2f} -> {m2:.2f} | {m2 - m1:.2f} | {p2 - p1:.2f} | {count:.0f} | "
                     f"{nbytes / 1e9:.2f} | {busy:.3f} | {exposed:.3f} | {1e3 * ((m2 - m1) - (p2 - p1)) / count:.2f} | "
                     f"{now:+.2f} -> {f32:+.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    # --xla-flags=FLAGS: the table under other flags than the runs' (--xla-flags= for none), e.g. to see one
    # flag's effect
    given = [a.partition("=")[2] for a in sys.argv[1:] if a.startswith("--xla-flags=")]
    if given:
        _flags = given[-1] or None
    print(table())
    if "--dcn" in sys.argv[1:]:  # what a second slice costs, measured against modelled (docs/measurements.md)
        print(dcn_table())
