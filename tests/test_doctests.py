"""Every Example in the package's docstrings runs and gives what it says: doctest over every `analyzer` module.

Each docstring with examples is one test (id: its dotted name), so a failure names the function and
`--durations` shows which examples are slow. Examples run from the repository root with it on `sys.path`, as
in a checkout: `fixtures/...` paths and `examples.chapter` resolve. Examples that need a live report use
`report`, built once per session from a committed fixture (no compile): the cpu target's HLO after SPMD
partitioning of `examples.chapter:fsdp_tp_mlp_step` (a 4-layer scanned MLP, FSDP over X and tensor parallel
over Y) on the mesh X=2,Y=4, priced on tpu-v5e. Examples that compile a program are marked slow (`SLOW`).
"""

from __future__ import annotations

import copy
import doctest
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import analyzer

ROOT = Path(__file__).resolve().parents[1]
REPORT_FIXTURE = ROOT / "fixtures" / "cpu" / "X2_Y4" / "fsdp_tp_mlp_step.spmd.hlo"
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE

# Docstrings whose examples compile a jax program or draw the HTML report's plots (seconds each): run by the
# whole suite, not the fast loop.
SLOW = {
    "analyzer.compile.lower",
    "analyzer.compile.lower.lower",
    "analyzer.compile.lower.lower_entry",
    "analyzer.compile.models",
    "analyzer.compile.models.build",
    "analyzer.pipeline.analyze",
    "analyzer.workflows.sweep.evaluate_task",
    "analyzer.render.html.render",
    "analyzer.testing.assert_collectives",
    "analyzer.workflows.demo.run_demo",
    "analyzer.workflows.sweep.evaluate",
}


def _docstring_tests() -> list[doctest.DocTest]:
    finder = doctest.DocTestFinder()
    tests = []
    for info in pkgutil.walk_packages(analyzer.__path__, "analyzer."):
        if info.name.rsplit(".", 1)[-1] == "__main__":  # running it is the CLI
            continue
        module = importlib.import_module(info.name)
        tests += [t for t in finder.find(module, info.name) if t.examples]
    return sorted(tests, key=lambda t: t.name)


TESTS = _docstring_tests()


def test_every_module_is_collected():
    """The walk reaches every layer of the package (a module that fails to import would stop collection)."""
    prefixes = {t.name.split(".")[1] for t in TESTS}
    assert {"hlo", "theory", "analysis", "compile", "render", "rules", "workflows", "units", "errors"} <= prefixes


def test_slow_list_names_real_docstrings():
    assert SLOW <= {t.name for t in TESTS}, SLOW - {t.name for t in TESTS}


@pytest.fixture(scope="session")
def doctest_report():
    return analyzer.analyze_hlo(REPORT_FIXTURE, mesh="X=2,Y=4", hardware="tpu-v5e")


@pytest.mark.parametrize(
    "test", [pytest.param(t, id=t.name, marks=[pytest.mark.slow] if t.name in SLOW else []) for t in TESTS])
def test_docstring_examples(test: doctest.DocTest, request: pytest.FixtureRequest,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(ROOT))
    test = copy.copy(test)
    test.globs = dict(test.globs)
    if "report" not in test.globs and any(re.search(r"\breport\b", e.source) for e in test.examples):
        test.globs["report"] = request.getfixturevalue("doctest_report")
    out: list[str] = []
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    runner.run(test, out=out.append, clear_globs=False)
    assert runner.failures == 0, "".join(out)
