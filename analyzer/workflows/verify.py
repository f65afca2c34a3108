"""Verified fixes (`analyze --verify-fixes`): each finding's proposed change applied, the program recompiled with
it, and the predicted step after the change set beside the saving the finding promised.

A finding states its change for people in `Diagnostic.fix`; the verifier reads its structured form:
  - `details.fix_spec`: `{"arguments": {PATH: SPEC}, "mesh": {AXIS: SIZE}, "constraints": {LINE: SPEC}}`, each
    part optional. PATH is the argument's pytree path as jax names it in the program (`batch['x']`,
    `params['w_in']`), SPEC the PartitionSpec to write, as the user writes it (`P('data', None, None)`); the mesh
    part gives the new size of each axis it changes (the others keep theirs); LINE is the `file:line` of a
    `jax.lax.with_sharding_constraint` whose spec to write (`model.py:42`: every constraint jax traced from that
    line, the backward pass's included, takes SPEC on the constraint's own mesh);
  - else HA104's `details.argument` and `details.proposed_partition_spec`;
  - else a mesh change in `details.fix_mesh` (HA101's roofline split, after root-cause reconciliation);
  - else a fix written `PATH: P(...) -> P(...)`.
A finding with none of these (advice in words: "raise the batch per chip", "keep the output replicated") is
not verified and says why, as is one whose change cannot be made on the arguments at hand (a path no argument
has, a spec of the wrong rank, a mesh axis the program does not have, a recompile that fails).

Each distinct change is compiled once, however many findings propose it. The saving verified is the
predicted step before the change minus the predicted step after it (`Totals.step_seconds`, the step model of
docs/step.md), against the finding's `saving_seconds`. The results go into each finding's details:
`verified_step_seconds`, `verified_saving_seconds`, `verified_change` (the change as applied),
`verified_findings` (how many findings propose that one change: the saving verified is the change's, the
promise each finding's own), or `unverified_reason`. A finding of a smaller root cause is also verified on top of
the largest root cause's change, the one the report says to make first (`verified_after_change`,
`verified_after_saving_seconds`).
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from analyzer.errors import AnalyzerError

if TYPE_CHECKING:
    from analyzer.analysis.report import Report
    from analyzer.diagnostics import Diagnostic

__all__ = [
    "FixSpec",
    "Verification",
    "apply_fix",
    "argument_names",
    "fix_spec_of",
    "parse_partition_spec",
    "verify_config_fixes",
    "verify_fixes",
]

# `batch['x']: P(None, None, None) -> P('data', None, None)`: a fix that is one argument's spec change
_SPEC_FIX = re.compile(r"^\s*(?P<path>[A-Za-z_][^:\s]*(?:\[[^\]]*\])*)\s*:\s*P\((?P<now>[^>]*)\)\s*->\s*"
                       r"(?P<new>P\(.*\))\s*$")


@dataclass(frozen=True)
class FixSpec:
    """A change the verifier can make: argument path -> PartitionSpec text, and mesh axis -> new size."""

    arguments: Mapping[str, str] = field(default_factory=dict)
    mesh: Mapping[str, int] = field(default_factory=dict)
    constraints: Mapping[str, str] = field(default_factory=dict)  # with_sharding_constraint `file:line` -> spec

    @property
    def key(self) -> tuple[tuple[Any, ...], ...]:
        return (tuple(sorted(self.arguments.items())), tuple(sorted(self.mesh.items())),
                tuple(sorted(self.constraints.items())))

    def text(self) -> str:
        """The change in words: `batch['x'] -> P('data', None, None)`, `mesh data=2, model=4`,
        `with_sharding_constraint at model.py:42 -> P('data', None, 'model')`."""
        parts = [f"{path} -> {spec}" for path, spec in self.arguments.items()]
        parts += [f"with_sharding_constraint at {line} -> {spec}" for line, spec in self.constraints.items()]
        if self.mesh:
            parts.append("mesh " + ", ".join(f"{a}={n}" for a, n in self.mesh.items()))
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"arguments": dict(self.arguments), "mesh": {a: int(n) for a, n in self.mesh.items()}}
        if self.constraints:
            out["constraints"] = dict(self.constraints)
        return out


@dataclass(frozen=True)
class Verification:
    """One change recompiled: the predicted step after it, or why it could not be made."""

    change: str
    step_before: float
    step_after: float | None = None
    reason: str = ""

    @property
    def saving(self) -> float | None:
        return None if self.step_after is None else self.step_before - self.step_after


def parse_partition_spec(text: str) -> Any:
    """`P('data', None, None)` (or `PartitionSpec(...)`) -> the jax PartitionSpec; entries are None, an axis name
    or a tuple of axis names. Raises AnalyzerError naming the text otherwise (it is never evaluated).

    Example:
        >>> tuple(parse_partition_spec("P(('data', 'model'), None)"))
        (('data', 'model'), None)
    """
    from jax.sharding import PartitionSpec

    def bad(why: str) -> AnalyzerError:
        return AnalyzerError(f"PartitionSpec {text!r}: {why}; write it as P('data', None) with axis names, None "
                             "or tuples of axis names")

    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        raise bad(f"not Python at column {e.offset}") from None
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in ("P", "PartitionSpec") and not node.keywords):
        raise bad("not a call of P")
    entries: list[Any] = []
    for arg in node.args:
        if isinstance(arg, ast.Constant) and (arg.value is None or isinstance(arg.value, str)):
            entries.append(arg.value)
        elif isinstance(arg, ast.Tuple) and (names := [e.value for e in arg.elts if isinstance(e, ast.Constant)
                                                      and isinstance(e.value, str)]) and len(names) == len(arg.elts):
            entries.append(tuple(names))
        else:
            raise bad(f"entry {ast.unparse(arg)!r} is not an axis name, None or a tuple of names")
    return PartitionSpec(*entries)


def fix_spec_of(d: Diagnostic, sizes: Mapping[str, int]) -> FixSpec | str:
    """The structured change a finding proposes (see the module docstring), or why it has none to apply."""
    details = d.details or {}
    if details.get("superseded_by"):
        return (f"no change of its own: the change for {details['superseded_by']} comes first (re-analyse after "
                "it)")
    given = details.get("fix_spec")
    if isinstance(given, Mapping) and (given.get("arguments") or given.get("mesh") or given.get("constraints")):
        return FixSpec(dict(given.get("arguments") or {}), {str(a): int(n) for a, n in
                                                           (given.get("mesh") or {}).items()},
                       {str(k): str(v) for k, v in (given.get("constraints") or {}).items()})
    if details.get("argument") and details.get("proposed_partition_spec"):
        return FixSpec({str(details["argument"]): str(details["proposed_partition_spec"])})
    mesh = {str(a): int(n) for a, n in (details.get("fix_mesh") or {}).items()}
    if mesh and any(int(sizes.get(a, 1)) != n for a, n in mesh.items()):
        return FixSpec(mesh=mesh)
    m = _SPEC_FIX.match(d.fix or "")
    if m:
        return FixSpec({m["path"]: m["new"]})
    if not d.fix:
        return "the finding proposes no change"
    named = details.get("root_cause_fix")  # an activation layout's change (analyzer.rules.rootcause.layout_change)
    return ("its fix is advice in words, not an argument's PartitionSpec or a mesh size the verifier can apply"
            + (f"; its root cause's change ({named}) is verified on the finding that proposes it" if named else ""))


def argument_names(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any] | None = None
                   ) -> list[str]:
    """The name jax gives each array leaf of `args` in the program (`params['w_in']`, `batch['x']`, `args[0]`),
    in the order of `jax.tree_util.tree_flatten_with_path(tuple(args))`: the parameter's name in `fn`'s
    signature, then the leaf's path; `args[i]` where the signature does not name it."""
    import jax

    heads = [f"args[{i}]" for i in range(len(args))]
    try:
        params = list(inspect.signature(fn).parameters.values())
        inspect.signature(fn).bind(*args, **dict(kwargs or {}))
    except (TypeError, ValueError):
        params = []
    for i in range(len(args)):
        if i >= len(params) and not (params and params[-1].kind == inspect.Parameter.VAR_POSITIONAL):
            break
        p = params[min(i, len(params) - 1)]
        if p.kind == inspect.Parameter.VAR_POSITIONAL:
            start = params.index(p)
            heads[i] = f"{p.name}[{i - start}]"
        elif p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            heads[i] = p.name
    out = []
    for path, _ in jax.tree_util.tree_flatten_with_path(tuple(args))[0]:
        idx = getattr(path[0], "idx", 0)
        out.append(heads[idx] + jax.tree_util.keystr(tuple(path[1:])))
    return out


def _same(a: str, b: str) -> bool:
    """Two pytree paths alike but for quoting (`batch['x']`, `batch["x"]`, `batch[\\'x\\']`)."""
    def norm(s: str) -> str:
        return re.sub(r"[\\'\"\s]", "", s)

    return norm(a) == norm(b)


def _resized(args: Sequence[Any], mesh: Any, sizes: Mapping[str, int]) -> tuple[tuple[Any, ...], Any]:
    """The arguments with every NamedSharding moved onto a mesh of the same axis names resized to `sizes`,
    and that mesh."""
    import jax
    from jax.sharding import AbstractMesh, NamedSharding

    names = tuple(mesh.axis_names)
    new_sizes = tuple(int(sizes.get(a, n)) for a, n in zip(names, mesh.axis_sizes))
    types = getattr(mesh, "axis_types", None)
    new = AbstractMesh(new_sizes, names, **({"axis_types": tuple(types)} if types else {}))

    def move(leaf: Any) -> Any:
        sh = getattr(leaf, "sharding", None)
        if isinstance(sh, NamedSharding) and hasattr(leaf, "shape"):
            return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(new, sh.spec))
        return leaf

    return tuple(jax.tree_util.tree_map(move, tuple(args))), new


def apply_fix(fix: FixSpec, fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any], mesh: Any,
              rebuild: Callable[[str], tuple[Callable[..., Any], Sequence[Any], Mapping[str, Any]]] | None = None
              ) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], Any]:
    """(fn, args, kwargs, mesh) with the change made. A mesh change asks `rebuild` (the entry point called on
    the new mesh, `AXIS=N,...`) when given, else moves the arguments' NamedShardings onto the resized mesh.
    Raises AnalyzerError saying why the change cannot be made."""
    import jax
    from jax.sharding import NamedSharding

    from analyzer.compile.lower import make_mesh

    if fix.mesh:
        now = make_mesh(mesh)
        unknown = [a for a in fix.mesh if a not in now.axis_names]
        if unknown:
            raise AnalyzerError(f"the mesh has no axis {', '.join(map(repr, unknown))}: adding one changes which "
                                "arrays use it, which the change does not say")
        text = ",".join(f"{a}={int(fix.mesh.get(a, n))}" for a, n in zip(now.axis_names, now.axis_sizes))
        if rebuild is not None:
            fn, args, kwargs = rebuild(text)
            mesh = text
        else:
            args, mesh = _resized(args, now, fix.mesh)
    args = tuple(args)
    if fix.arguments:
        names = argument_names(fn, args, kwargs)
        leaves, tree = jax.tree_util.tree_flatten(args)
        if len(leaves) != len(names):
            raise AnalyzerError("the arguments' leaves could not be named")
        for path, text in fix.arguments.items():
            spec = parse_partition_spec(text)
            hits = [i for i, n in enumerate(names) if _same(n, path)]
            if len(hits) != 1:
                raise AnalyzerError(f"no argument is named {path} (the arguments: {', '.join(names[:8])}"
                                    f"{', ...' if len(names) > 8 else ''})")
            leaf = leaves[hits[0]]
            sh = getattr(leaf, "sharding", None)
            if not isinstance(sh, NamedSharding):
                raise AnalyzerError(f"{path} has no NamedSharding to change")
            if len(spec) > len(leaf.shape):
                raise AnalyzerError(f"{text} has {len(spec)} entries for {path} of rank {len(leaf.shape)}")
            leaves[hits[0]] = jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(sh.mesh, spec))
        args = tuple(jax.tree_util.tree_unflatten(tree, leaves))
    if fix.constraints:
        fn = _with_constraints(fn, args, kwargs, fix.constraints)
    return fn, args, dict(kwargs), mesh


def _constraint_site(line: str) -> tuple[str, int]:
    """`path/to/model.py:42` -> ("path/to/model.py", 42); AnalyzerError naming it otherwise."""
    path, _, number = line.rpartition(":")
    if not path or not number.isdigit():
        raise AnalyzerError(f"with_sharding_constraint site {line!r}: write it as file:line (model.py:42)")
    return path, int(number)


def _with_constraints(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any],
                      changes: Mapping[str, str]) -> Callable[..., Any]:
    """`fn` with the with_sharding_constraints traced from each `file:line` of `changes` given that line's spec
    (on the constraint's own mesh): `fn`'s program as jax traces it (`jax.make_jaxpr`), every `sharding_constraint`
    whose user frame is that line (the backward pass's, which jax traces from the same line, included) rewritten,
    and evaluated again under `jax.jit` with `fn`'s signature. Raises AnalyzerError when no constraint of the
    program comes from a line."""
    import jax
    from jax._src import source_info_util

    sites = {line: (_constraint_site(line), parse_partition_spec(text)) for line, text in changes.items()}
    found: set[str] = set()

    def at(eqn: Any) -> str:
        frame = source_info_util.user_frame(eqn.source_info.traceback) if eqn.source_info else None
        if frame is None:
            return ""
        name = frame.file_name.replace("\\", "/")
        return next((line for line, ((path, number), _) in sites.items() if frame.start_line == number
                     and (name == path or name.endswith("/" + path.lstrip("./")))), "")

    def rewrite(jaxpr: Any) -> Any:
        eqns = []
        for eqn in jaxpr.eqns:
            params = {k: _rewritten(v, rewrite) for k, v in eqn.params.items()}
            line = at(eqn) if eqn.primitive.name == "sharding_constraint" else ""
            if line:
                sharding = params["sharding"]
                params["sharding"] = type(sharding)(sharding.mesh, sites[line][1])
                found.add(line)
            eqns.append(eqn.replace(params=params))
        return jaxpr.replace(eqns=eqns)

    traced, shapes = jax.make_jaxpr(fn, return_shape=True)(*args, **kwargs)
    closed = traced.replace(jaxpr=rewrite(traced.jaxpr))
    missing = sorted(set(changes) - found)
    if missing:
        raise AnalyzerError(f"no with_sharding_constraint of the program comes from {', '.join(missing)}")
    out_tree = jax.tree_util.tree_structure(shapes)

    def changed(*a: Any, **k: Any) -> Any:
        flat = jax.tree_util.tree_leaves((a, k))
        return jax.tree_util.tree_unflatten(out_tree, jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *flat))

    try:
        changed.__dict__["__signature__"] = inspect.signature(fn)  # the arguments keep their names
    except (TypeError, ValueError):
        pass
    return jax.jit(changed)


def _rewritten(value: Any, rewrite: Callable[[Any], Any]) -> Any:
    """An equation's parameter with the jaxprs in it (a nested jit's, a loop's body, a cond's branches) rewritten."""
    if hasattr(value, "jaxpr") and hasattr(value, "consts") and hasattr(value.jaxpr, "eqns"):  # a ClosedJaxpr
        return value.replace(jaxpr=rewrite(value.jaxpr))
    if hasattr(value, "eqns"):
        return rewrite(value)
    if isinstance(value, tuple) and any(hasattr(v, "eqns") or hasattr(v, "consts") for v in value):
        return tuple(_rewritten(v, rewrite) for v in value)
    return value


def _options(report: Report, options: Mapping[str, Any]) -> dict[str, Any]:
    """`analyze`'s options for the recompile: the report's own (target, hardware, config, cost model, XLA flags)
    unless given."""
    a = report.analysis
    out: dict[str, Any] = {"target": report.target, "hardware": a.hardware if a.hardware is not None
                           else report.hardware, "config": a.config, "model": a.cost_model}
    if a.xla_flags:
        out["xla_flags"] = dict(a.xla_flags)
    out.update({k: v for k, v in options.items() if v is not None})
    return out


def _verify_one(fix: FixSpec, report: Report, fn: Callable[..., Any], args: Sequence[Any],
                kwargs: Mapping[str, Any], mesh: Any, rebuild: Any, options: Mapping[str, Any]) -> Verification:
    from analyzer.compile.lower import LoweringError
    from analyzer.pipeline import analyze

    before = float(report.totals.step_seconds or 0.0)
    try:
        new_fn, new_args, new_kwargs, new_mesh = apply_fix(fix, fn, args, kwargs, mesh, rebuild)
    except AnalyzerError as e:
        return Verification(fix.text(), before, reason=f"cannot be applied: {e}")
    # The output shardings `analyze` was given stay what the user asked for (a change of the program's arguments
    # must not also change what it returns); on a resized mesh they name the old one, so they go with the mesh.
    outs = report.analysis.out_shardings
    if outs is not None and not fix.mesh and "out_shardings" not in options:
        options = {**options, "out_shardings": outs}
    try:
        after = analyze(new_fn, *new_args, mesh=new_mesh, **options, **new_kwargs)
    except (AnalyzerError, LoweringError) as e:
        return Verification(fix.text(), before, reason=f"the program did not compile with it: {e}")
    step = float(after.totals.step_seconds or 0.0)
    if not step > 0:
        return Verification(fix.text(), before, reason="no step was predicted after it")
    return Verification(fix.text(), before, step)


def verify_fixes(report: Report, fn: Callable[..., Any], args: Sequence[Any] | None = None,
                 kwargs: Mapping[str, Any] | None = None, *, mesh: Any = None,
                 rebuild: Callable[[str], tuple[Callable[..., Any], Sequence[Any], Mapping[str, Any]]] | None = None,
                 **options: Any) -> Report:
    """The report with each finding's change applied and recompiled (see the module docstring).

    Args:
      report: a report from `analyzer.analyze` of `fn(*args, **kwargs)`.
      fn: the function it analysed (the report keeps its arguments, not the function).
      args: its abstract arguments; default `report.analysis.args`.
      kwargs: `fn`'s keyword arguments.
      mesh: the mesh it was analysed on; default the report's (axis names and sizes).
      rebuild: `mesh_text -> (fn, args, kwargs)`, the entry point called on another mesh (`data=2,model=4`),
        for mesh changes; without it the arguments' NamedShardings are moved onto the resized mesh.
      **options: `analyze`'s options for the recompiles (topology, hardware, ...); default the report's.

    Returns:
      The report with `verified_step_seconds`, `verified_saving_seconds` and `verified_change` (or
      `unverified_reason`) in each finding's details, and a note saying how many changes were recompiled.

    Example:
        >>> fn, args = step, (params, batch)                                       # doctest: +SKIP
        >>> checked = verify_fixes(analyzer.analyze(fn, *args, mesh="data=4,model=2"), fn, args)  # doctest: +SKIP
        >>> [d.details["verified_saving_seconds"] for d in checked.diagnostics if d.code == "HA104"]  # doctest: +SKIP
        [0.000178]
    """
    args = tuple(report.analysis.args or ()) if args is None else tuple(args)
    kwargs = dict(kwargs or {})
    if mesh is None and report.mesh is not None:
        mesh = ",".join(f"{a}={n}" for a, n in zip(report.mesh.axis_names, report.mesh.axis_sizes))
    sizes = dict(zip(report.mesh.axis_names, report.mesh.axis_sizes)) if report.mesh is not None else {}
    opts = _options(report, options)
    done: dict[Any, Verification] = {}

    def verify(fix: FixSpec) -> Verification:
        if fix.key not in done:
            done[fix.key] = _verify_one(fix, report, fn, args, kwargs, mesh, rebuild, opts)
        return done[fix.key]

    out: list[Diagnostic] = []
    specs: list[FixSpec | None] = []
    for d in report.diagnostics:
        fix = fix_spec_of(d, sizes)
        specs.append(fix if isinstance(fix, FixSpec) else None)
        if isinstance(fix, str):
            out.append(replace(d, details={**d.details, "unverified_reason": fix}))
            continue
        if not args:
            result = Verification(fix.text(), float(report.totals.step_seconds or 0.0),
                                  reason="the report has no arguments to change (a dump, or a report read back)")
        elif report.analysis.in_shardings is not None:
            result = Verification(fix.text(), float(report.totals.step_seconds or 0.0),
                                  reason="the shardings came as in_shardings, which the change does not rewrite")
        else:
            result = verify(fix)
        out.append(replace(d, details={**d.details, **_fields(fix, result)}))
    out = _after_top(out, specs, verify)
    shared: dict[Any, int] = {}
    for d in out:
        if "fix_spec" in d.details and "verified_change" in d.details:
            shared[d.details["verified_change"]] = shared.get(d.details["verified_change"], 0) + 1
    out = [replace(d, details={**d.details, "verified_findings": shared[d.details["verified_change"]]})
           if d.details.get("verified_change") in shared else d for d in out]
    n = len(done)
    note = (f"Fixes verified (--verify-fixes): {n} distinct change{'s' if n != 1 else ''} applied and recompiled; "
            "each finding shows the predicted step after its change beside the saving it promised."
            if n else "Fixes verified (--verify-fixes): no finding proposes a change the verifier can apply.")
    return replace(report, diagnostics=tuple(out), notes=(*report.notes, note))


def verify_config_fixes(report: Report, config: Any, *, hardware: str | None = None,
                        topology: str | None = None) -> Report:
    """`verify_fixes` for a report config's program (`hlo-analyzer report --verify-fixes`, or `verify-fixes = true`
    in the config): its entry point or the built-in template built again (`ReportConfig.build`), and on a mesh
    change built on the new mesh (`ReportConfig.with_plan`), so the template's shardings follow the mesh as they
    do in a sweep. `hardware`, `topology`: the report's overrides, as `analyze_config` took them (the config's
    slice belongs to the config's hardware)."""
    fn, args, kwargs = config.build()
    if topology is None and hardware is None:
        topology = config.topology

    def rebuild(text: str) -> tuple[Callable[..., Any], Sequence[Any], Mapping[str, Any]]:
        sizes = dict(item.split("=") for item in text.split(","))
        return config.with_plan(tuple(int(sizes[a]) for a in config.mesh)).build()

    return verify_fixes(report, fn, args, kwargs, mesh=config.mesh_text, rebuild=rebuild, topology=topology)


def _after_top(out: list[Diagnostic], specs: Sequence[FixSpec | None], verify: Callable[[FixSpec], Verification]
               ) -> list[Diagnostic]:
    """The findings of smaller root causes verified again on top of the largest root cause's change (what a user
    who makes that change first, as the report says, then gets from theirs): `verified_after_change` (that change)
    and `verified_after_saving_seconds` (the step with it minus the step with both). A change promised on a plan
    whose larger mistake it cannot undo (a mesh fold while the batch is replicated) shows both figures."""
    ranked = [(float(d.details.get("root_cause_saving") or 0.0), i) for i, d in enumerate(out)
              if specs[i] is not None and "verified_step_seconds" in d.details and d.details.get("root_cause")]
    if not ranked:
        return out
    top = out[max(ranked)[1]]
    base = specs[max(ranked)[1]]
    assert base is not None
    first = verify(base)
    for i, d in enumerate(out):
        fix = specs[i]
        if (fix is None or fix.key == base.key or "verified_step_seconds" not in d.details
                or d.details.get("root_cause") == top.details.get("root_cause") or first.step_after is None):
            continue
        both = verify(FixSpec({**base.arguments, **fix.arguments}, {**base.mesh, **fix.mesh}))
        if both.step_after is not None:
            out[i] = replace(d, details={**d.details, "verified_after_change": base.text(),
                                         "verified_after_saving_seconds": first.step_after - both.step_after})
    return out


def _fields(fix: FixSpec, result: Verification) -> dict[str, Any]:
    base = {"fix_spec": fix.to_dict(), "verified_change": result.change}
    if result.step_after is None:
        return {**base, "unverified_reason": result.reason}
    return {**base, "verified_step_seconds": result.step_after, "verified_saving_seconds": result.saving,
            "verified_step_before_seconds": result.step_before}
