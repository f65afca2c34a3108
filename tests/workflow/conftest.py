"""Fixtures for the workflow tests: Reports built by hand (no compile), and a sample project on disk.

Hand-built reports keep the renderer, baseline and CLI tests independent of jax; the tests that compile real
programs say so with `@pytest.mark.slow`.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from analyzer.diagnostics import Diagnostic, Location, Severity
from analyzer.analysis.report import COLLECTIVE_COLUMNS, DOT_COLUMNS, Report, Totals
from analyzer.theory.mesh import MeshInfo


def _make_report(rows=(), diagnostics=(), name="step") -> Report:
    """A Report with the given collective rows (dicts of some columns; the rest filled with neutral values)."""
    import pandas as pd

    defaults = {c: None for c in COLLECTIVE_COLUMNS}
    defaults.update(kind="all-reduce", axes=("X",), notation="", dtype="f32", bytes=0, count=1, seconds=0.0,
                    regime="bandwidth", op_name="", source="", total_seconds=0.0, sync=True, overlapped=False)
    table = pd.DataFrame([{**defaults, **r} for r in rows], columns=list(COLLECTIVE_COLUMNS))
    comm = float(sum(r.get("seconds", 0.0) * r.get("count", 1) for r in rows))
    return Report(
        collectives=table,
        dots=pd.DataFrame(columns=list(DOT_COLUMNS)),
        totals=Totals(comm_seconds=comm, compute_seconds=1e-3),
        hlo=None,
        mesh=MeshInfo(("X", "Y"), (4, 2), tuple(range(8))),
        hardware="tpu-v5e",
        topology="v5e:2x4",
        target="cpu",
        diagnostics=tuple(diagnostics),
        name=name,
    )


def _finding(code="HA102", name="all-reduce-not-reduce-scatter", file=None, line=None, severity=Severity.WARNING,
            notation="AllReduce_X: [B, F]{U_X} -> [B, F]", saving=1e-4) -> Diagnostic:
    return Diagnostic(code=code, name=name, message=f"{notation} could be a ReduceScatter", severity=severity,
                      location=Location(file=file, line=line, instruction="all-reduce.3"), notation=notation,
                      seconds=2e-4, saving_seconds=saving, fix="shard the output over X")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project with two entry points: `model.train:step` imports model/layers.py; `other:step` does not."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "__init__.py").write_text("")
    (tmp_path / "model" / "layers.py").write_text("def mlp(x):\n    return x\n")
    (tmp_path / "model" / "train.py").write_text(textwrap.dedent("""\
        from model.layers import mlp


        def step(mesh):
            return mlp, ()
        """))
    (tmp_path / "other.py").write_text("import os\n\n\ndef step(mesh):\n    return print, ()\n")
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent("""\
        [project]
        name = "sample"

        [tool.hlo-analyzer]
        entry-points = ["model.train:step", "other:step"]
        mesh = { X = 4, Y = 2 }
        """))
    return tmp_path


@pytest.fixture
def make_report():
    """`make_report(rows=[{...}], diagnostics=[...])` builds a Report by hand."""
    return _make_report


@pytest.fixture
def finding():
    """`finding(code=..., file=..., line=...)` builds a Diagnostic."""
    return _finding
