"""Findings of the plan checks: one `Diagnostic` per rule hit.

Rules (analyzer.rules) build these; renderers (analyzer.render) print them; nothing else creates them.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from typing import Any

__all__ = ["Severity", "Location", "Diagnostic", "short_source"]


def short_source(source: str, cwd: str | None = None) -> str:
    """A `file:line` short enough for a table: relative to the working folder when inside it, else the last
    two path parts.

    Example:
      >>> short_source("/home/me/proj/model/train.py:41", cwd="/home/me/proj")
      'model/train.py:41'
    """
    import os

    if not source or not source.startswith(("/", "\\")) and ":" not in source[:3]:
        return source
    path, sep, line = source.rpartition(":")
    if not sep or not line.isdigit():
        path, line = source, ""
    base = cwd if cwd is not None else os.getcwd()
    try:
        rel = os.path.relpath(path, base)
    except ValueError:  # another drive on Windows
        rel = path
    if rel.startswith(".."):
        parts = path.replace("\\", "/").split("/")
        rel = "…/" + "/".join(parts[-2:]) if len(parts) > 2 else path
    return f"{rel}:{line}" if line else rel


class Severity(str, Enum):
    """How serious a finding is. Ordered: info < warning < error."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

    @property
    def rank(self) -> int:
        return {"info": 0, "warning": 1, "error": 2}[self.value]


@dataclass(frozen=True)
class Location:
    """Where a finding points: the user's source line and the HLO instruction behind it.

    `file:line` is the innermost frame of the user's own code (never an installed package or the standard
    library); `context` names the library frame that line called into, when there is one
    (`in transformers' modeling_flax_llama.py:412`). Fingerprints leave `context` out.
    """

    file: str | None = None
    line: int | None = None
    computation: str | None = None
    instruction: str | None = None
    hlo_line: int | None = None
    context: str | None = None

    def __str__(self) -> str:
        if self.file:
            return f"{self.file}:{self.line}" if self.line else self.file
        if self.instruction:
            return f"%{self.instruction}" + (f" (HLO line {self.hlo_line})" if self.hlo_line else "")
        return "<module>"


@dataclass(frozen=True)
class Diagnostic:
    """One finding.

    Attributes:
      code: stable rule code, e.g. `HA101`.
      name: kebab-case rule name, e.g. `comm-bound-matmul`.
      message: one or two sentences a person can act on, with the figures.
      severity: `Severity`.
      location: `Location` of the user source and HLO instruction.
      notation: the collective (or dot) in the chapter's notation, when the finding is about one.
      seconds: predicted time per step of what was found.
      alternative: what to do instead, in notation or words.
      alternative_seconds: predicted time per step of the alternative.
      saving_seconds: predicted saving per step (seconds - alternative_seconds, or the rule's own estimate).
      fix: the change to make (PartitionSpec, mesh, topology, config).
      details: rule-specific figures for JSON/SARIF consumers.
      finding: the message as data (an `analyzer.rules.messages.Message`: its kind and figures) that
        `message` was rendered from; None for findings made without one. Not serialised, not compared.
    """

    code: str
    name: str
    message: str
    severity: Severity = Severity.WARNING
    location: Location = field(default_factory=Location)
    notation: str | None = None
    seconds: float | None = None
    alternative: str | None = None
    alternative_seconds: float | None = None
    saving_seconds: float | None = None
    fix: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    finding: Any = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(replace(self, finding=None))
        d.pop("finding")
        d["severity"] = self.severity.value
        return d

    def fingerprint(self) -> str:
        """A stable key for baselines: code, user file, the collective in notation, and the HLO opcode.

        Line numbers, HLO instruction numbers (`all-gather.3`) and timings are left out on purpose: they
        change when unrelated code is edited or the compiler renumbers, and a baseline must survive that.
        Two identical findings share a fingerprint; baselines count them.
        """
        loc = self.location
        stem = re.sub(r"(\.\d+)+$", "", loc.instruction or "")
        return "|".join(str(x) for x in (self.code, loc.file or "", self.notation or "", stem))
