"""The package's imports run one way (docs/analysis.md, "Layers"): no cycle between modules, and no module
imports from a layer above its own. Every import counts: module level, inside functions, under
TYPE_CHECKING, a package `__init__` importing its submodules. `scripts/import_cycles.py` prints them; this
keeps a cycle or an upward import from landing unnoticed (one did, an attributes -> verifier import inside a
function, closing attributes -> verifier -> ir -> attributes)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "import_cycles.py"


def _script():
    spec = importlib.util.spec_from_file_location("import_cycles", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_import_cycles():
    ic = _script()
    assert ic.cycle_groups(ic.import_graph()) == [], "import cycles"


def test_no_module_imports_from_a_layer_above_its_own():
    ic = _script()
    graph = ic.import_graph()
    assert ic.unplaced(graph) == [], "modules the layer table of scripts/import_cycles.py does not place"
    assert ic.upward_imports(graph) == [], "imports from a layer above (docs/analysis.md, 'Layers')"


def test_the_layers_are_the_documented_order():
    """The table in the script is the order docs/analysis.md states."""
    ic = _script()
    order = [layer for layer, _ in ic.LAYERS]
    assert order == ["base", "hlo", "theory", "compile", "analysis", "rules", "pipeline", "integrations",
                     "workflows", "render", "cli", "api"]
    doc = (SCRIPT.parent.parent / "docs" / "analysis.md").read_text(encoding="utf-8")
    assert " -> ".join(order) in doc
    assert ic.layer_of("analyzer.formats") == "base" and ic.layer_of("analyzer.rules.config") == "rules"
    assert ic.layer_of("analyzer") == "api" and ic.layer_of("analyzer.brand_new") is None


def _package(tmp_path, files):
    pkg = tmp_path / "analyzer"
    for name, text in files.items():
        path = pkg / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return _script().import_graph(tmp_path)


def test_the_graph_sees_every_kind_of_import(tmp_path):
    """A cycle closed by an import inside a function, under TYPE_CHECKING, or by a package __init__ counts."""
    graph = _package(tmp_path, {
        "__init__.py": "",
        "a.py": "from analyzer import b\n",
        "b.py": "def f():\n    from analyzer import a\n",
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from analyzer.d import D\n",
        "d.py": "import analyzer.c\n",
        "sub/__init__.py": "from analyzer.sub import inner\n",
        "sub/inner.py": "from . import other\n",
        "sub/other.py": "",
    })
    assert graph.has_edge("analyzer.a", "analyzer.b") and graph.has_edge("analyzer.b", "analyzer.a")
    assert graph.has_edge("analyzer.c", "analyzer.d") and graph.has_edge("analyzer.d", "analyzer.c")
    assert graph.has_edge("analyzer.sub", "analyzer.sub.inner")
    assert graph.has_edge("analyzer.sub.inner", "analyzer.sub.other")
    assert _script().cycle_groups(graph) == [["analyzer.a", "analyzer.b"], ["analyzer.c", "analyzer.d"]]


def test_an_import_from_a_layer_above_is_found(tmp_path):
    ic = _script()
    graph = _package(tmp_path, {
        "__init__.py": "",
        "errors.py": "",
        "analysis/__init__.py": "",
        "analysis/report.py": "def to_html():\n    from analyzer.render import html\n",
        "render/__init__.py": "",
        "render/html.py": "from analyzer.analysis import report\nfrom analyzer import errors\n",
    })
    assert ic.upward_imports(graph) == [("analyzer.analysis.report", "analyzer.render.html", "analysis", "render")]
    assert ic.cycle_groups(graph) == [["analyzer.analysis.report", "analyzer.render.html"]]
