"""What a rule function receives: the report, the config, the facts, and a way to make diagnostics."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from analyzer.diagnostics import Diagnostic, Location, Severity
from analyzer.rules.messages import Message

if TYPE_CHECKING:
    from analyzer.rules.config import Config
    from analyzer.analysis.report import Report
    from analyzer.rules.facts import Facts, StepSaving
    from analyzer.rules.registry import Rule

__all__ = ["RuleContext"]


@dataclass(frozen=True)
class RuleContext:
    """The input of one rule run.

    Attributes:
      report: the analysed program.
      config: the configuration (thresholds, budgets).
      facts: derived facts shared by all rules (`analyzer.rules.facts.Facts`).
      rule: the rule being run (set by the runner).
    """

    report: Report
    config: Config
    facts: Facts
    rule: Rule | None = field(default=None)

    def option(self, name: str) -> Any:
        """The configured value of the running rule's option `name`, or its default."""
        assert self.rule is not None
        return self.config.option(self.rule.code, name, self.rule.option(name).default)

    def diagnostic(self, message: Message | str, *, location: Location | None = None,
                   step: StepSaving | None = None, **fields: Any) -> Diagnostic:
        """A `Diagnostic` of the running rule, at its configured severity (fields as in `Diagnostic`).

        `message` is a `Message` (analyzer.rules.messages): its text is rendered from its own figures and the
        instance is kept as `Diagnostic.finding`. A plain string is taken as the text (meta rules).

        `step` is what the finding's change removes from the predicted step (`Facts.step_saving`): it gives
        the message its step figures (the sentence `Message.in_step` renders), the finding its
        `saving_seconds`, and heads its `details` with the same figures. None: the finding claims no saving.
        """
        assert self.rule is not None
        if step is not None:
            assert "saving_seconds" not in fields, "the saving of a finding with a step is the step's"
            if isinstance(message, Message):
                message = dataclasses.replace(message, **step.fields())
            fields["saving_seconds"] = step.seconds
            fields["details"] = {**step.details(), **fields.get("details", {})}
        explicit = fields.pop("severity", None)
        severity = self.config.option(self.rule.code, "severity", None) or explicit or self.rule.severity
        finding = message if isinstance(message, Message) else None
        text = message.render() if isinstance(message, Message) else message
        return Diagnostic(code=self.rule.code, name=self.rule.name, message=text,
                          severity=Severity(severity), location=location or Location(), finding=finding, **fields)
