"""Whether a fix fits in HBM: the per-device bytes of the plan a finding's fix leads to (issue 11 item 3).

A fix that makes the step faster but no longer fits on the chip is no saving: the program would not run.
Issue 11's first plan was offered "fold 'data' (4 ways) into 'model' (2 -> 8)" as its top fix, a plan that
needs more than the chip's HBM. So every finding whose fix changes the plan's shape carries what that plan
would need per device, and a fix that grows it past HBM is not counted as a saving.

The estimate starts from what XLA reported for the plan as it is (`Report.memory`, the numbers HA401 adds:
`analyzer.rules.memory.per_device_bytes`) and scales each part as the change scales it:

  - arguments (parameters, optimizer state, inputs): each array re-sharded on the new mesh sizes, dimension
    by dimension, from its PartitionSpec (`ceil(dim / shards)`, as XLA pads); XLA's argument bytes are
    scaled by the ratio of the arrays' sums after and before, so the figure stays XLA's own;
  - outputs (the updated parameters and optimizer state of a training step) scale as the arguments do;
  - temporaries (the activations the step keeps) scale with the tokens each chip holds, times any growth of
    the global batch the fix asks for (the training chapter's activation memory, `B / X` tokens per chip):
    activations carry the batch, sharded over the batch axes (the mesh axes of the leading dimension of the
    program's integer arguments: token ids, labels), so a batch axis that grows or shrinks scales them by
    old / new size; they may be sharded over any other axis as well (a Megatron layer's [B, S, F_model]), so
    another axis that shrinks is taken to shard them all (old / new) and one that grows is not credited. That
    is an upper bound: a fix judged not to fit may fit a little better than said, never worse. Checked on
    transformers' Flax Llama (benchmarks/llama_acceptance.py's "fixed" plan, `model` 2 -> 1, `data` 4 -> 8,
    compiled again on that mesh): 7.46 GB of temporaries estimated, 6.64 GB compiled. Without integer
    arguments the batch axes are unknown and only shrinking axes scale the temporaries;
  - the generated code is unchanged.

The changes that are estimated are the ones rules describe as data: a new mesh (`details["fix_mesh"]`: the
new size of each mesh axis the fix resizes) and a larger global batch (`details["fix_batch_factor"]`), as
HA101's roofline fixes carry. The other rules' fixes (a ring with wraparound, a mesh axis reordered, a
producer's layout matched, collectives combined, a reduce-scatter for an all-reduce, an idle axis added to a
spec) hold no more per device than the plan does now, so they are never judged by fit: a plan already over
HBM is HA401's finding. A report without its abstract arguments (an HLO dump) gets no estimate: its fixes
are offered as they are, without `fix_memory_bytes`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from analyzer.analysis.tpumemory import vmem_budget as tpu_vmem_budget
from analyzer.diagnostics import Diagnostic
from analyzer.rules.messages import Message
from analyzer.rules.arguments import ArgumentArray, argument_arrays, batch_axes
from analyzer.rules.memory import largest_parts, memory_part, per_device_bytes
from analyzer.units import format_bytes

__all__ = ["MemoryEstimate", "estimate_memory", "judge_fit"]


@dataclass(frozen=True)
class MemoryEstimate:
    """Per-device bytes of a plan after a change, by part, and the chip's HBM.

    Attributes:
      now_bytes: the plan as it is (`per_device_bytes(report.memory)`).
      arguments, outputs, temporaries, code: the parts after the change (outputs less what they alias).
      hbm_bytes: the chip's HBM (times HA401's `fraction` when configured).
      batch_axes: the mesh axes the batch is sharded over (temporaries scale with them); empty when unknown.
    """

    now_bytes: float
    arguments: float
    outputs: float
    temporaries: float
    code: float
    hbm_bytes: float
    batch_axes: tuple[str, ...] = ()

    @property
    def after_bytes(self) -> float:
        return self.arguments + self.outputs + self.temporaries + self.code

    @property
    def fits(self) -> bool:
        return self.after_bytes <= self.hbm_bytes

    def parts(self) -> tuple[tuple[str, float], ...]:
        """(name, bytes) of the parts after the change, largest first, each at least 1% of the total."""
        parts = [("temporaries", self.temporaries), ("arguments", self.arguments), ("outputs", self.outputs)]
        return tuple(largest_parts(parts, self.after_bytes))


def estimate_memory(memory: Mapping[str, Any] | None, arrays: Sequence[ArgumentArray], now: Mapping[str, int],
                    after: Mapping[str, int], batch_factor: float, hbm_bytes: float,
                    vmem_budget: float = 0.0) -> MemoryEstimate | None:
    """Per-device bytes of the plan with the mesh at `after` sizes and the global batch times `batch_factor`.

    Args:
      memory: XLA's per-device figures of the plan as it is (`Report.memory`).
      arrays: the array arguments (`analyzer.rules.arguments.argument_arrays`).
      now, after: mesh axis sizes before and after the change (an axis missing from `after` keeps its size).
      batch_factor: what the global batch is multiplied by.
      hbm_bytes: the limit to judge against.
      vmem_budget: the VMEM the TPU compiler may keep temporaries in (`tpumemory.vmem_budget`); 0: none.

    Returns:
      None when XLA's figures are unknown.

    Example (W[D_data, F] of 64 MiB in bf16 on {data: 4, model: 2}; 256 MiB of temporaries for tokens[B_data]):
        >>> GiB, MiB = 2**30, 2**20
        >>> w = ArgumentArray("w", (4096, 8192), 2, (("data",), ()))
        >>> tok = ArgumentArray("tokens", (64, 2048), 4, (("data",), ()), integer=True)
        >>> mem = {"argument_bytes": w.bytes_on({"data": 4}) + tok.bytes_on({"data": 4}), "output_bytes": 0,
        ...        "temp_bytes": 256 * MiB, "alias_bytes": 0}
        >>> e = estimate_memory(mem, [w, tok], {"data": 4, "model": 2}, {"data": 1, "model": 8}, 1.0, 16 * GiB)
        >>> e.arguments / MiB, e.temporaries / MiB, e.fits     # w and the tokens whole again; 4x the tokens
        (64.5, 1024.0, True)
    """
    used = per_device_bytes(memory)
    if used is None or memory is None:
        return None
    sizes_after = {**now, **after}
    arg_now = sum(a.bytes_on(now) for a in arrays)
    arg_after = sum(a.bytes_on(sizes_after) for a in arrays)
    ratio = arg_after / arg_now if arg_now > 0 else 1.0
    args = memory_part(memory, "arguments")
    outs = memory_part(memory, "outputs") - memory_part(memory, "aliased")
    # the temporaries' peak wherever it lives: the TPU estimate puts a peak that fits in VMEM there (tpumemory)
    temps = memory_part(memory, "temporaries") + float(memory.get("vmem_temp_bytes") or 0)
    code = memory_part(memory, "code")
    if not (args or outs or temps):  # only a total is known: it is taken as temporaries
        temps = used - code
    axes = batch_axes(arrays)
    # Activations carry the batch, sharded over the batch axes, and may be sharded over any other axis too: an
    # axis that shrinks is taken to shard them (they grow by old/new size), one that grows is credited only
    # when it is a batch axis. An upper bound for activations; unknown batch axes leave only the first part.
    scale = 1.0
    for a in set(now) | set(sizes_after):
        old, new = int(now.get(a, 1)), int(sizes_after.get(a, 1))
        if new < old or a in axes:
            scale *= old / max(new, 1)
    temps_after = temps * scale * float(batch_factor)
    if temps_after <= vmem_budget:  # still in VMEM after the change: none of it in HBM
        temps_after = 0.0
    return MemoryEstimate(now_bytes=used, arguments=args * ratio, outputs=outs * ratio, temporaries=temps_after,
                          code=code, hbm_bytes=hbm_bytes, batch_axes=axes)


@dataclass(frozen=True)
class FixOverHbm(Message):
    """Any rule whose fix reshapes the plan (analyzer.rules.fit): the plan after the fix needs more than HBM,
    so its saving is not counted. Appended to the finding's own message.

    Example:
        >>> FixOverHbm(after_bytes=40 * 2**30, now_bytes=12 * 2**30, hbm_bytes=16 * 2**30, hardware="tpu-v5e",
        ...            parts=(("temporaries", 36 * 2**30), ("arguments", 4 * 2**30)), batch_axes="data",
        ...            saving_seconds=0.1).render()
        "Not counted as a saving (100 ms per step): the plan after this fix needs about 40.0 GiB per device (temporaries 36.0 GiB, arguments 4.00 GiB; temporaries scaled with the tokens per chip over 'data' and grown with every other mesh axis that shrinks), up from 12.0 GiB and more than the 16.0 GiB of HBM on tpu-v5e, so it would not run."
    """

    after_bytes: float
    now_bytes: float
    hbm_bytes: float
    hardware: str
    saving_seconds: float
    parts: tuple[tuple[str, float], ...] = ()
    batch_axes: str = ""  # the mesh axes the batch is sharded over, "" when unknown

    template: ClassVar[str] = ("Not counted as a saving ({saving_seconds:time} per step): the plan after this fix "
                               "needs about {after_bytes:bytes} per device ({breakdown}{scaled}), up from {now_bytes:bytes} "
                               "and more than the {hbm_bytes:bytes} of HBM on {hardware}, so it would not run.")

    @property
    def breakdown(self) -> str:
        return ", ".join(f"{name} {format_bytes(n)}" for name, n in self.parts)

    @property
    def scaled(self) -> str:
        if not self.batch_axes:
            return "; temporaries grown with every mesh axis that shrinks: the batch's mesh axes are unknown"
        return (f"; temporaries scaled with the tokens per chip over '{self.batch_axes}' and grown with every other "
                "mesh axis that shrinks")


def judge_fit(diagnostics: Sequence[Diagnostic], report: Any, hardware: Any, fraction: float = 1.0, *,
              arrays: Sequence[ArgumentArray] | None = None) -> list[Diagnostic]:
    """The findings with the memory of their fix's plan: `details["fix_memory_bytes"]` (per device) and
    `details["fix_fits"]` for every finding whose fix changes the mesh or the batch; a fix whose plan needs
    more than it does now and more than HBM keeps its time figures in `details` (`unfit_saving_seconds`) but
    is no saving (`saving_seconds` and `alternative_seconds` None), and its message says why.

    Args:
      hardware: the `HardwareSpec` the report was priced on (its `hbm_bytes`).
      fraction: HA401's `fraction` option: the share of HBM a plan may use.
      arrays: the report's array arguments, when already built (`Facts.argument_arrays`); None: built from
        the report when a finding needs them (`argument_arrays`).
    """
    mesh = getattr(report, "mesh", None)
    hbm = float(getattr(hardware, "hbm_bytes", 0.0) or 0.0) * float(fraction)
    if mesh is None or hbm <= 0 or not getattr(report, "memory", None):
        return list(diagnostics)
    now = dict(zip(mesh.axis_names, (int(s) for s in mesh.axis_sizes)))
    out = []
    for d in diagnostics:
        new_mesh = d.details.get("fix_mesh") or {}
        factor = float(d.details.get("fix_batch_factor") or 1.0)
        if not new_mesh and factor == 1.0:
            out.append(d)
            continue
        if arrays is None:
            arrays = argument_arrays(report)
        if not arrays:  # an HLO dump: how its arguments are sharded over the mesh is not known, so no estimate
            out.append(d)
            continue
        est = estimate_memory(report.memory, arrays, now, new_mesh, factor, hbm, tpu_vmem_budget(hardware))
        if est is None:
            out.append(d)
            continue
        details = {**d.details, "fix_memory_bytes": est.after_bytes, "fix_fits": est.fits,
                   "fix_memory_parts": dict(est.parts()), "fix_batch_axes": list(est.batch_axes)}
        if est.fits or est.after_bytes <= est.now_bytes or d.saving_seconds is None:
            out.append(replace(d, details=details))
            continue
        note = FixOverHbm(after_bytes=est.after_bytes, now_bytes=est.now_bytes, hbm_bytes=hbm,
                          hardware=str(getattr(hardware, "name", "chip")), parts=est.parts(),
                          batch_axes=", ".join(est.batch_axes), saving_seconds=float(d.saving_seconds))
        out.append(replace(d, message=f"{d.message} {note.render()}", saving_seconds=None, alternative_seconds=None,
                           details={**details, "unfit_saving_seconds": d.saving_seconds,
                                    "unfit_alternative_seconds": d.alternative_seconds}))
    return out
