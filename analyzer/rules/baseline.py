"""Baseline files: findings a team has accepted, so that only new ones fail.

A baseline is JSON keyed by `Diagnostic.fingerprint()` (code, user file, collective notation, jax op: not
line numbers or timings, so edits elsewhere do not invalidate it):

    {"version": 1, "tool": "hlo-analyzer",
     "findings": [{"fingerprint": "...", "code": "HA101", "name": "comm-bound-matmul",
                   "location": "model.py:42", "message": "...", "count": 1, "seconds": 0.0021}]}

`seconds` is the largest predicted cost per step among the findings with that fingerprint when the baseline
was written. A finding that matches an entry but costs more than `seconds * (1 + tolerance)` is new: the
baseline accepted that cost, not any cost at that line (`baseline-tolerance`, default 10%). Entries without
`seconds` (older files) accept any cost.

`write_baseline(path, diagnostics)` writes one; `read_baseline(path)` reads it back as a `Baseline`;
`Baseline.split(diagnostics)` separates new findings from accepted ones and says which entries matched
nothing (stale: reported by the unused-suppression rule).

`update_baseline(path, {entry point: findings})` is what `check --write-baseline` uses: entries carry the
entry point that produced them (`"entry_point": "model.train:step"`), and an update replaces the entries of
the entry points that ran and keeps the others, so `check --write-baseline model/a.py` does not drop what
`model/b.py`'s entry points had accepted. The read-merge-write runs under a lock file and the file is
replaced atomically (analyzer/fileio.py): concurrent writers neither interleave nor lose each other's entries.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from analyzer.diagnostics import Diagnostic
from analyzer.errors import ConfigError
from analyzer.units import format_seconds

__all__ = ["Baseline", "read_baseline", "write_baseline", "update_baseline", "check_overwritable",
           "BASELINE_VERSION"]

BASELINE_VERSION = 1
DEFAULT_TOLERANCE = 0.10  # as analyzer.rules.config.DEFAULT_BASELINE_TOLERANCE (that module imports this one)


@dataclass(frozen=True)
class Baseline:
    """Accepted findings: fingerprint -> how many of them (a program may have two identical findings)."""

    counts: Mapping[str, int] = field(default_factory=dict)
    path: str | None = None
    descriptions: Mapping[str, str] = field(default_factory=dict)
    seconds: Mapping[str, float] = field(default_factory=dict)
    tolerance: float = DEFAULT_TOLERANCE

    def grown(self, d: Diagnostic) -> float | None:
        """How much more `d` costs than its baseline entry accepted, as a fraction (0.5 = 50% more), when that
        is over the tolerance; None when it is within it, or either figure is unknown."""
        accepted = self.seconds.get(d.fingerprint())
        if accepted is None or d.seconds is None or accepted <= 0:
            return None
        growth = d.seconds / accepted - 1.0
        return growth if growth > self.tolerance else None

    def split(self, diagnostics: Sequence[Diagnostic]) -> tuple[list[Diagnostic], list[Diagnostic], list[str]]:
        """(new, accepted, stale fingerprints) for these findings.

        Each entry accepts up to `count` findings with its fingerprint and a cost within the tolerance of its
        `seconds`; any more, or a costlier one, are new. A finding new because it grew says so in its message
        and in `details["baseline_growth"]`.

        Example:
            >>> d = Diagnostic("HA103", "all-reduce-not-reduce-scatter", "m", seconds=11.9e-3)
            >>> b = Baseline({d.fingerprint(): 1}, seconds={d.fingerprint(): 0.12e-3})
            >>> new, accepted, stale = b.split([d])
            >>> len(new), new[0].details["baseline_growth"] > 90
            (1, True)
        """
        left = Counter(self.counts)
        new: list[Diagnostic] = []
        accepted: list[Diagnostic] = []
        for d in diagnostics:
            fp = d.fingerprint()
            growth = self.grown(d) if left.get(fp, 0) > 0 else None
            if growth is not None:
                left[fp] -= 1  # the entry is this finding's, just no longer at this cost
                was = self.seconds[fp]
                new.append(replace(d, message=f"{d.message} Baselined at {format_seconds(was)} per step; now "
                                              f"{format_seconds(d.seconds)} (+{100 * growth:.0f}%, over the "
                                              f"{100 * self.tolerance:.0f}% baseline tolerance).",
                                   details={**d.details, "baseline_growth": growth, "baseline_seconds": was}))
            elif left.get(fp, 0) > 0:
                left[fp] -= 1
                accepted.append(d)
            else:
                new.append(d)
        stale = [fp for fp, n in self.counts.items() if left.get(fp, 0) == n and n > 0]
        return new, accepted, stale


def _entries(diagnostics: Iterable[Diagnostic], entry_point: str | None = None) -> list[dict]:
    """Baseline entries for findings: one per fingerprint, with how many findings share it."""
    counts: Counter[str] = Counter()
    first: dict[str, Diagnostic] = {}
    costliest: dict[str, float] = {}
    for d in diagnostics:
        fp = d.fingerprint()
        counts[fp] += 1
        first.setdefault(fp, d)
        if d.seconds is not None:
            costliest[fp] = max(costliest.get(fp, 0.0), float(d.seconds))
    entries = []
    for fp in sorted(counts):
        entry = {
            "fingerprint": fp,
            "code": first[fp].code,
            "name": first[fp].name,
            "location": str(first[fp].location),
            "message": first[fp].message,
            "count": counts[fp],
            **({"seconds": costliest[fp]} if fp in costliest else {}),
        }
        if entry_point is not None:
            entry["entry_point"] = entry_point
        entries.append(entry)
    return entries


def _dump(path: Path, entries: list[dict]) -> Path:
    """Write entries as a baseline file (sorted, stable, diff-friendly JSON), whole or not at all."""
    from analyzer.fileio import write_atomic

    entries = sorted(entries, key=lambda e: (e.get("entry_point", ""), e["fingerprint"]))
    text = json.dumps({"version": BASELINE_VERSION, "tool": "hlo-analyzer", "findings": entries},
                      indent=2, sort_keys=True) + "\n"
    return write_atomic(path, text, what="baseline")


def write_baseline(path: str | Path, diagnostics: Iterable[Diagnostic]) -> Path:
    """Write the findings as a baseline file (sorted, stable, diff-friendly JSON), replacing any old one.

    Returns:
      the path written.

    Raises:
      OutputError: the file cannot be written (the old one, if any, is unchanged).
    """
    from analyzer.fileio import locked

    p = Path(path)
    with locked(p):
        return _dump(p, _entries(diagnostics))


def update_baseline(
    path: str | Path,
    ran: Mapping[str, Iterable[Diagnostic]],
    *,
    configured: Iterable[str] | None = None,
    complete: bool = False,
) -> tuple[Path, int]:
    """Replace the entries of the entry points that ran; keep every other entry (under a lock file).

    Args:
      path: the baseline file (created when missing).
      ran: entry point name -> its findings, for each entry point analysed in this run.
      configured: the entry points the project lists; entries of entry points no longer listed are dropped.
        None keeps them.
      complete: every configured entry point ran: entries that name no entry point (files written before
        entries carried one) are dropped too. Otherwise such entries are kept unless a finding that ran has
        their fingerprint.

    Returns:
      (the path written, how many entries were kept from other entry points).

    Raises:
      ConfigError: the existing file is not a baseline (JSON of another kind, a config, damaged): it is never
        overwritten.
      OutputError: the file cannot be written or locked.
    """
    from analyzer.fileio import locked

    p = Path(path)
    listed = set(configured) if configured is not None else None
    new = [e for name, diags in ran.items() for e in _entries(diags, name)]
    fresh = {e["fingerprint"] for e in new}
    with locked(p):
        old: list[dict] = []
        if check_overwritable(p):
            old = json.loads(p.read_text(encoding="utf-8"))["findings"]
        kept = []
        for e in old:
            owner = e.get("entry_point")
            if owner is None:
                if complete or e["fingerprint"] in fresh:
                    continue
            elif owner in ran or (listed is not None and owner not in listed):
                continue
            kept.append(e)
        return _dump(p, kept + new), len(kept)


def check_overwritable(path: str | Path) -> bool:
    """Whether a baseline exists at `path`; a `ConfigError` when something else does (a config named by
    mistake, JSON of another kind, a damaged file): that is never overwritten with a baseline."""
    p = Path(path)
    if not p.exists():
        return False
    try:
        read_baseline(p)
    except ConfigError as e:
        raise ConfigError(f"{e.message}; refusing to overwrite it with a baseline (name another file, or delete "
                          "this one if it is a damaged baseline)", path=e.path, line=e.line, column=e.column,
                          source_line=e.source_line) from None
    return True


def read_baseline(path: str | Path, tolerance: float = DEFAULT_TOLERANCE) -> Baseline:
    """Read a baseline file.

    Args:
      path: the file.
      tolerance: how much more (a fraction) a baselined finding may cost before it is new again.

    Raises:
      ConfigError: the file is missing, not JSON, or not a baseline; names the file, the line and what a
        baseline looks like.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read baseline: {e.strerror or e}", path=str(p)) from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"baseline is not UTF-8 text (byte {e.start}: {e.reason}); a baseline is the JSON "
                          "`hlo-analyzer check --write-baseline` writes", path=str(p)) from None
    from analyzer.numeric import loads_finite_json, number_problem

    try:
        data = loads_finite_json(text, path=str(p))  # NaN/Infinity refused at their line
    except json.JSONDecodeError as e:
        lines = text.splitlines()
        raise ConfigError(f"baseline is not JSON: {e.msg}", path=str(p), line=e.lineno, column=e.colno,
                          source_line=lines[e.lineno - 1] if 0 < e.lineno <= len(lines) else None) from None
    expected = '{"version": 1, "tool": "hlo-analyzer", "findings": [{"fingerprint": ..., "count": 1}, ...]}'
    if not isinstance(data, dict) or not isinstance(data.get("findings"), list):
        raise ConfigError(f"not a hlo-analyzer baseline; expected {expected}", path=str(p))
    if data.get("version") != BASELINE_VERSION:
        raise ConfigError(f"baseline version {data.get('version')!r} is not supported; valid versions: "
                          f"{BASELINE_VERSION} (rewrite it with `hlo-analyzer check --write-baseline`)", path=str(p))
    counts: Counter[str] = Counter()
    descriptions: dict[str, str] = {}
    seconds: dict[str, float] = {}
    for k, entry in enumerate(data["findings"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("fingerprint"), str):
            raise ConfigError(f"baseline finding #{k} has no 'fingerprint' string; expected {expected}",
                              path=str(p), line=_line_of(text, k))
        n = entry.get("count", 1)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ConfigError(f"baseline finding #{k} has count {n!r}; it must be a positive whole number",
                              path=str(p), line=_line_of(text, k))
        counts[entry["fingerprint"]] += n
        descriptions[entry["fingerprint"]] = f"{entry.get('code', '?')} at {entry.get('location', '?')}"
        cost = entry.get("seconds")
        if cost is not None:
            if number_problem(cost, minimum=0):
                raise ConfigError(f"baseline finding #{k} has seconds {cost!r}; it must be a number of seconds "
                                  "from 0 up", path=str(p), line=_line_of(text, k))
            seconds[entry["fingerprint"]] = max(seconds.get(entry["fingerprint"], 0.0), float(cost))
    return Baseline(counts=dict(counts), path=str(p), descriptions=descriptions, seconds=seconds,
                    tolerance=tolerance)


def _line_of(text: str, index: int) -> int | None:
    """The line of the index-th `"fingerprint"` key in the text (1-based), if there are that many."""
    seen = -1
    for n, line in enumerate(text.splitlines(), start=1):
        if '"fingerprint"' in line or "{" in line and '"code"' in line:
            seen += 1
            if seen == index:
                return n
    return None
