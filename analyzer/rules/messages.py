"""Findings as data: the `Message` base class every rule's message kind derives from, with its template
machinery and the sentence that states a saving in step time.

Like pyflakes' messages (a class per message, its arguments as attributes) and ruff's violations (a struct per
violation that renders its own text, defined beside the rule that emits it): a rule builds the finding's
*fields* (seconds, bytes, quantities, axis names) and the text is rendered from those fields only, so a message
can never state a number the finding does not carry, and never two different numbers for the same thing. Each
message kind is a small frozen subclass defined in the module of the rule that emits it, just above that rule
(`CommBoundMatmul` above HA101 in analyzer/rules/matmul.py, `MissingWraparound` above HA202 in
analyzer/rules/mesh.py, `FixOverHbm` in analyzer/rules/fit.py, ...); this module holds only what they share.

Templates are `str.format` strings over the fields, with two extra format specs for the units a person
reads: `{x:time}` (`format_seconds`: "23.3 us", "1.20 ms") and `{x:bytes}` (`format_bytes`: "34.0 MB").
Every other spec is Python's (`{x:,.0f}`, `{x:.2f}`). A field may be a property of the class when the
text needs a derived figure (a ratio, a saving): it is then computed from the other fields, never passed.

Savings are in step time (docs/rules.md, "Savings in step time"): a message about a change that makes some
collectives cheaper carries `comm_saving` (what the change removes from the links per step), `exposed_seconds`
(how much of those collectives' time the step waits for) and `step_saving` (what it removes from the step,
the finding's `saving_seconds`), and its text ends with a sentence rendered from these three: a message never
says "saves" about a figure other than the one beside it.

Extending: a new message kind is a subclass with a `template` and its fields, next to its rule; the rule passes
an instance to `RuleContext.diagnostic`, which renders it into `Diagnostic.message` and keeps the instance as
`Diagnostic.finding` (not serialised, not compared) for code that groups or re-words findings. A rule that
predicts a saving passes its `StepSaving` there too (`step=`): that fills the three step fields, the
finding's `saving_seconds` and its `details`.
`Message.fields()` gives the figures as a dict (for JSON `details`).

Example:
    >>> from analyzer.rules.reduction import CollectiveCouldScatter
    >>> CollectiveCouldScatter(axes="X", seconds=2e-3, alternative_seconds=1e-3, count=4).render()
    'all-reduce over X whose result each device only reads its shard of: a reduce-scatter moves half as much (2.00 ms -> 1.00 ms per call, x4 per step).'
"""

from __future__ import annotations

import dataclasses
import string
from dataclasses import dataclass, field
from typing import Any, ClassVar

from analyzer.units import format_bytes, format_seconds

__all__ = ["Message"]


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
            >>> from analyzer.rules.resharding import ReshardingCollective
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
