"""Where a collective comes from (issue 11 item 1): the innermost frame of the user's own code, never an
installed package or the standard library, with the library frame it called into kept as context."""

from __future__ import annotations

import os
import sysconfig

import pytest

from analyzer.analysis.mapping import package_of, source_frames, user_frame
from analyzer.diagnostics import Diagnostic, Location
from analyzer.hlo.ir import Frame
from analyzer.render._common import where
from analyzer.rules.runner import with_context

VENV = "/opt/venv/lib/python3.11/site-packages"
STDLIB = sysconfig.get_paths()["stdlib"]


class Stack:
    """A module stand-in whose only stack is `frames`, innermost first (what `HloModule.frame_chain` returns)."""

    def __init__(self, *frames: tuple[str, int]):
        self.frames = tuple(Frame(i, f, "fn", line, 1) for i, (f, line) in enumerate(frames))

    def frame_chain(self, frame_id):
        return self.frames if frame_id is not None else ()


@pytest.mark.parametrize("file, package", [
    (f"{VENV}/transformers/models/llama/modeling_flax_llama.py", "transformers"),
    (f"{VENV}/flax/linen/linear.py", "flax"),
    ("/usr/lib/python3/dist-packages/optax/_src/alias.py", "optax"),
    (f"{VENV}/six.py", "six"),
    (os.path.join(STDLIB, "contextlib.py"), "python"),
    ("/home/me/jax-src/jax/_src/numpy/lax_numpy.py", "jax"),
    ("/home/me/proj/train.py", None),
    ("model.py", None),
])
def test_package_of(file, package):
    assert package_of(file) == package


def test_the_user_frame_skips_every_library_and_keeps_the_one_it_called_as_context():
    stack = Stack(
        ("/home/me/jax-src/jax/_src/lax/lax.py", 5000),          # jax itself
        (f"{VENV}/flax/linen/linear.py", 263),                    # flax's Dense, called by transformers
        (f"{VENV}/transformers/models/llama/modeling_flax_llama.py", 412),
        (f"{VENV}/transformers/models/llama/modeling_flax_llama.py", 530),
        (os.path.join(STDLIB, "contextlib.py"), 81),              # a `with` block of the standard library
        ("/home/me/proj/train.py", 12),                           # the user's line
        ("/home/me/proj/main.py", 3),
    )
    frames = source_frames(stack, 0)
    assert frames.user == "/home/me/proj/train.py:12" and frames.package == "transformers"
    # the library the user's line called (through a contextlib wrapper): transformers, at its innermost frame
    assert frames.library == f"{VENV}/transformers/models/llama/modeling_flax_llama.py:412"
    assert frames.context == "in transformers' modeling_flax_llama.py:412"
    assert user_frame(stack, 0) == "/home/me/proj/train.py:12"


def test_jax_called_directly_has_no_context_and_a_library_only_stack_falls_back():
    direct = source_frames(Stack(("/x/jax/_src/numpy/einsum.py", 9), ("/home/me/proj/train.py", 7)), 0)
    assert direct.user == "/home/me/proj/train.py:7" and direct.context == ""
    # a program traced entirely inside a library (a model zoo's own script): its innermost non-jax frame
    only = source_frames(Stack(("/x/jax/_src/lax/lax.py", 1), (f"{VENV}/zoo/run.py", 40)), 0)
    assert only.user == f"{VENV}/zoo/run.py:40"
    # no stack tables: the metadata's source_file:source_line, unless it is a library's
    assert source_frames(Stack(), None, "/home/me/proj/train.py", 5).user == "/home/me/proj/train.py:5"


def test_findings_carry_the_context_and_reports_print_it(make_report_with_context):
    report = make_report_with_context
    d = Diagnostic("HA302", "resharding-traffic", "m", location=Location("train.py", 12, instruction="all-to-all.2"))
    (out,) = with_context([d], report)
    assert out.location.context == "in transformers' modeling_flax_llama.py:412"
    assert out.fingerprint() == d.fingerprint()  # the context never changes a baseline's key
    assert where(out) == "train.py:12 (in transformers' modeling_flax_llama.py:412)"


@pytest.fixture
def make_report_with_context():
    import pandas as pd

    from analyzer.analysis.report import COLLECTIVE_COLUMNS, Report, Totals

    row = {c: None for c in COLLECTIVE_COLUMNS}
    row.update(instruction="all-to-all.2,copy.3", context="in transformers' modeling_flax_llama.py:412")
    return Report(collectives=pd.DataFrame([row], columns=list(COLLECTIVE_COLUMNS)), dots=pd.DataFrame(),
                  totals=Totals(0.0, 0.0), hlo=None, mesh=None, hardware="tpu-v5e", topology="", target="dump")
