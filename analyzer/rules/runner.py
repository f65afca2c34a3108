"""Running the rules over a report: selection, suppressions (config, decorator, inline, baseline) and the
meta rule that reports suppressions which suppress nothing.

    result = check_rules(report, config)
    result.diagnostics     # what the user sees (after every suppression), with HA901 findings added
    result.suppressed      # (diagnostic, why) pairs: auditable
    result.unused          # suppressions that matched nothing
    result.negligible      # findings whose predicted saving is under the configured threshold (dropped)

Two mechanisms apply to every rule alike, so no rule has to do them itself:
  - duplicates: findings of one rule at one user line about one collective (the same `fingerprint()`, e.g.
    a layer's forward and backward loops, or two scanned loops over the same code) become one finding whose
    times and saving are the sums, with the count in its message and `details["merged"]`;
  - negligible savings: a finding of a rule that predicts a saving (`Rule.predicts_saving`) is dropped when
    the saving per step is under `saving_threshold(...)`: the larger of `min-saving-seconds` and
    `min-saving-fraction` of the predicted step (`Totals.step_seconds`, the base the savings are in), or of
    the step's predicted communication when the report has no step (an HLO dump without one, a report
    rebuilt from JSON without one: its savings are then communication savings). A rule's own
    `min-saving-seconds` option, when configured, replaces both. `apply_rules` says in the report's notes how
    many were dropped, and of which base the fraction was taken.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from analyzer.diagnostics import Diagnostic, Location, Severity
from analyzer.rules.registry import Rule, all_rules, expand_names, is_enabled

__all__ = ["RuleResult", "Suppression", "check_rules", "run_rules", "apply_rules", "merge_duplicates",
           "saving_threshold", "split_negligible", "with_context", "negligible_note", "inline_codes", "unused_across",
           "INLINE_PATTERN"]

# `# hlo-analyzer: ignore[HA101, HA3]` (codes or prefixes) or `# hlo-analyzer: ignore` (every rule).
INLINE_PATTERN = re.compile(r"#\s*hlo-analyzer:\s*ignore(?:\[([^\]]*)\])?", re.IGNORECASE)


@dataclass(frozen=True)
class Suppression:
    """One thing that can hide findings: a config/decorator ignore entry, an inline comment, a baseline entry.

    Attributes:
      kind: "config", "inline" or "baseline".
      entry: the code/prefix (config, inline) or the fingerprint (baseline).
      where: where it is written, in words (file and line where known).
      location: for inline comments, the source line.
    """

    kind: str
    entry: str
    where: str
    location: Location | None = None


@dataclass(frozen=True)
class RuleResult:
    """What a rule run found.

    Attributes:
      diagnostics: the findings to show, most severe first, then by saving.
      suppressed: findings hidden, each with the suppression that hid it.
      unused: suppressions that hid nothing (also reported as HA901 findings when HA901 is enabled).
      negligible: findings dropped because their saving per step is under `threshold` (for their rule).
      threshold: the negligible-saving threshold of the run in seconds per step (rules without their own).
      comm_seconds: the step's predicted communication.
      step_seconds: the predicted step when the report has one (its savings are then step savings), else 0.
        `min-saving-fraction` was taken of it when it is over 0, else of `comm_seconds` (`base`).
    """

    diagnostics: tuple[Diagnostic, ...]
    suppressed: tuple[tuple[Diagnostic, Suppression], ...] = ()
    unused: tuple[Suppression, ...] = field(default=())
    negligible: tuple[Diagnostic, ...] = ()
    threshold: float = 0.0
    comm_seconds: float = 0.0
    step_seconds: float = 0.0

    @property
    def base(self) -> tuple[str, float]:
        """(what, seconds) `min-saving-fraction` was taken of: ("predicted step", step) when the report has a
        predicted step, else ("communication", the step's communication).

        Example:
            >>> RuleResult(diagnostics=(), comm_seconds=18.9e-3, step_seconds=63.6e-3).base
            ('predicted step', 0.0636)
            >>> RuleResult(diagnostics=(), comm_seconds=18.9e-3).base
            ('communication', 0.0189)
        """
        if self.step_seconds > 0:
            return "predicted step", self.step_seconds
        return "communication", self.comm_seconds


def inline_codes(file: str | None, line: int | None, cache: dict[str, list[str] | None] | None = None
                 ) -> tuple[str, ...] | None:
    """The codes an inline `# hlo-analyzer: ignore[...]` comment on `file:line` names.

    Returns:
      None when there is no comment (or the file cannot be read); `("HA",)` for a bare `ignore`.
    """
    if not file or not line:
        return None
    cache = cache if cache is not None else {}
    if file not in cache:
        try:
            cache[file] = Path(file).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            cache[file] = None
    lines = cache[file]
    if lines is None or not 0 < line <= len(lines):
        return None
    m = INLINE_PATTERN.search(lines[line - 1])
    if not m:
        return None
    if m.group(1) is None:
        return ("HA",)
    return tuple(c.strip().upper() for c in m.group(1).split(",") if c.strip())


def _order(d: Diagnostic) -> tuple[Any, ...]:
    """Most severe first; then the root cause with the largest summed saving, its findings together, largest
    first (analyzer.rules.rootcause)."""
    cause = float(d.details.get("root_cause_saving") or 0.0)
    return (-Severity(d.severity).rank, -cause, str(d.details.get("root_cause", "")), -(d.saving_seconds or 0.0),
            d.code, str(d.location))


# `hlo-analyzer --debug` sets this: a rule that raises propagates (with its traceback) instead of becoming HA900.
RAISE_RULE_ERRORS = False


def _failed(rule: Rule, error: BaseException) -> Diagnostic:
    """A rule that raised becomes a finding of HA900, so the other rules' findings still reach the user."""
    from analyzer.rules.meta import rule_failed

    where = traceback.extract_tb(error.__traceback__)[-1] if error.__traceback__ else None
    place = f" ({Path(where.filename).name}:{where.lineno})" if where else ""
    return Diagnostic(code=rule_failed.code, name=rule_failed.name, severity=rule_failed.severity,
                      message=f"rule {rule.code} ({rule.name}) failed on this program: "
                              f"{type(error).__name__}: {error}{place}; its findings are missing. "
                              "Please report it with the HLO (`report.analysis.lowered.spmd_hlo`, or the "
                              "--xla_dump_to folder) and the traceback from `hlo-analyzer --debug ...`.",
                      details={"rule": rule.code, "error": f"{type(error).__name__}: {error}"})


def merge_duplicates(diagnostics: Sequence[Diagnostic]) -> list[Diagnostic]:
    """One finding per rule, user line and collective: duplicates merged, their times and savings summed.

    Two findings are duplicates when they share `fingerprint()` (code, user file, notation, HLO opcode)
    and the user line: the same advice about the same collective from the same code, found again in
    another loop (forward and backward, two scans) or for another dot of the same line. Their messages
    may differ in figures; the most costly one is kept, with `seconds`, `alternative_seconds` and
    `saving_seconds` summed, the most severe severity, and `details["merged"]` (how many) and
    `details["merged_instructions"]`. The fingerprint is unchanged, so baselines keep matching.

    Example:
        >>> d = Diagnostic("HA301", "latency-bound-collectives", "2 small all-reduces", saving_seconds=8e-6,
        ...                seconds=16e-6, alternative_seconds=8e-6, location=Location("m.py", 3))
        >>> [(m.details["merged"], m.saving_seconds) for m in merge_duplicates([d, d])]
        [(2, 1.6e-05)]
    """
    groups: dict[tuple[str, int], list[Diagnostic]] = {}
    for d in diagnostics:
        groups.setdefault((d.fingerprint(), d.location.line or 0), []).append(d)
    out: list[Diagnostic] = []
    for members in groups.values():
        if len(members) == 1:
            out.append(members[0])
            continue
        main = max(members, key=lambda m: (m.saving_seconds or 0.0, m.seconds or 0.0))
        n = len(members)

        def total(attr: str, members: list[Diagnostic] = members) -> float | None:
            values = [getattr(m, attr) for m in members]
            return None if any(v is None for v in values) else float(sum(values))

        severity = max((Severity(m.severity) for m in members), key=lambda s: s.rank)
        instructions = [m.location.instruction for m in members if m.location.instruction]
        how = (f" Found {n} times at this line for this collective (e.g. forward and backward loops); "
               "the times and the saving are the sums." if main.saving_seconds is not None
               else f" Found {n} times at this line for this collective.")
        out.append(replace(
            main, severity=severity, message=main.message + how,
            seconds=total("seconds"), alternative_seconds=total("alternative_seconds"),
            saving_seconds=total("saving_seconds"),
            details={**main.details, "merged": n, "merged_instructions": instructions},
        ))
    return out


def with_context(diagnostics: Sequence[Diagnostic], report: Any) -> list[Diagnostic]:
    """The findings with `Location.context` (the library frame their user line called into) filled from the
    report's collectives table, matched by HLO instruction; findings about other things are unchanged."""
    frame = getattr(report, "collectives", None)
    if frame is None or not len(frame) or "context" not in frame or "instruction" not in frame:
        return list(diagnostics)
    by_instruction: dict[str, str] = {}
    for names, context in zip(frame["instruction"].tolist(), frame["context"].tolist()):
        if isinstance(context, str) and context:
            for name in str(names or "").split(","):
                by_instruction.setdefault(name, context)
    out = []
    for d in diagnostics:
        loc = d.location
        context = by_instruction.get(loc.instruction or "") if not loc.context else None
        out.append(replace(d, location=replace(loc, context=context)) if context else d)
    return out


def saving_threshold(rule: Rule, config: Any, base_seconds: float) -> float | None:
    """Seconds per step under which a finding of `rule` is negligible; None when the rule is exempt.

    Args:
      rule: the rule (exempt when `rule.predicts_saving` is False: budgets, memory, meta).
      config: the `Config`: `min_saving_seconds`, `min_saving_fraction`, and the rule's own
        `min_saving_seconds` option, which replaces both when configured.
      base_seconds: what `min_saving_fraction` is a fraction of: the predicted step when the report has one,
        else the step's predicted communication (`RuleResult.base`).

    Example:
        >>> from analyzer.rules.config import Config
        >>> from analyzer.rules.registry import get_rule
        >>> round(saving_threshold(get_rule("HA301"), Config(), 63.6e-3), 9)   # 1% of a 63.6 ms step beats 10 us
        0.000636
        >>> saving_threshold(get_rule("HA501"), Config(), 63.6e-3) is None
        True
    """
    if not rule.predicts_saving:
        return None
    own = config.rules.get(rule.code, {}).get("min_saving_seconds")
    if own is not None:
        return float(own)
    return max(float(config.min_saving_seconds), float(config.min_saving_fraction) * max(base_seconds, 0.0))


def split_negligible(diagnostics: Sequence[Diagnostic], config: Any, base_seconds: float, report: Any = None
                     ) -> tuple[list[Diagnostic], list[Diagnostic]]:
    """(kept, negligible): findings whose root cause saves less per step than their rule's threshold.

    `base_seconds` is what `min-saving-fraction` is taken of (`saving_threshold`): the predicted step when the
    report has one, else its communication.

    The threshold applies to the summed saving of the root cause a finding belongs to
    (`analyzer.rules.rootcause`): eleven 0.5% instances of one bad layout are kept together, as the 5.5% they
    are. A finding without a predicted saving (`saving_seconds` None) is always kept.
    """
    from analyzer.rules.registry import get_rule
    from analyzer.rules.rootcause import split_negligible_groups

    thresholds: dict[str, float | None] = {}

    def threshold_of(code: str) -> float | None:
        if code not in thresholds:
            try:
                thresholds[code] = saving_threshold(get_rule(code), config, base_seconds)
            except Exception:  # noqa: BLE001 - a code no rule owns (e.g. written by hand): never dropped
                thresholds[code] = None
        return thresholds[code]

    kept, dropped = split_negligible_groups(diagnostics, report, threshold_of)
    order = {id(d): i for i, d in enumerate(diagnostics)}
    return sorted(kept, key=lambda d: order[id(d)]), sorted(dropped, key=lambda d: order[id(d)])


def negligible_note(result: RuleResult) -> str | None:
    """A sentence for the report's notes: how many findings were dropped as negligible, and by what rule.

    Example:
        >>> small = (Diagnostic("HA202", "missing-wraparound", "", saving_seconds=2e-6),)
        >>> negligible_note(RuleResult(diagnostics=(), negligible=small, threshold=6.36e-4, comm_seconds=23.8e-3,
        ...                            step_seconds=63.6e-3))
        '1 finding dropped as negligible (HA202 x1; savings under 636 µs per step: the larger of min-saving-seconds and min-saving-fraction of 63.6 ms predicted step; set them under [tool.hlo-analyzer] to see them).'
        >>> negligible_note(RuleResult(diagnostics=(), negligible=small, threshold=1.89e-4, comm_seconds=18.9e-3))
        '1 finding dropped as negligible (HA202 x1; savings under 189 µs per step: the larger of min-saving-seconds and min-saving-fraction of 18.9 ms of communication; set them under [tool.hlo-analyzer] to see them).'
    """
    if not result.negligible:
        return None
    from collections import Counter

    from analyzer.rules.common import fmt_s

    n = len(result.negligible)
    by_code = ", ".join(f"{code} x{k}" for code, k in sorted(Counter(d.code for d in result.negligible).items()))
    what, seconds = result.base
    base = f"{fmt_s(seconds)} predicted step" if what == "predicted step" else f"{fmt_s(seconds)} of {what}"
    return (f"{n} finding{'s' if n != 1 else ''} dropped as negligible ({by_code}; savings under "
            f"{fmt_s(result.threshold)} per step: the larger of min-saving-seconds and min-saving-fraction of "
            f"{base}; set them under [tool.hlo-analyzer] to see them).")


def check_rules(report: Any, config: Any = None) -> RuleResult:
    """Run every enabled rule over `report` and apply the suppressions.

    Args:
      report: an `analyzer.analysis.report.Report`.
      config: an `analyzer.rules.config.Config`, or anything `as_config` takes (a dict of
        `[tool.hlo-analyzer]` keys; None: the defaults). Its `baseline` path, when set, is read.

    Returns:
      a `RuleResult`.
    """
    return _check_rules(report, config)


def _check_rules(report: Any, config: Any) -> RuleResult:
    from analyzer.rules.config import as_config
    from analyzer.rules.context import RuleContext
    from analyzer.rules.facts import Facts
    from analyzer.rules.fit import judge_fit
    from analyzer.rules.meta import unused_suppression
    from analyzer.rules.rootcause import annotate

    config = as_config(config)
    select = expand_names(config.select)
    ignore = expand_names(config.ignore)
    facts = Facts.from_report(report)
    base = RuleContext(report=report, config=config, facts=facts)

    raw = merge_duplicates(with_context(_run_selected(base, select), report))
    # A fix whose plan no longer fits in HBM is no saving (analyzer.rules.fit), before anything weighs savings
    raw = judge_fit(raw, report, facts.hardware, float(config.option("HA401", "fraction", 1.0)),
                    arrays=facts.argument_arrays)
    ledger = _Ledger()
    kept = ledger.config_ignores(raw, select, ignore, config)
    kept = ledger.inline_comments(kept, facts.module)
    final = ledger.baseline(kept, config)
    unused = ledger.unused(ignore, select, config)

    totals = getattr(report, "totals", None)
    comm = float(getattr(totals, "comm_seconds", 0.0) or 0.0)
    # The fraction is of the base the savings are in (docs/rules.md, "Savings in step time"): the predicted
    # step when the report has one, else the communication (savings are then communication savings).
    step = float(getattr(totals, "step_seconds", 0.0) or 0.0) if facts.step_known else 0.0
    base_seconds = step if step > 0 else comm
    # Judged by root cause: one decision's many small findings stand or fall together (analyzer.rules.rootcause)
    final, negligible = split_negligible(final, config, base_seconds, report=report)
    if is_enabled(unused_suppression.code, select, ignore):
        ctx = replace(base, rule=unused_suppression)
        final.extend(unused_suppression.check(ctx, unused))  # type: ignore[call-arg]
    final = annotate(final, report)
    final.sort(key=_order)
    return RuleResult(diagnostics=tuple(final), suppressed=tuple(ledger.suppressed), unused=tuple(unused),
                      negligible=tuple(negligible), threshold=max(config.min_saving_seconds,
                                                                   config.min_saving_fraction * base_seconds),
                      comm_seconds=comm, step_seconds=step)


def _run_selected(base: Any, select: Sequence[str]) -> list[Diagnostic]:
    """The findings of every selected rule (config-ignored ones run too, to tell used ignores from unused); a
    rule that raises gives its HA900 finding instead of hiding the others' findings."""
    from analyzer.rules.meta import rule_failed, unused_suppression

    raw: list[Diagnostic] = []
    for r in all_rules():
        if r.code in (rule_failed.code, unused_suppression.code) or not is_enabled(r.code, select, ()):
            continue
        try:
            raw.extend(r(replace(base, rule=r)))
        except Exception as e:  # noqa: BLE001 - one broken rule must not hide the others' findings
            if RAISE_RULE_ERRORS:
                raise
            raw.append(_failed(r, e))
    return raw


@dataclass
class _Ledger:
    """The suppressions of one run, applied in turn (config ignores, inline comments, the baseline): what each
    hid (`suppressed`), which entries hid something (`used`), and the ones in place (`inline_seen`, the baseline's
    stale entries) from which the unused ones are told."""

    suppressed: list[tuple[Diagnostic, Suppression]] = field(default_factory=list)
    used: set[tuple[str, str]] = field(default_factory=set)
    inline_seen: dict[tuple[str, int, str], Suppression] = field(default_factory=dict)
    stale_baseline: list[Suppression] = field(default_factory=list)
    _comments: dict[str, list[str] | None] = field(default_factory=dict)

    def config_ignores(self, raw: list[Diagnostic], select: Sequence[str], ignore: Sequence[str],
                       config: Any) -> list[Diagnostic]:
        """The findings the config's `ignore` (or `select`) keeps; the rest suppressed by the longest entry."""
        from analyzer.rules.meta import rule_failed

        kept: list[Diagnostic] = []
        for d in raw:
            if d.code != rule_failed.code and not is_enabled(d.code, select, ignore):
                entry = max((s for s in ignore if d.code.startswith(s)), key=len)
                self.suppressed.append((d, Suppression("config", entry, config.where(entry))))
                self.used.add(("config", entry))
            else:
                kept.append(d)
        return kept

    def inline_comments(self, kept: list[Diagnostic], module: Any) -> list[Diagnostic]:
        """The findings no `# hlo-analyzer: ignore[...]` comment on their line hides. Comments on every line this
        program's ops come from are noted too, whether or not a finding points there, so a comment that no
        longer hides anything is found."""
        out: list[Diagnostic] = []
        for d in kept:
            file, line = d.location.file or "", d.location.line or 0
            codes = inline_codes(d.location.file, d.location.line, self._comments) or ()
            for c in codes:
                self.inline_seen.setdefault((file, line, c), Suppression(
                    "inline", c, f"{d.location.file}:{d.location.line}",
                    Location(file=d.location.file, line=d.location.line)))
            hit = next((c for c in codes if d.code.startswith(c)), None)
            if hit is None:
                out.append(d)
                continue
            self.suppressed.append((d, self.inline_seen[(file, line, hit)]))
            self.used.add(("inline", f"{file}:{line}:{hit}"))
        for file, line in _program_lines(module):
            for c in inline_codes(file, line, self._comments) or ():
                self.inline_seen.setdefault((file, line, c), Suppression("inline", c, f"{file}:{line}",
                                                                         Location(file=file, line=line)))
        return out

    def baseline(self, kept: list[Diagnostic], config: Any) -> list[Diagnostic]:
        """The findings the config's baseline file (when it exists) does not accept."""
        from analyzer.rules.baseline import read_baseline

        if not config.baseline:
            return kept
        path = Path(config.baseline)
        if not path.is_absolute() and config.path:
            path = Path(config.path).parent / path
        if not path.exists():
            return kept
        baseline = read_baseline(path, tolerance=config.baseline_tolerance)
        final, accepted, stale = baseline.split(kept)
        for d in accepted:
            self.suppressed.append((d, Suppression("baseline", d.fingerprint(), str(path))))
        self.stale_baseline = [Suppression("baseline", fp, f"{path}: {baseline.descriptions.get(fp, fp)}")
                               for fp in stale]
        return final

    def unused(self, ignore: Sequence[str], select: Sequence[str], config: Any) -> list[Suppression]:
        """The suppressions that hid nothing: config entries, inline comments, stale baseline entries."""
        from analyzer.rules.meta import unused_suppression

        meta = unused_suppression.code
        unused: list[Suppression] = []
        for entry in ignore:
            if entry in (meta,) or meta.startswith(entry) and len(entry) < len(meta):
                continue  # ignoring the meta rule itself, or a whole family containing it, is never "unused"
            if ("config", entry) not in self.used and is_enabled_any(entry, select):
                unused.append(Suppression("config", entry, config.where(entry)))
        for (file, line, code), s in self.inline_seen.items():
            if ("inline", f"{file}:{line}:{code}") not in self.used:
                unused.append(s)
        return unused + self.stale_baseline


def _program_lines(module: Any) -> set[tuple[str, int]]:
    """(file, line) of every user source line the module's ops point at (stack frames and metadata)."""
    out: set[tuple[str, int]] = set()
    if module is None:
        return out
    for frame in getattr(module, "frames", {}).values():
        if frame.file and frame.line and _is_user_file(frame.file):
            out.add((frame.file, frame.line))
    return out


def _is_user_file(file: str) -> bool:
    return not any(part in file for part in ("site-packages", "/jax/", "/jaxlib/", "<frozen"))


def is_enabled_any(prefix: str, select: Sequence[str]) -> bool:
    """Whether an ignore entry could apply to some selected rule (else it is not worth reporting)."""
    return any(is_enabled(r.code, select, ()) and r.code.startswith(prefix) for r in all_rules())


def run_rules(report: Any, config: Any = None) -> list[Diagnostic]:
    """The findings of every enabled rule on `report`, after suppressions, most severe first.

    This is what `analyzer.analyze` calls at its end. `check_rules` gives the suppressed findings too.

    Example:
        >>> diagnostics = run_rules(report)              # doctest: +SKIP
        >>> [(d.code, d.saving_seconds) for d in diagnostics]  # doctest: +SKIP
        [('HA102', 0.00012)]
    """
    return list(check_rules(report, config).diagnostics)


def apply_rules(report: Any, config: Any = None) -> Any:
    """`report` with the rules' findings attached and a note saying how many were dropped as negligible.

    Example:
        >>> report = apply_rules(analyzer.analyze(step, *args, mesh=mesh))   # doctest: +SKIP
        >>> report.notes[-1]                                                 # doctest: +SKIP
        '2 findings dropped as negligible (HA101 x1, HA301 x1; savings under 636 µs per step: ...).'
    """
    from dataclasses import replace as _replace

    result = check_rules(report, config)
    notes = [n for n in getattr(report, "notes", ()) if "dropped as negligible" not in n]
    note = negligible_note(result)
    if note:
        notes.append(note)
    return _replace(report, diagnostics=tuple(result.diagnostics), notes=tuple(notes))


def unused_across(results: Sequence[RuleResult]) -> tuple[Suppression, ...]:
    """Suppressions unused by every one of several rule runs (e.g. the entry points `check` compiles).

    A config `ignore` entry that hides a finding in one entry point is used, even if the others never
    needed it; run each entry with HA901 deselected and report these instead.

    Example:
        >>> unused_across([check_rules(r1, cfg), check_rules(r2, cfg)])  # doctest: +SKIP
        (Suppression(kind='config', entry='HA202', where='pyproject.toml [tool.hlo-analyzer]'),)
    """
    if not results:
        return ()
    keys = [{(s.kind, s.entry, s.where) for s in r.unused} for r in results]
    common = set.intersection(*keys)
    seen: set[tuple[str, str, str]] = set()
    out = []
    for s in results[0].unused:
        k = (s.kind, s.entry, s.where)
        if k in common and k not in seen:
            seen.add(k)
            out.append(s)
    return tuple(out)
