"""Shared fixtures for the rule tests: each fixture program is compiled and analysed once per session."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def analysed():
    """`analysed("fsdp_matmul(128)")` -> the Report of that program from tests/rules/programs.py (cached)."""
    import programs  # tests/rules/programs.py

    import analyzer

    cache: dict[str, object] = {}

    def get(expr: str):
        if expr not in cache:
            prog = eval(expr, vars(programs))  # noqa: S307 - test-local expressions naming programs.py functions
            cache[expr] = analyzer.analyze(prog.fn, *prog.args, **prog.kwargs)
        return cache[expr]

    return get
