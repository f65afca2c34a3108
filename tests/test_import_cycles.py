"""The package's imports run one way (README, "Working on it"): no cycle between modules, function-level imports
included. `scripts/import_cycles.py` prints them; this keeps a cycle from landing unnoticed (one did, an
attributes -> verifier import inside a function, closing attributes -> verifier -> ir -> attributes)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import networkx as nx

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "import_cycles.py"


def _script():
    spec = importlib.util.spec_from_file_location("import_cycles", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_import_cycles():
    graph = _script().import_graph()
    groups = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert groups == [], f"import cycles: {groups}"


def test_the_graph_sees_function_level_imports(tmp_path):
    """A cycle closed by an import inside a function counts (the kind this test exists for)."""
    pkg = tmp_path / "analyzer"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from analyzer import b\n")
    (pkg / "b.py").write_text("def f():\n    from analyzer import a\n")
    graph = _script().import_graph(tmp_path)
    assert graph.has_edge("analyzer.a", "analyzer.b") and graph.has_edge("analyzer.b", "analyzer.a")
