"""Meta rules: about the checking itself (suppressions that hide nothing, rules that failed)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from analyzer.diagnostics import Diagnostic, Severity
from analyzer.rules.context import RuleContext
from analyzer.rules.registry import rule

__all__ = ["rule_failed", "unused_suppression"]


@rule(code="HA900", name="rule-failed", severity=Severity.WARNING,
      summary="A rule raised an error on this program; its findings are missing.", predicts_saving=False)
def rule_failed(ctx: RuleContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports a rule that failed on the program (the runner adds it; the rule's own findings are missing
    while the other rules' are kept).

    ## Why is this bad?
    A silent failure would look like a clean program. So the command line also exits 2 (an internal
    error) and says so on stderr, and `hlo-analyzer --debug ...` lets the rule's exception propagate with
    its traceback.

    ## Example
    `HA102 (gathered-larger-operand) failed on this program: KeyError: 'dot.3'`.

    ## Use instead
    Report it with the HLO dump; meanwhile `ignore = ["HA102"]` silences it on purpose.

    ## References
    The ruff convention of reporting rule panics instead of hiding them.
    """
    return iter(())


@rule(code="HA901", name="unused-suppression", severity=Severity.WARNING,
      summary="An ignore entry, inline comment or baseline entry that suppresses nothing.", predicts_saving=False)
def unused_suppression(ctx: RuleContext, unused: Iterable[Any] = ()) -> Iterator[Diagnostic]:
    """## What it does
    Reports suppressions that hid no finding: an `ignore` entry in `[tool.hlo-analyzer]` or in the
    decorator's arguments, a `# hlo-analyzer: ignore[CODE]` comment on a source line, or a baseline entry
    whose finding is gone.

    ## Why is this bad?
    Stale suppressions hide the next real finding of that kind at that place, and make the baseline lie
    about what is accepted. Removing them keeps suppressions auditable.

    ## Example
    ```python
    y = x @ w  # hlo-analyzer: ignore[HA101]   <- nothing fires here any more
    ```

    ## Use instead
    Delete the comment or entry (or rewrite the baseline with `hlo-analyzer check --write-baseline`).

    ## References
    ruff's RUF100 (unused `noqa`); the chapter has none.
    """
    from analyzer.diagnostics import Location

    for s in unused:
        if s.kind == "baseline":
            msg = f"baseline entry {s.where} matches no finding any more"
            fix = "rewrite the baseline (hlo-analyzer check --write-baseline)"
        elif s.kind == "inline":
            msg = f"inline suppression of {s.entry} at {s.where} suppresses nothing"
            fix = f"remove `# hlo-analyzer: ignore[{s.entry}]`"
        else:
            msg = f"ignore entry {s.entry!r} in {s.where} suppresses nothing"
            fix = f"remove {s.entry!r} from ignore"
        loc = s.location or Location()
        yield ctx.diagnostic(msg + ".", location=loc, fix=fix, details={"kind": s.kind, "entry": s.entry})
