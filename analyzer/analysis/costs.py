"""What each instruction of a program costs on one chip: its FLOPs, HBM bytes, bound and seconds, computed once per
(module, hardware) and asked by everything that times or prices an instruction.

XLA splits it the same way: `HloCostAnalysis` answers what an instruction does (FLOPs, bytes accessed) and a
performance model (`GpuPerformanceModel`, the TPU compiler's cost model) asks it to turn that into time. Here
`ProgramCosts` answers for one hardware spec; the step model (analyzer.analysis.step), the report's totals and dots
table (analyzer.pipeline) and the rules (HA101's roofline, HA104's redundant compute) ask it, and none of them
times a dot on its own.

One execution of an instruction costs:
  - a dot (convolution, ragged dot): the roofline of its FLOPs (the `Dot` record's, analyzer.analysis.dots) padded
    to the MXU's tiles where the hardware has an [mxu] table (analyzer.theory.matmul) against its HBM bytes plus
    what the tile passes re-read: max(padded FLOPs / peak(dtype), bytes / HBM bandwidth) + fill and drain;
  - a fusion or call holding dots: the same over the FLOPs of the dots it holds, at its first dot's dtype;
  - a NOP opcode or a marker custom-call (`_CUSTOM_FREE`): nothing;
  - anything else: its HBM bytes / HBM bandwidth (`instruction_hbm_bytes`); in an unfused module (the cpu
    target's after-SPMD HLO) an op XLA would fuse with its neighbours pays only at the edges of its chain.
`DotCost.peak_seconds`, a dot's FLOPs / the peak of its dtype, is the dots table's `seconds` and what
`Totals.matmul_seconds` adds up.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from analyzer.analysis.dataflow import users_map
from analyzer.hlo.opcodes import DOTS, LINK, NOP, RELABEL, SLICING, UNFUSED, VIEWS

if TYPE_CHECKING:
    from analyzer.analysis.dots import Dot
    from analyzer.hlo.ir import Computation, HloModule, Instruction
    from analyzer.theory.hardware import HardwareSpec

__all__ = ["DotCost", "FlashScores", "ProgramCosts", "flash_scores", "instruction_hbm_bytes"]

# Custom-calls that run no kernel: the SPMD partitioner's and layout markers, host-offload and buffer annotations.
_CUSTOM_FREE = ("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "LayoutConstraint",
                "MoveToHost", "MoveToDevice", "AllocateBuffer")
# The instructions `ProgramCosts.flops_in` adds up: dots (the opcodes `extract_dots` takes) and what calls code.
_FLOPS_OPS = tuple(sorted(DOTS | {"fusion", "call"}))


@dataclass(frozen=True)
class DotCost:
    """One execution of one dot on one chip.

    Attributes:
      flops: its FLOPs (the `Dot` record's); dtype: the dtype its peak is read at.
      peak_seconds: flops / the chip's peak for `dtype`.
      padding: padded FLOPs / FLOPs on the MXU's tiles (1 without an [mxu] table, or for a real convolution).
      reread_bytes: HBM bytes its tile passes read beyond one read of each operand and one write of the result.
      fill_seconds: the MXU's fill and drain.
    """

    flops: float
    dtype: str
    peak_seconds: float
    padding: float = 1.0
    reread_bytes: float = 0.0
    fill_seconds: float = 0.0


def _bytes(shape: Any) -> int:
    if shape is None:
        return 0
    try:
        return int(shape.byte_size)
    except ValueError:
        return 0


def instruction_hbm_bytes(inst: Instruction, module: HloModule | None = None, *,
                          not_plain: tuple[frozenset[str], frozenset[str]] | None = None) -> int:
    """HBM bytes one execution of `inst` reads and writes, as one kernel: its operands and its result, except
    that a slice reads only the slice, a dynamic-update-slice writes the update in place, an async slice or
    copy (`slice-start`/`copy-start`) moves its data once (the `-done` moves nothing more), and a fusion reads
    of a parameter only what its slicing ops take and writes of an output that updates a buffer in place only
    the update (both followed through views and nested fusions, see `_fusion_bytes`). `not_plain`: what a
    fusion's pricing asks of `module` (`_not_plain`), when the caller prices many and asked it once.

    Example:
        f32[8,128] add(f32[8,128], f32[8,128]) -> 3 x 4096 = 12288
    """
    op = inst.opcode
    if op in SLICING:
        return 2 * _bytes(inst.shape)
    if op == "dynamic-update-slice":
        upd = inst.operands[1].shape if len(inst.operands) > 1 else None
        return 2 * _bytes(upd)
    if op in ("slice-start", "copy-start"):
        # ((operand), result, context) for slice-start; (result, operand, context) for copy-start
        parts = inst.shape.tuple_shapes if inst.shape is not None and inst.shape.is_tuple else ()
        moved = parts[1] if op == "slice-start" and len(parts) > 1 else (parts[0] if parts else inst.shape)
        return 2 * _bytes(moved)
    if op in ("slice-done", "copy-done") or op in _ASYNC_SLICE_DONES:
        return 0
    if op in _ASYNC_SLICE_STARTS:
        return _async_slice_bytes(inst)
    if op == "fusion" and module is not None:
        return _fusion_bytes(inst, module, not_plain)
    return sum(_bytes(o.shape) for o in inst.operands) + _bytes(inst.shape)


# Asynchronous dynamic slices and updates (`dynamic-slice-start` / `dynamic-update-slice-start`, each with its
# `-done`): the TPU compiler's form of a remat policy's host offload, a layer's activation written into, or read back
# from, a stacked buffer in host memory by the DMA engines while the core computes. The pair moves the slice (the
# update) once; the `-done` moves nothing more.
_ASYNC_SLICE_STARTS = frozenset({"dynamic-slice-start", "dynamic-update-slice-start"})
_ASYNC_SLICE_DONES = frozenset({"dynamic-slice-done", "dynamic-update-slice-done"})
# XLA's memory space of host memory in a layout's `S(n)` (xla/layout.h, `Layout::kHostMemorySpace = 5`).
HOST_MEMORY_SPACE = 5


def _in_host_memory(shape: Any) -> bool:
    layout = getattr(shape, "layout", None) if shape is not None else None
    return getattr(layout, "memory_space", None) == HOST_MEMORY_SPACE


def _async_slice_bytes(inst: Instruction) -> int:
    """HBM bytes of an asynchronous dynamic slice or update (`_ASYNC_SLICE_STARTS`): the slice (the update) read and
    written once; where the sliced buffer is in host memory, only its HBM side (the update read, the slice written):
    the other side crosses the host link (priced with the host offload, docs/step.md "Host offload")."""
    buffer = inst.operands[0].shape if inst.operands else None
    if inst.opcode == "dynamic-update-slice-start":
        moved = inst.operands[1].shape if len(inst.operands) > 1 else None
    else:  # ((operand, indices...), result, context...)
        parts = inst.shape.tuple_shapes if inst.shape is not None and inst.shape.is_tuple else ()
        moved = parts[1] if len(parts) > 1 else None
    return (1 if _in_host_memory(buffer) else 2) * _bytes(moved)


# Collectives inside a fusion (async collective fusions, collective matmuls) move their data on the link (`LINK`): it
# is priced with the collective, not as HBM traffic of the fusion.


def _is_link(inst: Instruction) -> bool:
    """A collective, or the AsyncCollectiveStart/Done custom-call of an async collective fusion."""
    return inst.opcode in LINK or (inst.opcode == "custom-call" and "AsyncCollective" in (
        inst.attr("custom_call_target") or ""))


# Ops a fusion reads through without touching memory of its own: what their users take of the value is what
# is read of their operand (a convert reads the source elements at the source's width).
_THROUGH = RELABEL | {"get-tuple-element"}


def _elements(shape: Any) -> int:
    if shape is None:
        return 0
    if shape.is_tuple or shape.is_buffer:
        return sum(_elements(s) for s in shape.tuple_shapes)
    return shape.num_elements


def _users_in(comp: Computation, cache: dict[str, Mapping[str, tuple[tuple[Instruction, int], ...]]]
              ) -> Mapping[str, tuple[tuple[Instruction, int], ...]]:
    """`analyzer.analysis.dataflow.users_map` of `comp`, built once per fusion walk."""
    users = cache.get(comp.name)
    if users is None:
        users = cache[comp.name] = users_map(comp)
    return users


def _elements_read(comp: Computation, name: str, module: HloModule, cache: dict, depth: int = 0) -> int | None:
    """Elements of the value `name` inside fusion computation `comp` that its users read from memory, or None
    when some user reads all of it. Slicing ops (dynamic-slice, slice, gather) read their result's elements;
    a dynamic-update-slice's base is updated in place (nothing read); views and nested fusions are followed."""
    if depth > 16:
        return None
    users = _users_in(comp, cache).get(name, ())
    if not users:
        return None
    total = 0
    for u, _ in users:
        op = u.opcode
        first = bool(u.operand_names) and u.operand_names[0] == name
        if op in SLICING and first and name not in u.operand_names[1:]:
            total += _elements(u.shape)
        elif op == "dynamic-update-slice" and first and name not in u.operand_names[1:]:
            continue
        elif _is_link(u):
            continue  # moved by the link, priced with the collective
        elif op == "tuple" and u.is_root:
            continue  # passed through to an output (aliased, not read)
        elif op in _THROUGH:
            sub = _elements_read(comp, u.name, module, cache, depth + 1)
            if sub is None:
                return None
            total += sub
        elif op == "fusion":
            inner = module.by_name.get(u.called_computations[0]) if u.called_computations else None
            if inner is None:
                return None
            params = {i.parameter_number: i for i in inner.instructions if i.opcode == "parameter"}
            for k, o in enumerate(u.operand_names):
                if o != name:
                    continue
                p = params.get(k)
                sub = _elements_read(inner, p.name, module, cache, depth + 1) if p is not None else None
                if sub is None:
                    return None
                total += sub
        else:
            return None
    return total


def _bytes_written(comp: Computation, inst: Instruction, module: HloModule, depth: int = 0) -> int:
    """Bytes a fusion output produced by `inst` writes to memory: a dynamic-update-slice writes its update (the
    buffer is updated in place), followed through views, tuples and nested fusions; anything else its result."""
    op = inst.opcode
    if op == "parameter" or _is_link(inst):
        return 0  # a buffer passed through (aliased), or written by the link
    if depth <= 16:
        if op == "dynamic-update-slice" and len(inst.operands) > 1:
            return int(_elements(inst.operands[1].shape) * _element_bytes(inst.shape))
        if op == "tuple":
            return sum(_bytes_written(comp, comp.by_name[o], module, depth + 1) if o in comp.by_name
                       else _bytes(s.shape) for o, s in zip(inst.operand_names, inst.operands))
        if op in ("bitcast", "reshape") and inst.operand_names and inst.operand_names[0] in comp.by_name:
            return _bytes_written(comp, comp.by_name[inst.operand_names[0]], module, depth + 1)
        if op == "fusion" and inst.called_computations and inst.called_computations[0] in module.by_name:
            inner = module.by_name[inst.called_computations[0]]
            return _bytes_written(inner, inner.root, module, depth + 1)
    return _bytes(inst.shape)


def _element_bytes(shape: Any) -> float:
    n = _elements(shape)
    return _bytes(shape) / n if n else 0.0


# What can make a fusion's bytes differ from its operands' plus its output's: the opcodes `_elements_read` and
# `_bytes_written` treat apart (slices, in-place updates, links, nested fusions; `AsyncCollective` custom-calls
# are looked for in the text), and a tuple at the root. A root view (bitcast, reshape) writes what its operand
# writes: nothing for a parameter passed through.
_NOT_PLAIN = tuple(sorted(SLICING | LINK | {"dynamic-update-slice", "fusion"}))


def _not_plain(module: HloModule) -> tuple[frozenset[str], frozenset[str]]:
    """The computations that hold one of `_NOT_PLAIN` or a custom-call, and those that hold one of `_NOT_PLAIN`:
    what `_plain_written` asks of the module (a caller that prices many fusions asks it once: `_Walker`)."""
    return module.holding(*_NOT_PLAIN, "custom-call"), module.holding(*_NOT_PLAIN)


def _plain_written(comp: Computation, module: HloModule,
                   not_plain: tuple[frozenset[str], frozenset[str]] | None = None) -> int | None:
    """For a fusion body that holds none of the ops that make `_fusion_bytes` read less than its operands
    (`_NOT_PLAIN`, a link's custom-call): the bytes its output writes (`_bytes_written` of the root, the root and
    the views under it read by `line_head`: a lazily parsed module's body from those lines, no parse); else None
    (then the body is read). `not_plain`: `_not_plain(module)`, when the caller has it."""
    with_custom, held = not_plain if not_plain is not None else _not_plain(module)
    if comp.name in with_custom and (comp.name in held or any(_is_link(i) for i in comp.select("custom-call"))):
        return None
    head = comp.line_head()
    for _ in range(8):
        if head is None or head.opcode not in VIEWS:
            break
        head = comp.line_head(head.operand) if head.operand is not None else None
    if head is None or head.opcode in VIEWS or head.opcode == "tuple":
        return None
    return 0 if head.opcode == "parameter" else _bytes(head.shape)


def _fusion_bytes(inst: Instruction, module: HloModule,
                  not_plain: tuple[frozenset[str], frozenset[str]] | None = None) -> int:
    """HBM bytes of one fusion: per operand, what its fused computation reads of it (slices only the slice,
    an in-place updated buffer nothing; through bitcasts, reshapes, copies, converts, transposes,
    get-tuple-elements and nested fusions), capped at the operand's size; per output, the update of an
    in-place dynamic-update-slice, nothing for a parameter passed through or a collective's result, else the
    output. Operands only a collective reads are the link's, not HBM traffic of the fusion."""
    called = [module.by_name[c] for c in inst.called_computations if c in module.by_name]
    if not called:
        return sum(_bytes(o.shape) for o in inst.operands) + _bytes(inst.shape)
    comp = called[0]
    written = _plain_written(comp, module, not_plain)
    if written is not None:  # every operand read whole: the body need not be parsed
        return sum(_bytes(o.shape) for o in inst.operands) + written
    cache: dict[str, Mapping[str, tuple[tuple[Instruction, int], ...]]] = {}
    params = {i.parameter_number: i for i in comp.instructions if i.opcode == "parameter"}
    total = 0
    for k, operand in enumerate(inst.operands):
        whole = _bytes(operand.shape)
        p = params.get(k)
        read = _elements_read(comp, p.name, module, cache) if p is not None else None
        total += whole if read is None else min(whole, int(read * _element_bytes(operand.shape)))
    return total + _bytes_written(comp, comp.root, module)



class _DotDims(NamedTuple):
    """A dot's operand dims read by its dimension numbers: each operand's dims, batch and contracting dims, and
    the free dims (neither) it keeps in the result."""

    lhs: list[int]
    rhs: list[int]
    lhs_batch: set[int]
    lhs_contracting: set[int]
    rhs_batch: set[int]
    rhs_contracting: set[int]

    @classmethod
    def of(cls, inst: Instruction) -> _DotDims | None:
        """The dims of a dot or convolution with two array operands whose dimension numbers read; else None."""
        from analyzer.analysis.dots import batch_dims, contracting_dims

        if len(inst.operands) < 2 or any(o.shape is None or not o.shape.is_array for o in inst.operands[:2]):
            return None
        try:
            return cls(list(inst.operands[0].shape.dims), list(inst.operands[1].shape.dims),
                       set(batch_dims(inst, 0)), set(contracting_dims(inst, 0)),
                       set(batch_dims(inst, 1)), set(contracting_dims(inst, 1)))
        except (AttributeError, TypeError, ValueError):
            return None

    @property
    def lhs_free(self) -> list[int]:
        return [x for i, x in enumerate(self.lhs) if i not in self.lhs_contracting and i not in self.lhs_batch]

    @property
    def rhs_free(self) -> list[int]:
        return [x for i, x in enumerate(self.rhs) if i not in self.rhs_contracting and i not in self.rhs_batch]


def _mxu_terms(d: Dot, hw: HardwareSpec) -> tuple[float, float, float] | None:
    """(padding factor, re-read bytes, fill seconds) of one dot on the MXU (analyzer.theory.matmul), from its
    operands' shapes and dimension numbers; a convolution too where it is the TPU compiler's spelling of a dot (its
    FLOPs are a matmul's, 2 x batch x m x k x n), so the same dot costs the same on the cpu and TPU targets; None
    for a real convolution or a dot whose shapes are not known."""
    from analyzer.theory.matmul import matmul_time

    inst = d.instruction
    dims = _DotDims.of(inst) if inst.opcode in ("dot", "convolution") else None
    if dims is None:
        return None
    ld = dims.lhs
    b = math.prod(ld[i] for i in dims.lhs_batch if i < len(ld))
    k = math.prod(ld[i] for i in dims.lhs_contracting if i < len(ld))
    m = math.prod(dims.lhs_free)
    n = math.prod(dims.rhs_free)
    if min(b, k, m, n) <= 0 or abs(2.0 * b * m * k * n - d.flops) > 1e-6 * max(d.flops, 1.0):
        return None  # (not a matmul's FLOPs: a real convolution, or dims read otherwise than the FLOPs were)
    in_bytes = _element_bytes(inst.operands[0].shape) or 2.0
    out_bytes = _element_bytes(inst.shape) or in_bytes
    t = matmul_time(hw, b=b, m=m, k=k, n=n, in_bytes=in_bytes, out_bytes=out_bytes)
    once = b * ((m * k + k * n) * in_bytes + m * n * out_bytes)
    return t.padded_flops / t.useful_flops, max(0.0, t.hbm_bytes - once), t.fill_seconds


@dataclass(frozen=True)
class FlashScores:
    """Attention's S x S scores in a program whose attention the TPU runs as a flash kernel (docs/step.md, "Flash
    attention"): the shapes the kernel keeps in VMEM.

    Attributes:
      lengths: the sequence lengths S of the scores (a dimension both operands of a `QK^T` keep).
      elements: the element counts of the score-producing dots' results.
    """

    lengths: frozenset[int]
    elements: frozenset[int]

    def holds(self, shape: Any) -> bool:
        """Whether `shape` is the scores (or the probabilities, or their gradient): rank 3 or more, the element
        count of a score-producing dot's result, and S in two of its dims."""
        dims = list(getattr(shape, "dims", ()) or ()) if shape is not None and shape.is_array else []
        return (len(dims) >= 3 and shape.num_elements in self.elements
                and any(dims.count(s) >= 2 for s in self.lengths))

    def touches(self, inst: Instruction) -> bool:
        """Whether `inst` reads or writes the scores."""
        return self.holds(inst.shape) or any(self.holds(o.shape) for o in inst.operands)

    def edge_bytes(self, inst: Instruction) -> int:
        """HBM bytes of `inst` inside the kernel: its operands and result that are not the scores (Q, K, V, O, dO,
        the softmax's row statistics); the scores stay in VMEM."""
        return (sum(_bytes(o.shape) for o in inst.operands if not self.holds(o.shape))
                + (0 if self.holds(inst.shape) else _bytes(inst.shape)))


def flash_scores(dots: Sequence[Dot]) -> FlashScores | None:
    """The scores of a program's attention, read from its dots: a dot with batch dimensions whose operands each keep
    (as a free dimension) a dimension S longer than what it contracts is a `QK^T` (or the backward's `dO V^T`): S
    the sequence length, its result the scores. None when the program has no such dot."""
    lengths: set[int] = set()
    elements: set[int] = set()
    for d in dots:
        inst = d.instruction
        dims = _DotDims.of(inst) if inst.opcode == "dot" and inst.shape is not None and inst.shape.is_array else None
        if dims is None or not dims.lhs_batch:
            continue
        k = math.prod(dims.lhs[i] for i in dims.lhs_contracting if i < len(dims.lhs))
        common = {x for x in set(dims.lhs_free) & set(dims.rhs_free) if x > k}
        if common and len(inst.shape.dims) >= 3:
            lengths.update(common)
            elements.add(inst.shape.num_elements)
    return FlashScores(frozenset(lengths), frozenset(elements)) if lengths else None


class _DotSums(NamedTuple):
    """The dots one execution of a computation runs, itself and what it calls (`ProgramCosts._dots_in`)."""

    flops: float
    padded: float  # each dot's FLOPs times its padding on the MXU's tiles
    reread_bytes: float
    fill_seconds: float


_NO_DOTS = _DotSums(0.0, 0.0, 0.0, 0.0)


class ProgramCosts:
    """The costs of one module's instructions on one hardware spec, each computed once, on first question.

    Example:
        costs = ProgramCosts(module, dots, hardware)
        costs.dot_cost(dots[0]).peak_seconds, costs.op_time(comp, inst)
    """

    def __init__(self, module: HloModule, dots: Sequence[Dot], hw: HardwareSpec, *, flash_attention: bool = False):
        self.module = module
        # flash_attention: the program's attention runs on the TPU as a flash kernel (MaxText's attention=flash that
        # the cpu target analysed as dot_product): its scores stay in VMEM (`FlashScores`, docs/step.md).
        self.flash = flash_scores(dots) if flash_attention else None
        self.hw = hw
        self.bw = float(hw.hbm_rate)  # the measured copy's rate where the spec has one (docs/step.md)
        self.dot_costs: dict[tuple[str, str], DotCost] = {}
        for d in dots:
            key = (d.computation, d.instruction.name)
            if key in self.dot_costs:
                continue
            rate = hw.flops_per_second(d.dtype)
            terms = _mxu_terms(d, hw) if hw.mxu is not None else None
            pad, reread, fill = terms if terms is not None else (1.0, 0.0, 0.0)
            self.dot_costs[key] = DotCost(flops=d.flops, dtype=d.dtype, peak_seconds=d.flops / rate if rate else math.nan,
                                          padding=pad, reread_bytes=reread, fill_seconds=fill)
        # The dtype of each computation's first dot, looked up once per fusion by `op_time` (a scan of the dots
        # per lookup made the step model quadratic in the number of dots).
        self.first_dot_dtype: dict[str, str] = {}
        for (c, _), cost in self.dot_costs.items():
            self.first_dot_dtype.setdefault(c, cost.dtype)
        self.with_mxu = hw.mxu is not None
        self.comp_dots: dict[str, _DotSums] = {}  # (`_dots_in`: each computation's dots summed once)
        self.with_flops = module.holding(*_FLOPS_OPS)  # (the computations `flops_in` reads: those with a dot or call)
        self.not_plain = _not_plain(module)  # (what pricing each fusion's bytes asks of the module: asked once)
        # holds_dot per instruction, by id (the instruction kept alongside so the id stays its own): the overlap
        # model asks it of the same instructions once per collective it follows (100,000 times on the 22 MB
        # synthetic module, each decoding the called computations again).
        self._holds_dot: dict[int, tuple[Instruction, bool]] = {}

    def dot(self, comp_name: str, inst_name: str) -> DotCost | None:
        """The cost of the dot `inst_name` of computation `comp_name`, None when it is not a dot of the records."""
        return self.dot_costs.get((comp_name, inst_name))

    def dot_cost(self, d: Dot) -> DotCost:
        """The cost of one `Dot` record."""
        return self.dot_costs[(d.computation, d.instruction.name)]

    def flops_of(self, comp: Computation, inst: Instruction) -> float:
        """FLOPs of one execution of `inst` in `comp`: a dot's (its record's), or those of the dots a fusion or call
        holds; 0 for anything else."""
        if inst.opcode in DOTS:
            d = self.dot_costs.get((comp.name, inst.name))
            return d.flops if d is not None else 0.0
        if inst.opcode in ("fusion", "call"):
            return sum(self.flops_in(c) for c in inst.called_computations)
        return 0.0

    def hbm_bytes(self, inst: Instruction) -> int:
        """`instruction_hbm_bytes` of `inst` in this module."""
        return instruction_hbm_bytes(inst, self.module, not_plain=self.not_plain)

    def flops_in(self, comp_name: str) -> float:
        """FLOPs of one execution of computation `comp_name`: its dots' and those of what its fusions and calls
        run."""
        return self._dots_in(comp_name).flops

    def holds_dot(self, inst: Instruction) -> bool:
        """A dot, or a fusion/call whose computations hold one."""
        op = inst.opcode
        if op in DOTS:
            return True
        if op != "fusion" and op != "call":
            return False
        known = self._holds_dot.get(id(inst))
        if known is None:
            known = (inst, any(self.flops_in(c) for c in inst.called_computations))
            self._holds_dot[id(inst)] = known
        return known[1]

    def mxu_in(self, comp_name: str) -> tuple[float, float, float]:
        """(padded FLOPs, re-read bytes, fill seconds) of the dots in a computation and what it calls (the
        `dot_mxu` terms summed; padded FLOPs are the dot's FLOPs times its padding factor)."""
        sums = self._dots_in(comp_name)
        return sums.padded, sums.reread_bytes, sums.fill_seconds

    def _dots_in(self, comp_name: str) -> _DotSums:
        """The dots of computation `comp_name` and of what its fusions and calls run, summed in one read of its
        dot, fusion and call lines (a lazily parsed body: only those lines), kept per computation."""
        sums = self.comp_dots.get(comp_name)
        if sums is None:
            self.comp_dots[comp_name] = _NO_DOTS  # guards recursion
            flops = padded = extra = fill = 0.0
            if comp_name in self.with_flops:
                for i in self.module.by_name[comp_name].select(*_FLOPS_OPS):
                    d = self.dot_costs.get((comp_name, i.name))
                    if d is not None:
                        flops += d.flops
                        padded += d.flops * d.padding
                        extra += d.reread_bytes
                        fill += d.fill_seconds
                    elif i.opcode in ("fusion", "call"):
                        inners = [self._dots_in(c) for c in i.called_computations]
                        flops += sum(inner.flops for inner in inners)
                        for inner in inners:
                            padded, extra, fill = (padded + inner.padded, extra + inner.reread_bytes,
                                                   fill + inner.fill_seconds)
            sums = self.comp_dots[comp_name] = _DotSums(flops, padded, extra, fill)
        return sums

    def op_time(self, comp: Computation, inst: Instruction, cheap: Mapping[str, bool] | None = None,
                users: Mapping[str, tuple[str, ...]] | None = None) -> tuple[float, str]:
        """Seconds of one execution of a non-collective, non-control instruction, and whether FLOPs or bytes
        bound it ("matmul" / "memory"); (0, "") for free ops. `cheap` and `users`: in an unfused module, which
        instructions of `comp` XLA would fuse with their neighbours and who reads each value (then an op of a
        chain pays only at its edges); None for a fused module."""
        op = inst.opcode
        if op in NOP or (op == "custom-call" and any(t in (inst.attr("custom_call_target") or "")
                                                        for t in _CUSTOM_FREE)):
            return 0.0, ""
        flash = self.flash is not None and self.flash.touches(inst)
        if op in DOTS or op == "fusion":
            timed = self._roofline(comp, inst, flash)
            if timed is not None:
                return timed
        if flash:  # (an op of the kernel's softmax: on the scores in VMEM, only its other operands and result move)
            if op in VIEWS:
                return 0.0, ""
            nbytes = (self.flash.edge_bytes(inst) if cheap is None or op in UNFUSED
                      else _chain_edge_bytes(comp, inst, cheap, users, self.flash))
            return nbytes / self.bw, "memory"
        if cheap is None or op in UNFUSED:  # (a fused module: no chains to follow)
            return self.hbm_bytes(inst) / self.bw, "memory"
        if op in VIEWS:  # (a view inside a chain XLA would fuse: nothing moves)
            return 0.0, ""
        return _chain_edge_bytes(comp, inst, cheap, users) / self.bw, "memory"

    def _roofline(self, comp: Computation, inst: Instruction, flash: bool = False) -> tuple[float, str] | None:
        """The roofline of a dot, or of a fusion holding dots, at the MXU's padding, tile passes and fill
        (analyzer.theory.matmul, where the hardware has an [mxu] table); None when it does no FLOPs. `flash`: a dot
        of a flash kernel (it reads or writes the scores, `FlashScores`): its HBM bytes are its operands and result
        other than the scores, and its tile passes re-read nothing from HBM (the kernel's blocks are in VMEM)."""
        dot = self.dot_costs.get((comp.name, inst.name)) if inst.opcode in DOTS else None
        if dot is not None:
            flops, dtype = dot.flops, dot.dtype
            padded, extra, fill = ((flops * dot.padding, dot.reread_bytes, dot.fill_seconds) if self.with_mxu
                                   else (flops, 0.0, 0.0))
        elif inst.opcode == "fusion":
            called = inst.called_computations
            flops = sum(self.flops_in(c) for c in called)
            dtype = self.first_dot_dtype.get(called[0], "bf16") if called else "bf16"
            padded, extra, fill = flops, 0.0, 0.0
            if self.with_mxu:
                terms = [self.mxu_in(c) for c in called]
                padded = max(flops, sum(a for a, _, _ in terms))
                extra, fill = sum(b for _, b, _ in terms), sum(f for _, _, f in terms)
        else:
            return None
        if not flops:
            return None
        t_flops = padded / self.hw.flops_per_second(dtype)
        if flash and self.flash is not None:
            t_mem = self.flash.edge_bytes(inst) / self.bw
        else:
            t_mem = (self.hbm_bytes(inst) + extra) / self.bw
        return (t_flops + fill, "matmul") if t_flops >= t_mem else (t_mem + fill, "memory")


def _chain_edge_bytes(comp: Computation, inst: Instruction, cheap: Mapping[str, bool],
                      users: Mapping[str, tuple[str, ...]] | None, flash: FlashScores | None = None) -> int:
    """HBM bytes of an op of an unfused module that XLA would fuse with its neighbours (`cheap`): only what crosses
    the chain's edges, the operands made outside it (a slice reads its slice; a dynamic-update-slice's buffer is
    updated in place) and its result when a user outside the chain (or the computation's result) reads it.
    `flash`: the scores of a flash kernel, which cross no edge through HBM (they stay in VMEM)."""
    op = inst.opcode
    nbytes = 0
    for k, o in enumerate(inst.operands):
        if cheap.get(o.name, False) or o.name not in comp.by_name:
            continue
        if flash is not None and flash.holds(o.shape):
            continue
        if comp.by_name[o.name].opcode == "constant":
            continue
        if k == 0 and op in SLICING:
            nbytes += _bytes(inst.shape)
        elif k != 0 or op != "dynamic-update-slice":
            nbytes += _bytes(o.shape)
    if flash is not None and flash.holds(inst.shape):
        return nbytes
    outs = users.get(inst.name, ()) if users is not None else ()
    if inst.is_root or any(not cheap.get(u, False) for u in outs):
        if op == "dynamic-update-slice" and len(inst.operands) > 1:
            nbytes += _bytes(inst.operands[1].shape)
        else:
            nbytes += _bytes(inst.shape)
    return nbytes
