"""The matmuls of an HLO module and their FLOPs: every `dot` and `convolution`, inside fusions too.

The compute side of the roofline: `Report.dots` has one row per dot with its FLOPs per execution and how
many times it runs per step (loop trip counts multiplied in, like the collectives' `count`).

FLOPs of a dot: 2 x (elements of the result) x (product of the contracting dims). A convolution (the TPU
compiler writes many dots as convolutions): 2 x (elements of the result) x (kernel elements / output
features) / feature_group_count / batch_group_count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from analyzer.analysis.graph import CallGraph

if TYPE_CHECKING:
    from analyzer.hlo.ir import HloModule, Instruction

__all__ = ["Dot", "dot_flops", "extract_dots"]


@dataclass(frozen=True)
class Dot:
    """One dot or convolution: where it runs, its FLOPs per execution and executions per step."""

    instruction: Instruction
    computation: str
    flops: float
    count: float
    contracting: tuple[int, ...]
    branch: tuple[tuple[str, int], ...] = ()  # conditional branches on its call path

    @property
    def dtype(self) -> str:
        ops = [o.shape for o in self.instruction.operands if o.shape is not None]
        return ops[0].element_type if ops else self.instruction.shape.element_type


def _ints(raw: str | None) -> tuple[int, ...]:
    if not raw:
        return ()
    return tuple(int(p) for p in raw.strip("{} ").split(",") if p.strip())


def dot_flops(inst: Instruction) -> tuple[float, tuple[int, ...]]:
    """FLOPs of one execution of a dot/convolution and its lhs contracting dims.

    Example:
        f32[8,64] dot(f32[8,128], f32[128,64]), lhs_contracting_dims={1} -> (2*8*64*128, (1,))
    """
    out = inst.shape
    out_elems = sum(s.num_elements for s in out.leaves() if s.is_array)
    shapes = [o.shape for o in inst.operands]
    if inst.opcode in ("dot", "ragged-dot"):
        lhs = shapes[0] if shapes else None
        dims = _ints(inst.attr("lhs_contracting_dims"))
        k = 1
        if lhs is not None:
            for d in dims:
                if d < lhs.rank:
                    k *= lhs.dims[d]
        return 2.0 * out_elems * k, dims
    if inst.opcode == "convolution" and len(shapes) >= 2 and shapes[1] is not None:
        kernel = shapes[1]
        labels = (inst.attr("dim_labels") or "").split("->")[0]
        parts = labels.split("_")
        kernel_labels = parts[1] if len(parts) > 1 else ""
        o_size = 1
        if len(kernel_labels) == kernel.rank and "o" in kernel_labels:
            o_size = kernel.dims[kernel_labels.index("o")]
        groups = 1
        for key in ("feature_group_count", "batch_group_count"):
            raw = inst.attr(key)
            if raw and raw.isdigit():
                groups *= int(raw)
        per_out = kernel.num_elements / max(1, o_size) / max(1, groups)
        return 2.0 * out_elems * per_out, ()
    return 0.0, ()


def extract_dots(module: HloModule, graph: CallGraph | None = None) -> list[Dot]:
    """Every dot/convolution that runs, with FLOPs and executions per call of the entry computation."""
    g = graph or CallGraph.build(module)
    out: list[Dot] = []
    for name in g.executed():
        for branch, count in g.branch_counts(name).items():
            if count <= 0:
                continue
            for inst in module.by_name[name].instructions:
                if inst.opcode in ("dot", "convolution", "ragged-dot"):
                    flops, contracting = dot_flops(inst)
                    out.append(Dot(inst, name, flops, count, contracting, branch))
    return out
