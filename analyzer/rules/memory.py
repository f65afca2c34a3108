"""Memory rules: per-device bytes against the chip's HBM (sharding.md, "A unified notation for sharding",
memory pop quiz and Problem 1; training.md, memory of parameters and optimizer state)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from analyzer.diagnostics import Diagnostic, Location, Severity
from analyzer.analysis.mapping import op_label
from analyzer.rules.common import fmt_b
from analyzer.rules.context import RuleContext
from analyzer.rules.facts import _split_source
from analyzer.rules.messages import Message
from analyzer.analysis.dataflow import cause_metadata, replicated_parameters as replicated_parameters_of
from analyzer.rules.registry import Option, rule
from analyzer.hlo.opcodes import NO_BUFFER
from analyzer.units import format_bytes

__all__ = ["memory_over_hbm", "replicated_large_parameter", "per_device_bytes", "memory_part", "largest_parts",
           "replicated_parameters", "largest_temporary"]



# Each part of `Report.memory`: the report's own key, then `compiled.memory_analysis()`'s attribute name.
_MEMORY_KEYS = {
    "total": ("total_bytes", "total"),
    "arguments": ("argument_bytes", "argument_size_in_bytes"),
    "outputs": ("output_bytes", "output_size_in_bytes"),
    "aliased": ("alias_bytes", "alias_size_in_bytes"),
    "temporaries": ("temp_bytes", "temp_size_in_bytes"),
    "code": ("generated_code_bytes", "generated_code_size_in_bytes"),
}


def memory_part(memory: Mapping[str, Any], part: str) -> float:
    """XLA's per-device bytes of one `part` of the plan (a key of `_MEMORY_KEYS`: "arguments", "outputs",
    "aliased", "temporaries", "code", "total") under either spelling; 0 when XLA did not say.

    Example:
        >>> memory_part({"temp_size_in_bytes": 2048}, "temporaries"), memory_part({}, "outputs")
        (2048.0, 0.0)
    """
    return next((float(memory[n]) for n in _MEMORY_KEYS[part] if memory.get(n) is not None), 0.0)


def per_device_bytes(memory: Mapping[str, Any] | None) -> float | None:
    """Arguments + outputs + temporaries - aliased bytes, per device, from `compiled.memory_analysis()`."""
    if not memory:
        return None
    total = memory_part(memory, "total")
    if total:
        return total
    return (memory_part(memory, "arguments") + memory_part(memory, "outputs") + memory_part(memory, "temporaries")
            - memory_part(memory, "aliased") + memory_part(memory, "code"))


def largest_parts(parts: Sequence[tuple[str, float]], total: float) -> list[tuple[str, float]]:
    """The (name, bytes) `parts` worth naming, largest first: each above 0 and at least 1% of `total`."""
    return sorted(((k, v) for k, v in parts if v > 0 and v >= 0.01 * total), key=lambda kv: -kv[1])


def _contributors(memory: Mapping[str, Any] | None, used: float) -> list[tuple[str, float]]:
    """What the per-device bytes are made of, largest first: temporaries, arguments, outputs (less what
    outputs alias), each at least 1% of the total."""
    if not memory:
        return []
    return largest_parts([("temporaries", memory_part(memory, "temporaries")),
                          ("arguments", memory_part(memory, "arguments")),
                          ("outputs", memory_part(memory, "outputs") - memory_part(memory, "aliased"))], used)


def replicated_parameters(ctx: RuleContext) -> list[tuple[Any, float, int]]:
    """Entry parameters held whole by several devices: (instruction, per-device bytes, replication)
    (`analyzer.analysis.dataflow.replicated_parameters` on the report's module and mesh)."""
    module = ctx.facts.module
    if module is None:
        return []
    mesh = ctx.report.mesh
    return replicated_parameters_of(module, mesh.size if mesh is not None else module.num_partitions)


def largest_temporary(module: Any) -> tuple[Any, Any, float] | None:
    """(computation, instruction, bytes per device) of the largest array the program creates, or None.

    XLA's buffer assignment (which temporaries are live together) is not in the HLO text, so this is a
    proxy: the largest array-shaped result of an instruction that makes a buffer (not a parameter, constant,
    view, loop or call wrapper, nor a broadcast or iota XLA fuses away), in the entry computation and the
    loop bodies and called computations it reaches (not fused computations), leaving out the entry's
    outputs (they are outputs, not temporaries). Its size is that of its shape, per device (the module is
    the partitioned one). Of equal sizes, the first with a source line wins, then the first in order.
    """
    if module is None or not module.computations:
        return None
    entry = module.entry
    outputs = {entry.root.name}
    if entry.root.opcode == "tuple":
        outputs.update(entry.root.operand_names)
    best: tuple[Any, Any, float] | None = None
    best_key: tuple[float, int] = (0.0, 0)
    seen: set[str] = set()
    todo = [entry]
    while todo:
        comp = todo.pop(0)
        if comp.name in seen:
            continue
        seen.add(comp.name)
        for inst in comp.instructions:
            if inst.opcode in ("while", "call", "conditional"):
                todo.extend(module.by_name[n] for n in inst.called_computations if n in module.by_name)
            if inst.opcode in NO_BUFFER or not inst.shape.is_array or inst.shape.is_token:
                continue
            if comp is entry and inst.name in outputs:
                continue
            try:
                nbytes = float(inst.shape.byte_size)
            except ValueError:  # an element type this table does not know: not weighed
                continue
            md = inst.metadata
            key = (nbytes, 1 if md is not None and (md.stack_frame_id is not None or md.source_line) else 0)
            if key > best_key:
                best, best_key = (comp, inst, nbytes), key
    return best


def _temporary_location(module: Any, comp: Any, inst: Any) -> Location | None:
    """The user's line of an instruction (innermost frame of the user's code, the library frame as context),
    or None when its metadata names no source."""
    from analyzer.analysis.mapping import source_frames

    md = cause_metadata(comp, inst)
    if md is None:
        return None
    frames = source_frames(module, md.stack_frame_id, md.source_file, md.source_line)
    file, line = _split_source(frames.user)
    if line is None:
        return None
    return Location(file=file, line=line, computation=comp.name, instruction=inst.name,
                    hlo_line=inst.position.line if inst.position else None, context=frames.context or None)


def _param_name(inst: Any) -> str:
    md = inst.metadata
    return (md.op_name if md is not None and md.op_name else None) or inst.name


@dataclass(frozen=True)
class OverHbm(Message):
    """HA401: the program needs more bytes per device than the chip's HBM."""

    used_bytes: float
    hbm_bytes: float
    hardware: str
    cpu_estimate: bool
    parts: tuple[tuple[str, float], ...] = ()  # (temporaries | arguments | outputs, bytes), largest first
    # When temporaries are the largest part: the largest array the program creates (its op, shape and bytes
    # from the shape, per device), where the finding points; "" / 0 when not known.
    temporary_op: str = ""      # the jax op that made it (from its op_name), "" when unknown
    temporary_opcode: str = ""  # its HLO opcode
    temporary_shape: str = ""
    temporary_bytes: float = 0.0
    fraction: float = 1.0  # the rule's `fraction`: the limit is this share of HBM

    template: ClassVar[str] = ("needs {used_bytes:bytes} per device, more than {limit_text}{breakdown}{tail}{largest}")

    @property
    def limit_text(self) -> str:
        """The limit the rule compared with: all of HBM, or the configured share of it.

        Example:
            >>> OverHbm(used_bytes=2**30, hbm_bytes=16 * 2**30, hardware="tpu-v5e", cpu_estimate=False,
            ...         fraction=0.05).limit_text
            '819 MiB, the configured fraction 0.05 of the 16.0 GiB of HBM on tpu-v5e'
        """
        whole = f"the {format_bytes(self.hbm_bytes)} of HBM on {self.hardware}"
        if self.fraction == 1.0:
            return whole
        return f"{format_bytes(self.hbm_bytes * self.fraction)}, the configured fraction {self.fraction:g} of {whole}"

    @property
    def breakdown(self) -> str:
        return f" ({', '.join(f'{name} {format_bytes(n)}' for name, n in self.parts)})" if self.parts else ""

    @property
    def tail(self) -> str:
        return (" (XLA's memory analysis of the cpu compile: temporaries on the TPU compiler differ)."
                if self.cpu_estimate else ".")

    @property
    def largest(self) -> str:
        """The largest temporary, when known (XLA's buffer assignment is not in the HLO: its shape is the size).

        Example:
            >>> print(OverHbm(used_bytes=20 * 2**30, hbm_bytes=16 * 2**30, hardware="tpu-v5e", cpu_estimate=False,
            ...         parts=(("temporaries", 18 * 2**30),), temporary_op="dot_general", temporary_opcode="dot",
            ...         temporary_shape="f32[32768,32768]", temporary_bytes=4 * 2**30).largest)
             The largest temporary the program creates is this line's dot_general (HLO dot), f32[32768,32768] (4.00 GiB per device by its shape; which temporaries are live together is XLA's buffer assignment, not in the HLO).
        """
        if not self.temporary_shape:
            return ""
        what = (f"{self.temporary_op} (HLO {self.temporary_opcode})" if self.temporary_op and self.temporary_opcode
                else self.temporary_op or self.temporary_opcode)
        return (f" The largest temporary the program creates is this line's {what}, "
                f"{self.temporary_shape} ({format_bytes(self.temporary_bytes)} per device by its shape; which "
                "temporaries are live together is XLA's buffer assignment, not in the HLO).")


@rule(
    code="HA401",
    name="memory-over-hbm",
    severity=Severity.ERROR,
    summary="Per-device bytes (arguments, outputs, temporaries) exceed the chip's HBM.",
    options=(Option("fraction", 1.0, "Fire when per-device bytes exceed this fraction of HBM."),),
    predicts_saving=False,
)
def memory_over_hbm(ctx: RuleContext) -> Iterator[Diagnostic]:
    """## What it does
    Adds the per-device arguments, outputs and temporaries that XLA's `compiled.memory_analysis()`
    reports (minus aliased buffers) and compares them with the chip's HBM. Names the replicated
    parameters whose sharding would make it fit, and points at the first of them. When temporaries are
    the largest part, it points instead at the user's line of the largest array the program creates (the
    largest result of a buffer-making instruction in the entry and its loop bodies, outputs aside, sized
    by its shape): XLA's buffer assignment, which says what is live together, is not in the HLO text, so
    this is a proxy for the largest live temporary. Without a source line for it, the finding stays at
    `<module>` (or on the first replicated parameter).

    ## Why is this bad?
    The program will not run: it fails with an out-of-memory error on the real chips. A replicated
    array costs its full size on every device (`A[I_X, J]` on `{X: 4, Y: 8, Z: 2}` takes 16 copies'
    worth of memory in all, Problem 1).

    ## Example
    ```python
    w = NamedSharding(mesh, P())          # a 20 GB weight on 16 GB v5e chips
    ```

    ## Use instead
    ```python
    w = NamedSharding(mesh, P("data", None))   # W[D_data, F]: 1/|data| per chip
    ```

    ## References
    "How to Scale Your Model", sharding chapter, memory pop quiz and Problem 1; training chapter,
    parameter and optimizer memory.
    """
    chip = ctx.facts.hardware
    used = per_device_bytes(ctx.report.memory)
    if used is None or chip.hbm_bytes <= 0:
        return
    limit = chip.hbm_bytes * float(ctx.option("fraction"))
    if used <= limit:
        return
    overflow = used - limit
    # Only arrays that matter: sharding one that frees under 1% of the overflow changes nothing a person can
    # see (issue 11: 75 replicated 4 KiB norm weights were listed against a 17 GiB overflow).
    reps = sorted((r for r in replicated_parameters(ctx) if r[1] * (1 - 1 / r[2]) >= 0.01 * overflow),
                  key=lambda r: -r[1] * (1 - 1 / r[2]))
    freed = 0.0
    names = []
    for inst, nbytes, rep in reps:
        if used - freed <= limit:
            break
        freed += nbytes * (1 - 1 / rep)
        names.append(f"{_param_name(inst)} ({fmt_b(nbytes)} replicated {rep}x)")
    fits = used - freed <= limit
    parts = _contributors(ctx.report.memory, used)
    biggest = parts[0][0] if parts else ""
    shown = names[:5] + ([f"{len(names) - 5} more"] if len(names) > 5 else [])
    if biggest == "temporaries" and not fits:
        fix = ("temporaries are the largest share: rematerialize activations (jax.checkpoint / remat on the layer), "
               "shard activations over more mesh axes, or use smaller micro-batches"
               + (f"; sharding {', '.join(shown)} over the replicated mesh axes frees {fmt_b(freed)} more" if names
                  else ""))
    elif names:
        fix = (f"shard {', '.join(shown)} over the replicated mesh axes"
               + (f"; that brings it to {fmt_b(used - freed)}" if fits else "; that is still not enough: "
                  "also shard activations or use more chips"))
    else:
        fix = "shard the largest arrays over more mesh axes, rematerialize activations, or use more chips"
    where = Location(computation=ctx.facts.module.entry.name if ctx.facts.module else None)
    temporary: tuple[Any, Any, float] | None = None
    if biggest == "temporaries":
        found = largest_temporary(ctx.facts.module)
        if found is not None and (loc := _temporary_location(ctx.facts.module, found[0], found[1])) is not None:
            temporary, where = found, loc
    if reps and temporary is None:
        inst = reps[0][0]
        md = inst.metadata
        where = Location(file=md.source_file if md else None, line=md.source_line if md else None,
                         computation=where.computation, instruction=inst.name,
                         hlo_line=inst.position.line if inst.position else None)
    yield ctx.diagnostic(
        OverHbm(used_bytes=used, hbm_bytes=chip.hbm_bytes, hardware=chip.name, cpu_estimate=ctx.report.target == "cpu",
                parts=tuple(parts),
                temporary_op=op_label(cause_metadata(temporary[0], temporary[1]).op_name) if temporary else "",
                temporary_opcode=temporary[1].opcode if temporary else "",
                temporary_shape=str(temporary[1].shape) if temporary else "",
                temporary_bytes=temporary[2] if temporary else 0.0, fraction=float(ctx.option("fraction"))),
        location=where,
        seconds=None,
        alternative=f"shard the replicated parameters ({fmt_b(used - freed)} per device)" if names else None,
        fix=fix,
        details={"per_device_bytes": used, "hbm_bytes": chip.hbm_bytes, "saving_bytes": freed, "fits": fits,
                 "contributors": dict(parts),
                 **({"largest_temporary": {"instruction": temporary[1].name, "shape": str(temporary[1].shape),
                                           "bytes": temporary[2]}} if temporary else {})},
    )


@dataclass(frozen=True)
class ReplicatedParameter(Message):
    """HA402: a large parameter replicated on many devices."""

    parameter: str
    shape: str
    replicas: int
    nbytes: float
    hbm_bytes: float
    hardware: str
    freed_bytes: float

    template: ClassVar[str] = (
        "parameter {parameter} ({shape}) is replicated on {replicas} devices: {nbytes:bytes} each, {share:.0%} of "
        "the {hbm_bytes:bytes} HBM of {hardware}; sharding it frees {freed_bytes:bytes} per device."
    )

    @property
    def share(self) -> float:
        return self.nbytes / self.hbm_bytes


@rule(
    code="HA402",
    name="replicated-large-parameter",
    severity=Severity.WARNING,
    summary="A large parameter is replicated across devices where sharding it would free HBM.",
    options=(Option("min_fraction", 0.1, "Fire for replicated parameters of at least this fraction of HBM."),),
    predicts_saving=False,
)
def replicated_large_parameter(ctx: RuleContext) -> Iterator[Diagnostic]:
    """## What it does
    Finds function arguments (parameters, optimizer state) held whole by several devices whose
    per-device size is a sizeable fraction of HBM (10% by default), and says how much sharding them over
    their replicated mesh axes frees.

    ## Why is this bad?
    Replication multiplies memory: every device pays the full size. With Adam, parameters and optimizer
    state take about 10 bytes per parameter (training chapter), so a replicated model caps at about
    HBM / 10 parameters (9B on v5p) and leaves no room for activations.

    ## Example
    ```python
    params = NamedSharding(mesh, P())          # pure data parallelism with a large model
    ```

    ## Use instead
    ```python
    params = NamedSharding(mesh, P("data"))    # FSDP / ZeRO-3: 1/|data| of the parameters per device
    ```

    ## References
    "How to Scale Your Model", sharding chapter, Problem 1 (replicated sharding); training chapter, FSDP.
    """
    chip = ctx.facts.hardware
    if chip.hbm_bytes <= 0:
        return
    threshold = float(ctx.option("min_fraction")) * chip.hbm_bytes
    for inst, nbytes, rep in replicated_parameters(ctx):
        if nbytes < threshold:
            continue
        freed = nbytes * (1 - 1 / rep)
        md = inst.metadata
        loc = Location(file=md.source_file if md else None, line=md.source_line if md else None,
                       computation=ctx.facts.module.entry.name if ctx.facts.module else None,
                       instruction=inst.name, hlo_line=inst.position.line if inst.position else None)
        yield ctx.diagnostic(
            ReplicatedParameter(parameter=_param_name(inst), shape=str(inst.shape), replicas=rep, nbytes=nbytes,
                                hbm_bytes=chip.hbm_bytes, hardware=chip.name, freed_bytes=freed),
            location=loc,
            alternative=f"{_param_name(inst)} sharded {rep} ways ({fmt_b(nbytes / rep)} per device)",
            fix=f"shard {_param_name(inst)} over its replicated mesh axes (FSDP: P('data', ...) on its largest dim)",
            details={"bytes": nbytes, "replication": rep, "saving_bytes": freed},
        )
