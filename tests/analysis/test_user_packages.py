"""`analyzer.analysis.mapping.user_packages`: a program written inside an installed package (MaxText's model,
analysed through analyzer.integrations.maxtext) takes its sources from that package's frames, not from the
script that called the analysis; outside the `with`, nothing changes."""

from __future__ import annotations

from types import SimpleNamespace

from analyzer.analysis.mapping import source_frames, user_packages

SITE = "/venv/lib/python3.13/site-packages"
CHAIN = (  # innermost first, as HloModule.frame_chain gives them
    SimpleNamespace(file=f"{SITE}/flax/linen/linear.py", line=40),
    SimpleNamespace(file=f"{SITE}/maxtext/layers/linears.py", line=162),
    SimpleNamespace(file=f"{SITE}/maxtext/layers/decoders.py", line=700),
    SimpleNamespace(file=f"{SITE}/jax/_src/pjit.py", line=10),
    SimpleNamespace(file="/work/main/analyzer/integrations/maxtext.py", line=427),
    SimpleNamespace(file="/home/me/audit.py", line=6),
)
MODULE = SimpleNamespace(frame_chain=lambda frame_id: CHAIN)


def test_without_it_the_callers_line_is_the_source_and_the_library_the_context():
    frames = source_frames(MODULE, 1)
    assert frames.user == "/home/me/audit.py:6"  # the analyzer's own wrapper is never the user's line
    assert frames.package == "maxtext"


def test_within_it_the_packages_innermost_frame_is_the_source():
    with user_packages("maxtext"):
        frames = source_frames(MODULE, 1)
    assert frames.user == f"{SITE}/maxtext/layers/linears.py:162"
    assert (frames.package, frames.library) == ("flax", f"{SITE}/flax/linen/linear.py:40")
    assert source_frames(MODULE, 1).user == "/home/me/audit.py:6"  # put back
