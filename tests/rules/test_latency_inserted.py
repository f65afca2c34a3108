"""HA301 for reductions XLA inserted (issue 26 item 8): information, with no advice to write `psum(tree)`;
the advice stays for collectives the user wrote."""

from __future__ import annotations

import pytest

from analyzer.diagnostics import Severity
from analyzer.rules.latency import user_collective


def test_user_collective_is_read_from_the_op_name():
    assert user_collective("jit(f)/shard_map/psum")
    assert user_collective("jit(f)/shard_map/psum_invariant")
    assert user_collective("jit(f)/shard_map/all_gather")
    assert not user_collective("jit(step)/transpose(jvp())/while/body/closed_call/dot_general")
    assert not user_collective("")


@pytest.mark.slow
def test_psums_the_user_wrote_keep_the_advice(analysed):
    (d,) = [d for d in analysed("many_small_psums(False)").diagnostics if d.code == "HA301"]
    assert d.severity == Severity.WARNING and "psum(tree" in d.fix
    assert d.details["inserted_by_xla"] is False


@pytest.fixture(scope="module")
def chapter_fsdp():
    """The chapter's FSDP step on X=8 (examples/chapter.py): autodiff's reduce-scatters of small weights."""
    import sys
    from pathlib import Path

    import analyzer
    from analyzer.compile.lower import make_mesh

    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:
        sys.path.insert(0, root)
    from examples import chapter

    mesh = make_mesh({"X": 8})
    fn, args = chapter.fsdp_step(mesh)
    return analyzer.analyze(fn, *args, mesh=mesh)


@pytest.mark.slow
def test_reductions_xla_inserted_are_information(chapter_fsdp):
    report = chapter_fsdp
    found = [d for d in report.diagnostics if d.code == "HA301" and d.details.get("members")]
    assert found
    for d in found:
        assert d.severity == Severity.INFO and "psum(tree" not in d.fix
        assert d.details["inserted_by_xla"] is True and "XLA inserted them" in d.message
