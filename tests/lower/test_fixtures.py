"""The committed HLO fixtures: provenance headers, XLA accepts them, and the generator reproduces them."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())
COMMITTED = sorted(name for name, entry in MANIFEST["files"].items() if entry["committed"])
HEADER_KEYS = ("program:", "target:", "stage:", "mesh:", "device order", "versions:", "generated:")


def _header(text: str) -> list[str]:
    return [line[3:] for line in text.splitlines() if line.startswith("// ")][: len(HEADER_KEYS) + 2]


def test_manifest_covers_the_matrix():
    """Every program kind, 1-, 2- and 3-axis meshes, a permuted mesh, both stages, cpu and TPU targets."""
    entries = MANIFEST["files"].values()
    programs = {e["program"].split(":")[1] for e in entries}
    for name in ("matmul_case1", "matmul_case2", "matmul_case3", "matmul_case4", "reshard", "psum", "all_gather",
                 "psum_scatter", "all_to_all", "ppermute", "fsdp_step", "tp_step", "fsdp_tp_step"):
        assert name in programs
    assert {len(e["mesh"]) for e in entries} == {1, 2, 3}
    assert any(e["device_order"] != sorted(e["device_order"]) for e in entries)
    assert {e["stage"] for e in entries} == {"spmd", "final"}
    assert {e["target"].split(":")[0] for e in entries} == {"cpu", "tpu"}
    committed_bytes = sum(e["bytes"] for e in entries if e["committed"])
    assert committed_bytes < 5.5e6, committed_bytes


def test_every_committed_fixture_has_provenance_and_parses_with_xla():
    from jax._src.lib import xla_client as xc

    for name in COMMITTED:
        path = FIXTURES / name
        text = path.read_text()
        header = _header(text)
        for key in HEADER_KEYS:
            assert any(line.startswith(key) for line in header), (name, key)
        entry = MANIFEST["files"][name]
        assert f"target: {entry['target']} " in "\n".join(header)
        module = xc.hlo.hlo_module_from_text(text)  # `//` header lines are comments to XLA's parser
        assert module.computations(), name


@pytest.mark.slow
def test_generator_reproduces_fixtures():
    """Recompile cpu fixtures (a permuted mesh, a training step) and a TPU one when libtpu is installed, and
    compare bodies."""
    # A training step too: its stack frames carry analyzer/compile/models.py's line numbers, so an edit there without
    # regenerating the fixtures shows up here.
    cases = ["cpu/X2_Y4_perm/matmul_case2", "cpu/X8/psum_scatter", "cpu/X8/fsdp_mlp_step"]
    if importlib.util.find_spec("libtpu") is not None:
        cases.append("tpu-v5e-2x2/X2_Y2/matmul_case3")
    # The generator sets its own device count and keeps the session's other flags (tests/conftest.py: the LLVM
    # back end unoptimised, which leaves the HLO it compares byte-identical and the compiles a third cheaper).
    # Not jaxlib 0.10's compiler without fusion emitters, though: the committed final HLO has their one-op fusions.
    env = {**os.environ, "XLA_FLAGS": re.sub(r"--xla_cpu_use_fusion_emitters=\S*", "", os.environ.get("XLA_FLAGS", ""))}
    proc = subprocess.run([sys.executable, str(FIXTURES / "generate.py"), "--check", *cases], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert proc.stdout.count("same ") == 2 * len(cases), proc.stdout
