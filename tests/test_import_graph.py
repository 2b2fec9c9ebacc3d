"""The suite's modules import each other without a circle (developers' guide: constants live on the
lowest floor that uses them). Every import counts, function-level ones included; only imports under
``if TYPE_CHECKING:`` (annotations, never executed) are left out."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("benchmark", "methods", "metrics", "reports", "slurm")


def _modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
            modules[name] = path
    return modules


def _runtime_imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The suite modules ``name`` imports when it runs (``from X import Y``: the module Y if it is
    one, else X; relative imports resolved against its package)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    type_only = {id(node) for stmt in tree.body if isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test)
                 for node in ast.walk(stmt)}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            candidates = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in modules:
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != name:
                found.add(candidate)
    return found


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_no_module_of_the_suite_imports_itself_through_another() -> None:
    modules = _modules()
    graph = {name: _runtime_imports(name, path, modules) for name, path in modules.items()}
    circles = _circles(graph)
    detail = "; ".join(" ↔ ".join(c) + ": " + ", ".join(f"{a} → {b}" for a in c for b in sorted(graph[a]) if b in c)
                       for c in circles)
    assert not circles, f"import circles: {detail}"


@pytest.mark.parametrize(("graph", "expected"), [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set()}, []),
    ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [["a", "b"], ["c", "d"]]),
])
def test_circle_finder_on_known_graphs(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert sorted(_circles(graph)) == expected
