"""Real jax 0.10 output (tests/hlo/samples/, made by tests/hlo/make_samples.py) parses, typed, like XLA sees it."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from analyzer.hlo.parser import parse_hlo

SAMPLES = sorted((Path(__file__).parent / "samples").glob("*.hlo"))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_sample_matches_xla(path):
    from jax._src.lib import xla_client as xc

    text = path.read_text()
    m = parse_hlo(text, path=str(path))
    x = xc.hlo.hlo_module_from_text(text)
    ours = collections.Counter(i.opcode for _, i in m.instructions())
    theirs = collections.Counter(i.opcode.name for c in x.computations() for i in c.instructions())
    assert sum(ours.values()) == sum(theirs.values())
    assert len(m.computations) == len(list(x.computations()))
    assert m.path == str(path)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_lazy_equals_full(path):
    text = path.read_text()
    full = parse_hlo(text)
    lazy = parse_hlo(text, lazy=True)
    assert [c.name for c in lazy.computations] == [c.name for c in full.computations]
    assert not any(c.is_parsed for c in lazy.computations)
    for lc, fc in zip(lazy.computations, full.computations):
        assert lc.position == fc.position
        assert lc.instructions == fc.instructions
        assert lc.result_shape == fc.result_shape
    assert lazy.frames == full.frames and lazy.attributes == full.attributes


def test_collectives_typed():
    m = parse_hlo((Path(__file__).parent / "samples" / "shard_map_collectives.cpu.final.hlo").read_text())
    by_op = {i.opcode: i for _, i in m.instructions()}
    assert by_op["all-gather"].replica_groups == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert by_op["all-to-all"].replica_groups == ((0, 2, 4, 6), (1, 3, 5, 7))
    pairs = by_op["collective-permute"].source_target_pairs
    assert (0, 2) in pairs and (6, 0) in pairs and len(pairs) == 8
    md = by_op["all-gather"].metadata
    assert md.op_name == "jit(collectives)/shard_map/all_gather"
    chain = m.frame_chain(md.stack_frame_id)
    assert chain and chain[0].file.endswith("make_samples.py") and chain[0].function.endswith("collectives")
