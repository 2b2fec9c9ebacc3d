"""The suite's modules import each other without a circle, and every import follows an allowed
arrow between the packages' floors (developers' guide: constants live on the lowest floor that
uses them). Every import counts, function-level ones included; only imports under
``if TYPE_CHECKING:`` (annotations, never executed) are left out.

The floors, lowest first:

- ``metrics``, ``methods``: import nothing of the suite (methods raise Python's own exceptions;
  ``benchmark.method_lookup`` turns them into the harness's error);
- ``floor``: the harness modules that reports share (error type, run files, spec fields), importing
  nothing of the suite above them and never torch;
- ``core``: the rest of ``benchmark``, the harness (above methods and metrics);
- ``reports``: tables and figures from result files: the floor only, never torch or a method;
- ``slurm``: submission to a cluster, on top of the harness;
- ``face``: the command line, the ``benchmark.cli`` package, which alone may import everything.
"""
from __future__ import annotations

import ast
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("benchmark", "methods", "metrics", "reports", "slurm")

FLOOR_MODULES = frozenset({"benchmark", "benchmark.errors", "benchmark.spec_fields", "benchmark.run",
                           "benchmark.run.store", "benchmark.run.records",
                           "benchmark.csv_cells", "benchmark.escaping", "benchmark.output_file",
                           "benchmark.run.record_schema", "benchmark.study_summary"})
FACE_PREFIXES = ("benchmark.cli",)
#: floor → the floors its modules may import (its own included)
ALLOWED_ARROWS: dict[str, frozenset[str]] = {
    "metrics": frozenset({"metrics"}),
    "methods": frozenset({"methods"}),
    "floor": frozenset({"floor"}),
    "core": frozenset({"core", "floor", "methods", "metrics"}),
    "reports": frozenset({"reports", "floor"}),
    "slurm": frozenset({"slurm", "core", "floor", "methods", "metrics"}),
    "face": frozenset({"face", "core", "floor", "methods", "metrics", "reports", "slurm"}),
}


def floor_of(module: str) -> str:
    if any(module == p or module.startswith(p + ".") for p in FACE_PREFIXES):
        return "face"
    if module in FLOOR_MODULES:
        return "floor"
    package = module.partition(".")[0]
    return "core" if package == "benchmark" else package


def floor_breaches(graph: dict[str, set[str]]) -> list[str]:
    """Every import ``a → b`` whose floors have no allowed arrow, as ``"a (floor) → b (floor)"``."""
    return [f"{a} ({floor_of(a)}) → {b} ({floor_of(b)})" for a in sorted(graph) for b in sorted(graph[a])
            if floor_of(b) not in ALLOWED_ARROWS[floor_of(a)]]


def _modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
            modules[name] = path
    return modules


def _runtime_imports(name: str, path: Path, modules: dict[str, Path], source: str | None = None) -> set[str]:
    """The suite modules ``name`` imports when it runs (``from X import Y``: the module Y if it is
    one, else X; relative imports resolved against its package); ``source``: read instead of the file."""
    tree = ast.parse(source if source is not None else path.read_text(encoding="utf-8"))
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


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _runtime_imports(name, path, modules) for name, path in modules.items()}


def test_every_import_follows_an_allowed_arrow_between_floors() -> None:
    breaches = floor_breaches(_graph())
    assert not breaches, "imports against the floors (tests/test_import_graph.py):\n" + "\n".join(breaches)


@pytest.mark.parametrize("added", [
    "from benchmark.errors import ProtobenchError\n",
    "def _late():\n    from benchmark.errors import ProtobenchError\n    return ProtobenchError\n",  # function level
])
def test_the_floor_test_fails_when_a_method_imports_the_harness(added: str) -> None:
    """The real graph, with methods/registry.py read as it is plus one import of the harness."""
    modules = _modules()
    graph = _graph()
    path = modules["methods.registry"]
    graph["methods.registry"] = _runtime_imports("methods.registry", path, modules,
                                                 source=path.read_text(encoding="utf-8") + "\n" + added)
    assert floor_breaches(graph) == ["methods.registry (methods) → benchmark.errors (floor)"]


@pytest.mark.parametrize(("importer", "imported", "allowed"), [
    ("reports.load", "benchmark.run.store", True), ("reports.load", "benchmark.config", False),
    ("reports.pivot", "methods.registry", False), ("benchmark.run.runner", "reports.curves", False),
    ("benchmark.grid", "slurm.jobs", False), ("slurm.executors", "benchmark.run.local", True),
    ("benchmark.cli", "slurm.executors", True), ("benchmark.run.store", "benchmark.config", False),
    ("metrics.maps", "methods.base", False), ("benchmark.run.training", "methods.base", True),
])
def test_floors_of_known_arrows(importer: str, imported: str, allowed: bool) -> None:
    assert (not floor_breaches({importer: {imported}})) == allowed


def test_reports_and_the_floor_name_no_torch() -> None:
    """What reports load (their modules and the floor's) imports no torch, function level included."""
    named = []
    for name, path in _modules().items():
        if floor_of(name) not in ("reports", "floor"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            roots = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            named += [f"{name}: {root}" for root in roots if root.partition(".")[0] == "torch"]
    assert not named


FIXTURE_RUNS = REPO / "tests" / "reports" / "fixtures" / "runs" / "cub_main"
J0_GRID = """
name = "j0"
[defaults]
dataset = "synthbirds"
backbone = "dinov2_vits14"
method = "vmfproto"
prototypes_per_class = 0
"""
BAD_ARG_GRID = J0_GRID.replace("prototypes_per_class = 0", "prototypes_per_class = 3\nmethod_args = { tau = 3.0 }")
#: the training stack: none of it may load for a reading command or a refused grid
STACK = ("torch", "torchvision", "timm")


def _cli(argv: list[str], *, blocked: bool, cwd: Path) -> tuple[int, str, str, list[str]]:
    """Exit status, stdout, stderr of ``protobench ARGV`` in a fresh process, and which of the
    training stack it loaded; ``blocked``: every import of the stack raises ImportError."""
    # a finder that refuses the stack (not sys.modules[name] = None: libraries such as scipy's
    # array-api layer read sys.modules["torch"] and would fail on the None itself)
    block = ("class Refuse:\n"
             "    def find_spec(self, name, path=None, target=None):\n"
             f"        if name.partition('.')[0] in {STACK!r}: raise ImportError('blocked: ' + name)\n"
             "sys.meta_path.insert(0, Refuse())\n")
    script = ("import sys\n" + (block if blocked else "")
              + "from benchmark.cli import main\n"
              f"code = main({argv!r})\n"
              f"loaded = [n for n in {STACK!r} if sys.modules.get(n) is not None]\n"
              "print('LOADED', loaded, file=sys.stderr)\n"
              "sys.exit(code)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)
    err, _, loaded = done.stderr.rpartition("LOADED ")
    return done.returncode, done.stdout, err, loaded.strip()


@pytest.mark.parametrize("argv", [
    ["report", str(FIXTURE_RUNS)],
    ["report", str(FIXTURE_RUNS), "--format", "latex"],
    ["compare", str(FIXTURE_RUNS), "--by", "method"],
    ["agreement", str(FIXTURE_RUNS), "--resamples", "100"],
    ["status", str(FIXTURE_RUNS)],
    ["status", str(FIXTURE_RUNS), "--json"],
    ["status", str(REPO / "tests" / "benchmark" / "earlier_results")],  # judged by the probe lock
    ["list", "methods"],
    ["run", "j0.toml"],
    ["plan", "j0.toml"],
    ["tune", "j0.toml", "--trials", "2"],
    ["run", "bad_arg.toml"],
], ids=lambda argv: " ".join(a if "/" not in a else Path(a).name for a in argv))
def test_reading_and_validation_load_no_torch_and_say_the_same_without_it(argv: list[str], tmp_path: Path) -> None:
    """The floor, run as a user runs it: the reading commands and grid validation import no torch,
    torchvision or timm (the registry reads the methods' declarations), and print exactly the same
    with the training stack importable and with it blocked."""
    (tmp_path / "j0.toml").write_text(J0_GRID)
    (tmp_path / "bad_arg.toml").write_text(BAD_ARG_GRID)
    free = _cli(argv, blocked=False, cwd=tmp_path)
    assert free[3] == "[]", f"{argv[0]} loaded {free[3]}"
    assert _cli(argv, blocked=True, cwd=tmp_path) == free
    if any(a.endswith(".toml") for a in argv):
        assert free[0] == 2 and ("J) = 0 must be ≥ 1" in free[2] or "tau = 3.0" in free[2]), free[2]
    else:
        assert free[0] == 0, free[2]


@pytest.mark.parametrize("argv, message", [
    (["tune", "j0.toml", "--batch", "0"], "--batch 0 must be ≥ 1"),
    (["perf", "j0.toml", "--tuning", "0"], "--tuning 0 must lie in 1..64"),
    (["perf", "j0.toml", "--repeats", "0"], "--repeats 0 must be ≥ 1"),
    (["perf", "--reading", "0"], "--reading 0: the synthetic set holds 1 to 420 runs"),
], ids=lambda value: " ".join(value) if isinstance(value, list) else "")
def test_a_bad_tuning_option_is_refused_without_torch(argv: list[str], message: str, tmp_path: Path) -> None:
    """The options of batched and timed tuning are refused before the training stack is imported,
    with the same words when it is blocked."""
    (tmp_path / "j0.toml").write_text(J0_GRID)
    free = _cli(argv, blocked=False, cwd=tmp_path)
    assert free[0] == 2 and message in free[2] and free[3] == "[]", free
    assert _cli(argv, blocked=True, cwd=tmp_path) == free


@pytest.mark.parametrize("argv", [
    ["bundle", "{runs}", "--out", "b"],
    ["site", "{runs}", "--out", "s"],
    ["plot", "{runs}", "--x", "J", "--y", "acc", "--out", "p.png"],
    ["export", "{runs}", "--out", "e.csv"],
], ids=lambda argv: argv[0])
def test_writing_commands_load_no_torch_and_write_the_same_without_it(argv: list[str], tmp_path: Path) -> None:
    """``bundle`` (without --checkpoints), ``site``, ``plot`` and ``export`` need no training stack:
    the same exit, output (but the time they took) and files with it importable and blocked."""
    import json

    from reports_support import write_run

    runs = tmp_path / "runs" / "grid"
    for seed in (0, 1):
        result = write_run(runs, f"run{seed}", seed=seed, J=3, metrics={"acc": 50.0 + seed})
        (result.parent / "spec.json").write_text(json.dumps(json.loads(result.read_text())["spec"]))
    outputs = []
    for blocked in (False, True):
        cwd = tmp_path / ("blocked" if blocked else "free")
        cwd.mkdir()
        code, out, err, loaded = _cli([a.format(runs=runs) for a in argv], blocked=blocked, cwd=cwd)
        assert code == 0 and loaded == "[]", (err, loaded)
        outputs.append(re.sub(r"\d+\.\d+ s\b", "T s", out))
        assert (cwd / argv[argv.index("--out") + 1]).exists()
    assert outputs[0] == outputs[1]
