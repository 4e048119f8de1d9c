"""No package imports itself in a circle, ``TYPE_CHECKING`` and function-level imports included.

The graph is read from the source (the AST), one package at a time, with an edge for every
``import``/``from ... import`` between two modules of the same package, wherever it sits:
module level, under ``if TYPE_CHECKING:``, inside a function. ``from . import _x`` is an edge
to the submodule ``_x``; ``from . import name`` (a name the package's ``__init__`` defines) is
an edge to the package itself. A circle closed by ``TYPE_CHECKING`` is still a circle: the two
modules cannot be understood, typed or replaced one without the other.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = (
    "kubemoon_core",
    "kubemoon_io",
    "kubemoon_trio",
    "kubemoon_asyncio",
    "kubemoon_sync",
    "kubemoon_testing",
    "kubemoon_cli",
    "configmirror",
)


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(package: str) -> dict[str, set[str]]:
    """Each module of ``package`` and the modules of the same package it imports."""
    files = {_module_name(path): path for path in sorted((ROOT / package).rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.split(".") if is_package else module.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    source = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    targets.add(submodule if submodule in files else source)
        graph[module] = {target for target in targets if target in files and target != module}
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected group of modules, as ``[a, b, ..., a]``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def connect(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                connect(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            group: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return [_circle_in(graph, group) for group in groups]


def _circle_in(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """A shortest circle through the first module of ``group`` (breadth-first)."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for succ in sorted(graph[node] & group):
                if succ == start:
                    return [*paths[node], start]
                if succ not in paths:
                    paths[succ] = [*paths[node], succ]
                    following.append(succ)
        frontier = following
    raise AssertionError(f"no circle in the group {sorted(group)}")  # pragma: no cover


def test_the_cycle_finder_finds_a_planted_circle() -> None:
    graph = {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": {"p.a"}}
    assert find_cycles(graph) == [["p.a", "p.b", "p.c", "p.a"]]
    assert find_cycles({"p.a": {"p.b"}, "p.b": set()}) == []


def test_the_graph_counts_type_checking_imports() -> None:
    graph = import_graph("kubemoon_trio")
    # kubemoon_trio._context imports EventRecorder only under TYPE_CHECKING.
    assert "kubemoon_trio._events" in graph["kubemoon_trio._context"]
    assert "kubemoon_trio._backend" in graph["kubemoon_trio._manager"]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_inside_a_package(package: str) -> None:
    cycles = find_cycles(import_graph(package))
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join(cycle) for cycle in cycles)
