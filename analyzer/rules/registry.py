"""The rule registry: what a rule is, which rules exist, and how select/ignore pick among them.

A rule is a plain function from a `RuleContext` (the analysed report, the config, derived facts) to
diagnostics, wrapped by `@rule(...)` into a frozen `Rule` that carries its stable code, kebab-case name,
default severity, options and its doc (the function's docstring: What it does / Why is this bad? /
Example / Use instead / References). Rule modules are listed in `RULE_MODULES`; `all_rules()` imports them
and returns every `Rule` they define, ordered by code.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from analyzer.diagnostics import Diagnostic, Severity
from analyzer.errors import ConfigError, valid_choices
from analyzer.numeric import number_problem

# What a rule is: a function of the `analyzer.rules.context.RuleContext` the runner gives it (its report, config and
# facts) to its findings. Typed by what it returns only: the context, which names the running `Rule`, sits above this
# module and is not imported back.
RuleFunction = Callable[[Any], Iterable[Diagnostic]]

__all__ = [
    "Option",
    "Rule",
    "rule",
    "all_rules",
    "get_rule",
    "is_enabled",
    "check_codes",
    "normalise_rule_options",
    "RULE_MODULES",
    "DOC_SECTIONS",
    "CODE_PATTERN",
]

# Modules that define rules, one per rule family. Order does not matter; codes sort the output.
RULE_MODULES: tuple[str, ...] = (
    "analyzer.rules.matmul",
    "analyzer.rules.compute",
    "analyzer.rules.reduction",
    "analyzer.rules.mesh",
    "analyzer.rules.latency",
    "analyzer.rules.resharding",
    "analyzer.rules.memory",
    "analyzer.rules.budgets",
    "analyzer.rules.meta",
)

# The sections every rule doc has, in order (ruff's layout).
DOC_SECTIONS: tuple[str, ...] = ("What it does", "Why is this bad?", "Example", "Use instead", "References")

CODE_PATTERN = re.compile(r"^HA\d{3}$")
_NAME_PATTERN = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


@dataclass(frozen=True)
class Option:
    """A per-rule threshold a user can set under `[tool.hlo-analyzer.rules.CODE]`.

    Attributes:
      name: snake_case name (written kebab-case in TOML).
      default: the value when not configured.
      doc: one sentence: what it changes, with its unit.
      minimum: smallest valid value (numbers only).
    """

    name: str
    default: Any
    doc: str
    minimum: float | None = 0

    @property
    def toml_name(self) -> str:
        return self.name.replace("_", "-")

    def check(self, value: Any) -> Any:
        """The value converted to the option's type, or ValueError with what is valid."""
        kind = type(self.default)
        if kind is bool:
            if not isinstance(value, bool):
                raise ValueError(f"must be true or false, got {value!r}")
            return value
        if kind in (int, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"must be a number, got {value!r}")
            problem = number_problem(value)  # NaN passed `value < minimum`; inf and denormals too
            if problem is not None:
                raise ValueError(f"must be a finite, normal number: {problem}")
            if kind is int and not float(value).is_integer():
                raise ValueError(f"must be a whole number, got {value!r}")
            if self.minimum is not None and value < self.minimum:
                raise ValueError(f"must be at least {self.minimum}, got {value!r}")
            return kind(value)
        if not isinstance(value, kind):
            raise ValueError(f"must be a {kind.__name__}, got {value!r}")
        return value


@dataclass(frozen=True)
class Rule:
    """One check.

    Attributes:
      code: stable code, `HA` and three digits; the first digit is the family.
      name: kebab-case name.
      severity: default severity of its findings.
      summary: one line for `hlo-analyzer rules`.
      check: the function `RuleContext -> Iterable[Diagnostic]`.
      options: thresholds a user can set.
      predicts_saving: whether its findings are predicted time savings; the runner drops those under the
        configured `min-saving-seconds` / `min-saving-fraction` (budgets, memory and meta rules: False).
    """

    code: str
    name: str
    severity: Severity
    summary: str
    check: RuleFunction
    options: tuple[Option, ...] = ()
    predicts_saving: bool = True

    def __post_init__(self) -> None:
        if not CODE_PATTERN.match(self.code):
            raise ValueError(f"rule code {self.code!r} must look like HA101")
        if not _NAME_PATTERN.match(self.name):
            raise ValueError(f"rule name {self.name!r} must be kebab-case")
        missing = [s for s in DOC_SECTIONS if f"## {s}" not in self.doc]
        if missing:
            raise ValueError(f"rule {self.code} doc lacks sections: {', '.join(missing)}")

    @property
    def doc(self) -> str:
        """The rule's documentation (Markdown): the check function's docstring."""
        return inspect.cleandoc(self.check.__doc__ or "")

    @property
    def family(self) -> str:
        return self.code[:3]

    def option(self, name: str) -> Option:
        for o in self.options:
            if o.name == name:
                return o
        raise KeyError(name)

    def __call__(self, ctx: Any) -> list[Diagnostic]:
        return list(self.check(ctx))


def rule(
    *, code: str, name: str, severity: Severity, summary: str, options: Iterable[Option] = (),
    predicts_saving: bool = True,
) -> Callable[[RuleFunction], Rule]:
    """Declare a rule: `@rule(code="HA101", name="comm-bound-matmul", ...)` over its check function.

    The function's docstring is the rule's doc and must have the sections of `DOC_SECTIONS` as `## `
    headings. The decorated name is the `Rule`. `predicts_saving=False` exempts its findings from the
    runner's negligible-saving filter (a budget or a memory limit is not a saving to weigh).
    """

    def wrap(fn: RuleFunction) -> Rule:
        return Rule(code=code, name=name, severity=Severity(severity), summary=summary, check=fn,
                    options=tuple(options), predicts_saving=predicts_saving)

    return wrap


def all_rules() -> tuple[Rule, ...]:
    """Every registered rule, ordered by code.

    Example:
        >>> [r.code for r in all_rules()][:2]
        ['HA101', 'HA102']
    """
    found: dict[str, Rule] = {}
    for module_name in RULE_MODULES:
        module = importlib.import_module(module_name)
        for value in vars(module).values():
            if isinstance(value, Rule):
                other = found.get(value.code)
                if other is not None and other is not value:
                    raise RuntimeError(f"two rules share code {value.code}: {other.name}, {value.name}")
                found[value.code] = value
    names = [r.name for r in found.values()]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise RuntimeError(f"rule names used twice: {sorted(dupes)}")
    return tuple(found[c] for c in sorted(found))


def get_rule(code_or_name: str) -> Rule:
    """The rule with this code (`HA101`) or name (`comm-bound-matmul`).

    Raises:
      ConfigError: no such rule; the message lists the valid codes.
    """
    key = code_or_name.strip()
    for r in all_rules():
        if key.upper() == r.code or key == r.name:
            return r
    names = {r.name: r.code for r in all_rules()}
    codes = [r.code for r in all_rules()]
    guess = key.upper() if key[:2].lower() == "ha" else key
    hint = valid_choices(guess, codes if guess.startswith("HA") else list(names), what="names")
    err = ConfigError(f"unknown rule {code_or_name!r}; "
                      + (hint if not guess.startswith("HA") else hint.replace("valid names", "valid codes"))
                      + ("" if guess.startswith("HA") else f" (codes: {', '.join(codes)})"))
    err.key = code_or_name
    raise err


def _prefix_len(selector: str, code: str) -> int:
    """How specific `selector` is for `code`: its length when it is a prefix of the code, else -1."""
    return len(selector) if code.startswith(selector) else -1


def is_enabled(code: str, select: Iterable[str], ignore: Iterable[str]) -> bool:
    """Whether a rule runs: selected by some entry and not ignored by a more specific one (ruff semantics).

    Example:
        >>> is_enabled("HA202", ["HA"], ["HA2"]), is_enabled("HA202", ["HA202"], ["HA2"])
        (False, True)
    """
    best_select = max((_prefix_len(s, code) for s in select), default=-1)
    best_ignore = max((_prefix_len(s, code) for s in ignore), default=-1)
    return best_select >= 0 and best_select > best_ignore


def check_codes(entries: Iterable[str], *, key: str, path: str | None = None) -> None:
    """Every entry must be a rule code, a prefix of one (`HA`, `HA1`), or a rule name.

    Raises:
      ConfigError: naming the entry, the key it was under, and the valid codes.
    """
    rules = all_rules()
    codes = [r.code for r in rules]
    for entry in entries:
        if not isinstance(entry, str):
            raise ConfigError(f"{key!r} entries must be strings, got {entry!r}", path=path)
        if any(c.startswith(entry) for c in codes) and entry.startswith("HA"):
            continue
        if any(entry == r.name for r in rules):
            continue
        err = ConfigError(
            f"unknown rule code {entry!r} in {key!r}; "
            + valid_choices(entry, codes, what="codes (or prefixes like 'HA1', or rule names)"),
            path=path,
        )
        err.key = entry
        raise err


def expand_names(entries: Iterable[str]) -> tuple[str, ...]:
    """Rule names in select/ignore lists replaced by their codes; codes and prefixes kept."""
    by_name = {r.name: r.code for r in all_rules()}
    return tuple(by_name.get(e, e) for e in entries)


def normalise_rule_options(
    options: Mapping[str, Mapping[str, Any]], *, path: str | None = None
) -> dict[str, dict[str, Any]]:
    """Per-rule options keyed by code with snake_case option names, each checked against the rule.

    `severity` is accepted for every rule. Keys may be codes or rule names; option names kebab- or
    snake-case.

    Raises:
      ConfigError: an unknown rule, option, or a bad value; the message lists the valid ones.
    """
    out: dict[str, dict[str, Any]] = {}
    for key, opts in options.items():
        r = get_rule(key)
        table = f"tool.hlo-analyzer.rules.{key}"
        checked: dict[str, Any] = {}
        for raw_name, value in dict(opts).items():
            name = raw_name.replace("-", "_")
            if name == "severity":
                try:
                    checked[name] = Severity(value)
                except ValueError:
                    raise _option_error(
                        f"rule {r.code} severity {value!r} is not valid; valid severities: info, warning, error",
                        raw_name, table, path) from None
                continue
            try:
                opt = r.option(name)
            except KeyError:
                valid = [o.toml_name for o in r.options] + ["severity"]
                raise _option_error(
                    f"unknown option {raw_name!r} for rule {r.code} ({r.name}); "
                    + valid_choices(raw_name.replace("_", "-"), valid, what="options"),
                    raw_name, table, path) from None
            try:
                checked[name] = opt.check(value)
            except ValueError as e:
                raise _option_error(f"rule {r.code} option {opt.toml_name!r} {e}", raw_name, table, path) from None
        out.setdefault(r.code, {}).update(checked)
    return out


def _option_error(message: str, key: str, table: str, path: str | None) -> ConfigError:
    err = ConfigError(message, path=path)
    err.key = key
    err.table = table
    return err
