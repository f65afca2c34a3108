"""The MXU's terms of one matmul (analyzer.theory.matmul; issue 25 item 1): padding to the tile, the tile
passes' HBM traffic and the pipeline's fill, from the `[mxu]` table of each TPU spec."""

from __future__ import annotations

import pytest

from analyzer.errors import HardwareError
from analyzer.theory.hardware import load_hardware, spec_from_dict
from analyzer.theory.matmul import matmul_time, padded_dims


@pytest.mark.parametrize("name, tile", [("tpu-v4p", 128), ("tpu-v5e", 128), ("tpu-v5p", 128),
                                        ("tpu-v6e", 256), ("tpu-7x", 256)])
def test_every_tpu_spec_states_its_tile(name, tile):
    assert load_hardware(name).mxu.tile == (tile, tile)


def test_gpus_have_no_mxu_and_price_at_the_roofline():
    h100 = load_hardware("h100")
    assert h100.mxu is None
    t = matmul_time(h100, b=1, m=4096, k=4096, n=4096)
    assert t.padded_flops == t.useful_flops and t.fill_seconds == 0.0


def test_padding_wastes_what_the_tile_does_not_fill():
    # K = 64 on a 128-wide array: half of every pass is padding; on v6e's 256-wide array, three quarters
    assert padded_dims(8192, 64, 8192, 128, 8)[1] == 128
    v5e, v6e = load_hardware("tpu-v5e"), load_hardware("tpu-v6e")
    assert matmul_time(v5e, b=1, m=8192, k=64, n=8192).padded_flops == pytest.approx(2 * 2 * 8192 * 64 * 8192)
    assert matmul_time(v6e, b=1, m=8192, k=64, n=8192).padded_flops == pytest.approx(4 * 2 * 8192 * 64 * 8192)


def test_large_square_matmul_is_near_peak_and_small_one_is_not():
    v5e = load_hardware("tpu-v5e")
    big, small = (matmul_time(v5e, b=1, m=s, k=s, n=s) for s in (8192, 512))
    assert big.efficiency > 0.99 and big.bound == "flops"
    assert small.efficiency < 0.7  # the fill (first blocks in, last block out) is a fixed cost per op


def test_mxu_table_is_checked():
    base = {"name": "x", "kind": "tpu", "topology_prefix": "x", "flops": {"bf16": 1e14},
            "hbm": {"bytes": 1e9, "bandwidth": 1e12},
            "ici": {"link_bandwidth_one_way": 1e10, "link_bandwidth_bidi": 2e10, "links_per_axis": 2,
                    "hop_latency": 1e-6, "max_topology": [4, 4], "wraparound": {"rule": "full-axis", "size": 4}}}
    with pytest.raises(HardwareError, match=r"\[mxu\] tile"):
        spec_from_dict({**base, "mxu": {"tile": [128], "sublanes": 8, "vmem_bytes": 1e6}})
    with pytest.raises(HardwareError, match="missing key 'vmem_bytes'"):
        spec_from_dict({**base, "mxu": {"tile": [128, 128], "sublanes": 8}})
