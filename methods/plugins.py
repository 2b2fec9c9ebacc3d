"""Declarations installed packages provide through entry points (``importlib.metadata``), as
pytest plugins and submitit executors are found.

A package registers what it declares under a group of the suite (``protobench.methods``: a
:class:`~methods.declaration.MethodDeclaration`; ``protobench.backbones``: a
``benchmark.trunks.TrunkDeclaration``; ``protobench.datasets``: a
``benchmark.data.declared.DatasetDeclaration``), the entry point's name being the registry key::

    [project.entry-points."protobench.methods"]
    my_proto = "my_proto_pkg.spec:DECLARATION"

A name that clashes, with a built-in or between two distributions, is refused naming both, when
that name is used: other names, built-in grids included, are not concerned. Only the group's
entry-point *names* are read to list them (the distributions' metadata files); a declaration's
module is imported when its own name is looked up, never another's. A package whose declaration
does not load is skipped with one warning by the commands that list every name. This module is
the lowest floor's: the harness's trunk and dataset registries use it too.
"""
from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Collection
from dataclasses import dataclass
from functools import lru_cache
from typing import Any


@dataclass(frozen=True)
class Provider:
    """Who provides a registry key: the suite itself (``builtin``) or an installed distribution."""

    distribution: str
    version: str
    builtin: bool = False

    def label(self) -> str:
        return "protobench (built-in)" if self.builtin else f"{self.distribution} {self.version}"

    def to_json(self) -> dict[str, str]:
        return {"distribution": self.distribution, "version": self.version}


BUILTIN = Provider("protobench", "", builtin=True)


@lru_cache(maxsize=None)
def _entry_points(group: str) -> dict[str, tuple[tuple[importlib.metadata.EntryPoint, Provider], ...]]:
    """Name → the entry points of ``group`` with that name and the distribution of each (read from
    the distributions' metadata: nothing imported)."""
    found: dict[str, list[tuple[importlib.metadata.EntryPoint, Provider]]] = {}
    for point in importlib.metadata.entry_points(group=group):
        dist = point.dist
        provider = Provider(dist.metadata["Name"] if dist is not None else "(unknown distribution)",
                            dist.version if dist is not None else "?")
        if all(known != provider for _, known in found.get(point.name, [])):
            found.setdefault(point.name, []).append((point, provider))
    return {name: tuple(points) for name, points in found.items()}


def clear_cache() -> None:
    """Forget what was read (after installing or removing a package in the same process)."""
    _entry_points.cache_clear()
    _load.cache_clear()
    _warned.clear()


def installed_names(group: str) -> list[str]:
    """The names installed packages declare under ``group`` (metadata only: nothing imported)."""
    return sorted(_entry_points(group))


def provider_of(group: str, name: str) -> Provider | None:
    """The one installed distribution that declares ``name`` (None: none, or two: a clash), read
    from metadata without importing it."""
    points = _entry_points(group).get(name, ())
    return points[0][1] if len(points) == 1 else None


def entry_point_module(group: str, name: str) -> str | None:
    """The module ``name``'s entry point names (``pkg.spec`` of ``pkg.spec:DECLARATION``), from metadata."""
    points = _entry_points(group).get(name, ())
    return points[0][0].module if len(points) == 1 else None


def check_clash(group: str, name: str, builtins: Collection[str]) -> None:
    """Refuse ``name`` when installed packages make it ambiguous: a package declaring a built-in's
    name, or two distributions declaring one name (ValueError naming both). Other names are not
    concerned: a clash refuses only what uses that name. Reads entry-point names only."""
    points = _entry_points(group).get(name, ())
    if name in builtins and points:
        provider = points[0][1]
        raise ValueError(f"{group} name {name!r} of {provider.label()} clashes with the built-in {name!r} of "
                         f"protobench; rename the entry point in that package's pyproject "
                         f"([project.entry-points.\"{group}\"]) or uninstall it")
    if len(points) > 1:
        raise ValueError(f"{group} name {name!r} is declared by two installed distributions, {points[0][1].label()} "
                         f"and {points[1][1].label()}; uninstall one, or rename its entry point")


@lru_cache(maxsize=None)
def _load(group: str, name: str, builtins: tuple[str, ...], kind: type) -> tuple[Any, Provider]:
    """The declaration behind ``name`` (its module imported: only this one), checked."""
    check_clash(group, name, builtins)
    ((point, provider),) = _entry_points(group)[name]
    try:
        value = point.load()
    except Exception as err:  # the package's own module: one message naming it, not a traceback
        raise ValueError(f"{group} entry point {point.name!r} = {point.value!r} of {provider.label()} does not "
                         f"load ({type(err).__name__}: {err}); fix or uninstall that package") from None
    if not isinstance(value, kind):
        raise ValueError(f"{group} entry point {point.name!r} = {point.value!r} of {provider.label()} is a "
                         f"{type(value).__name__}, not a {kind.__name__}; point it at the package's declaration")
    if getattr(value, "name", point.name) != point.name:
        raise ValueError(f"{group} entry point {point.name!r} of {provider.label()} names a declaration of "
                         f"{value.name!r}; give the entry point the declaration's name")
    return value, provider


def installed(group: str, name: str, builtins: Collection[str], kind: type) -> tuple[Any, Provider] | None:
    """The declaration and provider of the installed ``name`` (None: no package declares it); a
    clash or a declaration that does not load is one ValueError naming the package. Only that
    name's module is imported."""
    if name not in _entry_points(group):
        return None
    return _load(group, name, tuple(sorted(builtins)), kind)


_warned: set[tuple[str, str]] = set()


def discovered(group: str, builtins: Collection[str], kind: type) -> dict[str, tuple[Any, Provider]]:
    """Registry key → (declaration, provider) of every entry point of ``group`` that loads (every
    module imported: for the commands that list them all). One that clashes or does not load is
    left out with one warning on stderr per process, naming its package and the error, so one
    broken package never takes the others down."""
    found: dict[str, tuple[Any, Provider]] = {}
    for name in _entry_points(group):
        try:
            found[name] = _load(group, name, tuple(sorted(builtins)), kind)
        except ValueError as err:
            if (group, name) not in _warned:
                _warned.add((group, name))
                print(f"warning: {err}; skipped", file=sys.stderr)
    return found
