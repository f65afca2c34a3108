"""`hlo-analyzer demo`, the README's first command: prints the audit and writes demo-report.html."""

from __future__ import annotations

import re

import pytest

from analyzer.cli import main
from analyzer.workflows.demo import DEFAULT_PLAN, demo_model, plan_from

pytestmark = pytest.mark.slow  # compiles the demo's training step (about 20 s on 2 cores)


@pytest.fixture(scope="module")
def demo_report():
    """The demo's report, compiled and audited once for the module (`run_demo()` with the default plan)."""
    from analyzer.workflows.demo import run_demo

    return run_demo()


def test_demo_prints_the_audit_and_writes_the_html_report(tmp_path, capsys, monkeypatch, demo_report):
    from analyzer.workflows import demo

    def compiled_once(plan=DEFAULT_PLAN, model=None):  # what the command asks for is what was compiled
        assert plan == DEFAULT_PLAN and model is None
        return demo_report

    monkeypatch.setattr(demo, "run_demo", compiled_once)
    out_file = tmp_path / "demo-report.html"
    assert main(["demo", "-o", str(out_file)]) == 0
    text = capsys.readouterr().out
    model = demo_model()
    # The plan it says it audited is the one it built.
    assert f"L={model.layers}, D={model.d_model}, F={model.d_ff}" in text and "fsdp+tp" in text
    assert "data=4,model=2 (8 devices)" in text and "tpu-v5e" in text
    # FSDP+TP: weights gathered over both axes, gradients reduce-scattered; named with the user's axes.
    assert "AllGather_data" in text and "AllGather_model" in text and "ReduceScatter_" in text
    assert re.search(r"Findings \(\d+\)", text)
    # The mesh lies on the slice whose axes match it: data on the 4-chip axis, model on the 2-chip one.
    assert "v5e:4x2" in text and "data=4: ici on x (4)" in text and "model=2: ici on y (2)" in text
    # No finding twice (same rule, line and collective), no un-sharding advice, negligible ones counted.
    blocks = re.split(r"^(?=(?:info|warning|error) +HA\d{3} )", text, flags=re.MULTILINE)[1:]
    heads = [(re.match(r"\w+ +(HA\d+) \S+ +(\S+)", b).groups(), (re.search(r"collective: (.*)", b) or [None, ""])[1])
             for b in blocks]
    assert heads and len(heads) == len(set(heads)), heads
    assert "1-way instead" not in text and "FLOPs per element moved / 2" not in text
    assert re.search(r"\d+ findings? dropped as negligible \(", text)
    assert f"Wrote {out_file}" in text and "@analyzer.audit" in text and "[tool.hlo-analyzer]" in text

    html = out_file.read_text()
    assert html.lstrip().lower().startswith("<!doctype html") and "<svg" in html
    comm = re.search(r"Communication / step\s+([0-9.]+ [µm]?s)", text).group(1)
    assert comm in html  # the same figure in both reports, from one analysis


def test_plan_options():
    assert plan_from(None, None, None) == DEFAULT_PLAN
    p = plan_from("tp", "tpu-v5p", None)
    assert p.strategy == "tp" and p.hardware == "tpu-v5p" and p.topology is None  # the v5e slice is dropped
    assert "priced on tpu-v5e v5e:4x2" in DEFAULT_PLAN.describe()


def test_next_steps_text():
    from pathlib import Path

    from analyzer.workflows.demo import next_steps

    text = next_steps(Path("demo-report.html"))
    assert text.startswith("Wrote demo-report.html") and "[tool.hlo-analyzer]" in text
    assert "Wrote" not in next_steps(None)


def test_demo_step_between_busiest_track_and_compute_plus_comm(demo_report):
    """Issue 10's acceptance on the demo: the busiest track (compute, or one link) <= step <= compute + comm,
    and the report's step sentence gives the figures that relate them (docs/step.md: max(compute, comm) is
    no lower bound on the TPU target, where links of different axes may run at once)."""
    from analyzer.render._common import step_sentence
    from analyzer.units import format_seconds

    report = demo_report
    t, step = report.totals, report.analysis.step
    assert max(step.busy.values()) <= t.step_seconds * (1 + 1e-9)
    assert t.step_seconds <= (t.compute_seconds + t.comm_seconds) * (1 + 1e-9)
    sentence = step_sentence(report)
    for figure in (t.step_seconds, t.compute_seconds, t.exposed_comm_seconds, t.comm_seconds,
                   t.comm_seconds - t.exposed_comm_seconds):
        assert format_seconds(figure) in sentence
