"""Mesh and topology rules: links that sit idle, rings without wraparound, slow networks (sharding.md,
Problem 2 and its closing note, pop quiz 2; tpus.md, ICI topology; training.md, across pods)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from analyzer.analysis.dataflow import mesh_axis_groups, uniform_over
from analyzer.diagnostics import Diagnostic, Severity
from analyzer.errors import AnalyzerError
from analyzer.rules.common import axes_text, fmt_s
from analyzer.rules.context import RuleContext
from analyzer.rules.facts import Coll
from analyzer.rules.messages import Message
from analyzer.rules.registry import Option, rule
from analyzer.units import format_seconds

__all__ = ["idle_mesh_axis", "missing_wraparound", "slow_link", "straddling_mesh_axis", "explicit_placements"]


@dataclass(frozen=True)
class IdleAxisLinks(Message):
    """HA201: an all-gather of an array replicated over mesh axes whose links sit idle."""

    axes: str
    idle_axes: str
    new_axes: str
    seconds: float
    alternative_seconds: float
    axes_now: int
    axes_then: int

    template: ClassVar[str] = (
        "all-gather over {axes} of an array replicated over {idle_axes}, whose links sit idle: shard it over "
        "{idle_axes} too and gather over {new_axes} ({seconds:time} -> {alternative_seconds:time} per call, "
        "{axes_then} axes of bandwidth instead of {axes_now})."
    )


@rule(
    code="HA201",
    name="idle-mesh-axis",
    severity=Severity.WARNING,
    summary="An all-gather over some axes of an array replicated over another axis whose links sit idle.",
    options=(
        Option("min_fraction", 0.1, "Fire when the saving is at least this fraction of the collective's time."),
        Option("min_saving_seconds", 1e-7, "Ignore findings that save less than this per step."),
    ),
)
def idle_mesh_axis(ctx: RuleContext) -> Iterator[Diagnostic]:
    """## What it does
    Finds all-gathers over some mesh axes of an array that is replicated over another mesh axis lying on
    its own physical links. Those links carry nothing during the gather.

    ## Why is this bad?
    An AllGather over `N_axes` axes costs `V / (W_ici N_axes)`: every axis brings its own links. An array
    replicated over Z can first be resharded from `[B_X, D_Y]` to `[B_XZ, D_Y]` for free (each device
    drops part of its shard) and then gathered over X and Z together, reaching the same result with
    twice the bandwidth: Problem 2's `AllGather_X` drops from 23 us to 11.6 us on a TPU v4p 4x4x4.

    ## Example
    ```python
    mesh = jax.make_mesh((4, 4, 4), ("X", "Y", "Z"))
    x = NamedSharding(mesh, P("X", "Y"))        # [B_X, D_Y], replicated over Z
    # ... later needs [B, D_Y]: AllGather_X
    ```

    ## Use instead
    ```python
    x = NamedSharding(mesh, P(("X", "Z"), "Y"))  # [B_XZ, D_Y]: AllGather_XZ uses Z's links too
    ```

    ## References
    "How to Scale Your Model", sharding chapter, Problem 2 and its closing note; "What happens when we
    AllGather over multiple axes".
    """
    facts = ctx.facts
    mesh = ctx.report.mesh
    if mesh is None or facts.module is None:
        return
    min_fraction = float(ctx.option("min_fraction"))
    min_saving = float(ctx.option("min_saving_seconds"))
    logical = tuple(range(mesh.size))
    for c in facts.collectives:
        if c.kind != "all-gather" or c.inst is None or c.comp is None or not c.axes or not c.inst.operands:
            continue
        idle = _idle_axes(facts, mesh, c, logical)
        if not idle:
            continue
        new_axes = tuple(a for a in mesh.axis_names if a in c.axes or a in idle)
        alt = facts.price_like(c, "all-gather", c.bytes, new_axes)
        step = facts.step_saving([(c, alt)])
        if step.seconds < min_saving or alt > c.seconds * (1 - min_fraction):
            continue
        idle_text = axes_text(idle)
        yield ctx.diagnostic(
            IdleAxisLinks(axes=axes_text(c.axes), idle_axes=idle_text, new_axes=axes_text(new_axes), seconds=c.seconds,
                          alternative_seconds=alt, axes_now=len(c.axes), axes_then=len(new_axes)),
            location=c.location(),
            notation=c.notation or None,
            seconds=c.seconds * c.count,
            alternative=f"AllGather_{''.join(new_axes) if all(len(a) == 1 for a in new_axes) else axes_text(new_axes)}"
                        f" after a free reshard onto {idle_text}",
            alternative_seconds=alt * c.count,
            step=step,
            fix=f"add {idle_text} to the PartitionSpec entry of the gathered dimension "
                f"(e.g. P(({', '.join(repr(a) for a in new_axes)}), ...)) so the gather runs over {axes_text(new_axes)}",
            details={"idle_axes": idle, "bytes": c.bytes, "count": c.count},
        )


def _idle_axes(facts: Any, mesh: Any, c: Coll, logical: tuple[int, ...]) -> list[str]:
    """The mesh axes (in mesh order) over which the all-gather `c`'s operand is replicated and whose ICI links
    it leaves idle: axes of two devices or more, on physical axes none of its own axes use."""
    operand = c.comp.by_name.get(c.inst.operands[0].name)
    if operand is None:
        return []
    busy_physical = {p for a in c.axes if a in facts.axes for p in facts.axes[a].physical_axes}
    entry = c.comp is facts.entry
    idle: list[str] = []
    for k, (name, size) in enumerate(zip(mesh.axis_names, mesh.axis_sizes)):
        link = facts.axes.get(name)
        if name in c.axes or size < 2 or link is None or link.network != "ici":
            continue
        if set(link.physical_axes) & busy_physical:
            continue
        groups = mesh_axis_groups(mesh.axis_sizes, logical, k)
        if uniform_over(c.comp, operand, groups, entry, facts.module, facts.uniformity):
            idle.append(name)
    return idle


@dataclass(frozen=True)
class MissingWraparound(Message):
    """HA202: a mesh axis on a line without wraparound. `seconds` / `alternative_seconds` are per step, for
    this axis's collectives only (the saving is their difference)."""

    axis: str
    chips: int
    collectives: int
    seconds: float
    alternative_seconds: float
    assumed_slice: str = ""
    wraparound_possible: bool = True  # False: no slice of this many chips wraps, so the ring is no saving
    layout: str = ""  # with no ring possible: the slice of the same chips offered instead (its step figures)

    template: ClassVar[str] = (
        "mesh axis '{axis}' ({chips} chips) lies on a line without wraparound, so its {collectives} collective(s) "
        "send one way: {seconds:time} per step, {alternative_seconds:time} on a closed ring ({ratio:.2f}x, "
        "{gain}){assumed}"
    )

    @property
    def gain(self) -> str:
        if self.wraparound_possible:
            return f"{format_seconds(self.saving)} less on the links"
        return "a ring no slice of this size can have, so not a saving"

    @property
    def in_step(self) -> str:
        if self.wraparound_possible:
            return self._in_step()
        # the step figures are those of the other layout of the same chips, not of the ring
        return self._in_step(where=f"Laid on {self.layout} instead (the fix): in the predicted step",
                             what="the collectives it makes cheaper", plural=True)

    @property
    def ratio(self) -> float:
        return self.seconds / self.alternative_seconds

    @property
    def saving(self) -> float:
        return self.seconds - self.alternative_seconds

    @property
    def assumed(self) -> str:
        if self.assumed_slice:
            return f" (on the assumed slice {self.assumed_slice}: pass topology= to check the one you will use)."
        return "."


@rule(
    code="HA202",
    name="missing-wraparound",
    severity=Severity.WARNING,
    summary="Collectives on a mesh axis laid on a ring without wraparound pay about 2x.",
    options=(
        Option("min_fraction", 0.1, "Fire when the saving is at least this fraction of the axis's collective time."),
        Option("min_saving_seconds", 1e-7, "Ignore axes whose saving per step is below this."),
    ),
)
def missing_wraparound(ctx: RuleContext) -> Iterator[Diagnostic]:
    """## What it does
    For each mesh axis laid on a physical line of TPU chips without a wraparound link, adds up what its
    own collectives (those over that axis alone) would save on a closed ring. A collective over several
    axes (`AllReduce_{data,model}`) is not the axis's: its time depends on every axis it spans.

    ## Why is this bad?
    On a ring with wraparound, data flows both ways and an AllGather takes `V / W_ici` (bidirectional).
    Without it, data goes one way over `X - 1` hops: `(X - 1) (V / X) / W_one_way`, about twice as long.
    TPU v5e and v6e have wraparound only on axes of 16 chips (an 8x16 wraps on the long axis only); v4 and
    v5p get it from full 4x4x4 cubes, and `2x2x1`, `2x2x2`, `2x2x4` slices have none. Pop quiz 2:
    `AllGather_Y` over 4 chips of a v5e takes 560 us instead of 377 us.

    ## Example
    ```python
    # v5e 8x4 slice: neither axis has 16 chips
    mesh = jax.make_mesh((8, 4), ("data", "model"))
    ```

    ## Use instead
    Lay the busiest axis on a physical ring of 16 (a `v5e:16x16` or `16xN` slice) or use full 4x4x4 cubes
    on v4/v5p; or move the traffic to an axis that wraps.

    ## References
    "How to Scale Your Model", TPU chapter, ICI topology and wraparound; sharding chapter, pop quiz 2.
    """
    facts = ctx.facts
    min_fraction = float(ctx.option("min_fraction"))
    min_saving = float(ctx.option("min_saving_seconds"))
    if facts.hardware.kind != "tpu":
        return
    for name, link in facts.axes.items():
        if link.wraparound or link.size <= 2 or link.network != "ici":
            continue
        rows: list[tuple[Coll, float]] = []
        for c in facts.collectives:
            if tuple(c.axes) != (name,) or c.seconds <= 0:
                continue  # only the axis's own collectives: one over several axes is not counted "on" it
            alt = facts.price_changed(c, wrap_axes=(name,))
            if alt < c.seconds:
                rows.append((c, alt))
        if not rows:
            continue
        current = sum(c.seconds * c.count for c, _ in rows)
        better = sum(alt * c.count for c, alt in rows)
        if current - better < min_fraction * current:
            continue
        step = facts.step_saving(rows)
        main = max(rows, key=lambda r: (r[0].seconds - r[1]) * r[0].count)[0]
        topo = facts.topology
        assumed = topo is not None and getattr(topo, "declared", True) is False
        # No slice of this many chips wraps: the closed ring is not a change anyone can make, so it is no
        # saving (issue 11). What is offered is another layout of the same chips, and only when the slice was
        # assumed: a declared slice is the hardware the user has.
        impossible = _no_wrap_at_this_size(ctx)
        found = _same_chips_layout(ctx) if impossible and assumed else None
        layout = found[:4] if found else None
        if impossible:
            # the saving is the other layout's, in step time (every collective repriced on it)
            step = facts.step_saving(list(zip(facts.collectives, found[4]))) if found else None
        if step is not None and step.seconds < min_saving:
            continue  # hidden behind compute (or under the threshold)
        yield ctx.diagnostic(
            MissingWraparound(axis=name, chips=link.size, collectives=len(rows), seconds=current,
                              alternative_seconds=better, assumed_slice=topo.slice.name if assumed else "",
                              wraparound_possible=not impossible, layout=layout[0] if layout else ""),
            severity=Severity.INFO if assumed else None,
            location=main.location(),
            notation=main.notation or None,
            seconds=current,
            alternative=f"the same collectives on a ring of {link.size} with wraparound",
            alternative_seconds=better,
            step=step,
            fix=_wrap_fix(ctx, name, link.size, layout),
            details={"axis": name, "collectives": len(rows), "same_chips_layout": layout,
                     "wraparound_possible": not impossible},
        )


def _cube_rule(ctx: RuleContext) -> bool:
    """Whether the chip gets wraparound from full 4x4x4 cubes (v4, v5p) rather than from axes of 16."""
    ici = ctx.facts.hardware.ici
    return ici is not None and "cube" in ici.wraparound.rule


def _no_wrap_at_this_size(ctx: RuleContext) -> bool:
    """Whether no slice with this many chips has any wraparound (fewer than 64 on v4/v5p, 16 on v5e/v6e)."""
    chips = ctx.report.mesh.size if ctx.report.mesh else 0
    return bool(chips) and chips < (64 if _cube_rule(ctx) else 16)


def _wrap_fix(ctx: RuleContext, axis: str, size: int,
              layout: tuple[str, str, float, float] | None = None) -> str:
    """How to give `axis` a ring with wraparound, on this many chips if any slice allows it.

    v5e/v6e wrap only on physical axes of 16 chips (v4/v5p on full 4x4x4 cubes): a program on fewer chips
    than that cannot get one, and the fix says so instead of suggesting a slice it does not have.
    """
    chips = ctx.report.mesh.size if ctx.report.mesh else 0
    # The layout changes every axis, so its figures are the whole step's communication, not this axis's.
    instead = (f"; on these {chips} chips the mesh laid on {layout[0]} instead ({layout[1]}) brings the whole step's "
               f"communication (every axis) from {fmt_s(layout[2])} to {fmt_s(layout[3])}" if layout else "")
    if _cube_rule(ctx):
        if chips and chips < 64:
            return (f"no slice of {chips} chips has wraparound here (it takes full 4x4x4 cubes, 64 chips), so this "
                    f"is the cost of the slice size{instead}; at 64 chips or more lay {axis!r} on an axis that is a "
                    "multiple of 4 of full cubes (e.g. v5p:4x4x4), or give the heavy collectives to an axis that wraps")
        return (f"use a topology of full 4x4x4 cubes (e.g. v5p:4x4x4) with {axis!r} on an axis that is a "
                "multiple of 4, or put the heavy traffic on such an axis")
    if chips and chips < 16:
        return (f"no slice of {chips} chips has wraparound on this hardware (it needs a physical axis of 16 chips), "
                f"so this is the cost of the slice size{instead}; at 16 chips or more lay {axis!r} (or the axis "
                "that carries the heaviest collectives) on a 16-chip axis")
    return (f"lay {axis!r} on a physical axis of 16 chips (e.g. topology 16x{max(1, chips // 16)}"
            f" with {axis!r} of size 16), or give the heavy collectives to an axis that wraps")


def _same_chips_layout(ctx: RuleContext) -> tuple[str, str, float, float, tuple[float, ...]] | None:
    """The slice of the same chips (another torus shape, mesh axes laid in order) whose collectives cost
    least, when it beats the analysed one by at least 1%: (slice, where the axes lie, seconds now, seconds
    there, each row's seconds per call there on the footing of its own row (for its step saving)).

    Every collective of the report is priced on both with the analysis's own cost model, so the comparison
    is like for like (e.g. a 4-way axis on a 2x2 sub-grid of a v5e:2x4 uses both physical axes' links,
    where on a v5e:4x2 it lies on one line of 4 without wraparound).
    """
    facts = ctx.facts
    topo, mesh = facts.topology, ctx.report.mesh
    if topo is None or mesh is None or not facts.collectives:
        return None
    from itertools import product

    from analyzer.theory.topology import Topology

    sl = topo.slice
    torus = [d for d, n in zip(sl.dims, sl.networks) if n == "ici"]
    if len(torus) != len(sl.dims):
        return None  # multi-slice (DCN): the layout across slices is another question (HA203)
    n = sl.size
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    shapes = {dims for dims in product(divisors, repeat=len(torus)) if math.prod(dims) == n}

    def cost(rows: list[float]) -> float:
        return sum(s * c.count for s, c in zip(rows, facts.collectives))

    try:
        mine = _row_prices(facts, topo)
    except AnalyzerError:
        return None  # the step's own collectives cannot be priced again: nothing to compare with
    now = cost(mine)
    best: tuple[str, str, float, float, tuple[float, ...]] | None = None
    prefix = sl.name.split(":")[0]
    for dims in sorted(shapes):
        name = f"{prefix}:{'x'.join(map(str, dims))}"
        if name == sl.name:
            continue
        try:
            t = Topology.for_mesh(sl.hardware, mesh.axis_names, mesh.axis_sizes, topology=name)
            rows = _row_prices(facts, t)
        except AnalyzerError:  # a shape the mesh cannot be laid on in order, or priced on: not an alternative
            continue
        there = cost(rows)
        if there < 0.99 * now and (best is None or there < best[3]):
            where = ", ".join(f"{a} on {'+'.join(t.axis_info(a).physical_axes)}" for a in mesh.axis_names)
            best = (name, where, now, there, tuple(_on_own_footing(facts, rows, mine)))
    return best


@dataclass(frozen=True)
class SlowLinkCollective(Message):
    """HA203: a bulk collective over DCN or the GPU scale-out network."""

    kind: str
    nbytes: float
    slow_axes: str
    network: str
    seconds: float
    alternative_seconds: float
    inside: str
    count: float

    template: ClassVar[str] = (
        "{kind} of {nbytes:bytes} over {slow_axes} crosses {network}: {seconds:time} per call against "
        "{alternative_seconds:time} {inside} (x{count:g} per step)."
    )


@rule(
    code="HA203",
    name="slow-link",
    severity=Severity.WARNING,
    summary="A bulk collective over DCN (between TPU slices) or beyond an NVLink domain.",
    options=(
        Option("min_bytes", 1_000_000, "Only collectives moving at least this many bytes (V) count as bulk."),
        Option("include_gradient_all_reduce", False,
               "Also flag backward-pass all-reduces (data parallelism across slices is the usual design)."),
    ),
)
def slow_link(ctx: RuleContext) -> Iterator[Diagnostic]:
    """## What it does
    Finds bandwidth-bound collectives whose mesh axes cross the data-centre network between TPU slices,
    or leave a GPU NVLink domain for the scale-out network, and prices them as if the axis lay on the fast
    links.

    ## Why is this bad?
    DCN gives about 6.25e9 B/s per TPU (3.125e9 on v5e) against 9e10 to 1.8e11 of ICI: an order of
    magnitude or more. Across pods only data parallelism stays compute-bound, and only with
    `B / slice > C / W_dcn` (about 73,000 tokens per v5p pod). On GPUs, leaving the NVLink domain drops
    from 450 GB/s to 50 GB/s per GPU (H100).

    ## Example
    ```python
    # two v5e slices; "model" spans them
    mesh = jax.make_mesh((2, 8), ("model", "data"))   # tensor parallelism over DCN
    ```

    ## Use instead
    ```python
    mesh = jax.make_mesh((2, 8), ("data", "model"))   # DCN carries only the data-parallel gradient sum
    ```

    ## References
    "How to Scale Your Model", training chapter, "across pods (DCN)"; GPU chapter, cross-node collectives.
    """
    facts = ctx.facts
    min_bytes = float(ctx.option("min_bytes"))
    include_grads = bool(ctx.option("include_gradient_all_reduce"))
    frame = ctx.report.collectives
    for c in facts.collectives:
        slow = [a for a in c.axes if a in facts.axes and facts.axes[a].network in ("dcn", "scale-out")]
        if not slow or c.bytes < min_bytes or c.regime == "latency":
            continue
        if c.kind == "all-reduce" and not include_grads:
            pass_ = str(frame.iloc[c.row].get("pass_", "")) if frame is not None and "pass_" in frame else ""
            if pass_ == "backward" or "transpose" in c.op_name:
                continue
        alt = facts.price_changed(c, fast_axes=slow)
        step = facts.step_saving([(c, alt)])
        if step.seconds <= 0:
            continue  # no cheaper, or hidden behind compute
        net = "DCN" if facts.axes[slow[0]].network == "dcn" else "the scale-out network"
        inside = "inside a slice (ICI)" if facts.hardware.kind == "tpu" else "inside the NVLink domain"
        yield ctx.diagnostic(
            SlowLinkCollective(kind=c.kind, nbytes=c.bytes, slow_axes=axes_text(slow), network=net, seconds=c.seconds,
                               alternative_seconds=alt, inside=inside, count=c.count),
            location=c.location(),
            notation=c.notation or None,
            seconds=c.seconds * c.count,
            alternative=f"the same {c.kind} with {axes_text(slow)} laid {inside}",
            alternative_seconds=alt * c.count,
            step=step,
            fix=f"reorder the mesh so {axes_text(slow)} stays {inside} and the axis that spans {net} only "
                "carries data parallelism (e.g. jax.make_mesh((slices, chips), ('data', 'model')))",
            details={"slow_axes": slow, "bytes": c.bytes, "count": c.count},
        )


@dataclass(frozen=True)
class StraddlingAxis(Message):
    """HA204: a mesh axis that jax.make_mesh laid across several physical axes, where an explicit placement
    of the same mesh on the same slice makes the step's collectives cheaper. `seconds` and
    `alternative_seconds` are every collective of the step (a placement moves every axis), per step."""

    axis: str
    size: int
    physical: str
    axis_collectives: int
    axis_seconds: float
    placement: str
    seconds: float
    alternative_seconds: float
    assumed_slice: str = ""

    template: ClassVar[str] = (
        "mesh axis '{axis}' ({size} chips) straddles physical axes {physical}: jax.make_mesh laid its groups across "
        "them, not on one ring, and its {axis_collectives} collective(s) take {axis_seconds:time} per step. Placed "
        "as {placement}, the step's collectives (every axis) take {alternative_seconds:time} instead of "
        "{seconds:time} ({ratio:.2f}x){assumed}"
    )

    @property
    def assumed(self) -> str:
        if self.assumed_slice:
            return f" (on the assumed slice {self.assumed_slice}: pass topology= to check the one you will use)."
        return "."

    @property
    def ratio(self) -> float:
        return self.seconds / self.alternative_seconds if self.alternative_seconds > 0 else float("inf")


@rule(
    code="HA204",
    name="straddling-mesh-axis",
    severity=Severity.WARNING,
    summary="A mesh axis jax.make_mesh laid across physical axes, whose exposed collectives an explicit placement "
            "makes cheaper.",
    options=(
        Option("min_fraction", 0.05, "Fire when the placement cuts the step's communication by at least this "
               "fraction."),
        Option("min_saving_seconds", 1e-7, "Ignore axes whose placement saves less than this per step."),
    ),
)
def straddling_mesh_axis(ctx: RuleContext) -> Iterator[Diagnostic]:
    """## What it does
    Finds mesh axes that `jax.make_mesh` laid across more than one physical axis of the slice without
    making a grid of them (`Topology.straddling_axes()`: jax's ring orders on v5e's 8-chip trays zig-zag an
    axis of 2 or 4 over both physical axes), whose collectives the step waits for. It prices every
    collective of the step again on each explicit placement of the same mesh on the same slice (every mesh
    axis on whole physical axes, `SLICE@AXIS=PHYS,...`, and the axes in order), with the analysis's own
    cost model, and offers the one that saves most step time. A placement on which the cost model cannot
    price one of the step's collectives is not offered: what it saves is unknown, and that collective is not
    free there. On a slice the analysis chose (no topology given) the finding is info: the slice is an
    assumption.

    ## Why is this bad?
    A straddling group is not one ring: its members sit on a zig-zag across physical axes, so a collective
    over it takes more hops (latency: `hops x T_min`) or fewer links than the same axis laid on one physical
    axis, and an AllToAll or permute over it crosses both axes' links. When those collectives are exposed
    (the compute waits for them, docs/step.md), each microsecond they lose is a microsecond of step. jax's
    order is often the better one for bulk AllGathers (a zig-zag of 4 on a 2x4 tray uses 3 links), so the
    rule fires only when a placement makes the step's collectives cheaper in total, and prices the saving
    in step time.

    ## Example
    ```python
    # v5e:2x4 (x=2, y=4): jax.make_mesh lays 'data' (2) across x and y, 'model' (4) on the rest of the ring
    mesh = jax.make_mesh((2, 4), ("data", "model"))
    y = jax.lax.with_sharding_constraint(x, P(None, "data"))   # AllToAll_data, waited for
    ```

    ## Use instead
    Place the mesh on the physical axes yourself, and check it with the same placement:
    ```python
    import numpy as np
    devs = sorted(jax.devices(), key=lambda d: (d.coords[0], d.coords[1]))   # data on x, model on y
    mesh = jax.sharding.Mesh(np.array(devs).reshape(2, 4), ("data", "model"))
    ```
    and `hlo-analyzer analyze ... --topology v5e:2x4@data=x,model=y` (`analyze(..., topology=...)`).

    ## References
    "How to Scale Your Model", TPU chapter, ICI topology (rings per physical axis, hops); sharding chapter,
    "A note on ICI latency"; jax's `mesh_utils.create_device_mesh` (the ring orders of v5e trays).
    """
    facts = ctx.facts
    topo, mesh = facts.topology, ctx.report.mesh
    if topo is None or mesh is None or facts.hardware.kind != "tpu" or not facts.collectives:
        return
    straddling = topo.straddling_axes()
    if not straddling:
        return
    min_fraction = float(ctx.option("min_fraction"))
    min_saving = float(ctx.option("min_saving_seconds"))
    candidates = explicit_placements(topo)
    if not candidates:
        return
    try:
        now = _row_prices(facts, topo)
    except AnalyzerError:
        return  # the step's own collectives cannot be priced again: no placement to compare with
    current = sum(c.seconds * c.count for c in facts.collectives)
    placement = topo.placement()
    priced = _priced_placements(facts, candidates, now)
    for axis in straddling:
        mine = [c for c in facts.collectives if axis in c.axes and c.seconds > 0]
        best = _best_placement(priced, axis, current) if mine else None
        if best is None:
            continue
        text, t, step, total = best
        if step.seconds < min_saving or current - total < min_fraction * current:
            continue
        axis_seconds = sum(c.seconds * c.count for c in mine)
        main = max(mine, key=lambda c: c.exposed or c.seconds * c.count)
        where = ", ".join(f"'{a}' on {'+'.join(t.axis_info(a).physical_axes)}" for a in mesh.axis_names)
        assumed = getattr(topo, "declared", True) is False  # the slice was chosen here, not the user's hardware
        yield ctx.diagnostic(
            StraddlingAxis(axis=axis, size=placement[axis].size, physical="+".join(placement[axis].physical_axes),
                           axis_collectives=len(mine), axis_seconds=axis_seconds, placement=text, seconds=current,
                           alternative_seconds=total, assumed_slice=topo.slice.name if assumed else ""),
            severity=Severity.INFO if assumed else None,
            location=main.location(),
            notation=main.notation or None,
            seconds=current,
            alternative=f"the same mesh placed as {text} ({where})",
            alternative_seconds=total,
            step=step,
            fix=(f"place the mesh yourself with {where}: build jax.sharding.Mesh from the devices ordered by those "
                 f"coordinates instead of jax.make_mesh's order, and check it with --topology {text} "
                 f"(analyze(..., topology={text!r}))"),
            details={"axis": axis, "physical_axes": list(placement[axis].physical_axes),
                     "placement": text, "collectives": len(mine), "axis_seconds": axis_seconds},
        )


def _priced_placements(facts: Any, candidates: Sequence[tuple[str, Any]], now: Sequence[float]
                       ) -> list[tuple[str, Any, Any, Any, float]]:
    """Each explicit placement the step's collectives can all be priced on: (its text, its `Topology`, the mesh
    axes that still straddle there, the `StepSaving` of moving there, the step's collectives' seconds there).
    A placement's price of the whole step does not depend on the axis judged: once per placement."""
    priced = []
    for text, t in candidates:
        try:
            alts = _on_own_footing(facts, _row_prices(facts, t), now)
        except AnalyzerError:
            continue  # a collective the cost model cannot price there: what the placement saves is unknown
        step = facts.step_saving(list(zip(facts.collectives, alts)))
        total = sum(a * c.count for a, c in zip(alts, facts.collectives))
        priced.append((text, t, t.straddling_axes(), step, total))
    return priced


def _best_placement(priced: Sequence[tuple[str, Any, Any, Any, float]], axis: str, current: float
                    ) -> tuple[str, Any, Any, float] | None:
    """The placement on which `axis` no longer straddles that saves most step time (then most communication):
    (text, `Topology`, `StepSaving`, the step's collectives' seconds there), or None."""
    best = None
    for text, t, straddles, step, total in priced:
        if axis in straddles:
            continue
        key = (step.seconds, current - total)
        if best is None or key > best[0]:
            best = (key, text, t, step, total)
    return best[1:] if best is not None else None


def _row_prices(facts: Any, topo: Any) -> list[float]:
    """Each row's collective priced on `topo`: seconds per call with the analysis's cost model, 0 for a row
    that moves nothing (no mesh axes, or a group of one device: the analysis priced it at 0). Rows repeat
    (every layer's collectives): each distinct (kind, bytes, axes) is priced once.

    Raises:
      AnalyzerError: a collective the cost model cannot price on `topo`. What the step costs there is then
        unknown, so the callers (HA202's other layout, HA204's placements) offer nothing on it rather than
        count that collective as free.
    """
    from analyzer.theory.cost import collective_cost

    out = []
    memo: dict[tuple, float] = {}
    for c in facts.collectives:
        if not c.axes or c.seconds <= 0:
            out.append(0.0)
            continue
        key = (c.kind, float(c.bytes), tuple(c.axes))
        if key not in memo:
            memo[key] = float(collective_cost(key[0], key[1], key[2], topo, model=facts.cost_model).seconds)
        out.append(memo[key])
    return out


def _on_own_footing(facts: Any, there: Sequence[float], here: Sequence[float]) -> list[float]:
    """Each row's seconds per call on another layout, on the footing of its own row: its seconds scaled by
    its price there over its price here (`_row_prices` on the two topologies); unchanged where it costs
    nothing here."""
    return [c.seconds * t / h if h > 0 else c.seconds for c, t, h in zip(facts.collectives, there, here)]


def explicit_placements(topo: Any) -> list[tuple[str, Any]]:
    """Every explicit placement of `topo`'s mesh on its slice: the axes in order, and each mapping of mesh
    axes onto whole physical axes (`SLICE@AXIS=PHYS[+PHYS],...`, each physical axis used once, the sizes
    matching), as (topology string, `Topology`). Multi-slice (DCN) and GPU slices: none.

    Example:
        >>> from analyzer.theory.topology import Topology
        >>> t = Topology.for_mesh("tpu-v5e", ("data", "model"), (2, 4), topology="v5e:2x4")
        >>> [text for text, _ in explicit_placements(t)]
        ['v5e:2x4@in-order']
    """
    from itertools import product

    from analyzer.theory.topology import Topology

    sl = topo.slice
    if any(n != "ici" for n in sl.networks):
        return []
    names = [n for n, size in zip(topo.axis_names, topo.axis_sizes) if size > 1]
    labels = list(sl.axis_labels)
    seen: set[tuple[tuple[int, ...], ...]] = set()
    out: list[tuple[str, Any]] = []

    def add(text: str) -> None:
        try:
            t = Topology.for_mesh(sl.hardware, topo.axis_names, topo.axis_sizes, topology=text)
        except (AnalyzerError, ValueError):
            return
        key = tuple(t.coords)
        if key in seen:
            return  # the same placement written another way
        seen.add(key)
        out.append((text, t))

    add(f"{sl.name}@in-order")
    sizes = dict(zip(topo.axis_names, topo.axis_sizes))
    for owners in product(range(len(names)), repeat=len(labels)):
        spans = {n: [labels[k] for k in range(len(labels)) if owners[k] == i] for i, n in enumerate(names)}
        if any(math.prod(sl.dims[labels.index(p)] for p in spans[n]) != sizes[n] for n in names):
            continue
        add(f"{sl.name}@" + ",".join(f"{n}={'+'.join(spans[n])}" for n in names))
    return out
