"""The package's layout is its architecture: floors run one way and nothing imports in a circle.

`lint-imports` (run by `make test`) checks the floors declared in pyproject.toml; these tests
check what its contracts cannot say.
"""

from __future__ import annotations

import ast
from pathlib import Path

import grimp

PACKAGE = "k8s_ai_orchestrator"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
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
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_the_package_imports_in_a_circle() -> None:
    graph = grimp.build_graph(PACKAGE, cache_dir=None)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert _cycles(edges) == []


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_only_the_executor_package_imports_dagster_internals() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for path in ROOT.rglob("*.py")
        if path.relative_to(ROOT).parts[0] != "executor"
        and any(name.startswith("dagster._") for name in _imports(path))
    ]
    assert offenders == []


def test_every_backend_is_a_package_of_its_own() -> None:
    backends = ROOT / "backends"
    modules = {p.name for p in backends.glob("*.py")}
    loose = sorted(modules - {"__init__.py", "base.py"})
    assert loose == []
    assert sorted(p.name for p in backends.iterdir() if (p / "__init__.py").exists()) == [
        "kubernetes",
        "local",
        "slurm",
    ]
