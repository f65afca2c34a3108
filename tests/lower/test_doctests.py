"""The Examples in analyzer.compile.lower's and analyzer.compile.models's docstrings run and give what they say."""

import doctest
import importlib

import pytest


@pytest.mark.slow
@pytest.mark.parametrize("name", ["analyzer.compile.lower", "analyzer.compile.models"])
def test_docstring_examples(name, monkeypatch):
    monkeypatch.chdir(__import__("pathlib").Path(__file__).resolve().parents[2])  # examples.chapter importable
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
