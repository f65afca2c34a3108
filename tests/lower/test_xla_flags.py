"""The user's XLA flags (issue 25 item 2): parsed as data, passed to the target's compiler, named in the report."""

from __future__ import annotations

import pytest

from analyzer.compile.xlaflags import format_xla_flags, parse_xla_flags
from analyzer.errors import ConfigError

FUSION = "--xla_tpu_enable_async_collective_fusion=true"


def test_flags_are_read_as_typed_data_later_ones_winning():
    flags = parse_xla_flags(f"{FUSION} --xla_tpu_overlap_compute_collective_tc --xla_x=3 --xla_y=0.5 --xla_z=a "
                            "--xla_x=4")
    assert flags == {"xla_tpu_enable_async_collective_fusion": True, "xla_tpu_overlap_compute_collective_tc": True,
                     "xla_x": 4, "xla_y": 0.5, "xla_z": "a"}
    assert parse_xla_flags({"xla_a": False}) == {"xla_a": False} and parse_xla_flags(None) == {}
    assert parse_xla_flags(format_xla_flags(flags)) == flags


@pytest.mark.parametrize("text, column, what", [
    ("--xla_a=1 xla_b", 11, "not an XLA flag"),
    ("--xla_a=1 --Xla_B=2", 11, "not an XLA flag name"),
    ("--xla_dump_to=/tmp/x", 1, "set by hlo-analyzer"),
])
def test_a_bad_flag_is_named_with_its_column(text, column, what):
    with pytest.raises(ConfigError, match=what) as e:
        parse_xla_flags(text)
    assert e.value.column == column


def test_a_flag_value_that_is_not_a_scalar_is_refused():
    with pytest.raises(ConfigError, match="list value"):
        parse_xla_flags({"xla_a": [1]})


@pytest.mark.slow
def test_cpu_passes_the_flags_it_knows_and_keeps_the_others_as_data():
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    import analyzer
    from analyzer.compile.lower import make_mesh

    mesh = make_mesh({"X": 4})
    x = jax.ShapeDtypeStruct((64, 64), jnp.float32, sharding=NamedSharding(mesh, P("X")))
    report = analyzer.analyze(lambda x: x.sum(0), x, mesh=mesh, xla_flags=f"{FUSION} --xla_cpu_enable_fast_math=false")
    assert report.analysis.xla_flags == {"xla_tpu_enable_async_collective_fusion": True,
                                         "xla_cpu_enable_fast_math": False}
    assert report.analysis.lowered.xla_flags_passed == ("xla_cpu_enable_fast_math",)
    note = next(n for n in report.notes if n.startswith("XLA flags"))
    assert "--xla_cpu_enable_fast_math=false passed to the cpu compiler" in note and FUSION in note
    assert analyzer.reprice(report, hardware="tpu-v5p").analysis.xla_flags == report.analysis.xla_flags


@pytest.mark.slow
def test_a_tpu_target_passes_every_flag_and_refuses_an_unknown_one():
    pytest.importorskip("libtpu")
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    import analyzer
    from analyzer.compile.lower import make_mesh
    from analyzer.errors import LoweringError

    mesh = make_mesh({"X": 4})
    x = jax.ShapeDtypeStruct((64, 64), jnp.float32, sharding=NamedSharding(mesh, P("X")))
    report = analyzer.analyze(lambda x: x.sum(0), x, mesh=mesh, target="tpu:v5e:2x2", xla_flags=FUSION)
    assert report.analysis.lowered.xla_flags_passed == ("xla_tpu_enable_async_collective_fusion",)
    with pytest.raises(LoweringError, match="--xla_tpu_no_such_flag"):
        analyzer.analyze(lambda x: x.sum(0), x, mesh=mesh, target="tpu:v5e:2x2", xla_flags="--xla_tpu_no_such_flag")
