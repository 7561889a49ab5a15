"""No import cycle inside `kbert/`: every module imports only modules that do not import it back.

The graph is read with `ast` from every module under `kbert/`, imports inside
functions included (a lazy import still runs the other module's code in the
middle of this one's, and still couples the two). An edge goes to the module
the import statement executes:

- `import kbert.x.y` and `from kbert.x.y import name` go to `kbert.x.y`;
- `from kbert.x import y` goes to `kbert.x.y` when that is a module or a
  package, else (`y` is a name defined in `kbert/x/__init__.py`) to `kbert.x`;
- a package's `__init__.py` is its own node, named like the package, so
  `import kbert.x` of a package goes to its `__init__`.

The parent packages Python imports on the way (`kbert.x.y` first runs
`kbert/x/__init__.py`) are not edges: every submodule of a package whose
`__init__` re-exports would otherwise be in a cycle with it. But a module that
names its own package's `__init__` (`from kbert.x import name` for a name the
`__init__` re-exports, while that `__init__` imports the module) does count:
the name is not bound yet while the `__init__` is still importing the module,
so which import runs first decides whether it works.

`if TYPE_CHECKING:` blocks are skipped: they never run.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable, Mapping

from tests.conftest import REPO

_PACKAGE = "kbert"


def _module_files(root: str) -> dict[str, str]:
    """Module name -> file path (relative to the repository) of every module under `root`."""
    modules = {}
    base = os.path.dirname(root)
    for directory, _, files in os.walk(root):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            relative = os.path.relpath(os.path.join(directory, name), base)
            parts = relative[: -len(".py")].split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = os.path.relpath(os.path.join(directory, name), REPO)
    return modules


def _is_type_checking_block(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST) -> Iterable[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, outside `if TYPE_CHECKING:` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        for child in ast.iter_child_nodes(node):
            if not _is_type_checking_block(child):
                stack.append(child)


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom,
             modules: Mapping[str, str]) -> Iterable[str]:
    """The kbert modules one import statement of `module` executes (see the module docstring)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name in modules:
                yield alias.name
        return
    source = node.module or ""
    if node.level:  # Relative: from the module's package, one level up per extra dot.
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        source = ".".join(package + ([source] if source else []))
    for alias in node.names:
        submodule = f"{source}.{alias.name}"
        if submodule in modules:
            yield submodule
        elif source in modules:
            yield source


def import_graph(modules: Mapping[str, str]) -> dict[str, dict[str, int]]:
    """Module -> {imported kbert module: line of the first such import}.

    Args:
        modules: mapping of module name to file path (relative to the repository).

    Returns:
        The edges of the import graph, with the line each is made on.
    """
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        with open(os.path.join(REPO, path), encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        edges: dict[str, int] = {}
        is_package = path.endswith("__init__.py")
        for node in _import_nodes(tree):
            for target in _targets(module, is_package, node, modules):
                if edges.get(target, node.lineno + 1) > node.lineno:
                    edges[target] = node.lineno
        graph[module] = edges
    return graph


def strongly_connected_components(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative: the components of `graph` in which a node reaches itself.

    Args:
        graph: mapping of node to its successors. Successors that are not
            keys are nodes without edges.

    Returns:
        Each cycle-holding component (two or more nodes, or one node with an
        edge to itself) as a sorted list; the list sorted.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    components.append(sorted(component))
    return sorted(components)


def shortest_cycle(graph: Mapping[str, Iterable[str]], component: Iterable[str]) -> list[str]:
    """A shortest cycle through the component's first node, as nodes from it back to it.

    Args:
        graph: mapping of node to its successors.
        component: the nodes of one strongly connected component.

    Returns:
        `[start, ..., start]`: each node imports the next.
    """
    members = set(component)
    start = min(members)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        next_frontier = []
        for node in frontier:
            for successor in sorted(graph.get(node, ())):
                if successor not in members:
                    continue
                if successor == start:
                    chain = [node]
                    while chain[-1] != start:
                        chain.append(parents[chain[-1]])
                    return [start, *reversed(chain[:-1]), start] if node != start else [start, start]
                if successor not in parents:
                    parents[successor] = node
                    next_frontier.append(successor)
        frontier = next_frontier
    raise ValueError(f"{sorted(members)} is not a cycle-holding component of the graph.")


def describe_cycle(graph: Mapping[str, Mapping[str, int]], modules: Mapping[str, str],
                   cycle: list[str]) -> str:
    """`a.py:12 -> b.py:40 -> a.py`: each file with the line of its import of the next."""
    steps = [f"{modules[a]}:{graph[a][b]}" for a, b in zip(cycle, cycle[1:])]
    return " -> ".join([*steps, modules[cycle[-1]]])


def test_no_import_cycle_in_kbert():
    modules = _module_files(os.path.join(REPO, _PACKAGE))
    graph = import_graph(modules)
    cycles = [
        f"{', '.join(component)}:\n    {describe_cycle(graph, modules, shortest_cycle(graph, component))}"
        for component in strongly_connected_components(graph)
    ]
    assert not cycles, "Import cycles (module:line of the import -> ...):\n" + "\n".join(cycles)


def test_the_graph_resolves_each_import_form():
    modules = _module_files(os.path.join(REPO, _PACKAGE))
    assert modules["kbert.data"] == os.path.join("kbert", "data", "__init__.py")
    edges = import_graph(modules)["kbert.data"]
    # `from kbert.data.pretraining import create_pretraining_data`: a name of that package.
    assert "kbert.data.pretraining" in edges
    # `from kbert.data.bucketing import batch_by_length`: a module, not its package.
    assert "kbert.data.bucketing" in edges and "kbert" not in edges
    tree = ast.parse("import kbert.data\nfrom kbert.data import text_files, build_vocab\n"
                     "from . import bucketing\nfrom .pretraining import dataset\n")
    found = [sorted(_targets("kbert.data.packing", False, node, modules))
             for node in _import_nodes(tree)]
    assert sorted(map(tuple, found)) == sorted(
        [("kbert.data",), ("kbert.data", "kbert.data.text_files"), ("kbert.data.bucketing",),
         ("kbert.data.pretraining.dataset",)])


def test_type_checking_imports_are_skipped():
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import kbert.data\n"
                     "def f():\n    import kbert.files\n")
    assert sorted(node.names[0].name for node in _import_nodes(tree)) == ["TYPE_CHECKING", "kbert.files"]


def test_cycle_finder_on_a_synthetic_graph():
    graph = {
        "a": {"b"}, "b": {"c"}, "c": {"a", "d"},  # a -> b -> c -> a.
        "d": {"e"}, "e": set(),                   # A chain out of the cycle: no cycle.
        "f": {"f"},                               # Imports itself.
        "g": {"h", "a"}, "h": {"g"},              # g <-> h, and into the first cycle.
        "i": {"missing"},                         # An edge to a node that is not a key.
    }
    assert strongly_connected_components(graph) == [["a", "b", "c"], ["f"], ["g", "h"]]
    assert shortest_cycle(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]
    assert shortest_cycle(graph, ["f"]) == ["f", "f"]
    assert shortest_cycle(graph, ["g", "h"]) == ["g", "h", "g"]
    assert strongly_connected_components({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    lines = {"a": {"b": 3}, "b": {"a": 7}}
    assert describe_cycle(lines, {"a": "a.py", "b": "b.py"}, ["a", "b", "a"]) == "a.py:3 -> b.py:7 -> a.py"


def test_cycle_finder_prefers_the_shortest_chain():
    # a -> b -> c -> d -> a, with the short way a -> d -> a too.
    graph = {"a": {"b", "d"}, "b": {"c"}, "c": {"d"}, "d": {"a"}}
    assert strongly_connected_components(graph) == [["a", "b", "c", "d"]]
    assert shortest_cycle(graph, ["a", "b", "c", "d"]) == ["a", "d", "a"]
