"""The package's layout is its architecture: floors run one way, nothing imports in a circle,
and no module grows past what one reader can hold.

`lint-imports` (run by `make test`) checks the floors declared in pyproject.toml; these tests
check what its contracts cannot say.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import grimp

PACKAGE = "k8s_ai_orchestrator"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE
MAX_MODULE_LINES = 430
BEING_SPLIT: frozenset[str] = frozenset()  # modules allowed over the limit while being split
MAX_HANDLER_AND_BACKEND_LINES = 260


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


def _strings_naming_modules(path: Path, modules: set[str]) -> list[str]:
    """String literals in `path` that name a module of the package, leaving out docstrings and
    logger names: a module started by such a string is a link the import contracts never see."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    prose = {  # docstrings, and getLogger("k8s_ai_orchestrator.x") names
        id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)
    } | {
        id(arg)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", getattr(node.func, "id", None)) == "getLogger"
        for arg in node.args
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            for word in re.findall(rf"\b{PACKAGE}(?:\.\w+)+", node.value):
                parts = word.split(".")
                names = {".".join(parts[:n]) for n in range(2, len(parts) + 1)}
                if names & modules:
                    found.append(f"{path.relative_to(ROOT)}: {word}")
    return found


def test_no_module_path_of_the_package_hides_in_a_string() -> None:
    modules = set(grimp.build_graph(PACKAGE, cache_dir=None).modules)
    offenders = [
        found
        for path in sorted(ROOT.rglob("*.py"))
        for found in _strings_naming_modules(path, modules)
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


def _module_lines() -> dict[str, int]:
    """Lines of each module of the package, by its path under the package."""
    return {
        path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in ROOT.rglob("*.py")
    }


def test_no_module_of_the_package_is_over_430_lines() -> None:
    over = {
        module: lines
        for module, lines in _module_lines().items()
        if lines > MAX_MODULE_LINES and module not in BEING_SPLIT
    }
    assert over == {}


def test_the_step_handler_and_the_kubernetes_backend_are_at_most_260_lines() -> None:
    lines = _module_lines()
    over = {
        module: lines[module]
        for module in ("executor/step_handler.py", "backends/kubernetes/backend.py")
        if lines[module] > MAX_HANDLER_AND_BACKEND_LINES
    }
    assert over == {}


def test_a_kubernetes_run_worker_does_not_load_what_only_the_pods_use() -> None:
    """The backend names the pod-side modules (`steppod`, `gangpods`) by importing them; what
    they run with (psutil, through `proctree`) loads in the pod, not in a resumed run worker
    whose takeover time counts it."""
    code = (
        "import sys, k8s_ai_orchestrator.executor.loop, "
        "k8s_ai_orchestrator.backends.kubernetes.backend; "
        "print(sorted(m for m in ('psutil', 'k8s_ai_orchestrator.proctree') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_loading_a_code_location_does_not_load_the_run_workers_modules() -> None:
    """A code location that names `ai_executor` and `compute` is loaded by the webserver, the
    daemon and every step process: none of them imports the settings, the step handler, the
    loop or a backend; a run worker does, when it builds the executor."""
    code = (
        "import sys; from k8s_ai_orchestrator import ai_executor, compute; "
        "print(sorted(m for m in sys.modules if m.startswith(('k8s_ai_orchestrator.launch', "
        "'k8s_ai_orchestrator.backends', 'k8s_ai_orchestrator.executor.runner', "
        "'k8s_ai_orchestrator.executor.step_handler', 'k8s_ai_orchestrator.executor.loop'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
