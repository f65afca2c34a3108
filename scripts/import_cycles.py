"""Print the import graph's cycles between modules of the `analyzer` package.

Both import kinds count: imports at module level and imports inside functions (a function-level import
that closes a cycle is still a cycle in the design). Exit status 1 when any cycle exists, so CI can use it.

    python scripts/import_cycles.py            # cycles, or "no cycles"
    python scripts/import_cycles.py --edges    # every edge, for reading the layering
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "analyzer"


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


def import_graph(root: Path = ROOT) -> nx.DiGraph:
    """Module -> imported module, for every import of an `analyzer` module (TYPE_CHECKING blocks excluded)."""
    files = {module_name(p, root): p for p in sorted((root / PACKAGE).rglob("*.py"))}
    graph = nx.DiGraph()
    graph.add_nodes_from(files)
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        skip: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
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
                    # A package's __init__ importing its own submodules is not a design edge.
                    if target.startswith(name + ".") and path.name == "__init__.py":
                        continue
                    graph.add_edge(name, target)
    return graph


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", action="store_true", help="print every edge")
    args = parser.parse_args(argv)
    graph = import_graph()
    if args.edges:
        for a, b in sorted(graph.edges):
            print(f"{a} -> {b}")
    cycles = [c for c in nx.simple_cycles(graph) if len(c) > 1] if not nx.is_directed_acyclic_graph(graph) else []
    sccs = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    if not sccs:
        print(f"no cycles: {graph.number_of_nodes()} modules, {graph.number_of_edges()} imports")
        return 0
    for comp in sccs:
        print(f"cycle group of {len(comp)} modules: {', '.join(comp)}")
    print(f"{len(sccs)} cycle group(s)")
    del cycles
    return 1


if __name__ == "__main__":
    sys.exit(main())
