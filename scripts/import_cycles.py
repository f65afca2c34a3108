"""Print the import graph's cycles between modules of the `analyzer` package, and every import that runs up
the layers (docs/analysis.md, "Layers").

Every import counts: at module level, inside functions, under `if TYPE_CHECKING:`, and a package `__init__`
importing its own submodules (each is a dependency the design must keep one way, whether or not it runs at
import time). Exit status 1 when any cycle exists or any module imports from a layer above its own, so CI can
use it.

    python scripts/import_cycles.py            # cycles and upward imports, or "no cycles"
    python scripts/import_cycles.py --edges    # every edge, for reading the layering
    python scripts/import_cycles.py --layers   # the layer table: modules, lines and imports per layer
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "analyzer"

# The layers, lowest first: a module may import its own layer and the layers below it, never one above.
# A module belongs to the layer of its longest prefix here (`analyzer` itself names the top package alone);
# one the table does not place is an error: a new top-level module is given its layer here.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("analyzer.errors", "analyzer.units", "analyzer.numeric", "analyzer.diagnostics", "analyzer.fileio",
              "analyzer._signals", "analyzer.formats", "analyzer.version")),
    ("hlo", ("analyzer.hlo",)),
    ("theory", ("analyzer.theory",)),
    ("compile", ("analyzer.compile",)),
    ("analysis", ("analyzer.analysis",)),
    ("rules", ("analyzer.rules",)),
    ("pipeline", ("analyzer.pipeline",)),
    ("integrations", ("analyzer.integrations",)),
    ("workflows", ("analyzer.workflows",)),
    ("render", ("analyzer.render",)),
    ("cli", ("analyzer.cli",)),
    ("api", ("analyzer", "analyzer.__main__", "analyzer.testing")),
)


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def resolve(current: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = current.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Module name -> file, for every module of the package."""
    return {module_name(p, root): p for p in sorted((root / PACKAGE).rglob("*.py"))}


def import_graph(root: Path = ROOT) -> nx.DiGraph:
    """Module -> imported module, for every import of an `analyzer` module, of every kind (module level, in a
    function, under TYPE_CHECKING, a package `__init__` importing its submodules)."""
    files = modules(root)
    graph = nx.DiGraph()
    graph.add_nodes_from(files)
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = resolve(name, path.name == "__init__.py", node)
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base
                           for alias in node.names]
            for target in targets:
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target and target != name and target.startswith(PACKAGE):
                    graph.add_edge(name, target)
    return graph


def layer_of(module: str, layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> str | None:
    """The layer of a module: that of its longest prefix in the table (None when the table does not place it)."""
    best: tuple[int, str] | None = None
    for layer, prefixes in layers:
        for prefix in prefixes:
            inside = module.startswith(prefix + ".") and prefix != PACKAGE  # the top package is itself alone
            if (module == prefix or inside) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), layer)
    return best[1] if best else None


def upward_imports(graph: nx.DiGraph, layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS
                   ) -> list[tuple[str, str, str, str]]:
    """(importer, imported, importer's layer, imported's layer) for every import of a layer above."""
    rank = {layer: i for i, (layer, _) in enumerate(layers)}
    out = []
    for a, b in sorted(graph.edges):
        la, lb = layer_of(a, layers), layer_of(b, layers)
        if la is not None and lb is not None and rank[lb] > rank[la]:
            out.append((a, b, la, lb))
    return out


def unplaced(graph: nx.DiGraph, layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> list[str]:
    """Modules the layer table does not place."""
    return sorted(m for m in graph.nodes if layer_of(m, layers) is None)


def cycle_groups(graph: nx.DiGraph) -> list[list[str]]:
    """The strongly connected groups of more than one module, each sorted."""
    return sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1)


def layer_table(graph: nx.DiGraph, root: Path = ROOT) -> list[tuple[str, int, int, int]]:
    """(layer, modules, lines, imports from the layer to layers below) per layer, lowest first."""
    files = modules(root)
    count: Counter[str] = Counter()
    lines: Counter[str] = Counter()
    down: Counter[str] = Counter()
    for name, path in files.items():
        layer = layer_of(name) or "(unplaced)"
        count[layer] += 1
        lines[layer] += len(path.read_text(encoding="utf-8").splitlines())
    for a, b in graph.edges:
        if layer_of(a) != layer_of(b):
            down[layer_of(a) or "(unplaced)"] += 1
    names = [layer for layer, _ in LAYERS] + (["(unplaced)"] if count["(unplaced)"] else [])
    return [(layer, count[layer], lines[layer], down[layer]) for layer in names]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", action="store_true", help="print every edge")
    parser.add_argument("--layers", action="store_true", help="print the layer table (modules, lines, imports)")
    args = parser.parse_args(argv)
    graph = import_graph()
    if args.edges:
        for a, b in sorted(graph.edges):
            print(f"{a} -> {b}")
    if args.layers:
        print(f"{'layer':<13} {'modules':>7} {'lines':>7} {'imports of layers below':>24}")
        for layer, n, lines, down in layer_table(graph):
            print(f"{layer:<13} {n:>7} {lines:>7} {down:>24}")
    groups, upward = cycle_groups(graph), upward_imports(graph)
    problems = ([f"cycle group of {len(c)} modules: {', '.join(c)}" for c in groups]
                + [f"upward import: {a} ({la}) -> {b} ({lb})" for a, b, la, lb in upward]
                + [f"not in the layer table: {m}" for m in unplaced(graph)])
    counts = f"{graph.number_of_nodes()} modules, {graph.number_of_edges()} imports, {len(LAYERS)} layers"
    if not problems:
        print(f"no cycles, no upward imports: {counts}")
        return 0
    print("\n".join(problems))
    print(f"{len(groups)} cycle group(s), {len(upward)} upward import(s): {counts}")
    return 1

if __name__ == "__main__":
    sys.exit(main())
