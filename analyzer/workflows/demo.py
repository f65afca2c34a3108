"""`hlo-analyzer demo`: the whole product on a built-in model, in one command and under a minute.

It builds the template transformer's training step (analyzer.compile.models: attention and MLP blocks scanned over
the layers, backward pass and Adam update) sharded FSDP + tensor parallel over a mesh `data=4, model=2` of
8 fake CPU devices, audits it for a TPU v5e 4x2 slice exactly as `@analyzer.audit` would (compile, find
every collective, price it, run the rules), prints the plan, the collectives, the totals and the findings,
and writes the HTML report.

The slice is the one a user would lay this mesh on: 'data' (4) on the physical axis of 4 chips, 'model' (2)
on the axis of 2, each mesh axis on whole physical axes (what `analyzer.theory.topology.smallest_slice` picks for
this mesh). On a 2x4 slice, 'data' would straddle both physical axes and 'model' share one with it.

Nothing here is canned: change `--strategy`, `--hardware` or the sizes and every figure changes with them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from analyzer.compile.models import TransformerConfig
    from analyzer.analysis.report import Report

__all__ = ["DemoPlan", "DEFAULT_PLAN", "demo_model", "run_demo", "next_steps", "plan_from"]


@dataclass(frozen=True)
class DemoPlan:
    """What the demo audits.

    Attributes:
      strategy: a strategy of `analyzer.compile.models.STRATEGIES`.
      mesh: axis name -> size (8 devices: the CPU target's fake devices).
      hardware: the hardware spec the collectives are priced on.
      topology: the physical slice the mesh is laid on.
      target: where it is compiled ("cpu": fake devices, no accelerator needed).
    """

    strategy: str = "fsdp+tp"
    mesh: tuple[tuple[str, int], ...] = (("data", 4), ("model", 2))
    hardware: str = "tpu-v5e"
    topology: str | None = "v5e:4x2@data=x,model=y"  # each mesh axis on a whole physical axis
    target: str = "cpu"

    @property
    def mesh_dict(self) -> dict[str, int]:
        return dict(self.mesh)

    def describe(self) -> str:
        mesh = ", ".join(f"{k}={v}" for k, v in self.mesh)
        where = f"{self.hardware} {self.topology}" if self.topology else self.hardware
        return f"{self.strategy} over mesh ({mesh}) priced on {where}, compiled for {self.target}"


DEFAULT_PLAN = DemoPlan()


def demo_model() -> TransformerConfig:
    """The demo's transformer: a 4-layer slice of a 1B-class model (D=2048, F=8192, 16 heads, 4 KV heads,
    1024 tokens x 32 sequences per step, bf16, Adam). Big enough that the costs are those of a real step,
    small enough to compile in seconds (compile time depends on the program, not on the sizes)."""
    from analyzer.compile.models import TransformerConfig

    return TransformerConfig(d_model=2048, d_ff=8192, heads=16, kv_heads=4, layers=4, seq=1024, batch=32,
                             dtype="bfloat16", optimizer="adam")


def run_demo(plan: DemoPlan = DEFAULT_PLAN, model: TransformerConfig | None = None) -> Report:
    """Build, compile and audit the demo's training step.

    Args:
      plan: strategy, mesh, hardware, topology and target.
      model: the transformer sizes (default `demo_model()`).

    Returns:
      the Report, with the rules' findings (duplicates merged, negligible ones dropped and counted in its
      notes: `analyzer.rules.apply_rules`).

    Example:
        >>> report = run_demo()
        >>> report.totals.comm_seconds > 0
        True
    """
    from analyzer.pipeline import analyze
    from analyzer.rules.config import Config
    from analyzer.compile.models import build
    from analyzer.rules import apply_rules

    model = model or demo_model()
    step, args = build(model, plan.strategy, plan.mesh_dict)
    config = Config()
    report = analyze(step, *args, mesh=plan.mesh_dict, target=plan.target, hardware=plan.hardware,
                     topology=plan.topology, config=config)
    report = apply_rules(report, config)  # the same findings, plus the note on the negligible ones dropped
    name = (f"demo: transformer training step, {plan.strategy} (L={model.layers}, D={model.d_model}, "
            f"F={model.d_ff}, B={model.batch}, S={model.seq}, {model.dtype}, {model.optimizer})")
    return replace(report, name=name)


def next_steps(html_path: Path | None) -> str:
    """What to do after the demo: open the report, audit your own step, gate your commits."""
    lines = []
    if html_path is not None:
        lines.append(f"Wrote {html_path} (open it in a browser: plots, the plan, every collective, the findings).")
    lines += [
        "",
        "Audit your own step:",
        "    import analyzer",
        "    @analyzer.audit(hardware=\"tpu-v5e\", on_violation=\"warn\")",
        "    @jax.jit",
        "    def train_step(params, batch): ...",
        "Gate commits: list entry points under [tool.hlo-analyzer] in pyproject.toml, then `hlo-analyzer check`.",
    ]
    return "\n".join(lines) + "\n"


def plan_from(strategy: str | None, hardware: str | None, topology: str | None) -> DemoPlan:
    """The default plan with the command line's changes (a new hardware drops the default v5e slice)."""
    changes: dict[str, Any] = {}
    if strategy:
        changes["strategy"] = strategy
    if hardware:
        changes["hardware"] = hardware
        changes["topology"] = None  # the default slice is a v5e one: let the analysis pick one for this hardware
    if topology:
        changes["topology"] = topology
    return replace(DEFAULT_PLAN, **changes)
