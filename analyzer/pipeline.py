"""The analysis: from a jitted function (or an HLO dump) to a `Report` of priced collectives.

    report = analyze(fn, *args, mesh=mesh, target="cpu", hardware="tpu-v5e")
    report = analyze_hlo("dump_dir/", mesh="data=4,model=2", hardware="tpu-v5e")
    what_if = reprice(report, hardware="tpu-v5p", topology="v5p:2x2x2")

Pipeline: lower (analyzer.compile.lower) -> parse (analyzer.hlo.parser) -> call graph (analyzer.analysis.graph) ->
collectives and dots (analyzer.analysis.collectives, analyzer.analysis.dots) -> mesh axes, notation, source
(analyzer.analysis.origins.map_collective) -> price (analyzer.theory.cost on an analyzer.theory.topology.Topology) -> rules (analyzer.rules).

Which HLO is read:
  - target "cpu": the module right after SPMD partitioning (`Lowered.spmd_hlo`): the backend-neutral
    collectives, before the CPU backend rewrites them;
  - target "tpu:<topology>": the final optimized module (`Lowered.optimized_hlo`), the code that would run,
    with the TPU compiler's async fusions, reduce-scatter fusions and collective matmuls recognised;
  - a dump folder: the `*after_spmd-partitioning*` / `*after_tpu-spmd-partitioning*` module if present, else
    the final `*after_optimizations.txt`; the report's notes say which file.

Pricing: every collective is priced with `analyzer.theory.cost.collective_cost` on a `Topology`. For tpu targets the
topology comes from the devices' torus coordinates; for cpu and dumps it is `topology` if given, else the
mesh laid on the smallest slice of the hardware that holds it, axes in order (the notes say so).

`analyze_lowered`, `analyze_hlo` and `build_report` each run as one call of `analyzer.hlo.memo`: the shapes,
device groups and metadata they decode are memoised for that call and dropped when it returns.

`Report.analysis` (an `analyzer.analysis.context.AnalysisContext`: the live objects for the rules, `reprice`
and the renderers; typed, frozen, never serialised): the parsed module, its call graph, the `HardwareSpec`,
the `Topology` used for pricing, the cost model, the `Collective` and `Dot` records in row order, the
`Lowered` (None for dumps), the shardings and abstract arguments as given, the rules config, the dump path.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analyzer.errors import AnalyzerError, MeshError, valid_choices
from analyzer.hlo.memo import one_call
from analyzer.analysis.report import COLLECTIVE_COLUMNS, DOT_COLUMNS, Report, Totals
from analyzer.theory.mesh import MeshInfo
from analyzer.units import format_bytes

if TYPE_CHECKING:
    import pandas as pd

    from analyzer.analysis.collectives import Collective
    from analyzer.analysis.dots import Dot
    from analyzer.analysis.graph import CallGraph
    from analyzer.analysis.costs import ProgramCosts
    from analyzer.analysis.step import StepPrediction
    from analyzer.theory.hardware import HardwareSpec
    from analyzer.hlo.ir import HloModule

__all__ = ["analyze", "analyze_hlo", "analyze_lowered", "build_report", "pick_dump_file", "reprice"]

_MODELS = ("topology", "ideal")


# ---------------------------------------------------------------------- public API
def analyze(
    fn: Callable[..., Any],
    *args: Any,
    mesh: Any = None,
    in_shardings: Any = None,
    out_shardings: Any = None,
    target: str = "cpu",
    hardware: str | HardwareSpec = "tpu-v5e",
    topology: str | None = None,
    config: Any = None,
    model: str = "topology",
    **kwargs: Any,
) -> Report:
    """Compile `fn(*args)` for `target` and report every collective XLA inserted, priced on `hardware`.

    Args:
      fn: a function or `jax.jit`-wrapped function.
      *args: arrays or `jax.ShapeDtypeStruct`s (pytrees), with `NamedSharding`s.
      mesh: `jax.sharding.Mesh`, `AbstractMesh`, dict `{"data": 4}` or "data=4,model=2"; None: from the args.
      in_shardings, out_shardings: as for `jax.jit`.
      target: "cpu" (fake CPU devices) or "tpu:<gen>:<shape>" (libtpu ahead-of-time), e.g. "tpu:v5e:2x4".
      hardware: hardware spec name or path (`hlo-analyzer hardware list`).
      topology: physical slice for pricing (e.g. "v5e:4x2"); default: from the TPU devices, or the smallest
        slice that holds the mesh.
      config: the rules configuration: a `Config`, a dict of `[tool.hlo-analyzer]` keys (`{"ignore": ["HA202"]}`,
        checked like the TOML table), a pyproject.toml path, or None (the defaults). Checked before compiling.
      model: cost model, "topology" (hops, wraparound, latency) or "ideal" (the chapter's V/W).
      **kwargs: keyword arguments of `fn`.
    Returns:
      `Report`.
    Raises:
      AnalyzerError subclasses for bad meshes, shardings, targets, hardware and lowering failures.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jax.sharding import NamedSharding, PartitionSpec as P
        >>> from analyzer.compile.lower import make_mesh
        >>> mesh = make_mesh({"X": 2, "Y": 4})
        >>> a = jax.ShapeDtypeStruct((256, 128), jnp.float32, sharding=NamedSharding(mesh, P("X", "Y")))
        >>> b = jax.ShapeDtypeStruct((128, 64), jnp.float32, sharding=NamedSharding(mesh, P("Y", None)))
        >>> r = analyze(lambda a, b: a @ b, a, b, mesh=mesh, hardware="tpu-v5e")
        >>> r.collectives[["kind", "axes", "bytes", "count"]]     # A[I_X, J_Y] . B[J_Y, K]: partial sums over Y
                 kind  axes  bytes  count
        0  all-reduce  (Y,)  32768      1

        The all-reduce moves Z[I_X, K]: 128 x 64 f32 = 32768 bytes per group of the Y axis.
    """
    from analyzer.compile.lower import lower
    from analyzer.rules.config import as_config

    config = as_config(config)
    lowered = lower(fn, *args, mesh=mesh, in_shardings=in_shardings, out_shardings=out_shardings, target=target,
                    **kwargs)
    return analyze_lowered(lowered, hardware=hardware, topology=topology, config=config, model=model, args=args,
                           in_shardings=in_shardings, out_shardings=out_shardings)


@one_call
def analyze_lowered(
    lowered: Any,
    *,
    hardware: str | HardwareSpec = "tpu-v5e",
    topology: str | None = None,
    config: Any = None,
    model: str = "topology",
    args: Any = (),
    in_shardings: Any = None,
    out_shardings: Any = None,
    flash_attention: bool | None = None,
) -> Report:
    """The `Report` of a program already compiled by `analyzer.compile.lower.lower` (what `analyze` does after
    its compile; for callers that lower themselves, such as `analyzer.integrations.maxtext`).

    Args:
      lowered: the `Lowered`.
      hardware, topology, config, model: as for `analyze`.
      args, in_shardings, out_shardings: the abstract arguments and shardings the program was lowered with (the
        arguments table and the rules that read them); empty when unknown.
      flash_attention: price the program's attention as the TPU's flash kernel, its S x S scores in VMEM
        (docs/step.md, "Flash attention"): for a program whose attention runs as one on the TPU but was lowered
        with a portable substitute; None: `lowered.flash_attention`.
    """
    from analyzer.rules.config import as_config

    config = as_config(config)
    text = lowered.optimized_hlo if lowered.platform == "tpu" else lowered.spmd_hlo
    which = ("the final optimized HLO of the TPU compiler" if lowered.platform == "tpu"
             else "the HLO right after SPMD partitioning (backend-neutral; CPU backend rewrites not applied)")
    if lowered.platform != "tpu" and lowered.mesh.size == 1:
        which = ("the HLO as jax handed it to XLA: on one device XLA partitions nothing and inserts no "
                 "collectives; this is the unsharded baseline")
    per_slice = _per_slice_program(lowered)
    if per_slice is not None:
        text = lowered.spmd_hlo
        which = (f"the HLO right after SPMD partitioning, the whole program over all {lowered.mesh.size} chips: "
                 f"libtpu's final HLO for this multi-slice target is the program of one slice ({per_slice} "
                 "partitions), its collectives over DCN turned into megascale host transfers (send/recv), "
                 "which are not read; so the step is predicted by the overlap model of unscheduled modules")
    from analyzer.hlo.parser import parse_hlo

    # (lenient: a construct a newer jax's XLA prints that this version does not know is kept as written and named
    # in the report's warnings, and every figure that does not depend on it is still computed)
    module = parse_hlo(text, path=f"<{lowered.name or 'module'} for {lowered.target}>", lenient=True)
    notes = [f"Collectives read from {which}."]
    flags = dict(getattr(lowered, "xla_flags", None) or {})
    if flags:
        from analyzer.compile.xlaflags import format_xla_flags

        passed = set(getattr(lowered, "xla_flags_passed", ()))
        given = format_xla_flags({k: v for k, v in flags.items() if k in passed})
        kept = format_xla_flags({k: v for k, v in flags.items() if k not in passed})
        notes.append(f"XLA flags: {given or 'none'} passed to the {lowered.platform} compiler"
                     + (f"; {kept} not known to it, kept for the step model only" if kept else "")
                     + " (Report.analysis.xla_flags).")
    context = {"lowered": lowered, "in_shardings": in_shardings, "out_shardings": out_shardings, "args": args,
               "config": config, "xla_flags": flags or None}
    if flash_attention is None:
        flash_attention = bool(getattr(lowered, "flash_attention", False))
    if flash_attention:
        context["flash_attention"] = True
    return build_report(module, mesh=lowered.mesh, hardware=hardware, topology=topology,
                        device_coords=lowered.device_coords, target=lowered.target, notes=notes,
                        memory=lowered.memory, name=lowered.name, context=context, config=config, model=model)


def _flash_note(costs: Any, asked: bool) -> tuple[str, ...]:
    """The report's note on the flash-attention term (`ProgramCosts.flash`), when it was asked for."""
    if costs.flash is not None:
        return ("Attention priced as the TPU's flash kernel (docs/step.md, 'Flash attention'): the S x S scores "
                f"(S = {', '.join(str(s) for s in sorted(costs.flash.lengths))}) and the softmax on them stay in "
                "VMEM; their dots run at the MXU's rate and move only Q, K, V, the output, its gradient and the "
                "softmax's row statistics through HBM.",)
    if asked:
        return ("Flash attention asked, but no attention scores were found (no batched dot keeping a sequence "
                "dimension of both operands): nothing priced as the kernel.",)
    return ()


def _memory(module: HloModule, memory: Mapping[str, int] | None, hw: Any, target: str,
            notes: list[str], flash: Any = None,
            host: Mapping[str, frozenset[int]] | None = None) -> Mapping[str, int] | None:
    """The per-device memory the report states: libtpu's own analysis on a TPU target; on the cpu target for a
    TPU, the estimate of the TPU's memory (`analyzer.analysis.tpumemory`), the CPU compiler's temporaries kept
    beside it as `cpu_compiler_temp_bytes`; otherwise what the compiler said. `flash`: the scores of an attention
    the TPU runs as a flash kernel (`ProgramCosts.flash`), kept in VMEM by the kernel; `host`: the loop-state
    elements a remat policy offloads to host memory (`offload.host_loop_state`)."""
    if target != "cpu" or getattr(hw, "kind", "") != "tpu":
        return memory
    from analyzer.analysis.tpumemory import estimate_tpu_memory, vmem_budget

    estimate = estimate_tpu_memory(module, flash, host)
    if estimate is None:
        return memory
    estimate = estimate.in_vmem(vmem_budget(hw))
    # (beyond 1,024 devices the cpu target stops after partitioning: no CPU compiler figures, the estimate stands)
    cpu = None if memory is None else memory.get("cpu_compiler_temp_bytes", memory.get("temp_bytes"))
    notes.append("Memory per device: an estimate of the TPU's (its layouts' padding, the TPU compiler's fusion, "
                 "buffers live over the program's order), not the CPU compiler's buffer assignment "
                 "(cpu_compiler_temp_bytes); generated code not counted"
                 + ("; attention's S x S scores and their stacks left out, as the flash kernel never writes them to "
                    "HBM" if flash is not None else "")
                 + ("; the activations the remat policy offloads kept in host memory, not HBM" if host else "") + ".")
    if estimate.vmem_temp_bytes:
        notes.append(f"The temporaries' peak ({format_bytes(estimate.vmem_temp_bytes)}) fits in the "
                     f"{format_bytes(vmem_budget(hw))} of a {hw.name} TensorCore's VMEM that the TPU compiler "
                     "may keep them in (memory-space assignment), so none are counted in HBM (vmem_temp_bytes).")
    return {**estimate.as_memory(), **({"cpu_compiler_temp_bytes": int(cpu)} if cpu is not None else {})}


def _per_slice_program(lowered: Any) -> int | None:
    """The partitions of the final HLO when libtpu compiled a multi-slice target into the program of one
    slice (fewer partitions than the mesh has devices), else None."""
    import re

    from analyzer.compile.lower import parse_target

    if lowered.platform != "tpu" or parse_target(lowered.target).num_slices == 1:
        return None
    m = re.search(r"num_partitions=(\d+)", lowered.optimized_hlo.split("\n", 1)[0])
    partitions = int(m.group(1)) if m else 1
    return partitions if partitions != lowered.mesh.size else None


@one_call
def analyze_hlo(
    text_or_path: str | os.PathLike[str],
    mesh: Any = None,
    hardware: str | HardwareSpec = "tpu-v5e",
    topology: str | None = None,
    config: Any = None,
    model: str = "topology",
    xla_flags: Any = None,
) -> Report:
    """Report the collectives of an HLO dump.

    Args:
      text_or_path: HLO text, a file, or an `--xla_dump_to` folder (the after-SPMD-partitioning module if
        present, else the final optimized module; the notes say which, and `Report.warnings` says which
        collectives a backend-final module may have rewritten: `backend_final_warning`).
      mesh: the mesh the program was compiled for: a `Mesh`, dict or "data=4,model=2". None: axes are
        inferred from the collectives' device groups and named `axis_0, axis_1, ...` major to minor
        (`devices` when no structure shows), with a note.
      hardware, topology, config, model: as for `analyze`.
      xla_flags: the XLA flags the dumped program ran with ("--xla_a=true ...", a list or a dict; see
        `analyzer.compile.xlaflags.parse_xla_flags`): read by the step model's overlap model (docs/step.md, "The
        user's XLA flags") and kept as `Report.analysis.xla_flags`.
    Returns:
      `Report` with target "dump".
    Raises:
      AnalyzerError: unreadable path, HLO syntax errors (`HloSyntaxError` with line and column), a mesh that
        does not match the module's device count.
    """
    from analyzer.analysis.graph import CallGraph
    from analyzer.hlo.parser import parse_hlo
    from analyzer.analysis.mapping import mesh_from_any
    from analyzer.rules.config import as_config

    config = as_config(config)
    notes: list[str] = []
    path: str | None = None
    if isinstance(text_or_path, os.PathLike) or (isinstance(text_or_path, str) and "\n" not in text_or_path
                                                  and len(text_or_path) < 4096 and "HloModule" not in text_or_path):
        p = Path(text_or_path)
        if p.is_dir():
            chosen, why = pick_dump_file(p)
            notes.append(f"Read {chosen.name} from the dump folder {p}: {why}.")
            p = chosen
        elif not p.exists():
            raise AnalyzerError(f"HLO input {str(p)!r} is neither HLO text nor an existing file or folder; give "
                                "the text, a .txt/.hlo file, or an --xla_dump_to folder")
        try:
            text = p.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise AnalyzerError(f"cannot read HLO file {str(p)!r}: {e}") from None
        path = str(p)
    else:
        text = str(text_or_path)
    # Dumps may come from another XLA version: opcodes and attributes this one does not know are kept raw
    # (lenient parse) and named in the warnings (`build_report`), rather than refusing the whole dump.
    # Read lazily: the entry and the computations it runs as code are parsed in full (the call graph parses
    # them), fusion bodies only as far as the analysis asks (docs/analysis.md, "What `analyze_hlo` parses of a
    # dump").
    module = parse_hlo(text, path=path, lenient=True, lazy=True)
    graph = CallGraph.build(module)  # (the parse checked what a full parse checks of the module)
    info = mesh_from_any(mesh)
    from analyzer.compile.xlaflags import parse_xla_flags

    flags = parse_xla_flags(xla_flags, where="xla_flags")
    context = {"lowered": None, "in_shardings": None, "out_shardings": None, "args": None, "config": config,
               "hlo_path": path, "xla_flags": flags or None}
    final = (path is not None and Path(path).name.endswith("after_optimizations.txt")) \
        or module.attributes.get("is_scheduled") == "true"
    warning = backend_final_warning(module) if final else None
    return build_report(module, mesh=info, hardware=hardware, topology=topology, device_coords=None,
                        target="dump", notes=notes, memory=None, name=module.name, context=context, config=config,
                        model=model, graph=graph, warnings=[warning] if warning else [])


# What a backend's passes make of the SPMD partitioner's collectives, by the opcode left in the final module.
_REWRITES = {
    "all-reduce": "may be reduce-scatters or all-gathers the backend decomposed into all-reduce (the CPU backend "
                  "does), or several combined into one",
    "all-gather": "may be several combined into one",
    "reduce-scatter": "may be several combined into one",
    "all-to-all": "may be decomposed or combined",
    "collective-permute": "may be combined or split into send/recv",
}
_REWRITTEN_OPS = tuple(sorted({*_REWRITES, *(f"{k}-start" for k in _REWRITES)}))
_SPMD_DUMP_FLAGS = "XLA_FLAGS='--xla_dump_to=DIR --xla_dump_hlo_as_text --xla_dump_hlo_pass_re=spmd-partitioning'"


def backend_final_warning(module: HloModule) -> str | None:
    r"""The warning for a module that is the backend's final one (scheduled, `*after_optimizations.txt`)
    rather than the one right after SPMD partitioning: which of its collectives the backend may have rewritten,
    counted from the module, and the dump flags that give the SPMD module. None when it has no collectives.

    Example:
      >>> from analyzer.hlo.parser import parse_hlo
      >>> m = parse_hlo("HloModule m, is_scheduled=true\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
      ...               "  ROOT c = f32[] add(a, b)\n}\nENTRY e {\n  p = f32[8] parameter(0)\n"
      ...               "  ROOT r = f32[8] all-reduce(p), replica_groups={{0,1}}, to_apply=add\n}\n")
      >>> backend_final_warning(m).split(":")[0]
      "Only the backend's final module was read (no module from right after SPMD partitioning)"
    """
    counts: dict[str, int] = {}
    starts = combined = 0
    for comp in module.computations:
        for inst in comp.select(*_REWRITTEN_OPS):  # (a lazily parsed module's fusion bodies: their lines only)
            op = inst.opcode
            base = op[:-6] if op.endswith("-start") else op
            counts[base] = counts.get(base, 0) + 1
            starts += op != base
            shape = inst.shape
            if op == base and shape is not None and shape.is_tuple and len(shape.tuple_shapes) > 1:
                combined += 1
    if not counts:
        return None
    kinds = "; ".join(f"{n} {k} ({_REWRITES[k]})" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    extra = []
    if combined:
        extra.append(f"{combined} tuple-shaped (several operands in one op, as the backend's combiners make)")
    if starts:
        extra.append(f"{starts} in async start/done form")
    return (f"Only the backend's final module was read (no module from right after SPMD partitioning): the "
            f"backend's passes may have rewritten its collectives, so their kinds, counts and bytes can differ from "
            f"what the partitioner asked for and from what the priced hardware would run. Here: {kinds}" + (f"; {', '.join(extra)}" if extra else "")
            + f". For the backend-neutral module, dump with {_SPMD_DUMP_FLAGS} and pass DIR.")


def _lenient_warnings(module: HloModule, shown: int = 5) -> list[str]:
    """One warning for what the lenient parse kept raw (unknown opcodes or attributes, each with its line), naming
    the first few and the installed jax: the module may come from a newer XLA than this version knows."""
    kept = list(dict.fromkeys(module.notes))
    if not kept:
        return []
    from importlib.metadata import PackageNotFoundError, version

    try:
        jax = f"jax {version('jax')}, jaxlib {version('jaxlib')}"
    except PackageNotFoundError:
        jax = "no jax installed"
    more = f" and {len(kept) - shown} more" if len(kept) > shown else ""
    where = f" in {module.path}" if module.path else ""
    return [f"{len(kept)} HLO construct(s){where} that this hlo-analyzer does not know ({jax} installed; a dump "
            f"may come from another version) were kept as written and not analysed: {'; '.join(kept[:shown])}"
            f"{more}. Figures that depend on them (their FLOPs, bytes, any collective inside them) are missing; "
            "every other figure is computed."]


def reprice(report: Report, hardware: str | HardwareSpec | None = None, topology: str | None = None,
            model: str | None = None) -> Report:
    """The same collectives priced on other hardware, topology or cost model, without recompiling.

    Args:
      report: a report from `analyze` or `analyze_hlo` (it carries its module in `report.analysis`).
      hardware: new hardware: a name, a spec file, a `HardwareSpec` or a dict in the spec files' schema
        (default: the report's).
      topology: new slice (default: the smallest slice of the new hardware that holds the mesh).
      model: "topology" or "ideal" (default: the report's).
    Returns:
      A new `Report`; diagnostics are recomputed by the rules.

    Example:
        >>> v5p = reprice(report, hardware="tpu-v5p")
        >>> v5p.totals.comm_seconds < report.totals.comm_seconds     # v5p's links are faster than v5e's
        True
    """
    if not isinstance(report, Report):
        what = ("a report's JSON form (it carries no HLO module to reprice; reanalyse the program or its dump)"
                if isinstance(report, Mapping) else f"a {type(report).__name__}")
        raise AnalyzerError(f"reprice takes a Report from analyze() or analyze_hlo(), not {what}")
    ctx = report.analysis
    module = ctx.module
    if module is None:
        raise AnalyzerError("this report carries no HLO module (was it rebuilt from JSON?); reprice needs a report "
                            "from analyze() or analyze_hlo()")
    hw = hardware if hardware is not None else (ctx.hardware or report.hardware)
    mdl = model or ctx.cost_model
    lowered = ctx.lowered
    same_hw = hardware is None or _hw_name(hw) == report.hardware
    coords = lowered.device_coords if (lowered is not None and same_hw and topology is None) else None
    notes = [n for n in report.notes if not n.startswith("Priced ")]
    context = {"lowered": ctx.lowered, "in_shardings": ctx.in_shardings, "out_shardings": ctx.out_shardings,
               "args": ctx.args, "config": ctx.config, "hlo_path": ctx.hlo_path, "xla_flags": ctx.xla_flags}
    return build_report(module, mesh=report.mesh, hardware=hw, topology=topology, device_coords=coords,
                        target=report.target, notes=notes, memory=report.memory, name=report.name, context=context,
                        config=ctx.config, model=mdl, graph=ctx.graph, warnings=list(report.warnings))


# ---------------------------------------------------------------------- dump folders
def pick_dump_file(folder: Path) -> tuple[Path, str]:
    """The module to read from an `--xla_dump_to` folder, and why.

    Preference: after SPMD partitioning (backend-neutral collectives), then the final optimized module, then
    any HLO text file. Among several modules, the largest file (the main program, not a helper kernel).

    Raises:
      AnalyzerError: no HLO text in the folder.
    """
    files = [f for f in folder.iterdir() if f.is_file() and f.suffix in (".txt", ".hlo")]
    spmd = [f for f in files if "after_spmd-partitioning" in f.name or "after_tpu-spmd-partitioning" in f.name]
    final = [f for f in files if f.name.endswith("after_optimizations.txt")]
    if spmd:
        return max(spmd, key=lambda f: f.stat().st_size), "the module right after SPMD partitioning"
    if final:
        return max(final, key=lambda f: f.stat().st_size), "the final optimized module (no after-SPMD dump found)"
    hlo = [f for f in files if _looks_like_hlo(f)]
    if hlo:
        return max(hlo, key=lambda f: f.stat().st_size), "the largest HLO text file (no pass-named dump found)"
    raise AnalyzerError(f"dump folder {str(folder)!r} holds no HLO text; dump with XLA_FLAGS='--xla_dump_to=DIR "
                        "--xla_dump_hlo_as_text' (and --xla_dump_hlo_pass_re=spmd-partitioning for the "
                        "backend-neutral module)")


def _looks_like_hlo(f: Path) -> bool:
    try:
        with f.open() as fh:
            head = fh.read(4096)
    except (OSError, UnicodeDecodeError):
        return False
    return "HloModule" in head


# ---------------------------------------------------------------------- the report
def _hw_name(hw: Any) -> str:
    return hw if isinstance(hw, str) else getattr(hw, "name", str(hw))


@one_call
def build_report(
    module: HloModule,
    *,
    mesh: MeshInfo | None,
    hardware: Any,
    topology: Any,
    device_coords: Sequence[Sequence[int]] | None,
    target: str,
    notes: list[str],
    memory: Mapping[str, int] | None,
    name: str,
    context: Mapping[str, Any],
    config: Any = None,
    model: str = "topology",
    graph: CallGraph | None = None,
    rules: bool = True,
    warnings: Sequence[str] = (),
) -> Report:
    """Extract, map and price the collectives of a parsed module and assemble the `Report`; then run the
    rules (`rules=False` leaves `diagnostics` empty)."""
    from analyzer.analysis.collectives import extract_collectives
    from analyzer.analysis.context import AnalysisContext
    from analyzer.analysis.devices import device_count
    from analyzer.analysis.dots import extract_dots
    from analyzer.analysis.graph import CallGraph
    from analyzer.theory.hardware import load_hardware
    from analyzer.analysis.mapping import infer_mesh

    if model not in _MODELS:
        raise AnalyzerError(f"cost model {model!r} is unknown; {valid_choices(model, _MODELS, what='models')}")
    hw = load_hardware(hardware)
    g = graph or CallGraph.build(module)
    devices = device_count(module)
    n_devices = devices.devices
    raw = extract_collectives(module, g, n_devices)
    notes = list(notes)
    if devices.note:
        notes.append(devices.note)
    if mesh is None:
        mesh = infer_mesh([c.groups for c in raw if c.kind != "collective-permute"], n_devices)
        notes.append(f"No mesh was given: axes named from the collectives' device groups as {mesh} (major to "
                     "minor); pass mesh='name=size,...' for your own names.")
    elif mesh.size != n_devices and n_devices > 1:
        raise MeshError(f"mesh {mesh} has {mesh.size} devices but the HLO module {module.name!r} was partitioned "
                        f"for {n_devices}; give the mesh it was compiled with")
    unknown = sorted({k for k, t in g.trip_counts.items() if t.source == "unknown"})
    if unknown:
        notes.append("Trip count unknown for loop(s) " + ", ".join(f"%{w}" for _, w in unknown)
                     + "; counted once per step.")
    topo, topo_note = _topology(hw, mesh, topology, device_coords, target)
    notes.append(topo_note)
    from analyzer.analysis.mapping import logical_names
    from analyzer.analysis.origins import map_collective

    declared = logical_names(context.get("args") or ())  # Flax's logical axis names, by argument path
    warnings = list(warnings)
    before = _before_partitioning(context.get("lowered"), warnings)
    if before is not None and not module.argument_shardings:
        object.__setattr__(module, "argument_shardings", _argument_shardings(before))
    rows = [map_collective(c, module, g, mesh, declared, before) for c in raw]
    rows, price_note = _price_all(rows, topo, model)
    if price_note:
        notes.append(price_note)
    dots = extract_dots(module, g)
    if any(c.branch for c in rows):
        notes.append("Collectives inside conditional branches are counted as if their branch runs; totals take "
                     "the costliest branch of each conditional.")
    from analyzer.analysis.costs import ProgramCosts
    from analyzer.analysis.step import predict_step

    chips = mesh.size if mesh is not None and mesh.size > 1 else None
    flops = _model_flops(before, mesh, module if (chips or 1) == 1 else None, g)
    if flops is None and chips:
        notes.append("Model FLOPs counted as the partitioned program's FLOPs times the chips (no program before "
                     "partitioning was read): work a plan repeats on several chips counts as model work.")
    # what each instruction costs on `hw`, asked by all that follows
    costs = ProgramCosts(module, dots, hw, flash_attention=bool(context.get("flash_attention")))
    notes.extend(_flash_note(costs, bool(context.get("flash_attention"))))
    host, host_state = _host(before, module, g, hw, mesh, chips)
    step = predict_step(module, g, rows, dots, hw, topo, chips=chips, model=flops, costs=costs,
                        xla_flags=context.get("xla_flags"), host=host)
    notes.extend(n for n in (step.flags_note, step.axes_note) if n)
    if host is not None:
        from analyzer.analysis.offload import HOST_TRACK

        notes.append(host.note(step.exposed_by_axis.get(HOST_TRACK, 0.0)))
    totals = _totals(rows, dots, costs, step)
    collectives_df = _collectives_frame(rows, step.exposed_rows)
    dots_df = _dots_frame(dots, module, costs, flops, step.chips)
    warnings = (*warnings, *_lenient_warnings(module))  # (after the analysis: what it read of a lazy parse counts)
    memory = _memory(module, memory, hw, target, notes, flash=costs.flash, host=host_state)
    analysis = AnalysisContext(module=module, graph=g, hardware=hw, topology=topo, cost_model=model,
                               collectives=tuple(rows), dots=tuple(dots), step=step, model_flops=flops, costs=costs,
                               **context)
    report = Report(
        collectives=collectives_df, dots=dots_df, totals=totals, hlo=module, mesh=mesh, hardware=hw.name,
        topology=_describe_topology(topo), target=target, notes=tuple(notes), memory=memory, name=name,
        analysis=analysis, warnings=tuple(warnings),
    )
    return _run_rules(report, config) if rules else report


def _host(before: HloModule | None, module: HloModule, graph: CallGraph, hw: HardwareSpec, mesh: MeshInfo | None,
          chips: int | None) -> tuple[Any, Mapping[str, frozenset[int]]]:
    """What the program keeps in host memory, read from the program before partitioning with one call graph of it
    (`analyzer.analysis.offload`): its host-offload copies, for the overlap model of an unscheduled module (a
    scheduled one has its copies in its own schedule), or None; and the loop-state elements of `module` a remat
    policy keeps in host memory, for the memory estimate."""
    if before is None:
        return None, {}
    from analyzer.analysis.graph import CallGraph
    from analyzer.analysis.offload import host_loop_state, host_offload, places_on_host

    if not places_on_host(before):
        return None, {}
    before_graph = CallGraph.build(before)
    copies = None
    if module.attributes.get("is_scheduled", "false") != "true":
        sizes = dict(zip(mesh.axis_names, mesh.axis_sizes)) if mesh is not None else {}
        copies = host_offload(before, module, graph, hw, sizes, chips or 1, before_graph=before_graph)
    return copies, host_loop_state(before, module, graph, before_graph=before_graph)


def _before_partitioning(lowered: Any, problems: list[str]) -> HloModule | None:
    """The program jax handed XLA (`Lowered.global_hlo`), read leniently; None for a dump, or when it cannot be
    read (a newer XLA's construct there costs what is read from it, never the analysis: `problems` says so)."""
    text = getattr(lowered, "global_hlo", "") if lowered is not None else ""
    if not text:
        return None
    from analyzer.hlo.parser import parse_hlo

    try:
        return parse_hlo(text, path=f"<{lowered.name or 'module'} before partitioning>", lenient=True)
    except AnalyzerError as e:
        problems.append(f"The program before partitioning could not be read, so model FLOPs (and MFU) count the "
                        f"partitioned program's FLOPs instead, and arguments' shardings come from the partitioned "
                        f"program alone: {e}")
        return None


def _argument_shardings(before: HloModule | None) -> dict[int, str]:
    """The `sharding=` of each entry parameter of the program before partitioning, by parameter number: jax 0.11+'s
    partitioned program no longer carries them, and the partitioner keeps the entry's parameter numbers."""
    if before is None:
        return {}
    return {i.parameter_number: raw for i in before.entry.select("parameter")
            if (raw := i.attr("sharding")) is not None and i.parameter_number is not None}


def _model_flops(before: HloModule | None, mesh: MeshInfo | None, single: HloModule | None,
                 graph: CallGraph) -> Any:
    """The model's FLOPs (`analyzer.analysis.dots.model_flops`) on the program jax handed XLA (`before`), or on
    `single` (the module of a one-device program, which is that program); None when neither is at hand (a dump)."""
    from analyzer.analysis.dots import model_flops

    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes)) if mesh is not None else {}
    if single is not None:
        return model_flops(single, sizes, graph)
    return model_flops(before, sizes) if before is not None else None


def _run_rules(report: Report, config: Any) -> Report:
    """Attach the rules' findings, and the note saying how many were dropped as negligible."""
    from analyzer.rules import apply_rules

    return apply_rules(report, config)


def _describe_topology(topo: Any) -> str:
    if topo is None:
        return ""
    describe = getattr(topo, "describe", None)
    return describe() if callable(describe) else str(topo)


def _trim_coords(coords: Sequence[Sequence[int]], hw: HardwareSpec) -> list[tuple[int, ...]]:
    """TPU devices report 3 coordinates even on 2-D tori (v5e, v6e: z is always 0): keep the torus's own."""
    rank = hw.ici.rank if hw.ici is not None else len(coords[0])
    out = [tuple(int(v) for v in c) for c in coords]
    while out and len(out[0]) > rank and len({c[-1] for c in out}) == 1:
        out = [c[:-1] for c in out]
    return out


def _topology(hw: HardwareSpec, mesh: MeshInfo, topology: Any, coords: Any, target: str) -> tuple[Any, str]:
    """The topology collectives are priced on, and a note saying how the mesh was placed.

    In order of precedence: the TPU devices' own coords (tpu targets); a placement written in the topology
    string (`SLICE@in-order`, `SLICE@AXIS=PHYS,...`); where `jax.make_mesh` would put each mesh position on
    the slice (given, or else the single slice of that many chips), computed with jax's own mesh utilities
    over stand-in devices (`analyzer.compile.placement`); the axes in order when jax has no placement for
    the hardware (GPUs, a spec without `device_kind`). On several slices over DCN, which `jax.make_mesh`
    refuses, jax's hybrid mesh (`mesh_utils.create_hybrid_device_mesh`, the major mesh axes over DCN)
    takes its place, from the TPU devices or stand-ins alike."""
    from analyzer.compile.lower import parse_target
    from analyzer.compile.placement import placed_topology
    from analyzer.theory.topology import Topology, parse_slice, product_slice, smallest_slice, split_placement

    tpu = parse_target(target) if target.startswith("tpu:") else None  # else "cpu", or "dump" (analyze_hlo)
    if coords is not None and tpu is not None and tpu.generation != hw.topology_prefix:
        coords = None  # compiled for another TPU generation: its coords say nothing about this hardware
    if coords is not None and topology is None and tpu is not None and tpu.num_slices > 1:
        # several slices: (slice_index, torus coords) on the target's own slices, the DCN the major axis
        sl = parse_slice(tpu.topology, hw)
        topo = Topology.for_mesh(hw, mesh.axis_names, mesh.axis_sizes, topology=sl, device_coords=coords,
                                 declared=True)
        return topo, (f"Priced on {hw.name} with the slice index and torus coordinates of the TPU device at each "
                      f"mesh position (placed as jax's hybrid mesh places them, mesh_utils."
                      f"create_hybrid_device_mesh with the major axes over DCN, unless the mesh given was one of "
                      f"the topology's devices): {_describe_topology(topo)}.")
    if coords is not None and topology is None:
        coords = _trim_coords(coords, hw)
        topo = Topology.for_mesh(hw, mesh.axis_names, mesh.axis_sizes, device_coords=coords)
        return topo, f"Priced on {hw.name} with the TPU devices' torus coordinates: {_describe_topology(topo)}."
    spec = None
    if isinstance(topology, str):
        slice_text, spec = split_placement(topology)
    if spec is None:
        declared = topology is not None
        if declared:
            sl = topology if not isinstance(topology, str) else parse_slice(slice_text, hw)
        else:
            sl = product_slice(hw, mesh.size) or smallest_slice(hw, mesh.axis_sizes)
        placed = placed_topology(hw, sl, mesh.axis_names, mesh.axis_sizes, declared=declared)
        if placed is not None:
            topo, how = placed
            where = f"the declared slice {sl.name}" if declared else f"the {sl.name} slice of {mesh.size} chips"
            via = "" if how == "jax.make_mesh" else f" (jax.make_mesh refused this shape; placed by {how})"
            jax_way = "as jax.make_mesh would place it"
            if sl.networks[0] == "dcn":
                where = f"the declared slices {sl.name}"
                jax_way = "as jax's hybrid mesh would place it"
                via = (" (mesh_utils.create_hybrid_device_mesh, the major mesh axes over DCN)"
                       if how == "mesh_utils.create_hybrid_device_mesh" else
                       f" (jax's hybrid mesh cannot split these axes over {sl.dims[0]} slices; placed by {how})")
            return topo, (f"Priced on {hw.name} with the mesh placed on {where} {jax_way}"
                          f"{via}; write the topology as '{sl.name}@in-order' or '{sl.name}@AXIS=PHYS,...' to "
                          f"choose another placement: {_describe_topology(topo)}.")
    topo = Topology.for_mesh(hw, mesh.axis_names, mesh.axis_sizes, topology=topology)
    if topology is None:
        how = ("the mesh laid on the smallest slice of the hardware that holds it, axes in order"
               + (" (jax.make_mesh has no placement for this hardware)" if hw.kind == "tpu" else ""))
    elif spec == "in order":
        how = f"the declared topology {topology}, axes in order"
    elif isinstance(spec, dict):
        how = f"the declared topology and mapping {topology}"
    else:
        how = f"the declared topology {topology}, axes in order (jax.make_mesh has no placement for it)"
    return topo, f"Priced on {hw.name} with {how}: {_describe_topology(topo)}."


# ---------------------------------------------------------------------- pricing
def _price_all(rows: list[Collective], topo: Any, model: str) -> tuple[list[Collective], str]:
    try:
        from analyzer.theory.cost import collective_cost, group_cost
    except ImportError:  # the cost model is a separate module; without it the rows stay unpriced
        return [replace(c, cost=None) for c in rows], "No cost model available (analyzer.theory.cost); seconds are 0."

    out = []
    # Rows that ask the same price get the same (frozen) Cost: an unrolled step repeats each layer's
    # collectives, and each pricing walks the groups' geometry.
    priced: dict[tuple, Any] = {}
    for c in rows:
        pairs = c.pairs if c.kind == "collective-permute" and not c.permute_steps else None
        if not c.axes or (c.group_size <= 1 and not pairs):
            out.append(replace(c, cost=None))  # nothing leaves the device
            continue
        key = (c.kind, c.bytes, tuple(c.axes), pairs, c.regular, None if c.regular else c.groups)
        try:
            cost = priced.get(key)
        except TypeError:  # an unhashable part (a list of groups built by hand): price it alone
            key, cost = None, None
        if cost is None:
            if c.regular:
                cost = collective_cost(c.kind, c.bytes, c.axes, topo, model=model, pairs=pairs)
            elif len({len(grp) for grp in c.groups}) == 1:
                cost = group_cost(c.kind, c.bytes, [list(grp) for grp in c.groups], topo, model=model,
                                  pairs=pairs)
            else:
                cost = collective_cost(c.kind, c.bytes, c.axes, topo, model=model, pairs=pairs)
            if key is not None:
                priced[key] = cost
        out.append(replace(c, cost=cost))
    return out, ""


def _seconds(c: Collective) -> float:
    return float(c.cost.seconds) if c.cost is not None else 0.0


def _totals(rows: list[Collective], dots: list[Dot], costs: ProgramCosts, step: StepPrediction) -> Totals:
    from analyzer.analysis.graph import branch_sum  # each conditional counted by its costliest branch

    comm = branch_sum([(c.branch, _seconds(c) * c.count) for c in rows])
    by_kind: dict[str, float] = {}
    by_axis: dict[str, float] = {}
    for kind in sorted({c.kind for c in rows}):
        by_kind[kind] = branch_sum([(c.branch, _seconds(c) * c.count) for c in rows if c.kind == kind])
    for label in sorted({_axis_key(c) for c in rows}):
        by_axis[label] = branch_sum([(c.branch, _seconds(c) * c.count) for c in rows if _axis_key(c) == label])
    comm_bytes = round(branch_sum([(c.branch, float(c.bytes) * c.count) for c in rows]))
    flops = branch_sum([(d.branch, d.flops * d.count) for d in dots])
    matmul = branch_sum([(d.branch, costs.dot_cost(d).peak_seconds * d.count) for d in dots])
    from analyzer.analysis.calibration import interval

    bars = interval(step.step_seconds, step.mfu, costs.hw.name)  # (the calibration runs' residuals: docs/step.md)
    ranges = {} if bars is None else {"step_low": bars.step_low, "step_high": bars.step_high,
                                      "mfu_low": bars.mfu_low, "mfu_high": bars.mfu_high, "range_basis": bars.basis}
    return Totals(**ranges, comm_seconds=comm, compute_seconds=step.compute_seconds, by_kind=by_kind, by_axis=by_axis,
                  comm_bytes=comm_bytes, flops=flops, step_seconds=step.step_seconds,
                  exposed_comm_seconds=step.exposed_comm_seconds, exposed_by_axis=dict(step.exposed_by_axis),
                  matmul_seconds=matmul, memory_bound_seconds=step.memory_bound_seconds,
                  model_flops=step.model_flops, mfu=step.mfu, hfu=step.hfu, bubble_seconds=step.bubble_seconds)


def _axis_key(c: Collective) -> str:
    return ",".join(c.axes) if c.axes else "(none)"


# ---------------------------------------------------------------------- frames
def _collectives_frame(rows: list[Collective], exposed: Sequence[float] = ()) -> pd.DataFrame:
    import pandas as pd

    from analyzer.analysis.mapping import op_label

    records = []
    for k, c in enumerate(rows):
        cost = c.cost
        seconds = float(cost.seconds) if cost is not None else 0.0
        records.append({
            "kind": c.kind, "axes": tuple(c.axes), "notation": c.notation, "dtype": c.dtype, "bytes": int(c.bytes),
            "count": _int_if_whole(c.count), "seconds": seconds,
            "regime": getattr(cost, "regime", "") if cost is not None else "",
            "op_name": c.op_name, "source": c.source, "total_seconds": seconds * c.count,
            "per_device_bytes": int(c.per_device_bytes), "group_size": c.group_size, "num_groups": c.num_groups,
            "sync": c.sync, "overlapped": c.overlapped, "permute_steps": c.permute_steps, "pass_": c.pass_,
            "computation": c.computation, "instruction": ",".join(c.instructions), "hlo_line": c.hlo_line,
            "hops": int(getattr(cost, "hops", 0) or 0) if cost is not None else int(c.extra.get("hops", 0)),
            "formula": getattr(cost, "formula", "") if cost is not None else "",
            "original_ops": c.original_ops, "op": c.extra.get("op") or op_label(c.op_name),
            "global_shape": tuple(c.global_shape), "branch": _branch_text(c.branch),
            "context": c.extra.get("context", ""), "array": c.extra.get("array", ""),
            "declared": c.extra.get("declared", ""),
            "exposed_seconds": float(exposed[k]) if k < len(exposed) else 0.0,
        })
    cols = list(COLLECTIVE_COLUMNS)
    return pd.DataFrame.from_records(records, columns=cols) if records else pd.DataFrame(columns=cols)


def _branch_text(branch: Sequence[tuple[str, int]]) -> str:
    return "/".join(f"%{cond}[{i}]" for cond, i in branch)


def _int_if_whole(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


def _dots_frame(dots: list[Dot], module: HloModule, costs: ProgramCosts, model: Any = None,
                chips: int = 1) -> pd.DataFrame:
    import pandas as pd

    from analyzer.analysis.dots import executed_by_op, op_key
    from analyzer.analysis.mapping import pass_of, user_frame

    executed = executed_by_op(dots, module, chips) if model is not None else {}
    records = []
    for d in dots:
        md = d.instruction.metadata
        shapes = [o.shape for o in d.instruction.operands]
        records.append({
            "instruction": d.instruction.name, "computation": d.computation,
            "op_name": (md.op_name or "") if md else "",
            "source": user_frame(module, md.stack_frame_id if md else None, md.source_file if md else None,
                                 md.source_line if md else None),
            "flops": d.flops, "count": _int_if_whole(d.count), "seconds": costs.dot_cost(d).peak_seconds,
            "lhs_shape": str(shapes[0]) if shapes and shapes[0] is not None else "",
            "rhs_shape": str(shapes[1]) if len(shapes) > 1 and shapes[1] is not None else "",
            "out_shape": str(d.instruction.shape), "contracting": tuple(d.contracting), "notation": "",
            "dtype": d.dtype, "pass_": pass_of(md.op_name if md else None),
            "redundancy": (model.redundancy(op_key(d, module), executed.get(op_key(d, module), 0.0))
                           if model is not None else math.nan),
        })
    cols = list(DOT_COLUMNS)
    return pd.DataFrame.from_records(records, columns=cols) if records else pd.DataFrame(columns=cols)
