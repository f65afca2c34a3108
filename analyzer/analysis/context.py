"""What an analysis keeps beside its report for the rules, `reprice` and the renderers: the live objects.

`Report.analysis` is an `AnalysisContext`: typed and frozen, not compared and never serialised. A report
rebuilt from JSON (`report_from_dict`) has an empty one, apart from `argument_rows`: it renders, but it cannot
be repriced or re-checked, and `reprice` and the rules that price alternatives say so with an
`AnalyzerError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from analyzer.analysis.collectives import Collective
    from analyzer.analysis.costs import ProgramCosts
    from analyzer.analysis.dots import Dot, ModelFlops
    from analyzer.analysis.graph import CallGraph
    from analyzer.hlo.ir import HloModule
    from analyzer.theory.hardware import HardwareSpec
    from analyzer.theory.topology import Topology

__all__ = ["AnalysisContext"]


@dataclass(frozen=True)
class AnalysisContext:
    """The live objects of one analysis (see analyzer.pipeline).

    Attributes:
      module: the parsed `HloModule` the collectives were read from.
      graph: its `CallGraph` (call sites, trip counts; `graph.users` / `graph.producer`).
      hardware: the `HardwareSpec` the report was priced on.
      topology: the `Topology` (mesh laid on the hardware) every collective was priced on.
      cost_model: "topology" or "ideal".
      collectives: the `Collective` records, in the order of `Report.collectives` rows (HLO instructions,
        `.dot`, `.only_used_sharded`, `.before` / `.after`, `.cost`, ...).
      dots: the `Dot` records, in the order of `Report.dots` rows.
      lowered: the `analyzer.compile.lower.Lowered` (None for dumps).
      in_shardings, out_shardings: the shardings `analyze` was given (pytrees), or None.
      args: the abstract arguments `analyze` was given, or None.
      config: the rules configuration the report was checked with, or None.
      hlo_path: the dump file read, for `analyze_hlo` on a path.
      argument_rows: the report's argument table rebuilt from JSON (`report_from_dict`), in place of `args`.
      model_flops: the model's FLOPs by op (`analyzer.analysis.dots.ModelFlops`), None when not counted.
      xla_flags: the user's XLA flags as `{name: value}` (`Lowered.xla_flags`), None when none were given.
      costs: what each instruction of `module` costs on `hardware` (`analyzer.analysis.costs.ProgramCosts`): the
        one place a dot's or any instruction's FLOPs, bytes and seconds are computed; None when read back from JSON.
      flash_attention: the program's attention is the TPU's flash kernel (`Lowered.flash_attention` or the option):
        the step priced it so, its S x S scores in VMEM, not HBM, where the scores were found (`costs.flash`;
        docs/step.md, "Flash attention").
    """

    module: HloModule | None = None
    graph: CallGraph | None = None
    hardware: HardwareSpec | None = None
    topology: Topology | None = None
    cost_model: str = "topology"
    collectives: tuple[Collective, ...] = ()
    dots: tuple[Dot, ...] = ()
    lowered: Any = None
    in_shardings: Any = None
    out_shardings: Any = None
    args: Any = None
    config: Any = None
    hlo_path: str | None = None
    argument_rows: tuple[Mapping[str, Any], ...] | None = None
    step: Any = None  # the analyzer.analysis.step.StepPrediction (timeline, exposure), None when read back from JSON
    model_flops: ModelFlops | None = None
    # The user's XLA flags ({name: value}, `--xla-flags` / `xla-flags`, `analyzer.compile.xlaflags`), empty when none:
    # the step model reads what they ask of the TPU compiler (async collective fusion, collective matmul, ...).
    xla_flags: Mapping[str, Any] | None = None
    costs: ProgramCosts | None = None
    # Whether the program's attention is the TPU's flash kernel (`Lowered.flash_attention`, or
    # `analyze_lowered(flash_attention=True)`; priced by analyzer.analysis.costs.FlashScores):
    flash_attention: bool = False
