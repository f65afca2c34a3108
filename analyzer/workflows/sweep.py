"""Sweeps: compile each candidate plan (mesh shape x strategy, and for the built-in template batch size x remat
policy x microbatches), predict its step time and memory, rank them.

Data first (`SweepEntry`, `SweepResult`, `rank_entries`: pure, cheap to import, used by the renderers),
then `run_sweep`, which compiles candidates in worker processes (spawned, each with enough fake CPU devices
set before jax loads there; one per core while memory allows).

Memory fit: per-device bytes are arguments + outputs + temporaries - aliased buffers (+ generated code), the
report's memory (`analyzer.rules.memory.per_device_bytes`, the formula HA401 uses), against the hardware's HBM
per chip: libtpu's own memory analysis on a TPU target; on the cpu target for a TPU, the estimate of the TPU's
memory (`analyzer.analysis.tpumemory`), not the CPU compiler's buffer assignment.

How a step time is predicted: `step_seconds` is the step model's (analyzer.analysis.step, docs/step.md): every
instruction timed, collectives overlapped with compute where the schedule or the overlap model lets them, the
step the compute stream's end. Candidates are ranked by it (ties broken by the exposed communication); each
entry also shows its exposed communication, its MFU (model FLOPs / (step x peak x chips)), and the two bounds
`max(compute, comm)` (perfect overlap) and `compute + comm` (none). An entry made without a step model (by
hand) falls back to compute + comm. A candidate whose per-device memory exceeds the chip's HBM ranks after
every candidate that fits, whatever its speed; one that failed to compile ranks last with its error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from analyzer.errors import AnalyzerError
from analyzer.workflows.whatif import step_fields

if TYPE_CHECKING:
    from analyzer.analysis.report import Report
    from analyzer.workflows.executors import Executor
    from analyzer.workflows.reportconfig import ReportConfig

__all__ = [
    "COMBINE_RULE", "SweepEntry", "SweepResult", "rank_entries", "Candidate", "candidates", "evaluate",
    "run_sweep", "analyze_config", "memory_per_device", "default_jobs", "evaluate_task", "worker_env", "devices_of",
]

COMBINE_RULE = (
    "Ranked by the predicted step (compute plus the communication it waits for: docs/step.md); exposed is that "
    "wait, MFU = model FLOPs / (step x peak x chips). Candidates that do not fit in HBM rank after those that do."
)


@dataclass(frozen=True)
class SweepEntry:
    """One candidate plan and what the analysis predicts for it.

    Attributes:
      strategy: `dp`, `fsdp`, `tp`, `fsdp+tp` or `ep`.
      mesh: the mesh as `name=size,...` (e.g. `data=4,model=2`).
      comm_seconds: predicted communication seconds per step (every collective priced alone, summed).
      compute_seconds: predicted compute seconds per step (`Totals.compute_seconds`).
      predicted_step_seconds: the step model's step (`Totals.step_seconds`); nan when not predicted.
      exposed_comm_seconds: the communication the step waits for (`Totals.exposed_comm_seconds`); nan when not
        predicted.
      mfu: model FLOPs / (step x peak x chips) (`Totals.mfu`); nan when not predicted.
      memory_bytes: predicted per-device bytes (arguments + outputs + temporaries), None when unknown.
      hbm_bytes: HBM per chip of the hardware, None when unknown.
      findings: number of rule findings; `errors` of them at severity error.
      error: why the candidate could not be analysed; None when it was.
      rank: 1-based position after ranking (0 before).
      by_kind: communication seconds per step by collective kind.
      note: what the reader should know about the plan (e.g. a model axis of size 1 makes `tp` data parallel).
      same_as: rank of a better-ranked entry with the same predictions (the same plan in effect), or None.
      step_low, step_high: the range of the predicted step its calibration gives (`Totals.step_low`/`high`; nan
        without one).
      tied_with: rank of the best-ranked entry whose step range overlaps this one's (the model cannot tell
        which is faster: a tie), or None.
      batch, remat, microbatches: the template's batch size, remat policy and microbatches when the sweep
        varied them (None: the config's own).
      report: the candidate's full report in JSON form (`report_to_dict`), so the best one can be written
        without compiling it again; not part of `to_dict`.
    """

    strategy: str
    mesh: str
    comm_seconds: float = float("nan")
    compute_seconds: float = float("nan")
    memory_bytes: int | None = None
    hbm_bytes: int | None = None
    findings: int = 0
    errors: int = 0
    error: str | None = None
    rank: int = 0
    by_kind: dict[str, float] = field(default_factory=dict)
    note: str = ""
    same_as: int | None = None
    batch: int | None = None
    remat: str | None = None
    microbatches: int | None = None
    predicted_step_seconds: float = float("nan")
    exposed_comm_seconds: float = float("nan")
    mfu: float = float("nan")
    step_low: float = float("nan")
    step_high: float = float("nan")
    tied_with: int | None = None
    report: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def step_seconds(self) -> float:
        """The predicted step (the step model's), or compute + communication when it was not predicted."""
        if self.predicted_step_seconds == self.predicted_step_seconds and self.predicted_step_seconds > 0:
            return self.predicted_step_seconds
        return self.serial_step_seconds

    @property
    def serial_step_seconds(self) -> float:
        """compute + communication: no overlap (the upper bound)."""
        return self.compute_seconds + self.comm_seconds

    @property
    def overlap_step_seconds(self) -> float:
        """max(compute, communication): perfect overlap."""
        return max(self.compute_seconds, self.comm_seconds)

    @property
    def fits(self) -> bool | None:
        """Whether the per-device memory fits in HBM; None when either is unknown."""
        if self.memory_bytes is None or self.hbm_bytes is None:
            return None
        return self.memory_bytes <= self.hbm_bytes

    @property
    def plan(self) -> str:
        """The strategy, with the template dimensions the sweep varied: `fsdp, batch 32, remat full, 4 microbatches`."""
        parts = [self.strategy]
        if self.batch is not None:
            parts.append(f"batch {self.batch}")
        if self.remat is not None:
            parts.append(f"remat {self.remat}")
        if self.microbatches is not None:
            parts.append(f"{self.microbatches} microbatch{'es' if self.microbatches != 1 else ''}")
        return ", ".join(parts)

    @property
    def label(self) -> str:
        """`plan @ mesh`; the plan alone where no mesh is known (a `maxtext:` plan that failed before MaxText made
        its mesh)."""
        return f"{self.plan} @ {self.mesh}" if self.mesh else self.plan

    def to_dict(self) -> dict[str, Any]:
        from analyzer.analysis.serialize import to_jsonable

        return to_jsonable({
            "rank": self.rank, "strategy": self.strategy, "mesh": self.mesh,
            "step_seconds": self.step_seconds if self.ok else None,
            "exposed_comm_seconds": self.exposed_comm_seconds if self.ok else None,
            "mfu": self.mfu if self.ok else None,
            "overlap_step_seconds": self.overlap_step_seconds if self.ok else None,
            "serial_step_seconds": self.serial_step_seconds if self.ok else None,
            "comm_seconds": self.comm_seconds if self.ok else None,
            "compute_seconds": self.compute_seconds if self.ok else None,
            "memory_bytes": self.memory_bytes, "hbm_bytes": self.hbm_bytes, "fits": self.fits,
            "findings": self.findings, "errors": self.errors, "error": self.error, "by_kind": self.by_kind,
            "note": self.note, "same_as": self.same_as, "tied_with": self.tied_with,
            "step_range": [self.step_low, self.step_high] if self.ok and self.step_high == self.step_high else None,
            "batch": self.batch, "remat": self.remat, "microbatches": self.microbatches,
        })


def _sort_key(e: SweepEntry) -> tuple:
    if not e.ok:
        return (2, 0.0, 0.0, e.label)
    exposed = e.exposed_comm_seconds if e.exposed_comm_seconds == e.exposed_comm_seconds else e.comm_seconds
    return (1 if e.fits is False else 0, e.step_seconds, exposed, e.overlap_step_seconds, e.label)


def rank_entries(entries: Sequence[SweepEntry]) -> tuple[SweepEntry, ...]:
    """Order candidates best first and number them.

    Args:
      entries: analysed (or failed) candidates in any order.

    Returns:
      The entries sorted by: fits in HBM (or unknown) first, then the predicted step (`step_seconds`), then
      the exposed communication, then the perfect-overlap time; failed candidates last. `rank` is set 1..n; an entry whose predictions
      equal a better-ranked one's gets `same_as` (e.g. fsdp on 8x1 and on 4x2 shard the same way), one whose step
      range overlaps a better-ranked one's `tied_with` (the model cannot tell them apart).

    Example:
      >>> ranked = rank_entries([SweepEntry("tp", "data=1,model=8", 2e-3, 1e-3, predicted_step_seconds=2.2e-3),
      ...                        SweepEntry("fsdp", "data=8,model=1", 2e-3, 1e-3, predicted_step_seconds=1.1e-3)])
      >>> [e.strategy for e in ranked]                 # the same communication, hidden better by fsdp
      ['fsdp', 'tp']
    """
    ordered = [replace(e, rank=i + 1) for i, e in enumerate(sorted(entries, key=_sort_key))]
    seen: dict[tuple, int] = {}
    for i, e in enumerate(ordered):
        if not e.ok:
            continue
        key = (round(e.comm_seconds, 12), round(e.compute_seconds, 12), round(e.step_seconds, 12), e.memory_bytes,
               e.findings)
        if key in seen:
            ordered[i] = replace(e, same_as=seen[key])
        else:
            seen[key] = e.rank
    for i, e in enumerate(ordered):  # ties: step ranges that overlap a better-ranked plan's (docs/step.md)
        if not e.ok or e.same_as is not None or not e.step_high == e.step_high:
            continue
        for better in ordered[:i]:
            if (better.ok and better.same_as is None and better.step_high == better.step_high
                    and better.fits == e.fits and better.step_low <= e.step_high and e.step_low <= better.step_high):
                ordered[i] = replace(e, tied_with=better.rank)
                break
    return tuple(ordered)


@dataclass(frozen=True)
class SweepResult:
    """The ranking of a sweep, best first.

    Attributes:
      entries: ranked `SweepEntry`s.
      hardware: hardware the candidates were priced on.
      combine: how step time was predicted from compute and communication (`COMBINE_RULE`).
    """

    entries: tuple[SweepEntry, ...]
    hardware: str
    combine: str = COMBINE_RULE

    @property
    def best(self) -> SweepEntry | None:
        ok = [e for e in self.entries if e.ok]
        return ok[0] if ok else None

    @property
    def none_fit(self) -> bool:
        """True when memory is known for the analysed candidates and none of them fits in HBM."""
        ok = [e for e in self.entries if e.ok]
        return bool(ok) and all(e.fits is False for e in ok)

    def best_report(self) -> Report | None:
        """The best candidate's report, rebuilt from its JSON form (renderable; not re-priceable)."""
        from analyzer.analysis.report import report_from_dict

        best = self.best
        return report_from_dict(best.report) if best is not None and best.report is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "hardware": self.hardware,
            "combine": self.combine,
            "best": self.best.label if self.best else None,
            "entries": [e.to_dict() for e in self.entries],
        }


# ----------------------------------------------------------------------------------------------------------
# Running a sweep


@dataclass(frozen=True)
class Candidate:
    """One plan to try: a mesh shape (sizes for the config's axes, in order) and a strategy (None: the
    config's own, or an entry point's own shardings); for the template, a batch size, remat policy and
    number of microbatches (None: the config's own)."""

    mesh_shape: tuple[int, ...]
    strategy: str | None
    batch: int | None = None
    remat: str | None = None
    microbatches: int | None = None
    maxtext: tuple[tuple[str, str], ...] = ()  # MaxText keys set for this plan ([sweep.maxtext])

    def plan(self, config: ReportConfig) -> ReportConfig:
        """`config` with this candidate's mesh shape, strategy and template sizes (or MaxText keys)."""
        if config.maxtext_argv is not None:
            return config.with_maxtext(self.maxtext)
        return config.with_plan(self.mesh_shape, self.strategy).with_template(
            batch=self.batch, remat=self.remat, microbatches=self.microbatches)

    @property
    def label(self) -> str:
        """What the plan is, for the ranking: the strategy, or the MaxText keys it sets."""
        if self.maxtext:
            return " ".join(f"{k}={v}" for k, v in self.maxtext)
        return self.strategy or "(entry point)"


def _maxtext_candidates(config: ReportConfig, mesh_shapes: Sequence[Sequence[int]], strategies: Sequence[str],
                        given: Sequence[str], maxtext: Mapping[str, Sequence[Any]] | None) -> tuple[Candidate, ...]:
    """A `maxtext:` config's plans: the cross product of its [sweep.maxtext] keys (or `maxtext`)."""
    import itertools

    from analyzer.errors import ConfigError

    if mesh_shapes or strategies or given:
        what = ", ".join([*(["mesh shapes"] if mesh_shapes else []), *(["strategies"] if strategies else []),
                          *given])
        raise ConfigError(f"{what} do not apply to a maxtext: entry, whose mesh and sizes are MaxText's keys: "
                          "sweep them under [sweep.maxtext] (e.g. ici_fsdp_parallelism = [-1, 64])", path=config.path)
    dims = [(str(k), tuple(str(v) for v in vs)) for k, vs in (maxtext.items() if maxtext else config.sweep_maxtext)]
    if not dims:
        return (Candidate((), None),)
    keys = [k for k, _ in dims]
    return tuple(Candidate((), None, maxtext=tuple(zip(keys, combo)))
                 for combo in itertools.product(*(vs for _, vs in dims)))


def devices_of(config: ReportConfig, cand: Candidate) -> int:
    """CPU devices a candidate compiles on: its mesh's, or for a maxtext: entry the chips of compile_topology."""
    argv = cand.plan(config).maxtext_argv
    if argv is None:
        return _product(cand.mesh_shape)
    from analyzer.integrations.maxtext import parse_args, plan

    try:
        return plan(parse_args(argv)).chips
    except AnalyzerError:
        return 1  # the candidate fails in its worker with MaxText's message


def candidates(config: ReportConfig, mesh_shapes: Sequence[Sequence[int]] = (),
               strategies: Sequence[str] = (), *, batch_sizes: Sequence[int] = (), remat: Sequence[str] = (),
               microbatches: Sequence[int] = (), maxtext: Mapping[str, Sequence[Any]] | None = None
               ) -> tuple[Candidate, ...]:
    """The cross product of mesh shapes, strategies and template dimensions, checked; for a `maxtext:` entry,
    of its MaxText keys (`maxtext`, default the config's [sweep.maxtext]).

    Args:
      config: the report config (its mesh names the axes; its [sweep] table gives defaults).
      mesh_shapes: sizes per mesh axis; default: the config's [sweep] mesh-shapes, else its own mesh.
      strategies: default: the config's [sweep] strategies, else its own strategy.
      batch_sizes, remat, microbatches: template dimensions; default: the config's [sweep] lists, else the
        config's own value (not varied). A combination the template rejects (a batch that the microbatches
        or the mesh do not divide) is a candidate that fails with the reason, like a mesh it cannot use.

    Raises:
      ConfigError: a shape with the wrong number of axes, shapes over different device counts (their step
        times would not be comparable), strategies or template dimensions for an entry-point config.

    Example:
      >>> from analyzer.workflows.reportconfig import load_report_config
      >>> cfg = load_report_config("examples/configs/fsdp-tp-v5e-8.toml")    # mesh data=4, model=2
      >>> [c.mesh_shape for c in candidates(cfg, [(8, 1), (4, 2)], ["fsdp"])]
      [(8, 1), (4, 2)]
    """
    from analyzer.errors import ConfigError

    if config.maxtext_argv is not None:
        given = [n for n, v in (("batch sizes", batch_sizes), ("remat", remat), ("microbatches", microbatches)) if v]
        return _maxtext_candidates(config, mesh_shapes, strategies, given, maxtext)
    shapes = [tuple(int(s) for s in shape) for shape in (mesh_shapes or config.sweep_mesh_shapes
                                                         or [tuple(config.mesh.values())])]
    strats: list[str | None] = list(strategies or config.sweep_strategies or [config.strategy])
    for shape in shapes:
        config.with_plan(shape)  # checks the number of axes
    if config.entry is not None and any(s is not None for s in strats):
        raise ConfigError(f"--strategies applies to the built-in [model] template; {config.entry} shards its own "
                          "arrays, so only mesh shapes can be swept", path=config.path)
    dims: dict[str, list[Any]] = {
        "batch": list(batch_sizes or config.sweep_batch_sizes),
        "remat": list(remat or config.sweep_remat),
        "microbatches": list(microbatches or config.sweep_microbatches),
    }
    given = [name for name, values in dims.items() if values]
    if config.entry is not None and given:
        raise ConfigError(f"{', '.join(given)} apply to the built-in [model] template; {config.entry} has its own "
                          "sizes, so only mesh shapes can be swept", path=config.path)
    devices = {_product(s) for s in shapes}
    if len(devices) > 1:
        listed = ", ".join(f"{'x'.join(map(str, s))} ({_product(s)})" for s in shapes)
        raise ConfigError(f"mesh shapes use different numbers of devices: {listed}; a sweep compares plans for one "
                          "set of chips, so give shapes with the same product", path=config.path)
    import itertools

    seen: list[Candidate] = []
    for strategy, batch, policy, micro, shape in itertools.product(
            strats, dims["batch"] or [None], dims["remat"] or [None], dims["microbatches"] or [None], shapes):
        c = Candidate(shape, strategy, batch, policy, micro)
        if c not in seen:
            seen.append(c)
    return tuple(seen)


def _product(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def memory_per_device(memory: Mapping[str, int] | None) -> int | None:
    """Peak bytes per device from `compiled.memory_analysis()`: arguments + outputs + temporaries - aliased.

    Example:
      >>> memory_per_device({"argument_bytes": 10, "output_bytes": 10, "temp_bytes": 5, "alias_bytes": 10})
      15
    """
    from analyzer.rules.memory import per_device_bytes  # the one formula HA401 and the fit check use

    if not memory or not any(k in memory for k in ("argument_bytes", "output_bytes", "temp_bytes", "total_bytes")):
        return None
    used = per_device_bytes(memory)
    return None if used is None else int(used)


def analyze_config(config: ReportConfig, *, hardware: str | None = None, topology: str | None = None) -> Report:
    """Compile and analyse the program a report config describes.

    Args:
      config: the checked config.
      hardware, topology: override the config's (what-if pricing of the same compile). With another
        hardware and no topology, the mesh goes on the smallest slice of that hardware that holds it.

    Returns:
      The `Report`, named after the config, with the config's rules applied.
    """
    from dataclasses import replace as dc_replace

    from analyzer.pipeline import analyze

    rules = config.rules_config()
    argv = config.maxtext_argv
    if argv is not None:  # MaxText's own step, built by MaxText (analyzer.integrations.maxtext)
        from analyzer.integrations.maxtext import analyze_maxtext

        if config.xla_flags:
            from analyzer.errors import ConfigError

            raise ConfigError("xla-flags with a maxtext: entry: MaxText's compile takes its flags from "
                              "LIBTPU_INIT_ARGS; set them there", path=config.path)

        report = analyze_maxtext(argv, target=config.target, hardware=hardware or config.hardware or None,
                                 topology=topology, config=rules)
        return dc_replace(report, name=config.name or f"maxtext {' '.join(argv)}")
    fn, args, kwargs = config.build()
    if topology is None and hardware is None:
        topology = config.topology  # the config's slice belongs to the config's hardware
    flags = dict(config.xla_flags)
    report = analyze(fn, *args, mesh=dict(config.mesh), target=config.target,
                     hardware=hardware or config.hardware, topology=topology, config=rules,
                     **({"xla_flags": flags} if flags else {}), **kwargs)
    return dc_replace(report, name=config.title)


def _used_axes(report: Report) -> str:
    """The mesh a report was compiled on, its axes of size 1 left out (`fsdp=256`): the mesh of a `maxtext:` plan,
    which MaxText makes from its keys (a config with a [mesh] names its own)."""
    mesh = report.mesh
    if mesh is None:
        return ""
    return ",".join(f"{a}={n}" for a, n in zip(mesh.axis_names, mesh.axis_sizes) if n > 1)


def _entry_from_report(candidate: Candidate, config: ReportConfig, report: Report) -> SweepEntry:
    from analyzer.theory.hardware import load_hardware
    from analyzer.analysis.report import report_to_dict

    hbm = int((report.analysis.hardware or load_hardware(report.hardware)).hbm_bytes) if report.hardware else None
    diags = list(report.diagnostics)
    return SweepEntry(
        strategy=candidate.label, mesh=config.mesh_text or _used_axes(report), note=plan_note(config),
        batch=candidate.batch, remat=candidate.remat, microbatches=candidate.microbatches,
        comm_seconds=float(report.totals.comm_seconds), compute_seconds=float(report.totals.compute_seconds),
        **step_fields(report),
        memory_bytes=memory_per_device(report.memory), hbm_bytes=hbm, findings=len(diags),
        errors=sum(1 for d in diags if getattr(d.severity, "value", d.severity) == "error"),
        by_kind={str(k): float(v) for k, v in report.totals.by_kind.items()},
        report=report_to_dict(report),
    )


def plan_note(config: ReportConfig) -> str:
    """A remark on a plan whose strategy degenerates on its mesh: tp, fsdp+tp or ep with a model axis of 1.

    Example:
      >>> from analyzer.workflows.reportconfig import load_report_config
      >>> cfg = load_report_config("examples/configs/fsdp-tp-v5e-8.toml")    # mesh data=4, model=2
      >>> plan_note(cfg.with_plan((8, 1), "tp"))
      "model axis 'model' has size 1: no tensor parallelism (data parallel in effect)"
    """
    if config.strategy not in ("tp", "fsdp+tp", "ep") or not config.mesh:
        return ""
    axis = config.model_axis or list(config.mesh)[-1]
    if config.mesh.get(axis) != 1:
        return ""
    effect = {"tp": "no tensor parallelism (data parallel in effect)", "fsdp+tp": "no tensor parallelism (FSDP in "
              "effect)", "ep": "experts not sharded"}[config.strategy]
    return f"model axis {axis!r} has size 1: {effect}"


def evaluate(config: ReportConfig, candidate: Candidate, *, hardware: str | None = None,
             topology: str | None = None) -> SweepEntry:
    """Compile and price one candidate; an `AnalyzerError` becomes a failed entry (its message kept).

    Example:
      >>> from analyzer.workflows.reportconfig import load_report_config
      >>> cfg = load_report_config("examples/configs/entry-point.toml")      # a two-layer MLP on data=4, model=2
      >>> entry = evaluate(cfg, Candidate((4, 2), None))
      >>> entry.mesh, entry.step_seconds > 0
      ('data=4,model=2', True)
    """
    try:
        planned = candidate.plan(config)
        report = analyze_config(planned, hardware=hardware, topology=topology)
    except AnalyzerError as e:
        return _failed_entry(config, candidate, f"{type(e).__name__}: {str(e).splitlines()[0]}")
    return _entry_from_report(candidate, planned, report)


def worker_env(devices: int, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment variables a worker needs before jax loads there: enough fake CPU devices for every
    candidate, CPU only (TPU targets compile ahead of time through libtpu, with no TPU attached).

    Example:
      >>> worker_env(8, {"XLA_FLAGS": "--xla_dump_to=/tmp/d"})["XLA_FLAGS"]
      '--xla_dump_to=/tmp/d --xla_force_host_platform_device_count=8'
    """
    flag = "--xla_force_host_platform_device_count"
    flags = [f for f in (base or {}).get("XLA_FLAGS", "").split() if not f.startswith(flag)]
    return {"XLA_FLAGS": " ".join(flags + [f"{flag}={devices}"]), "JAX_PLATFORMS": "cpu"}


def _worker_init(devices: int) -> None:
    """Worker set-up, before jax loads there (see `worker_env`)."""
    import os

    os.environ.update(worker_env(devices, os.environ))


def evaluate_task(task: tuple[ReportConfig, Candidate, str | None, str | None]) -> SweepEntry:
    """`evaluate` for an executor's worker: `task` is `(config, candidate, hardware, topology)`; an exception
    that is not an `AnalyzerError` (a bug) fails this candidate alone, with its type and message.

    Example:
      >>> from analyzer.workflows.reportconfig import load_report_config
      >>> cfg = load_report_config("examples/configs/fsdp-v5e-8.toml")
      >>> evaluate_task((cfg, Candidate((8,), "fsdp"), None, None)).ok
      True
      >>> evaluate_task((cfg, Candidate((4, 2), "fsdp"), None, None)).error
      "ConfigError: examples/configs/fsdp-v5e-8.toml: error: mesh shape 4x2 has 2 axes but the config's mesh data=8 has 1 (data); give one size per axis"
    """
    import threading

    config, cand, hardware, topology = task
    box: dict[str, SweepEntry] = {}

    def run() -> None:
        try:
            box["entry"] = evaluate(config, cand, hardware=hardware, topology=topology)
        except Exception as e:  # noqa: BLE001 - one candidate's bug must not take the sweep down
            box["entry"] = _failed_entry(config, cand, f"internal error ({type(e).__name__}: {e})")

    # The compile runs on a fresh thread so that the Python stack jax records in the HLO's StackFrames
    # table is the same whoever called this (this process, a pool worker, a Ray worker): the HLO text, and
    # every line number the report quotes from it, do not depend on the executor.
    thread = threading.Thread(target=run, name="hlo-analyzer-plan", daemon=True)
    thread.start()
    thread.join()
    return box["entry"]


def _failed_entry(config: ReportConfig, cand: Candidate, why: str) -> SweepEntry:
    try:
        mesh = config.with_plan(cand.mesh_shape).mesh_text
    except AnalyzerError:  # the plan's mesh does not fit the config: name the shape as asked
        mesh = "x".join(str(s) for s in cand.mesh_shape)
    return SweepEntry(strategy=cand.label, mesh=mesh,
                      batch=cand.batch, remat=cand.remat, microbatches=cand.microbatches, error=why)


def default_jobs(n_candidates: int) -> int:
    """How many candidates to compile at once: one per CPU core, at most one per 2 GiB of free memory, at
    most the number of candidates."""
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    by_memory = cores
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        available = int(info["MemAvailable"].split()[0]) * 1024
        by_memory = max(1, available // (2 << 30))
    except (OSError, KeyError, ValueError):
        pass
    return max(1, min(cores, by_memory, n_candidates))


def run_sweep(config: ReportConfig, cands: Sequence[Candidate], *, hardware: str | None = None,
              topology: str | None = None, jobs: int | None = None,
              progress: Callable[[Candidate, SweepEntry], None] | None = None,
              executor: Executor | None = None, timeout: float | None = None) -> SweepResult:
    """Compile and price every candidate, in parallel worker processes when `jobs` > 1, and rank them.

    Workers are spawned processes that take one candidate at a time. A worker that dies (killed for memory,
    or by a signal) fails only the candidate it was compiling, with the signal or exit code in the entry's
    error, and a fresh worker takes its place for the candidates still queued. On Ctrl-C
    (`KeyboardInterrupt`) nothing more is started, every worker is terminated (killed after a second), and
    the interrupt propagates: the sweep stops within about a second whatever is queued or compiling.

    Args:
      config: the report config.
      cands: from `candidates`.
      hardware, topology: override the config's pricing.
      jobs: worker processes (default `default_jobs`); 1 runs in this process.
      progress: called after each candidate finishes, in completion order.
      executor: run the candidates there instead (`analyzer.workflows.executors`, e.g. `RayExecutor`); None:
        this machine's worker processes (`jobs` applies only then). Entries and ranking do not depend on it.
      timeout: seconds one candidate may take in a worker before it is stopped and marked failed (None: no
        limit). With `jobs` 1 the candidates run in this process and the limit does not apply.

    Returns:
      The `SweepResult`, best first (see the module doc for how step time and memory fit rank them).
      Candidates that failed are in it, last, with their `error`.
    """
    jobs = jobs or default_jobs(len(cands))
    entries: list[SweepEntry] = []
    if executor is not None and cands:
        import contextlib
        import os

        tasks = [(config, c, hardware, topology) for c in cands]
        env = worker_env(max(devices_of(config, c) for c in cands), os.environ)
        finished = executor.map(evaluate_task, tasks, lost=lambda t, why: _failed_entry(t[0], t[1], why), env=env)
        with contextlib.closing(finished):  # Ctrl-C here cancels the executor's tasks
            for task, entry in finished:
                entries.append(entry)
                if progress:
                    progress(task[1], entry)
    elif (jobs <= 1 or len(cands) <= 1) and timeout is None:
        for cand in cands:
            entry = evaluate_task((config, cand, hardware, topology))
            entries.append(entry)
            if progress:
                progress(cand, entry)
    else:
        import contextlib

        devices = max(devices_of(config, c) for c in cands)
        finished = _run_in_workers(config, cands, jobs=max(1, min(jobs, len(cands))), devices=devices,
                                   hardware=hardware, topology=topology, timeout=timeout)
        with contextlib.closing(finished):  # Ctrl-C anywhere in this loop stops the workers at once
            for cand, entry in finished:
                entries.append(entry)
                if progress:
                    progress(cand, entry)
    hw_name = hardware or config.hardware or next(  # a maxtext: entry's: the one of its compile_topology
        (str(e.report.get("hardware", "")) for e in entries if e.ok and e.report), "")
    return SweepResult(entries=rank_entries(entries), hardware=hw_name)


def _worker_main(conn: Any, devices: int) -> None:
    """A sweep worker: evaluate the candidates sent on `conn` one at a time, send back each `SweepEntry`.

    Ctrl-C in the terminal reaches the whole process group; the parent decides what stops (it terminates its
    workers), so a worker ignores SIGINT rather than print a traceback of its own.
    """
    import signal

    from analyzer._signals import Terminated, stop_signals

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The parent stops a worker with SIGTERM: unwind (XLA's dump folder is removed) and end without a traceback.
    with stop_signals():
        try:
            _worker_loop(conn, devices)
        except Terminated:
            return


def _worker_loop(conn: Any, devices: int) -> None:
    _worker_init(devices)
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        config, cand, hardware, topology = task
        try:
            entry = evaluate_task((config, cand, hardware, topology))
        except Exception as e:  # noqa: BLE001 - one candidate's bug must not take the sweep down
            entry = _failed(config, cand, f"internal error ({type(e).__name__}: {e})")
        try:
            conn.send(entry)
        except OSError:  # the parent is gone (killed): nobody to report to
            return


def _failed(config: ReportConfig, cand: Candidate, why: str) -> SweepEntry:
    return _failed_entry(config, cand, why)


def _death(exitcode: int | None) -> str:
    """Why a worker process ended, in words."""
    import signal

    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = " (out of memory? the kernel's OOM killer sends SIGKILL)" if name == "SIGKILL" else ""
        return f"the worker process compiling it was killed by {name}{hint}"
    return f"the worker process compiling it exited with status {exitcode}"


def _run_in_workers(config: ReportConfig, cands: Sequence[Candidate], *, jobs: int, devices: int,
                    hardware: str | None, topology: str | None, timeout: float | None):
    """Yield (candidate, entry) as workers finish them; see `run_sweep` for deaths, timeouts and Ctrl-C."""
    import multiprocessing
    import time
    from multiprocessing.connection import wait

    context = multiprocessing.get_context("spawn")  # never fork a process that may hold jax threads
    pending = list(cands)
    workers: list[dict[str, Any]] = []

    def start() -> dict[str, Any]:
        parent, child = context.Pipe()
        proc = context.Process(target=_worker_main, args=(child, devices), daemon=True,
                               name="hlo-analyzer-sweep-worker")
        proc.start()
        child.close()
        return {"proc": proc, "conn": parent, "cand": None, "since": 0.0}

    def stop(w: dict[str, Any]) -> None:
        with _suppress():
            w["conn"].close()
        if w["proc"].is_alive():
            w["proc"].terminate()

    try:
        workers = [start() for _ in range(jobs)]
        while True:
            for w in workers:
                if w["cand"] is None and pending:
                    cand = pending.pop(0)
                    w["cand"], w["since"] = cand, time.monotonic()
                    w["conn"].send((config, cand, hardware, topology))
            busy = [w for w in workers if w["cand"] is not None]
            if not busy:
                return
            ready = wait([w["conn"] for w in busy] + [w["proc"].sentinel for w in busy], timeout=0.5)
            now = time.monotonic()
            for w in busy:
                cand = w["cand"]
                entry = None
                if w["conn"] in ready or w["proc"].sentinel in ready:
                    try:
                        entry = w["conn"].recv() if w["conn"].poll() else None
                    except (EOFError, OSError):
                        entry = None
                    if entry is None:  # the worker died: fail its own candidate only, and replace it
                        w["proc"].join(timeout=1)
                        entry = _failed(config, cand, _death(w["proc"].exitcode) + "; retry it with --jobs 1")
                        stop(w)
                        workers[workers.index(w)] = start() if pending else {**w, "cand": None, "dead": True}
                        yield cand, entry
                        continue
                elif timeout is not None and now - w["since"] > timeout:
                    stop(w)
                    w["proc"].join(timeout=1)
                    entry = _failed(config, cand, f"timed out: compiling and pricing it took over {timeout:g} s "
                                                  "(raise --timeout)")
                    workers[workers.index(w)] = start() if pending else {**w, "cand": None, "dead": True}
                    yield cand, entry
                    continue
                if entry is not None:
                    w["cand"] = None
                    yield cand, entry
            workers = [w for w in workers if not w.get("dead")]
    finally:
        for w in workers:
            if w["cand"] is not None:  # interrupted (Ctrl-C) or abandoned: stop the compile now
                stop(w)
            elif w["proc"].is_alive():
                with _suppress():
                    w["conn"].send(None)
        deadline = time.monotonic() + 1.0
        for w in workers:
            w["proc"].join(timeout=max(0.0, deadline - time.monotonic()))
            if w["proc"].is_alive():
                w["proc"].kill()
                w["proc"].join(timeout=1)
            with _suppress():
                w["conn"].close()


def _suppress():
    import contextlib

    return contextlib.suppress(OSError, ValueError, BrokenPipeError)
