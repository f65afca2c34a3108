"""What the runner does for every rule alike: merge duplicate findings, drop negligible savings (and say how
many), and what HA101 says and advises in the chapter's terms.

Figures: TPU v5p C = 4.59e14 FLOPs/s, W_ici = 1.8e11 B/s (C/W_ici = 2550); v5e C/W_ici = 1.97e14 / 9e10 = 2189.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from analyzer.rules.config import (
    DEFAULT_MIN_SAVING_FRACTION,
    DEFAULT_MIN_SAVING_SECONDS,
    Config,
    config_from_table,
)
from analyzer.diagnostics import Diagnostic, Location, Severity
from analyzer.errors import ConfigError
from analyzer.rules import apply_rules, check_rules
from analyzer.rules.common import fmt_s
from analyzer.rules.matmul import roofline_fix
from analyzer.rules.registry import Rule, all_rules, get_rule
from analyzer.rules.runner import (
    merge_duplicates,
    negligible_note,
    saving_threshold,
    split_negligible,
)

REL = 0.10


def finding(code="HA301", line=7, notation="AllReduce_Y: [I, J]{U_Y} -> [I, J]", saving=8e-6, inst="all-reduce.3",
            seconds=16e-6):
    r = get_rule(code)
    return Diagnostic(code=code, name=r.name, message=f"{code} at {line}", location=Location("m.py", line, "body", inst),
                      notation=notation, seconds=seconds, alternative="x", alternative_seconds=seconds - saving,
                      saving_seconds=saving)


# --------------------------------------------------------------------------------------------------- merging
def test_identical_findings_merge_with_count_and_summed_saving():
    a = finding(inst="all-reduce.3")
    b = replace(finding(inst="all-reduce.7", saving=6e-6), message="HA301 at 7, other figures")
    merged = merge_duplicates([a, b])
    assert len(merged) == 1
    m = merged[0]
    assert m.details["merged"] == 2 and m.details["merged_instructions"] == ["all-reduce.3", "all-reduce.7"]
    assert m.saving_seconds == pytest.approx(14e-6) and m.seconds == pytest.approx(32e-6)
    assert m.saving_seconds == pytest.approx(m.seconds - m.alternative_seconds)
    assert "Found 2 times" in m.message and m.message.startswith(a.message)  # the costlier one is kept
    assert m.fingerprint() == a.fingerprint() == b.fingerprint()  # baselines keep matching


def test_a_baseline_written_before_merging_still_accepts_the_merged_finding():
    from analyzer.rules.baseline import Baseline

    a, b = finding(inst="all-reduce.3"), finding(inst="all-reduce.7")
    old = Baseline(counts={a.fingerprint(): 2}, path="b.json")  # two identical findings, as printed before
    new, accepted, stale = old.split(merge_duplicates([a, b]))
    assert not new and len(accepted) == 1 and not stale


def test_different_line_code_or_collective_are_not_merged():
    a = finding()
    others = [finding(line=8), finding(notation="AllGather_Y: [I_Y] -> [I]"), finding(code="HA202")]
    assert len(merge_duplicates([a, *others])) == 4


def test_merged_severity_is_the_most_severe():
    a, b = finding(), replace(finding(), severity=Severity.ERROR)
    assert merge_duplicates([a, b])[0].severity == Severity.ERROR


# --------------------------------------------------------------------------------------------------- negligible
def test_threshold_is_the_larger_of_seconds_and_fraction_of_the_base():
    r = get_rule("HA301")
    assert saving_threshold(r, Config(), 1e-3) == pytest.approx(DEFAULT_MIN_SAVING_SECONDS)  # 1% of 1 ms < 10 us
    assert saving_threshold(r, Config(), 0.1) == pytest.approx(DEFAULT_MIN_SAVING_FRACTION * 0.1)
    assert saving_threshold(r, Config(min_saving_seconds=0, min_saving_fraction=0), 0.1) == 0
    # A rule's own option replaces both.
    own = Config(rules={"HA301": {"min_saving_seconds": 1e-6}})
    assert saving_threshold(r, own, 0.1) == pytest.approx(1e-6)


@pytest.mark.parametrize("code", ["HA401", "HA402", "HA501", "HA502", "HA900", "HA901"])
def test_budgets_memory_and_meta_rules_are_exempt(code):
    assert saving_threshold(get_rule(code), Config(), 1.0) is None


def test_every_rule_that_prices_a_saving_is_filtered():
    assert {r.code for r in all_rules() if r.predicts_saving} >= {"HA101", "HA102", "HA103", "HA201", "HA202",
                                                                  "HA203", "HA301", "HA302", "HA303"}


def test_split_negligible():
    small, big = finding(saving=2e-6), finding(line=9, saving=300e-6)
    budget = Diagnostic("HA501", "comm-budget-exceeded", "over", saving_seconds=1e-9)
    kept, dropped = split_negligible([small, big, budget], Config(), base_seconds=20e-3)  # threshold 200 us
    assert kept == [big, budget] and dropped == [small]


def test_config_keys_from_toml():
    cfg = config_from_table({"min-saving-seconds": 5e-5, "min-saving-fraction": 0.02})
    assert cfg.min_saving_seconds == 5e-5 and cfg.min_saving_fraction == 0.02
    with pytest.raises(ConfigError, match="min-saving-fraction"):
        config_from_table({"min-saving-fraction": 2})
    with pytest.raises(ConfigError, match="min-saving-seconds"):
        config_from_table({"min-saving-seconds": "10us"})
    assert Config().override(min_saving_seconds=0.0).min_saving_seconds == 0.0  # the decorator's way


# --------------------------------------------------------------------------------------------------- in the runner
def _with_rule(monkeypatch, fake: Rule) -> None:
    from analyzer.rules import runner

    real = all_rules()
    monkeypatch.setattr(runner, "all_rules", lambda: (*real, fake))
    from analyzer.rules import registry

    monkeypatch.setattr(registry, "all_rules", lambda: (*real, fake))


def _fake(findings):
    def check(ctx):
        """## What it does\nx\n## Why is this bad?\nx\n## Example\nx\n## Use instead\nx\n## References\nx"""
        return [ctx.diagnostic(d.message, location=d.location, notation=d.notation, seconds=d.seconds,
                               alternative=d.alternative, alternative_seconds=d.alternative_seconds,
                               saving_seconds=d.saving_seconds, fix="f") for d in findings]

    return Rule(code="HA399", name="test-duplicates", severity=Severity.WARNING, summary="test", check=check)


def test_runner_merges_and_drops_for_every_rule(analysed, monkeypatch):
    """One mechanism: a rule that reports the same collective twice and a negligible one; the runner merges
    the pair (saving summed) and drops the small one, counting it in the note `apply_rules` adds."""
    report = analysed("fsdp_matmul(128)")
    comm = report.totals.comm_seconds           # one AllGather of W[D_X, F]: 2 D F / W_ici = 373 us
    assert comm == pytest.approx(2 * 4096 * 8192 / 1.8e11, rel=REL)
    big = finding(code="HA301", saving=0.2 * comm)
    small = finding(code="HA301", line=99, saving=DEFAULT_MIN_SAVING_SECONDS / 2)
    _with_rule(monkeypatch, _fake([big, big, small]))
    result = check_rules(report, Config(select=("HA3",)))
    mine = [d for d in result.diagnostics if d.code == "HA399"]
    assert len(mine) == 1 and mine[0].saving_seconds == pytest.approx(0.4 * comm)
    assert [d.location.line for d in result.negligible] == [99]
    # The report has a predicted step, and savings are in step time: the fraction is of the step.
    step = report.totals.step_seconds
    assert step > comm and result.base == ("predicted step", step)
    assert result.threshold == pytest.approx(max(DEFAULT_MIN_SAVING_SECONDS, DEFAULT_MIN_SAVING_FRACTION * step))
    note = negligible_note(result)
    assert note.startswith("1 finding dropped as negligible (HA399 x1;")
    assert f"of {fmt_s(step)} predicted step;" in note and "of communication" not in note
    out = apply_rules(report, Config(select=("HA3",)))
    assert out.notes[-1] == note and apply_rules(out, Config(select=("HA3",))).notes.count(note) == 1
    # Turned off: everything shows.
    everything = check_rules(report, Config(select=("HA3",), min_saving_seconds=0, min_saving_fraction=0))
    assert len([d for d in everything.diagnostics if d.code == "HA399"]) == 2 and not everything.negligible


def test_without_a_predicted_step_the_fraction_is_of_communication(analysed, monkeypatch):
    """A report with no step (an HLO dump without one, JSON rebuilt without one) has communication savings:
    the fraction is taken of its communication, and the note says so."""
    report = analysed("fsdp_matmul(128)")
    comm = report.totals.comm_seconds
    stepless = replace(report, totals=replace(report.totals, step_seconds=0.0))
    small = finding(code="HA301", line=99, saving=DEFAULT_MIN_SAVING_SECONDS / 2)
    _with_rule(monkeypatch, _fake([small]))
    result = check_rules(stepless, Config(select=("HA3",), min_saving_fraction=0.05))
    assert result.step_seconds == 0 and result.base == ("communication", comm)
    assert result.threshold == pytest.approx(0.05 * comm)   # 5% of 373 us = 18.7 us, over the 10 us floor
    note = negligible_note(result)
    assert f"of {fmt_s(comm)} of communication;" in note and "predicted step" not in note


# --------------------------------------------------------------------------------------------------- HA101's words
def test_ha101_names_the_fsdp_roofline_and_a_sound_fix(analysed):
    d = next(d for d in analysed("fsdp_matmul(128)").diagnostics if d.code == "HA101")
    assert d.details["roofline"] == "fsdp"
    assert "FSDP" in d.message and "per-chip batch B/X = 128" in d.message and "C/W_ici = 2,550" in d.message
    # 128 rows per chip: no split of 8 chips is compute-bound; the batch must grow 2550 / 128 = 19.9x.
    assert "raise the batch per chip 19.9x" in d.fix
    assert not re.search(r"\b1-way\b", d.fix)


def test_ha101_names_the_megatron_roofline(analysed):
    d = next(d for d in analysed("megatron_mlp(f=8192)").diagnostics if d.code == "HA101")
    assert d.details["roofline"] == "megatron"
    assert "tensor-parallel (Megatron)" in d.message and "F/Y = 1,024" in d.message
    # The chapter's bound F / 2550 = 3.2: at most 2 ways of 8; the freed factor 4 goes to data parallelism,
    # where 4096 tokens / 4 = 1024 per chip are too few: F/Y = 4096 leaves 1 - 2550/4096 of the FLOPs to hide
    # FSDP's gathers, which needs 2550 / (1 - 2550/4096) = 6756 tokens per chip.
    assert "shrink 'Y' from 8 to 2 ways" in d.fix and "at most 3 ways, F/Y >= 2,550" in d.fix
    want = 2550 / (1 - 2550 / 4096)
    m = re.search(r"1,024 after the move -> ([\d,]+)", d.fix)
    assert m and float(m.group(1).replace(",", "")) == pytest.approx(want, rel=REL)


@pytest.mark.parametrize("program", ["fsdp_matmul(128)", "megatron_mlp(f=8192)", "sliced_weight_then_psum(False)"])
def test_ha101_quantity_is_below_the_threshold_it_prints(analysed, program):
    """The threshold is where the dot's collectives together take its FLOPs' time, so a flagged dot's quantity
    is always below it (measured from the costliest collective alone it printed "2,048 ... below 1,313")."""
    for d in (d for d in analysed(program).diagnostics if d.code == "HA101"):
        q, needed = d.details["quantity_value"], d.details["threshold_topology"]
        assert q < needed
        assert needed == pytest.approx(q * d.details["t_comm"] / d.details["t_math"], rel=1e-9)
        printed = re.search(r"below (?:C/W_ici = )?([\d,]+)", d.message)
        assert printed and float(printed.group(1).replace(",", "")) >= q


def test_roofline_fix_never_unshards_and_keeps_the_chips():
    # FSDP at 2048 tokens per chip over 256 chips, F = 16384 (v5p): 128-way FSDP x 2-way TP is compute-bound:
    # 2550/4096 + 2550/8192 = 0.93.
    fix = roofline_fix("fsdp", 2048, 2550, ("data",), 256, [], 16384, 2550)
    assert fix.startswith("shrink 'data' from 256 to 128 ways and give the factor 2 to a new 'model' axis of 2")
    assert "0.93" in fix
    # The demo's attention (v5e, F/Y = 1024 over model=2, 8192 tokens per data shard): F = 2048 is under
    # C/W_ici even 2-way; folding model into data gives 4096 tokens per chip, 2189/4096 = 0.53.
    fix = roofline_fix("megatron", 1024, 2189, ("model",), 2, [("data", 4)], 8192, 2189)
    assert fix.startswith("fold 'model' (2 ways) into 'data' (4 -> 8)") and "0.53" in fix
    for args in [("fsdp", 100, 2550, ("X",), 8, [], 1000, 2550), ("megatron", 100, 2550, ("Y",), 8, [], 100, 2550),
                 ("", 100, 2550, ("X",), 8, [], None, 2550)]:
        text = roofline_fix(*args)
        assert "1-way" not in text and "from 8 to 1 " not in text
        assert "raise" in text or "widen" in text or "replicate" in text


# --------------------------------------------------------------------------------------------------- HA202's fix
def test_missing_wraparound_on_8_chips_says_why_and_prices_the_other_layout(analysed):
    """Pop quiz 2's gather on a v5e:4x2 (8 chips): no 8-chip v5e slice wraps (that needs an axis of 16), so the
    fix must not send the user to a 16-chip topology; it prices the same program on the other 8-chip shapes."""
    import analyzer

    r = analysed("gather_on_axis('Y')")  # the slice is declared: topology="v5e:4x2@Y=x,X=y"
    d = next(d for d in r.diagnostics if d.code == "HA202")
    assert "no slice of 8 chips has wraparound" in d.fix and "topology 16x" not in d.fix
    # A closed ring no 8-chip slice has is no saving, and the declared slice is the hardware the user has:
    # no other shape of it is recommended (issue 11: the demo declared v5e:4x2, then recommended v5e:2x4).
    assert d.saving_seconds is None and d.details["same_chips_layout"] is None and "v5e:2x4" not in d.fix
    assert d.details["wraparound_possible"] is False
    # Left to the tool (no topology given), the mesh is placed as jax.make_mesh places it on the 8-chip slice
    # libtpu names (v5e:2x4, Y across x+y): no other layout of the same 8 chips beats that placement, so
    # nothing is offered as a saving, and the figures beside the finding are the report's own.
    assumed = analyzer.reprice(r)
    assert "slice v5e:2x4" in assumed.topology and "jax.make_mesh" in assumed.topology
    in_order = analyzer.reprice(r, topology="v5e:4x2@in-order")
    assert assumed.totals.comm_seconds < in_order.totals.comm_seconds  # 224 us against 559 us (pop quiz 2)
    for d in (d for d in assumed.diagnostics if d.code == "HA202"):
        assert d.details["same_chips_layout"] is None and d.saving_seconds is None
