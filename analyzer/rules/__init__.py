"""Plan checks: rules that find cheaper shardings, each with its predicted saving.

    from analyzer.rules import run_rules, all_rules
    diagnostics = run_rules(report, config)     # list[Diagnostic]

Each rule lives in the module of its family (matmul, reduction, mesh, latency, resharding, memory, budgets,
meta) with its doc next to its code; `registry.py` holds the `Rule` type and the list of modules.
"""

from __future__ import annotations

from analyzer.rules.registry import Option, Rule, all_rules, get_rule, is_enabled, rule
from analyzer.rules.runner import (
    RuleResult,
    Suppression,
    apply_rules,
    check_rules,
    run_rules,
    unused_across,
)

__all__ = [
    "Option",
    "Rule",
    "RuleResult",
    "Suppression",
    "all_rules",
    "apply_rules",
    "check_rules",
    "get_rule",
    "is_enabled",
    "rule",
    "run_rules",
    "unused_across",
]
