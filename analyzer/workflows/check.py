"""`hlo-analyzer check`: compile a project's entry points, run the rules, and decide the exit status.

The project says what to check in `[tool.hlo-analyzer]` of its pyproject.toml (see analyzer/workflows/config.py):

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
    from analyzer.workflows.config import Config
    from analyzer.analysis.report import Report

__all__ = [
    "prepare_cpu_devices",
    "EntryOutcome",
    "CheckResult",
    "EntryPoint",
    "resolve_entry",
    "local_imports",
    "select_entries",
    "relative_to_root",
    "run_check",
    "analyse_entry",
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
            **kwargs,
        )
    return replace(report, name=report.name or entry.name)


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
      progress: called with a line before each entry point runs.

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
    remaining: dict[str, int] = dict(baseline or {})
    run = analyse or (lambda e, c: analyse_entry(e, c, mesh=mesh))
    outcomes = []
    with _on_path(root):
        for entry in selected:
            if progress is not None:
                progress(entry.name)
            try:
                report = run(entry, config)
            except AnalyzerError as e:
                outcomes.append(EntryOutcome(entry, error=str(e)))
                continue
            except Exception as e:  # noqa: BLE001 - a bug of ours must not hide the other entry points
                outcomes.append(EntryOutcome(entry, error=f"internal error ({type(e).__name__}: {e}); please "
                                                          "report it with the entry point"))
                continue
            found = [relative_to_root(d, root, entry) for d in report.diagnostics]
            # One baseline serves every entry point: what earlier entries matched is used up.
            new, old, _ = Baseline(remaining, seconds=dict(baseline_seconds or {}),
                                   tolerance=config.baseline_tolerance).split(found)
            for d in old:
                remaining[d.fingerprint()] -= 1
            outcomes.append(EntryOutcome(entry, report=report, findings=tuple(new), baselined=tuple(old)))
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
