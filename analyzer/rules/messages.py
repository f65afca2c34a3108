"""Findings as data: one small frozen class per kind of message, with its template and its figures.

Like pyflakes' `messages.py` (a class per message, its arguments as attributes) and ruff's violations (a
struct per violation that renders its own text): a rule builds the finding's *fields* (seconds, bytes,
quantities, axis names) and the text is rendered from those fields only, so a message can never state a
number the finding does not carry, and never two different numbers for the same thing.

Templates are `str.format` strings over the fields, with two extra format specs for the units a person
reads: `{x:time}` (`format_seconds`: "23.3 us", "1.20 ms") and `{x:bytes}` (`format_bytes`: "34.0 MB").
Every other spec is Python's (`{x:,.0f}`, `{x:.2f}`). A field may be a property of the class when the
text needs a derived figure (a ratio, a saving): it is then computed from the other fields, never passed.

Savings are in step time (docs/rules.md, "Savings in step time"): a message about a change that makes some
collectives cheaper carries `comm_saving` (what the change removes from the links per step), `exposed_seconds`
(how much of those collectives' time the step waits for) and `step_saving` (what it removes from the step,
the finding's `saving_seconds`), and its text ends with a sentence rendered from these three: a message never
says "saves" about a figure other than the one beside it.

Extending: a new message kind is a subclass with a `template` and its fields; the rule passes an instance
to `RuleContext.diagnostic`, which renders it into `Diagnostic.message` and keeps the instance as
`Diagnostic.finding` (not serialised, not compared) for code that groups or re-words findings. A rule that
predicts a saving passes its `StepSaving` there too (`step=`): that fills the three step fields, the
finding's `saving_seconds` and its `details`.
`Message.fields()` gives the figures as a dict (for JSON `details`).

Example:
    >>> CollectiveCouldScatter(axes="X", seconds=2e-3, alternative_seconds=1e-3, count=4).render()
    'all-reduce over X whose result each device only reads its shard of: a reduce-scatter moves half as much (2.00 ms -> 1.00 ms per call, x4 per step).'
"""

from __future__ import annotations

import dataclasses
import string
from dataclasses import dataclass, field
from typing import Any, ClassVar

from analyzer.units import format_bytes, format_seconds

__all__ = [
    "Message",
    "CommBoundMatmul",
    "GatherCouldBeLocal",
    "ReductionCouldBeGather",
    "CollectiveCouldScatter",
    "IdleAxisLinks",
    "MissingWraparound",
    "SlowLinkCollective",
    "LatencyBoundGroup",
    "LatencyBoundRepeated",
    "ReshardingCollective",
    "FullRematerialization",
    "OverHbm",
    "FixOverHbm",
    "ReplicatedParameter",
    "RedundantCompute",
    "CommBudgetExceeded",
    "CommComputeRatioExceeded",
    "StraddlingAxis",
]


class _Figures(string.Formatter):
    """`str.format` with `time` and `bytes` specs for seconds and byte counts."""

    def format_field(self, value: Any, format_spec: str) -> str:
        if format_spec == "time":
            return format_seconds(value)
        if format_spec == "bytes":
            return format_bytes(value)
        return super().format_field(value, format_spec)


_FORMATTER = _Figures()


@dataclass(frozen=True)
class Message:
    """A finding's text as data: subclasses set `template` and declare the fields it reads."""

    template: ClassVar[str] = ""

    # The change in step time (None: the rule predicts no saving, or the report has no predicted step).
    comm_saving: float | None = field(default=None, kw_only=True)
    exposed_seconds: float | None = field(default=None, kw_only=True)
    step_saving: float | None = field(default=None, kw_only=True)

    def fields(self) -> dict[str, Any]:
        """The figures of this message, by field name."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def render(self) -> str:
        """The text: `template` formatted with the fields (and the class's derived properties), then the
        sentence saying what the change removes from the predicted step (`in_step`)."""
        return _FORMATTER.vformat(self.template, (), _Lookup(self)) + self.in_step

    @property
    def in_step(self) -> str:
        """What the change is worth in the predicted step, from `comm_saving`, `exposed_seconds` and
        `step_saving` ('' without them).

        Example:
            >>> ReshardingCollective(kind="all-to-all", change="x", nbytes=1e6, seconds=1e-3, count=1,
            ...                      comm_saving=1e-3, exposed_seconds=0.0, step_saving=0.0).in_step
            ' In the predicted step this communication runs behind compute (the compute never waits for it), so the change saves no step time.'
        """
        return self._in_step()

    def _in_step(self, where: str = "In the predicted step", what: str = "this communication",
                 plural: bool = False) -> str:
        """`in_step`'s sentence, opening with `where` and naming the communication `what` (a subclass whose
        step figures are another change's says which; `plural` when `what` is)."""
        if self.step_saving is None or self.exposed_seconds is None:
            return ""
        if self.exposed_seconds <= 0:
            run, it = ("run", "them") if plural else ("runs", "it")
            return (f" {where} {what} {run} behind compute (the compute never waits for {it}), so the change saves "
                    "no step time.")
        exposed, saving = format_seconds(self.exposed_seconds), format_seconds(self.step_saving)
        comm = self.comm_saving if self.comm_saving is not None else self.step_saving
        if self.step_saving < comm * (1 - 1e-6):
            return (f" {where} the compute waits {exposed} per step for {what}, so of the {format_seconds(comm)} "
                    f"per step the change takes off the links it saves {saving}.")
        return (f" {where} the compute waits {exposed} per step for {what}, so the change saves all {saving} per "
                "step it takes off the links.")


class _Lookup(dict):  # type: ignore[type-arg]
    """Template names looked up as attributes of the message (fields and properties alike)."""

    def __init__(self, message: Message) -> None:
        super().__init__()
        self.message = message

    def __missing__(self, key: str) -> Any:
        return getattr(self.message, key)


# ------------------------------------------------------------------------------------------------ HA1xx
@dataclass(frozen=True)
class CommBoundMatmul(Message):
    """HA101. `quantity` is what the chapter's roofline compares with C/W (FLOPs / (2 x elements moved):
    the per-chip batch of FSDP, F/Y of Megatron); `threshold` is its compute-bound value on this slice's
    links, `ridge` the chip's C/W_ici."""

    matmuls: int
    roofline: str
    quantity_name: str
    quantity: float
    per_element: str
    axes: str
    threshold: float
    ridge: float
    hardware: str
    t_comm: float
    t_math: float
    listing: str
    all_reduced_contraction: float = 0.0  # F/Y of the one matmul whose output an AllReduce reduces, else 0
    batch_axes: str = ""  # set when the activations it moves are sharded over the batch's own mesh axes
    role: str = ""  # the dot's role (analyzer.analysis.roles): "weight gradient", "moe dispatch/combine", ...
    per_chip_tokens: float = 0.0  # the report's per-chip batch in tokens (one figure per report), 0 unknown
    batch_argument: str = ""  # set when the collective moves the batch argument itself (split on a feature dim)

    template: ClassVar[str] = (
        "{what} communication-bound on the {roofline} roofline{role_text}: {quantity_name} = {quantity:,.0f} "
        "{per_element} '{axes}'{contraction}, below {threshold_text}{tokens_text}. Its collectives take "
        "{t_comm:time} per call against {t_math:time} of FLOPs ({ratio:.1f}x): {listing}.{layout}"
    )

    @property
    def role_text(self) -> str:
        return f" ({self.role})" if self.role else ""

    @property
    def tokens_text(self) -> str:
        """The per-chip batch, where the quantity is not it (FSDP's quantity is the per-chip batch only when the
        collective meets one matmul per token)."""
        if not self.per_chip_tokens or (self.quantity_name.startswith("per-chip batch")
                                        and abs(self.quantity - self.per_chip_tokens) <= 0.01 * self.per_chip_tokens):
            return ""
        return f" (the per-chip batch is {self.per_chip_tokens:,.0f} tokens)"

    @property
    def layout(self) -> str:
        if self.batch_argument:
            return (f" The collective moves the batch argument {self.batch_argument} itself, split over "
                    f"'{self.batch_axes}' on a feature dimension: the batch's layout is the cause, not the split "
                    "between the two strategies.")
        if not self.batch_axes:
            return ""
        return (f" The activations it moves are sharded over '{self.batch_axes}' on a feature dimension, though "
                f"'{self.batch_axes}' is the axis the batch is sharded over: the activations' layout is the cause, not "
                "the split between the two strategies.")

    @property
    def what(self) -> str:
        return "matmul is" if self.matmuls == 1 else f"{self.matmuls} matmuls sharing these collectives are"

    @property
    def ratio(self) -> float:
        return self.t_comm / self.t_math

    @property
    def contraction(self) -> str:
        if not self.all_reduced_contraction:
            return ""
        return (f" (F/Y = {self.all_reduced_contraction:,.0f} features contracted per chip; an AllReduce moves each "
                "element twice)")

    @property
    def threshold_text(self) -> str:
        if abs(self.threshold - self.ridge) <= 0.01 * self.ridge:
            return f"C/W_ici = {self.ridge:,.0f} on {self.hardware}"
        return (f"{self.threshold:,.0f}, its compute-bound value on this slice's links (C/W_ici = {self.ridge:,.0f} "
                f"on {self.hardware} with every link in use)")


@dataclass(frozen=True)
class GatherCouldBeLocal(Message):
    """HA102, gather side: the contracting operand is all-gathered where a local matmul and a reduce-scatter
    of the output would move fewer bytes."""

    gathered_bytes: float
    output_bytes: float
    axes: str
    seconds: float
    alternative_seconds: float
    dot: str

    template: ClassVar[str] = (
        "the plan all-gathers the contracting operand ({gathered_bytes:bytes}) before the matmul; multiplying the "
        "local shards and reduce-scattering the output over {axes} moves {output_bytes:bytes} (ratio {ratio:.1f}, "
        "the M/K of Problem 9): {seconds:time} -> {alternative_seconds:time} per call{for_dot}."
    )

    @property
    def ratio(self) -> float:
        return self.gathered_bytes / self.output_bytes

    @property
    def for_dot(self) -> str:
        return f" for {self.dot}" if self.dot else ""


@dataclass(frozen=True)
class ReductionCouldBeGather(Message):
    """HA102, reduction side: a sliced replicated operand multiplied and the output reduced, where gathering
    the sharded operand moves fewer bytes."""

    reduced_bytes: float
    gathered_bytes: float
    axes: str
    seconds: float
    alternative_seconds: float
    dot: str

    template: ClassVar[str] = (
        "the plan multiplies a sliced replicated operand and reduces the output ({reduced_bytes:bytes}) over {axes}; "
        "all-gathering the sharded operand ({gathered_bytes:bytes}) and multiplying moves {ratio:.1f}x fewer bytes: "
        "{seconds:time} -> {alternative_seconds:time} per call{for_dot}."
    )

    @property
    def ratio(self) -> float:
        return self.reduced_bytes / self.gathered_bytes

    @property
    def for_dot(self) -> str:
        return f" for {self.dot}" if self.dot else ""


@dataclass(frozen=True)
class CollectiveCouldScatter(Message):
    """HA103: an all-reduce whose result each device only reads its shard of."""

    axes: str
    seconds: float
    alternative_seconds: float
    count: float

    template: ClassVar[str] = (
        "all-reduce over {axes} whose result each device only reads its shard of: a reduce-scatter moves half as "
        "much ({seconds:time} -> {alternative_seconds:time} per call, x{count:g} per step)."
    )


# ------------------------------------------------------------------------------------------------ HA2xx
@dataclass(frozen=True)
class IdleAxisLinks(Message):
    """HA201: an all-gather of an array replicated over mesh axes whose links sit idle."""

    axes: str
    idle_axes: str
    new_axes: str
    seconds: float
    alternative_seconds: float
    axes_now: int
    axes_then: int

    template: ClassVar[str] = (
        "all-gather over {axes} of an array replicated over {idle_axes}, whose links sit idle: shard it over "
        "{idle_axes} too and gather over {new_axes} ({seconds:time} -> {alternative_seconds:time} per call, "
        "{axes_then} axes of bandwidth instead of {axes_now})."
    )


@dataclass(frozen=True)
class MissingWraparound(Message):
    """HA202: a mesh axis on a line without wraparound. `seconds` / `alternative_seconds` are per step, for
    this axis's collectives only (the saving is their difference)."""

    axis: str
    chips: int
    collectives: int
    seconds: float
    alternative_seconds: float
    assumed_slice: str = ""
    wraparound_possible: bool = True  # False: no slice of this many chips wraps, so the ring is no saving
    layout: str = ""  # with no ring possible: the slice of the same chips offered instead (its step figures)

    template: ClassVar[str] = (
        "mesh axis '{axis}' ({chips} chips) lies on a line without wraparound, so its {collectives} collective(s) "
        "send one way: {seconds:time} per step, {alternative_seconds:time} on a closed ring ({ratio:.2f}x, "
        "{gain}){assumed}"
    )

    @property
    def gain(self) -> str:
        if self.wraparound_possible:
            return f"{format_seconds(self.saving)} less on the links"
        return "a ring no slice of this size can have, so not a saving"

    @property
    def in_step(self) -> str:
        if self.wraparound_possible:
            return self._in_step()
        # the step figures are those of the other layout of the same chips, not of the ring
        return self._in_step(where=f"Laid on {self.layout} instead (the fix): in the predicted step",
                             what="the collectives it makes cheaper", plural=True)

    @property
    def ratio(self) -> float:
        return self.seconds / self.alternative_seconds

    @property
    def saving(self) -> float:
        return self.seconds - self.alternative_seconds

    @property
    def assumed(self) -> str:
        if self.assumed_slice:
            return f" (on the assumed slice {self.assumed_slice}: pass topology= to check the one you will use)."
        return "."


@dataclass(frozen=True)
class SlowLinkCollective(Message):
    """HA203: a bulk collective over DCN or the GPU scale-out network."""

    kind: str
    nbytes: float
    slow_axes: str
    network: str
    seconds: float
    alternative_seconds: float
    inside: str
    count: float

    template: ClassVar[str] = (
        "{kind} of {nbytes:bytes} over {slow_axes} crosses {network}: {seconds:time} per call against "
        "{alternative_seconds:time} {inside} (x{count:g} per step)."
    )


# ------------------------------------------------------------------------------------------------ HA3xx
@dataclass(frozen=True)
class LatencyBoundGroup(Message):
    """HA301, several: latency-bound collectives of one kind over the same axes that could be one."""

    members: int
    kind: str
    axes: str
    threshold_bytes: float
    hardware: str
    seconds: float
    total_bytes: float
    alternative_seconds: float
    count: float
    before_combiners: bool
    inserted: bool = False  # XLA inserted them (gradient reductions): information, no code of the user's to change

    template: ClassVar[str] = (
        "{members} latency-bound {kind}s over {axes} in one computation (chunks under {threshold_bytes:bytes} per "
        "hop on {hardware}): {seconds:time} per call where one combined {kind} of {total_bytes:bytes} takes "
        "{alternative_seconds:time} (x{count:g} per step){tail}"
    )

    @property
    def tail(self) -> str:
        who = " XLA inserted them (no psum of yours), for information." if self.inserted else ""
        return (" (read before XLA's combiners, which may merge independent ones on TPU and GPU)." + who
                if self.before_combiners else "." + who)


@dataclass(frozen=True)
class LatencyBoundRepeated(Message):
    """HA301, one: a latency-bound collective run many times per step."""

    kind: str
    axes: str
    count: float
    chunk_bytes: float
    threshold_bytes: float
    hardware: str
    seconds: float
    bandwidth_seconds: float

    template: ClassVar[str] = (
        "latency-bound {kind} over {axes} run {count:g} times per step: {chunk_bytes:bytes} per device is under "
        "the {threshold_bytes:bytes} per-hop threshold on {hardware}, so each call costs {seconds:time} where its "
        "bytes alone take {bandwidth_seconds:time} at full bandwidth."
    )


@dataclass(frozen=True)
class ReshardingCollective(Message):
    """HA302: a collective that only changes the layout of an array."""

    kind: str
    change: str
    nbytes: float
    seconds: float
    count: float

    template: ClassVar[str] = "{kind} {change} ({nbytes:bytes}, {seconds:time} per call, x{count:g} per step)."


@dataclass(frozen=True)
class FullRematerialization(Message):
    """HA303: an all-gather whose result each device immediately slices."""

    axes: str
    nbytes: float
    seconds: float
    alternative_seconds: float
    count: float

    template: ClassVar[str] = (
        "all-gather over {axes} of {nbytes:bytes} whose result each device immediately slices: full "
        "rematerialization to reshard ({seconds:time} per call where an all-to-all takes "
        "{alternative_seconds:time}, x{count:g} per step)."
    )


# ------------------------------------------------------------------------------------------------ HA4xx
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


@dataclass(frozen=True)
class RedundantCompute(Message):
    """HA104: chips computing the same part of the model."""

    ops: int
    repeat: float
    redundant_flops: float
    model_flops: float
    saved_seconds: float
    change: str
    axes: str

    template: ClassVar[str] = (
        "the chips repeat each other's work: the matmuls of {ops} source line(s) run up to {repeat:.1f}x their "
        "model FLOPs, "
        "{redundant_flops:.3g} FLOPs per step computed more than once ({share:.0%} of the model's "
        "{model_flops:.3g}); the batch is not split over {where}. Change {change}: each chip then computes its "
        "own part, {saved_seconds:time} less compute per chip per step (the matmuls alone; the change's "
        "own collectives, such as the gradients' reduction over the batch axes, are not priced here)."
    )

    @property
    def share(self) -> float:
        return self.redundant_flops / self.model_flops if self.model_flops > 0 else 0.0

    @property
    def where(self) -> str:
        return self.axes or "every mesh axis it could use"


# ------------------------------------------------------------------------------------------------ HA5xx
@dataclass(frozen=True)
class CommBudgetExceeded(Message):
    """HA501."""

    comm_seconds: float
    budget: float
    largest: str = ""

    template: ClassVar[str] = "predicted communication {comm_seconds:time} per step is over the budget of {budget:time}{top}."

    @property
    def top(self) -> str:
        return f"; largest: {self.largest}" if self.largest else ""


@dataclass(frozen=True)
class CommComputeRatioExceeded(Message):
    """HA502."""

    comm_seconds: float
    compute_seconds: float
    budget: float
    largest: str = ""

    template: ClassVar[str] = (
        "predicted communication is {ratio:.2f}x compute per step ({comm_seconds:time} against "
        "{compute_seconds:time}), over the budget of {budget:g}x{top}."
    )

    @property
    def ratio(self) -> float:
        return self.comm_seconds / self.compute_seconds

    @property
    def top(self) -> str:
        return f"; largest: {self.largest}" if self.largest else ""


@dataclass(frozen=True)
class StraddlingAxis(Message):
    """HA204: a mesh axis that jax.make_mesh laid across several physical axes, where an explicit placement
    of the same mesh on the same slice makes the step's collectives cheaper. `seconds` and
    `alternative_seconds` are every collective of the step (a placement moves every axis), per step."""

    axis: str
    size: int
    physical: str
    axis_collectives: int
    axis_seconds: float
    placement: str
    seconds: float
    alternative_seconds: float
    assumed_slice: str = ""

    template: ClassVar[str] = (
        "mesh axis '{axis}' ({size} chips) straddles physical axes {physical}: jax.make_mesh laid its groups across "
        "them, not on one ring, and its {axis_collectives} collective(s) take {axis_seconds:time} per step. Placed "
        "as {placement}, the step's collectives (every axis) take {alternative_seconds:time} instead of "
        "{seconds:time} ({ratio:.2f}x){assumed}"
    )

    @property
    def assumed(self) -> str:
        if self.assumed_slice:
            return f" (on the assumed slice {self.assumed_slice}: pass topology= to check the one you will use)."
        return "."

    @property
    def ratio(self) -> float:
        return self.seconds / self.alternative_seconds if self.alternative_seconds > 0 else float("inf")
