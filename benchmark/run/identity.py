"""What a finished run's result depends on, and whether the current code still gives it.

Two things name a result (docs/design/run-identity.md):

- the **run id** hashes the resolved configuration: every RunSpec field that shapes the
  result and the method's hyperparameters *with their defaults filled in*
  (:meth:`benchmark.config.RunSpec.identity`), so a changed value, a changed default
  included, is another run;
- the **method fingerprint** (source digest) hashes the source files that define the method: the
  module (or package) of its adapter class and, transitively, every module it imports from the
  suite's ``methods/`` package or from the adapter's own package, with the harness modules its
  behaviour probe runs (:data:`PROBED_HARNESS_MODULES`). A result whose fingerprint is not the
  current code's is judged by **behaviour** where the method's package keeps a probe lock
  (benchmark/behaviour/): it reads current ("code refactored since; behaviour identical") when
  the lock records both digests with one behaviour and one blind digest (the code the probe cannot
  see, byte for byte), and **stale** otherwise: kept and shown, flagged by every reader, never
  silently reused (``run`` skips it unless ``--rerun-stale``). Without a lock, any edit is stale.

A result written before the run id covered resolved hyperparameters has no fingerprint and
lies under its earlier run id: it reads stale ("earlier version").

The **metrics fingerprint** hashes the ``metrics`` package, the code that scores every result.
A result scored by other metric code is not retrained: it is flagged (:func:`rescoring`) and
``protobench evaluate RUN_DIR --rescore`` scores its checkpoint again, so one table never mixes
two scorings.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmark.config import RunSpec
from benchmark.errors import ProtobenchError
from benchmark.run.own_code import UNVERIFIABLE, NO_IMPORTS, AdapterImports, is_own_method, unverifiable_reason
from benchmark.run.store import (LOCKED_FILES, RESULT_FILE, STAGE_CANCELLED_FILE, STAGE_FAILURE_FILE, STAGE_JOB_FILE,
                                  STAGE_PARTIAL_DIR, RunDir, read_json, run_lock)

if TYPE_CHECKING:
    from benchmark.behaviour.lock import Lock
    from methods.plugins import Provider

SUITE_METHODS_PACKAGE = "methods"  # the suite's own adapters and their shared code
METRICS_PACKAGE = "metrics"  # every score of a result.json is computed there
# Modules of ``methods`` that adapters import but that compute nothing a result holds: the
# registry (names, argument checks), its stand-in block, the contract checks, diagnostics.
HARNESS_MODULES = frozenset({"methods.registry", "methods.testing", "methods.contract", "methods.diagnostics",
                              "methods.space", "methods.declaration", "methods.plugins"})  # space: the ranges a
# tuner searches, not the method; declaration, plugins and the declarations themselves: what readers read
DECLARATION_PACKAGE = "methods.specs"
#: the harness modules every behaviour probe runs (benchmark/behaviour/probe.py): the training loop,
#: its schedules, checkpoints and batch reading, the frozen per-image features; part of every
#: method's source digest
PROBED_HARNESS_MODULES = ("benchmark.run.training", "benchmark.run.steps", "benchmark.run.schedules", "benchmark.run.checkpoint",
                          "benchmark.cache.prefetch", "benchmark.cache.frozen")


def _module_file(name: str) -> Path | None:
    """The source file of module ``name`` (None: not found, or no Python source), found on disk
    without importing it or its parent packages (a package's ``__init__`` may import torch: the
    fingerprint of a result is read the same with and without it)."""
    top, _, rest = name.partition(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level name is located, never executed
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not rest:
        return Path(spec.origin) if spec.origin and spec.origin.endswith(".py") else None
    for location in spec.submodule_search_locations or ():
        base = Path(location).joinpath(*rest.split("."))
        for candidate in (base.parent / f"{base.name}.py", base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def _imported_modules(module: str, path: Path) -> set[str]:
    """Absolute names of the modules a source file imports (``from X import Y`` gives X and X.Y:
    Y may be a submodule)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            names.add(stem)
            names.update(f"{stem}.{alias.name}" for alias in node.names)
    return {n for n in names if n}


def _package_modules(package: str) -> list[str]:
    """Every module of ``package`` (its directory, recursively)."""
    init = _module_file(package)
    if init is None or init.name != "__init__.py":
        return []
    return [".".join((package, *p.relative_to(init.parent).with_suffix("").parts)).removesuffix(".__init__")
            for p in sorted(init.parent.rglob("*.py"))]


def method_source_files(module: str, method: str) -> dict[str, Path]:
    """Module name → source file of every module that defines the method whose adapter class
    lives in ``module`` (``method``: its name, for the message): that module, the rest of its
    package when it lives in one (``methods.mgproto``; the suite's ``methods`` itself is no
    adapter's package), and what those import, transitively, from ``methods`` or from the
    adapter's top-level package. Read from disk: nothing is imported."""
    path = _module_file(module)
    if path is None:
        raise ProtobenchError(f"the source of method {method!r} (module {module}) cannot be found, so its "
                              "fingerprint cannot be taken; load it from a .py file on PYTHONPATH")
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    followed = {SUITE_METHODS_PACKAGE, module.partition(".")[0]}
    todo = [module, *(_package_modules(package) if package and package != SUITE_METHODS_PACKAGE else [])]
    files: dict[str, Path] = {}
    while todo:
        name = todo.pop()
        if name in files or _is_harness_module(name) or name.partition(".")[0] not in followed:
            continue
        file = _module_file(name)
        if file is not None:
            files[name] = file
            todo.extend(_imported_modules(name, file) - set(files))
    return dict(sorted(files.items()))


def _is_harness_module(name: str) -> bool:
    return name in HARNESS_MODULES or name.startswith(DECLARATION_PACKAGE + ".")


def _source_digest(files: dict[str, Path]) -> str:
    """sha256 (hex) over (module name, sha256 of bytes) of ``files``: any edit, a comment
    included, changes it; moving the checkout does not."""
    digest = hashlib.sha256()
    for name, path in sorted(files.items()):
        digest.update(name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def adapter_module(method: str) -> str:
    """The module of ``method``'s adapter class: a registry key's from its declaration (no model
    code imported), an import path's from its class."""
    from benchmark.method_lookup import declaration, get_method_class

    return get_method_class(method).__module__ if is_own_method(method) else declaration(method).adapter_module


def probed_files(method: str) -> dict[str, Path]:
    """Module → source file of what a result of ``method`` depends on and its probe runs: the
    method's files (:func:`method_source_files`), a suite method's declaration (its flags, such as
    ``needs_early_tokens``, and the variants and ``probe_args`` the probe runs) and
    :data:`PROBED_HARNESS_MODULES`."""
    from methods.registry import BUILTIN_METHODS

    files = method_source_files(adapter_module(method), method)
    declared = [f"{DECLARATION_PACKAGE}.{method}"] if method in BUILTIN_METHODS else []
    for name in declared:
        path = _module_file(name)
        if path is not None:
            files[name] = path
    return dict(sorted({**files, **harness_files()}.items()))


def harness_files() -> dict[str, Path]:
    """Module → source file of :data:`PROBED_HARNESS_MODULES`."""
    return {name: path for name in PROBED_HARNESS_MODULES if (path := _module_file(name)) is not None}


def harness_digest() -> str:
    """The source digest of the harness modules every probe runs (the probe lock's ``harness``)."""
    return _source_digest(harness_files())


@lru_cache(maxsize=None)
def method_fingerprint(method: str) -> str:
    """The source digest of ``method``: :func:`_source_digest` of :func:`probed_files`."""
    return _source_digest(probed_files(method))


def method_lock_path(method: str) -> Path | None:
    """Where the probe lock of ``method``'s package lies (benchmark/behaviour/lock.py)."""
    from benchmark.behaviour.lock import lock_path

    return lock_path(adapter_module(method))


def method_lock(method: str) -> Lock | None:
    """The probe lock of ``method``'s package, None when it keeps none (any source edit then reads
    stale: the byte rule). A lock that cannot be read is one error naming its file and line."""
    from benchmark.behaviour.lock import read_lock
    from benchmark.method_lookup import known_method

    path = method_lock_path(method)
    return None if path is None else read_lock(path, known_method)


def recorded_behaviour(method: str, digest: str) -> dict[str, Any] | None:
    """What a new result records of its code's behaviour (``method_behaviour``): the lock's
    behaviour and blind digest of ``digest``, or None where its lock does not hold it (an edit nobody
    probed, a method without a lock)."""
    lock = method_lock(method)
    entry = None if lock is None else lock.entry(method, digest)
    return None if entry is None else {"behaviour": entry.behaviour, "blind": entry.blind, "checked": entry.checked}


@dataclass(frozen=True)
class CodeState:
    """Whether the current code gives a result trained by other source code: ``stale`` says why it
    does not, ``note`` why it still does (a refactor the probe found neutral)."""

    stale: str | None = None
    note: str | None = None


def code_change(method: str, recorded: str, current: str) -> CodeState:
    """The verdict on a result of ``method`` trained by source ``recorded`` when the code is now
    ``current`` (≠ ``recorded``), from the method's probe lock (benchmark/behaviour/lock.py)."""
    return judged_by_lock(method_lock(method), method, recorded, current)


def installed_package_state(result: dict[str, Any], method: str, provided: Provider) -> CodeState:
    """The verdict on a result of an installed package's method, from its files on disk and its
    package's probe lock: nothing of the package is imported (benchmark/run/plugin_state.py)."""
    from benchmark.behaviour.lock import lock_path, read_lock
    from benchmark.run.plugin_state import installed_source

    found = installed_source(result, method, provided)
    if isinstance(found, str):
        return CodeState(found)
    module, installed = found
    try:
        current = _source_digest({**method_source_files(module, method), **harness_files()})  # = method_fingerprint
        path = lock_path(module)
        lock = None if path is None else read_lock(path)  # any method name: checking one would import its package
    except ProtobenchError as err:
        return CodeState(f"cannot check against the current code ({err})")
    recorded = str(result.get("method_fingerprint"))
    state = CodeState() if current == recorded else judged_by_lock(lock, method, recorded, current)
    if state.stale and installed != provided:
        return CodeState(f"{state.stale} ({provided.label()} when it ran, {installed.label()} now)")
    return state


def judged_by_lock(lock: Lock | None, method: str, recorded: str, current: str) -> CodeState:
    """:func:`code_change` with ``lock`` (None: the package keeps none)."""
    if lock is None or method not in lock.methods:
        return CodeState("the method's code changed since it ran (its package keeps no probe lock for it, so any "
                         "source edit reads stale: the byte rule)")
    now, then = lock.entry(method, current), lock.entry(method, recorded)
    if now is None:
        return CodeState(f"edited locally: the method's code is not in its probe lock; `protobench check-code "
                         f"{method}` tells whether its numbers changed")
    if then is None:
        return CodeState(f"the method's code changed since it ran, and the code that trained it (source "
                         f"{recorded[:12]}) was never probed")
    if then.blind != now.blind:
        return CodeState("the method's code changed since it ran where the behaviour probe cannot see (CUDA, "
                         "precision or scale paths: stale by bytes; `protobench check-code "
                         f"{method} --boundary` lists them)")
    if then.behaviour != now.behaviour:
        return CodeState(f"the method's behaviour changed since it ran (probe: behaviour {then.behaviour} → "
                         f"{now.behaviour})")
    return CodeState(note=f"code refactored since; behaviour identical (probe {now.checked}: behaviour "
                          f"{now.behaviour}, max relative deviation {max(then.deviation, now.deviation):.0e})")


@lru_cache(maxsize=None)
def metrics_fingerprint() -> str:
    """The :func:`_source_digest` of every module of the ``metrics`` package."""
    files = {name: _module_file(name) for name in _package_modules(METRICS_PACKAGE)}
    return _source_digest({name: path for name, path in files.items() if path is not None})


def staleness(result: dict[str, Any], *, adapters: AdapterImports = NO_IMPORTS,
              run_dir: Path | None = None) -> str | None:
    """Why a finished result is stale under the current code, or None when it is current
    (:func:`code_state`)."""
    return code_state(result, adapters=adapters, run_dir=run_dir).stale


def code_state(result: dict[str, Any], *, adapters: AdapterImports = NO_IMPORTS,
               run_dir: Path | None = None) -> CodeState:
    """Whether the current code gives a finished result: stale (why) for an earlier version's
    result (no fingerprint), a method whose defaults changed (its spec now resolves to another run
    id than the one it ran as), or method code whose behaviour changed or cannot be judged
    (:func:`code_change`); current, with a note where the code was refactored since.

    Nothing the result names is imported unless ``adapters`` allows it (benchmark/run/own_code.py):
    a result of an own adapter that is not allowed, or that does not import, reads "unverifiable …"
    with the command and PYTHONPATH that check it (``run_dir``: where its job record lies)."""
    recorded = result.get("method_fingerprint")
    spec = result.get("spec")
    if not isinstance(recorded, str) or not isinstance(spec, dict):
        return CodeState("earlier version (written before run ids covered resolved hyperparameters)")
    method = spec.get("method")
    if isinstance(method, str) and not adapters.allows(method):
        return CodeState(unverifiable_reason(method, result, run_dir))
    provided = recorded_provider(result)
    if provided is not None and isinstance(method, str) and not is_own_method(method):
        return installed_package_state(result, method, provided)
    try:
        current = RunSpec.from_json(spec, import_trunk=False)
        fingerprint = method_fingerprint(current.method)
    except ProtobenchError as err:
        if isinstance(method, str) and is_own_method(method):  # an import path, not a code change
            return CodeState(unverifiable_reason(method, result, run_dir, f"adapter not importable: {err}"))
        if provided is not None:  # an installed package's method, not installed here
            return CodeState(f"{UNVERIFIABLE} (method {method!r} came from {provided.label()}, which is not installed "
                             f"here: pip install {provided.distribution}=={provided.version} to check it)")
        return CodeState(f"cannot check against the current code ({err})")
    if current.run_id != result.get("run_id"):
        return CodeState(f"the method's defaults changed (its spec is now run {current.run_id})")
    if fingerprint == recorded:
        return CodeState()
    state = code_change(current.method, recorded, fingerprint)
    installed = current_provider(current.method)
    if state.stale and provided and installed and provided != installed:
        return CodeState(f"{state.stale} ({provided.label()} when it ran, {installed.label()} now)")
    return state


def recorded_provider(result: dict[str, Any]) -> Provider | None:
    """The installed package that provided a result's method (``method_provider``), None for the
    suite's own method, an import path, or an earlier result that did not record it."""
    from methods.plugins import BUILTIN, Provider  # (the reading commands import no methods package up front)

    provider = result.get("method_provider")
    if isinstance(provider, dict) and isinstance(provider.get("distribution"), str) \
            and provider["distribution"] != BUILTIN.distribution:
        return Provider(provider["distribution"], str(provider.get("version", "?")))
    return None


def current_provider(method: str) -> Provider | None:
    """The installed package that provides ``method`` now (None: the suite's own, or an import path)."""
    from benchmark.method_lookup import method_provider

    if is_own_method(method):  # an import path: its adapter_paths name it, no distribution
        return None
    provider = method_provider(method)
    return None if provider.builtin else provider


def rescoring(result: dict[str, Any]) -> str | None:
    """Why a finished result's scores are not those the current metric code gives, with the
    remedy (no retraining), or None when they are."""
    recorded = result.get("metrics_fingerprint")
    if recorded == metrics_fingerprint():
        return None
    return ("scored by " + ("earlier" if recorded is None else "other") + " metric code; "
            "`protobench evaluate RUN_DIR --rescore` scores its checkpoint again")


def result_judge(adapters: AdapterImports = NO_IMPORTS) -> Callable[[dict[str, Any], Path | None], str | None]:
    """The reading commands' verdict on one result (``result``, its run directory): why the
    current code no longer gives it (:func:`staleness`: retrain first, or "unverifiable …" for an
    own adapter's), else why to rescore it (:func:`rescoring`), None when it is current. A suite
    or installed method's result is judged from its declaration and source files, without torch."""
    return lambda result, run_dir: (staleness(result, adapters=adapters, run_dir=run_dir) or rescoring(result))


def mark_stale(frame: Any, adapters: AdapterImports = NO_IMPORTS) -> Any:  # (pandas.DataFrame) -> pandas.DataFrame
    """``frame`` (``reports.load.load_runs``) with its ``stale`` column filled by the command that
    shows it (reports never import a method): for each row read from a ``result.json``, why the
    current code no longer gives that result (:func:`code_state`, else :func:`rescoring`), None
    when it does. Rows of CSVs keep theirs. Own adapters are imported only where ``adapters``
    allows. The notes of current results whose code was refactored since (:class:`CodeState`)
    go to ``attrs["code_notes"]`` (run directory → note), for ``reports.load.stale_note``."""
    reasons, notes = [], {}
    for source, stale, run_dir in zip(frame["source"], frame["stale"], frame["run_dir"]):
        result = read_json(Path(source)) if Path(str(source)).name == RESULT_FILE else None
        if result is None:
            reasons.append(stale)
            continue
        state = code_state(result, adapters=adapters, run_dir=Path(str(source)).parent)
        reasons.append(state.stale or rescoring(result))
        if state.note is not None:
            notes[str(run_dir)] = state.note
    marked = frame.assign(stale=reasons)
    marked.attrs["code_notes"] = notes
    return marked


def stale_result(spec: RunSpec, rd: RunDir) -> tuple[RunDir, str] | None:
    """The stale result standing for ``spec`` in its grid folder and why it is stale: the one in
    its own run directory (code or defaults changed), else an earlier version's under
    :attr:`~benchmark.config.RunSpec.earlier_run_id`. None when there is none."""
    mine = AdapterImports.of_grid([spec.method])  # the user's own grid names this adapter
    result = rd.result()
    if result is not None:
        reason = staleness(result, adapters=mine, run_dir=rd.path)
        return None if reason is None else (rd, reason)
    earlier = RunDir(rd.path.parent / spec.earlier_run_id)
    if earlier.path == rd.path or (old := earlier.result()) is None:
        return None
    return earlier, staleness(old, adapters=mine, run_dir=earlier.path) or "earlier version"


def discard_stale(rd: RunDir, *, whole_dir: bool) -> None:
    """Delete a stale result before its run is trained again (``run --rerun-stale``): the files
    of the attempt (result, checkpoint, epoch log, failure, records, the robustness stage's working
    files) or, for an earlier version's run
    directory, the directory. Raises :class:`benchmark.run.store.RunBusy` when a live process
    holds the run."""
    with run_lock(rd.path):
        if not whole_dir:
            for name in (*LOCKED_FILES, STAGE_JOB_FILE, STAGE_FAILURE_FILE, STAGE_CANCELLED_FILE):
                (rd.path / name).unlink(missing_ok=True)
            shutil.rmtree(rd.path / STAGE_PARTIAL_DIR, ignore_errors=True)  # batches scored on the old checkpoint
    if whole_dir:
        shutil.rmtree(rd.path)
