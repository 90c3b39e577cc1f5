"""The import contract: the packages of peer/ form layers. No package imports one that imports
it back, however far round (a cycle of packages), and peer/values, at the bottom, imports none
of them. Read from the sources, so a new cycle fails here before anything runs it."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

PEER = Path(__file__).resolve().parents[2] / "peer"


def _package(module: str) -> str:
    """The package of ``peer.x.y`` (x), or the module itself for ``peer.x``."""
    return module.split(".")[1]


def _imports(path: Path) -> Iterator[str]:
    """The peer modules a source file imports, anywhere in it (a function's own imports too)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "peer":
                yield from (f"peer.{alias.name}" for alias in node.names)
            elif node.module.startswith("peer."):
                yield node.module
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("peer."))


def package_graph() -> dict[str, dict[str, list[str]]]:
    """For each package, the packages it imports, each with the modules that do."""
    graph: dict[str, dict[str, list[str]]] = {}
    for path in sorted(PEER.rglob("*.py")):
        parts = path.relative_to(PEER.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if module == "peer":
            continue
        source = _package(module)
        edges = graph.setdefault(source, {})
        for target in _imports(path):
            if _package(target) != source:
                edges.setdefault(_package(target), []).append(f"{module} imports {target}")
    return graph


def cycles(graph: Mapping[str, Mapping[str, list[str]]]) -> list[list[str]]:
    """The strongly connected components of more than one package (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, {})):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while (top := stack.pop()) != node:
                component.append(top)
            component.append(node)
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def _why(graph: Mapping[str, Mapping[str, list[str]]], component: list[str]) -> list[str]:
    return [line for a in component for b in component if a != b for line in graph[a].get(b, [])]


def test_no_package_imports_one_that_imports_it_back():
    graph = package_graph()
    found = cycles(graph)
    assert not found, "\n".join(
        f"{' <-> '.join(c)}:\n  " + "\n  ".join(_why(graph, c)) for c in found
    )


def test_the_shared_values_import_no_other_package():
    assert package_graph().get("values", {}) == {}


def test_a_cycle_is_found_however_far_round():
    """The check can fail: three packages in a ring, and one that stands apart."""
    ring = {"a": {"b": ["a.x imports b.y"]}, "b": {"c": ["b.y imports c.z"]},
            "c": {"a": ["c.z imports a.x"]}, "d": {"a": ["d.w imports a.x"]}}  # fmt: skip
    assert cycles(ring) == [["a", "b", "c"]]
    assert _why(ring, ["a", "b", "c"]) == ["a.x imports b.y", "b.y imports c.z", "c.z imports a.x"]
