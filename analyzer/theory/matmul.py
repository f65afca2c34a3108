"""One matmul on a TPU's matrix unit, from the hardware spec's `[mxu]` table (docs/step.md, "Matmul efficiency").

    t = matmul_time(load_hardware("tpu-v5p"), b=1, m=4096, k=8192, n=28672, in_bytes=2, out_bytes=2)
    t.seconds, t.efficiency

No constant is fitted to a run. Three terms, each from the chip's spec:

1. **Padding.** The MXU is a `tile x tile` systolic array (128x128 on v2-v5p, 256x256 on v6e/7x) that holds one
   operand stationary and streams the other through it 8 rows (sublanes) at a time. A dot `[B, M, K] x [B, K, N]`
   runs as `B x ceil(M / 8) x ceil(K / tile) x ceil(N / tile)` tile passes (or with M and N swapped: the compiler
   keeps the cheaper orientation), so the MXU does `2 B M' K' N'` FLOPs of work for `2 B M K N` useful ones.
2. **HBM traffic of the tile passes.** The output is computed block by block (`bm x bn`, the contracting dim in
   `bk` steps); each block re-reads its rows of the left operand and its columns of the right one, so the left
   operand is read `ceil(N / bn)` times and the right one `ceil(M / bm)` times, and the output written once. The
   blocks are the smallest square multiple of the tile that keeps a block step compute-bound (its FLOPs per byte
   moved at least the chip's peak / HBM bandwidth; the Pallas TPU matmul guide's reasoning), capped by the
   padded dims and by what fits in VMEM double-buffered with an f32 accumulator.
3. **A fixed cost per op: the pipeline's fill and drain.** The first block's operands are loaded before the MXU
   can start and the last output block is stored after it stops; neither overlaps compute:
   `(bm bk + bk bn) in_bytes + bm bn out_bytes` bytes at HBM bandwidth, once per dot.

The dot takes `max(padded FLOPs / peak, traffic / HBM bandwidth) + fill and drain`.

Compared (not fitted) with jax's Pallas TPU matmul guide (docs/pallas/tpu/matmul.ipynb, "XLA matmul" cell, TPU
v5e, bf16, timed with `timeit` around `block_until_ready`, so each time includes the host's dispatch): measured
84.3% of peak for 4096^3 and 92.3% for 8192^3; this model gives 99.7% and 99.97% for the kernel alone. The
guide's 1024^3 row (119.4 us measured, 14.7 us modelled) is dispatch-bound: take its 104.7 us surplus as the
host's dispatch and the model's 4096^3 / 8192^3 become 86.7% / 98.1% against the measured 84.3% / 92.3%. The
remaining 2-6% is what this model leaves out (loading weights into the array, the vector unit's epilogue, the
megacore split), and it is not added as a constant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from analyzer.theory.hardware import HardwareSpec

__all__ = ["MatmulTime", "matmul_time", "padded_dims", "block_size"]


@dataclass(frozen=True)
class MatmulTime:
    """Seconds of one dot on the chip and what made them.

    Attributes:
      seconds: max(flops_seconds, memory_seconds) + fill_seconds.
      flops_seconds: padded FLOPs / peak.
      memory_seconds: HBM bytes of the tile passes / HBM bandwidth.
      fill_seconds: the pipeline's fill and drain (first block in, last block out).
      useful_flops, padded_flops: 2BMKN, and what the MXU runs with the dims padded to its tile.
      hbm_bytes: bytes the tile passes move (operands re-read once per block row / column, output once).
      block: (bm, bk, bn).
      efficiency: useful FLOPs at peak / seconds (1.0 = the roofline's peak).
      bound: "flops" or "memory".
    """

    seconds: float
    flops_seconds: float
    memory_seconds: float
    fill_seconds: float
    useful_flops: float
    padded_flops: float
    hbm_bytes: float
    block: tuple[int, int, int]
    efficiency: float
    bound: str


def _up(x: int, q: int) -> int:
    return -(-max(1, x) // q) * q


def padded_dims(m: int, k: int, n: int, tile: int, sublanes: int) -> tuple[int, int, int]:
    """(M', K', N') the MXU runs: the contracting dim and the stationary operand's free dim padded to the tile,
    the streamed operand's free dim to the sublanes, in whichever orientation wastes less.

    Example:
      >>> padded_dims(100, 200, 300, 128, 8)   # the left operand held (128 x 256), the right streamed
      (128, 256, 304)
      >>> padded_dims(4096, 128, 8, 128, 8)   # N=8 streams, M is held: 4096 x 128 x 8 wastes nothing
      (4096, 128, 8)
    """
    kp = _up(k, tile)
    a = (_up(m, sublanes), kp, _up(n, tile))  # right operand stationary, left streamed
    b = (_up(m, tile), kp, _up(n, sublanes))  # left operand stationary, right streamed
    return a if a[0] * a[2] <= b[0] * b[2] else b


def block_size(hw: HardwareSpec, in_bytes: float, out_bytes: float, dims: tuple[int, int, int]) -> tuple[int, int, int]:
    """(bm, bk, bn): the smallest square multiple of the tile whose block step is compute-bound (2 b^3 FLOPs per
    2 b^2 in_bytes read: b / in_bytes >= peak / HBM bandwidth), capped by the padded dims and by VMEM (two
    buffers of each input block, two of the output block, an f32 accumulator).

    Example:
      >>> from analyzer.theory.hardware import load_hardware
      >>> block_size(load_hardware("tpu-v5p"), 2, 2, (65536, 65536, 65536))   # 164 FLOPs/byte x 2 bytes
      (384, 384, 384)
    """
    mxu = hw.mxu
    tile = mxu.tile[0]
    need = hw.peak_flops / hw.hbm_rate * in_bytes
    b = _up(int(math.ceil(need)), tile)
    per = 4 * in_bytes + 2 * out_bytes + 4  # bytes per b^2 held in VMEM
    fit = int(math.sqrt(mxu.vmem_bytes / per)) // tile * tile
    b = max(tile, min(b, fit))
    m, k, n = dims
    return min(b, m), min(b, k), min(b, n)


def matmul_time(hw: HardwareSpec, *, b: int, m: int, k: int, n: int, in_bytes: float = 2, out_bytes: float = 2,
                peak: float | None = None) -> MatmulTime:
    """One `[b, m, k] x [b, k, n]` dot on `hw` (see the module doc). `peak`: FLOPs/s for the dot's dtype (default
    the bf16 peak). Without an `[mxu]` table (GPUs) the dot is the roofline: useful FLOPs / peak against its
    operands and result read and written once, no fill.

    Example:
      >>> from analyzer.theory.hardware import load_hardware
      >>> t = matmul_time(load_hardware("tpu-v5e"), b=1, m=8192, k=8192, n=8192)
      >>> round(t.efficiency, 4), t.bound
      (0.9997, 'flops')
      >>> round(matmul_time(load_hardware("tpu-v5e"), b=1, m=8192, k=64, n=8192).efficiency, 2)  # K padded to 128
      0.21
    """
    peak = float(peak if peak is not None else hw.peak_flops)
    bw = float(hw.hbm_rate)
    useful = 2.0 * b * m * k * n
    once = b * ((m * k + k * n) * in_bytes + m * n * out_bytes)
    if hw.mxu is None:
        fs, ms = useful / peak, once / bw
        s = max(fs, ms)
        return MatmulTime(s, fs, ms, 0.0, useful, useful, once, (m, k, n), useful / peak / s if s else 1.0,
                          "flops" if fs >= ms else "memory")
    mp, kp, np_ = padded_dims(m, k, n, hw.mxu.tile[0], hw.mxu.sublanes)
    padded = 2.0 * b * mp * kp * np_
    bm, bk, bn = block_size(hw, in_bytes, out_bytes, (mp, kp, np_))
    traffic = b * (in_bytes * (m * k * math.ceil(np_ / bn) + k * n * math.ceil(mp / bm)) + out_bytes * m * n)
    fill = ((bm * bk + bk * bn) * in_bytes + bm * bn * out_bytes) / bw
    fs, ms = padded / peak, traffic / bw
    s = max(fs, ms) + fill
    return MatmulTime(s, fs, ms, fill, useful, padded, traffic, (bm, bk, bn), useful / peak / s if s else 1.0,
                      "flops" if fs >= ms else "memory")
