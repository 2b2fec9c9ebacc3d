"""What reading results may import: the suite's own code, never code a result file names.

A result names its method (a registry key, or an own adapter ``package.module:Class``) and its
trunk (an alias, ``timm:NAME``, or an own ``package.module:factory``). Reading results
(``status``, ``report``, ``export``, ``compare``, ``plot``) never imports a module named that way:
a colleague's runs folder or a downloaded bundle could name any installed module, and importing
it runs it. A suite method's staleness is still checked (its code is the suite's); an own
adapter's result reads **unverifiable** with the command that checks it, unless the user names it
for import: ``--check-adapters`` of the reading commands, or a grid of their own naming that
adapter (``run GRID``). The hint gives the ``sys.path`` entry the run imported the adapter from
(``provenance.adapter_paths`` of its result, else its submission's ``adapter_paths`` in
``job.json``).
"""
from __future__ import annotations

import importlib
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TIMM_PREFIX = "timm:"  # benchmark.backbones.TIMM_PREFIX, spelt here to keep this module free of torch


def is_own_code(name: str) -> bool:
    """Whether a trunk name is an import path (``module:attr``) of code outside the suite."""
    return ":" in name and not name.startswith(TIMM_PREFIX)


def is_own_method(name: str) -> bool:
    """Whether a method name is an import path (every name with ``:``: registry keys have none)."""
    return ":" in name


@dataclass(frozen=True)
class AdapterImports:
    """Which own adapters a reader may import to check their results: ``every`` one
    (``--check-adapters``), or those a grid of the user's names (``methods``)."""

    every: bool = False
    methods: frozenset[str] = frozenset()

    def allows(self, method: str) -> bool:
        return not is_own_method(method) or self.every or method in self.methods

    @classmethod
    def of_grid(cls, methods: Collection[str]) -> AdapterImports:
        return cls(methods=frozenset(methods))


NO_IMPORTS = AdapterImports()
EVERY_ADAPTER = AdapterImports(every=True)
UNVERIFIABLE = "unverifiable"


def own_code_paths(names: Collection[str]) -> tuple[Path, ...]:
    """The absolute ``sys.path`` entries this process imports the own code among ``names`` from
    (methods and trunks named ``package.module:attr``; each already imported by the checks of the
    grid that names it)."""
    found: dict[Path, None] = {}
    for name in names:
        if not is_own_code(name):  # (a method named "timm:…" never passes the grid checks)
            continue
        top = importlib.import_module(name.partition(":")[0].split(".")[0])
        if top.__file__ is None:  # a namespace package: its folder lies in the entry
            found[Path(next(iter(top.__path__))).resolve().parent] = None
        else:  # a module file, or a package's __init__.py one level further down
            origin = Path(top.__file__).resolve()
            found[origin.parent.parent if origin.name == "__init__.py" else origin.parent] = None
    return tuple(found)


def recorded_adapter_paths(result: dict[str, Any], run_dir: Path | None) -> list[str]:
    """The ``sys.path`` entries the run imported its own code from: its result's
    ``provenance.adapter_paths``, else the latest submission's ``adapter_paths`` in ``job.json``."""
    provenance = result.get("provenance")
    paths = provenance.get("adapter_paths") if isinstance(provenance, dict) else None
    if not paths and run_dir is not None:
        from benchmark.run.states import job_records

        records = job_records(run_dir)
        paths = list(records[-1].adapter_paths) if records else None
    return [p for p in paths if isinstance(p, str)] if isinstance(paths, list) else []


def unverifiable_reason(method: str, result: dict[str, Any], run_dir: Path | None, problem: str = "") -> str:
    """The ``stale`` column's text for a result of an own adapter whose code was not checked:
    why, and the command that checks it with the PYTHONPATH the run used. Never advice to retrain."""
    paths = recorded_adapter_paths(result, run_dir)
    module = method.partition(":")[0].split(".")[0]
    pythonpath = ":".join(paths) if paths else f"<the folder holding {module}>"
    why = problem or "own adapter code is not imported when reading results"
    return (f"{UNVERIFIABLE} ({why}: run `protobench status RUNS --check-adapters` with "
            f"PYTHONPATH={pythonpath} to check it)")


def is_unverifiable(reason: object) -> bool:
    return isinstance(reason, str) and reason.startswith(UNVERIFIABLE)
