"""Findings as data: every message is rendered from its own fields, so its text cannot contradict them.

The cases below are the contradictions the old f-strings printed (issue 9), each written as the figures that
produced it and the text that must come out now.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re

import pytest

from analyzer.diagnostics import Diagnostic
from analyzer.rules import all_rules, messages
from analyzer.rules.matmul import CommBoundMatmul, roofline_fix
from analyzer.rules.mesh import MissingWraparound
from analyzer.rules.messages import Message
from analyzer.rules.registry import RULE_MODULES
from analyzer.rules.resharding import ReshardingCollective


def _numbers(text: str) -> list[float]:
    return [float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*\.?\d*", text)]


def _message_kinds() -> list[type[Message]]:
    """Every message kind, from the modules that define them: the rule modules and analyzer.rules.fit."""
    modules = [importlib.import_module(m) for m in (*RULE_MODULES, "analyzer.rules.fit")]
    return [c for m in modules for _, c in inspect.getmembers(m, inspect.isclass)
            if issubclass(c, Message) and c is not Message and c.__module__ == m.__name__]


def _subclasses(cls: type) -> list[type]:
    return [s for c in cls.__subclasses__() for s in (c, *_subclasses(c))]


def test_each_message_lives_beside_the_rule_that_emits_it():
    """A rule's message class is in the rule's own module (as ruff's violations are), not in a module of
    messages: analyzer.rules.messages holds only the base class."""
    all_rules()
    kinds = _message_kinds()
    assert len(kinds) == 19
    assert {c for c in _subclasses(Message) if c.__module__.startswith("analyzer.")} == set(kinds)
    assert [c for _, c in inspect.getmembers(messages, inspect.isclass) if issubclass(c, Message)] == [Message]
    for kind in kinds:
        code = kind.__doc__.split(":")[0].split(",")[0].split(".")[0].strip()  # "HA202: ...", "HA102, gather side"
        if code.startswith("HA"):  # its rule is in the module the class is in
            assert any(r.code == code and r.check.__module__ == kind.__module__ for r in all_rules()), (kind, code)
        else:  # the note any rule's fix gets when its plan does not fit (analyzer.rules.fit)
            assert kind.__module__ == "analyzer.rules.fit", kind


def test_every_message_kind_is_a_frozen_class_with_a_template():
    kinds = _message_kinds()
    assert kinds
    for kind in kinds:
        assert dataclasses.is_dataclass(kind) and kind.__dataclass_params__.frozen, kind
        assert kind.template, kind
        names = {f.name for f in dataclasses.fields(kind)} | {n for n, v in vars(kind).items()
                                                              if isinstance(v, property)}
        used = set(re.findall(r"\{(\w+)", kind.template))
        assert used <= names, (kind, used - names)  # the text reads nothing but the finding's figures


def test_comm_bound_matmul_compares_with_the_threshold_it_is_below():
    """Issue 9: "F/Y = 2,816 ... below C/W_ici = 2,189" -- 2,816 is above C/W_ici; it is below the threshold
    on this slice's links (here 3,500: a line without wraparound). The text names that threshold."""
    m = CommBoundMatmul(matmuls=1, roofline="tensor-parallel (Megatron)", quantity_name="F/Y", quantity=2816,
                        per_element="weight columns per chip for each activation element gathered over", axes="Y",
                        threshold=3500, ridge=2189, hardware="tpu-v5e", t_comm=1.243e-3, t_math=1e-3,
                        listing="AllGather_Y 1.24 ms")
    text = m.render()
    assert "F/Y = 2,816" in text and "below 3,500, its compute-bound value on this slice's links" in text
    assert not re.search(r"below C/W_ici = 2,189", text)
    below = float(re.search(r"below ([\d,]+)", text).group(1).replace(",", ""))
    assert m.quantity < below
    # On ideal links the two thresholds agree and the chip's C/W_ici is the one named.
    ideal = dataclasses.replace(m, quantity=1024, threshold=2189).render()
    assert "below C/W_ici = 2,189 on tpu-v5e" in ideal
    assert "(1.2x)" in text  # t_comm / t_math from the fields


def test_missing_wraparound_saving_is_the_difference_it_prints():
    """Issue 9: HA202 printed "saves 2.94 ms" beside "from 23.8 ms to 18.9 ms" (another scope). The message's
    saving is its own two figures' difference."""
    m = MissingWraparound(axis="data", chips=8, collectives=3, seconds=23.8e-3, alternative_seconds=18.9e-3)
    text = m.render()
    assert "23.8 ms per step, 18.9 ms on a closed ring" in text and "4.90 ms less on the links" in text
    assert "saves" not in text  # no step figures: no step saving claimed
    # With the step's figures (3.10 ms of these collectives exposed), the saving is the step's, and says so.
    step = dataclasses.replace(m, comm_saving=4.9e-3, exposed_seconds=3.1e-3, step_saving=3.1e-3).render()
    assert "waits 3.10 ms per step" in step and "of the 4.90 ms per step the change takes off the links it saves 3.10 ms" in step


def test_missing_wraparound_without_a_ring_says_whose_step_figures_it_gives():
    """On too few chips for any ring, the step figures are those of the other layout of the same chips (the
    fix): the sentence names it and the collectives it makes cheaper, with the same figures."""
    m = MissingWraparound(axis="data", chips=8, collectives=3, seconds=23.8e-3, alternative_seconds=18.9e-3,
                          wraparound_possible=False, layout="v5e:4x2", comm_saving=4.9e-3, exposed_seconds=3.1e-3,
                          step_saving=3.1e-3)
    assert m.render().endswith(
        "(1.26x, a ring no slice of this size can have, so not a saving). Laid on v5e:4x2 instead (the fix): in "
        "the predicted step the compute waits 3.10 ms per step for the collectives it makes cheaper, so of the "
        "4.90 ms per step the change takes off the links it saves 3.10 ms.")
    hidden = dataclasses.replace(m, exposed_seconds=0.0, step_saving=0.0).render()
    assert hidden.endswith("the collectives it makes cheaper run behind compute (the compute never waits for them), "
                           "so the change saves no step time.")


@pytest.mark.parametrize("exposed,saving,says", [
    (0.0, 0.0, "this communication runs behind compute (the compute never waits for it), so the change saves no "
               "step time."),
    (0.4e-3, 0.4e-3, "the compute waits 400 µs per step for this communication, so of the 1.00 ms per step the "
                     "change takes off the links it saves 400 µs."),
    (1.5e-3, 1.0e-3, "the compute waits 1.50 ms per step for this communication, so the change saves all 1.00 ms "
                     "per step it takes off the links."),
])
def test_step_sentence_says_the_step_saving_it_carries(exposed, saving, says):
    """Savings are in step time (issue 10): the sentence is rendered from comm_saving, exposed_seconds and
    step_saving, and the only saving it states is step_saving."""
    m = ReshardingCollective(kind="all-to-all", change="x", nbytes=1e6, seconds=1e-3, count=1,
                             comm_saving=1e-3, exposed_seconds=exposed, step_saving=saving)
    assert m.render().endswith(says)


def test_roofline_fix_never_prints_an_empty_plan():
    """Issue 9: "fold 'data' (4 ways) into 'model' (2 -> 8): , compute-bound together (... summed = 0.00 <= 1)"
    -- folding the axis away was claimed compute-bound with no figure for the other roofline."""
    fix = roofline_fix("fsdp", 500, 2189, ("data",), 4, [("model", 2)], None, 2189)
    assert ": ," not in fix and "summed = 0.00" not in fix
    assert "fold 'data'" not in fix and "raise the batch per chip" in fix


def test_diagnostic_keeps_its_finding_out_of_json_and_equality():
    m = MissingWraparound(axis="X", chips=8, collectives=1, seconds=2e-3, alternative_seconds=1e-3)
    d = Diagnostic("HA202", "missing-wraparound", m.render(), finding=m)
    assert d == Diagnostic("HA202", "missing-wraparound", m.render())
    assert "finding" not in d.to_dict()
    assert d.finding.fields()["seconds"] == 2e-3


@pytest.mark.slow
def test_rule_messages_are_rendered_from_their_findings(analysed):
    """On real programs every finding of a rule with a message class carries it, and its text is exactly the
    rendering of that finding (nothing appended or edited afterwards but the merge note)."""
    for expr in ("fsdp_matmul(128)", "megatron_mlp(f=8192)", "gather_on_axis('X')", "many_small_psums(False)"):
        for d in analysed(expr).diagnostics:
            if d.code.startswith("HA9"):
                continue
            assert isinstance(d.finding, Message), d.code
            assert d.message.startswith(d.finding.render()), d.code
            # the step saving beside the message is the one the message states (issue 10)
            if d.saving_seconds is not None and d.finding.step_saving is not None:
                assert d.finding.step_saving == d.saving_seconds, d.code


@pytest.mark.slow
def test_ha101_names_the_contraction_the_matmul_has(analysed):
    """Issue 9: "F/Y = 32 features contracted per chip" for a dot that contracts 64. Here A[N, M_X] . B[M, K]
    contracts M/X = 1024/8 = 128 per chip and its output is all-reduced: FLOPs / (2 x elements moved) is 64
    (an AllReduce moves each element twice). The text says both, each for what it is, and the fix speaks of
    F/Y = 128 against twice C/W_ici."""
    d = next(d for d in analysed("sliced_weight_then_psum(False)").diagnostics if d.code == "HA101")
    assert "F/Y / 2 = 64 per output element all-reduced over 'X'" in d.message
    assert "F/Y = 128 features contracted per chip" in d.message
    assert "F/Y = 64 features" not in d.message and "F/Y = 64 means" not in d.fix
    assert "F/Y = 128 (F = 1,024 over 8 ways) is below 5,100" in d.fix and "F/Y >= 5,100" in d.fix
    # no fractional ways (issue 26: "at most F/4,378 = 0.1 ways")
    assert "no sharding of this dimension over 'X' is compute-bound" in d.fix and " = 0." not in d.fix
