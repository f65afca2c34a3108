"""`@analyzer.audit`: analyse a function's communication the first time it runs for a new signature.

    @analyzer.audit(mesh=mesh, hardware="tpu-v5e", budgets={"comm-seconds-per-step": 2e-3})
    @jax.jit
    def train_step(params, batch): ...

On the first call with a new signature (the shapes, dtypes and shardings of the array arguments, the
structure of the arguments and the values of the non-array ones) the decorator compiles the function on
the analyzer's target, runs the rules, and then calls the function as usual. Later calls with a known
signature only look the signature up: no tracing, no compile, no analysis. The wrapped function's results
are never touched: the decorator calls it with the caller's own arguments and returns what it returns.

A violation (a finding at or above `fail_on`) raises `AuditError` before the step runs (`on_violation=
"raise"`, the default), warns with `AuditWarning` ("warn"), or is only recorded ("off"). The report of
every signature stays on the wrapper: `train_step.audit_reports`.

Called inside another function's trace (jit, grad, vmap), the arguments are tracers without the shardings
XLA will pick, so such calls are not audited; `AuditWarning` says so once. Audit the outermost function.
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analyzer.errors import AnalyzerError, valid_choices

if TYPE_CHECKING:
    from analyzer.rules.config import Config
    from analyzer.diagnostics import Diagnostic
    from analyzer.analysis.report import Report

__all__ = ["audit", "Audited", "AuditError", "AuditWarning", "AuditOptions", "signature_of"]

ON_VIOLATION = ("raise", "warn", "off")
SEVERITIES = ("info", "warning", "error")


class AuditError(AnalyzerError):
    """An audited function's plan broke a rule or a budget.

    Attributes:
      diagnostics: the findings that count as violations (at or above the audit's `fail_on` severity).
      report: the full `Report` of the analysed signature.
    """

    def __init__(self, message: str, *, diagnostics: Sequence[Diagnostic], report: Report | None) -> None:
        super().__init__(message)
        self.diagnostics = tuple(diagnostics)
        self.report = report


class AuditWarning(UserWarning):
    """Category of the warnings `@audit(on_violation="warn")` issues; filter it like any warning."""


@dataclass(frozen=True)
class AuditOptions:
    """What `@audit` was asked to do. Checked when the decorator is applied, not at the first call."""

    mesh: Any = None
    target: str | None = None
    hardware: str | None = None
    topology: str | None = None
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    budgets: Mapping[str, Any] = field(default_factory=dict)
    on_violation: str = "raise"
    fail_on: str = "warning"
    report_path: str | None = None
    config: Any = None

    def __post_init__(self) -> None:
        if self.on_violation not in ON_VIOLATION:
            raise AnalyzerError(
                f"@audit(on_violation={self.on_violation!r}) is not a valid choice; "
                + valid_choices(str(self.on_violation), ON_VIOLATION, what="on_violation values")
            )
        if self.fail_on not in SEVERITIES:
            raise AnalyzerError(
                f"@audit(fail_on={self.fail_on!r}) is not a severity; "
                + valid_choices(str(self.fail_on), SEVERITIES, what="severities")
            )
        if self.budgets:
            from dataclasses import fields

            from analyzer.rules.config import Budgets

            names = [f.name.replace("_", "-") for f in fields(Budgets)]
            for key in self.budgets:
                if str(key).replace("_", "-") not in names:
                    raise AnalyzerError(f"@audit(budgets=...) has an unknown budget {key!r}; "
                                        + valid_choices(str(key).replace("_", "-"), names, what="budgets"))
        if self.report_path is not None and Path(self.report_path).suffix not in _REPORT_FORMATS:
            raise AnalyzerError(
                f"@audit(report_path={self.report_path!r}): cannot tell the format from the suffix; "
                + valid_choices(Path(self.report_path).suffix, _REPORT_FORMATS, what="suffixes")
            )
        if self.report_path is not None:
            from analyzer.fileio import check_writable

            check_writable(self.report_path, what="@audit(report_path=...)")


_REPORT_FORMATS = (".html", ".md", ".json", ".txt")


def audit(
    fn: Callable | None = None,
    /,
    *,
    mesh: Any = None,
    target: str | None = None,
    hardware: str | None = None,
    topology: str | None = None,
    select: Sequence[str] | None = None,
    ignore: Sequence[str] = (),
    budgets: Mapping[str, Any] | None = None,
    on_violation: str = "raise",
    fail_on: str = "warning",
    report_path: str | Path | None = None,
    config: Any = None,
) -> Any:
    """Audit a function's communication when it is first called for each new signature.

    Use it bare (`@audit`) or with options (`@audit(mesh=mesh, on_violation="warn")`), above or below
    `jax.jit`, or on a plain function.

    Args:
      fn: the function (given when used bare).
      mesh: the `jax.sharding.Mesh`; default: the mesh of the first `NamedSharding` among the arguments.
      target: "cpu" (fake devices) or "tpu:<topology>" (ahead-of-time TPU compile); default: the
        project config's, else "cpu".
      hardware: the hardware spec prices are computed for; default: the project config's, else "tpu-v5e".
      topology: the physical slice for the cpu target, e.g. "v5e:2x4"; default: the project config's, else
        the smallest that holds the mesh.
      select: rule codes or prefixes to run (default: the project's config, else every rule).
      ignore: rule codes or prefixes to skip.
      budgets: budgets as in `[tool.hlo-analyzer.budgets]`, e.g. `{"comm-seconds-per-step": 2e-3}`.
      on_violation: "raise" (AuditError), "warn" (AuditWarning) or "off" (record only).
      fail_on: lowest severity that counts as a violation: "info", "warning" (default) or "error".
      report_path: write the report of each analysed signature there (.html, .md, .json or .txt). With more
        than one signature, the second and later get `-2`, `-3`... before the suffix.
      config: a `Config`, a dict of `[tool.hlo-analyzer]` keys, a path to a pyproject.toml, or None for the
        nearest pyproject.toml above the current directory (when there is none, the defaults).

    Returns:
      an `Audited` wrapper (callable like `fn`), or a decorator when `fn` is not given.

    Example:
        >>> import jax
        >>> mesh = jax.make_mesh((8,), ("X",))
        >>> @audit(mesh=mesh, on_violation="warn")
        ... @jax.jit
        ... def step(w, x):
        ...     return x @ w
    """
    options = AuditOptions(
        mesh=mesh,
        target=target,
        hardware=hardware,
        topology=topology,
        select=tuple(select) if select is not None else None,
        ignore=tuple(ignore),
        budgets=dict(budgets or {}),
        on_violation=on_violation,
        fail_on=fail_on,
        report_path=str(report_path) if report_path is not None else None,
        config=config,
    )
    if fn is None:
        return lambda f: Audited(f, options)
    if not callable(fn):
        raise AnalyzerError(f"@audit expects a function, got {type(fn).__name__}; use @audit or @audit(...)")
    return Audited(fn, options)


@dataclass(frozen=True)
class _Outcome:
    """What the analysis of one signature found (report None: the analysis failed and a warning said why)."""

    report: Report | None
    violations: tuple[Diagnostic, ...]


class Audited:
    """A function wrapped by `@audit`. Calls go straight to the function once their signature is known.

    Attributes:
      audit_reports: signature -> `Report`, one per analysed signature, in the order they were seen.
      audit_count: how many signatures were analysed (one analysis each; failed ones count too).
    """

    def __init__(self, fn: Callable, options: AuditOptions) -> None:
        self.__wrapped__ = fn
        self.audit_options = options
        self._outcomes: dict[Any, _Outcome] = {}
        self._lock = threading.Lock()
        functools.update_wrapper(self, fn, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import jax  # already imported by whoever made the arguments: a dict lookup

        leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
        if any(isinstance(x, jax.core.Tracer) for x in leaves):
            self._warn_traced()
            return self.__wrapped__(*args, **kwargs)
        key = _hashable((treedef, tuple(_leaf_key(x) for x in leaves)))
        outcome = self._outcomes.get(key)
        if outcome is None:
            with self._lock:
                outcome = self._outcomes.get(key)
                if outcome is None:
                    outcome = self._analyse_or_explain(args, kwargs)
                    self._outcomes[key] = outcome
                    self._report_first(outcome)
                    return self.__wrapped__(*args, **kwargs)
        # A known signature, or one another thread analysed while this one waited for the lock: with
        # "raise", every call with a violating signature raises, not only the call that analysed it.
        if outcome.violations and self.audit_options.on_violation == "raise":
            raise self._error(outcome)
        return self.__wrapped__(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # jax.jit's wrapper has .lower, .trace, .eval_shape...: keep them reachable through the audit.
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.__dict__["__wrapped__"], name)

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return functools.partial(self, instance)

    def __repr__(self) -> str:
        return f"<audited {getattr(self.__wrapped__, '__qualname__', self.__wrapped__)!r}>"

    @property
    def audit_reports(self) -> dict[Any, Report]:
        return {key: o.report for key, o in self._outcomes.items() if o.report is not None}

    @property
    def audit_count(self) -> int:
        return len(self._outcomes)

    def _analyse_or_explain(self, args: tuple, kwargs: dict) -> _Outcome:
        """`_analyse`, except that with on_violation "warn" or "off" a failed analysis warns and lets the step
        run (an auditing tool must not stop a training run it was only asked to watch)."""
        try:
            return self._analyse(args, kwargs)
        except Exception as e:
            if self.audit_options.on_violation == "raise":
                raise
            name = getattr(self.__wrapped__, "__qualname__", repr(self.__wrapped__))
            why = str(e) if isinstance(e, AnalyzerError) else f"internal error ({type(e).__name__}: {e})"
            warnings.warn(f"@audit: could not analyse {name} for this signature, so it runs unaudited: {why}",
                          AuditWarning, stacklevel=4)
            return _Outcome(None, ())

    def _analyse(self, args: tuple, kwargs: dict) -> _Outcome:
        """Compile and analyse the function for these arguments' signature, and run the rules."""
        from analyzer.pipeline import analyze

        opts = self.audit_options
        fn, abstract = _abstract_call(self.__wrapped__, args, kwargs)
        config = _config(opts)
        mesh = opts.mesh if opts.mesh is not None else _mesh_of(args, kwargs)
        if mesh is None and config.mesh:
            mesh = dict(config.mesh)
        from analyzer.compile.lower import time_limit

        name = getattr(self.__wrapped__, "__qualname__", "") or getattr(self.__wrapped__, "__name__", "")
        # The config's `timeout` bounds the compile, in whichever thread the first call came from.
        with time_limit(config.timeout, f"@audit {name or 'function'}"):
            report = analyze(
                fn,
                *abstract,
                mesh=mesh,
                target=opts.target or config.target or "cpu",
                hardware=opts.hardware or config.hardware or "tpu-v5e",
                topology=opts.topology or config.topology,
                config=config,
            )
        if name and not report.name:
            from dataclasses import replace

            report = replace(report, name=name)
        threshold = SEVERITIES.index(opts.fail_on)
        violations = tuple(d for d in report.diagnostics if d.severity.rank >= threshold)
        if opts.report_path is not None:
            _write_report(report, _numbered(Path(opts.report_path), len(self._outcomes) + 1))
        return _Outcome(report, violations)

    def _warn_traced(self) -> None:
        """Say once that a call under jit/grad/vmap is not audited (its arguments carry no shardings)."""
        if self.__dict__.get("_warned_traced"):
            return
        self.__dict__["_warned_traced"] = True
        name = getattr(self.__wrapped__, "__qualname__", repr(self.__wrapped__))
        warnings.warn(
            f"@audit: {name} was called inside a jax transformation (jit, grad, vmap...); its arguments are "
            "tracers whose shardings XLA has not chosen yet, so this call is not audited. Put @audit on the "
            "outermost function, the one you call with arrays.",
            AuditWarning,
            stacklevel=3,
        )

    def _report_first(self, outcome: _Outcome) -> None:
        if not outcome.violations:
            return
        if self.audit_options.on_violation == "raise":
            raise self._error(outcome)
        if self.audit_options.on_violation == "warn":
            warnings.warn(_message(self.__wrapped__, outcome), AuditWarning, stacklevel=3)

    def _error(self, outcome: _Outcome) -> AuditError:
        return AuditError(
            _message(self.__wrapped__, outcome), diagnostics=outcome.violations, report=outcome.report
        )


def _message(fn: Callable, outcome: _Outcome) -> str:
    """The violations as a message: one line per finding, with the fix."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    n = len(outcome.violations)
    lines = [f"audit of {name}: {n} finding{'s' if n != 1 else ''}"]
    for d in outcome.violations:
        lines.append(f"  {d.location}: {d.code} [{d.severity.value}] {d.name}: {d.message}")
        if d.fix:
            lines.append(f"      fix: {d.fix}")
    return "\n".join(lines)


def _config(opts: AuditOptions) -> Config:
    """The rules config: the project's (or the one given) with the decorator's select/ignore/budgets on top."""
    from analyzer.rules.config import Config, as_config, find_config, load_config

    base = opts.config
    if base is None:
        found = find_config()
        base = load_config(found) if found is not None else Config()
    elif isinstance(base, (str, Path)):
        base = load_config(base)
    else:
        base = as_config(base, what="@audit(config=...)")
    return base.override(
        select=opts.select, ignore=opts.ignore or None, budgets=opts.budgets or None, where="@audit(...)"
    )


def _numbered(path: Path, n: int) -> Path:
    """`report.html` for the first signature, `report-2.html` for the second..."""
    return path if n == 1 else path.with_name(f"{path.stem}-{n}{path.suffix}")


def _write_report(report: Report, path: Path) -> None:
    """Write the report in the format its suffix names."""
    render = {".html": report.to_html, ".md": report.to_markdown, ".json": report.to_json, ".txt": report.to_text}
    from analyzer.fileio import write_atomic

    write_atomic(path, render[path.suffix](), what="@audit report")


def _is_array(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype")


def _sharding_of(x: Any) -> Any:
    """The sharding of an array argument, or None (numpy arrays, tracers without one)."""
    try:
        return getattr(x, "sharding", None)
    except Exception:  # a tracer under an outer jit has no concrete sharding
        return None


def _leaf_key(x: Any) -> Any:
    """The part of the signature one argument leaf contributes (cheap: attribute reads, no formatting)."""
    aval = getattr(x, "aval", None)
    if aval is not None:  # a jax.Array: its cached aval holds shape, dtype and weak type in one hashable
        return ("jax", aval, x.sharding)
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return ("array", tuple(x.shape), x.dtype, getattr(x, "weak_type", False), _sharding_of(x))
    if isinstance(x, (bool, int, float, complex)):
        # jax traces Python scalars as weakly typed scalars: the value does not change the program.
        return ("scalar", type(x))
    try:
        hash(x)
        return ("static", type(x), x)
    except TypeError:
        return ("object", type(x), id(x))


def _hashable(key: tuple) -> tuple:
    """The key itself when it hashes, else one with unhashable shardings replaced by their repr."""
    try:
        hash(key)
        return key
    except TypeError:
        treedef, leaves = key
        return (treedef, tuple(
            leaf if leaf[0] not in ("array", "jax") else (*leaf[:-1], repr(leaf[-1])) for leaf in leaves
        ))


def signature_of(args: tuple, kwargs: Mapping[str, Any]) -> tuple:
    """The key under which a call's analysis is cached: what decides the compiled program.

    The tree structure of the arguments, and per leaf: shape, dtype, weak type and sharding for arrays,
    the type for Python scalars (jax traces them as values, not constants), the value for other hashable
    leaves (they can only be static arguments).

    Example:
        >>> import numpy as np
        >>> signature_of((np.zeros(3),), {}) == signature_of((np.ones(3),), {})
        True
    """
    import jax

    leaves, treedef = jax.tree_util.tree_flatten((args, dict(kwargs)))
    return _hashable((treedef, tuple(_leaf_key(x) for x in leaves)))


def _abstract_call(fn: Callable, args: tuple, kwargs: Mapping[str, Any]) -> tuple[Callable, list]:
    """A function of the array leaves only, and those leaves as `ShapeDtypeStruct`s with their shardings.

    Non-array leaves (static configuration, Python scalars) are closed over, so keyword arguments and
    nested containers reach the analysis in the shape the function expects.
    """
    import jax
    from jax.sharding import NamedSharding

    leaves, treedef = jax.tree_util.tree_flatten((args, dict(kwargs)))
    array_pos = [i for i, x in enumerate(leaves) if _is_array(x)]
    abstract = []
    for i in array_pos:
        x = leaves[i]
        sharding = _sharding_of(x)
        abstract.append(
            jax.ShapeDtypeStruct(
                tuple(x.shape),
                x.dtype,
                sharding=sharding if isinstance(sharding, NamedSharding) else None,
                weak_type=bool(getattr(x, "weak_type", False)),
            )
        )

    def call_with_arrays(*arrays: Any) -> Any:
        filled = list(leaves)
        for i, a in zip(array_pos, arrays):
            filled[i] = a
        a, k = jax.tree_util.tree_unflatten(treedef, filled)
        return fn(*a, **k)

    # Names only: no __wrapped__, or jax would read fn's signature for a function of the arrays alone.
    for attr in ("__name__", "__qualname__", "__module__", "__doc__"):
        if hasattr(fn, attr):
            setattr(call_with_arrays, attr, getattr(fn, attr))
    return call_with_arrays, abstract


def _mesh_of(args: tuple, kwargs: Mapping[str, Any]) -> Any:
    """The mesh of the first argument with a `NamedSharding`, else jax's current mesh, else None."""
    import jax
    from jax.sharding import NamedSharding

    for x in jax.tree_util.tree_leaves((args, dict(kwargs))):
        sharding = _sharding_of(x) if _is_array(x) else None
        if isinstance(sharding, NamedSharding):
            return sharding.mesh
    return None
