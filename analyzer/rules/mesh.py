"""Mesh and topology rules: links that sit idle, rings without wraparound, slow networks (sharding.md,
Problem 2 and its closing note, pop quiz 2; tpus.md, ICI topology; training.md, across pods)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from analyzer.analysis.dataflow import mesh_axis_groups, uniform_over
from analyzer.diagnostics import Diagnostic, Severity
from analyzer.errors import AnalyzerError
from analyzer.rules.common import axes_text, fmt_s
from analyzer.rules.context import RuleContext
from analyzer.rules.facts import Coll
from analyzer.rules.messages import IdleAxisLinks, MissingWraparound, SlowLinkCollective
from analyzer.rules.registry import Option, rule

__all__ = ["idle_mesh_axis", "missing_wraparound", "slow_link"]


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
        used = set(c.axes)
        busy_physical = {p for a in c.axes if a in facts.axes for p in facts.axes[a].physical_axes}
        operand = c.comp.by_name.get(c.inst.operands[0].name)
        if operand is None:
            continue
        entry = c.comp is facts.entry
        idle: list[str] = []
        for k, (name, size) in enumerate(zip(mesh.axis_names, mesh.axis_sizes)):
            link = facts.axes.get(name)
            if name in used or size < 2 or link is None or link.network != "ici":
                continue
            if set(link.physical_axes) & busy_physical:
                continue
            if uniform_over(c.comp, operand, mesh_axis_groups(mesh.axis_sizes, logical, k), entry, facts.module, facts.uniformity):
                idle.append(name)
        if not idle:
            continue
        new_axes = tuple(a for a in mesh.axis_names if a in used or a in idle)
        alt = facts.price_like(c, "all-gather", c.bytes, new_axes)
        saving = (c.seconds - alt) * c.count
        if saving < min_saving or alt > c.seconds * (1 - min_fraction):
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
            saving_seconds=saving,
            fix=f"add {idle_text} to the PartitionSpec entry of the gathered dimension "
                f"(e.g. P(({', '.join(repr(a) for a in new_axes)}), ...)) so the gather runs over {axes_text(new_axes)}",
            details={"idle_axes": idle, "bytes": c.bytes, "count": c.count},
        )


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
    collectives would save on a closed ring.

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
            if name not in c.axes or c.seconds <= 0:
                continue
            alt = facts.price_changed(c, wrap_axes=(name,))
            if alt < c.seconds:
                rows.append((c, alt))
        if not rows:
            continue
        current = sum(c.seconds * c.count for c, _ in rows)
        better = sum(alt * c.count for c, alt in rows)
        saving = current - better
        if saving < min_saving or saving < min_fraction * current:
            continue
        main = max(rows, key=lambda r: (r[0].seconds - r[1]) * r[0].count)[0]
        topo = facts.topology
        assumed = topo is not None and getattr(topo, "declared", True) is False
        # No slice of this many chips wraps: the closed ring is not a change anyone can make, so it is no
        # saving (issue 11). What is offered is another layout of the same chips, and only when the slice was
        # assumed: a declared slice is the hardware the user has.
        impossible = _no_wrap_at_this_size(ctx)
        layout = _same_chips_layout(ctx) if impossible and assumed else None
        if impossible:
            saving = layout[2] - layout[3] if layout else None
        yield ctx.diagnostic(
            MissingWraparound(axis=name, chips=link.size, collectives=len(rows), seconds=current,
                              alternative_seconds=better, assumed_slice=topo.slice.name if assumed else "",
                              wraparound_possible=not impossible),
            severity=Severity.INFO if assumed else None,
            location=main.location(),
            notation=main.notation or None,
            seconds=current,
            alternative=f"the same collectives on a ring of {link.size} with wraparound",
            alternative_seconds=better,
            saving_seconds=saving,
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
               f"communication (every axis) from {fmt_s(layout[2])} to {fmt_s(layout[3])}, saving "
               f"{fmt_s(layout[2] - layout[3])}" if layout else "")
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


def _same_chips_layout(ctx: RuleContext) -> tuple[str, str, float, float] | None:
    """The slice of the same chips (another torus shape, mesh axes laid in order) whose collectives cost
    least, when it beats the analysed one by at least 1%: (slice, where the axes lie, seconds now, seconds there).

    Every collective of the report is priced on both with the analysis's own cost model, so the comparison
    is like for like (e.g. a 4-way axis on a 2x2 sub-grid of a v5e:2x4 uses both physical axes' links,
    where on a v5e:4x2 it lies on one line of 4 without wraparound).
    """
    facts = ctx.facts
    topo, mesh = facts.topology, ctx.report.mesh
    if topo is None or mesh is None or not facts.collectives:
        return None
    from itertools import product

    from analyzer.theory.cost import collective_cost
    from analyzer.theory.topology import Topology

    sl = topo.slice
    torus = [d for d, n in zip(sl.dims, sl.networks) if n == "ici"]
    if len(torus) != len(sl.dims):
        return None  # multi-slice (DCN): the layout across slices is another question (HA203)
    n = sl.size
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    shapes = {dims for dims in product(divisors, repeat=len(torus)) if math.prod(dims) == n}

    def cost(t: Any) -> float:
        return sum(float(collective_cost(c.kind, float(c.bytes), tuple(c.axes), t, model=facts.cost_model).seconds)
                   * c.count for c in facts.collectives if c.axes)

    now = cost(topo)
    best: tuple[str, str, float, float] | None = None
    prefix = sl.name.split(":")[0]
    for dims in sorted(shapes):
        name = f"{prefix}:{'x'.join(map(str, dims))}"
        if name == sl.name:
            continue
        try:
            t = Topology.for_mesh(sl.hardware, mesh.axis_names, mesh.axis_sizes, topology=name)
            there = cost(t)
        except AnalyzerError:  # a shape the mesh cannot be laid on in order: not an alternative
            continue
        if there < 0.99 * now and (best is None or there < best[3]):
            where = ", ".join(f"{a} on {'+'.join(t.axis_info(a).physical_axes)}" for a in mesh.axis_names)
            best = (name, where, now, there)
    return best


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
        saving = (c.seconds - alt) * c.count
        if saving <= 0:
            continue
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
            saving_seconds=saving,
            fix=f"reorder the mesh so {axes_text(slow)} stays {inside} and the axis that spans {net} only "
                "carries data parallelism (e.g. jax.make_mesh((slices, chips), ('data', 'model')))",
            details={"slow_axes": slow, "bytes": c.bytes, "count": c.count},
        )
