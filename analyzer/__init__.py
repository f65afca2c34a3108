"""hlo-analyzer: the communication XLA inserts into sharded JAX programs, in the notation of
"How to Scale Your Model", priced on a hardware model.

    import analyzer
    m = analyzer.parse_hlo(text)
    r = analyzer.analyze(fn, *args, mesh=mesh, target="cpu", hardware="tpu-v5e")
    r.collectives   # one row per collective XLA inserted
    r.diagnostics   # cheaper plans the rules found

Importing `analyzer` is cheap: jax, pandas and Lark load when the names that need them are first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from analyzer.errors import (
    AnalyzerError,
    ConfigError,
    HardwareError,
    HloSemanticError,
    HloSyntaxError,
    LoweringError,
    MeshError,
    ShardingError,
)
from analyzer.version import __version__

# Public name -> module that defines it. Loaded on first access (PEP 562).
_LAZY: dict[str, str] = {
    "parse_hlo": "analyzer.hlo.parser",
    "HloModule": "analyzer.hlo.ir",
    "analyze": "analyzer.pipeline",
    "analyze_hlo": "analyzer.pipeline",
    "reprice": "analyzer.pipeline",
    "Report": "analyzer.analysis.report",
    "Diagnostic": "analyzer.diagnostics",
    "Severity": "analyzer.diagnostics",
    "audit": "analyzer.workflows.auditing",
    "AuditError": "analyzer.workflows.auditing",
    "AuditWarning": "analyzer.workflows.auditing",
    "Notation": "analyzer.theory.notation",
    "load_hardware": "analyzer.theory.hardware",
    "list_hardware": "analyzer.theory.hardware",
    "collective_cost": "analyzer.theory.cost",
    "Topology": "analyzer.theory.topology",
}

__all__ = [
    "__version__",
    "AnalyzerError",
    "HloSyntaxError",
    "HloSemanticError",
    "ShardingError",
    "HardwareError",
    "ConfigError",
    "MeshError",
    "LoweringError",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'analyzer' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # pragma: no cover
    from analyzer.pipeline import analyze, analyze_hlo, reprice
    from analyzer.workflows.auditing import AuditError, AuditWarning, audit
    from analyzer.diagnostics import Diagnostic, Severity
    from analyzer.theory.cost import collective_cost
    from analyzer.theory.hardware import list_hardware, load_hardware
    from analyzer.theory.topology import Topology
    from analyzer.hlo.ir import HloModule
    from analyzer.hlo.parser import parse_hlo
    from analyzer.theory.notation import Notation
    from analyzer.analysis.report import Report
