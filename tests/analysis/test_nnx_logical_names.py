"""Logical axis names of Flax NNX variables (analyzer.analysis.mapping.logical_names): NNX keeps them in a
variable's metadata (`sharding`/`out_sharding`/`sharding_names`), not in a `LogicallyPartitioned` box, and
`nnx.scan`-stacked parameters (MaxText's scanned layers) add their stacking axis at `param_scan_axis`. They name
the notation's dimensions as Linen boxes do (MaxText's `embed`, `mlp`, `layers`...)."""

from __future__ import annotations

import pytest

from analyzer.analysis.mapping import logical_names, names_of_array

nnx = pytest.importorskip("flax.nnx", reason="needs flax (NNX)")


def _param(shape, **metadata):
    import jax
    import jax.numpy as jnp

    return nnx.Param(jax.ShapeDtypeStruct(shape, jnp.float32), eager_sharding=False, **metadata)  # no mesh here


def test_an_nnx_params_sharding_metadata_names_its_dimensions():
    state = {"mlp": {"wi": {"kernel": _param((16, 64), out_sharding=("embed", "mlp"))}}}
    names = logical_names((state,))
    assert names == {"['mlp']['wi']['kernel'].value": ("embed", "mlp")}
    assert names_of_array("state['mlp']['wi']['kernel'].value", names) == ("embed", "mlp")


def test_a_scanned_params_stacking_axis_is_inserted_and_short_names_padded():
    stacked = _param((16, 4, 64), out_sharding=("embed", "mlp"), partition_name="layers", param_scan_axis=1)
    short = _param((8, 3), out_sharding=("norm",))
    names = logical_names(({"w": stacked, "scale": short},))
    assert names["['w'].value"] == ("embed", "layers", "mlp")
    assert names["['scale'].value"] == ("norm", "J")  # an unnamed dimension is named by position


def test_mesh_shardings_and_unannotated_params_give_no_names():
    from jax.sharding import PartitionSpec as P

    names = logical_names(({"a": _param((4, 4)), "b": _param((4, 4), out_sharding=P("data", None)),
                            "c": _param((4,), out_sharding=("x", "y"))},))
    assert names == {}  # no metadata; a PartitionSpec names mesh axes; more names than dimensions
