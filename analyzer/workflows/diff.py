"""`hlo-analyzer diff OLD NEW`: which collectives a change added, removed or changed, and what it costs.

Each side is one of:
  - an HLO dump (a text file, or an `--xla_dump_to` folder), analysed with `analyze_hlo`;
  - a JSON report (`hlo-analyzer report ... -o r.json`, `Report.to_json()`, docs/report-schema.json);
  - `REV:path`, a file at a git revision: the repository's tree at REV is exported to a temporary folder
    (`git archive`), and the file is analysed there, so the model code is the revision's too. The file is a
    report config (`hlo-analyzer report CONFIG.toml`) or a pyproject.toml whose `[tool.hlo-analyzer]` lists
    entry points; each revision is analysed in its own child process so that the two trees' modules never
    meet in one interpreter.

Collectives are matched between the sides as multisets, in passes from strict to loose: identical (kind,
axes, notation, dtype, bytes, count); then the same kind over the same axes from the same source line or
jax op, which is a *changed* collective (its bytes, count or shape moved); what is left is added or removed.
Time deltas are per step (`total_seconds`: one execution's predicted time x executions per step).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analyzer.errors import AnalyzerError, ConfigError, load_toml

__all__ = [
    "Change",
    "ProgramDiff",
    "Diff",
    "diff_programs",
    "diff_sides",
    "load_side",
    "parse_threshold",
    "Threshold",
]

# Columns a diff reads from each collective row.
_ROW_COLUMNS = ("kind", "axes", "notation", "dtype", "bytes", "count", "seconds", "total_seconds", "op_name",
                "source")


@dataclass(frozen=True)
class Change:
    """One collective in the diff.

    Attributes:
      status: "added", "removed" or "changed".
      old: the row on the old side (None when added).
      new: the row on the new side (None when removed).
    """

    status: str
    old: Mapping[str, Any] | None
    new: Mapping[str, Any] | None

    @property
    def row(self) -> Mapping[str, Any]:
        return self.new if self.new is not None else self.old  # type: ignore[return-value]

    @property
    def delta_seconds(self) -> float:
        """Change in predicted seconds per step (positive: slower)."""
        return _step_seconds(self.new) - _step_seconds(self.old)


@dataclass(frozen=True)
class ProgramDiff:
    """The diff of one program (one entry point, or the single program of a dump or report).

    Attributes:
      name: the program's name.
      changes: added, removed and changed collectives, largest time delta first.
      unchanged: how many collectives matched exactly.
      old_seconds, new_seconds: predicted communication seconds per step on each side.
    """

    name: str
    changes: tuple[Change, ...]
    unchanged: int
    old_seconds: float
    new_seconds: float

    @property
    def delta_seconds(self) -> float:
        return self.new_seconds - self.old_seconds

    def count(self, status: str) -> int:
        return sum(1 for c in self.changes if c.status == status)


@dataclass(frozen=True)
class Diff:
    """A whole diff: one `ProgramDiff` per program found on either side."""

    old_label: str
    new_label: str
    programs: tuple[ProgramDiff, ...]
    only_old: tuple[str, ...] = ()
    only_new: tuple[str, ...] = ()

    @property
    def old_seconds(self) -> float:
        return sum(p.old_seconds for p in self.programs)

    @property
    def new_seconds(self) -> float:
        return sum(p.new_seconds for p in self.programs)


@dataclass(frozen=True)
class Threshold:
    """A regression limit: relative (`5%` of the old time) or absolute seconds per step (`200us`)."""

    value: float
    relative: bool

    def exceeded(self, old: float, new: float) -> bool:
        """Whether going from `old` to `new` seconds per step regresses by more than the limit."""
        delta = new - old
        if self.relative:
            if old <= 0:
                return delta > 0
            return delta / old > self.value
        return delta > self.value

    def __str__(self) -> str:
        from analyzer.units import format_seconds

        return f"{self.value * 100:g}%" if self.relative else format_seconds(self.value)


# Units per second: dividing by a whole number keeps "200us" exactly 0.0002 (200 * 1e-6 is not).
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "µs": 1_000_000, "ns": 1_000_000_000}


def parse_threshold(text: str) -> Threshold:
    """Parse `5%`, `200us`, `1.5ms` or a bare number of seconds.

    Example:
        >>> parse_threshold("5%"), parse_threshold("200us").value
        (Threshold(value=0.05, relative=True), 0.0002)
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(%|s|ms|us|µs|ns)?\s*", text or "")
    if not m:
        raise AnalyzerError(
            f"regression threshold {text!r} is not valid; write a percentage of the old time (5%) or seconds per "
            "step with a unit (200us, 1.5ms, 0.002)"
        )
    value, unit = float(m.group(1)), m.group(2)
    if unit == "%":
        return Threshold(value / 100.0, True)
    return Threshold(value / _PER_SECOND[unit or "s"], False)


# --------------------------------------------------------------------------------------------------------------
# Matching


def _step_seconds(row: Mapping[str, Any] | None) -> float:
    if row is None:
        return 0.0
    total = row.get("total_seconds")
    if total is None:
        seconds = row.get("seconds") or 0.0
        total = seconds * (row.get("count") or 1)
    return float(total or 0.0)


def _axes(row: Mapping[str, Any]) -> tuple:
    return tuple(row.get("axes") or ())


def _exact(row: Mapping[str, Any]) -> tuple:
    return (row.get("kind"), _axes(row), row.get("notation"), row.get("dtype"), row.get("bytes"), row.get("count"))


def _origin(row: Mapping[str, Any]) -> tuple:
    """Where a collective comes from: kind and axes, and the source line (else the jax op without numbering)."""
    origin = row.get("source") or re.sub(r"\d+", "#", row.get("op_name") or "")
    return (row.get("kind"), _axes(row), origin) if origin else ()


def _shape_free(row: Mapping[str, Any]) -> tuple:
    """Kind, axes and the notation with sizes dropped: the same collective on a resized model."""
    return (row.get("kind"), _axes(row), re.sub(r"\d+", "#", row.get("notation") or ""))


def _match(old: list, new: list, key: Callable[[Mapping[str, Any]], tuple]) -> list[tuple[Any, Any]]:
    """Pair rows of `old` and `new` with equal non-empty keys (first come, first paired); removes them."""
    pairs = []
    waiting: dict[tuple, list[int]] = {}
    for i, row in enumerate(old):
        k = key(row)
        if k:
            waiting.setdefault(k, []).append(i)
    used_old, used_new = set(), set()
    for j, row in enumerate(new):
        k = key(row)
        if k and waiting.get(k):
            i = waiting[k].pop(0)
            pairs.append((old[i], row))
            used_old.add(i)
            used_new.add(j)
    old[:] = [r for i, r in enumerate(old) if i not in used_old]
    new[:] = [r for j, r in enumerate(new) if j not in used_new]
    return pairs


def diff_programs(name: str, old_rows: Sequence[Mapping[str, Any]], new_rows: Sequence[Mapping[str, Any]]
                  ) -> ProgramDiff:
    """Diff two programs' collective rows.

    Args:
      name: the program's name.
      old_rows, new_rows: collective rows (report JSON `collectives` entries, or DataFrame records).

    Returns:
      the `ProgramDiff`.

    Example:
        >>> d = diff_programs("step", [], [{"kind": "all-gather", "axes": ["X"], "total_seconds": 1e-4}])
        >>> d.count("added"), d.delta_seconds
        (1, 0.0001)
    """
    old, new = list(old_rows), list(new_rows)
    unchanged = len(_match(old, new, _exact))
    changed = _match(old, new, _origin) + _match(old, new, _shape_free)
    changes = [Change("changed", o, n) for o, n in changed if _exact(o) != _exact(n)]
    unchanged += sum(1 for o, n in changed if _exact(o) == _exact(n))
    changes += [Change("added", None, n) for n in new] + [Change("removed", o, None) for o in old]
    changes.sort(key=lambda c: (-abs(c.delta_seconds), c.status, str(c.row.get("notation"))))
    return ProgramDiff(
        name=name,
        changes=tuple(changes),
        unchanged=unchanged,
        old_seconds=sum(_step_seconds(r) for r in old_rows),
        new_seconds=sum(_step_seconds(r) for r in new_rows),
    )


def diff_sides(old: Mapping[str, Sequence[Mapping[str, Any]]], new: Mapping[str, Sequence[Mapping[str, Any]]],
               *, old_label: str = "old", new_label: str = "new") -> Diff:
    """Diff two sides, each a mapping program name -> collective rows.

    A side with a single program is matched with a single program on the other side whatever their names.
    """
    if len(old) == 1 and len(new) == 1:
        (on, orows), (nn, nrows) = next(iter(old.items())), next(iter(new.items()))
        name = nn if on == nn else f"{on} -> {nn}"
        return Diff(old_label, new_label, (diff_programs(name, orows, nrows),))
    programs = tuple(diff_programs(n, old[n], new[n]) for n in old if n in new)
    return Diff(old_label, new_label, programs,
                only_old=tuple(n for n in old if n not in new), only_new=tuple(n for n in new if n not in old))


# --------------------------------------------------------------------------------------------------------------
# Loading a side


def _rows_of_report_dict(data: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    """The collective rows of a report dict, each checked against the schema's column types."""
    from analyzer.analysis.schema import check_collective_row

    rows = data.get("collectives") if isinstance(data, Mapping) else None
    if not isinstance(rows, list):
        raise ConfigError("not a hlo-analyzer report: it has no 'collectives' list (see docs/report-schema.json)",
                          path=where)
    for i, r in enumerate(rows):
        check_collective_row(r, where=where, index=i)
    return [{c: r.get(c) for c in _ROW_COLUMNS} for r in rows]


def _rows_of_report(report: Any) -> list[dict[str, Any]]:
    from analyzer.render.json import report_to_dict

    return _rows_of_report_dict(report_to_dict(report), report.name or "report")


def _load_json(path: Path) -> dict[str, list[dict[str, Any]]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ConfigError(f"not JSON: {e.msg}", path=str(path), line=e.lineno, column=e.colno) from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"not UTF-8 (byte {e.object[e.start]:#04x} at offset {e.start}); a report is UTF-8 JSON",
                          path=str(path)) from None
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror or e}", path=str(path)) from None
    if isinstance(data, Mapping) and isinstance(data.get("programs"), Mapping):  # our own multi-program form
        return {str(k): _rows_of_report_dict(v, str(path)) for k, v in data["programs"].items()}
    if not isinstance(data, Mapping):
        raise ConfigError("not a hlo-analyzer report (expected a JSON object)", path=str(path))
    return {str(data.get("name") or path.stem): _rows_of_report_dict(data, str(path))}


def _is_git_rev(spec: str) -> bool:
    """`REV:path` (not a Windows drive, not an existing file)."""
    if Path(spec).exists() or ":" not in spec:
        return False
    rev, _, path = spec.partition(":")
    return bool(rev) and bool(path) and not (len(rev) == 1 and rev.isalpha())


def _export_revision(rev: str, repo: Path, into: Path) -> None:
    """Write the repository's tree at `rev` into `into` (git archive | tar), or explain what went wrong."""
    try:
        archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", rev], capture_output=True,
                                 check=False)
    except FileNotFoundError:
        raise AnalyzerError("`git` is not installed; REV:path sides need it") from None
    if archive.returncode != 0:
        msg = archive.stderr.decode(errors="replace").strip().splitlines()
        raise AnalyzerError(f"cannot read git revision {rev!r} in {repo}: {msg[-1] if msg else 'git archive failed'}")
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")


def _repo_root(start: Path) -> Path:
    out = subprocess.run(["git", "-C", str(start), "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        raise AnalyzerError(f"{start} is not inside a git repository; REV:path sides need one")
    return Path(out.stdout.strip())


def _analyse_config_in_child(config: Path, options: Mapping[str, Any], timeout: float | None,
                             label: str | None = None) -> dict:
    """Run `python -m analyzer.workflows.diff` on a config file in a child process; returns name -> report dict.
    `label` (`REV:path`) replaces the file's temporary path in error messages."""
    job = json.dumps({"config": str(config), **options})
    try:
        proc = subprocess.run([sys.executable, "-m", "analyzer.workflows.diff"], input=job, capture_output=True,
                              text=True, cwd=str(config.parent), timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise AnalyzerError(f"analysing {label or config.name} did not finish within {timeout:g} s") from None
    if proc.returncode != 0:
        # The child's own message (it may span lines: a source line and a caret), else its last line.
        err = proc.stderr.strip()
        start = err.rfind("hlo-analyzer: ")
        message = err[start + len("hlo-analyzer: "):] if start >= 0 else (err.splitlines() or [""])[-1]
        if label:
            message = message.replace(str(config), label)
        raise AnalyzerError(f"analysing {label or config.name}: {message or 'the child process failed'}")
    return json.loads(proc.stdout)


def analyse_config(path: Path, *, hardware: str | None = None) -> dict[str, Any]:
    """Analyse a config file in this process: name -> report dict.

    A pyproject.toml (or any TOML with `[tool.hlo-analyzer]` entry points) gives one program per entry point;
    any other TOML is a report config (`hlo-analyzer report`).
    """
    from analyzer.render.json import report_to_dict

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read config: {e.strerror or e}", path=str(path)) from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"not UTF-8 (byte {e.object[e.start]:#04x} at offset {e.start}); a config is UTF-8 TOML",
                          path=str(path)) from None
    data = load_toml(text, path=str(path))
    if "hlo-analyzer" in data.get("tool", {}):
        from analyzer.workflows.check import analyse_entry, resolve_entry, _on_path
        from analyzer.workflows.config import load_config

        config = load_config(path)
        if hardware:
            config = config.override(hardware=hardware, where="command line")
        if not config.entry_points:
            raise ConfigError("[tool.hlo-analyzer] lists no entry-points to analyse", path=str(path))
        out = {}
        with _on_path(path.parent):
            for name in config.entry_points:
                out[name] = report_to_dict(analyse_entry(resolve_entry(name, path.parent), config))
        return out
    from dataclasses import replace

    from analyzer.pipeline import analyze
    from analyzer.workflows.reportconfig import load_report_config

    rc = load_report_config(path)
    fn, args, kwargs = rc.build()
    report = analyze(fn, *args, mesh=dict(rc.mesh), target=rc.target, hardware=hardware or rc.hardware,
                     topology=None if hardware else rc.topology, config=rc.rules_config(), **kwargs)
    return {rc.title: report_to_dict(replace(report, name=rc.title))}


def load_side(spec: str, *, mesh: str | None = None, hardware: str | None = None, cwd: Path | None = None,
              timeout: float | None = 1800.0) -> dict[str, list[dict[str, Any]]]:
    """Read one side of a diff: program name -> collective rows.

    Args:
      spec: a dump file or folder, a JSON report, or `REV:path`.
      mesh: the mesh of a dump (`data=4,model=2`), so its collectives get the user's axis names.
      hardware: the hardware dumps and configs are priced on (reports keep their own prices).
      cwd: where relative paths and the git repository are looked up (default: the current folder).
      timeout: seconds allowed for analysing a git revision's config.
    """
    cwd = cwd or Path.cwd()
    if _is_git_rev(spec):
        rev, _, rel = spec.partition(":")
        repo = _repo_root(cwd)
        rel_path = Path(rel)
        if rel_path.is_absolute() or (cwd / rel_path).exists() or not (repo / rel_path).exists():
            full = (cwd / rel_path).resolve()
            if not full.is_relative_to(repo.resolve()):
                raise ConfigError(f"{str(full)!r} is outside the git repository {str(repo)!r}; a REV:path side names "
                                  "a report config or pyproject.toml inside it (e.g. HEAD:pyproject.toml)", path=spec)
            rel_path = full.relative_to(repo.resolve())
        with tempfile.TemporaryDirectory(prefix=f"hlo-analyzer-{re.sub(r'[^A-Za-z0-9]+', '-', rev)}-") as tmp:
            _export_revision(rev, repo, Path(tmp))
            config = Path(tmp) / rel_path
            if not config.is_file():
                raise ConfigError(f"no file {rel_path.as_posix()!r} at git revision {rev!r}", path=spec)
            if config.suffix != ".toml":
                raise ConfigError("a REV:path side names a report config or a pyproject.toml (a .toml file) to "
                                  f"analyse at that revision; {rel_path.as_posix()!r} is not one", path=spec)
            programs = _analyse_config_in_child(config, {"hardware": hardware}, timeout, label=spec)
        return {name: _rows_of_report_dict(data, spec) for name, data in programs.items()}
    path = Path(spec)
    if not path.is_absolute():
        path = cwd / path
    if not path.exists():
        raise ConfigError("no such file or folder (a side is a dump, a JSON report, or REV:path)", path=spec)
    if path.is_file() and path.suffix == ".json":
        return _load_json(path)
    if path.is_file() and path.suffix == ".toml":
        return {n: _rows_of_report_dict(d, spec) for n, d in analyse_config(path, hardware=hardware).items()}
    from analyzer.pipeline import analyze_hlo

    report = analyze_hlo(path, mesh=mesh, hardware=hardware or "tpu-v5e")
    return {report.name or path.stem: _rows_of_report(report)}


def _worker_main() -> int:
    """`python -m analyzer.workflows.diff`: analyse the config named on stdin (JSON) and print name -> report dict."""
    job = json.loads(sys.stdin.read())
    try:
        result = analyse_config(Path(job["config"]), hardware=job.get("hardware"))
    except AnalyzerError as e:
        print(f"hlo-analyzer: {e}", file=sys.stderr)
        return 2
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(_worker_main())
