"""The Examples in analyzer.lower's and analyzer.models's docstrings run and give what they say."""

import doctest
import importlib

import pytest


@pytest.mark.slow
@pytest.mark.parametrize("name", ["analyzer.lower", "analyzer.models"])
def test_docstring_examples(name, monkeypatch):
    monkeypatch.chdir(__import__("pathlib").Path(__file__).resolve().parents[2])  # examples.chapter importable
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
