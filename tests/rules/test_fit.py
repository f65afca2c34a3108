"""Fixes ranked by fit in HBM (analyzer.rules.fit): the per-device bytes of the plan a fix leads to, worked
by hand, and a fix that does not fit is no saving and never the one the report opens with (issue 11 item 3).

The plan: mesh {data: 4, model: 2}; W[D_data, F] bf16 (4096 x 8192, 64 MiB whole: 16 MiB per device);
tokens int32[B_data, S] (64 x 2048, 512 KiB whole: 128 KiB per device); XLA reported the arguments, no
outputs and 4 GiB of temporaries; a 16 GiB chip. No compile: the report is the few fields the estimate reads.
"""

from __future__ import annotations

from types import SimpleNamespace

import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

from analyzer.diagnostics import Diagnostic, Location
from analyzer.rules.arguments import ArgumentArray, argument_arrays
from analyzer.rules.fit import estimate_memory, judge_fit
from analyzer.rules.rootcause import split_negligible_groups, top_cause

MiB, GiB = 2**20, 2**30
W_NOW = 4096 * 8192 * 2 // 4          # 16 MiB
TOK_NOW = 64 * 2048 * 4 // 4          # 128 KiB
TEMP = 4 * GiB
HBM = 16 * GiB


def _arg(shape, dtype, spec):
    """An abstract argument as the estimate reads it (shape, dtype, sharding.spec), without a device mesh."""
    return SimpleNamespace(shape=shape, dtype=jnp.dtype(dtype), sharding=SimpleNamespace(spec=spec))


def _report():
    args = ({"w": _arg((4096, 8192), jnp.bfloat16, P("data", None))}, _arg((64, 2048), jnp.int32, P("data")))
    return SimpleNamespace(mesh=SimpleNamespace(axis_names=("data", "model"), axis_sizes=(4, 2)),
                           memory={"argument_bytes": W_NOW + TOK_NOW, "output_bytes": 0, "temp_bytes": TEMP,
                                   "alias_bytes": 0},
                           analysis=SimpleNamespace(args=args))


def _finding(code, line, saving, **details):
    return Diagnostic(code, "n", f"finding at {line}.", location=Location("train.py", line, instruction=f"op.{line}"),
                      seconds=2 * saving, alternative_seconds=saving, saving_seconds=saving,
                      notation=f"AllGather_data: [I_data] -> [I] {line}", details=details)


def test_arguments_and_batch_axes_come_from_the_abstract_arguments():
    arrays = argument_arrays(_report())
    assert [(a.name, a.shape, a.itemsize, a.axes, a.integer) for a in arrays] == [
        ("[0]['w']", (4096, 8192), 2, (("data",), ()), False),
        ("[1]", (64, 2048), 4, (("data",),), True)]
    assert [a.bytes_on({"data": 4, "model": 2}) for a in arrays] == [W_NOW, TOK_NOW]


def test_folding_data_into_model_multiplies_what_data_sharded_by_four():
    arrays = argument_arrays(_report())
    e = estimate_memory(_report().memory, arrays, {"data": 4, "model": 2}, {"data": 1, "model": 8}, 1.0, HBM)
    # W and the tokens are whole on every chip: 64 MiB + 512 KiB; the tokens per chip x4, so the temporaries too
    assert e.arguments == 64 * MiB + 512 * 1024
    assert e.temporaries == 16 * GiB
    assert e.after_bytes == pytest.approx(16 * GiB + 64.5 * MiB, rel=1e-12) and not e.fits
    assert e.batch_axes == ("data",)
    # data 4 -> 8 (a batch axis: half the tokens per chip), model 2 -> 1 (taken to shard the activations: x2)
    e3 = estimate_memory(_report().memory, arrays, {"data": 4, "model": 2}, {"data": 8, "model": 1}, 1.0, HBM)
    assert e3.temporaries == TEMP and e3.arguments == W_NOW / 2 + TOK_NOW / 2
    # without integer arguments the batch axes are unknown: data 4 -> 8 is not credited, model 2 -> 1 still grows
    floats = [a for a in arrays if not a.integer]
    e4 = estimate_memory(_report().memory, floats, {"data": 4, "model": 2}, {"data": 8, "model": 1}, 1.0, HBM)
    assert e4.temporaries == 2 * TEMP and e4.batch_axes == ()
    # a larger global batch (HA101's "raise the batch per chip") multiplies the temporaries only
    e2 = estimate_memory(_report().memory, arrays, {"data": 4, "model": 2}, {}, 2.5, HBM)
    assert (e2.arguments, e2.temporaries) == (W_NOW + TOK_NOW, 10 * GiB)
    # ceil(dim / shards): 4096 rows on 3 ways hold 1366 rows per chip
    assert ArgumentArray("w", (4096,), 2, (("data",),)).bytes_on({"data": 3}) == 1366 * 2


def test_a_fix_that_does_not_fit_is_no_saving_and_the_fitting_one_leads():
    unfit = _finding("HA101", 10, 10e-3, fix_mesh={"data": 1, "model": 8}, fix_batch_factor=1.0)
    fits = _finding("HA101", 20, 5e-3, fix_mesh={"data": 2, "model": 4}, fix_batch_factor=1.0)
    layout = _finding("HA302", 30, 2e-3)
    hw = SimpleNamespace(hbm_bytes=HBM, name="tpu-v5e")
    judged = {d.location.line: d for d in judge_fit([unfit, fits, layout], _report(), hw)}

    # 16 GiB + 64.5 MiB > 16 GiB: no saving, its time kept in details, and the message says why
    d = judged[10]
    assert d.saving_seconds is None and d.alternative_seconds is None
    assert d.details["unfit_saving_seconds"] == 10e-3 and d.details["fix_fits"] is False
    assert d.details["fix_memory_bytes"] == pytest.approx(16 * GiB + 64.5 * MiB, rel=1e-12)
    assert "Not counted as a saving (10.0 ms per step)" in d.message and "16.1 GiB per device" in d.message
    assert "more than the 16.0 GiB of HBM on tpu-v5e" in d.message
    # data 4 -> 2: arguments x2 (32.25 MiB), temporaries x2 (8 GiB): fits, saving kept
    d = judged[20]
    assert d.saving_seconds == 5e-3 and d.details["fix_fits"] is True
    assert d.details["fix_memory_bytes"] == pytest.approx(8 * GiB + 32.25 * MiB, rel=1e-12)
    # a fix that reshapes nothing is not judged by fit
    assert judged[30] == layout

    top = top_cause(list(judged.values()))
    assert top is not None and top.findings[0].location.line == 20 and top.saving_seconds == 5e-3

    # HA401's fraction lowers the limit: at 40% of 16 GiB, data 4 -> 2 (8.03 GiB) does not fit either
    half = judge_fit([fits], _report(), hw, fraction=0.4)[0]
    assert half.saving_seconds is None and half.details["fix_fits"] is False


def test_an_unfit_fix_is_weighed_by_what_it_would_save_for_the_negligible_filter():
    hw = SimpleNamespace(hbm_bytes=HBM, name="tpu-v5e")
    small = judge_fit([_finding("HA101", 10, 5e-6, fix_mesh={"data": 1, "model": 8})], _report(), hw)
    large = judge_fit([_finding("HA101", 10, 5e-3, fix_mesh={"data": 1, "model": 8})], _report(), hw)
    assert small[0].saving_seconds is None and large[0].saving_seconds is None
    kept, dropped = split_negligible_groups(small + [_finding("HA302", 30, 2e-3)], None, lambda code: 1e-4)
    assert [d.location.line for d in dropped] == [10] and [d.location.line for d in kept] == [30]
    kept, dropped = split_negligible_groups(large, None, lambda code: 1e-4)
    assert [d.location.line for d in kept] == [10] and not dropped


def test_without_memory_figures_a_mesh_or_the_arguments_nothing_is_judged():
    d = _finding("HA101", 10, 10e-3, fix_mesh={"data": 1, "model": 8})
    hw = SimpleNamespace(hbm_bytes=HBM, name="tpu-v5e")
    r = _report()
    r.memory = None
    assert judge_fit([d], r, hw) == [d]
    r = _report()
    r.mesh = None
    assert judge_fit([d], r, hw) == [d]
    r = _report()
    r.analysis.args = None  # an HLO dump: how its arguments are sharded is unknown
    assert judge_fit([d], r, hw) == [d]
