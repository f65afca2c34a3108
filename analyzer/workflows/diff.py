"""`hlo-analyzer diff OLD NEW`: which collectives a change added, removed or changed, and what it costs.

Each side is one of:
  - an HLO dump (a text file, or an `--xla_dump_to` folder), analysed with `analyze_hlo`;
  - a JSON report (`hlo-analyzer report ... -o r.json`, `Report.to_json()`, docs/report-schema.json);
  - `REV:path`, a file at a git revision: the repository's tree at REV is exported to a temporary folder
    (`git archive`), and the file is analysed there, so the model code is the revision's too. The file is a
    report config (`hlo-analyzer report CONFIG.toml`) or a pyproject.toml whose `[tool.hlo-analyzer]` lists
    entry points; each revision is analysed in its own child process so that the two trees' modules never
    meet in one interpreter. REV is resolved to a commit first (`git rev-parse --verify --end-of-options`), so
    a revision that looks like an option (`--output=...`) is refused, never passed to git as one. The path is
    relative to the repository's root, or to the current folder when written `./x` or `../x` or when the
    file is there; it must stay inside the repository. Symbolic links of the tree that point outside it are
    not exported (they could not be followed safely). SIGTERM stops the child and removes the export.

A config side (a config in the working tree, or `REV:path`) is answered from the result cache
(analyzer/workflows/cache.py, docs/workflow.md) when the same analysis is asked again: keyed as `check`'s
entries are (the config as written, `--hardware`, the hardware spec files, the entry points' modules and the
project modules they import by content, versions, the compile environment), and, checked on a hit, every
module file and installed distribution the analysis imported. A revision's key is taken from its export with
the export's folder left out (the files by their paths inside the tree, by content), and the record of what the
analysis imported comes from the child that analysed it, so the same files at another commit hit too. A hit
neither compiles nor imports jax; `--no-cache` turns it off.

Source paths in the rows are relative to the repository root on both sides (the revision's export and the
working tree alike), so a collective matches by its line whatever folder each side was analysed in.

Collectives are matched between the sides as multisets, in passes from strict to loose: identical (kind,
axes, notation, dtype, bytes, count); then the same kind over the same axes from the same source line or
jax op, which is a *changed* collective (its bytes, count or shape moved); what is left is added or removed.
Time deltas are per step (`total_seconds`: one execution's predicted time x executions per step).
"""

from __future__ import annotations

import json
import math
import os
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
    "Side",
    "Change",
    "ProgramDiff",
    "Diff",
    "diff_programs",
    "diff_sides",
    "load_side",
    "parse_threshold",
    "side_label",
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
      why: for an added or grown collective, what changed in the plan between the sides (an argument's
        PartitionSpec, the mesh, a config value, with the changed line of the code), when the sides say.
    """

    status: str
    old: Mapping[str, Any] | None
    new: Mapping[str, Any] | None
    why: str | None = None

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
        if not (math.isfinite(old) and math.isfinite(new)):
            return True  # a figure that is not a number cannot be shown to be within the limit: fail closed
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
    if not math.isfinite(value):
        raise AnalyzerError(f"regression threshold {text!r} is not a finite number; write a percentage of the old "
                            "time (5%) or seconds per step with a unit (200us, 1.5ms, 0.002)")
    if unit == "%":
        return Threshold(value / 100.0, True)
    return Threshold(value / _PER_SECOND[unit or "s"], False)


class Side(dict):
    """One side of a diff: program name -> collective rows, and in `plans` what each program was computed
    for, where the side says: {name: {"plan": the plan (`analyzer.workflows.check.entry_plan`, with "config"),
    "sources": {path relative to the tree's root: text of the project file as that side read it}}}."""

    def __init__(self, rows: Mapping[str, Sequence[Mapping[str, Any]]] = (), plans: Mapping[str, Any] | None = None
                 ) -> None:
        super().__init__(rows)
        self.plans: dict[str, Any] = dict(plans or {})
        # Why the result cache could not keep this side (a read-only folder), to say once; None when it did.
        self.cache_note: str | None = None


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
    Sides that say what their programs were computed for (`Side.plans`) explain each added or grown
    collective (`Change.why`, `explain`).
    """
    if len(old) == 1 and len(new) == 1:
        (on, orows), (nn, nrows) = next(iter(old.items())), next(iter(new.items()))
        name = nn if on == nn else f"{on} -> {nn}"
        pairs = [(on, nn, diff_programs(name, orows, nrows))]
        only_old: tuple[str, ...] = ()
        only_new: tuple[str, ...] = ()
    else:
        pairs = [(n, n, diff_programs(n, old[n], new[n])) for n in old if n in new]
        only_old, only_new = tuple(n for n in old if n not in new), tuple(n for n in new if n not in old)
    old_plans, new_plans = getattr(old, "plans", {}), getattr(new, "plans", {})
    programs = tuple(explain(p, old_plans.get(on), new_plans.get(nn)) for on, nn, p in pairs)
    return Diff(old_label, new_label, programs, only_old=only_old, only_new=only_new)


def explain(program: ProgramDiff, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> ProgramDiff:
    """The program's diff with each added or grown collective's `why`: what changed in the plan between the
    two sides, as `check` says it for a new finding (`analyzer.workflows.check.plan_changes`, one definition).

    Args:
      program: the diff of one program.
      old, new: what each side's program was computed for (`Side.plans` entries), None where a side does not
        say (an HLO dump): then nothing is added.
    """
    if not old or not new:
        return program
    from dataclasses import replace

    from analyzer.workflows.check import changed_files, plan_changes, relevant_changes

    said = plan_changes(old.get("plan") or {}, new.get("plan") or {},
                        changed_files(old.get("sources") or {}, new.get("sources") or {}))
    if not said:
        return program
    changes = tuple(replace(c, why=relevant_changes(said, c.new.get("notation")))
                    if c.new is not None and (c.status == "added" or c.delta_seconds > 0) else c
                    for c in program.changes)
    return replace(program, changes=changes)


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
    from analyzer.analysis.report import report_to_dict

    return _rows_of_report_dict(report_to_dict(report), report.name or "report")


def _load_json(path: Path) -> dict[str, list[dict[str, Any]]]:
    from analyzer.numeric import loads_finite_json
    from analyzer.fileio import check_input

    check_input(path, what="report")
    try:
        data = loads_finite_json(path.read_text(encoding="utf-8"), path=str(path))
    except json.JSONDecodeError as e:
        raise ConfigError(f"not JSON: {e.msg}", path=str(path), line=e.lineno, column=e.colno) from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"not UTF-8 (byte {e.object[e.start]:#04x} at offset {e.start}); a report is UTF-8 JSON",
                          path=str(path)) from None
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror or e}", path=str(path)) from None
    if isinstance(data, Mapping) and isinstance(data.get("programs"), Mapping):  # our own multi-program form
        programs = {str(k): v for k, v in data["programs"].items()}
    elif not isinstance(data, Mapping):
        raise ConfigError("not a hlo-analyzer report (expected a JSON object)", path=str(path))
    else:
        programs = {str(data.get("name") or path.stem): data}
    return Side({k: _rows_of_report_dict(v, str(path)) for k, v in programs.items()},
                {k: {"plan": plan} for k, v in programs.items() if (plan := _report_plan(v))})


def _report_plan(data: Any) -> dict[str, Any] | None:
    """The plan a JSON report was computed for, from its argument table (each argument's sharding in the
    chapter's notation, `[I, J_model]`) and its mesh; None when it has neither."""
    if not isinstance(data, Mapping):
        return None
    arguments = {str(r["name"]): str(r.get("notation") or "") for r in data.get("arguments") or ()
                 if isinstance(r, Mapping) and isinstance(r.get("name"), str)}
    mesh = data.get("mesh") if isinstance(data.get("mesh"), Mapping) else {}
    names, sizes = mesh.get("axis_names") or [], mesh.get("axis_sizes") or []
    if not arguments and not names:
        return None
    return {"form": "notation", "arguments": arguments,
            "mesh": {str(a): n for a, n in zip(names, sizes)} if names else None}


def _is_git_rev(spec: str) -> bool:
    """`REV:path` (not a Windows drive, not an existing file)."""
    if Path(spec).exists() or ":" not in spec:
        return False
    rev, _, path = spec.partition(":")
    return bool(rev) and bool(path) and not (len(rev) == 1 and rev.isalpha())


def _git(repo: Path, *args: str, text: bool = False) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=text, check=False)
    except FileNotFoundError:
        raise AnalyzerError("`git` is not installed; REV:path sides need it") from None


def _resolve_revision(rev: str, repo: Path, spec: str) -> str:
    """The commit `rev` names in `repo` (its full hash), or a ConfigError; never passes `rev` as an option."""
    if not rev or rev.startswith("-") or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in rev):
        raise ConfigError(f"{rev!r} is not a git revision (a branch, tag or commit such as main, HEAD~1, v1.2 or "
                          "a hash; it cannot start with '-')", path=spec)
    out = _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}", text=True)
    sha = out.stdout.strip()
    if out.returncode != 0 or not re.fullmatch(r"[0-9a-f]{40,64}", sha):
        raise ConfigError(f"{rev!r} names no commit of the git repository {str(repo)!r} (a branch, tag or commit "
                          "such as main, HEAD~1, v1.2 or a hash)", path=spec)
    return sha


def _export_revision(sha: str, repo: Path, into: Path, rev: str) -> list[str]:
    """Write the repository's tree at commit `sha` into `into` (git archive, then tar without what would
    leave `into`); the names of the members left out (symbolic links pointing outside the tree)."""
    archive = _git(repo, "archive", "--format=tar", "--end-of-options", sha)
    if archive.returncode != 0:
        msg = archive.stderr.decode(errors="replace").strip().splitlines()
        raise AnalyzerError(f"cannot read git revision {rev!r} in {repo}: {msg[-1] if msg else 'git archive failed'}")
    import io
    import tarfile

    skipped: list[str] = []

    def inside(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
        try:
            return tarfile.data_filter(member, dest)
        except tarfile.FilterError:
            skipped.append(member.name)
            return None

    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter=inside)
    return skipped


def _repo_relative(rel: str, cwd: Path, repo: Path, spec: str) -> str:
    """The path of `REV:rel` relative to the repository root (POSIX), refusing one outside the repository.

    `rel` is relative to the root (git's own rule), or to `cwd` when written `./x`, `../x`, or when it names
    a file there; an absolute path must lie inside the repository. Resolved by name (`..` folded), so
    what $TMPDIR or the export holds never decides it.
    """
    root = repo.resolve()
    here = cwd.resolve()
    p = Path(rel)
    if p.is_absolute():
        full = p
    elif rel in (".", "..") or rel.startswith(("./", "../")) or (here != root and (here / p).is_file()):
        full = here / p
    else:
        full = root / p
    full = Path(os.path.normpath(full))
    if not full.is_relative_to(root) or full == root:
        raise ConfigError(f"{str(full)!r} is outside the git repository {str(root)!r}; a REV:path side names a "
                          "report config or pyproject.toml inside it (e.g. HEAD:pyproject.toml)", path=spec)
    return full.relative_to(root).as_posix()


def _repo_root(start: Path) -> Path:
    out = _git(start, "rev-parse", "--show-toplevel", text=True)
    if out.returncode != 0:
        raise AnalyzerError(f"{start} is not inside a git repository; REV:path sides need one")
    return Path(out.stdout.strip())


def _analyse_config_in_child(config: Path, options: Mapping[str, Any], timeout: float | None,
                             label: str | None = None) -> dict:
    """Run `python -m analyzer.workflows.diff` on a config file in a child process; returns {"programs": name ->
    report dict, "deps": what the analysis imported (`cache.record_dependencies` against the job's "record"
    folder), or None when the job asks for no record}. `label` (`REV:path`) replaces the file's temporary path
    in error messages."""
    job = json.dumps({"config": str(config), **options})
    try:
        proc = subprocess.Popen([sys.executable, "-m", "analyzer.workflows.diff"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(config.parent))
    except OSError as e:
        raise AnalyzerError(f"cannot start the analysis of {label or config.name}: {e.strerror or e}") from None
    try:
        out, err = proc.communicate(job, timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop_child(proc)
        raise AnalyzerError(f"analysing {label or config.name} did not finish within {timeout:g} s") from None
    except BaseException:  # Ctrl-C, SIGTERM: the child cleans up its own temporary folders, then ends
        _stop_child(proc)
        raise
    proc = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if proc.returncode != 0:
        # The child's own message (it may span lines: a source line and a caret), else its last line.
        err = proc.stderr.strip()
        start = err.rfind("hlo-analyzer: ")
        message = err[start + len("hlo-analyzer: "):] if start >= 0 else (err.splitlines() or [""])[-1]
        if label:
            message = message.replace(str(config), label)
        raise AnalyzerError(f"analysing {label or config.name}: {message or 'the child process failed'}")
    return json.loads(proc.stdout)


def _stop_child(proc: subprocess.Popen) -> None:
    """SIGTERM (the child unwinds like Ctrl-C and removes its temporary folders), SIGKILL after 5 s."""
    import contextlib

    with contextlib.suppress(OSError):
        proc.terminate()
    try:
        proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
    except BaseException:
        proc.kill()
        proc.wait()
        raise


def analyse_config(path: Path, *, hardware: str | None = None) -> dict[str, Any]:
    """Analyse a config file in this process: name -> report dict.

    A pyproject.toml (or any TOML with `[tool.hlo-analyzer]` entry points) gives one program per entry point;
    any other TOML is a report config (`hlo-analyzer report`).
    """
    from analyzer.analysis.report import report_to_dict

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
        from analyzer.rules.config import load_config

        config = load_config(path)
        if hardware:
            config = config.override(hardware=hardware, where="command line")
        if not config.entry_points:
            raise ConfigError("[tool.hlo-analyzer] lists no entry-points to analyse", path=str(path))
        from analyzer.workflows.cache import VERDICT_KEYS

        table = {k: v for k, v in data["tool"]["hlo-analyzer"].items() if k not in VERDICT_KEYS}
        out = {}
        with _on_path(path.parent):
            for name in config.entry_points:
                entry = resolve_entry(name, path.parent)
                report = analyse_entry(entry, config)
                out[name] = _with_plan(report_to_dict(report), report, entry, table, path.parent)
        return out
    from dataclasses import replace

    from analyzer.pipeline import analyze
    from analyzer.workflows.check import EntryPoint, resolve_entry
    from analyzer.workflows.reportconfig import load_report_config

    rc = load_report_config(path)
    fn, args, kwargs = rc.build()
    report = analyze(fn, *args, mesh=dict(rc.mesh), target=rc.target, hardware=hardware or rc.hardware,
                     topology=None if hardware else rc.topology, config=rc.rules_config(), **kwargs)
    report = replace(report, name=rc.title)
    entry = resolve_entry(rc._resolved_entry(), path.parent) if rc.entry else EntryPoint(rc.title, None, None)
    settings = {k: v for k, v in data.items() if k not in ("name", "mesh")}
    return {rc.title: _with_plan(report_to_dict(report), report, entry, settings, path.parent)}


def _with_plan(data: dict, report: Any, entry: Any, settings: Mapping[str, Any], root: Path) -> dict:
    """A report dict with what its program was computed for, for explaining a diff (`explain`): "plan" (the
    arguments' PartitionSpecs and the mesh, `check.entry_plan`, and the config's settings) and "sources" (the
    texts of the entry point's module and the project modules it imports, by absolute path; made relative to
    the tree's root by `_relative_sources`)."""
    from analyzer.workflows.check import entry_plan, local_imports

    data["plan"] = dict(entry_plan(report, entry), form="spec", config=json.loads(json.dumps(settings, default=str)))
    sources = {}
    for p in sorted(local_imports(entry.file, root)) if entry.file is not None else ():
        try:
            sources[str(p)] = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    data["sources"] = sources
    return data


def load_side(spec: str, *, mesh: str | None = None, hardware: str | None = None, cwd: Path | None = None,
              timeout: float | None = 1800.0, no_cache: bool = False) -> Side:
    """Read one side of a diff: program name -> collective rows, with what each program was computed for where
    the side says (`Side.plans`: a config analysed here or at a revision, a JSON report's argument table).

    Args:
      spec: a dump file or folder, a JSON report, or `REV:path`.
      mesh: the mesh of a dump (`data=4,model=2`), so its collectives get the user's axis names.
      hardware: the hardware dumps and configs are priced on (reports keep their own prices).
      cwd: where relative paths and the git repository are looked up (default: the current folder).
      timeout: seconds allowed for analysing a git revision's config.
      no_cache: analyse a config side even when the result cache holds it (and store nothing).
    """
    cwd = cwd or Path.cwd()
    if _is_git_rev(spec):
        rev, _, rel = spec.partition(":")
        repo = _repo_root(cwd)
        rel_path = Path(_repo_relative(rel, cwd, repo, spec))
        label = f"{rev}:{rel_path.as_posix()}"
        sha = _resolve_revision(rev, repo, spec)
        with tempfile.TemporaryDirectory(prefix="hlo-analyzer-rev-") as tmp:
            skipped = _export_revision(sha, repo, Path(tmp), rev)
            config = Path(tmp) / rel_path
            if not config.is_file():
                why = (" (a symbolic link pointing outside the repository, not exported)"
                       if rel_path.as_posix() in skipped else "")
                raise ConfigError(f"no file {rel_path.as_posix()!r} at git revision {rev!r}{why}", path=spec)
            if config.suffix != ".toml":
                raise ConfigError("a REV:path side names a report config or a pyproject.toml (a .toml file) to "
                                  f"analyse at that revision; {rel_path.as_posix()!r} is not one", path=spec)
            tree = _project_root(config, top=Path(tmp))
            cached = _open_side_cache(config, tree=tree, home=_project_root(repo / rel_path), hardware=hardware,
                                      no_cache=no_cache, hardware_base=config.parent,
                                      label=f"git export of {repo} at {tree.relative_to(tmp).as_posix() or '.'}")
            programs = cached.lookup() if cached is not None else None
            if programs is None:
                job = {"hardware": hardware, "roots": [tmp, str(repo)],
                       "record": str(tree) if cached is not None else None}
                done = _analyse_config_in_child(config, job, timeout, label=label)
                programs = _reduced(done["programs"])
                if cached is not None and done.get("deps") is not None:
                    cached.store(programs, done["deps"])
        return _noted(_side(programs, label), cached)
    path = Path(spec)
    if not path.is_absolute():
        path = cwd / path
    if not path.exists():
        raise ConfigError("no such file or folder (a side is a dump, a JSON report, or REV:path)", path=spec)
    if path.is_file() and path.suffix == ".json":
        return _load_json(path)
    if path.is_file() and path.suffix == ".toml":
        root = _tree_root(path)
        project = _project_root(path)
        cached = _open_side_cache(path, tree=project, home=project, hardware=hardware, no_cache=no_cache)
        programs = cached.lookup() if cached is not None else None
        if programs is None:
            programs = _reduced({n: _relative_sources(d, root)
                                 for n, d in analyse_config(path, hardware=hardware).items()})
            if cached is not None:
                from analyzer.workflows.cache import record_dependencies

                cached.store(programs, record_dependencies(project))
        return _noted(_side(programs, spec), cached)
    from analyzer.fileio import check_input
    from analyzer.pipeline import analyze_hlo

    check_input(path, what="HLO file")

    report = analyze_hlo(path, mesh=mesh, hardware=hardware or "tpu-v5e")
    return Side({report.name or path.stem: _rows_of_report(report)})


def _side(programs: Mapping[str, dict], where: str) -> Side:
    """A `Side` of analysed programs' report dicts: their rows, and their plans and sources."""
    return Side({name: _rows_of_report_dict(data, where) for name, data in programs.items()},
                {name: {"plan": data.get("plan"), "sources": data.get("sources")} for name, data in programs.items()
                 if data.get("plan") is not None})


# --------------------------------------------------------------------------------------------------------------
# The result cache of config sides


def _reduced(programs: Mapping[str, Any]) -> dict[str, Any]:
    """What a diff reads of each analysed program (its rows' columns, its plan, its sources' texts), as JSON
    gives it back: the same data whether computed now or read from the cache."""
    out = {}
    for name, data in programs.items():
        rows = data.get("collectives") if isinstance(data, Mapping) else None
        if isinstance(rows, list):
            rows = [{c: r.get(c) for c in _ROW_COLUMNS} if isinstance(r, Mapping) else r for r in rows]
        out[name] = {"collectives": rows, "plan": data.get("plan"), "sources": data.get("sources")} \
            if isinstance(data, Mapping) else data
    return json.loads(json.dumps(out))


def _project_root(config: Path, top: Path | None = None) -> Path:
    """The nearest folder above `config` holding a pyproject.toml (not above `top`), else the config's folder:
    where a side's cache lives and its project files are named from."""
    config = config.resolve() if top is None else config
    for folder in config.parents:
        if (folder / "pyproject.toml").is_file():
            return folder
        if top is not None and folder == top:
            break
    return config.parent


@dataclass
class _SideCache:
    """The result cache's entry for one config side.

    Attributes:
      cache: the folder's `ResultCache`.
      key: the side's key.
      tree: what the record's project files are read against on a hit (the project root, or in the export).
    """

    cache: Any
    key: str
    tree: Path

    def lookup(self) -> dict[str, Any] | None:
        """The side's programs (`_reduced`), or None: a miss (a damaged entry, a pruned source text too)."""
        hit = self.cache.lookup(self.key, self.tree)
        if hit is None:
            return None
        try:
            programs = {}
            for name, data in hit["programs"].items():
                sources = data["sources"]
                if isinstance(sources, dict):
                    texts = {rel: self.cache.source(digest) for rel, digest in sources.items()}
                    if any(t is None for t in texts.values()):
                        return None
                    sources = texts
                programs[name] = {"collectives": data["collectives"], "plan": data["plan"], "sources": sources}
        except (KeyError, TypeError, AttributeError):
            return None
        return programs

    def store(self, programs: Mapping[str, Any], deps: Mapping[str, Any]) -> None:
        """Keep a side's programs (`_reduced`) with what their analysis imported; the sources' texts are kept
        once each, by content. A result holding what JSON cannot write exactly (NaN) is not kept."""
        import hashlib

        kept, blobs = {}, {}
        for name, data in programs.items():
            sources = data.get("sources")
            if isinstance(sources, dict):
                digests = {}
                for rel, text in sources.items():
                    raw = str(text).encode("utf-8")
                    digests[rel] = hashlib.sha256(raw).hexdigest()
                    blobs[digests[rel]] = raw
                sources = digests
            kept[name] = {"collectives": data.get("collectives"), "plan": data.get("plan"), "sources": sources}
        try:
            json.dumps(kept, allow_nan=False)
        except ValueError:
            return
        self.cache.store(self.key, {"entry": "diff side", "programs": kept, "deps": dict(deps)}, blobs)


def _open_side_cache(config: Path, *, tree: Path, home: Path, hardware: str | None, no_cache: bool,
                     hardware_base: Path | None = None, label: str | None = None) -> _SideCache | None:
    """The cache entry of a config side, or None when the cache is off or the config does not parse (the
    analysis then says why).

    Args:
      config: the config file (in the working tree, or in a revision's export).
      tree: the project root of that config (in the export for a revision): files are keyed relative to it.
      home: the working tree's project root: the cache folder and its settings (`cache`, `cache-dir`).
      hardware: `--hardware`.
      no_cache: `--no-cache`.
      hardware_base: where the analysis resolves a relative hardware spec path (default the current folder).
      label: names `tree` in the key instead of its path (a revision's temporary export).
    """
    import tomllib

    from analyzer.workflows.cache import cache_settings, key_context, open_cache
    from analyzer.workflows.check import EntryPoint, local_imports, resolve_entry

    try:
        data = tomllib.loads(config.read_text(encoding="utf-8"))
        settings_table: Any = {}
        if (home / "pyproject.toml").is_file():
            tool = tomllib.loads((home / "pyproject.toml").read_text(encoding="utf-8")).get("tool", {})
            settings_table = tool.get("hlo-analyzer", {}) if isinstance(tool, dict) else {}
        settings = cache_settings(home, settings_table if isinstance(settings_table, dict) else {},
                                  no_cache=no_cache, config_path=home / "pyproject.toml")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, AnalyzerError):
        return None
    cache = open_cache(settings)
    if cache is None:
        return None
    tool = data.get("tool")
    section = tool.get("hlo-analyzer") if isinstance(tool, dict) else None
    sources: set[Path] = set()
    if isinstance(section, dict):  # a pyproject.toml: its entry points, as `analyse_config` resolves them
        names = section.get("entry-points", section.get("entry_points"))
        names = [names] if isinstance(names, str) else names if isinstance(names, list) else []
        table = {**section, "command": "diff side"}
        for name in names:
            if isinstance(name, str):
                entry = resolve_entry(name, config.parent)
                sources |= local_imports(entry.file, config.parent) if entry.file is not None else set()
    else:  # a report config: its entry point, as `ReportConfig.build` finds it
        from analyzer.workflows.reportcache import _entry

        names = [data.get("entry")] if isinstance(data.get("entry"), str) else []
        table = {"command": "diff side", "report-config": data, "hardware": data.get("hardware")}
        for name in names:
            entry = _entry(config, name)
            sources |= local_imports(entry.file, config.parent) if entry.file is not None else set()
    keys = key_context(tree, table, config_path=config, overrides={"hardware": hardware},
                       cache_folder=settings.folder, label=label, hardware_base=hardware_base)
    key, _ = keys.entry_key(EntryPoint(json.dumps(["diff side", names], default=str), config, None), sources)
    return _SideCache(cache, key, tree)


def _noted(side: Side, cached: _SideCache | None) -> Side:
    side.cache_note = cached.cache.note if cached is not None else None
    return side


def _tree_root(path: Path) -> Path:
    """The root of the git repository holding `path` (its folder when there is none): what source paths of a
    working-tree side are written relative to, as the revision's are relative to its export."""
    try:
        return _repo_root(path.parent)
    except AnalyzerError:
        return path.parent.resolve()


def _relative_sources(report: dict, *roots: str | Path) -> dict:
    """The report dict with each collective's `source` (`/abs/file.py:12`) relative to the first of `roots`
    it lies under (a revision's export, then the repository: a package installed from the working tree)."""
    prefixes = [q for r in roots for q in dict.fromkeys((Path(r).resolve(), Path(r)))]
    if isinstance(report.get("sources"), dict):
        kept = {}
        for name, text in report["sources"].items():
            p = Path(name)
            under = next((p.relative_to(q).as_posix() for q in prefixes if p.is_relative_to(q)), name)
            kept[under] = text
        report["sources"] = kept
    rows = report.get("collectives")
    if not isinstance(rows, list):
        return report
    for row in rows:
        source = row.get("source") if isinstance(row, dict) else None
        if not isinstance(source, str):
            continue
        file, sep, line = source.rpartition(":")
        if not sep or not line.isdigit():
            file, sep, line = source, "", ""
        p = Path(file)
        for prefix in prefixes:
            if p.is_absolute() and p.is_relative_to(prefix):
                row["source"] = p.relative_to(prefix).as_posix() + (f":{line}" if sep else "")
                break
    return report


def side_label(spec: str, *, cwd: Path | None = None) -> str:
    """How a diff names a side: `REV:path` with the path relative to the repository root, a file inside the
    repository relative to its root, anything else as given (never a temporary folder's path).

    Example:
        >>> side_label("report.json", cwd=Path("/"))
        'report.json'
    """
    cwd = cwd or Path.cwd()
    try:
        if _is_git_rev(spec):
            rev, _, rel = spec.partition(":")
            repo = _repo_root(cwd)
            return f"{rev}:{_repo_relative(rel, cwd, repo, spec)}"
        path = Path(spec) if Path(spec).is_absolute() else cwd / spec
        if path.exists():
            root = _repo_root(path if path.is_dir() else path.parent).resolve()
            full = Path(os.path.normpath(path.resolve()))
            if full.is_relative_to(root) and full != root:
                return full.relative_to(root).as_posix()
    except AnalyzerError:
        pass
    return spec


def _worker_main() -> int:
    """`python -m analyzer.workflows.diff`: analyse the config named on stdin (JSON) and print name -> report dict.

    SIGTERM (the parent stopping it) unwinds like Ctrl-C: the XLA dump folders of a compile are removed."""
    from analyzer._signals import Terminated, stop_signals

    job = json.loads(sys.stdin.read())
    try:
        with stop_signals():
            result = analyse_config(Path(job["config"]), hardware=job.get("hardware"))
    except AnalyzerError as e:
        print(f"hlo-analyzer: {e}", file=sys.stderr)
        return 2
    except Terminated as e:
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    if job.get("roots"):
        result = {name: _relative_sources(data, *job["roots"]) for name, data in result.items()}
    deps = None
    if job.get("record"):  # the cache's record of what this analysis imported (`_SideCache.store`)
        from analyzer.workflows.cache import record_dependencies

        deps = record_dependencies(Path(job["record"]))
    json.dump({"programs": result, "deps": deps}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(_worker_main())
