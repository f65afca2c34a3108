"""Reports built by hand for the renderer tests.

The renderers only read a `Report`; these fixtures make one shaped like the analysis of an FSDP+TP
transformer step on a data=4, model=2 mesh (TPU v5e), so the renderers can be tested without compiling.
The figures are internally consistent (total_seconds = seconds * count, totals = sums of rows) but are not
claims about any hardware; tests that check physics live with the cost model and the analysis.
"""

from __future__ import annotations

import pandas as pd
import pytest

from analyzer.diagnostics import Diagnostic, Location, Severity
from analyzer.analysis.report import COLLECTIVE_COLUMNS, DOT_COLUMNS, Report, Totals
from analyzer.theory.mesh import MeshInfo

LAYERS = 4


def _collective(kind, axes, notation, dtype, nbytes, count, seconds, regime, op_name, source, pass_, group, **extra):
    row = {
        "kind": kind,
        "axes": tuple(axes),
        "notation": notation,
        "dtype": dtype,
        "bytes": nbytes,
        "count": count,
        "seconds": seconds,
        "regime": regime,
        "op_name": op_name,
        "source": source,
        "total_seconds": seconds * count,
        "per_device_bytes": nbytes // group,
        "group_size": group,
        "num_groups": 8 // group,
        "sync": True,
        "overlapped": False,
        "permute_steps": 0,
        "pass_": pass_,
        "computation": extra.pop("computation", "region_body.1"),
        "instruction": extra.pop("instruction", "all-gather.3"),
        "hlo_line": extra.pop("hlo_line", 120),
        "hops": group - 1,
        "formula": "V / W_ici (ring, no wraparound)",
        "original_ops": extra.pop("original_ops", ""),
        "op": op_name.rsplit("/", 1)[-1],
        "global_shape": (),
        "branch": "",
        # FSDP gathers and scatters hide behind the matmuls; the activation collectives wait on the data path.
        "exposed_seconds": 0.0 if kind in ("all-gather", "reduce-scatter") else seconds * count,
    }
    row.update(extra)
    return row


def make_report(*, with_findings: bool = True, name: str = "fsdp+tp step (hand-built)") -> Report:
    """A realistic hand-built report: FSDP over `data`, tensor parallel over `model`."""
    rows = [
        _collective(
            "all-gather",
            ["data"],
            "AllGather_data: [D_data, F_model] -> [D, F_model]",
            "bf16",
            2 * 4096 * 8192,
            LAYERS,
            3.1e-4,
            "bandwidth",
            "jit(step)/mlp/dot_general",
            "model.py:41",
            "forward",
            4,
            instruction="all-gather.3",
        ),
        _collective(
            "reduce-scatter",
            ["data"],
            "ReduceScatter_data,D: [D, F_model]{U_data} -> [D_data, F_model]",
            "f32",
            4 * 4096 * 8192,
            LAYERS,
            6.2e-4,
            "bandwidth",
            "jit(step)/transpose(jvp(mlp))/dot_general",
            "model.py:41",
            "backward",
            4,
            original_ops="all-reduce + dynamic-slice",
            instruction="all-reduce.7",
            computation="region_body.2",
        ),
        _collective(
            "all-reduce",
            ["model"],
            "AllReduce_model: [B_data, S, D]{U_model} -> [B_data, S, D]",
            "bf16",
            2 * 8 * 1024 * 4096,
            LAYERS,
            1.5e-3,
            "bandwidth",
            "jit(step)/attn/out_proj/dot_general",
            "model.py:58",
            "forward",
            2,
            instruction="all-reduce.2",
        ),
        _collective(
            "all-to-all",
            ["data"],
            "AllToAll_data: [E_data, T, D] -> [E, T_data, D]",
            "bf16",
            2 * 8 * 512 * 4096,
            LAYERS,
            2.0e-4,
            "bandwidth",
            "jit(step)/moe/dispatch",
            "model.py:77",
            "forward",
            4,
            instruction="all-to-all.1",
        ),
        _collective(
            "all-reduce",
            ["data", "model"],
            "AllReduce_data,model: []{U_data,model} -> []",
            "f32",
            4,
            1,
            3.0e-6,
            "latency",
            "jit(step)/loss/psum",
            "train.py:12",
            "",
            8,
            computation="main.42",
            instruction="all-reduce.9",
            hlo_line=300,
        ),
    ]
    collectives = pd.DataFrame(rows, columns=list(COLLECTIVE_COLUMNS))

    def dot(name, op_name, flops, seconds, notation, count=LAYERS, computation="region_body.1"):
        return {
            "instruction": name,
            "computation": computation,
            "op_name": op_name,
            "source": "model.py:41",
            "flops": flops,
            "count": count,
            "seconds": seconds,
            "lhs_shape": "bf16[2,1024,4096]",
            "rhs_shape": "bf16[4096,4096]",
            "out_shape": "bf16[2,1024,4096]",
            "contracting": "D",
            "notation": notation,
            "dtype": "bf16",
            # like this report's collectives (hand-set passes: its op_names carry no jvp())
            "pass_": "backward" if "transpose(" in op_name else "forward",
        }

    mlp_flops = 2 * 8 * 1024 * 4096 * 8192 / 8
    dots = pd.DataFrame(
        [
            dot(
                "dot.1",
                "jit(step)/mlp/dot_general",
                mlp_flops,
                1.1e-3,
                "[B_data, S, D] x [D, F_model] -> [B_data, S, F_model]",
            ),
            dot(
                "dot.2",
                "jit(step)/attn/out_proj/dot_general",
                mlp_flops / 2,
                5.5e-4,
                "[B_data, S, H_model] x [H_model, D] -> [B_data, S, D]{U_model}",
            ),
            dot(
                "dot.3",
                "jit(step)/transpose(jvp(mlp))/dot_general",
                2 * mlp_flops,
                2.2e-3,
                "[B_data, S, F_model] x [B_data, S, D] -> [D, F_model]{U_data}",
                computation="region_body.2",
            ),
            dot(
                "dot.4",
                "jit(step)/head/dot_general",
                mlp_flops / 4,
                2.7e-4,
                "[B_data, S, D] x [D, V] -> [B_data, S, V]",
                count=1,
                computation="main.42",
            ),
        ],
        columns=list(DOT_COLUMNS),
    )
    by_kind: dict[str, float] = {}
    by_axis: dict[str, float] = {}
    for r in rows:
        by_kind[r["kind"]] = by_kind.get(r["kind"], 0.0) + r["total_seconds"]
        key = ",".join(r["axes"])
        by_axis[key] = by_axis.get(key, 0.0) + r["total_seconds"]
    comm = sum(r["total_seconds"] for r in rows)
    compute = float((dots["seconds"] * dots["count"]).sum())
    totals = Totals(
        comm_seconds=comm,
        compute_seconds=compute,
        by_kind=by_kind,
        by_axis=by_axis,
        comm_bytes=sum(r["bytes"] * r["count"] for r in rows),
        flops=float((dots["flops"] * dots["count"]).sum()),
        step_seconds=compute + sum(r["exposed_seconds"] for r in rows),
        exposed_comm_seconds=sum(r["exposed_seconds"] for r in rows),
        exposed_by_axis={k: sum(r["exposed_seconds"] for r in rows if ",".join(r["axes"]) == k) for k in by_axis},
        matmul_seconds=compute,
        model_flops=8 * float((dots["flops"] * dots["count"]).sum()),
        mfu=float((dots["flops"] * dots["count"]).sum()) / ((compute + sum(r["exposed_seconds"] for r in rows))
                                                             * 1.97e14),
        hfu=float((dots["flops"] * dots["count"]).sum()) / ((compute + sum(r["exposed_seconds"] for r in rows))
                                                             * 1.97e14),
    )
    diagnostics = []
    if with_findings:
        diagnostics = [
            Diagnostic(
                code="HA103",
                name="all-reduce-where-reduce-scatter-suffices",
                message="The gradient all-reduce over `data` is only used sharded; a reduce-scatter moves half the bytes.",
                severity=Severity.WARNING,
                location=Location(
                    file="model.py", line=41, computation="region_body.1", instruction="all-reduce.7", hlo_line=188
                ),
                notation="AllReduce_data: [D, F_model]{U_data} -> [D, F_model]",
                seconds=1.24e-3,
                alternative="ReduceScatter_data: [D, F_model]{U_data} -> [D_data, F_model]",
                alternative_seconds=6.2e-4,
                saving_seconds=6.2e-4 * LAYERS,
                fix="out_shardings=P('data', 'model') for the gradient",
            ),
            Diagnostic(
                code="HA106",
                name="missing-wraparound",
                message="Mesh axis `data` (4) lies on a v5e ring of 4 without wraparound; collectives over it pay about 2x.",
                severity=Severity.ERROR,
                location=Location(),
                seconds=2.5e-3,
                alternative="lay `data` on an axis of 16",
                alternative_seconds=1.25e-3,
                saving_seconds=1.25e-3,
                fix="topology = 'v5e:16x16' or a mesh axis of 16",
            ),
            Diagnostic(
                code="HA105",
                name="latency-bound-collectives",
                message="1 collective per step moves under 45 kB per hop <script>alert(1)</script>.",
                severity=Severity.INFO,
                location=Location(file="train.py", line=12),
                notation="AllReduce_data,model: []{U_data,model} -> []",
                seconds=3.0e-6,
            ),
        ]
    return Report(
        collectives=collectives,
        dots=dots,
        totals=totals,
        hlo=None,
        mesh=MeshInfo(
            axis_names=("data", "model"), axis_sizes=(4, 2), device_ids=tuple(range(8)), axis_types=("Auto", "Auto")
        ),
        hardware="tpu-v5e",
        topology="v5e:4x2, data->x (ring 4, no wraparound), model->y (ring 2, no wraparound)",
        target="cpu",
        diagnostics=tuple(diagnostics),
        notes=(
            "The cpu target has no physical topology; the mesh was laid on v5e:4x2, axes in order.",
            "bf16 all-reduces are priced at bf16 although the CPU backend promotes them to f32.",
        ),
        memory={
            "argument_bytes": 1_200_000_000,
            "output_bytes": 1_200_000_000,
            "temp_bytes": 3_400_000_000,
            "total_bytes": 5_800_000_000,
        },
        name=name,
    )


@pytest.fixture
def report() -> Report:
    return make_report()


@pytest.fixture
def clean_report() -> Report:
    return make_report(with_findings=False, name="clean")


@pytest.fixture
def empty_report() -> Report:
    """A program with no collectives at all (everything replicated or a single device)."""
    return Report(
        collectives=pd.DataFrame(columns=list(COLLECTIVE_COLUMNS)),
        dots=pd.DataFrame(columns=list(DOT_COLUMNS)),
        totals=Totals(comm_seconds=0.0, compute_seconds=0.0),
        hlo=None,
        mesh=None,
        hardware="tpu-v5e",
        topology="",
        target="dump",
        name="empty",
    )
