"""What the behaviour probe cannot see, and the digest that keeps the byte rule for it (no torch).

The probe (benchmark/behaviour/probe.py) runs one CPU thread in float64 on 3 classes and 144
images. Three kinds of code can change a result without changing its outputs:

1. **code it never runs** (found by coverage.py while ``check-code`` probes), in the functions a
   run of the method can reach: CUDA-only branches (``device.type == "cuda"``), bfloat16/float16
   branches, hyperparameter settings no probed configuration takes, branches only a larger
   problem reaches. For the method's own files, code its own probe never runs; for the harness
   (the training loop and what it reads, shared by every method), code no probe of the suite
   runs (every method's and the harness's own, benchmark/behaviour/harness_probe.py);
2. **precision constructs**, which run but do nothing in float64: every statement that names
   :data:`PRECISION_NAMES` (``@float32_island``, ``with autocast(...)``, ``torch.bfloat16`` …);
3. **scale-bound code**, which runs but binds only at the paper's scale (C = 200, thousands of
   images): the definitions listed in :data:`BEYOND_THE_PROBE` with why.

Their text (each statement's syntax tree: comments and layout never count; a compound statement by
its header) enters the **blind digest**. A source edit that changes any of it reads stale by bytes
whatever the probe says; an edit elsewhere is judged by the probe. ``raise`` and ``assert``
statements never change a number (they stop a run), so they are left out.
"""
from __future__ import annotations

import ast
import copy
import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

#: names whose statements matter only under bf16/fp16/tf32 (methods/common/precision.py)
PRECISION_NAMES = frozenset({"float32_island", "autocast", "autocast_off", "matmul_precision", "bfloat16",
                             "float16", "half", "allow_tf32", "set_float32_matmul_precision"})

#: module → definition → why the probe cannot judge it: it runs, but only binds at the paper's scale
#: or precision (each entry's whole syntax tree enters the blind digest)
BEYOND_THE_PROBE: dict[str, dict[str, str]] = {
    "methods.common.precision": {
        "_LOW": "the dtypes an island widens: float64 probes hand it none",
        "_AUTOCAST_DEVICES": "the device types an island switches autocast off on: the probe runs no autocast",
        "_widen": "widens bfloat16/float16 arguments: the probe's are float64",
        "autocast_off": "switches autocast off: the probe runs none",
        "float32_island": "an island under bf16: a no-op in float64",
        "autocast": "the bf16 autocast region: the probe runs fp32",
        "matmul_precision": "TF32 matmuls: CUDA only",
    },
    "methods.mgproto.model": {
        "OFFICIAL_MEMORY_CAPACITY": "the memory bank's size: the probe's 132 images never fill it",
        "MEMORY_CAPACITY": "the memory bank's size: the probe's 132 images never fill it",
    },
}

_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")
_SILENT = (ast.Raise, ast.Assert, ast.Pass)


@dataclass(frozen=True)
class BlindStatement:
    """One piece of code the probe cannot judge: where it is and why."""

    module: str
    line: int
    kind: str  # "unexecuted" | "precision" | "declared"
    text: str  # its syntax tree (ast.dump)

    def describe(self) -> str:
        return f"{self.module}:{self.line} ({self.kind})"


def _header(node: ast.stmt) -> ast.AST:
    """``node`` without the statements it contains (a def keeps its decorators, arguments and name)."""
    shallow = copy.copy(node)
    for field in _BODIES:
        if hasattr(shallow, field):
            setattr(shallow, field, [])
    return shallow


def _dump(node: ast.AST) -> str:
    return ast.dump(node, annotate_fields=True, include_attributes=False)


def _statements(body: list[ast.stmt], in_function: bool) -> Iterator[tuple[ast.stmt, bool]]:
    """Every statement below ``body`` with whether it lies inside a function (runs when called)."""
    for node in body:
        yield node, in_function
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for field in _BODIES:
            for child in getattr(node, field, None) or []:
                if isinstance(child, ast.ExceptHandler):
                    yield from _statements(child.body, inner)
                elif isinstance(child, ast.match_case):
                    yield from _statements(child.body, inner)
                else:
                    yield from _statements([child], inner)


def _header_lines(node: ast.stmt) -> range:
    """The lines of ``node``'s own code (a compound statement's header, decorators included)."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    inner = [child.lineno for field in _BODIES for child in getattr(node, field, None) or []
             if hasattr(child, "lineno")]
    last = (min(inner) - 1) if inner else (node.end_lineno or node.lineno)
    return range(first, max(first, last) + 1)


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def _defined(node: ast.stmt) -> set[str]:
    """The names a module-level statement defines (a def or class, or an assignment's targets)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
        if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


@dataclass(frozen=True)
class _Function:
    """One function (a method too) of a probed file; a def nested in it is part of it."""

    module: str
    node: ast.FunctionDef | ast.AsyncFunctionDef
    owner: str | None  # its class's name; None at module level

    def statements(self) -> list[ast.stmt]:
        return [node for node, _ in _statements(self.node.body, True)]


@dataclass
class _Module:
    name: str
    tree: ast.Module
    functions: list[_Function]
    roots: list[ast.AST]  # what runs at import: module- and class-level statements, decorators, class bases


def _parse(module: str, path: Path) -> _Module:
    tree = ast.parse(path.read_bytes(), filename=str(path))
    functions: list[_Function] = []
    roots: list[ast.AST] = []

    def visit(body: list[ast.stmt], owner: str | None) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions.append(_Function(module, node, owner))
                # what runs at definition: decorators and default values (annotations never run:
                # every module of the suite has ``from __future__ import annotations``)
                roots.extend([*node.decorator_list, *node.args.defaults, *(d for d in node.args.kw_defaults if d)])
            elif isinstance(node, ast.ClassDef):
                roots.extend([*node.decorator_list, *node.bases, *node.keywords])
                visit(node.body, node.name)
            elif not isinstance(node, (ast.Import, ast.ImportFrom)):
                roots.append(node)

    visit(tree.body, None)
    return _Module(module, tree, functions, roots)


def _reachable(modules: list[_Module], executed: Mapping[str, set[int]]) -> list[_Function]:
    """The functions a run of the probed method can reach, transitively from what runs at import
    and what the probe entered: a function the probe entered; a module-level function whose name
    reachable code names; a method whose name reachable code names (or that Python calls by itself:
    a dunder, ``forward``) of a class reachable code names or one of whose methods was entered.
    Names are matched across the files (a name that could call it). A function nothing reachable
    names (another method's code in a shared module) cannot change this method's numbers."""
    functions = [f for m in modules for f in m.functions]
    entered = {id(f) for f in functions
               if any(executed.get(f.module, set()).intersection(_header_lines(s)) for s in f.statements())}
    referenced = set().union(*(_names(root) for m in modules for root in m.roots))
    reached: dict[int, _Function] = {id(f): f for f in functions if id(f) in entered}
    while True:
        for f in reached.values():
            referenced |= set().union(*(_names(s) for s in f.statements()), set())
        classes = {f.owner for f in reached.values() if f.owner} | referenced
        more = {id(f): f for f in functions if id(f) not in reached and (
            f.node.name in referenced if f.owner is None else
            f.owner in classes and (f.node.name in referenced or _called_by_python(f.node.name)))}
        if not more:
            return list(reached.values())
        reached.update(more)


def _called_by_python(name: str) -> bool:
    """A method Python (or torch's ``nn.Module.__call__``) calls without naming it in our code."""
    return (name.startswith("__") and name.endswith("__")) or name == "forward"


def boundary(files: Mapping[str, Path], executed: Mapping[str, set[int]],
             emit: frozenset[str] | None = None) -> list[BlindStatement]:
    """Every statement of ``files`` (module → path; ``emit``: of those modules only, the others
    still naming what is reachable) the probes cannot judge, given the lines they ran
    (``executed``: module → lines coverage saw run): in the functions a run can reach
    (:func:`_reachable`), the statements that did not run, and the statements naming a precision
    construct; anywhere, the declared definitions (:data:`BEYOND_THE_PROBE`)."""
    modules = [_parse(module, path) for module, path in sorted(files.items())]
    found: list[BlindStatement] = []
    for m in modules:
        declared = set(BEYOND_THE_PROBE.get(m.name, {}))
        found += [BlindStatement(m.name, node.lineno, "declared", _dump(node))
                  for node in m.tree.body if _defined(node) & declared]
        found += [BlindStatement(m.name, root.lineno, "precision", _dump(_header(root)))
                  for root in m.roots if isinstance(root, ast.stmt) and _names(_header(root)) & PRECISION_NAMES]
    for f in _reachable(modules, executed):
        ran = executed.get(f.module, set())
        header = _header(f.node)
        if _names(header) & PRECISION_NAMES:  # a decorated island
            found.append(BlindStatement(f.module, f.node.lineno, "precision", _dump(header)))
        for node in f.statements():
            if _is_docstring(node):
                continue
            header = _header(node)
            if _names(header) & PRECISION_NAMES:
                found.append(BlindStatement(f.module, node.lineno, "precision", _dump(header)))
            elif not isinstance(node, _SILENT) and not ran.intersection(_header_lines(node)):
                found.append(BlindStatement(f.module, node.lineno, "unexecuted", _dump(header)))
    return sorted((s for s in found if emit is None or s.module in emit), key=lambda s: (s.module, s.line))


def blind_digest(statements: list[BlindStatement]) -> str:
    """sha256 over the sorted (kind, text) of ``statements``: where they are does not count, what
    they say does (moving a block between modules keeps it; any edit of one changes it)."""
    items = sorted((s.kind, s.text) for s in statements)
    return hashlib.sha256(json.dumps(items).encode()).hexdigest()
