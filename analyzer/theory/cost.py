"""What each collective costs: the formulas of "How to Scale Your Model" as plain functions.

`V` (`nbytes`) is always the chapter's V: the bytes of the whole logical array inside one replica group
- AllGather: the gathered result (what each device holds afterwards);
- ReduceScatter, AllReduce: the unreduced operand each device holds before (`[B, F]{U_X}`);
- AllToAll (and ragged): the whole array over the group (per-device bytes x group size);
- collective-permute, collective-broadcast: the buffer one device sends.

Two models:

`ideal` (sharding.md's summary): mesh axes are hardware axes with full rings.
  AllGather = ReduceScatter = V / (W_ici * N_axes), AllReduce = 2x, AllToAll = V * max(X_i) / (4 N W_ici),
  latency floor T_min * sum(X_i) / 2. W_ici is the bidirectional link bandwidth; an axis over DCN uses the
  per-chip DCN bandwidth. GPUs: max(V / W_gpu, V / W_node) (gpus.md's simple form).

`topology` (the default): the groups as they lie on the slice (`analyzer.theory.topology`).
  TPU, per spanned physical ring of size s: with wraparound `floor(s/2)` hops of `V/s` each way
  (= V / W_bidi for even s, sharding.md's derivation); without wraparound the data goes one way over `s-1`
  hops (sharding.md pop quiz 2: `3 * 8.4e6 / 4.5e10`); rings whose members are `stride` chips apart share
  each link with `stride` interleaved groups. Several rings add their bandwidths (the book's N_axes rule).
  Latency: `max(T_min * hops, bandwidth time)`, hops summed over the rings.
  GPU: the precise tree form `V * max_i g_i (D_i - 1) / (D_i W_i)` over the NVLink and scale-out levels
  (gpus.md), where g_i groups share a child's uplink (an array also sharded over an inner axis);
  AllReduce is 2x that, or `V * max_i g_i / W_i` with SHARP; AllToAll `V (N-1) / (N^2 W_gpu)` in a node
  and `g V (M-1) / (M^2 W_node)` over M nodes.

Every function returns a frozen `Cost` with the seconds, the regime, V, the hops and the formula with its
numbers, so a reader can redo the arithmetic.

Synchronisation (`Cost.sync_seconds`, TPU ICI rings: AllGather, ReduceScatter, AllReduce; issue 25 item 3). The
book's formulas count the data's hops only; a ring collective also synchronises its devices, and the book
measured it: the latency-bound AllGather of sharding.md's pop quiz 2 (3 hops, 32 kB shards, v5e) predicted at
3 us took about 8 us. jax's Pallas distributed guide (docs/pallas/tpu/distributed.md) writes out what a TPU
ring collective must do besides moving data: its prologue "initiates a barrier with both neighbors to ensure
that they have also entered the kernel" (one signal to each neighbour and a wait for theirs: one hop,
T_min), and, double-buffered, each step's receiver tells its sender that its receiving slot is free before the
next copy lands there (one more hop per step), or "a sender ... one iteration ahead of its receiver" overwrites
data still being read. So a ring of `h` steps takes `max(bandwidth, 2 h T_min) + T_min`: in the latency-bound
regime each step is a data hop and a ready signal, in the bandwidth-bound one the signals travel under the
previous step's transfer, and the entry barrier precedes every byte. `sync_seconds` is that minus the book's
`seconds` (`max(bandwidth, h T_min)`), kept apart so `seconds` stays the book's formula (the chapter's answers
are checked against it); `Cost.synchronised_seconds` is the sum. For the pop quiz: `max(0.7, 6) + 1 = 7 us`
against the measured 8 us (tests/analysis/test_measured.py). XLA's own collectives are not Pallas kernels; the
guide is the published description of the protocol a TPU ring needs, not of XLA's implementation. DCN
collectives (host transfers) and permutes get no synchronisation term: no published basis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from analyzer.errors import AnalyzerError, HardwareError, valid_choices
from analyzer.theory.hardware import HardwareSpec
from analyzer.theory.topology import AxisLike, GroupGeometry, Ring, Topology, TreeLevel, _normalize_axes
from analyzer.units import format_seconds
from analyzer.hlo.opcodes import COLLECTIVE_KINDS

__all__ = [
    "Cost",
    "KINDS",
    "MODELS",
    "canonical_kind",
    "collective_cost",
    "group_cost",
    "geometry_cost",
    "rings_cost",
    "tree_cost",
    "ring_all_gather_seconds",
    "ring_all_to_all_seconds",
    "tree_all_gather_seconds",
    "tree_sharp_all_reduce_seconds",
    "permute_seconds",
    "ragged_fraction",
    "CostModelError",
]

KINDS: tuple[str, ...] = COLLECTIVE_KINDS  # the collectives priced (analyzer/hlo/opcodes.py)
MODELS: tuple[str, ...] = ("topology", "ideal")

_ALIASES = {
    "allgather": "all-gather", "reducescatter": "reduce-scatter", "allreduce": "all-reduce",
    "alltoall": "all-to-all", "collectivepermute": "collective-permute", "permute": "collective-permute",
    "ppermute": "collective-permute", "collectivebroadcast": "collective-broadcast",
    "broadcast": "collective-broadcast", "raggedalltoall": "ragged-all-to-all",
    "psum": "all-reduce", "psumscatter": "reduce-scatter",
}


class CostModelError(AnalyzerError):
    """A collective the cost model cannot price as asked (unknown kind or model, SHARP on hardware without it)."""


def canonical_kind(kind: str) -> str:
    """`"AllGather"`, `"all_gather"`, `"all-gather-start"` -> `"all-gather"`; raises CostModelError otherwise.

    Example:
      >>> canonical_kind("ReduceScatter")
      'reduce-scatter'
    """
    k = str(kind).strip().lower()
    for suffix in ("-start", "-done", "_start", "_done"):
        if k.endswith(suffix):
            k = k[: -len(suffix)]
    if k in KINDS:
        return k
    key = k.replace("-", "").replace("_", "").replace(" ", "")
    if key in _ALIASES:
        return _ALIASES[key]
    raise CostModelError(f"unknown collective {kind!r}; {valid_choices(k, KINDS, what='collectives')}")


@dataclass(frozen=True)
class Cost:
    """The predicted cost of one execution of a collective.

    Attributes:
      seconds: predicted time.
      regime: "bandwidth" or "latency" (which term of the max won).
      bytes: V, as defined in the module doc.
      hops: physical hops on the longest path (TPU), or ring steps over the tree levels (GPU).
      formula: the formula with its numbers.
      kind: the collective ("all-gather"...).
      model: "topology" or "ideal".
      bandwidth_seconds, latency_seconds: the two terms of the max.
      sync_seconds: the ring's synchronisation beyond `seconds` (the entry barrier, and in the latency-bound
        regime each step's ready signal; the module doc, "Synchronisation"); 0 where there is no basis for one.
    """

    seconds: float
    regime: str
    bytes: float
    hops: int
    formula: str
    kind: str = ""
    model: str = ""
    bandwidth_seconds: float = 0.0
    latency_seconds: float = 0.0
    sync_seconds: float = 0.0

    @property
    def synchronised_seconds(self) -> float:
        """`seconds` plus the ring's synchronisation (`sync_seconds`): what a measurement of it would show."""
        return self.seconds + self.sync_seconds

    def to_dict(self) -> dict:
        return {"kind": self.kind, "model": self.model, "seconds": self.seconds, "regime": self.regime,
                "bytes": self.bytes, "hops": self.hops, "formula": self.formula,
                "bandwidth_seconds": self.bandwidth_seconds, "latency_seconds": self.latency_seconds,
                "sync_seconds": self.sync_seconds}



def _finish(kind: str, model: str, nbytes: float, bw: float, lat: float, hops: int, formula: str) -> Cost:
    seconds = max(bw, lat)
    regime = "latency" if lat > bw else "bandwidth"
    text = f"{formula} = {format_seconds(seconds)}"
    if lat > 0:
        text = f"max(latency {format_seconds(lat)} (hops x T_min), bandwidth {formula}) = {format_seconds(seconds)} ({regime}-bound)"
    return Cost(seconds, regime, float(nbytes), int(hops), text, kind, model, bw, lat)


# ------------------------------------------------------------------------------------ TPU ring formulas
def ring_all_gather_seconds(nbytes: float, ring: Ring) -> float:
    """Bandwidth time of an AllGather (or ReduceScatter) of V bytes around one physical ring.

    With wraparound: `floor(s/2)` hops of `V/s` bytes each way (sharding.md: `T_hop = 2V/(s W_bidi)`);
    without: `s-1` hops of `V/s` one way (sharding.md pop quiz 2); DCN: `(s-1)/s * V / W_dcn`. Times
    `share`, the groups whose traffic interleaves on the same links.

    Example:
      >>> r = Ring(0, 4, 1, False, "ici", 4.5e10, 1e-6)
      >>> round(ring_all_gather_seconds(2048 * 8192 * 2, r) * 1e6)
      559
    """
    s = ring.size
    if s <= 1 or ring.network == "chip":
        return 0.0
    if ring.network == "dcn":
        return (s - 1) / s * nbytes / ring.link_bandwidth_one_way
    steps = s // 2 if ring.wraparound else s - 1
    return ring.share * steps * (nbytes / s) / ring.link_bandwidth_one_way


def ring_all_to_all_seconds(nbytes: float, ring: Ring, group_size: int) -> float:
    """Bandwidth time of the part of an AllToAll of V bytes (whole group) that crosses one ring.

    sharding.md: `V * max(A, B, ...) / (4 N W_bidi)` on a torus with wraparound (bisection argument);
    without wraparound the bisection has half the links, so twice that; DCN: each chip sends
    `(s-1)/s` of its `V/N` over its DCN egress.

    Example:
      >>> r = Ring(0, 8, 1, True, "ici", 4.5e10, 1e-6)
      >>> ring_all_to_all_seconds(1e9, r, 8) == 1e9 / (4 * 9e10)
      True
    """
    s = ring.size
    if s <= 1 or ring.network == "chip":
        return 0.0
    if ring.network == "dcn":
        return (s - 1) / s * (nbytes / group_size) / ring.link_bandwidth_one_way
    w_bidi = 2 * ring.link_bandwidth_one_way
    factor = 1 if ring.wraparound else 2
    return ring.share * factor * nbytes * s / (4 * group_size * w_bidi)


def _rings_text(rings: Sequence[Ring], labels: Sequence[str]) -> str:
    parts = []
    for r in rings:
        lab = labels[r.physical_axis] if r.physical_axis < len(labels) else str(r.physical_axis)
        if r.network == "dcn":
            parts.append(f"{lab}: {r.size} slices over DCN at {r.link_bandwidth_one_way:.3g} B/s per chip")
            continue
        if r.network == "chip":
            parts.append(f"{lab}: {r.size} cores of one chip")
            continue
        wrap = "wraparound" if r.wraparound else "no wraparound"
        extra = f", stride {r.stride} (links shared by {r.share} groups)" if r.stride > 1 else ""
        parts.append(f"{lab}: ring of {r.size}, {wrap}{extra}")
    return "; ".join(parts)


def _torus_cost(kind: str, nbytes: float, geo: GroupGeometry, labels: Sequence[str],
                pairs_loads: tuple | None, top_k: int | None) -> Cost:
    """The topology model's cost of one collective on a TPU torus: over the group's rings (`geo`), named by
    `labels`; a permute by its routed loads (`pairs_loads`, `_torus_permute_loads`)."""
    rings = geo.rings
    if kind == "collective-permute":
        assert pairs_loads is not None
        return _torus_permute_cost(kind, nbytes, pairs_loads)
    if not rings:
        return Cost(0.0, "bandwidth", float(nbytes), 0, "single-device group: no communication", kind, "topology")
    lat_per_hop = next((r.hop_latency for r in rings if r.hop_latency is not None), None) or 0.0
    where = _rings_text(rings, labels)
    if kind in ("all-gather", "reduce-scatter", "all-reduce"):
        c = _torus_ring_cost(kind, nbytes, rings, lat_per_hop)
        return replace(c, formula=c.formula + f" [{where}]")
    hops = sum(r.hops for r in rings)
    if kind in ("all-to-all", "ragged-all-to-all"):
        bw = max(ring_all_to_all_seconds(nbytes, r, geo.group_size) for r in rings)
        formula = f"V * max_i(s_i c_i) / (4 N W_bidi) = {nbytes:.4g} B over N={geo.group_size}"
        if kind == "ragged-all-to-all":
            f = ragged_fraction(top_k, geo.group_size)
            bw *= f
            formula += f" x ragged fraction {f:.3g}" + ("" if top_k else " (top-k unknown: dense bound)")
        c = _finish(kind, "topology", nbytes, bw, lat_per_hop * hops, hops, formula)
        return replace(c, formula=c.formula + f" [{where}; c_i = 2 without wraparound]")
    if kind == "collective-broadcast":
        w = min(r.link_bandwidth_one_way / r.share for r in rings)
        bw = nbytes / w
        c = _finish(kind, "topology", nbytes, bw, lat_per_hop * hops, hops,
                    f"V / W_one = {nbytes:.4g} B / {w:.3g} B/s (pipelined)")
        return replace(c, formula=c.formula + f" [{where}]")
    raise CostModelError(f"unknown collective {kind!r}")


def _torus_permute_cost(kind: str, nbytes: float, pairs_loads: tuple) -> Cost:
    """A permute on a torus: the busiest ICI link's messages x V / W_one (and the busiest DCN egress's), at least
    T_min per hop of the longest route."""
    ici_load, dcn_load, max_hops, w_one, w_dcn, t_min = pairs_loads
    t_ici = ici_load * nbytes / w_one
    t_dcn = dcn_load * nbytes / w_dcn if dcn_load else 0.0
    text = f"messages on the busiest link x V / W_one = {ici_load} x {nbytes:.4g} B / {w_one:.3g} B/s"
    if dcn_load:
        text = f"max({text}, DCN {dcn_load} x V / W_dcn at {w_dcn:.3g} B/s)"
    return _finish(kind, "topology", nbytes, max(t_ici, t_dcn), t_min * max_hops, max_hops, text)


def _torus_ring_cost(kind: str, nbytes: float, rings: Sequence[Ring], lat_per_hop: float) -> Cost:
    """AllGather / ReduceScatter over the group's rings, all at once (AllReduce: both, twice the time): the ICI
    rings' bandwidths add up, the DCN part runs beside them."""
    ici = [r for r in rings if r.network == "ici"]
    dcn = [r for r in rings if r.network == "dcn"]
    times = [ring_all_gather_seconds(nbytes, r) for r in ici]
    t_ici = 1.0 / sum(1.0 / t for t in times if t > 0) if any(t > 0 for t in times) else 0.0
    formula = (f"V / sum_axes W_eff = {nbytes:.4g} B / {nbytes / t_ici:.4g} B/s" if t_ici
               else "0 (between the cores of one chip)")
    # Over DCN every chip of the group's ICI part carries its share: (s-1)/s * (V / n_ici) / W_dcn
    # (training.md: 8DF / (M W_dcn) across pods); the two networks work at once.
    n_ici = int(np.prod([r.size for r in ici])) if ici else 1
    t_dcn = max((ring_all_gather_seconds(nbytes / n_ici, r) for r in dcn), default=0.0)
    if dcn:
        d = dcn[0]
        dcn_text = (f"DCN (s-1)/s x V / (n_ici W_dcn) = {d.size - 1}/{d.size} x {nbytes:.4g} B / "
                    f"({n_ici} x {d.link_bandwidth_one_way:.3g} B/s)")
        formula = f"max({formula}, {dcn_text})" if t_ici else dcn_text
    bw = max(t_ici, t_dcn)
    lat = lat_per_hop * sum(r.hops for r in ici)
    hops = sum(r.hops for r in rings)
    if kind == "all-reduce":
        bw, lat, hops = 2 * bw, 2 * lat, 2 * hops
        formula = f"2 x ({formula}) (ReduceScatter + AllGather)"
    cost = _finish(kind, "topology", nbytes, bw, lat, hops, formula)
    if not ici or lat_per_hop <= 0:
        return cost
    # the entry barrier, and a ready signal per step where the steps are latency-bound (module doc)
    sync = max(bw, 2 * lat) + lat_per_hop - cost.seconds
    return replace(cost, sync_seconds=sync)


# ------------------------------------------------------------------------------------ GPU tree formulas
def tree_all_gather_seconds(nbytes: float, levels: Sequence[TreeLevel]) -> float:
    """The precise tree form (gpus.md): `V * max_i g_i (D_i - 1) / (D_i W_i)` over levels with D_i > 1.

    For the DGX H100 SuperPod (1024 GPUs, one group) the bandwidth `min_i D_i W_i / (D_i - 1)` is the
    leaf's `400e9 * 32 / 31 = 413 GB/s`.
    """
    terms = [lv.share * (lv.degree - 1) / (lv.degree * lv.link_bandwidth) for lv in levels if lv.degree > 1]
    return nbytes * max(terms) if terms else 0.0


def tree_sharp_all_reduce_seconds(nbytes: float, levels: Sequence[TreeLevel]) -> float:
    """AllReduce with in-network reduction (SHARP): `V * max_i g_i / W_i`, exact, with no (D-1)/D factor
    (gpus.md, "In network reductions")."""
    terms = [lv.share / lv.link_bandwidth for lv in levels if lv.degree > 1]
    return nbytes * max(terms) if terms else 0.0


def ragged_fraction(top_k: int | None, n: int) -> float:
    """The share of a dense AllToAll a ragged (top-k routed) one moves: `1 - ((n-1)/n)^k`, the expected
    fraction of the n destinations a token reaches (gpus.md footnote; about `min(k/n, 1)`). None: 1.

    Example:
      >>> round(ragged_fraction(4, 8), 3)
      0.414
    """
    if top_k is None:
        return 1.0
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise AnalyzerError(f"top-k {top_k!r}: the number of destinations a token is routed to must be a whole "
                            "number of at least 1")
    if n <= 1:
        return 1.0
    return 1.0 - ((n - 1) / n) ** int(top_k)


def _rate(nbytes: float, seconds: float) -> str:
    """The bandwidth a tree collective moves `nbytes` at, for its formula's text (none when it moves nothing)."""
    return f"{nbytes / seconds:.4g} B/s" if seconds > 0 else "(no bytes to move)"


def _tree_cost(kind: str, nbytes: float, geo: GroupGeometry, hw: HardwareSpec, sharp: bool,
               pairs_loads: tuple[float, int] | None, top_k: int | None) -> Cost:
    levels = geo.levels
    active = [lv for lv in levels if lv.degree > 1]
    hops = sum(lv.degree - 1 for lv in active)
    if not active:
        return Cost(0.0, "bandwidth", float(nbytes), 0, "single-device group: no communication", kind, "topology")
    lv_text = ", ".join(f"{lv.name}: D={lv.degree}, W={lv.link_bandwidth:.3g} B/s"
                        + (f", shared by {lv.share} groups" if lv.share > 1 else "") for lv in active)
    if kind in ("all-gather", "reduce-scatter"):
        bw = tree_all_gather_seconds(nbytes, levels)
        f = f"V * max_i g_i (D_i-1)/(D_i W_i) = {nbytes:.4g} B / {_rate(nbytes, bw)} [{lv_text}]"
        return _finish(kind, "topology", nbytes, bw, 0.0, hops, f)
    if kind == "all-reduce":
        if sharp:
            bw = tree_sharp_all_reduce_seconds(nbytes, levels)
            f = f"SHARP: V * max_i g_i / W_i = {nbytes:.4g} B / {_rate(nbytes, bw)} [{lv_text}]"
        else:
            bw = 2 * tree_all_gather_seconds(nbytes, levels)
            f = f"2 x V * max_i g_i (D_i-1)/(D_i W_i) = 2 x {nbytes:.4g} B / {_rate(2 * nbytes, bw)} [{lv_text}]"
        return _finish(kind, "topology", nbytes, bw, 0.0, 2 * hops, f)
    if kind in ("all-to-all", "ragged-all-to-all"):
        n = geo.group_size
        nv = next(lv for lv in levels if lv.name == "nvlink")
        scale = [lv for lv in active if lv.network == "scale-out"]
        if not scale:
            bw = nbytes * (n - 1) / (n * n * nv.link_bandwidth)
            f = f"V (N-1) / (N^2 W_gpu) = {nbytes:.4g} B x {n - 1}/{n}^2 / {nv.link_bandwidth:.3g} B/s"
        else:
            m = int(np.prod([lv.degree for lv in scale]))
            share = max(lv.share for lv in scale)
            assert hw.scale_out is not None
            w_node = hw.scale_out.node_egress
            t_scale = share * nbytes * (m - 1) / (m * m * w_node)
            t_node = nbytes * (n - 1) / (n * n * nv.link_bandwidth)
            bw = max(t_scale, t_node)
            f = (f"max(V (N-1)/(N^2 W_gpu), g V (M-1)/(M^2 W_node)) with N={n}, M={m} nodes, g={share}: "
                 f"{nbytes:.4g} B, W_node={w_node:.3g} B/s")
        if kind == "ragged-all-to-all":
            frac = ragged_fraction(top_k, n)
            bw *= frac
            f += f" x ragged fraction {frac:.3g}" + ("" if top_k else " (top-k unknown: dense bound)")
        return _finish(kind, "topology", nbytes, bw, 0.0, hops, f)
    if kind == "collective-broadcast":
        w = min(lv.link_bandwidth / lv.share for lv in active)
        bw = nbytes / w
        return _finish(kind, "topology", nbytes, bw, 0.0, hops, f"V / W = {nbytes:.4g} B / {w:.3g} B/s [{lv_text}]")
    if kind == "collective-permute":
        assert pairs_loads is not None
        bw, max_hops = pairs_loads
        return _finish(kind, "topology", nbytes, bw * nbytes, 0.0, max_hops,
                       f"busiest egress: {bw * nbytes:.4g} s for V = {nbytes:.4g} B")
    raise CostModelError(f"unknown collective {kind!r}")


# ------------------------------------------------------------------------------------------- permutes
def permute_seconds(nbytes: float, hops: int, link_bandwidth_one_way: float,
                    hop_latency: float | None = None, messages_per_link: int = 1) -> Cost:
    """A point-to-point send of V bytes over `hops` links: `max(hops * T_min, m * V / W_one)`, with `m`
    messages sharing the busiest link.

    Example:
      >>> permute_seconds(4e4, 1, 4.5e10, 1e-6).regime
      'latency'
    """
    bw = messages_per_link * nbytes / link_bandwidth_one_way if hops > 0 else 0.0
    lat = (hop_latency or 0.0) * hops
    return _finish("collective-permute", "topology", nbytes, bw, lat, hops,
                   f"{messages_per_link} x V / W_one = {messages_per_link} x {nbytes:.4g} B / "
                   f"{link_bandwidth_one_way:.3g} B/s")


def _torus_permute_loads(topology: Topology, pairs: Sequence[tuple[int, int]]
                         ) -> tuple[int, int, int, float, float, float]:
    """Route each (source, target) along the torus, dimension by dimension, the short way round where
    the axis wraps (DCN hops leave through the source chip's DCN egress; cores of one chip are free).

    Returns:
      (messages on the busiest ICI link, messages on the busiest DCN egress, the most ICI hops of any pair,
      W_one, W_dcn, T_min).
    """
    sl = topology.slice
    hw = topology.hardware
    assert hw.ici is not None
    coords = topology.coords
    loads: dict[tuple, int] = {}
    dcn_loads: dict[tuple, int] = {}
    max_hops = 0
    for src, dst in pairs:
        if src == dst:
            continue
        a, b = coords[src], coords[dst]
        hops = 0
        cur = list(a)
        for k, dim in enumerate(sl.dims):
            if sl.networks[k] == "chip":
                cur[k] = b[k]
                continue
            if sl.networks[k] == "dcn":
                if a[k] != b[k]:
                    key = tuple(a)
                    dcn_loads[key] = dcn_loads.get(key, 0) + 1
                    cur[k] = b[k]
                continue
            d = (b[k] - a[k]) % dim if sl.wraps[k] else b[k] - a[k]
            step = 1
            if sl.wraps[k]:
                if d > dim // 2:
                    d, step = dim - d, -1
            else:
                step = 1 if d >= 0 else -1
                d = abs(d)
            for _ in range(d):
                key = (k, tuple(cur), step)
                loads[key] = loads.get(key, 0) + 1
                cur[k] = (cur[k] + step) % dim
                hops += 1
        max_hops = max(max_hops, hops)
    return (max(loads.values(), default=0), max(dcn_loads.values(), default=0), max_hops,
            hw.ici.link_bandwidth_one_way, float(hw.dcn_bandwidth_per_chip or 1.0), hw.ici.hop_latency)


def _tree_permute_seconds_per_byte(topology: Topology, pairs: Sequence[tuple[int, int]]) -> tuple[float, int]:
    """GPU permute: each source GPU's NVLink egress carries its in-node messages, each node's egress its
    cross-node ones. Returns (seconds per byte of V on the busiest egress, 1 or 2 'hops')."""
    hw = topology.hardware
    assert hw.nvlink is not None
    coords = topology.coords
    gpu_out: dict[int, int] = {}
    node_out: dict[int, int] = {}
    cross = False
    for src, dst in pairs:
        if src == dst:
            continue
        if coords[src][0] == coords[dst][0]:
            gpu_out[src] = gpu_out.get(src, 0) + 1
        else:
            node_out[coords[src][0]] = node_out.get(coords[src][0], 0) + 1
            cross = True
    t = max(gpu_out.values(), default=0) / hw.nvlink.gpu_egress
    if node_out:
        assert hw.scale_out is not None
        t = max(t, max(node_out.values()) / hw.scale_out.node_egress)
    return t, (2 if cross else 1)


# --------------------------------------------------------------------------------------------- ideal
def _ideal_cost(kind: str, nbytes: float, topology: Topology, axes_geo: Sequence[GroupGeometry],
                sizes: Sequence[int], sharp: bool, top_k: int | None, hops_hint: int) -> Cost:
    """The ideal model's cost of one collective over a group of mesh axes (`sizes`, their geometry `axes_geo`):
    the chapter's closed forms for a TPU (`_ideal_tpu_cost`) or a GPU (`_ideal_gpu_cost`)."""
    hw = topology.hardware
    n = int(np.prod(sizes)) if sizes else 1
    if n <= 1:
        return Cost(0.0, "bandwidth", float(nbytes), 0, "single-device group: no communication", kind, "ideal")
    if hw.kind == "tpu":
        return _ideal_tpu_cost(kind, nbytes, hw, axes_geo, sizes, n, top_k, hops_hint)
    return _ideal_gpu_cost(kind, nbytes, hw, axes_geo, n, sharp, top_k)


def _ideal_tpu_cost(kind: str, nbytes: float, hw: HardwareSpec, axes_geo: Sequence[GroupGeometry],
                    sizes: Sequence[int], n: int, top_k: int | None, hops_hint: int) -> Cost:
    """TPU: each axis at full ICI bandwidth (DCN's per chip over slices; free between the cores of one chip):
    V / (W_ici x N_axes) for the gathers and reductions, V max(X_i) / (4 N W_ici) for AllToAll, V / W_one for a
    permute or broadcast of `hops_hint` hops."""
    assert hw.ici is not None
    ws = []
    for g in axes_geo:
        if any(r.network == "dcn" for r in g.rings):
            ws.append(float(hw.dcn_bandwidth_per_chip or 0))
        elif g.rings and all(r.network == "chip" for r in g.rings):
            ws.append(float("inf"))  # between the cores of one chip: counted free
        else:
            ws.append(hw.ici.link_bandwidth_bidi)
    if all(w == float("inf") for w in ws):
        return Cost(0.0, "bandwidth", float(nbytes), 0, "0 (between the cores of one chip)", kind, "ideal")
    t_min = hw.ici.hop_latency
    lat = t_min * sum(sizes) / 2
    hops = int(sum(s // 2 for s in sizes))
    w_sum = sum(ws)
    if kind in ("all-gather", "reduce-scatter", "all-reduce"):
        bw = nbytes / w_sum
        f = f"V / (W_ici x N_axes) = {nbytes:.4g} B / ({w_sum / len(ws):.3g} B/s x {len(ws)})"
        if kind == "all-reduce":
            bw, lat, hops = 2 * bw, 2 * lat, 2 * hops
            f = "2 x " + f
        return _finish(kind, "ideal", nbytes, bw, lat, hops, f)
    if kind in ("all-to-all", "ragged-all-to-all"):
        w = min(ws)
        bw = nbytes * max(sizes) / (4 * n * w)
        f = f"V max(X_i) / (4 N W_ici) = {nbytes:.4g} B x {max(sizes)} / (4 x {n} x {w:.3g} B/s)"
        if kind == "ragged-all-to-all":
            frac = ragged_fraction(top_k, n)
            bw *= frac
            f += f" x ragged fraction {frac:.3g}"
        return _finish(kind, "ideal", nbytes, bw, t_min * max(sizes) / 2, max(sizes) // 2, f)
    w_one = hw.ici.link_bandwidth_one_way
    h = max(1, hops_hint)
    return _finish(kind, "ideal", nbytes, nbytes / w_one, t_min * h, h,
                   f"V / W_one = {nbytes:.4g} B / {w_one:.3g} B/s")


def _ideal_gpu_cost(kind: str, nbytes: float, hw: HardwareSpec, axes_geo: Sequence[GroupGeometry], n: int,
                    sharp: bool, top_k: int | None) -> Cost:
    """GPU: the simple form, V / min(W_gpu, W_node when the group leaves a node) (twice for AllReduce without
    SHARP); AllToAll B / (N W_gpu) in a node, B / (M W_node) over M nodes."""
    assert hw.nvlink is not None
    cross = any(lv.network == "scale-out" and lv.degree > 1 for g in axes_geo for lv in g.levels)
    w = hw.nvlink.gpu_egress
    text = f"V / W_gpu = {nbytes:.4g} B / {w:.3g} B/s"
    if cross:
        assert hw.scale_out is not None
        w = min(w, hw.scale_out.node_egress)
        text = f"max(V / W_gpu, V / W_node) = {nbytes:.4g} B / {w:.3g} B/s"
    if kind in ("all-gather", "reduce-scatter", "collective-broadcast", "collective-permute"):
        return _finish(kind, "ideal", nbytes, nbytes / w, 0.0, 1, text)
    if kind == "all-reduce":
        if sharp:
            return _finish(kind, "ideal", nbytes, nbytes / w, 0.0, 1, "SHARP: " + text)
        return _finish(kind, "ideal", nbytes, 2 * nbytes / w, 0.0, 2, "2 x " + text)
    # all-to-all: B / (N W_gpu) in a node, B / (M W_node) over M nodes
    if cross:
        m = int(np.prod([lv.degree for g in axes_geo for lv in g.levels if lv.network == "scale-out" and lv.degree > 1]))
        bw = nbytes / (m * w)
        f = f"V / (M W_node) = {nbytes:.4g} B / ({m} x {w:.3g} B/s)"
    else:
        bw = nbytes / (n * w)
        f = f"V / (N W_gpu) = {nbytes:.4g} B / ({n} x {w:.3g} B/s)"
    if kind == "ragged-all-to-all":
        frac = ragged_fraction(top_k, n)
        bw *= frac
        f += f" x ragged fraction {frac:.3g}"
    return _finish(kind, "ideal", nbytes, bw, 0.0, 1, f)


# -------------------------------------------------------------------------------------------- entries
def _check(kind: str, model: str, nbytes: float, hw: HardwareSpec, sharp: bool) -> str:
    k = canonical_kind(kind)
    if model not in MODELS:
        raise CostModelError(f"unknown cost model {model!r}; {valid_choices(str(model), MODELS, what='models')}")
    if not (isinstance(nbytes, (int, float, np.integer, np.floating)) and nbytes >= 0 and math.isfinite(nbytes)):
        raise CostModelError(f"bytes must be a finite number >= 0, got {nbytes!r}")
    if sharp:
        if hw.kind != "gpu":
            raise HardwareError(f"SHARP is an NVIDIA in-network reduction; {hw.name} is a TPU")
        assert hw.nvlink is not None
        if not hw.nvlink.sharp:
            raise HardwareError(f"{hw.name} has no SHARP (in-network reductions arrive with Hopper)")
    return k


def _default_pairs(groups: np.ndarray) -> list[tuple[int, int]]:
    """A shift by one around each group (the ppermute of a ring), when no pairs are given."""
    out = []
    for g in groups:
        for i in range(len(g)):
            out.append((int(g[i]), int(g[(i + 1) % len(g)])))
    return out


def geometry_cost(kind: str, nbytes: float, geometry: GroupGeometry, topology: Topology, *,
                  pairs: Sequence[tuple[int, int]] | None = None, sharp: bool = False,
                  top_k: int | None = None, model: str = "topology") -> Cost:
    """The cost of a collective over groups of the given geometry (the lower-level form), e.g. a what-if
    geometry (`GroupGeometry.with_wraparound`, a group moved inside one NVLink domain).

    Args:
      kind: the collective (see `KINDS`).
      nbytes: V.
      geometry: from `Topology.geometry(...)` or `Topology.geometry_for_groups(...)`.
      topology: the placement (for its hardware, and to route permute pairs).
      pairs: collective-permute source-target pairs (logical ids); required for permutes here.
      sharp: GPU AllReduce with in-network reduction.
      top_k: ragged AllToAll routing fan-out, when known.
      model: "topology" (default) or "ideal" (the chapter's summary formulas over the same geometry).
    """
    hw = topology.hardware
    k = _check(kind, model, nbytes, hw, sharp)
    if model == "ideal":
        sizes = [r.size for r in geometry.rings] or [lv.degree for lv in geometry.levels if lv.degree > 1] \
            or [geometry.group_size]
        hops = sum(r.hops for r in geometry.rings) if geometry.rings else 1
        return _ideal_cost(k, nbytes, topology, [geometry], sizes, sharp, top_k, hops)
    if k == "collective-permute" and pairs is None:
        raise CostModelError("a collective-permute needs its source-target pairs")
    if hw.kind == "tpu":
        loads = _torus_permute_loads(topology, pairs) if k == "collective-permute" else None
        return _torus_cost(k, nbytes, geometry, topology.slice.axis_labels, loads, top_k)
    loads2 = _tree_permute_seconds_per_byte(topology, pairs) if k == "collective-permute" else None
    return _tree_cost(k, nbytes, geometry, hw, sharp, loads2, top_k)


def rings_cost(kind: str, nbytes: float, rings: Sequence[Ring], *, group_size: int | None = None,
               top_k: int | None = None) -> Cost:
    """The topology-model cost over hand-written TPU ring descriptions (no mesh needed).

    Args:
      rings: one `Ring` per physical axis the group spans.
      group_size: devices per group; default the product of the ring sizes.

    Example:
      >>> r = Ring(0, 16, 1, True, "ici", 4.5e10, 1e-6)
      >>> round(rings_cost("all-gather", 9e6, [r]).seconds * 1e6)
      100
    """
    k = canonical_kind(kind)
    if k == "collective-permute":
        raise CostModelError("price a permute with permute_seconds(nbytes, hops, ...) or give pairs to collective_cost")
    n = group_size or (int(np.prod([r.size for r in rings])) if rings else 1)
    geo = GroupGeometry("torus", n, 1, tuple(rings))
    labels = [f"axis {i}" for i in range(max((r.physical_axis for r in rings), default=-1) + 1)]
    return _torus_cost(k, nbytes, geo, labels, None, top_k)


def tree_cost(kind: str, nbytes: float, levels: Sequence[TreeLevel], hardware: HardwareSpec | str, *,
              group_size: int | None = None, sharp: bool = False, top_k: int | None = None) -> Cost:
    """The topology-model cost over hand-written GPU tree levels (no mesh needed).

    Example:
      >>> lv = [TreeLevel("nvlink", 8, 450e9, 1, "nvlink")]
      >>> round(tree_cost("all-gather", 450e9, lv, "h100").seconds, 4)
      0.875
    """
    from analyzer.theory.hardware import load_hardware

    hw = load_hardware(hardware)
    k = _check(kind, "topology", nbytes, hw, sharp)
    if k == "collective-permute":
        raise CostModelError("price a permute with permute_seconds(nbytes, hops, ...) or give pairs to collective_cost")
    n = group_size or int(np.prod([lv.degree for lv in levels]))
    geo = GroupGeometry("tree", n, 1, (), tuple(levels))
    return _tree_cost(k, nbytes, geo, hw, sharp, None, top_k)


def group_cost(kind: str, nbytes: float, groups: Sequence[Sequence[int]] | np.ndarray, topology: Topology, *,
               model: str = "topology", pairs: Sequence[tuple[int, int]] | None = None,
               sharp: bool = False, top_k: int | None = None) -> Cost:
    """The cost of a collective over explicit device groups (logical ids), e.g. replica groups that do
    not line up with mesh axes.

    The `ideal` model treats each physical axis the groups span as one mesh axis.

    Example:
      >>> t = Topology.for_mesh("tpu-v4p", ("X", "Y", "Z"), (4, 4, 4))
      >>> c = group_cost("all-gather", 2**21, t.groups("X"), t)
      >>> round(c.seconds * 1e6, 1)
      23.3
    """
    g = np.asarray(groups, dtype=np.int64)
    if canonical_kind(kind) == "collective-permute" and pairs is None:
        pairs = _default_pairs(g)
    geo = topology.geometry_for_groups(g)
    if model == "ideal":
        k = _check(kind, model, nbytes, topology.hardware, sharp)
        if geo.kind == "torus":
            sizes = [r.size for r in geo.rings]
            per_axis = [GroupGeometry("torus", r.size, 1, (r,)) for r in geo.rings]
        else:
            sizes = [geo.group_size]
            per_axis = [geo]
        return _ideal_cost(k, nbytes, topology, per_axis, sizes, sharp, top_k, 1)
    return geometry_cost(kind, nbytes, geo, topology, pairs=pairs, sharp=sharp, top_k=top_k)


def collective_cost(kind: str, nbytes: float, axes: AxisLike | Sequence[AxisLike], topology: Topology, *,
                    model: str = "topology", pairs: Sequence[tuple[int, int]] | None = None,
                    sharp: bool = False, top_k: int | None = None) -> Cost:
    """Price one execution of a collective over mesh axes: the entry point of the analysis.

    Args:
      kind: "all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute",
        "collective-broadcast", "ragged-all-to-all" (or "AllGather", "psum"...).
      nbytes: V, the chapter's bytes for that kind (see the module doc).
      axes: the mesh axes the collective runs over, major to minor: names, sub-axes ("X:(2)4",
        `SubAxis`, `(name, size)` for the major part, `(name, pre, size)`).
      topology: the mesh laid on hardware (`Topology.for_mesh`).
      model: "topology" (default: hops, wraparound, link sharing, latency floor) or "ideal" (the chapter's
        summary formulas).
      pairs: for collective-permute, the (source, target) logical ids; default: shift by one around each
        group.
      sharp: GPU only: AllReduce with in-network reduction.
      top_k: ragged AllToAll: how many destinations each token goes to, when known.

    Returns:
      `Cost`.

    Raises:
      CostModelError: an unknown kind or model, or bad bytes. ShardingError: an axis the mesh lacks or
        used twice. HardwareError: SHARP on hardware without it.

    Example:
      >>> t = Topology.for_mesh("tpu-v5e", ("X", "Y"), (8, 4))
      >>> c = collective_cost("all-gather", 2048 * 8192 * 2, "Y", t)
      >>> round(c.seconds * 1e6), c.regime
      (559, 'bandwidth')
      >>> round(collective_cost("all-gather", 2048 * 8192 * 2, "Y", t, model="ideal").seconds * 1e6)
      373
    """
    hw = topology.hardware
    k = _check(kind, model, nbytes, hw, sharp)
    norm = _normalize_axes(axes)
    groups = topology.groups(norm)
    if model == "ideal":
        per_axis = [topology.geometry((a,)) for a in norm]
        sizes = [a.size if not isinstance(a, str) else topology.axis_sizes[topology.axis_names.index(a)]
                 for a in norm]
        hint = 1
        if k == "collective-permute":
            pp = pairs if pairs is not None else _default_pairs(groups)
            hint = _torus_permute_loads(topology, pp)[2] if hw.kind == "tpu" else 1
        return _ideal_cost(k, nbytes, topology, per_axis, sizes, sharp, top_k, hint)
    geo = topology.geometry(norm)
    if k == "collective-permute" and pairs is None:
        pairs = _default_pairs(groups)
    return geometry_cost(k, nbytes, geo, topology, pairs=pairs, sharp=sharp, top_k=top_k)
