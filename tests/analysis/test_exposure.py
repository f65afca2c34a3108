"""Overlap rules of the step model (issue 25 item 3): a collective's exposed time is the part of the compute
stream's waits when it was itself running, never more than its own time; a collective consumed only by
another collective makes no compute wait of its own."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

import analyzer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def two_slices():
    from examples.maxtext_v5p import ROWS

    row = next(r for r in ROWS if r.name == "128b-2x-v5p-256")
    text = gzip.decompress((ROOT / "fixtures" / "maxtext" / f"{row.name}.spmd.hlo.gz").read_bytes()).decode()
    return analyzer.analyze_hlo(text, mesh=row.mesh, hardware="tpu-v5p", topology=row.topology)


def test_no_collective_is_exposed_longer_than_it_runs(two_slices):
    step = two_slices.analysis.step
    rows = two_slices.analysis.collectives
    for r, c in enumerate(rows):
        own = c.cost.seconds * c.count
        assert step.exposed_rows[r] <= own * (1 + 1e-9) + 1e-12, (r, c.kind, step.exposed_rows[r], own)
    # and the exposure is all charged: per-row exposure adds up to the step's exposed communication
    assert sum(step.exposed_rows) == pytest.approx(step.exposed_comm_seconds, rel=1e-6)


def test_every_sub_axis_label_shown_is_explained(two_slices):
    # (issue 25 item 3) labels such as `fsdp:(8)4` in the rows and `ICI fsdp:(8)4` on the trace's tracks: the
    # report's notes say what each one is, with its factors of the mesh axis
    shown = {a for c in two_slices.analysis.collectives for a in c.axes if ":(" in a}
    assert shown, "the fixture has collectives over part of an axis"
    note = next(n for n in two_slices.notes if n.startswith("Sub-axes:"))
    for label in shown:
        assert f"{label} is " in note, label
    assert any(":(" in track for track in two_slices.analysis.step.track_axes)


def test_the_data_parallel_flag_lets_a_loop_bodys_dcn_collectives_finish_in_the_next_iteration(two_slices):
    # (issue 25 item 2; docs/step.md, "The user's XLA flags") xla_tpu_enable_data_parallel_all_reduce_opt: the
    # backward loop's gradient all-reduces over `slice` (DCN) drain under the next iteration; without it they
    # finish in their own. (On this run they end inside their iteration either way, so the step is the same.)
    from analyzer.analysis.step import _Walker
    from analyzer.compile.xlaflags import overlap_flags

    a = two_slices.analysis
    bodies = {inst.attr("body").lstrip("%") for comp in a.module.computations for inst in comp.instructions
              if inst.opcode == "while"}

    def dcn_trailing(flags):
        w = _Walker(a.module, a.graph, a.collectives, a.dots, a.hardware, a.topology, 0, a.costs, overlap_flags(flags))
        rows = set()
        for body in bodies:
            rows |= w._plan(a.module.by_name[body], True, None)[2]
        return {r for r in rows if w.row_track[r].startswith("DCN")}

    assert dcn_trailing(None) == set()
    pipelined = dcn_trailing({"xla_tpu_enable_data_parallel_all_reduce_opt": True})
    assert pipelined and all(a.collectives[r].kind == "all-reduce" and a.collectives[r].axes == ("slice",)
                             for r in pipelined)
