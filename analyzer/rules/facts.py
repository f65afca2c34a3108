"""What the rules need to know about an analysed program, gathered once per report.

`Facts.from_report(report)` reads the report's collectives and dots, the HLO module, and the hardware and
topology the analysis priced them on (from `report.context`), and offers:
  - `collectives`: one `Coll` per row of `report.collectives`, joined to its HLO instruction;
  - `chip`: the chip's numbers (FLOPs/s, ICI bandwidths, hop latency, HBM);
  - `axes`: per mesh axis, the ring it lies on (size, wraparound, network);
  - `price(kind, nbytes, axes, ...)`: the chapter's cost of a collective, for pricing alternatives.

When the analysis priced a collective, its row's `seconds` is the truth; `price` is used for alternatives.
To keep the two consistent, a rule compares an alternative with `price` of the current collective on the
same model (`price_like`), which scales the alternative by the row's own seconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from analyzer.diagnostics import Location
from analyzer.hlo.ir import Computation, HloModule, Instruction

__all__ = ["Chip", "AxisLink", "Coll", "Price", "Facts", "chapter_price", "ELEMENT_BYTES"]

ELEMENT_BYTES: Mapping[str, float] = {
    "bf16": 2, "f16": 2, "f32": 4, "f64": 8, "s8": 1, "u8": 1, "s32": 4, "u32": 4, "s64": 8, "pred": 1,
    "f8e4m3fn": 1, "f8e5m2": 1, "s4": 0.5, "u4": 0.5, "c64": 8, "c128": 16, "s16": 2, "u16": 2,
}


def _get(obj: Any, path: str, default: Any = None) -> Any:
    """`a.b.c` from nested attributes or mapping keys; `default` when any step is missing."""
    cur = obj
    for part in path.split("."):
        if cur is None:
            return default
        if isinstance(cur, Mapping):
            cur = cur.get(part)
        else:
            cur = getattr(cur, part, None)
    return default if cur is None else cur


@dataclass(frozen=True)
class Chip:
    """The numbers of one chip that the rules use (from the hardware spec; units: bytes, seconds)."""

    name: str
    flops: Mapping[str, float]
    ici_bidi: float
    ici_oneway: float
    hop_latency: float
    hbm_bytes: float
    hbm_bandwidth: float
    dcn_bandwidth: float | None = None
    kind: str = "tpu"
    domain_size: int | None = None  # GPUs per NVLink domain
    scale_out_bandwidth: float | None = None  # GPU node egress per GPU

    def flops_for(self, dtype: str) -> float:
        """FLOPs/s for a dot in `dtype` (bf16 rate for float types the spec does not list)."""
        if dtype in self.flops:
            return float(self.flops[dtype])
        if dtype in ("s8", "u8") and "int8" in self.flops:
            return float(self.flops["int8"])
        if dtype.startswith("f8") and "fp8" in self.flops:
            return float(self.flops["fp8"])
        return float(self.flops.get("bf16") or max(self.flops.values(), default=1.0))

    @property
    def ridge(self) -> float:
        """C / W_ici in bf16: the per-chip batch above which an FSDP matmul is compute-bound (2550 on v5p)."""
        return self.flops_for("bf16") / self.ici_bidi

    @property
    def latency_bytes(self) -> float:
        """Per-hop chunk under which a transfer is latency-bound: one-way bandwidth x hop latency."""
        return self.ici_oneway * self.hop_latency

    @staticmethod
    def from_spec(spec: Any, name: str = "") -> Chip:
        """Read a hardware spec object (analyzer.theory.hardware) or its TOML mapping."""
        flops = _get(spec, "flops", {}) or {}
        if isinstance(flops, (tuple, list)):
            flops = dict(flops)
        elif not isinstance(flops, Mapping):
            flops = {k: getattr(flops, k) for k in dir(flops) if not k.startswith("_")
                     and isinstance(getattr(flops, k), (int, float))}
        kind = str(_get(spec, "kind", "tpu"))
        if kind == "gpu":
            bidi = float(_get(spec, "nvlink.gpu_egress", 0) or _get(spec, "nvlink.bandwidth_per_gpu", 0) or 0)
            oneway = bidi
            latency = float(_get(spec, "nvlink.hop_latency", 0) or 1e-6)
        else:
            bidi = float(_get(spec, "ici.link_bandwidth_bidi", 0) or 0)
            oneway = float(_get(spec, "ici.link_bandwidth_one_way", 0) or bidi / 2)
            latency = float(_get(spec, "ici.hop_latency", 1e-6))
        return Chip(
            name=str(_get(spec, "name", name) or name),
            flops={str(k): float(v) for k, v in dict(flops).items()},
            ici_bidi=bidi or 1.0,
            ici_oneway=oneway or 1.0,
            hop_latency=latency,
            hbm_bytes=float(_get(spec, "hbm_bytes", 0) or _get(spec, "hbm.bytes", 0) or 0),
            hbm_bandwidth=float(_get(spec, "hbm_bandwidth", 0) or _get(spec, "hbm.bandwidth", 0) or 0),
            dcn_bandwidth=_get(spec, "dcn_bandwidth_per_chip") or _get(spec, "dcn.bandwidth_per_chip"),
            kind=kind,
            domain_size=_get(spec, "nvlink.domain_size"),
            scale_out_bandwidth=_scale_out_per_gpu(spec),
        )


def _scale_out_per_gpu(spec: Any) -> float | None:
    """Scale-out bytes/s per GPU: node egress shared by the GPUs of a node (gpus.md)."""
    egress = _get(spec, "scale_out.node_egress")
    node = _get(spec, "nvlink.domain_size")
    if egress and node:
        return float(egress) / float(node)
    return None


@dataclass(frozen=True)
class AxisLink:
    """How one mesh axis lies on the hardware.

    Attributes:
      name: the mesh axis name.
      size: devices along it.
      wrap: whether its ring has a wraparound link (bidirectional full ring).
      network: "ici", "dcn", "nvlink" or "scale-out".
      physical: the physical axis (or axes) it is laid on, for telling axes that share links apart.
      bandwidth: bytes/s a device can push along it in both directions together (W of the formulas).
    """

    name: str
    size: int
    wrap: bool
    network: str = "ici"
    physical: tuple[Any, ...] = ()
    bandwidth: float | None = None


@dataclass(frozen=True)
class Price:
    """A predicted collective time."""

    seconds: float
    regime: str
    formula: str = ""


def chapter_price(
    kind: str, nbytes: float, links: Sequence[AxisLink], chip: Chip, *, wrap: bool | None = None
) -> Price:
    """The chapter's cost of one collective over `links` (sharding.md; numbers file section 2.1).

    Bandwidth: AllGather/ReduceScatter `V / (W_ici * N_axes)`, AllReduce twice that, AllToAll
    `V * max(axis) / (4 * N * W_ici)`, a ring without wraparound sends one way over X-1 hops
    (`(X-1) * (V/X) / W_one_way` per axis, pop quiz 2). Latency floor: `T_min * hops` on the longest path
    (`X/2` hops with wraparound, `X-1` without). The answer is the larger.

    Args:
      kind: collective kind (all-gather, reduce-scatter, all-reduce, all-to-all, collective-permute).
      nbytes: V, the bytes of the full (gathered or unreduced) array.
      links: the mesh axes it runs over.
      chip: the chip.
      wrap: force wraparound on (True) or off (False) for every axis; None uses each axis's own.

    Example:
        >>> v5e = Chip("v5e", {"bf16": 1.97e14}, 9e10, 4.5e10, 1e-6, 16e9, 8.2e11)
        >>> round(chapter_price("all-gather", 34e6, [AxisLink("Y", 4, wrap=True)], v5e).seconds * 1e6)
        378
    """
    if not links or nbytes <= 0:
        return Price(0.0, "bandwidth", "nothing moves")
    n_axes = len(links)
    hops = 0.0
    band = 0.0
    for link in links:
        w_bidi = link.bandwidth or _network_bandwidth(link.network, chip)
        has_wrap = link.wrap if wrap is None else wrap
        if has_wrap or link.size <= 2:
            band = max(band, nbytes / (w_bidi * n_axes))
            hops += link.size / 2 if has_wrap else link.size - 1
        else:
            band = max(band, (link.size - 1) / link.size * nbytes / (w_bidi / 2) / n_axes)
            hops += link.size - 1
    kind = kind.replace("_", "-")
    if kind == "all-reduce":
        band, hops, label = 2 * band, 2 * hops, "2 x V / W"
    elif kind == "all-to-all":
        n = math.prod(link.size for link in links)
        biggest = max(link.size for link in links)
        band = band * n_axes * biggest / (4 * n)
        label = "V * max(axis) / (4 N W)"
    elif kind == "collective-permute":
        n = math.prod(link.size for link in links)
        band = band * n_axes / n  # each device sends its shard one hop
        hops = 1
        label = "V / (N W)"
    else:
        label = "V / (W N_axes)"
    latency = hops * chip.hop_latency
    if latency > band:
        return Price(latency, "latency", f"T_min x {hops:g} hops")
    return Price(band, "bandwidth", label)


def _network_bandwidth(network: str, chip: Chip) -> float:
    """W of the formulas for a network: ICI bidirectional, DCN per chip, NVLink egress, scale-out per GPU."""
    if network == "dcn" and chip.dcn_bandwidth:
        return float(chip.dcn_bandwidth)
    if network == "scale-out" and chip.scale_out_bandwidth:
        return float(chip.scale_out_bandwidth)
    return chip.ici_bidi


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
    inst: Instruction | None = None
    comp: Computation | None = None
    record: Any = None

    @property
    def total_seconds(self) -> float:
        return self.seconds * self.count

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
class Facts:
    """Everything the rules read, computed once per report."""

    module: HloModule | None
    chip: Chip
    axes: Mapping[str, AxisLink]
    collectives: tuple[Coll, ...]
    mesh_axes: tuple[str, ...] = ()
    context: Mapping[str, Any] = field(default_factory=dict)
    topology: Any = None  # the analysis's `analyzer.theory.topology.Topology`, when it priced on one
    cost_model: str = "topology"
    # users_map of each computation, built on first use: a 32-layer unrolled step has hundreds of
    # collectives in one entry computation, and rebuilding its map for each cost ~30 s.
    _users: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # hlo_walk.uniform_over's evaluations, per set of device groups, shared by every rule of this report.
    uniformity: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)
    # common.dot_location's index of the report's dots table by instruction name.
    dot_rows: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    @cached_property
    def entry(self) -> Computation | None:
        """The module's entry computation, or None for a report without HLO."""
        return self.module.entry if self.module is not None else None

    def users(self, comp: Computation) -> Mapping[str, tuple[tuple[Instruction, int], ...]]:
        """`hlo_walk.users_map(comp)`, computed once per computation of this report."""
        found = self._users.get(comp.name)
        if found is None:
            from analyzer.rules.hlo_walk import users_map

            found = self._users[comp.name] = users_map(comp)
        return found

    def links(self, axes: Sequence[str]) -> list[AxisLink]:
        return [self.axes[a] if a in self.axes else AxisLink(a, 2, False) for a in axes]

    def price(self, kind: str, nbytes: float, axes: Sequence[str], *, wrap: bool | None = None,
              links: Sequence[AxisLink] | None = None) -> Price:
        """Seconds of one collective of `kind` moving V = `nbytes` over mesh `axes`.

        With the analysis's topology (and no `wrap`/`links` override) this is `analyzer.theory.cost.collective_cost`,
        the model that priced the report's rows; otherwise the chapter's formulas (`chapter_price`).
        """
        if self.topology is not None and wrap is None and links is None and axes:
            try:
                from analyzer.theory.cost import collective_cost

                cost = collective_cost(kind, float(nbytes), tuple(axes), self.topology, model=self.cost_model)
                return Price(float(cost.seconds), str(cost.regime), str(getattr(cost, "formula", "")))
            except Exception:  # noqa: BLE001 - an axis form the cost model does not take: use the chapter's
                pass
        return chapter_price(kind, nbytes, list(links) if links is not None else self.links(axes), self.chip,
                             wrap=wrap)

    def price_like(self, coll: Coll, kind: str, nbytes: float, axes: Sequence[str], *,
                   wrap: bool | None = None, links: Sequence[AxisLink] | None = None) -> float:
        """An alternative's seconds on the same footing as `coll`'s own row.

        Both are priced with the chapter's formulas here; the alternative is scaled by the ratio of the row's
        seconds to that price, so a saving never comes from two cost models disagreeing.
        """
        alt = self.price(kind, nbytes, axes, wrap=wrap, links=links).seconds
        mine = self.price(coll.kind, coll.bytes, coll.axes).seconds
        if mine <= 0 or coll.seconds <= 0:
            return alt
        return alt * coll.seconds / mine

    def price_changed(self, coll: Coll, *, wrap_axes: Sequence[str] = (), fast_axes: Sequence[str] = ()) -> float:
        """`coll` re-priced with the physical axes under some mesh axes changed: closed into rings with
        wraparound (`wrap_axes`), or moved onto the fast network (`fast_axes`: ICI on TPUs, NVLink on GPUs).

        The analysis's own topology is copied with those changes and priced with the same cost model, so the
        difference is only the change. Without a topology, the chapter's formulas price both sides and the
        alternative is scaled by the row's seconds.
        """
        topo = self.topology
        if topo is not None and coll.axes:
            try:
                from dataclasses import replace as _replace

                from analyzer.theory.cost import collective_cost

                sl = topo.slice
                wraps = list(sl.wraps)
                networks = list(sl.networks)
                fast = "nvlink" if self.chip.kind == "gpu" else "ici"
                for axes, change in ((wrap_axes, "wrap"), (fast_axes, "fast")):
                    for a in axes:
                        for label in topo.axis_info(a).physical_axes:
                            k = sl.axis_labels.index(label)
                            if change == "wrap":
                                wraps[k] = True
                            else:
                                networks[k] = fast
                                wraps[k] = wraps[k] if fast == "nvlink" else sl.dims[k] > 2
                new = _replace(topo, slice=_replace(sl, wraps=tuple(wraps), networks=tuple(networks)))
                cost = collective_cost(coll.kind, float(coll.bytes), tuple(coll.axes), new, model=self.cost_model)
                return float(cost.seconds)
            except Exception:  # noqa: BLE001 - fall back to the chapter's formulas below
                pass
        links = [replace(lk, wrap=True) if lk.name in wrap_axes else lk for lk in self.links(coll.axes)]
        links = [replace(lk, network="ici" if self.chip.kind == "tpu" else "nvlink", bandwidth=None)
                 if lk.name in fast_axes else lk for lk in links]
        alt = chapter_price(coll.kind, coll.bytes, links, self.chip).seconds
        mine = chapter_price(coll.kind, coll.bytes, self.links(coll.axes), self.chip).seconds
        return alt * coll.seconds / mine if mine > 0 and coll.seconds > 0 else alt

    def instruction(self, computation: str, name: str) -> tuple[Computation | None, Instruction | None]:
        if self.module is None:
            return None, None
        comp = self.module.by_name.get(computation)
        comps = [comp] if comp is not None else list(self.module.computations)
        for c in comps:
            inst = c.by_name.get(name)
            if inst is not None:
                return c, inst
        return None, None

    @staticmethod
    def from_report(report: Any) -> Facts:
        ctx = dict(getattr(report, "context", {}) or {})
        module = getattr(report, "hlo", None) or ctx.get("module") or ctx.get("hlo")
        spec = ctx.get("hardware") or ctx.get("hardware_spec") or ctx.get("spec")
        if spec is None or isinstance(spec, str):
            spec = _load_spec(getattr(report, "hardware", "") or "tpu-v5e")
        chip = Chip.from_spec(spec, getattr(report, "hardware", ""))
        mesh = getattr(report, "mesh", None)
        mesh_axes = tuple(mesh.axis_names) if mesh is not None else ()
        axes = _axis_links(ctx.get("topology"), mesh, spec, chip)
        records = ctx.get("collectives") or ctx.get("collective_records") or ()
        frame = getattr(report, "collectives", None)
        colls: list[Coll] = []
        if frame is not None and len(frame):
            fr = frame.reset_index(drop=True)
            for i, row in fr.iterrows():
                names = str(row.get("instruction", "") or "")
                first = names.split(",")[0].strip()
                comp_name = str(row.get("computation", "") or "")
                axes_v = row.get("axes", ())
                if isinstance(axes_v, str):
                    axes_v = tuple(a for a in axes_v.replace("(", "").replace(")", "").replace("'", "")
                                   .split(",") if a.strip())
                c = Coll(
                    row=int(i),
                    kind=str(row.get("kind", "")),
                    axes=tuple(str(a).strip() for a in (axes_v or ())),
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
                    record=records[i] if i < len(records) else None,
                )
                if module is not None and first:
                    comp, inst = Facts(module, chip, axes, ()).instruction(comp_name, first)
                    c = _with(c, inst=inst, comp=comp)
                colls.append(c)
        topology = ctx.get("topology")
        return Facts(module=module, chip=chip, axes=axes, collectives=tuple(colls), mesh_axes=mesh_axes,
                     context=ctx, topology=topology if not isinstance(topology, str) else None,
                     cost_model=str(ctx.get("cost_model") or "topology"))


def _with(c: Coll, **changes: Any) -> Coll:
    from dataclasses import replace

    return replace(c, **changes)


def _load_spec(name: str) -> Any:
    """The hardware spec by name through analyzer.theory.hardware, or the TOML file shipped in the package."""
    try:
        from analyzer.theory.hardware import load_hardware

        return load_hardware(name)
    except Exception:  # noqa: BLE001 - fall back to the raw spec file below
        pass
    import tomllib
    from importlib import resources

    try:
        text = resources.files("analyzer").joinpath(f"_data/hardware/{name}.toml").read_text(encoding="utf-8")
    except (FileNotFoundError, OSError):
        text = resources.files("analyzer").joinpath("_data/hardware/tpu-v5e.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def _axis_links(topology: Any, mesh: Any, spec: Any, chip: Chip) -> dict[str, AxisLink]:
    """Per mesh axis, the ring it lies on: from the analysis's topology, else the spec's wraparound rule."""
    out: dict[str, AxisLink] = {}
    if mesh is None:
        return out
    for name, size in zip(mesh.axis_names, mesh.axis_sizes):
        info = _topology_axis(topology, name)
        if info is not None:
            out[name] = AxisLink(
                name=name,
                size=int(_get(info, "size", size) or size),
                wrap=bool(_get(info, "wraparound", False)),
                network=str(_get(info, "network", "ici") or "ici").lower(),
                physical=tuple(_as_tuple(_get(info, "physical_axes", None) or _get(info, "physical", None)
                                         or (name,))),
                bandwidth=_get(info, "bandwidth", None),
            )
        else:
            out[name] = AxisLink(name=name, size=int(size), wrap=_default_wrap(spec, int(size)),
                                 physical=(name,))
    return out


def _as_tuple(v: Any) -> tuple[Any, ...]:
    if isinstance(v, (list, tuple)):
        return tuple(v)
    return (v,)


def _topology_axis(topology: Any, name: str) -> Any:
    """The topology's description of mesh axis `name`, whatever container it uses."""
    if topology is None:
        return None
    for attr in ("axes", "mesh_axes", "axis_links", "links"):
        container = _get(topology, attr, None)
        if container is None:
            continue
        if isinstance(container, Mapping):
            if name in container:
                return container[name]
        elif isinstance(container, (list, tuple)):
            for item in container:
                if _get(item, "name", None) == name or _get(item, "mesh_axis", None) == name:
                    return item
    for method in ("axis_info", "axis"):
        fn = getattr(topology, method, None)
        if callable(fn):
            try:
                return fn(name)
            except Exception:  # noqa: BLE001 - a topology that does not know the axis
                return None
    return None


def _default_wrap(spec: Any, size: int) -> bool:
    """The spec's wraparound rule for a ring of `size` (v5e/v6e: only axes of 16; v4/v5p: multiples of 4)."""
    rule = _get(spec, "ici.wraparound", None)
    kind = str(_get(rule, "rule", "") or "")
    n = int(_get(rule, "size", 0) or 0)
    if kind == "full-axis":
        return n > 0 and size == n
    if kind in ("cube", "full-cube", "multiple"):
        return n > 0 and size % n == 0
    return False
