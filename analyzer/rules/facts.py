"""What the rules need to know about an analysed program, gathered once per report.

`Facts.from_report(report)` reads the report's collectives and dots, the HLO module, and the hardware and
topology the analysis priced them on (from `report.analysis`, an `AnalysisContext`), and offers:
  - `collectives`: one `Coll` per row of `report.collectives`, joined to its HLO instruction;
  - `hardware`: the `HardwareSpec` the report was priced on (FLOPs/s, links, HBM);
  - `axes`: per mesh axis, the topology's `AxisInfo` (size, wraparound, network, physical axes);
  - `price(kind, nbytes, axes)`: `analyzer.theory.cost.collective_cost` on the report's `Topology`, the one
    model that priced the rows, for pricing alternatives;
  - `step_saving(changes)`: what a change to some collectives removes from the predicted step (not from the
    sum of collectives): the exposed time that disappears, `min(e_C, t_C - t'_C)` (docs/rules.md, "Savings
    in step time").

There is one price: the `Topology` the rows were priced on, kept on the report's `AnalysisContext` (a report
rebuilt from JSON gets it back from its `topology_spec`, analyzer.analysis.topology_json). A report without one
cannot price alternatives, and `price` says so with an `AnalyzerError` instead of guessing another model or
reading a layout back from the sentence `Report.topology` says it in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from analyzer.diagnostics import Location
from analyzer.errors import AnalyzerError
from analyzer.hlo.ir import Computation, HloModule, Instruction

if TYPE_CHECKING:
    from analyzer.analysis.costs import ProgramCosts
    from analyzer.analysis.dots import Dot
    from analyzer.rules.arguments import ArgumentArray
    from analyzer.theory.hardware import HardwareSpec
    from analyzer.theory.topology import AxisInfo, Topology

__all__ = ["Coll", "Price", "Facts", "StepSaving", "step_saving"]


@dataclass(frozen=True)
class Price:
    """A predicted collective time: `seconds` (the max of the bandwidth and latency terms), which `regime`
    won, the `formula` with its numbers, and the bandwidth term alone."""

    seconds: float
    regime: str
    formula: str = ""
    bandwidth_seconds: float = 0.0


@dataclass(frozen=True)
class Coll:
    """One collective row of the report, joined to its HLO instruction."""

    row: int
    kind: str
    axes: tuple[str, ...]
    notation: str
    dtype: str
    bytes: float
    count: float
    seconds: float
    regime: str
    op_name: str
    source: str
    per_device_bytes: float
    group_size: int
    computation: str
    instruction: str
    hlo_line: int | None
    overlapped: bool
    exposed_seconds: float = 0.0  # seconds of the step the compute waits for it, all executions together
    inst: Instruction | None = None
    comp: Computation | None = None
    record: Any = None

    @property
    def total_seconds(self) -> float:
        return self.seconds * self.count

    @property
    def exposed(self) -> float:
        """Its exposed seconds per step, at most its own seconds per step: a wait the step model charges to
        this collective beyond its own time is another collective's on the same link (queued behind it)."""
        return max(0.0, min(self.exposed_seconds, self.seconds * self.count))

    def location(self) -> Location:
        file, line = _split_source(self.source)
        return Location(file=file, line=line, computation=self.computation or None,
                        instruction=self.instruction or None, hlo_line=self.hlo_line)


def _split_source(source: str) -> tuple[str | None, int | None]:
    if not source:
        return None, None
    file, _, line = source.rpartition(":")
    if file and line.isdigit():
        return file, int(line)
    return source, None


def _num(v: Any, default: float = 0.0) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return default
    return default if math.isnan(f) else f


@dataclass(frozen=True)
class StepSaving:
    """What a change to some collectives removes from the predicted step.

    Attributes:
      comm: the communication the change removes per step, `t_C - t'_C` (summed over the collectives it
        changes, each `(seconds - alternative) x count`; negative when it adds communication).
      exposed: the exposed seconds per step of the collectives it makes cheaper, `e_C` (each capped at its
        own seconds per step).
      seconds: the step saving, `max(0, min(e_C, t_C - t'_C))`; the comm saving when `known` is False.
      known: whether the report has a predicted step (exposed times); without one, the comm saving is taken.
    """

    comm: float
    exposed: float
    seconds: float
    known: bool = True

    def fields(self) -> dict[str, float | None]:
        """The message fields that render the step sentence (`analyzer.rules.messages.Message.in_step`)."""
        if not self.known:
            return {"comm_saving": self.comm, "exposed_seconds": None, "step_saving": None}
        return {"comm_saving": self.comm, "exposed_seconds": self.exposed, "step_saving": self.seconds}

    def details(self) -> dict[str, float | bool]:
        """The same figures for a finding's JSON `details`."""
        return {"comm_saving_seconds": self.comm, "exposed_seconds": self.exposed, "step_known": self.known}

    @property
    def hidden(self) -> bool:
        """Whether the communication concerned is all hidden behind compute (the change saves no step time)."""
        return self.known and self.exposed <= 0.0


def step_saving(changes: Sequence[tuple[Coll, float]], known: bool = True) -> StepSaving:
    """The step saving of replacing each collective `c` by an alternative costing `alt` seconds per call.

    A collective hidden behind compute saves nothing when it gets cheaper: the step is the compute stream's
    end, and the compute never waited for it. An exposed one saves at most its exposed time, and at most what
    the change removes from the link. So for the set C of collectives changed,

        saving = max(0, min(e_C, t_C - t'_C)),
        e_C = sum over C made cheaper of min(exposed_c, seconds_c x count_c),
        t_C - t'_C = sum over C of (seconds_c - alt_c) x count_c.

    It is the step model's first-order answer (docs/step.md): the waits shrink one for one with the link time
    until nothing is exposed. It can miss a second-order gain (a cheaper collective lets a queued one start
    sooner: on the same link, or on the cpu target any collective) and never claims more than is exposed.

    Example:
        >>> c = Coll(row=0, kind="all-gather", axes=("X",), notation="", dtype="bf16", bytes=1e6, count=2,
        ...          seconds=1e-3, regime="bandwidth", op_name="", source="", per_device_bytes=0, group_size=8,
        ...          computation="", instruction="", hlo_line=None, overlapped=False, exposed_seconds=0.5e-3)
        >>> s = step_saving([(c, 0.25e-3)])    # 2 x 0.75 ms less on the link, 0.5 ms of it exposed
        >>> round(s.comm * 1e3, 3), round(s.exposed * 1e3, 3), round(s.seconds * 1e3, 3)
        (1.5, 0.5, 0.5)
    """
    comm = sum((c.seconds - alt) * c.count for c, alt in changes)
    exposed = sum(c.exposed for c, alt in changes if alt < c.seconds)
    if not known:
        return StepSaving(comm=comm, exposed=0.0, seconds=max(0.0, comm), known=False)
    return StepSaving(comm=comm, exposed=exposed, seconds=max(0.0, min(exposed, comm)))


@dataclass(frozen=True)
class Facts:
    """Everything the rules read, computed once per report.

    Attributes:
      module: the parsed HLO module (None for a report rebuilt from JSON).
      hardware: the `HardwareSpec` the report was priced on.
      axes: per mesh axis, the topology's `AxisInfo` (empty without a topology).
      collectives: one `Coll` per row of the report's collectives table.
      mesh_axes: the mesh's axis names.
      topology: the `Topology` the rows were priced on, or None (a report rebuilt from JSON).
      cost_model: "topology" or "ideal", as for the report.
      step_known: whether the report has a predicted step (`Totals.step_seconds` and the rows' exposed
        seconds): savings are then step savings (`step_saving`), else communication savings.
    """

    module: HloModule | None
    hardware: HardwareSpec
    axes: Mapping[str, AxisInfo]
    collectives: tuple[Coll, ...]
    mesh_axes: tuple[str, ...] = ()
    topology: Topology | None = None
    cost_model: str = "topology"
    step_known: bool = False
    # users_map of each computation, built on first use: a 32-layer unrolled step has hundreds of
    # collectives in one entry computation, and rebuilding its map for each cost ~30 s.
    _users: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # dataflow.uniform_over's evaluations, per set of device groups, shared by every rule of this report.
    uniformity: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)
    # common.dot_location's index of the report's dots table by instruction name.
    dot_rows: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)
    # price_changed's changed topologies, per (wraps, networks): one topology per change, so its cache of
    # group geometries serves every collective re-priced on it (a fresh copy per call recomputed them: 3,600
    # geometries on the 22 MB synthetic module).
    _changed: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)
    # the abstract arguments analyze() was given (`AnalysisContext.args`; None for an HLO dump or JSON).
    args: Any = field(default=None, repr=False, compare=False)
    # the program before partitioning's model FLOPs (`Analysis.model_flops`) and the mesh's axis sizes, from
    # which `arguments` reads the batch, the weights and the per-chip batch (analyzer.analysis.roles).
    model_flops: Any = field(default=None, repr=False, compare=False)
    axis_sizes: Mapping[str, int] = field(default_factory=dict, repr=False, compare=False)
    # the analysis's `Dot` records (`AnalysisContext.dots`): a dot's FLOPs are its record's, never counted again.
    dots: tuple[Dot, ...] = field(default=(), repr=False, compare=False)
    # what each instruction costs on `hardware` (`AnalysisContext.costs`, analyzer.analysis.costs): a dot's seconds
    # are asked of it, never computed here.
    program_costs: Any = field(default=None, repr=False, compare=False)

    @cached_property
    def _dot_records(self) -> dict[int, Dot]:
        # by the instruction's identity (the record holds it, so the id stays its own): a dot inside a fusion body
        # is reached from the collective's computation, whose name is not the record's
        return {id(d.instruction): d for d in self.dots}

    @cached_property
    def costs(self) -> ProgramCosts:
        """The analysis's `ProgramCosts` (built here on the same module, records and hardware for a context made
        by hand without them)."""
        if self.program_costs is not None:
            return self.program_costs
        from analyzer.analysis.costs import ProgramCosts

        return ProgramCosts(self.module, self.dots, self.hardware)

    def dot_record(self, dot: Instruction) -> Dot | None:
        """The analysis's `Dot` record of the instruction `dot` (its FLOPs per execution, its dtype), or None
        for a dot the analysis did not count (one in a computation that never runs)."""
        return self._dot_records.get(id(dot))

    @cached_property
    def entry(self) -> Computation | None:
        """The module's entry computation, or None for a report without HLO."""
        return self.module.entry if self.module is not None else None

    @cached_property
    def argument_arrays(self) -> tuple[ArgumentArray, ...]:
        """The program's array arguments with their shardings (`analyzer.rules.arguments.arrays_of`), built
        once per report: HA101 reads the batch's mesh axes from them, the fit of a fix's plan their bytes."""
        from analyzer.rules.arguments import arrays_of

        return tuple(arrays_of(self.args))

    @cached_property
    def arguments(self) -> Any:
        """The program's batch and weight arguments and its per-chip batch in tokens, once per report: every
        finding that states a per-chip batch states this one (`analyzer.analysis.roles.arguments`)."""
        from analyzer.analysis.roles import arguments

        return arguments(self.model_flops, self.axis_sizes, self.module)

    @property
    def ridge(self) -> float:
        """`C / W_ici` in bf16 (`analyzer.theory.roofline.ici_threshold`): the per-chip batch above which an
        FSDP matmul is compute-bound (2550 on v5p, about 2190 on v5e)."""
        from analyzer.theory.roofline import ici_threshold

        return ici_threshold(self.hardware)


    def users(self, comp: Computation) -> Mapping[str, tuple[tuple[Instruction, int], ...]]:
        """`dataflow.users_map(comp)`, computed once per computation of this report."""
        found = self._users.get(comp.name)
        if found is None:
            from analyzer.analysis.dataflow import users_map

            found = self._users[comp.name] = users_map(comp)
        return found

    def _topology(self) -> Topology:
        if self.topology is None:
            raise AnalyzerError("this report carries no topology (was it rebuilt from JSON?): alternatives cannot "
                                "be priced; run the rules on a report from analyze() or analyze_hlo()")
        return self.topology

    def price(self, kind: str, nbytes: float, axes: Sequence[str]) -> Price:
        """Seconds of one collective of `kind` moving V = `nbytes` over mesh `axes`: `collective_cost` on the
        report's topology with the report's cost model (the model that priced its rows).

        Raises:
          AnalyzerError: the report has no topology (rebuilt from JSON), or the cost model rejects the input.
        """
        from analyzer.theory.cost import collective_cost

        if not axes or nbytes <= 0:
            return Price(0.0, "bandwidth", "nothing moves")
        cost = collective_cost(kind, float(nbytes), tuple(axes), self._topology(), model=self.cost_model)
        return Price(float(cost.seconds), str(cost.regime), str(cost.formula), float(cost.bandwidth_seconds))

    def price_like(self, coll: Coll, kind: str, nbytes: float, axes: Sequence[str]) -> float:
        """An alternative's seconds on the same footing as `coll`'s own row.

        Both are priced with `price`; the alternative is scaled by the ratio of the row's seconds to that
        price (1 unless the row was priced from its own device pairs, e.g. a collective-permute), so a saving
        never comes from the two prices being taken differently.
        """
        alt = self.price(kind, nbytes, axes).seconds
        mine = self.price(coll.kind, coll.bytes, coll.axes).seconds
        if mine <= 0 or coll.seconds <= 0:
            return alt
        return alt * coll.seconds / mine

    def price_changed(self, coll: Coll, *, wrap_axes: Sequence[str] = (), fast_axes: Sequence[str] = ()) -> float:
        """`coll` re-priced with the physical axes under some mesh axes changed: closed into rings with
        wraparound (`wrap_axes`), or moved onto the fast network (`fast_axes`: ICI on TPUs, NVLink on GPUs).

        The analysis's own topology is copied with those changes and priced with the same cost model, so the
        difference is only the change.
        """
        from dataclasses import replace as _replace

        from analyzer.theory.cost import collective_cost, geometry_cost
        from analyzer.theory.topology import TreeLevel

        topo = self._topology()
        if not coll.axes:
            return coll.seconds
        if self.hardware.kind == "gpu":
            if not fast_axes:
                return coll.seconds  # GPU networks are switched: no wraparound to add
            # The same group inside one NVLink domain: one level, each GPU's own NVLink egress.
            geo = topo.geometry(tuple(coll.axes))
            assert self.hardware.nvlink is not None
            level = TreeLevel("nvlink", geo.group_size, self.hardware.nvlink.gpu_egress, 1, "nvlink")
            inside = _replace(geo, levels=(level,))
            return float(geometry_cost(coll.kind, float(coll.bytes), inside, topo, model=self.cost_model).seconds)
        sl = topo.slice
        wraps = list(sl.wraps)
        networks = list(sl.networks)
        fast = "nvlink" if self.hardware.kind == "gpu" else "ici"
        for axes, change in ((wrap_axes, "wrap"), (fast_axes, "fast")):
            for a in axes:
                for label in topo.axis_info(a).physical_axes:
                    k = sl.axis_labels.index(label)
                    if change == "wrap":
                        wraps[k] = True
                    else:
                        networks[k] = fast
                        wraps[k] = wraps[k] if fast == "nvlink" else sl.dims[k] > 2
        key = (tuple(wraps), tuple(networks))
        new = self._changed.get(key)
        if new is None:
            new = _replace(topo, slice=_replace(sl, wraps=tuple(wraps), networks=tuple(networks)))
            self._changed[key] = new
        cost = collective_cost(coll.kind, float(coll.bytes), tuple(coll.axes), new, model=self.cost_model)
        return float(cost.seconds)

    def step_saving(self, changes: Sequence[tuple[Coll, float]]) -> StepSaving:
        """What replacing each collective by an alternative of `alt` seconds per call removes from the
        predicted step (`step_saving` on this report; the comm saving when it has no step)."""
        return step_saving(changes, known=self.step_known)

    def instruction(self, computation: str, name: str) -> tuple[Computation | None, Instruction | None]:
        return _find_instruction(self.module, computation, name)

    @staticmethod
    def from_report(report: Any) -> Facts:
        """The facts of a report: its analysis context's module, hardware, topology and collective records.

        Raises:
          HardwareError: the report names hardware that is not known (a report rebuilt from JSON).
        """
        from analyzer.theory.hardware import load_hardware

        ctx = report.analysis
        module = report.hlo if report.hlo is not None else ctx.module
        hardware = ctx.hardware if ctx.hardware is not None else load_hardware(report.hardware)
        mesh = report.mesh
        topology = ctx.topology if ctx.topology is not None else _default_topology(report, hardware)
        mesh_axes = tuple(mesh.axis_names) if mesh is not None else ()
        axes = {a: topology.axis_info(a) for a in mesh_axes} if topology is not None else {}
        frame = report.collectives
        colls = _collectives(frame, ctx.collectives, module)
        totals = report.totals
        step_known = (float(getattr(totals, "step_seconds", 0.0) or 0.0) > 0 and frame is not None
                      and "exposed_seconds" in frame)
        return Facts(module=module, hardware=hardware, axes=axes, collectives=tuple(colls), mesh_axes=mesh_axes,
                     topology=topology, cost_model=ctx.cost_model, step_known=step_known, args=ctx.args,
                     model_flops=getattr(getattr(report, "analysis", None), "model_flops", None), dots=tuple(ctx.dots),
                     program_costs=ctx.costs,
                     axis_sizes=dict(zip(report.mesh.axis_names, report.mesh.axis_sizes)) if report.mesh else {})


def _collectives(frame: Any, records: Sequence[Any], module: HloModule | None) -> tuple[Coll, ...]:
    """One `Coll` per row of the report's collectives table, joined to its HLO instruction and its record."""
    if frame is None or not len(frame):
        return ()
    # Plain records, not `iterrows`: a Series per row and a pandas lookup per field cost 0.4 s on a report of
    # 5,800 collectives; a mixed frame's rows hold the same Python values either way.
    return tuple(_coll(i, row, records[i] if i < len(records) else None, module)
                 for i, row in enumerate(frame.to_dict("records")))


def _coll(i: int, row: Mapping[str, Any], record: Any, module: HloModule | None) -> Coll:
    names = str(row.get("instruction", "") or "")
    first = names.split(",")[0].strip()
    comp_name = str(row.get("computation", "") or "")
    comp, inst = _find_instruction(module, comp_name, first) if first else (None, None)
    return Coll(
        row=int(i),
        kind=str(row.get("kind", "")),
        axes=_axes(i, row, record),
        notation=str(row.get("notation", "") or ""),
        dtype=str(row.get("dtype", "") or ""),
        bytes=_num(row.get("bytes")),
        count=_num(row.get("count"), 1.0) or 1.0,
        seconds=_num(row.get("seconds")),
        regime=str(row.get("regime", "") or ""),
        op_name=str(row.get("op_name", "") or ""),
        source=str(row.get("source", "") or ""),
        per_device_bytes=_num(row.get("per_device_bytes")),
        group_size=int(_num(row.get("group_size"), 1)),
        computation=comp_name,
        instruction=first,
        hlo_line=int(_num(row.get("hlo_line"))) or None,
        overlapped=bool(row.get("overlapped", False) is True),
        exposed_seconds=_num(row.get("exposed_seconds")),
        inst=inst,
        comp=comp,
        record=record,
    )


def _axes(i: int, row: Mapping[str, Any], record: Any) -> tuple[str, ...]:
    """A row's mesh axes as the typed tuple its `Collective` record carries (the frame's own tuple for a report
    rebuilt from JSON, whose rows `report_from_dict` reads as tuples; none for a row without axes).

    Raises:
      AnalyzerError: the row's axes are not a sequence of axis names (text is never parsed for them).
    """
    axes = getattr(record, "axes", None) if record is not None else row.get("axes")
    if axes is None or isinstance(axes, float) and math.isnan(axes):  # (a frame's missing value)
        return ()
    if isinstance(axes, str) or not isinstance(axes, Sequence) or not all(isinstance(a, str) for a in axes):
        raise AnalyzerError(f"collective row {i}: 'axes' must be a sequence of mesh axis names such as "
                            f"('data', 'model'), got {axes!r}")
    return tuple(axes)


def _default_topology(report: Any, hardware: HardwareSpec) -> Topology | None:
    """The topology of a report that carries no `Topology` (`AnalysisContext.topology`): a report made by hand,
    which describes no layout at all (`Report.topology` empty), has its mesh laid in order on the smallest slice
    that holds it, as the cpu target's analysis lays it. Any other (a report rebuilt from JSON written without
    its `topology_spec`) has none: its sentence is for people, and pricing says it cannot."""
    from analyzer.theory.topology import Topology

    mesh = report.mesh
    if mesh is None or str(report.topology or ""):
        return None
    return Topology.for_mesh(hardware, mesh.axis_names, mesh.axis_sizes)


def _find_instruction(module: HloModule | None, computation: str, name: str
                      ) -> tuple[Computation | None, Instruction | None]:
    if module is None:
        return None, None
    comp = module.by_name.get(computation)
    comps = [comp] if comp is not None else list(module.computations)
    for c in comps:
        inst = c.by_name.get(name)
        if inst is not None:
            return c, inst
    return None, None
