"""The Examples in the cost-model modules' docstrings run and give what they say."""

import doctest
import importlib

import pytest

MODULES = ["analyzer.theory.cost", "analyzer.theory.topology", "analyzer.theory.notation", "analyzer.theory.hardware", "analyzer.theory.roofline",
           "analyzer.hlo.sharding"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
