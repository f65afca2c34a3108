"""MaxText's published v5p training runs, as the built-in template configures them (docs/measurements.md).

Each `Row` is one line of MaxText's table "High Performance Model Configs on TPU v5p" (MaxText repository,
`MaxText/configs/v5p/README.md`), with the run configuration of its launch script
(`MaxText/configs/v5p/{32b,64b,128b,256b,512b,1024b}.sh`): `per_device_batch_size`, `remat_policy`,
`ici_tensor_parallelism`, `ici_data_parallelism`, `ici_fsdp_parallelism=-1` (the rest), `max_target_length=2048`,
and the model of `global_parameter_scale` (MaxText's `base.yml` scaled by `pyconfig.get_individual_scales`:
see docs/measurements.md for the arithmetic). "2x" runs join two slices over DCN, data parallel across them.

`build_row(row)` returns what `analyzer.analyze` needs: `(step, args, mesh, topology)`. The mesh is
`slice` (2x runs), `data` (ICI data parallelism), `fsdp` and `tensor`, major to minor as MaxText orders its mesh
axes; `slice` and `data` keep the weights whole (`replica_axes`), `fsdp` shards them, `tensor` is the model axis.

What the template does not reproduce (docs/measurements.md says why it matters): MaxText's flash-attention kernel
(the template computes the S x S scores with XLA ops) and its XLA flags for collective fusion.

    python -c "from examples.maxtext_v5p import ROWS; print([r.name for r in ROWS])"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from analyzer.compile.models import TransformerConfig, build

# MaxText base.yml: base_emb_dim 2048, base_num_query_heads 16 (= kv heads), base_mlp_dim 7168,
# base_num_decoder_layers 16, head_dim 128, mlp_activations ["silu", "linear"], vocab_size 32000.
BASE = dict(d_model=2048, heads=16, d_ff=7168, layers=16)
HEAD_DIM = 128
VOCAB = 32_000
SEQ = 2048


def model_shape(scale: int) -> dict[str, int]:
    """d_model, heads, d_ff, layers of MaxText's `global_parameter_scale=scale` (a power of two):
    with k = log2(scale) and base, rem = divmod(k, 3), heads and MLP width scale by 2^(base + (rem > 0)), d_model by
    2^(base + (rem > 1)), layers by 2^base (docs/measurements.md)."""
    k = scale.bit_length() - 1
    if 2**k != scale:
        raise ValueError(f"global_parameter_scale must be a power of two, got {scale}")
    base, rem = divmod(k, 3)
    wide = 2 ** (base + (rem > 0))
    return dict(d_model=BASE["d_model"] * 2 ** (base + (rem > 1)), heads=BASE["heads"] * wide,
                d_ff=BASE["d_ff"] * wide, layers=BASE["layers"] * 2**base)


# v5p slices by chip count (a v5p-N slice has N TensorCores, N/2 chips): the 3D torus shapes.
SLICES = {64: "4x4x4", 128: "4x4x8", 256: "4x8x8", 512: "8x8x8", 1024: "8x8x16"}


@dataclass(frozen=True)
class Row:
    """One published run: model scale, slices x chips per slice, per-device batch, remat, ICI TP and DP."""

    name: str  # e.g. "32b-1x-v5p-128"
    scale: int  # global_parameter_scale (billions of parameters, nominal)
    slices: int
    chips_per_slice: int
    per_device_batch: int
    remat: str  # MaxText remat_policy: "minimal" or "full" (same names in the template)
    tensor: int  # ici_tensor_parallelism
    data: int = 1  # ici_data_parallelism

    @property
    def chips(self) -> int:
        return self.slices * self.chips_per_slice

    @property
    def topology(self) -> str:
        one = f"v5p:{SLICES[self.chips_per_slice]}"
        return one if self.slices == 1 else f"{one}*{self.slices}"

    @property
    def mesh(self) -> dict[str, int]:
        fsdp = self.chips_per_slice // (self.tensor * self.data)
        axes = {"slice": self.slices, "data": self.data, "fsdp": fsdp, "tensor": self.tensor}
        return {k: v for k, v in axes.items() if v > 1 or k in ("fsdp", "tensor")}

    @property
    def config(self) -> TransformerConfig:
        shape = model_shape(self.scale)
        return TransformerConfig(**shape, kv_heads=shape["heads"], head_dim=HEAD_DIM, mlp="gated_silu",
                                 vocab=VOCAB, seq=SEQ, batch=self.per_device_batch * self.chips,
                                 remat=self.remat, dtype="bfloat16", optimizer="adam")


def _rows() -> list[Row]:
    out = []
    # (scale, chips per slice, per_device_batch_size, remat_policy, ici_tensor_parallelism, ici_data_parallelism)
    # 1024B: ici_tensor_parallelism=16 as in the earlier 1024b.sh (e.g. commit 8c3d2e65). The current script reads
    # `ici_tensor_parallelism=8\ ici_data_parallelism=16`, one shell word MaxText cannot parse, and TP 8 x DP 16
    # leaves FSDP 8: 997e9 parameters / 64 x 12 bytes (f32 weights, Adam's two moments) = 187 GB per chip, twice
    # v5p's 96 GB HBM, so the published run cannot have used it (docs/measurements.md).
    for scale, chips, batch, remat, tp, dp in [(32, 64, 7, "minimal", 4, 1), (64, 64, 3, "minimal", 4, 1),
                                               (128, 128, 1, "minimal", 8, 1), (128, 256, 1, "minimal", 8, 1),
                                               (256, 512, 1, "minimal", 8, 1), (512, 512, 2, "full", 8, 1),
                                               (1024, 1024, 2, "full", 16, 1)]:
        for slices in (1, 2):
            out.append(Row(f"{scale}b-{slices}x-v5p-{2 * chips}", scale, slices, chips, batch, remat, tp, dp))
    return out


ROWS = _rows()


def build_row(row: Row) -> tuple[Any, tuple[Any, ...], dict[str, int], str]:
    """`(step, args, mesh, topology)` of a row: the template's fsdp+tp training step configured like the run."""
    mesh = row.mesh
    replica = tuple(a for a in ("slice", "data") if a in mesh)
    step, args = build(row.config, "fsdp+tp", mesh, model_axis="tensor", replica_axes=replica)
    return step, args, mesh, row.topology
