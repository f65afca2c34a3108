"""Rooflines of sharded matmuls: FLOPs, HBM and communication time, the chapter's four cases, and the
strategy comparisons of sharding.md's Problems 4 and 9.

    >>> from analyzer.theory.hardware import load_hardware
    >>> round(ici_threshold(load_hardware("tpu-v5p")))
    2550
    >>> latency_threshold_bytes(load_hardware("tpu-v5e"))
    45000.0

The four cases (sharding.md, "Computation with sharded arrays"):

1. neither operand is sharded along the contracting dim: multiply the local shards, no communication;
2. one operand is sharded along the contracting dim (or both, over different axes): AllGather it first;
3. both are sharded along the contracting dim over the same axes: multiply locally into partial sums
   `C[I, K]{U_X}`, then AllReduce (or ReduceScatter, which is cheaper, when the result may stay sharded);
4. both have a non-contracting dim sharded over the same axis: AllGather one of them first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from analyzer.theory.cost import Cost, collective_cost
from analyzer.errors import HardwareError, ShardingError
from analyzer.theory.hardware import HardwareSpec, load_hardware
from analyzer.theory.dtypes import dtype_bytes
from analyzer.theory.notation import Collective, Dim, Notation, format_collective
from analyzer.theory.topology import Topology
from analyzer.units import format_seconds

__all__ = [
    "matmul_flops",
    "compute_seconds",
    "hbm_seconds",
    "ici_threshold",
    "hbm_threshold",
    "dcn_threshold",
    "collective_threshold",
    "latency_threshold_bytes",
    "Roofline",
    "roofline",
    "MatmulPlan",
    "classify_matmul",
    "matmul_comm_seconds",
    "StrategyOption",
    "StrategyComparison",
    "compare_gather_vs_reduce",
    "compare_gather_vs_reduce_scatter",
]


# ---------------------------------------------------------------------------------------------- basics
def matmul_flops(m: int, k: int, n: int, batch: int = 1) -> float:
    """FLOPs of `[batch, m, k] @ [batch, k, n]`: `2 * batch * m * k * n` (one multiply and one add).

    Example:
      >>> matmul_flops(1024, 4096, 8192)
      68719476736.0
    """
    return 2.0 * batch * m * k * n


def compute_seconds(flops: float, hardware: HardwareSpec | str, dtype: str = "bf16") -> float:
    """Seconds for `flops` at the chip's peak rate for `dtype` (tpus.md / gpus.md spec tables)."""
    return flops / load_hardware(hardware).flops_per_second(dtype)


def hbm_seconds(nbytes: float, hardware: HardwareSpec | str) -> float:
    """Seconds to move `nbytes` between HBM and the cores (sharding.md pop quiz: 1 MiB / 3.4e12 = 294 ns... 308 ns
    for 2**20 bytes; the book rounds 1 MiB to 1e6)."""
    return nbytes / load_hardware(hardware).hbm_bandwidth


def ici_threshold(hardware: HardwareSpec | str, axes: int = 1, dtype: str = "bf16") -> float:
    """`C / W_ici` per chip: the per-chip batch (tokens) above which an FSDP / data-parallel matmul over
    `axes` mesh axes is compute-bound (sharding.md Problem 4, training.md: 2550 on v5p, 850 over 3 axes).
    GPUs: `C / W_gpu_egress` (gpus.md: 2200 on H100)."""
    hw = load_hardware(hardware)
    c = hw.flops_per_second(dtype)
    if hw.ici is not None:
        return c / (hw.ici.link_bandwidth_bidi * axes)
    assert hw.nvlink is not None
    return c / (hw.nvlink.gpu_egress * axes)


def collective_threshold(hardware: HardwareSpec | str, network: str, dtype: str = "bf16") -> float:
    """`C / W` for a network: "ici", "dcn", "nvlink", "scale-out" (gpus.md: 2475 across H100 nodes)."""
    hw = load_hardware(hardware)
    c = hw.flops_per_second(dtype)
    w = {"ici": hw.ici.link_bandwidth_bidi if hw.ici else None,
         "dcn": hw.dcn_bandwidth_per_chip,
         "nvlink": hw.nvlink.gpu_egress if hw.nvlink else None,
         "scale-out": hw.scale_out.node_egress if hw.scale_out else None}.get(network)
    if w is None:
        raise HardwareError(f"{hw.name} has no {network!r} network in its spec")
    return c / w


def hbm_threshold(hardware: HardwareSpec | str, dtype: str = "bf16") -> float:
    """`C / W_hbm`: the arithmetic intensity (FLOPs per byte) above which a kernel is compute-bound
    (240 on v5e, the inference chapter's critical batch)."""
    hw = load_hardware(hardware)
    return hw.flops_per_second(dtype) / hw.hbm_bandwidth


def dcn_threshold(hardware: HardwareSpec | str, dtype: str = "bf16") -> float:
    """`C / W_dcn`: tokens per slice above which data parallelism across slices is compute-bound
    (training.md: 73,440 on v5p)."""
    return collective_threshold(hardware, "dcn", dtype)


def latency_threshold_bytes(hardware: HardwareSpec | str) -> float:
    """Per-hop chunks below `W_one_way * T_min` bytes are latency-bound (sharding.md: 45 kB on v5e).
    GPUs have no latency figure in the book: 0."""
    hw = load_hardware(hardware)
    return hw.ici.latency_threshold_bytes if hw.ici is not None else 0.0


@dataclass(frozen=True)
class Roofline:
    """Compute, memory and communication time of one op, and which bounds it (assuming perfect overlap)."""

    compute_seconds: float
    hbm_seconds: float
    comm_seconds: float

    @property
    def seconds(self) -> float:
        return max(self.compute_seconds, self.hbm_seconds, self.comm_seconds)

    @property
    def bound(self) -> str:
        """"compute", "memory" or "communication"."""
        m = self.seconds
        if m == self.comm_seconds and m > 0 and self.comm_seconds > self.compute_seconds:
            return "communication"
        if m == self.hbm_seconds and self.hbm_seconds > self.compute_seconds:
            return "memory"
        return "compute"


def roofline(flops: float, hbm_bytes: float, comm_seconds: float, hardware: HardwareSpec | str,
             dtype: str = "bf16") -> Roofline:
    """The roofline of an op doing `flops` per chip, moving `hbm_bytes` per chip, with `comm_seconds` of
    collectives."""
    return Roofline(compute_seconds(flops, hardware, dtype), hbm_seconds(hbm_bytes, hardware), comm_seconds)


# ------------------------------------------------------------------------------------- four cases
@dataclass(frozen=True)
class MatmulPlan:
    """What a sharded matmul needs, per the chapter's four cases.

    Attributes:
      case: 1, 2, 3 or 4.
      description: the case in words.
      collectives: the communication, in order (before the matmul for 2 and 4, after it for 3).
      lhs, rhs: the operands as multiplied (after any AllGather).
      out: the result as the local matmul produces it (with `{U_X}` in case 3).
      result: the result after the collectives.
      alternatives: other valid plans of the same case (e.g. ReduceScatter instead of AllReduce, or
        gathering the other operand in case 4).
    """

    case: int
    description: str
    collectives: tuple[Collective, ...]
    lhs: Notation
    rhs: Notation
    out: Notation
    result: Notation
    alternatives: tuple[tuple[Collective, ...], ...] = ()

    def __str__(self) -> str:
        steps = "; ".join(str(c) for c in self.collectives) or "no communication"
        return f"case {self.case} ({self.description}): {steps}; {self.lhs} . {self.rhs} -> {self.out}"


def _drop_axes(n: Notation, dim: str, axes: Sequence[str]) -> Notation:
    dims = tuple(Dim(d.name, tuple(a for a in d.axes if a not in axes)) if d.name == dim else d for d in n.dims)
    return replace(n, dims=dims)


def _gather_all(n: Notation, dims: Sequence[str]) -> tuple[Notation, tuple[str, ...]]:
    axes = tuple(a for d in n.dims if d.name in dims for a in d.axes)
    out = n
    for d in dims:
        out = _drop_axes(out, d, axes)
    return out, axes


def _ag(before: Notation, after: Notation, axes: tuple[str, ...]) -> Collective:
    return Collective("all-gather", axes, before, after)


def classify_matmul(lhs: Notation, rhs: Notation, contracting: Sequence[str] | None = None,
                    out_dims: Sequence[str] | None = None) -> MatmulPlan:
    """Which of the four cases `lhs . rhs` is, and the communication it needs (sharding.md).

    Dims are matched by name: `contracting` defaults to the names the operands share that are not in
    `out_dims` (by default: every shared name). The output keeps lhs's free dims, then rhs's.

    Example:
      >>> p = classify_matmul(Notation.parse("A[I, J_X]"), Notation.parse("B[J_X, K]"))
      >>> p.case, str(p.collectives[0])
      (3, 'AllReduce_X: [I, K]{U_X} -> [I, K]')
    """
    lnames = [d.name for d in lhs.dims]
    rnames = [d.name for d in rhs.dims]
    shared = [n for n in lnames if n in rnames]
    if contracting is None:
        contracting = [n for n in shared if out_dims is None or n not in out_dims]
    contracting = list(contracting)
    for c in contracting:
        if c not in lnames or c not in rnames:
            raise ShardingError(f"contracting dim {c!r} is not in both {lhs} and {rhs}")
    if not contracting:
        raise ShardingError(f"{lhs} . {rhs}: no shared dim to contract")
    m = _Matmul(lhs, rhs, tuple(contracting), tuple(n for n in shared if n not in contracting))
    lc, rc = m.contracting_axes(lhs), m.contracting_axes(rhs)
    # Case 4 first: a free dim of each operand over the same axis (the product would be diagonal).
    lfree_axes = {a for d in m.lhs_free(lhs) for a in d.axes}
    rfree_axes = {a for d in m.rhs_free(rhs) for a in d.axes}
    clash = sorted(lfree_axes & rfree_axes)
    if clash:
        return _case_4(m, tuple(clash))
    if not lc and not rc:
        o = m.out_of(lhs, rhs)
        return MatmulPlan(1, "neither operand is sharded along the contracting dim: no communication",
                          (), lhs, rhs, o, o)
    if lc and rc and lc == rc:
        return _case_3(m, lc)
    return _case_2(m, lc, rc)


@dataclass(frozen=True)
class _Matmul:
    """`lhs . rhs` with its dims sorted out: those contracted, and the batch dims (shared, not contracted)."""

    lhs: Notation
    rhs: Notation
    contracting: tuple[str, ...]
    batch: tuple[str, ...]

    def contracting_axes(self, n: Notation) -> tuple[str, ...]:
        """The mesh axes `n`'s contracting dims are sharded over."""
        return tuple(a for d in n.dims if d.name in self.contracting for a in d.axes)

    def lhs_free(self, n: Notation) -> list[Dim]:
        """The dims of `n` (the lhs, or it gathered) the output keeps."""
        return [d for d in n.dims if d.name not in self.contracting]

    def rhs_free(self, n: Notation) -> list[Dim]:
        """The dims of `n` (the rhs, or it gathered) the output adds after the lhs's."""
        return [d for d in n.dims if d.name not in self.contracting and d.name not in self.batch]

    def out_of(self, l_: Notation, r_: Notation, unreduced: tuple[str, ...] = ()) -> Notation:
        """The local product `C` of `l_ . r_`: lhs's free dims, then rhs's, partial sums over `unreduced`."""
        out_base = replace(self.lhs, dims=(), unreduced=(), manual=(), array="C", shape=None)
        return replace(out_base, dims=tuple(self.lhs_free(l_)) + tuple(self.rhs_free(r_)), unreduced=unreduced)


def _case_4(m: _Matmul, clash: tuple[str, ...]) -> MatmulPlan:
    """A free dim of each operand over the same axes `clash`: AllGather the rhs's (or, the alternative, lhs's)."""
    lhs, rhs = m.lhs, m.rhs
    r_dims = [d.name for d in m.rhs_free(rhs) if set(d.axes) & set(clash)]
    l_dims = [d.name for d in m.lhs_free(lhs) if set(d.axes) & set(clash)]
    rhs_g = rhs
    for d in r_dims:
        rhs_g = _drop_axes(rhs_g, d, clash)
    lhs_g = lhs
    for d in l_dims:
        lhs_g = _drop_axes(lhs_g, d, clash)
    main = (_ag(rhs, rhs_g, clash),)
    alt = (_ag(lhs, lhs_g, clash),)
    o = m.out_of(lhs, rhs_g)
    return MatmulPlan(4, "both operands have a non-contracting dim sharded over the same axis: AllGather one",
                      main, lhs, rhs_g, o, o, (alt,))


def _case_3(m: _Matmul, axes: tuple[str, ...]) -> MatmulPlan:
    """Both contracting dims sharded over the same `axes`: multiply into partial sums, then AllReduce them, or
    ReduceScatter them over an output dim sharded over none of `axes` (the alternatives)."""
    o = m.out_of(m.lhs, m.rhs, unreduced=axes)
    res = replace(o, unreduced=())
    ar = Collective("all-reduce", axes, o, res)
    alts = []
    for d in res.dims:
        used = {a for x in res.dims for a in x.axes}
        if not used & set(axes):
            scat = replace(res, dims=tuple(Dim(x.name, x.axes + axes) if x.name == d.name else x for x in res.dims))
            alts.append((Collective("reduce-scatter", axes, o, scat, d.name),))
    return MatmulPlan(3, "both operands are sharded along the contracting dim over the same axes: "
                         "multiply locally, then AllReduce (or ReduceScatter)", (ar,), m.lhs, m.rhs, o, res,
                      tuple(alts))


def _case_2(m: _Matmul, lc: tuple[str, ...], rc: tuple[str, ...]) -> MatmulPlan:
    """Case 2: gather the operand whose contracting dim is sharded (the lhs when both are, over different axes:
    then both)."""
    lhs, rhs, contracting = m.lhs, m.rhs, m.contracting
    if lc:
        lhs_g, axes = _gather_all(lhs, contracting)
        if rc:
            rhs_g, raxes = _gather_all(rhs, contracting)
            main = (_ag(lhs, lhs_g, axes), _ag(rhs, rhs_g, raxes))
            o = m.out_of(lhs_g, rhs_g)
            return MatmulPlan(2, "both operands are sharded along the contracting dim over different axes: "
                                 "AllGather them", main, lhs_g, rhs_g, o, o)
        o = m.out_of(lhs_g, rhs)
        return MatmulPlan(2, "one operand is sharded along the contracting dim: AllGather it",
                          (_ag(lhs, lhs_g, axes),), lhs_g, rhs, o, o)
    rhs_g, axes = _gather_all(rhs, contracting)
    o = m.out_of(lhs, rhs_g)
    return MatmulPlan(2, "one operand is sharded along the contracting dim: AllGather it",
                      (_ag(rhs, rhs_g, axes),), lhs, rhs_g, o, o)


def matmul_comm_seconds(plan: MatmulPlan, sizes: dict[str, int], dtype: str, topology: Topology, *,
                        model: str = "topology") -> tuple[Cost, ...]:
    """Price each collective of a plan: `sizes` maps dim names to global sizes (`{"I": 1024, ...}`)."""
    costs = []
    mesh = tuple(zip(topology.axis_names, topology.axis_sizes))
    for c in plan.collectives:
        b = replace(c.before, mesh=mesh, shape=tuple(sizes[d.name] for d in c.before.dims), dtype=dtype)
        a = replace(c.after, mesh=mesh, shape=tuple(sizes[d.name] for d in c.after.dims), dtype=dtype)
        v = Collective(c.kind, c.axes, b, a, c.scatter_dim).volume_bytes()
        costs.append(collective_cost(c.kind, v, c.axes, topology, model=model))
    return tuple(costs)


# --------------------------------------------------------------------------------- strategy choices
@dataclass(frozen=True)
class StrategyOption:
    """One way to do a sharded matmul: its per-chip compute time, communication time and total."""

    name: str
    steps: str
    compute_seconds: float
    comm_seconds: float
    comm_bytes: float

    @property
    def seconds(self) -> float:
        """max(compute, comms): the chapter assumes perfect overlap."""
        return max(self.compute_seconds, self.comm_seconds)

    @property
    def bound(self) -> str:
        return "communication" if self.comm_seconds > self.compute_seconds else "compute"


@dataclass(frozen=True)
class StrategyComparison:
    """Two (or more) strategies and the cheaper one."""

    options: tuple[StrategyOption, ...]

    @property
    def cheaper(self) -> StrategyOption:
        return min(self.options, key=lambda o: o.seconds)

    @property
    def saving_seconds(self) -> float:
        """How much the cheaper option saves over the most expensive."""
        return max(o.seconds for o in self.options) - self.cheaper.seconds

    @property
    def comm_ratio(self) -> float:
        """Communication bytes of the first option over the second (Problem 9: M/K)."""
        return self.options[0].comm_bytes / self.options[1].comm_bytes

    def __str__(self) -> str:
        rows = [f"{o.name}: {o.steps}; compute {format_seconds(o.compute_seconds)}, comms {format_seconds(o.comm_seconds)} "
                f"({o.bound}-bound)" for o in self.options]
        return "\n".join(rows) + f"\ncheaper: {self.cheaper.name}"


def compare_gather_vs_reduce(b: int, d: int, f: int, axis: str, topology: Topology, *,
                             dtype: str = "bf16", model: str = "topology") -> StrategyComparison:
    """sharding.md Problem 4: `X[B, D] . Y[D_X, F] -> Z[B, F]`.

    Strategy 1: `AllGather_X Y[D_X, F] -> Y[D, F]`, then the full matmul on every chip:
    `T = max(2BDF / C, T_AG(2DF bytes))`.
    Strategy 2: multiply local shards `X[B, D_X] . Y[D_X, F] -> Z[B, F]{U_X}`, then
    `AllReduce_X`: `T = max(2BDF / (X C), T_AR(2BF bytes))`.
    (The book: S2 wins for B < 2550 when D > 2B, and for B > 2550 when D > 5100, on v5p.)
    """
    item = _itemsize(dtype)
    return _gather_or_reduce(
        topology, axis, dtype, model, matmul_flops(b, d, f),
        gather=(d * f * item, f"[D_{axis}, F]", "[D, F]", "X[B, D] . Y[D, F]"),
        reduce=("all-reduce", b * f * item, f"X[B, D_{axis}] . Y[D_{axis}, F] -> Z[B, F]{{U_{axis}}}",
                f"[B, F]{{U_{axis}}}", "[B, F]"))


def compare_gather_vs_reduce_scatter(n: int, m: int, k: int, axis: str, topology: Topology, *,
                                     dtype: str = "bf16", model: str = "topology") -> StrategyComparison:
    """sharding.md Problem 9: `A[N, M_X] . B[M, K]` with a sharded result.

    Option 1: `AllGather_X A[N, M_X] -> A[N, M]`, then the matmul (comms scale with N*M).
    Option 2: multiply local shards into `C[N, K]{U_X}`, then `ReduceScatter_X,K -> C[N, K_X]` (comms
    scale with N*K). The communication ratio is M / K.

    Example:
      >>> t = Topology.for_mesh("tpu-v5e", ("X",), (8,))
      >>> round(compare_gather_vs_reduce_scatter(4096, 8192, 2048, "X", t).comm_ratio, 6)
      4.0
    """
    item = _itemsize(dtype)
    return _gather_or_reduce(
        topology, axis, dtype, model, matmul_flops(n, m, k),
        gather=(n * m * item, f"[N, M_{axis}]", "[N, M]", "A[N, M] . B[M, K]"),
        reduce=("reduce-scatter", n * k * item, f"A[N, M_{axis}] . B[M_{axis}, K] -> C[N, K]{{U_{axis}}}",
                f"[N, K]{{U_{axis}}}", f"[N, K_{axis}]"))


def _gather_or_reduce(topology: Topology, axis: str, dtype: str, model: str, flops: float, *,
                      gather: tuple[float, str, str, str], reduce: tuple[str, float, str, str, str]
                      ) -> StrategyComparison:
    """The two plans of a matmul with a contracting dimension sharded over `axis`: all-gather the sharded
    operand and multiply everything on every chip (`gather`: bytes, notation before and after, the matmul), or
    multiply the local shards and reduce the partial sums (`reduce`: kind, bytes, the matmul, notation before
    and after), each priced on `topology`.
    """
    hw = topology.hardware
    size = topology.axis_sizes[topology.axis_names.index(axis)]
    g_bytes, g_before, g_after, g_matmul = gather
    kind, r_bytes, r_matmul, r_before, r_after = reduce
    ag = collective_cost("all-gather", g_bytes, axis, topology, model=model)
    red = collective_cost(kind, r_bytes, axis, topology, model=model)
    name = "AllReduce" if kind == "all-reduce" else "ReduceScatter"
    first = StrategyOption("AllGather then matmul",
                           format_collective("all-gather", [axis], g_before, g_after) + f"; {g_matmul}",
                           compute_seconds(flops, hw, dtype), ag.seconds, ag.bytes)
    second = StrategyOption(f"local matmul then {name}",
                            f"{r_matmul}; " + format_collective(kind, [axis], r_before, r_after),
                            compute_seconds(flops / size, hw, dtype), red.seconds, red.bytes)
    return StrategyComparison((first, second))


def _itemsize(dtype: str) -> float:
    return dtype_bytes(dtype)
