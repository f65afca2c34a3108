"""An estimate of a TPU's per-device memory from the partitioned program (issue 25 item 4).

The cpu target's `compiled.memory_analysis()` is the CPU compiler's buffer assignment: no TPU layouts, another
fusion and scheduling, bf16 arithmetic promoted to f32. On MaxText-like runs it claimed 23.5-26.6 GiB per chip
for runs that fit in 16 GB of v5e HBM. This module estimates what libtpu's memory analysis would say, from the
HLO right after SPMD partitioning (per-device shapes, the program's order), in the same parts:

- **sizes as the TPU lays arrays out**: an array of rank >= 2 is stored in tiles of 8 x 128 elements over its
  two minor dimensions (`{...:T(8,128)}`; bf16 and 8-bit types keep 8 x 128 tiles, packed inside), so the
  minor dimension is padded to a multiple of 128 and the second-minor to a multiple of 8; layout assignment
  picks whichever of the last two dimensions wastes less as the minor one (libtpu gave `bf16[4,1024,32]` the
  layout `{1,2,0}`). A rank-1 array is padded to 128 elements, a scalar takes one 128-element tile row
  (`s32[]{:T(128)}`).
- **arguments and outputs**: the entry's parameters, the entry root's leaves; donated outputs
  (`input_output_alias`) are the aliased bytes.
- **temporaries: liveness over the program's order**. The instructions run in the order printed (a
  topological order, which is what the partitioned module has before scheduling), except that one which frees
  more bytes than it makes runs as soon as its operands have, as a memory-aware scheduler runs it
  (`_Peaks._schedule`). Element-wise ops, layout
  changes, broadcasts, iotas, slices and tuples are fused into their consumers as the TPU compiler fuses them:
  they hold no buffer, and the buffers they read stay live until the consumer that reads through them; an
  expensive one (exp, log, divide, ...) read by several consumers and saved to a loop's stack is written to
  memory, as XLA never duplicates an expensive producer (`_materialised`). Every
  other instruction (dots, convolutions, reductions, collectives, gathers, scatters, custom calls, sorts,
  loops) makes one buffer, live from its instruction to its last reader. An instruction whose output has the
  shape of an operand that dies there writes in place (loop state, dynamic-update-slice, element-wise
  updates). A loop, call or conditional adds its body's own peak while it runs (its parameters are the
  caller's buffers, counted there). The peak of the entry's live buffers is the temporaries.
- **flash attention and remat as the TPU compiles them**: both are visible in the partitioned program: remat
  is recomputation jax already wrote into the backward pass (checkpointed residuals are the only buffers the
  forward loop stacks), and a blockwise (flash) attention keeps per-block scores inside its loop's body, so
  no S x S buffer exists outside it. A program whose attention was lowered as dot-product but runs on the TPU
  as a flash kernel (MaxText's `attention=flash` on the cpu target: `costs.FlashScores`) gets no buffer for its
  scores, nor for the forward loop's stacks of them: the kernel keeps them in VMEM and saves its row statistics
  for the backward instead (`flash_held`).
- **host offload**: the stacks a remat policy offloads (`save_and_offload_only_these_names`; MaxText's
  `NAME=offload`) live in host memory: the forward loop's state elements written from copies to `pinned_host`, and
  the backward loop's elements they are handed to (`offload.host_loop_state`, read from the program before
  partitioning), take no HBM.
- **VMEM**: temporaries whose peak fits in what memory-space assignment may use of one TensorCore's VMEM (the
  hardware spec's `[mxu] vmem_bytes`, from jax's own table of TPU generations, less the 16 MiB the compiler keeps
  for the fusions' tiles, `SCOPED_VMEM_BYTES`) are kept there, and libtpu counts none of them in HBM: the
  chapter's fsdp step on v5e (18.4 MiB of temporaries by this estimate) got one 22.9 MiB VMEM allocation (`color
  1` in libtpu's buffer-assignment dump). Its HBM heap of temporaries then holds only index tables of
  tuple-shaped values (a 512-byte table in its own 16 KiB slot, `xla_jf_program_hbm_alignment_in_kib: 16`, one
  per tuple-shaped value of the final TPU program: 33-43 on the chapter's steps), yet libtpu's
  `temp_size_in_bytes` is not that heap: it was the heap twice plus 9-14 KiB on every chapter step (1.0-1.4
  MiB; 8-23 KiB on variants with 2 or 8 layers, twice the batch or width, the MLP alone), and 0 on programs of
  the same kind whose heaps held 7-17 such tables (the chapter's MLP step with one layer, a scanned MLP trained
  with SGD: `PROBES` in scripts/tpu_memory_check.py), while the jax 0.12 libtpu gave those and the chapter's
  fsdp step the heap twice plus 13-27 KiB (its `total_allocation_bytes` less `indefinite_allocations` taken as
  the heap). It depends on the libtpu, not on anything the partitioned program shows, so it is not modelled
  (docs/step.md, "TPU memory"). Then the estimate's temporaries are 0 and
  the peak is reported as `vmem_temp_bytes`. A larger peak
  stays in HBM whole: assignment then only stages some buffers through VMEM, which this estimate does not model
  (at most one VMEM's worth, under 1% of any HBM).
- **generated code**: not estimated (libtpu's figure for it is the size of the compiled TPU program); 0 here.

Measured against libtpu's own analysis (the TPU target, ahead of time, v5e:2x4, jax 0.10.2; arguments + outputs
+ temporaries, code left out), on the template's d_model 2048 / d_ff 8192 / 16 heads, 4 layers, seq 2048,
batch 16, Adam: FSDP over 8 without remat -1.4% (-13.2% before the rule for expensive values saved to a
stack), with full remat -4.5% (-1.4% in the printed order); FSDP 4 x TP 2 with a 32,000 vocabulary and gated
SiLU 7.29 GiB against 7.54, -3.4% (-10.5% before). The CPU compiler
said 10.4, 2.8 and 11.2 GiB. The chapter's training steps (examples/chapter.py, 8 devices; a few MiB each): before
the VMEM rule the estimate was 105-472% over libtpu's total (temporaries of 18-40 MiB that libtpu keeps in VMEM);
with it, 3-39% under, 1.0-1.4 MiB in absolute terms, libtpu's temporaries figure of twice its heap of tuple
index tables (above; `python scripts/tpu_memory_check.py` prints the table and keeps libtpu's buffer
assignment where asked). On the template's steps too libtpu's temporaries exceed its heap (by 74 MiB with full
remat, 755 MiB without, 830 MiB with the vocabulary): the estimate is compared with libtpu's figure, not its
heap. MaxText's
Llama 3.1 70B step on v6e (libtpu, tpu:v6e:16x16: 29.1 GB, 3.3 GB of donated arguments and 25.7 GB of
temporaries) is estimated at 30.0 GB (+3.2%); 32.1 GB in the printed order, which kept its 10 GB logits live
through the backward loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from analyzer.hlo.opcodes import ALLOWED_ATTRIBUTES, CALLERS, FUSED_INTO_CONSUMER, IN_PLACE

__all__ = ["SCOPED_VMEM_BYTES", "TpuMemory", "estimate_tpu_memory", "tpu_bytes", "vmem_budget"]

# (FUSED_INTO_CONSUMER: no buffer of their own; CALLERS: their callees' peak adds to the caller's live buffers;
# IN_PLACE: may write their result over an operand's buffer that dies there. analyzer/hlo/opcodes.py.)
_TILE_MINOR, _TILE_SECOND = 128, 8
# VMEM the TPU compiler keeps for the fusions' own tiles, out of memory-space assignment's reach: libtpu's
# buffer-assignment dump of the template's FSDP step on v5e (128 MiB of VMEM) gave assignment one 112 MiB
# region (`color 1`), its largest. Measured on v5e only; taken to be the same on every generation.
SCOPED_VMEM_BYTES = 16 << 20
_BITS = {"pred": 8, "s2": 2, "u2": 2, "s4": 4, "u4": 4, "s8": 8, "u8": 8, "f8e4m3fn": 8, "f8e5m2": 8,
         "f8e4m3b11fnuz": 8, "f8e4m3fnuz": 8, "f8e5m2fnuz": 8, "f8e4m3": 8, "f8e3m4": 8, "f4e2m1fn": 4,
         "s16": 16, "u16": 16, "f16": 16, "bf16": 16, "s32": 32, "u32": 32, "f32": 32, "s64": 64, "u64": 64,
         "f64": 64, "c64": 64, "c128": 128}


def _round(n: int, m: int) -> int:
    return -(-n // m) * m


def _expensive(inst: Any) -> bool:
    """Whether XLA counts an element-wise op as expensive (`InstructionFusion::IsExpensive`, openxla/xla
    xla/service/instruction_fusion.cc): the transcendental functions (the ops XLA lets one choose a
    `result_accuracy` for: exp, log, tanh, logistic, sqrt, rsqrt, erf, ...; sine and cosine excepted, which it
    counts cheap on real numbers) and a floating-point divide or power."""
    op = inst.opcode
    if "result_accuracy" in ALLOWED_ATTRIBUTES.get(op, ()):
        return op not in ("sine", "cosine")
    if op in ("divide", "power"):
        return inst.shape.is_array and inst.shape.element_type[:1] in ("f", "b", "c")
    return False


def _materialised(comp: Any) -> frozenset[str]:
    """The element-wise ops of a computation that the TPU compiler writes to memory although they fuse: an expensive
    op (`_expensive`) whose value reaches more than one buffer-making consumer (through fused ops; the
    computation's result counts as one) and is written into a loop's stacked state (a dynamic-update-slice: a
    residual the forward loop saves for the backward). XLA's instruction fusion never duplicates an expensive
    producer into several consumers (`InstructionFusion::ShouldFuse`, "expensive producer would be duplicated");
    libtpu then makes it an extra output of one consumer's fusion: the template's attention without remat
    (`exp` of the scores, f32[2,4,4,2048,2048], saved to the stack and summed: the second output of the fusion
    that sums it, 512 MiB in HBM). With full remat libtpu writes the forward loop's `exp` the same way (the
    sum's fusion's second output, read by the P.V matmul's fusion: 512 MiB, `fusion.603{1}`), though no stack
    keeps it; that buffer is not at the step's peak (the backward loop is), so leaving it out moves no figure.
    In the backward loop it recomputes the `exp` in each fusion that reads it and writes the bf16
    probabilities (256 MiB) and the scores instead; MaxText's loss likewise recomputes the `exp` of its f32
    logits in both fusions that read it. Counting every expensive value read twice put the full-remat step 55%
    over libtpu's figure; writing every value with a transcendental op that fans out to several consumers, one
    of them a matmul, at the fan-out (which finds the forward `exp` and the backward's bf16 probabilities) put
    it 17.7% over (1,140 against 900 MiB: the backward peak then holds two bf16 probability arrays, jax's
    remat recomputes the softmax twice, where libtpu computes them inside its async collective fusions), so
    only the stacked case is counted."""
    insts = comp.instructions
    names = {i.name for i in insts}
    readers: dict[str, set[str]] = {comp.root.name: {""}} if insts else {}
    stacked: dict[str, set[str]] = {}
    for inst in reversed(insts):
        if inst.opcode == "dynamic-update-slice":
            for o in inst.operand_names[1:2]:
                stacked.setdefault(o, set()).add(inst.name)
        elif inst.opcode in FUSED_INTO_CONSUMER:
            for o in inst.operand_names:
                stacked.setdefault(o, set()).update(stacked.get(inst.name, ()))
    out: set[str] = set()
    for inst in reversed(insts):
        if inst.opcode == "parameter":
            continue
        mine = readers.get(inst.name, set())
        fused = inst.opcode in FUSED_INTO_CONSUMER
        if fused and len(mine) > 1 and _expensive(inst) and stacked.get(inst.name):
            out.add(inst.name)
            fused = False
        through = mine if fused else {inst.name}
        for o in inst.operand_names:
            if o in names:
                seen = readers.setdefault(o, set())
                for r in through:  # (two readers are enough to know)
                    if len(seen) > 1:
                        break
                    seen.add(r)
    return frozenset(out)


def tpu_bytes(shape: Any) -> int:
    """Bytes of a shape as the TPU lays it out (tiles of 8 x 128 elements over the two minor dimensions; tuples:
    the sum of their leaves; tokens 0).

    Example:
        >>> from analyzer.hlo.shapes import decode_shape
        >>> tpu_bytes(decode_shape("bf16[4,32,8,32]")), tpu_bytes(decode_shape("bf16[4,1024,32]"))
        (262144, 262144)
    """
    if shape.is_tuple or shape.is_buffer:
        return sum(tpu_bytes(s) for s in shape.tuple_shapes)
    if shape.is_token:
        return 0
    bits = _BITS.get(shape.element_type, 32)
    dims = shape.dims
    if not dims:
        return (_TILE_MINOR * max(bits, 32)) // 8
    if len(dims) == 1:
        return (_round(dims[0], _TILE_MINOR * max(1, 32 // bits)) * bits + 7) // 8
    total = 1
    for d in dims:
        total *= d
    best = None
    for i, a in enumerate(dims):  # the minor dimension
        for j, b in enumerate(dims):  # the second-minor
            if i == j or a == 0 or b == 0:
                continue
            size = total // (a * b) * _round(a, _TILE_MINOR) * _round(b, _TILE_SECOND)
            best = size if best is None else min(best, size)
    return ((best if best is not None else 0) * bits + 7) // 8


@dataclass(frozen=True)
class TpuMemory:
    """Per-device bytes of the estimate, in `compiled.memory_analysis()`'s parts (`as_memory()` gives them under
    the report's keys)."""

    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    temp_bytes: int
    vmem_temp_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return self.argument_bytes + self.output_bytes + self.temp_bytes - self.alias_bytes

    def in_vmem(self, budget: int) -> TpuMemory:
        """The estimate on a chip whose memory-space assignment may keep `budget` bytes of temporaries in VMEM
        (`vmem_budget`): a peak that fits is kept there (`vmem_temp_bytes`), none in HBM; a larger peak stays in
        HBM whole (see the module doc)."""
        if budget <= 0 or self.temp_bytes > budget:
            return self
        return TpuMemory(argument_bytes=self.argument_bytes, output_bytes=self.output_bytes,
                         alias_bytes=self.alias_bytes, temp_bytes=0,
                         vmem_temp_bytes=self.temp_bytes + self.vmem_temp_bytes)

    def as_memory(self) -> dict[str, int]:
        vmem = {"vmem_temp_bytes": self.vmem_temp_bytes} if self.vmem_temp_bytes else {}
        return {"argument_bytes": self.argument_bytes, "output_bytes": self.output_bytes,
                "temp_bytes": self.temp_bytes, "alias_bytes": self.alias_bytes, "generated_code_bytes": 0,
                **vmem}


def vmem_budget(hardware: Any) -> int:
    """Bytes of temporaries the TPU compiler may keep in one TensorCore's VMEM: the hardware spec's
    `[mxu] vmem_bytes` less `SCOPED_VMEM_BYTES`; 0 for a chip without a VMEM in its spec (GPUs).

    Example:
        >>> from analyzer.theory.hardware import load_hardware
        >>> vmem_budget(load_hardware("tpu-v5e")) // 2**20, vmem_budget(load_hardware("h100"))
        (112, 0)
    """
    mxu = getattr(hardware, "mxu", None)
    return max(0, int(mxu.vmem_bytes) - SCOPED_VMEM_BYTES) if mxu is not None else 0


def _aliased_outputs(module: Any) -> set[int]:
    """The entry output indices donated to a parameter (`input_output_alias={ {0}: (0, {}, may-alias), ... }`)."""
    import re

    text = str(module.attributes.get("input_output_alias", "")) if module.attributes else ""
    # `{}` is the whole (non-tuple) output, index 0 here
    return {int(m.group(1) or 0) for m in re.finditer(r"\{\s*(\d*)[^}]*\}\s*:", text)}


class _Peaks:
    """Peak live bytes of each computation (its own buffers; parameters are the caller's), memoised per call."""

    def __init__(self, module: Any, held: Callable[[Any], bool] | None = None,
                 host: Mapping[str, frozenset[int]] | None = None) -> None:
        self.module = module
        self.by_name = module.by_name
        self.memo: dict[str, int] = {}
        self.held = held
        self.host = host or {}
        self._kept: dict[str, frozenset[str]] = {}

    def kept(self, comp: Any) -> frozenset[str]:
        """`_materialised(comp)`, once per computation."""
        if comp.name not in self._kept:
            self._kept[comp.name] = _materialised(comp)
        return self._kept[comp.name]

    def bytes_of(self, shape: Any) -> int:
        """`tpu_bytes` of `shape` less the arrays a kernel keeps in VMEM (`held`: a flash kernel's scores)."""
        if self.held is None:
            return tpu_bytes(shape)
        if shape.is_tuple or shape.is_buffer:
            return sum(self.bytes_of(s) for s in shape.tuple_shapes)
        return 0 if self.held(shape) else tpu_bytes(shape)

    def callee_peak(self, inst: Any) -> int:
        names = [n for n in inst.called_computations if n in self.by_name]
        if not names:
            return 0
        if inst.opcode == "while":  # body and condition run in turn
            return max(self.peak(n) for n in names)
        if inst.opcode == "conditional":
            return max(self.peak(n) for n in names)
        return sum(self.peak(n) for n in names) if inst.opcode != "fusion" else 0

    def _sunk(self, comp: Any, loop: Any, sources: Mapping[str, frozenset[str]]) -> int:
        """Bytes of a loop's state the compiler sinks into the body (XLA's while-loop constant sinking): elements
        the body passes on unchanged whose initial value is made of no buffer (a broadcast constant or iota,
        such as a causal mask)."""
        init = comp.by_name.get(loop.operand_names[0]) if loop.operand_names else None
        body = self.by_name.get(loop.attr("body") or "") or next(
            (self.by_name[n] for n in loop.called_computations if n in self.by_name
             and self.by_name[n].root.shape.is_tuple), None)
        if init is None or init.opcode != "tuple" or body is None or body.root.opcode != "tuple":
            return 0
        by = body.by_name
        sunk = 0
        for k, (start, out) in enumerate(zip(init.operand_names, body.root.operand_names)):
            passed = by.get(out)
            if passed is None or passed.opcode != "get-tuple-element" or passed.attr("index") != str(k):
                continue
            src = by.get(passed.operand_names[0]) if passed.operand_names else None
            if src is None or src.opcode != "parameter" or sources.get(start) or \
                    comp.by_name.get(start) is None or comp.by_name[start].opcode == "parameter":
                continue
            if _from_parameter(comp, start, self.kept(comp)):
                continue
            sunk += self.bytes_of(comp.by_name[start].shape)
        return sunk

    def peak(self, name: str, exclude: frozenset[str] = frozenset()) -> int:
        if name in self.memo and not exclude:
            return self.memo[name]
        self.memo.setdefault(name, 0)  # a recursive call graph (not valid HLO) costs nothing
        comp = self.by_name[name]
        sizes, reads, result = self._buffers(comp, exclude)
        order = self._schedule(comp, sizes, reads, result)
        last: dict[str, int] = {}
        for i, inst in enumerate(order):
            for s in reads.get(inst.name, ()):
                last[s] = i
        for s in result:
            last[s] = len(order)  # the computation's result is live at its end
        peak = self._sweep(order, sizes, last)
        if not exclude:
            self.memo[name] = peak
        return peak

    def _buffers(self, comp: Any, exclude: frozenset[str]
                 ) -> tuple[dict[str, int], dict[str, frozenset[str]], frozenset[str]]:
        """The bytes of each buffer the computation makes (fused values and parameters make none; `exclude`d ones
        count 0), the buffers each buffer-making instruction reads (through fused ops), and the buffers its
        result is made of."""
        insts = comp.instructions
        index = {inst.name: i for i, inst in enumerate(insts)}
        kept = self.kept(comp)
        # The buffers each value reads through (a fused value: the buffers of its operands).
        sources: dict[str, frozenset[str]] = {}
        sizes: dict[str, int] = {}
        reads: dict[str, frozenset[str]] = {}
        for inst in insts:
            ops = [o for o in inst.operand_names if o in index]
            if inst.opcode == "parameter":
                sources[inst.name] = frozenset()
                continue
            src: frozenset[str] = frozenset()
            for o in ops:
                src |= sources.get(o, frozenset())
            if inst.opcode in FUSED_INTO_CONSUMER and inst.name not in kept:
                sources[inst.name] = src
                continue
            sources[inst.name] = frozenset({inst.name})
            sizes[inst.name] = self._own_bytes(comp, inst, ops, sources, exclude)
            reads[inst.name] = src
        root = comp.root.name if insts else ""
        return sizes, reads, sources.get(root, frozenset())

    def _schedule(self, comp: Any, sizes: Mapping[str, int], reads: Mapping[str, frozenset[str]],
                  result: frozenset[str]) -> list[Any]:
        """The order the computation runs in: the order it is printed in, except that an instruction which frees
        more bytes than it makes runs as soon as its operands have (the largest saving first). The printed order
        is only a topological order; a memory-aware scheduler runs such an instruction early, as XLA's
        `ListScheduler` (openxla/xla xla/service/hlo_memory_scheduler.cc) ranks the ready instructions by the
        bytes they free less the bytes they define (a loop or call: its callee's peak). Only the saving ones
        move: libtpu's scheduler hides latency rather than minimise memory, and a fully memory-minimising order
        put the template's steps 11-14% under libtpu's figure (1-13% in the printed order). MaxText's Llama 3.1
        70B step (v6e) prints the loss's reduction and the unembedding's weight gradient after the backward
        loop, so the 10 GB bf16[5,8192,128256] logits they read stayed live through the whole loop (32.1 GB of
        32); libtpu's buffer assignment holds them only around the loss and, recomputed (`fusion.422.remat`), for
        the weight gradient."""
        import heapq

        insts = comp.instructions
        index = {inst.name: i for i, inst in enumerate(insts)}
        users: list[list[int]] = [[] for _ in insts]
        waiting = [0] * len(insts)
        for i, inst in enumerate(insts):
            preds = {index[o] for o in inst.operand_names if o in index}
            preds |= {index[o] for o in _control_predecessors(inst) if o in index}
            for p in preds:
                users[p].append(i)
            waiting[i] = len(preds)
        remaining: dict[str, int] = {s: 1 for s in result}  # readers still to run (the result: one more)
        readers: dict[str, list[int]] = {}
        for name, srcs in reads.items():
            for s in srcs:
                remaining[s] = remaining.get(s, 0) + 1
                readers.setdefault(s, []).append(index[name])
        version = [0] * len(insts)
        heap: list[tuple[int, int, int]] = []

        def push(i: int) -> None:
            inst = insts[i]
            freed = sum(sizes.get(s, 0) for s in reads.get(inst.name, ()) if remaining.get(s) == 1)
            made = sizes.get(inst.name, 0)
            if freed > made and (inst.opcode in CALLERS or inst.called_computations):
                made = max(made, self.callee_peak(inst))
            version[i] += 1
            heapq.heappush(heap, (min(0, made - freed), i, version[i]))

        for i in range(len(insts)):
            if waiting[i] == 0:
                push(i)
        order: list[Any] = []
        done = [False] * len(insts)
        while heap:
            _, i, v = heapq.heappop(heap)
            if done[i] or v != version[i]:
                continue
            done[i] = True
            order.append(insts[i])
            touched: set[int] = set()
            for s in reads.get(insts[i].name, ()):
                remaining[s] -= 1
                if remaining[s] == 1:  # its last reader now frees it
                    touched.update(j for j in readers.get(s, ()) if not done[j] and waiting[j] == 0)
            for j in users[i]:
                waiting[j] -= 1
                if waiting[j] == 0:
                    push(j)
                    touched.discard(j)
            for j in touched:
                push(j)
        if len(order) < len(insts):  # a cycle (not valid HLO): the rest in printed order
            order.extend(inst for i, inst in enumerate(insts) if not done[i])
        return order

    def _own_bytes(self, comp: Any, inst: Any, ops: list[str], sources: Mapping[str, frozenset[str]],
                   exclude: frozenset[str]) -> int:
        """The bytes of the buffer `inst` makes: none for an update in place of a parameter's buffer; a loop's
        less the state the compiler sinks into its body."""
        size = 0 if inst.name in exclude else self.bytes_of(inst.shape)
        if inst.opcode == "while" and inst.name in self.host and inst.name not in exclude:  # stacks in host memory
            size -= sum(self.bytes_of(inst.shape.tuple_shapes[k]) for k in self.host[inst.name]
                        if k < len(inst.shape.tuple_shapes))
        if inst.opcode in ("dynamic-update-slice", "scatter") and ops and not sources.get(ops[0]):
            size = 0  # written in place into a parameter's buffer (a loop's stacked state)
        if inst.opcode == "while" and inst.name not in exclude:
            size -= self._sunk(comp, inst, sources)
        return size

    def _sweep(self, insts: Any, sizes: Mapping[str, int], last: Mapping[str, int]) -> int:
        """The most bytes live at once, instruction by instruction: each buffer from the instruction that makes it
        to its last reader (a buffer no one reads dies at once), with what a callee holds while it runs and less
        the operand buffer an in-place op writes over."""
        live = 0
        peak = 0
        dying: dict[int, list[str]] = {}
        for s, i in last.items():
            dying.setdefault(i, []).append(s)
        for i, inst in enumerate(insts):
            if inst.name not in sizes:
                continue
            own = sizes[inst.name]
            freed = [sizes[s] for s in dying.get(i, ()) if s != inst.name]
            extra = self.callee_peak(inst) if inst.opcode in CALLERS or inst.called_computations else 0
            peak = max(peak, live + own - _reused(inst.opcode, own, freed) + extra)
            live += own
            if inst.name not in last:  # never read: dies at once
                live -= own
            live -= sum(freed)
        return peak


def _control_predecessors(inst: Any) -> list[str]:
    """The names in an instruction's `control-predecessors={...}`."""
    text = inst.attr("control-predecessors") if "control-predecessors" in inst.attribute_keys else None
    return [n.strip().lstrip("%") for n in text.strip("{}").split(",") if n.strip()] if text else []


def _reused(opcode: str, own: int, freed: list[int]) -> int:
    """The bytes of the operand buffers dying at an instruction (`freed`) that it writes its result over: one of
    its own size for an in-place op (a loop: all of them when none is), at most its own bytes."""
    if opcode not in IN_PLACE:
        return 0
    same = [n for n in freed if n == own]
    reuse = same[0] if same else (sum(freed) if opcode == "while" else 0)
    return min(reuse, own)


def flash_held(flash: Any) -> Callable[[Any], bool]:
    """Whether an array is what a flash kernel keeps in VMEM: the scores `flash` (`costs.FlashScores`) names, or a
    stack of them (the forward loop's residuals for the backward: a whole number of score arrays, S in two
    dims), which a flash kernel never writes (it saves its row statistics instead)."""
    def held(shape: Any) -> bool:
        if flash.holds(shape):
            return True
        dims = list(shape.dims) if shape.is_array else []
        n = shape.num_elements if dims else 0
        return (len(dims) >= 4 and any(dims.count(s) >= 2 for s in flash.lengths)
                and any(n % e == 0 and n > e for e in flash.elements))
    return held


def estimate_tpu_memory(module: Any, flash: Any = None,
                        host: Mapping[str, frozenset[int]] | None = None) -> TpuMemory | None:
    """The per-device memory a TPU would need for a partitioned module (see the module doc), or None when the
    module has no entry computation. `flash`: the scores of an attention the TPU runs as a flash kernel
    (`costs.FlashScores`), which then make no HBM buffer. `host`: the loop-state elements in host memory, by while
    loop (`offload.host_loop_state`: the stacks a remat policy offloads), which take no HBM.

    Example:
        >>> from analyzer.hlo.parser import parse_hlo
        >>> m = parse_hlo('''HloModule m
        ... ENTRY e {
        ...   a = f32[256,256] parameter(0)
        ...   b = f32[256,256] dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
        ...   c = f32[256,256] dot(b, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
        ...   ROOT d = f32[256,256] add(c, c)
        ... }''')
        >>> estimate_tpu_memory(m)       # b is the one temporary; c, read by the fused root, is the output
        TpuMemory(argument_bytes=262144, output_bytes=262144, alias_bytes=0, temp_bytes=262144, vmem_temp_bytes=0)
    """
    if module is None or not module.computations:
        return None
    entry = module.entry
    params = [i for i in entry.instructions if i.opcode == "parameter"]
    arguments = sum(tpu_bytes(p.shape) for p in params)
    root = entry.root
    leaves = list(root.shape.tuple_shapes) if root.shape.is_tuple else [root.shape]
    outputs = sum(tpu_bytes(s) for s in leaves)
    aliased = _aliased_outputs(module)
    alias = sum(tpu_bytes(s) for k, s in enumerate(leaves) if k in aliased)
    # The entry's outputs are counted as outputs: the buffers the root reads (through fused ops) are left out
    # of the temporaries.
    peaks = _Peaks(module, flash_held(flash) if flash is not None else None, host)
    out_names = _root_sources(entry, peaks.kept(entry))
    temps = peaks.peak(entry.name, exclude=frozenset(out_names))
    return TpuMemory(argument_bytes=arguments, output_bytes=outputs, alias_bytes=alias, temp_bytes=temps)


def _root_sources(comp: Any, kept: frozenset[str] = frozenset()) -> set[str]:
    """The instructions whose buffers the computation's root is made of (through tuples and fused ops; `kept`:
    fused ops written to memory, `_materialised`)."""
    by = comp.by_name
    out = _sources_of(comp, [comp.root.name], kept)
    # An output written in place over an operand's buffer (an all-reduce of a dot's partial sums, a loop's
    # state) makes that buffer the output too, when the output is its only reader.
    readers: dict[str, set[str]] = {}
    for inst in comp.instructions:
        if (inst.opcode in FUSED_INTO_CONSUMER and inst.name not in kept) or inst.opcode == "parameter":
            continue
        for src in _sources_of(comp, inst.operand_names, kept):
            readers.setdefault(src, set()).add(inst.name)
    todo = list(out)
    while todo:
        inst = by[todo.pop()]
        if inst.opcode not in IN_PLACE:
            continue
        for src in _sources_of(comp, inst.operand_names, kept):
            if src not in out and readers.get(src) == {inst.name} and \
                    tpu_bytes(by[src].shape) == tpu_bytes(inst.shape):
                out.add(src)
                todo.append(src)
    return out


def _reached(comp: Any, names: Any, kept: frozenset[str] = frozenset()) -> set[str]:
    """The instructions that make buffers (parameters included) which `names` read through fused ops (`kept`: fused
    ops written to memory, which make buffers)."""
    by = comp.by_name
    out: set[str] = set()
    todo = list(names)
    seen: set[str] = set()
    while todo:
        n = todo.pop()
        if n in seen or n not in by:
            continue
        seen.add(n)
        inst = by[n]
        if inst.opcode in FUSED_INTO_CONSUMER and n not in kept:
            todo.extend(inst.operand_names)
        else:
            out.add(n)
    return out


def _from_parameter(comp: Any, name: str, kept: frozenset[str] = frozenset()) -> bool:
    """Whether a value reads a parameter of its computation (through fused ops)."""
    return any(comp.by_name[n].opcode == "parameter" for n in _reached(comp, [name], kept))


def _sources_of(comp: Any, names: Any, kept: frozenset[str] = frozenset()) -> set[str]:
    """The buffer-making instructions that `names` read through fused ops (parameters left out)."""
    return {n for n in _reached(comp, names, kept) if comp.by_name[n].opcode != "parameter"}


def memory_of(module: Any) -> Mapping[str, int] | None:
    """`estimate_tpu_memory(module).as_memory()`, or None."""
    est = estimate_tpu_memory(module)
    return None if est is None else est.as_memory()
