"""`hlo-analyzer check`: compile a project's entry points, run the rules, and decide the exit status.

The project says what to check in `[tool.hlo-analyzer]` of its pyproject.toml (see analyzer/rules/config.py):

    [tool.hlo-analyzer]
    entry-points = ["model.train:train_step"]   # module:function returning (jitted fn, abstract args)
    mesh = { data = 4, model = 2 }
    hardware = "tpu-v5e"
    baseline = ".hlo-analyzer-baseline.json"

Given paths (pre-commit passes the changed files), only the entry points that depend on them run: an entry
point depends on its own module and on every module of the project it imports, directly or not (found by
reading the import statements, without importing anything). The config file itself selects them all.

Findings are made portable before anything else sees them: a file under the project root is written
relative to it, so baseline fingerprints and annotations match on every machine. A finding the rules could
not place in a file is placed on the entry point's `def` line. Findings whose fingerprints the baseline
holds are kept apart: they are shown as baselined and do not fail the check.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import math
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analyzer.diagnostics import Diagnostic, Severity, short_source
from analyzer.errors import AnalyzerError, ConfigError
from analyzer.rules.baseline import Baseline

if TYPE_CHECKING:
    from analyzer.rules.config import Config
    from analyzer.analysis.report import Report
    from analyzer.workflows.cache import KeyContext, ResultCache

__all__ = [
    "prepare_cpu_devices",
    "maxtext_devices",
    "EntryOutcome",
    "CheckResult",
    "EntryPoint",
    "resolve_entry",
    "local_imports",
    "select_entries",
    "relative_to_root",
    "run_check",
    "replay_check",
    "assemble",
    "analyse_entry",
    "entry_plan",
    "argument_names",
    "explain_changes",
    "plan_changes",
    "relevant_changes",
    "changed_files",
    "ReplayedReport",
]

SEVERITIES = ("info", "warning", "error")


@dataclass(frozen=True)
class EntryPoint:
    """An entry point of the config and where its code is.

    Attributes:
      name: as written in the config, `module:function` or `path/file.py:function`.
      file: the module's file (absolute), or None when it cannot be found without importing.
      line: the line of the function's `def` (or assignment) in that file, or None.
    """

    name: str
    file: Path | None
    line: int | None


@dataclass(frozen=True)
class EntryOutcome:
    """What checking one entry point gave.

    Attributes:
      entry: the entry point.
      report: its analysed Report, or None when it failed.
      findings: diagnostics that are not in the baseline (these fail the check at or above `fail_on`).
      baselined: diagnostics the baseline holds.
      error: the message of the error that stopped the analysis, or None.
    """

    entry: EntryPoint
    report: Report | None = None
    findings: tuple[Diagnostic, ...] = ()
    baselined: tuple[Diagnostic, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class CheckResult:
    """A whole check run.

    Attributes:
      root: the project root (the folder of the config file); finding paths are relative to it.
      config_path: the config file read, or None.
      outcomes: one per entry point that ran.
      skipped: entry points not selected by the given paths.
      fail_on: the lowest severity that fails the check.
      baseline_path: the baseline used, or None.
    """

    root: Path
    config_path: Path | None
    outcomes: tuple[EntryOutcome, ...]
    skipped: tuple[EntryPoint, ...] = ()
    fail_on: str = "warning"
    baseline_path: Path | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def findings(self) -> tuple[Diagnostic, ...]:
        return tuple(d for o in self.outcomes for d in o.findings)

    @property
    def baselined(self) -> tuple[Diagnostic, ...]:
        return tuple(d for o in self.outcomes for d in o.baselined)

    @property
    def errors(self) -> tuple[str, ...]:
        return tuple(f"{o.entry.name}: {o.error}" for o in self.outcomes if o.error)

    @property
    def located_errors(self) -> tuple[tuple[str | None, int | None, str], ...]:
        """(entry point file, def line, message) of each entry point that could not be analysed."""
        return tuple(
            (str(o.entry.file) if o.entry.file else None, o.entry.line, f"{o.entry.name}: {o.error}")
            for o in self.outcomes
            if o.error
        )

    @property
    def failing(self) -> tuple[Diagnostic, ...]:
        """The findings at or above `fail_on`."""
        threshold = SEVERITIES.index(self.fail_on)
        return tuple(d for d in self.findings if Severity(d.severity).rank >= threshold)

    @property
    def exit_code(self) -> int:
        """2 when an entry point could not be analysed or a rule failed on one (HA900, an internal error), else 1
        when a finding fails, else 0."""
        if self.errors or any(d.code == "HA900" for d in self.findings):
            return 2
        return 1 if self.failing else 0


def prepare_cpu_devices(n: int) -> bool:
    """Let this process compile for `n` fake CPU devices itself, when jax has not started yet.

    `analyzer.compile.lower` compiles in the calling process when it has enough CPU devices and otherwise starts a
    child process per program (a fresh jax import each time). A command that is about to compile several
    programs on one mesh sets the device count once, before jax initialises: `XLA_FLAGS` gains
    `--xla_force_host_platform_device_count=n` (a larger count already there is kept) and `JAX_PLATFORMS`
    defaults to `cpu` (compiling never needs an accelerator; TPU targets compile ahead of time under cpu).

    Returns:
      True when the environment was prepared; False when jax's backends are already up (nothing changes).

    Example:
        >>> import os
        >>> if prepare_cpu_devices(8):    # jax has not started: it will see 8 CPU devices
        ...     assert "--xla_force_host_platform_device_count" in os.environ["XLA_FLAGS"]
    """
    if "jax" in sys.modules:
        from jax._src import xla_bridge

        if xla_bridge.backends_are_initialized():
            return False
    flag = "--xla_force_host_platform_device_count"
    flags = os.environ.get("XLA_FLAGS", "")
    m = re.search(flag + r"=(\d+)", flags)
    if m is None:
        flags = f"{flags} {flag}={n}".strip()
    elif int(m.group(1)) < n:
        flags = flags[: m.start()] + f"{flag}={n}" + flags[m.end():]
    os.environ["XLA_FLAGS"] = flags
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    return True


def mesh_size(mesh: Mapping[str, Any] | None) -> int:
    """Devices in a mesh given as axis -> size (a size may be `(size, axis_type)`)."""
    if not mesh:
        return 1
    return math.prod(int(v[0] if isinstance(v, (tuple, list)) else v) for v in mesh.values())


# --------------------------------------------------------------------------------------------------------------
# Where entry points live, and what they import


def _search_roots(root: Path) -> list[Path]:
    """Folders a project's modules are imported from: the root and, for the src layout, root/src."""
    return [p for p in (root, root / "src") if p.is_dir()]


def _module_file(module: str, roots: Sequence[Path]) -> Path | None:
    """The file of a dotted module name under the project's roots, without importing anything."""
    parts = module.split(".")
    for base in roots:
        candidate = base.joinpath(*parts)
        for path in (candidate.with_suffix(".py"), candidate / "__init__.py"):
            if path.is_file():
                return path.resolve()
    return None


def _def_line(file: Path, qualname: str) -> int | None:
    """The line of `def name` / `class name` / `name = ...` for a (dotted) qualified name in a file."""
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
    except (OSError, SyntaxError, ValueError):
        return None
    body: list[ast.stmt] = tree.body
    line = None
    for part in qualname.split("."):
        found = None
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == part:
                found = node
            elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == part for t in node.targets
            ):
                found = node
        if found is None:
            return line
        line = found.lineno
        body = getattr(found, "body", [])
    return line


def resolve_entry(name: str, root: Path) -> EntryPoint:
    """Find an entry point's file and def line without importing it.

    Args:
      name: `module:function` or `path/to/file.py:function` (relative to `root`).
      root: the project root.

    Returns:
      the `EntryPoint` (file and line None when not found: it is then always selected).

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> _ = (root / "model.py").write_text("import jax\\n\\n\\ndef step(mesh):\\n    ...\\n")
        >>> resolve_entry("model:step", root).line
        4
    """
    if name.startswith(_MAXTEXT):  # MaxText's own step: built by the installed MaxText, no project file
        return EntryPoint(name=name, file=None, line=None)
    module, _, qualname = name.partition(":")
    if module.endswith(".py") or "/" in module:
        path = Path(module)
        file = (path if path.is_absolute() else root / path).resolve()
        file = file if file.is_file() else None
    else:
        file = _module_file(module, _search_roots(root))
        if file is None:
            with contextlib.suppress(ImportError, ValueError, AttributeError):
                with _on_path(root):
                    spec = importlib.util.find_spec(module)
                if spec is not None and spec.origin and spec.origin.endswith(".py"):
                    file = Path(spec.origin).resolve()
    line = _def_line(file, qualname) if file is not None and qualname else None
    return EntryPoint(name=name, file=file, line=line)


def _imported_modules(file: Path) -> set[str]:
    """Dotted names a file imports (absolute, and relative ones resolved against its package)."""
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
    except (OSError, SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    package = file.parent
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package
                for _ in range(node.level - 1):
                    base = base.parent
                prefix = str(base) + "::" + (node.module or "")
                names.add(prefix)
                names.update(f"{prefix}.{a.name}" if node.module else f"{str(base)}::{a.name}" for a in node.names)
            elif node.module:
                names.add(node.module)
                names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def local_imports(file: Path, root: Path) -> set[Path]:
    """The project files a module depends on: itself and every project module it imports, transitively.

    Imports are read from the source (`ast`), not executed; third-party modules (not under the root) are
    ignored; `from pkg import name` counts `pkg/name.py` when it exists.

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> _ = (root / "layers.py").write_text("import jax\\n")
        >>> _ = (root / "train.py").write_text("import numpy\\nfrom layers import *\\n")
        >>> sorted(p.name for p in local_imports(root / "train.py", root))
        ['layers.py', 'train.py']
    """
    roots = _search_roots(root)
    seen: set[Path] = set()
    todo = [file.resolve()]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for name in _imported_modules(current):
            if "::" in name:  # relative import: "<folder>::<dotted>"
                folder, _, dotted = name.partition("::")
                found = _module_file(dotted, [Path(folder)]) if dotted else None
                if found is None and dotted == "":
                    found = _module_file("__init__", [Path(folder)])
            else:
                found = _module_file(name, roots)
            if found is not None and found not in seen:
                todo.append(found)
            # A module's package __init__ files run on import too.
            if found is not None:
                for parent in found.parents:
                    if parent == root.resolve() or root.resolve() not in parent.parents:
                        break
                    init = parent / "__init__.py"
                    if init.is_file() and init not in seen:
                        todo.append(init)
    return seen


def select_entries(
    entries: Sequence[EntryPoint], paths: Sequence[str | Path] | None, *, root: Path, config_path: Path | None
) -> tuple[list[EntryPoint], list[EntryPoint]]:
    """Split entry points into those the given paths touch and the rest.

    Args:
      entries: every configured entry point.
      paths: files or folders (pre-commit's changed files); None or empty means all entry points.
      root: the project root.
      config_path: the config file: naming it selects every entry point.

    Returns:
      (selected, skipped).
    """
    if not paths:
        return list(entries), []
    given = [Path(p).resolve() for p in paths]
    if config_path is not None and config_path.resolve() in given:
        return list(entries), []
    selected, skipped = [], []
    for entry in entries:
        if entry.file is None:  # cannot tell what it depends on: check it
            selected.append(entry)
            continue
        deps = local_imports(entry.file, root)
        touched = any(p in deps or any(p in d.parents for d in deps) for p in given)
        (selected if touched else skipped).append(entry)
    return selected, skipped


# --------------------------------------------------------------------------------------------------------------
# Running


@contextlib.contextmanager
def _on_path(root: Path) -> Iterator[None]:
    """Make the project's modules importable (root and root/src first on sys.path) for the duration."""
    added = [str(p) for p in _search_roots(root) if str(p) not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for p in added:
            with contextlib.suppress(ValueError):
                sys.path.remove(p)


def relative_to_root(d: Diagnostic, root: Path, entry: EntryPoint) -> Diagnostic:
    """The finding with its file relative to the root (when under it), placed on the entry point if unplaced."""
    loc = d.location
    if not loc.file and entry.file is not None:
        loc = replace(loc, file=str(entry.file), line=entry.line)
    if loc.file:
        path = Path(loc.file)
        if not path.is_absolute():
            path = root / path
        with contextlib.suppress(ValueError, OSError):
            loc = replace(loc, file=path.resolve().relative_to(root.resolve()).as_posix())
    if loc == d.location:
        return d
    details = d.details
    title = str(details.get("root_cause") or "")
    was = f" at {short_source(str(d.location))}" if d.location.file else ""
    if was and title.endswith(was):  # a root cause named by its line (analyzer.rules.rootcause): the same path
        details = {**details, "root_cause": title[: -len(was)] + f" at {loc}"}
    return replace(d, location=loc, details=details)


def analyse_entry(entry: EntryPoint, config: Config, *, mesh: Any = None) -> Report:
    """Import and call the entry point, compile what it returns, analyse it and run the rules.

    Args:
      entry: the entry point.
      config: the project config (mesh, target, hardware, topology and the rules' settings).
      mesh: overrides the config's mesh.

    Returns:
      the Report, with diagnostics.
    """
    from analyzer.pipeline import analyze
    from analyzer.compile.lower import load_entry, time_limit

    if entry.name.startswith(_MAXTEXT):
        return _analyse_maxtext(entry, config)
    mesh = mesh if mesh is not None else (dict(config.mesh) if config.mesh else None)
    if mesh is None:
        raise ConfigError(
            f"entry point {entry.name!r}: no mesh to compile it on; set `mesh = {{ data = 4, model = 2 }}` in "
            "[tool.hlo-analyzer] or pass --mesh data=4,model=2",
            path=config.path,
        )
    name = entry.name
    if entry.file is not None and (name.partition(":")[0].endswith(".py")):
        name = f"{entry.file}:{name.partition(':')[2]}"
    with time_limit(config.timeout, entry.name, hard_exit=True):
        fn, args, kwargs = load_entry(name, mesh)
        # The check applies the baseline itself, on root-relative paths (run_check); the rules must not.
        config = config.override(baseline=None, where="check")
        report = analyze(
            fn,
            *args,
            mesh=mesh,
            target=config.target or "cpu",
            hardware=config.hardware or "tpu-v5e",
            topology=config.topology,
            config=config,
            **({"xla_flags": dict(config.xla_flags)} if config.xla_flags else {}),
            **kwargs,
        )
    return replace(report, name=report.name or entry.name)


_MAXTEXT = "maxtext:"  # (workflows.reportconfig.MAXTEXT_PREFIX: an entry point that is MaxText's train step)


def _analyse_maxtext(entry: EntryPoint, config: Config) -> Report:
    """A `maxtext:KEY=VALUE ...` entry point: MaxText's own train step for train_compile's arguments
    (`analyzer.integrations.maxtext`), on the config's target, hardware and topology (by default those of its
    `compile_topology`); MaxText's keys make its mesh, so the config's [mesh] is not used."""
    from analyzer.compile.lower import time_limit
    from analyzer.integrations.maxtext import analyze_maxtext

    if config.xla_flags:
        raise ConfigError(f"entry point {entry.name!r}: xla-flags do not apply to a maxtext: entry point (MaxText's "
                          "compile takes its own: put them in LIBTPU_INIT_ARGS for the tpu target)", path=config.path)
    with time_limit(config.timeout, entry.name, hard_exit=True):
        report = analyze_maxtext(entry.name[len(_MAXTEXT):], target=config.target or "cpu",
                                 hardware=config.hardware or None, topology=config.topology,
                                 config=config.override(baseline=None, where="check"))
    return replace(report, name=entry.name)


def maxtext_devices(entry_points: Sequence[str]) -> int:
    """The CPU devices the `maxtext:` entry points compile on (the most chips of their `compile_topology`s), for
    `prepare_cpu_devices`; 1 without such entry points (MaxText is then not imported)."""
    names = [n for n in entry_points if n.startswith(_MAXTEXT)]
    if not names:
        return 1
    from analyzer.integrations.maxtext import parse_args, plan

    return max(plan(parse_args(n[len(_MAXTEXT):])).chips for n in names)


# --------------------------------------------------------------------------------------------------------------
# Results as the output reads them (computed here, in a worker process, or read back from the cache)


@dataclass(frozen=True)
class ReplayedTotals:
    """The totals the JSON output prints (`Report.totals`' figures)."""

    comm_seconds: float
    compute_seconds: float
    comm_bytes: int


@dataclass(frozen=True)
class ReplayedReport:
    """What the check's output reads of a `Report`, for a result read back from the cache or computed in a
    worker process: the name, the totals, one row per collective (kind, axes, notation, seconds per step,
    source) and the findings.

    Attributes:
      plan: the arguments' PartitionSpecs by path, and the mesh (see `entry_plan`).
    """

    name: str
    totals: ReplayedTotals
    collectives: tuple[Mapping[str, Any], ...]
    diagnostics: tuple[Diagnostic, ...]
    plan: Mapping[str, Any] = field(default_factory=dict)


_ROW_KEYS = ("kind", "axes", "notation", "total_seconds", "source")


def _rows(report: Any) -> list[dict[str, Any]]:
    table = report.collectives
    if isinstance(table, (list, tuple)):
        return [dict(r) for r in table]
    out = []
    for row in table.to_dict("records"):
        out.append({k: _plain(row.get(k)) for k in _ROW_KEYS})
    return out


def _plain(value: Any) -> Any:
    """numpy scalars and arrays as Python numbers and lists (for the collective rows kept with a result)."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value != value:
        return None
    return value


def _spec_text(spec: Any) -> str:
    """A PartitionSpec as the user writes it: `P('model', None)`."""
    try:
        return "P(" + ", ".join(repr(tuple(e)) if isinstance(e, list) else repr(e) for e in tuple(spec)) + ")"
    except TypeError:
        return str(spec)


def argument_names(entry: EntryPoint) -> list[str | None]:
    """The names the entry point's `return fn, (a, b, ...)` gives its arguments (read from the source), so a
    plan change reads `params['w_out']`, not `arg0['w_out']`; None where an argument is not a plain name."""
    if entry.file is None:
        return []
    qualname = entry.name.partition(":")[2]
    try:
        tree = ast.parse(entry.file.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return []
    body: list[ast.stmt] = tree.body
    fn = None
    for part in qualname.split("."):
        fn = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                   and n.name == part), None)
        if fn is None:
            return []
        body = fn.body
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return []
    assigned: dict[str, ast.expr] = {}
    returned = None
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            assigned[node.targets[0].id] = node.value
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple) and len(node.value.elts) >= 2:
            returned = node.value.elts[1]
    if isinstance(returned, ast.Name):
        returned = assigned.get(returned.id)
    if not isinstance(returned, (ast.Tuple, ast.List)):
        return []
    return [e.id if isinstance(e, ast.Name) else None for e in returned.elts]


def entry_plan(report: Any, entry: EntryPoint) -> dict[str, Any]:
    """The plan a result was computed for: each array argument's sharding by its path (`params['w_out']` ->
    `P(None, 'model')`) and the mesh (axis -> size). Empty for a report without arguments."""
    plan: dict[str, Any] = {"arguments": {}, "mesh": None}
    mesh = getattr(report, "mesh", None)
    if mesh is not None:
        plan["mesh"] = {str(a): int(n) for a, n in zip(mesh.axis_names, mesh.axis_sizes)}
    analysis = getattr(report, "analysis", None)
    args = getattr(analysis, "args", None)
    if not args:
        return plan
    import jax

    names = argument_names(entry)
    for path, leaf in jax.tree_util.tree_flatten_with_path(tuple(args))[0]:
        sharding = getattr(leaf, "sharding", None)
        if sharding is None or not path:
            continue
        idx = getattr(path[0], "idx", 0)
        head = (names[idx] if idx < len(names) else None) or f"arg{idx}"
        spec = getattr(sharding, "spec", None)
        plan["arguments"][head + jax.tree_util.keystr(tuple(path[1:]))] = (
            _spec_text(spec) if spec is not None else str(sharding))
    return plan


@dataclass
class _Computed:
    """One entry point's result: the findings (root-relative), the report the output reads, the record the
    cache stores and the changes are explained from, and whether the record replays the output exactly."""

    diagnostics: tuple[Diagnostic, ...] = ()
    report: Any = None
    record: dict[str, Any] | None = None
    error: str | None = None
    cacheable: bool = False


def _replayed(record: Mapping[str, Any]) -> tuple[tuple[Diagnostic, ...], ReplayedReport]:
    from analyzer.workflows.cache import decode_diagnostic

    diags = tuple(decode_diagnostic(d) for d in record["diagnostics"])
    t = record["totals"]
    report = ReplayedReport(name=record["name"], totals=ReplayedTotals(t["comm_seconds"], t["compute_seconds"],
                                                                      t["comm_bytes"]),
                            collectives=tuple(record["rows"]), diagnostics=diags, plan=record.get("plan") or {})
    return diags, report


Outputs = Callable[[CheckResult], Sequence[str]]
"""The result in every output format the caller may print (the cli's `every_output`)."""


def _renderings(entry: EntryPoint, report: Any, diags: Sequence[Diagnostic], root: Path,
                outputs: Outputs) -> list[str]:
    """The result in every output format, its findings failing and baselined (to check a replay matches)."""
    out: list[str] = []
    for found, kept in ((tuple(diags), ()), ((), tuple(diags))):
        out += outputs(CheckResult(root=root, config_path=None, outcomes=(EntryOutcome(entry, report, found, kept),)))
    return out


def _compute(entry: EntryPoint, config: Config, run: Callable[[EntryPoint, Config], Any], root: Path,
             record: bool, memo: dict[str, Any], outputs: Outputs | None) -> _Computed:
    """Analyse one entry point (in this process); with `record`, also make the cache's record of it, which the
    cache may keep when its replay renders the same as the result in every one of `outputs`."""
    try:
        report = run(entry, config)
    except AnalyzerError as e:
        return _Computed(error=str(e))
    except Exception as e:  # noqa: BLE001 - a bug of ours must not hide the other entry points
        return _Computed(error=f"internal error ({type(e).__name__}: {e}); please report it with the entry point")
    found = tuple(relative_to_root(d, root, entry) for d in report.diagnostics)
    done = _Computed(diagnostics=found, report=report)
    if any(d.code == "HA900" for d in found):  # a rule's own failure: neither kept nor explained
        return done
    from analyzer.workflows.cache import Unencodable, encode_diagnostic, record_dependencies

    try:
        t = report.totals
        body = {
            "entry": entry.name,
            "name": report.name or entry.name,
            "diagnostics": [encode_diagnostic(d) for d in found],
            "totals": {"comm_seconds": float(t.comm_seconds), "compute_seconds": float(t.compute_seconds),
                       "comm_bytes": int(t.comm_bytes)},
            "rows": _rows(report),
            "plan": entry_plan(report, entry),
            "deps": record_dependencies(root, memo) if record else None,
        }
        import json as _json

        body = _json.loads(_json.dumps(body, allow_nan=False))
        done.record = body
        # (a maxtext: entry point's program is the installed MaxText's, which no key reads: never kept)
        if record and outputs is not None and not entry.name.startswith(_MAXTEXT):
            replay_diags, replay = _replayed(body)
            # Kept only when the replay is the same output, in every format; else computed every time.
            done.cacheable = (_renderings(entry, replay, replay_diags, root, outputs)
                              == _renderings(entry, report, found, root, outputs))
    except (Unencodable, ValueError, TypeError, KeyError, AttributeError):
        done.record, done.cacheable = None, False
    return done


def _compute_in_child(entry: EntryPoint, config: Config, run: Callable[[EntryPoint, Config], Any], root: Path,
                      record: bool, outputs: Outputs | None, conn: Any) -> None:
    """The body of a worker process: compute one entry point and send back what the parent needs."""
    done = _compute(entry, config, run, root, record, {}, outputs)
    if done.report is not None and not isinstance(done.report, ReplayedReport):
        t = done.report.totals
        done.report = ReplayedReport(
            name=done.report.name or entry.name,
            totals=ReplayedTotals(float(t.comm_seconds), float(t.compute_seconds), int(t.comm_bytes)),
            collectives=tuple(_rows(done.report)), diagnostics=(), plan=entry_plan(done.report, entry))
    done.diagnostics = tuple(replace(d, finding=None) for d in done.diagnostics)
    try:
        conn.send(done)
    except Exception as e:  # noqa: BLE001 - something in the result does not pickle: say so, do not hang
        conn.send(_Computed(error=f"internal error (the worker's result could not be sent back: {e})"))
    conn.close()


def _compute_parallel(items: Sequence[tuple[int, EntryPoint]], config: Config,
                      run: Callable[[EntryPoint, Config], Any], root: Path, record: bool,
                      outputs: Outputs | None, jobs: int,
                      progress: Callable[[str], None] | None) -> dict[int, _Computed]:
    """Compute entry points in up to `jobs` worker processes forked from this one (before it imported jax:
    each worker imports and compiles for itself). Results are keyed by position; a worker that dies (killed,
    out of memory) fails its entry point alone."""
    import multiprocessing
    from multiprocessing.connection import wait

    ctx = multiprocessing.get_context("fork")
    todo = list(items)
    running: dict[Any, tuple[int, EntryPoint, Any]] = {}
    out: dict[int, _Computed] = {}
    try:
        while todo or running:
            while todo and len(running) < jobs:
                i, entry = todo.pop(0)
                if progress is not None:
                    progress(entry.name)
                receive, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_compute_in_child, args=(entry, config, run, root, record, outputs, send),
                                   name=f"hlo-analyzer check {entry.name}", daemon=True)
                proc.start()
                send.close()
                running[receive] = (i, entry, proc)
            for conn in wait(list(running)):
                i, entry, proc = running.pop(conn)
                try:
                    out[i] = conn.recv()
                except (EOFError, OSError):
                    proc.join(5)
                    out[i] = _Computed(error=f"the worker process compiling it died (exit status {proc.exitcode}); "
                                             "run with --jobs 1 to see its output")
                conn.close()
                proc.join(5)
    finally:
        for _, _, proc in running.values():  # Ctrl-C or an error: stop the other compiles
            proc.kill()
            proc.join(5)
    return out


# --------------------------------------------------------------------------------------------------------------
# The decision behind a new finding


def _changed_lines(old: str | None, new: str) -> list[tuple[int, str]]:
    """(line number, text) of the lines of `new` that differ from `old`."""
    import difflib

    new_lines = new.splitlines()
    if old is None:
        return []
    out = []
    matcher = difflib.SequenceMatcher(a=old.splitlines(), b=new_lines, autojunk=False)
    for op, _, _, j1, j2 in matcher.get_opcodes():
        if op in ("replace", "insert"):
            out += [(j + 1, new_lines[j]) for j in range(j1, j2)]
    return out


def _git_changed_lines(root: Path, files: Sequence[str]) -> dict[str, list[tuple[int, str]]]:
    """The working tree's changed lines (against HEAD) of these root-relative files, from `git diff`."""
    import subprocess

    if not files:
        return {}
    try:
        proc = subprocess.run(["git", "-C", str(root), "diff", "-U0", "--no-color", "--no-ext-diff", "HEAD", "--",
                               *files], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return {}
    if proc.returncode != 0:
        return {}
    top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                         check=False).stdout.strip()
    out: dict[str, list[tuple[int, str]]] = {}
    current = None
    line = 0
    for text in proc.stdout.splitlines():
        if text.startswith("+++ "):
            name = text[4:]
            current = None if name == "/dev/null" else _rel_of(Path(top) / name[2:], root)
            continue
        m = re.match(r"@@ -\S+ \+(\d+)(?:,\d+)? @@", text)
        if m:
            line = int(m.group(1))
            continue
        if current is not None and text.startswith("+") and not text.startswith("+++"):
            out.setdefault(current, []).append((line, text[1:]))
            line += 1
    return out


def _rel_of(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def _axes_of(spec: str | None) -> set[str]:
    return set(re.findall(r"'([^']+)'", spec or ""))


_BUILDS_PLAN = re.compile(r"\bP\(|PartitionSpec|NamedSharding|\bmesh\b|make_mesh|Mesh\(")


def _best_line(changed: Mapping[str, list[tuple[int, str]]], words: Sequence[str], axes: set[str]) -> str | None:
    """The changed line most likely to build a spec: it names the argument and a PartitionSpec, or the axes."""
    best, where = 0, None
    for rel, lines in changed.items():
        for number, text in lines:
            score = 2 * sum(1 for w in words if w and re.search(rf"\b{re.escape(w)}\b", text))
            score += 2 if _BUILDS_PLAN.search(text) else 0
            score += sum(1 for a in axes if f"'{a}'" in text or f'"{a}"' in text)
            if score > best:
                best, where = score, f"{rel}:{number}: `{text.strip()[:120]}`"
    return where if best >= 2 else None


def explain_changes(record: Mapping[str, Any], previous: Mapping[str, Any] | None, *, root: Path,
                    source: Callable[[str], str | None], paths: Sequence[str | Path] | None = None
                    ) -> dict[str, str]:
    """What in the plan changed, for each finding that the previous result of this entry point did not have.

    Compared with the previous result (the last check of this entry point, from the cache): the arguments
    whose PartitionSpec changed (`params['w_out']: P('model', None) -> P(None, 'model')`), a changed mesh, a
    changed `[tool.hlo-analyzer]` value or command-line option, each with the changed line of the project's
    code that builds it (the lines that differ from the files as the previous check read them). Without a
    previous result, the working tree's changed lines that build specs or the mesh (`git diff HEAD` of the
    entry point's files, or of the given `paths` among them).

    Returns:
      fingerprint -> the sentence to add to that finding (findings with nothing to say are left out).
    """
    from analyzer.workflows.cache import decode_diagnostic

    sources: Mapping[str, str] = record.get("sources") or {}
    fingerprints = [decode_diagnostic(d).fingerprint() for d in record["diagnostics"]]
    if previous is None:
        text = _working_tree_changes(sorted(sources), root, paths)
        return {fp: text for fp in fingerprints} if text else {}
    # New: a finding the previous result did not have, or had saying something else (its collectives, its cost).
    before = {(decode_diagnostic(d).fingerprint(), d.get("message")) for d in previous.get("diagnostics") or ()}
    new = [fp for fp, d in zip(fingerprints, record["diagnostics"]) if (fp, d.get("message")) not in before]
    if not new:
        return {}
    old_texts, new_texts = _changed_sources(sources, previous.get("sources") or {}, root, source)
    said = plan_changes(previous.get("plan") or {}, record.get("plan") or {}, changed_files(old_texts, new_texts))
    if not said:
        return {}
    return {fp: "Changed since the last check: " + relevant_changes(said, d.get("notation")) + "."
            for fp, d in zip(fingerprints, record["diagnostics"]) if fp in new}


def _working_tree_changes(files: list[str], root: Path, paths: Sequence[str | Path] | None) -> str | None:
    """The working tree's changed lines (git diff HEAD) of the entry point's files (those among or under
    `paths` when some are) that build a spec or the mesh, as one sentence; None when there are none."""
    if paths:
        given = {Path(p).resolve() for p in paths}
        files = [f for f in files if (root / f).resolve() in given or any(g in (root / f).resolve().parents
                                                                         for g in given)] or files
    changed = _git_changed_lines(root, files)
    lines = [f"{rel}:{n}: `{t.strip()[:120]}`" for rel, ls in changed.items() for n, t in ls if _BUILDS_PLAN.search(t)]
    if not lines:
        return None
    more = f" and {len(lines) - 3} more" if len(lines) > 3 else ""
    return "Changed in the working tree (git diff HEAD): " + "; ".join(lines[:3]) + more + "."


def _changed_sources(sources: Mapping[str, str], old_sources: Mapping[str, str], root: Path,
                     source: Callable[[str], str | None]) -> tuple[dict[str, str | None], dict[str, str]]:
    """(old texts, new texts) of the project files whose digest changed since the previous check: the new from
    the working tree, the old from the cache's copy (`source`; "" for a file the previous check did not read)."""
    old_texts: dict[str, str | None] = {}
    new_texts: dict[str, str] = {}
    for rel, digest in sources.items():
        if old_sources.get(rel) != digest:
            try:
                new_texts[rel] = (root / rel).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            old_texts[rel] = source(old_sources[rel]) if rel in old_sources else ""
    return old_texts, new_texts


def changed_files(old: Mapping[str, str | None], new: Mapping[str, str]) -> dict[str, list[tuple[int, str]]]:
    """The changed lines of each project file, {relative path: [(line number, text)]}, between its texts in
    `old` and `new` (a file `old` lacks is wholly new; one it holds as None, its old text unknown, has none)."""
    return {rel: _changed_lines(old[rel] if rel in old else "", text) for rel, text in new.items()
            if rel not in old or old[rel] != text}


def plan_changes(old_plan: Mapping[str, Any], new_plan: Mapping[str, Any],
                 changed: Mapping[str, list[tuple[int, str]]]) -> list[tuple[set[str], str]]:
    """What changed between two plans (`entry_plan`, with the config under "config"): each argument whose
    PartitionSpec changed (`params['w_out']: P('model', None) -> P(None, 'model')`), a changed mesh, a changed
    config value or command-line option, each with the changed line of the project's code that most likely
    builds it (from `changed`: `changed_files`); the changed lines that build a spec or the mesh when the plan
    itself is the same. Each as (the mesh axes it involves, the sentence), for `relevant_changes`.

    Plans of different forms (a spec read from the program's arguments, a notation read from a JSON report's
    argument table: the "form" key) are not compared argument by argument."""
    said: list[tuple[set[str], str]] = []
    old_args, new_args = old_plan.get("arguments") or {}, new_plan.get("arguments") or {}
    if old_plan.get("form") != new_plan.get("form") and old_args and new_args:
        old_args = new_args = {}
    for path in sorted(set(old_args) | set(new_args)):
        a, b = old_args.get(path), new_args.get(path)
        if a == b:
            continue
        words = re.findall(r"[A-Za-z_]\w*", path)
        axes = _axes_of(b) | _axes_of(a)
        line = _best_line(changed, words[-1:] + words[:1], _axes_of(b))
        text = f"{path}: {a or '(absent)'} -> {b or '(absent)'}" + (f" at {line}" if line else "")
        said.append((axes, text))
    if old_plan.get("mesh") != new_plan.get("mesh") and new_plan.get("mesh") is not None:
        fmt = lambda m: ",".join(f"{k}={v}" for k, v in (m or {}).items()) or "(none)"  # noqa: E731
        line = _best_line(changed, ["mesh"], set(new_plan["mesh"]))
        said.append((set(new_plan["mesh"]) | set(old_plan.get("mesh") or {}),
                     f"mesh {fmt(old_plan.get('mesh'))} -> {fmt(new_plan['mesh'])}" + (f" at {line}" if line else "")))
    old_cfg, new_cfg = old_plan.get("config") or {}, new_plan.get("config") or {}
    for key in sorted(set(old_cfg) | set(new_cfg)):
        if old_cfg.get(key) != new_cfg.get(key):
            said.append((set(), f"config {key}: {old_cfg.get(key)!r} -> {new_cfg.get(key)!r}"))
    if not said:
        lines = [f"{rel}:{n}: `{t.strip()[:120]}`" for rel, ls in changed.items() for n, t in ls
                 if _BUILDS_PLAN.search(t)]
        if lines:
            said.append((set(), "changed lines " + "; ".join(lines[:3])))
    return said


def relevant_changes(said: Sequence[tuple[set[str], str]], notation: Any) -> str:
    """The plan changes (`plan_changes`) that concern a collective of this notation (those over the mesh axes it
    names; all when none does), the first three joined and the rest counted."""
    mentioned = set(re.findall(r"_\{?([A-Za-z]\w*)", str(notation or "")))
    relevant = [t for axes, t in said if axes & mentioned] or [t for _, t in said]
    more = f"; and {len(relevant) - 3} more" if len(relevant) > 3 else ""
    return "; ".join(relevant[:3]) + more


def _sources(entry: EntryPoint, root: Path) -> set[Path]:
    """The project files an entry point's key reads: its module and what it imports (none when unfound)."""
    return local_imports(entry.file, root) if entry.file is not None else set()


def _no_source(digest: str) -> None:
    return None


def _with_changes(diags: Sequence[Diagnostic], changes: Mapping[str, str]) -> tuple[Diagnostic, ...]:
    if not changes:
        return tuple(diags)
    return tuple(replace(d, message=f"{d.message} {changes[d.fingerprint()]}") if d.fingerprint() in changes
                 else d for d in diags)


# --------------------------------------------------------------------------------------------------------------
# The check


def run_check(
    config: Config,
    *,
    root: Path,
    paths: Sequence[str | Path] | None = None,
    baseline: Mapping[str, int] | None = None,
    baseline_path: Path | None = None,
    baseline_seconds: Mapping[str, float] | None = None,
    fail_on: str = "warning",
    mesh: Any = None,
    analyse: Callable[[EntryPoint, Config], Report] | None = None,
    progress: Callable[[str], None] | None = None,
    cache: ResultCache | None = None,
    keys: KeyContext | None = None,
    jobs: int = 1,
    outputs: Outputs | None = None,
) -> CheckResult:
    """Check every selected entry point of a config.

    Args:
      config: the project config; its `entry_points` say what to check.
      root: the project root (relative entry-point files and finding paths are taken against it).
      paths: changed files or folders; only the entry points that depend on them run.
      baseline: fingerprint -> how many findings with it to tolerate (`analyzer.rules.baseline.Baseline.counts`),
        matched against the findings with root-relative paths, so one baseline serves every checkout.
      baseline_path: where the baseline came from (for the output).
      baseline_seconds: fingerprint -> the cost per step the baseline accepted (`Baseline.seconds`); a finding
        costlier than that by more than `config.baseline_tolerance` is new.
      fail_on: lowest severity that fails: "info", "warning" or "error".
      mesh: overrides the config's mesh.
      analyse: the function that turns an entry point into a Report (default `analyse_entry`); tests pass
        their own.
      progress: called with a line before each entry point is compiled.
      cache: the result cache (`analyzer.workflows.cache`); with `keys`, an entry point whose key and recorded
        dependencies are unchanged is read back instead of compiled, and each one compiled is stored.
      keys: the key inputs of this run (`analyzer.workflows.cache.key_context`).
      jobs: how many entry points may compile at once (worker processes, when this process has not started
        jax); 1: one after another, in this process.
      outputs: renders a result in every output format the caller may print (the cli's
        `analyzer.cli.check.every_output`, through analyzer/formats.py). A computed entry point is stored in
        the cache only when its replay from the record renders the same in each; None: nothing is stored
        (what is already cached is still read).

    Returns:
      the `CheckResult`; its `exit_code` is what the command exits with.
    """
    if fail_on not in SEVERITIES:
        from analyzer.errors import valid_choices

        raise AnalyzerError(f"fail-on {fail_on!r} is not a severity; " + valid_choices(fail_on, SEVERITIES,
                                                                                       what="severities"))
    if not config.entry_points:
        raise ConfigError(
            "no entry points to check; add `entry-points = [\"package.module:function\"]` to [tool.hlo-analyzer] "
            "(each returns the jitted function and its abstract arguments)",
            path=config.path,
        )
    config_path = Path(config.path).resolve() if config.path else None
    entries = [resolve_entry(name, root) for name in config.entry_points]
    selected, skipped = select_entries(entries, paths, root=root, config_path=config_path)
    root = root.resolve()
    run = analyse or (lambda e, c: analyse_entry(e, c, mesh=mesh))
    use_cache = cache is not None and keys is not None
    served: list[tuple[EntryPoint, _Computed, str | None, dict[str, str]]] = []
    todo: list[tuple[int, EntryPoint]] = []
    for i, entry in enumerate(selected):
        key, files = keys.entry_key(entry, _sources(entry, root)) if use_cache else (None, {})  # type: ignore[union-attr]
        hit = cache.lookup(key, root) if use_cache else None  # type: ignore[union-attr, arg-type]
        if hit is not None:
            diags, replayed = _replayed(hit)
            served.append((entry, _Computed(diags, replayed, hit), key, files))
        else:
            served.append((entry, _Computed(), key, files))
            todo.append((i, entry))
    computed: dict[int, _Computed] = {}
    with _on_path(root):
        parallel = jobs > 1 and len(todo) > 1 and "jax" not in sys.modules and hasattr(os, "fork")
        if parallel:
            computed = _compute_parallel(todo, config, run, root, use_cache, outputs, jobs, progress)
        else:
            memo: dict[str, Any] = {}
            for i, entry in todo:
                if progress is not None:
                    progress(entry.name)
                computed[i] = _compute(entry, config, run, root, use_cache, memo, outputs)
    for i, done in computed.items():
        entry, _, key, files = served[i]
        if done.record is not None:
            done.record["plan"]["config"] = dict(keys.inputs["table"], **keys.inputs["overrides"]) if keys else {}
            done.record["sources"] = files
            previous = cache.previous(entry.name) if use_cache else None  # type: ignore[union-attr]
            done.record["changes"] = explain_changes(done.record, previous, root=root, paths=paths,
                                                     source=cache.source if cache is not None else _no_source)
            if use_cache and done.cacheable:
                variant = cache.store(key, done.record, {sha: root / rel for rel, sha in files.items()})  # type: ignore
                if variant is not None:
                    done.record["variant"] = variant
        served[i] = (entry, done, key, files)
    return assemble(root, config_path, served, skipped, baseline=baseline, baseline_path=baseline_path,
                    baseline_seconds=baseline_seconds, tolerance=config.baseline_tolerance, fail_on=fail_on,
                    cache=cache)


def assemble(root: Path, config_path: Path | None,
             served: Sequence[tuple[EntryPoint, _Computed, str | None, Mapping[str, str]]],
             skipped: Sequence[EntryPoint], *, baseline: Mapping[str, int] | None, baseline_path: Path | None,
             baseline_seconds: Mapping[str, float] | None, tolerance: float, fail_on: str,
             cache: ResultCache | None = None) -> CheckResult:
    """The `CheckResult` of entry points' results, in the configured order: the baseline applied to each (what
    earlier entry points matched is used up), the changes behind new findings added to their messages."""
    remaining: dict[str, int] = dict(baseline or {})
    outcomes = []
    for entry, done, key, _ in served:
        if done.error is not None:
            outcomes.append(EntryOutcome(entry, error=done.error))
            continue
        new, old, _ = Baseline(remaining, seconds=dict(baseline_seconds or {}), tolerance=tolerance
                               ).split(list(done.diagnostics))
        for d in old:
            remaining[d.fingerprint()] -= 1
        changes = (done.record or {}).get("changes") or {}
        outcomes.append(EntryOutcome(entry, report=done.report, findings=_with_changes(new, changes),
                                     baselined=tuple(old)))
        if cache is not None and done.record is not None and key is not None and "variant" in done.record:
            cache.remember(entry.name, key, done.record["variant"])
    notes = []
    if baseline and not skipped and not any(o.error for o in outcomes):
        stale = sorted(fp for fp, n in remaining.items() if n > 0 and n == baseline[fp])
        if stale:
            notes.append(
                f"{len(stale)} baseline entr{'y' if len(stale) == 1 else 'ies'} matched no finding (fixed?); "
                "rewrite the baseline with --write-baseline to drop them"
            )
    return CheckResult(
        root=root,
        config_path=config_path,
        outcomes=tuple(outcomes),
        skipped=tuple(skipped),
        fail_on=fail_on,
        baseline_path=baseline_path,
        notes=tuple(notes),
    )


def replay_check(table: Mapping[str, Any], *, root: Path, config_path: Path, cache: ResultCache, keys: KeyContext,
                 paths: Sequence[str | Path] | None, baseline: Mapping[str, int] | None,
                 baseline_path: Path | None, baseline_seconds: Mapping[str, float] | None, tolerance: float,
                 fail_on: str) -> CheckResult | None:
    """The check answered from the cache alone, without validating the config or importing jax: every selected
    entry point's key must hit (an invalid config never produced an entry, so it cannot). None: something
    must be computed (the caller runs `run_check`)."""
    names = table.get("entry-points", table.get("entry_points"))
    if isinstance(names, str):
        names = [names]
    if not names or not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return None
    entries = [resolve_entry(name, root) for name in names]
    selected, skipped = select_entries(entries, paths, root=root, config_path=config_path.resolve())
    root = root.resolve()
    served = []
    for entry in selected:
        key, files = keys.entry_key(entry, _sources(entry, root))
        hit = cache.lookup(key, root)
        if hit is None:
            return None
        diags, replayed = _replayed(hit)
        served.append((entry, _Computed(diags, replayed, hit), key, files))
    return assemble(root, config_path.resolve(), served, skipped, baseline=baseline, baseline_path=baseline_path,
                    baseline_seconds=baseline_seconds, tolerance=tolerance, fail_on=fail_on, cache=cache)
