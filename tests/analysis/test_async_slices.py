"""What an asynchronous dynamic slice or update costs (analyzer.analysis.costs): the TPU compiler's form of a remat
policy's host offload. In libtpu's final HLO of MaxText's Llama 3.1 8B step (v6e-256, `--target tpu`) each layer's
offloaded activation is written into a stacked buffer in host memory (`S(5)`) by a `dynamic-update-slice-start` /
`-done` pair and read back by a `dynamic-slice-start` / `-done` pair; they used to be charged the whole stacked
buffer, on both the start and the done: 5.5 s of that step's 7.7 s of HBM-bound time."""

from __future__ import annotations

from analyzer.analysis.costs import HOST_MEMORY_SPACE, instruction_hbm_bytes
from analyzer.hlo.parser import parse_hlo

_MODULE = """HloModule m, is_scheduled=true

ENTRY e {{
  stack = bf16[32,4,1024]{{2,1,0{space}}} parameter(0)
  update = bf16[1,4,1024]{{2,1,0}} parameter(1)
  i = s32[] parameter(2)
  z = s32[] constant(0)
  s = ((bf16[32,4,1024]{{2,1,0{space}}}, bf16[1,4,1024]{{2,1,0}}, s32[], s32[], s32[]), bf16[32,4,1024]{{2,1,0{space}}}, u32[]) dynamic-update-slice-start(stack, update, i, z, z)
  d = bf16[32,4,1024]{{2,1,0{space}}} dynamic-update-slice-done(s)
  r = ((bf16[32,4,1024]{{2,1,0{space}}}, s32[], s32[], s32[]), bf16[1,4,1024]{{2,1,0}}, u32[]) dynamic-slice-start(d, i, z, z), dynamic_slice_sizes={{1,4,1024}}
  ROOT back = bf16[1,4,1024]{{2,1,0}} dynamic-slice-done(r)
}}
"""
_SLICE = 1 * 4 * 1024 * 2  # bytes of one layer's slice of the stack


def _bytes(space: str) -> dict[str, int]:
    module = parse_hlo(_MODULE.format(space=space))
    return {i.name: instruction_hbm_bytes(i, module) for i in module.entry.instructions}


def test_an_async_slice_pair_moves_its_slice_once():
    # in HBM: the slice (update) read and written once by the start, nothing more by the done
    got = _bytes("")
    assert (got["s"], got["d"], got["r"], got["back"]) == (2 * _SLICE, 0, 2 * _SLICE, 0)


def test_a_host_memory_stack_costs_hbm_only_its_side():
    # the stack in host memory (XLA's S(5)): the update is read from HBM, the slice written to HBM; the other side is
    # the host link's
    assert HOST_MEMORY_SPACE == 5
    got = _bytes(":S(5)")
    assert (got["s"], got["d"], got["r"], got["back"]) == (_SLICE, 0, _SLICE, 0)
