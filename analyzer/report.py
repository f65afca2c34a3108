"""The result of an analysis: what `analyzer.analyze` and `analyzer.analyze_hlo` return.

A `Report` is data. Analysis code builds it (analyzer.analysis), rules add diagnostics to it
(analyzer.rules), renderers turn it into text, JSON, Markdown, HTML and SARIF (analyzer.render). It never
analyses anything itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas and the IR are heavy or circular to import here
    import pandas as pd

    from analyzer.diagnostics import Diagnostic
    from analyzer.hlo.ir import HloModule

__all__ = ["COLLECTIVE_COLUMNS", "DOT_COLUMNS", "MeshInfo", "Totals", "Report", "REPORT_SCHEMA_VERSION"]

REPORT_SCHEMA_VERSION = "1"

# Columns of Report.collectives, in order. The first ten are the public API of DESIGN.md.
COLLECTIVE_COLUMNS: tuple[str, ...] = (
    "kind",            # all-gather | reduce-scatter | all-reduce | all-to-all | collective-permute | ...
    "axes",            # tuple of user mesh axis names, major to minor ("X", "Y"); sub-axes as "X:(pre)size"
    "notation",        # e.g. "AllGather_Y: [E_Y, F] -> [E, F]"
    "dtype",           # element type of the data moved, e.g. "bf16"
    "bytes",           # V of the chapter: bytes of the full (gathered / unreduced) array the collective moves
    "count",           # executions per call of the function (loop trip counts multiplied in)
    "seconds",         # predicted seconds of one execution on the target hardware and topology
    "regime",          # "bandwidth" | "latency"
    "op_name",         # the jax op that caused it (metadata op_name)
    "source",          # user "file:line", or "" when unknown
    # More detail, for rules and reports:
    "total_seconds",   # seconds * count
    "per_device_bytes",  # bytes each device sends/holds of the operand (shard size)
    "group_size",      # devices per replica group
    "num_groups",      # number of replica groups
    "sync",            # False for -start/-done pairs and async wrappers
    "overlapped",      # True when the compiler overlaps it with compute (collective matmul, async fusion)
    "permute_steps",   # for decomposed rings: how many collective-permute steps implement it
    "pass_",           # "forward" | "backward" | "" (from op_name transpose/jvp markers)
    "computation",     # HLO computation holding it
    "instruction",     # HLO instruction name(s), comma-separated for merged forms
    "hlo_line",        # line of the instruction in the HLO text
    "hops",            # hops on the longest path (cost model)
    "formula",         # the cost formula used, human readable
    "original_ops",    # e.g. "all-reduce + dynamic-slice" when the row was recognised from a pattern
    "op",              # the jax primitive that caused it (last element of op_name: dot_general, psum...)
    "global_shape",    # dims of the whole array per device group, as the notation's letters describe it
    "branch",          # conditional branches on its call path ("%cond[1]"), "" when none
)

# Columns of Report.dots: every dot/convolution with its FLOPs, for the roofline and the matmul rules.
DOT_COLUMNS: tuple[str, ...] = (
    "instruction", "computation", "op_name", "source", "flops", "count", "seconds",
    "lhs_shape", "rhs_shape", "out_shape", "contracting", "notation", "dtype",
)


@dataclass(frozen=True)
class MeshInfo:
    """The user's mesh: axis names and sizes (major to minor) and the device id at each mesh position."""

    axis_names: tuple[str, ...]
    axis_sizes: tuple[int, ...]
    device_ids: tuple[int, ...]  # mesh.devices.flat device ids, row-major
    axis_types: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        n = 1
        for s in self.axis_sizes:
            n *= s
        return n

    @property
    def shape(self) -> dict[str, int]:
        return dict(zip(self.axis_names, self.axis_sizes))

    def __str__(self) -> str:
        return ",".join(f"{n}={s}" for n, s in zip(self.axis_names, self.axis_sizes))


@dataclass(frozen=True)
class Totals:
    """Per-step totals. Seconds are predicted on the report's hardware and topology."""

    comm_seconds: float
    compute_seconds: float
    by_kind: Mapping[str, float] = field(default_factory=dict)
    by_axis: Mapping[str, float] = field(default_factory=dict)
    comm_bytes: int = 0
    flops: float = 0.0

    @property
    def comm_compute_ratio(self) -> float:
        return self.comm_seconds / self.compute_seconds if self.compute_seconds > 0 else float("inf")


@dataclass(frozen=True)
class Report:
    """One analysed program.

    Attributes:
      collectives: pandas DataFrame, one row per logical collective, columns `COLLECTIVE_COLUMNS`.
      dots: pandas DataFrame, one row per dot, columns `DOT_COLUMNS`.
      totals: `Totals`.
      hlo: the parsed `HloModule` the collectives were read from.
      mesh: `MeshInfo`, or None for a dump read without a mesh.
      hardware: name of the hardware spec used (e.g. "tpu-v5e").
      topology: how the mesh was laid on the hardware, in words (e.g. "v5e:4x2, X->x (ring 4, no wrap)").
      target: "cpu", "tpu:v5e:2x4", or "dump".
      diagnostics: findings of the rules (empty until rules ran).
      notes: sentences the reader needs (assumptions, e.g. the topology chosen for the cpu target).
      memory: per-device bytes from `compiled.memory_analysis()` when known.
      context: the live objects rules need; not serialised, not compared. Keys (see analyzer.analysis):
        "module", "graph", "hardware", "topology", "cost_model", "collectives" (records in row order, with
        their HLO instructions, dot, only_used_sharded, before/after), "dots", "mesh", "in_shardings",
        "out_shardings", "args", "lowered", "config", and "hlo_path" for dumps.
    """

    collectives: pd.DataFrame
    dots: pd.DataFrame
    totals: Totals
    hlo: HloModule | None
    mesh: MeshInfo | None
    hardware: str
    topology: str
    target: str
    diagnostics: Sequence[Diagnostic] = ()
    notes: Sequence[str] = ()
    memory: Mapping[str, int] | None = None
    name: str = ""
    context: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def with_diagnostics(self, diagnostics: Sequence[Diagnostic]) -> Report:
        return replace(self, diagnostics=tuple(diagnostics))

    def to_dict(self) -> dict[str, Any]:
        from analyzer.render import json as render_json

        return render_json.report_to_dict(self)

    def to_json(self, indent: int | None = 2) -> str:
        from analyzer.render import json as render_json

        return render_json.render(self, indent=indent)

    def to_markdown(self) -> str:
        from analyzer.render import markdown

        return markdown.render(self)

    def to_html(self) -> str:
        from analyzer.render import html

        return html.render(self)

    def to_text(self) -> str:
        from analyzer.render import terminal

        return terminal.render(self)
