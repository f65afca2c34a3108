"""Root causes: findings grouped by the sharding decision behind them (issue 11 item 2).

One bad decision shows up as many findings: the embedding table's d_model dim on `data` reshards every
layer's activations, each instance a small HA302; a weight sharded the wrong way makes a comm-bound matmul in
every layer. Judged one by one, each instance can fall under the negligible threshold while together they
are the step's biggest cost. So findings are grouped by the decision that caused them, and the group is what
is judged and ranked:

  - an argument's spec: findings about collectives that move one argument, layers folded together
    (`params['layers_*']['w_in']['kernel']`: the plan shards every layer's kernel the same way);
  - a with_sharding_constraint: HA304's finding at the constraint's line and every finding about the collectives
    it forces (HA101, HA201, HA302, HA303 at the matmuls around it; HA104's repeated matmuls there when no
    argument is to blame), all taking its change: the PartitionSpec to write in the constraint (`details.fix_spec`'s
    `constraints`); a reshard (HA302, HA303) points at the constraint's line, and a mesh change proposed for those
    matmuls waits for it (`details["superseded_by"]`: its promise was weighed on the layout the constraint forces);
  - an activation layout: resharding findings (HA3xx) over one mesh axis (the layout two ops disagree on);
  - a mesh axis: findings about how an axis lies on the hardware (HA2xx);
  - else the rule, its mesh axes and the user's line (no decision in common is known: one line, one cause).

A group's saving is the sum of its members' savings, each collective counted once (two rules may price the
same collective: the larger saving is kept). Savings are in step time (docs/rules.md, "Savings in step time"),
so a group's communication savings never exceed the step's exposed communication: that sum is capped there
when the report has a predicted step (a compute saving, HA104's repeated matmuls, is added uncapped).
`group_findings` gives the groups, largest saving first;
`split_negligible_groups` applies the negligible threshold to each group's summed saving, keeping or
dropping the whole group.

An activation layout names its change where the program shows it (`layout_change`, applied by `annotate`): when
an embedding table (an argument an embedding lookup, `gather`, reads) splits its feature dim over the layout's
mesh axis, every activation it feeds carries that axis on a feature dimension; the findings that could only say
"find the argument that puts 'data' on a feature dimension" then name the table and the PartitionSpec to write
(`params['wte']['embedding']: P('model', 'data') -> P('model', None)`, `details["fix_spec"]` for
`--verify-fixes`), and every finding of the group carries it as `details["root_cause_fix"]`.

Advice agrees with itself (`reconcile`, applied by `annotate`): a root cause proposes one change. An argument's
root cause whose largest finding with a change writes a PartitionSpec (HA104's batch split) has every finding take
that spec (HA201's "shard it over 'model' too" for the same argument included); otherwise a root cause proposes
one mesh change (its largest finding's; the others of the group point at it), and a root cause whose change would
move a mesh axis the opposite way of a larger root cause's change proposes none (it says which change to make
first), so no report gives "give the devices of 'data' to 'model'" beside "fold 'model' into 'data'"; likewise
a root cause whose PartitionSpec for an argument differs from the one a larger root cause writes for it proposes
none.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from analyzer.diagnostics import Diagnostic, short_source

__all__ = ["RootCause", "cause_of", "group_findings", "annotate", "reconcile", "opposite_changes", "spec_change",
           "split_negligible_groups", "top_cause", "layout_change"]

_LAYOUT_RULES = frozenset({"HA302", "HA303"})  # resharding: two ops disagree on a value's layout
_PLACEMENT_RULES = frozenset({"HA201", "HA202", "HA203", "HA204"})  # how a mesh axis lies on the links
_COMPUTE_RULES = frozenset({"HA104"})
_CONSTRAINT_RULE = "HA304"  # a with_sharding_constraint whose layout is not its value's (rules/resharding.py)  # savings of compute, not of exposed communication: never capped by it
_LAYER_INDEX = re.compile(r"(?<=[_\[\.'])\d+(?=['\]_\.]|$)")
_AXES = re.compile(r"^[A-Za-z]+_([^:\s]+):")


@dataclass(frozen=True)
class RootCause:
    """One sharding decision and the findings it causes.

    Attributes:
      kind: "argument", "constraint", "activation layout", "mesh axis" or "rule".
      subject: what was decided: the argument's path (layers as `*`), the constraint's `file:line`, the mesh axis,
        or the rule code.
      findings: its findings, largest saving first.
      saving_seconds: their summed predicted saving per step, each collective once.
    """

    kind: str
    subject: str
    findings: tuple[Diagnostic, ...]
    saving_seconds: float

    @property
    def title(self) -> str:
        """The decision in words: `the sharding of params['layers_*']['w_in']['kernel']`."""
        if self.kind == "argument":
            return f"the sharding of {self.subject}"
        if self.kind == "constraint":
            return f"the with_sharding_constraint at {short_source(self.subject)}"
        if self.kind == "activation layout":
            return f"the activations' layout over '{self.subject}'"
        if self.kind == "mesh axis":
            return f"where mesh axis '{self.subject}' lies on the hardware"
        return self.subject

    @property
    def key(self) -> str:
        return f"{self.kind}: {self.subject}"


def _arrays_by_instruction(report: Any) -> dict[str, str]:
    frame = getattr(report, "collectives", None)
    if frame is None or not len(frame) or "array" not in frame or "instruction" not in frame:
        return {}
    out: dict[str, str] = {}
    for names, array in zip(frame["instruction"].tolist(), frame["array"].tolist()):
        if isinstance(array, str) and array:
            for name in str(names or "").split(","):
                out.setdefault(name, array)
    # a matmul finding points at its dot: the argument is the one the collectives feeding that dot move
    analysis = getattr(report, "analysis", None)
    for c in getattr(analysis, "collectives", ()) or ():
        array = c.extra.get("array", "") if isinstance(getattr(c, "extra", None), dict) else ""
        if array and c.dot is not None and c.dot_relation == "feeds":
            out.setdefault(c.dot.name, array)
    return out


def _axes_of(notation: str | None) -> str:
    m = _AXES.match(notation or "")
    return m.group(1).split(",")[0].strip("{}") if m else ""


def _constraints(diagnostics: Sequence[Diagnostic]) -> tuple[dict[str, str], dict[str, str]]:
    """({collective instruction: constraint `file:line`}, {matmul line: constraint}) from HA304's findings."""
    by_inst: dict[str, str] = {}
    by_line: dict[str, str] = {}
    for d in diagnostics:
        key = str(d.details.get("constraint") or "") if d.code == _CONSTRAINT_RULE else ""
        if key:
            for name in d.details.get("collectives", ()):
                by_inst.setdefault(str(name), key)
            for line in (*d.details.get("lines", ()), key):
                by_line.setdefault(str(line), key)
    return by_inst, by_line


def _constraint_of(d: Diagnostic, constraints: tuple[Mapping[str, str], Mapping[str, str]]) -> str:
    """The with_sharding_constraint (`file:line`) behind a finding: HA304's own; one whose collectives it forces;
    HA104's repeated matmuls at its lines when no argument is named; else ""."""
    by_inst, by_line = constraints
    if d.code == _CONSTRAINT_RULE:
        return str(d.details.get("constraint") or "")
    if d.code in _PLACEMENT_RULES - {"HA201"}:  # where an axis lies on the links: its own decision
        return ""
    names = [n for n in (d.location.instruction or "").split(",") if n]
    for key in ("merged_instructions", "collectives"):
        listed = d.details.get(key, ())
        names += [str(n) for n in listed if n] if isinstance(listed, (list, tuple)) else []
    hit = next((by_inst[n] for n in names if n in by_inst), "")
    if hit or d.code not in _COMPUTE_RULES or d.details.get("argument") or not d.location.file:
        return hit
    return by_line.get(f"{d.location.file}:{d.location.line}", "")


def cause_of(d: Diagnostic, arrays: Mapping[str, str],
             constraints: tuple[Mapping[str, str], Mapping[str, str]] = ({}, {})) -> tuple[str, str]:
    """(kind, subject) of the decision behind one finding (see the module docstring); `constraints` from HA304's
    findings (`_constraints`).

    Example:
        >>> from analyzer.diagnostics import Location
        >>> d = Diagnostic("HA101", "comm-bound-matmul", "m", location=Location("m.py", 3, instruction="all-gather.7"))
        >>> cause_of(d, {"all-gather.7": "params['layers_3']['w_in']['kernel']"})
        ('argument', "params['layers_*']['w_in']['kernel']")
        >>> cause_of(replace(d, code="HA302", notation="AllToAll_data: [I_data, J] -> [I, J_data]"), {})
        ('activation layout', 'data')
    """
    constraint = _constraint_of(d, constraints)
    if constraint:  # the collectives a with_sharding_constraint forces, and its own finding
        return "constraint", constraint
    if d.details.get("layout_axis"):  # a matmul rule that found activations laid over the batch's axis
        return "activation layout", str(d.details["layout_axis"])
    if d.details.get("argument"):  # a rule that named the argument whose spec to change (HA104)
        return "argument", _LAYER_INDEX.sub("*", str(d.details["argument"]))
    names = [n for n in (d.location.instruction or "").split(",") if n]
    names += [str(n) for n in d.details.get("merged_instructions", ()) if n]
    array = next((arrays[n] for n in names if n in arrays), "")
    if array:
        return "argument", _LAYER_INDEX.sub("*", array)
    axis = _axes_of(d.notation) or str(d.details.get("axis") or "")
    if d.code in _LAYOUT_RULES and axis:
        return "activation layout", axis
    if d.code in _PLACEMENT_RULES and axis:
        return "mesh axis", axis
    # the user's line as the reports print it: relative to the working folder (`check` makes it relative to
    # the project root, titles included: analyzer.workflows.check.relative_to_root)
    where = f" at {short_source(str(d.location))}" if d.location.file else ""
    return "rule", f"{d.code} {d.name}" + (f" over '{axis}'" if axis else "") + where


def _predicts_saving(code: str) -> bool:
    """Whether the rule's `saving_seconds` is a saving (budget and memory rules put an overage there)."""
    from analyzer.rules.registry import get_rule

    try:
        return bool(get_rule(code).predicts_saving)
    except Exception:  # noqa: BLE001 - a code no rule owns (written by hand): its figure is taken as given
        return True


def _summed(findings: Sequence[Diagnostic]) -> float:
    """Summed saving, each collective once (the largest saving any finding predicts for it); budget and memory
    findings, whose figure is an overage, add nothing."""
    best: dict[str, float] = {}
    loose = 0.0
    for d in findings:
        s = float(d.saving_seconds or 0.0)
        if s <= 0 or not _predicts_saving(d.code):
            continue
        inst = d.location.instruction
        if inst:
            best[inst] = max(best.get(inst, 0.0), s)
        else:
            loose += s
    return loose + sum(best.values())


def _exposed_cap(report: Any) -> float:
    """The most any change of communication can remove from the predicted step: its exposed communication
    (infinite when the report has no predicted step)."""
    totals = getattr(report, "totals", None)
    if totals is None or not float(getattr(totals, "step_seconds", 0.0) or 0.0) > 0:
        return float("inf")
    return float(getattr(totals, "exposed_comm_seconds", 0.0) or 0.0)


def group_findings(diagnostics: Sequence[Diagnostic], report: Any = None) -> list[RootCause]:
    """The findings grouped by the decision behind them, largest summed saving first.

    Args:
      diagnostics: the findings.
      report: the report they are about (its collectives table names the argument each collective moves);
        None groups by rule and axis only.
    """
    arrays = _arrays_by_instruction(report) if report is not None else {}
    constraints = _constraints(diagnostics)
    groups: dict[tuple[str, str], list[Diagnostic]] = {}
    for d in diagnostics:
        groups.setdefault(cause_of(d, arrays, constraints), []).append(d)
    cap = _exposed_cap(report)
    out = [RootCause(kind, subject, tuple(sorted(members, key=lambda d: -(d.saving_seconds or 0.0))),
                     min(_summed([d for d in members if d.code not in _COMPUTE_RULES]), cap)
                     + _summed([d for d in members if d.code in _COMPUTE_RULES]))
           for (kind, subject), members in groups.items()]
    out.sort(key=lambda g: (-g.saving_seconds, g.key))
    return out


def _directions(mesh: Mapping[str, Any], sizes: Mapping[str, int]) -> dict[str, int]:
    """+1 for each axis a proposed mesh grows, -1 for each it shrinks (an axis the mesh lacks is size 1)."""
    out = {}
    for axis, new in mesh.items():
        old = int(sizes.get(axis, 1))
        if int(new) != old:
            out[axis] = 1 if int(new) > old else -1
    return out


def opposite_changes(diagnostics: Sequence[Diagnostic], sizes: Mapping[str, int]
                     ) -> list[tuple[Diagnostic, Diagnostic]]:
    """Pairs of findings whose proposed meshes (`details["fix_mesh"]`) move some axis in opposite directions.

    Example:
        >>> a = Diagnostic("HA101", "x", "m", details={"fix_mesh": {"data": 1, "model": 8}})
        >>> b = Diagnostic("HA101", "x", "m", details={"fix_mesh": {"data": 8, "model": 1}})
        >>> len(opposite_changes([a, b], {"data": 4, "model": 2}))
        1
    """
    dirs = [(d, _directions(d.details.get("fix_mesh") or {}, sizes)) for d in diagnostics]
    return [(a, b) for i, (a, da) in enumerate(dirs) for b, db in dirs[i + 1:]
            if any(da[x] * db[x] < 0 for x in da.keys() & db.keys())]


def _mesh_text(mesh: Mapping[str, Any]) -> str:
    return ", ".join(f"'{a}' = {n}" for a, n in mesh.items())


def reconcile(groups: Sequence[RootCause], sizes: Mapping[str, int]) -> list[RootCause]:
    """The groups with one proposed mesh change per root cause and none opposite a larger root cause's.

    In each group (largest first) the largest finding with a mesh change sets the group's change; the group's
    other findings with another mesh change take it (`details["reconciled"]`). A group whose change moves an
    axis the opposite way of a larger group's proposes no mesh change: its findings say to make that change
    first and re-analyse (`details["superseded_by"]`).
    """
    adopted: list[tuple[RootCause, Diagnostic, dict[str, int]]] = []
    out = []
    waits = _constraint_lines(groups)
    for g in map(_one_constraint_change, map(_one_spec_change, groups)):
        own: Diagnostic | None = None
        members = []
        for d in g.findings:
            mesh = dict(d.details.get("fix_mesh") or {})
            dirs = _directions(mesh, sizes)
            if not dirs:
                members.append(d)
                continue
            first_constraint = waits.get(f"{d.location.file}:{d.location.line}") if g.kind != "constraint" else None
            if first_constraint is not None:
                members.append(_waits_for(d, first_constraint))
                continue
            if own is None:
                clash = next((a for a in adopted if any(a[2][x] * dirs[x] < 0 for x in a[2].keys() & dirs.keys())),
                             None)
                if clash is None:
                    own = d
                    adopted.append((g, d, dirs))
                    members.append(d)
                    continue
                first, by, _ = clash
                fix = (f"no mesh change for this one: its own ({_mesh_text(mesh)}) would undo the change proposed for "
                       f"{first.title} ({_mesh_text(by.details['fix_mesh'])}), the larger root cause; make that "
                       "change first and re-analyse")
                members.append(replace(d, fix=fix, details={**d.details, "fix_mesh": {}, "fix_batch_factor": 1.0,
                                                              "superseded_by": first.title,
                                                              "superseded_fix": d.fix}))
            elif mesh != dict(own.details.get("fix_mesh") or {}):
                members.append(replace(d, fix=f"{own.fix} (the one change for {g.title}: its largest finding's)",
                                       details={**d.details, "fix_mesh": dict(own.details["fix_mesh"]),
                                                "fix_batch_factor": own.details.get("fix_batch_factor", 1.0),
                                                "reconciled": True, "reconciled_fix": d.fix}))
            else:
                members.append(d)
        out.append(replace(g, findings=tuple(members)))
    return _no_opposite_specs(out)


def _constraint_lines(groups: Sequence[RootCause]) -> dict[str, RootCause]:
    """{matmul line: the constraint root cause whose reshards land there} (HA304's `details["lines"]`)."""
    out: dict[str, RootCause] = {}
    for g in groups:
        if g.kind != "constraint":
            continue
        for d in g.findings:
            if d.code == _CONSTRAINT_RULE:
                for line in d.details.get("lines", ()):
                    out.setdefault(str(line), g)
    return out


def _waits_for(d: Diagnostic, first: RootCause) -> Diagnostic:
    """A mesh change proposed for matmuls a with_sharding_constraint reshards around: none until the constraint is
    changed (its promise was weighed on the layout the constraint forces: folding 'model' into 'data' beside a
    constraint that drops 'data' made the step slower, verified)."""
    lead = next((x for x in first.findings if x.code == _CONSTRAINT_RULE), first.findings[0])
    fix = (f"no mesh change for this one yet: {first.title} reshards these matmuls' operands ({lead.fix}); make "
           "that change first and re-analyse (this roofline was weighed on the layout the constraint forces)")
    return replace(d, fix=fix, details={**d.details, "fix_mesh": {}, "fix_batch_factor": 1.0,
                                        "superseded_by": first.title, "superseded_fix": d.fix})


def _one_constraint_change(g: RootCause) -> RootCause:
    """A with_sharding_constraint's root cause: its finding's change (the PartitionSpec to write there) is every
    member's (`details["reconciled"]`, their own fix kept as `details["reconciled_fix"]`); a reshard (HA302, HA303)
    points at the constraint's line, with the matmul's line it lands at as its context."""
    lead = next((d for d in g.findings if d.code == _CONSTRAINT_RULE), None) if g.kind == "constraint" else None
    if lead is None:
        return g
    spec = dict(lead.details.get("fix_spec") or {})
    members = []
    for d in g.findings:
        if d is lead or not d.fix or d.saving_seconds is None:
            members.append(d)
            continue
        location = d.location
        if d.code in _LAYOUT_RULES and location.line != lead.location.line:
            at = f"reshards for the matmul at line {location.line}" if location.line else ""
            location = replace(lead.location, instruction=location.instruction, computation=location.computation,
                               hlo_line=location.hlo_line,
                               context="; ".join(x for x in (location.context, at) if x) or None)
        members.append(replace(d, location=location,
                               fix=f"{lead.fix} (the one change for {g.title}: {_why(d)})",
                               details={**d.details, "fix_spec": spec, "fix_mesh": {}, "fix_batch_factor": 1.0,
                                        "proposed_partition_spec": "", "reconciled": True, "reconciled_fix": d.fix,
                                        "forced_by": lead.details.get("constraint", "")}))
    return replace(g, findings=tuple(members))


def _why(d: Diagnostic) -> str:
    """Why a finding of a constraint's root cause takes the constraint's change, in words."""
    if d.code in _COMPUTE_RULES:
        return "the layout it asks for makes the chips repeat these matmuls"
    if d.code in _LAYOUT_RULES:
        return "this reshard is one it forces"
    return "these collectives are among those it forces"


def _no_opposite_specs(groups: Sequence[RootCause]) -> list[RootCause]:
    """The groups (largest first) with no finding writing another PartitionSpec for an argument a larger root
    cause's change writes: such a finding proposes none (`details["superseded_by"]`), as a mesh change opposite a
    larger one does (a reshard of the embedding table into its consumer's layout, `P(None, 'data')`, beside the
    activations' layout's change of that table to `P('model', None)`)."""
    claimed: dict[str, tuple[RootCause, str]] = {}
    out = []
    for g in groups:
        members = []
        for d in g.findings:
            specs = spec_change(d)
            clash = next((claimed[p] for p, v in specs.items() if p in claimed and claimed[p][1] != v
                          and claimed[p][0] is not g), None)
            if clash is None:
                members.append(d)
                continue
            first, _ = clash
            mine = "; ".join(f"{p} -> {v}" for p, v in specs.items())
            members.append(replace(d, fix=(
                f"no change of its own: its own ({mine}) would undo the change proposed for {first.title} "
                f"({first.findings[0].details.get('root_cause_fix') or first.findings[0].fix}), the larger root "
                "cause; make that change first and re-analyse"),
                details={**d.details, "fix_spec": {}, "proposed_partition_spec": "", "superseded_by": first.title,
                         "superseded_fix": d.fix}))
        g = replace(g, findings=tuple(members))
        for d in g.findings:
            for p, v in spec_change(d).items():
                claimed.setdefault(p, (g, v))
        out.append(g)
    return out


def spec_change(d: Diagnostic) -> dict[str, str]:
    """The PartitionSpecs a finding proposes to write ({argument path: spec}): `details.fix_spec`'s arguments,
    else HA104's `details.argument` and `details.proposed_partition_spec`; {} for a mesh change or advice in words."""
    given = d.details.get("fix_spec")
    if isinstance(given, Mapping) and given.get("arguments"):
        return {str(p): str(v) for p, v in given["arguments"].items()}
    if d.details.get("argument") and d.details.get("proposed_partition_spec"):
        return {str(d.details["argument"]): str(d.details["proposed_partition_spec"])}
    return {}


def _one_spec_change(g: RootCause) -> RootCause:
    """An argument's root cause whose largest finding with a change writes PartitionSpecs: that one change for
    all of it. Its other findings (one proposing another spec for the argument, advice in words such as HA201's
    "shard it over 'model' too", or a mesh change) take it (`details["reconciled"]`, their own fix kept as
    `details["reconciled_fix"]`), so the argument gets one change. A finding that writes another argument's spec
    (HA102's replicated operand, beside HA104's batch) keeps it: a different way to the same end, verified on its
    own. A root cause led by a mesh change is `reconcile`'s, as before."""
    if g.kind != "argument":
        return g
    lead = next((d for d in g.findings if spec_change(d) or d.details.get("fix_mesh")), None)
    specs = spec_change(lead) if lead is not None else {}
    if not specs:
        return g
    now = str(lead.details.get("partition_spec") or "") if lead is not None else ""
    text = "; ".join(f"{p}: {now} -> {v}" if now and lead is not None and lead.details.get("argument") == p
                     else f"{p} -> {v}" for p, v in specs.items())
    members = []
    for d in g.findings:
        own = spec_change(d)
        # another argument's spec is another way to remove the same collectives (HA102's B beside HA104's A):
        # kept, each verified on its own; a spec for the same argument, a mesh change or words take the lead's
        if d is lead or own == specs or not d.fix or d.saving_seconds is None or own and not own.keys() & specs.keys():
            members.append(d)
            continue
        members.append(replace(d, fix=f"{text} (the one change for {g.title}: its largest finding's)",
                               details={**d.details, "fix_spec": {"arguments": dict(specs)}, "fix_mesh": {},
                                        "fix_batch_factor": 1.0, "reconciled": True, "reconciled_fix": d.fix}))
    return replace(g, findings=tuple(members))


def annotate(diagnostics: Sequence[Diagnostic], report: Any = None) -> list[Diagnostic]:
    """The findings with `details["root_cause"]` (the decision, in words) and `details["root_cause_saving"]`
    (its group's summed saving per step), in the order of `group_findings`: largest root cause first; their
    proposed mesh changes reconciled (`reconcile`); an activation layout's change named where an embedding table
    makes it (`layout_change`)."""
    out: list[Diagnostic] = []
    mesh = getattr(report, "mesh", None)
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes)) if mesh is not None else {}
    groups = []
    for g in group_findings(diagnostics, report):
        change = layout_change(report, g.subject) if g.kind == "activation layout" else None
        if change is not None:  # before `reconcile`: the named change is the group's, weighed against the others'
            g = replace(g, findings=tuple(_with_layout_change(d, change, g.subject) for d in g.findings))
        groups.append(g)
    for g in reconcile(groups, sizes):
        for d in g.findings:
            out.append(replace(d, details={**d.details, "root_cause": g.title, "root_cause_saving": g.saving_seconds,
                                           "root_cause_findings": len(g.findings)}))
    return out


def layout_change(report: Any, axis: str) -> tuple[str, dict[str, str]] | None:
    """(the change in words, {argument path: the PartitionSpec to write}) when embedding tables split their
    feature dims over mesh axis `axis` (the activations they feed then carry it on a feature dimension): each such
    table with `axis` taken off its feature dims (`params['wte']['embedding']: P('model', 'data') -> P('model',
    None)`); None when no table does, or the report has no program before partitioning to read them from.

    A table is an argument an embedding lookup (`gather`) of the program jax handed XLA reads as its operand; its
    feature dims are those the lookup does not index (`collapsed_slice_dims`); its spec is the argument's
    (`analyzer.analysis.roles.Arguments.specs`).
    """
    analysis = getattr(report, "analysis", None)
    mf = getattr(analysis, "model_flops", None)
    module = getattr(mf, "module", None)
    mesh = getattr(report, "mesh", None)
    if module is None or module.entry is None or mesh is None or not axis:
        return None
    from analyzer.analysis.roles import _traced, argument_name, arguments
    from analyzer.rules.compute import spec_text

    base = axis.split(":(")[0]
    specs = arguments(mf, dict(zip(mesh.axis_names, mesh.axis_sizes)), getattr(analysis, "module", None)).specs
    changes: dict[str, tuple[str, str]] = {}
    for comp, inst in ((c, i) for c in module.computations for i in c.instructions):
        if inst.opcode != "gather" or len(inst.operands) < 2:
            continue
        table = _entry_parameter(module, comp, comp.by_name.get(inst.operands[0].name), _traced)
        name = argument_name(table) if table is not None else ""
        dims = [tuple(d) for d in specs.get(name, ())]
        if not dims or name in changes:
            continue
        indexed = {int(x) for x in re.findall(r"\d+", inst.attr("collapsed_slice_dims") or "{0}")}
        new = [d if i in indexed else tuple(a for a in d if a.split(":(")[0] != base) for i, d in enumerate(dims)]
        if new != dims:
            changes[name] = (spec_text(dims), spec_text(new))
    if not changes:
        return None
    text = "; ".join(f"{n}: {now} -> {new}" for n, (now, new) in sorted(changes.items()))
    return text, {n: new for n, (_, new) in sorted(changes.items())}


def _entry_parameter(module: Any, comp: Any, inst: Any, traced: Any, depth: int = 0) -> Any:
    """The entry parameter `inst` of `comp` reads unchanged (`traced`: through views and casts), across the calls
    jax makes of its nested jits (`jnp.take` is `call(...), to_apply=%_take`); None when it is computed."""
    param = traced(comp, inst) if inst is not None else None
    if param is None or comp is module.entry or depth > 8:
        return param
    k = param.parameter_number
    for caller in module.computations:
        for call in caller.instructions:
            if (call.opcode == "call" and (call.attr("to_apply") or "").lstrip("%") == comp.name
                    and k is not None and k < len(call.operands)):
                return _entry_parameter(module, caller, caller.by_name.get(call.operands[k].name), traced, depth + 1)
    return None


def _with_layout_change(d: Diagnostic, change: tuple[str, dict[str, str]], axis: str) -> Diagnostic:
    """A finding of an activation layout group with the group's named change: a finding whose own fix could only
    say "find the argument" (`details["layout_axis"]`) takes it as its fix (and `fix_spec`); a reshard of the group
    (HA302/HA303) whose fix is advice in words takes it too, the one change of its root cause (its own kept as
    `details["reconciled_fix"]`), unless a with_sharding_constraint forced it (its fix names that line); every
    finding keeps it as `details["root_cause_fix"]`."""
    text, specs = change
    details = {**d.details, "root_cause_fix": text}
    if (not d.details.get("layout_axis") and d.code in _LAYOUT_RULES and d.fix and d.saving_seconds is not None
            and not d.details.get("forced_by") and not spec_change(d)):
        return replace(d, fix=f"{text} (the one change for the activations' layout over '{axis}', of which this "
                              "reshard is one)",
                       details={**details, "fix_spec": {"arguments": dict(specs)}, "reconciled": True,
                                "reconciled_fix": d.fix})
    if not d.details.get("layout_axis"):
        return replace(d, details=details)
    tables = "the embedding table splits its" if len(specs) == 1 else "the embedding tables split their"
    fix = (f"{text}: {tables} features over '{axis}', so every activation the lookup feeds carries '{axis}' on a "
           f"feature dimension; with the features not split over '{axis}', the activations keep it on their batch "
           "dimension only, as the tokens do")
    return replace(d, fix=fix, details={**details, "fix_spec": {"arguments": dict(specs)}, "layout_fix": d.fix})


def split_negligible_groups(diagnostics: Sequence[Diagnostic], report: Any, threshold_of: Any
                            ) -> tuple[list[Diagnostic], list[Diagnostic]]:
    """(kept, negligible): every finding of a root cause whose summed saving is under the threshold of its
    rules is dropped, the others kept whole, however small each instance is.

    Args:
      threshold_of: code -> seconds per step (None: the rule is exempt, its findings always kept).
    """
    kept: list[Diagnostic] = []
    dropped: list[Diagnostic] = []
    for g in group_findings(diagnostics, report):
        # a fix that does not fit in HBM (analyzer.rules.fit) saves nothing, but is weighed by what it would
        # save: a negligible one is dropped, a large one is kept to say why it is no saving
        unfit = g.saving_seconds + _summed([replace(d, saving_seconds=d.details["unfit_saving_seconds"])
                                            for d in g.findings if d.details.get("unfit_saving_seconds")])
        for d in g.findings:
            limit = threshold_of(d.code)
            judged = d.saving_seconds is not None or bool(d.details.get("unfit_saving_seconds"))
            if limit is not None and judged and (unfit if d.saving_seconds is None else g.saving_seconds) < limit:
                dropped.append(d)
            else:
                kept.append(d)
    return kept, dropped


def top_cause(diagnostics: Sequence[Diagnostic], report: Any = None) -> RootCause | None:
    """The root cause to fix first: the largest summed saving per step; None when no finding predicts one."""
    groups = [g for g in group_findings(diagnostics, report) if g.saving_seconds > 0]
    return groups[0] if groups else None
