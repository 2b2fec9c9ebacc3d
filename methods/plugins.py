"""Declarations installed packages provide through entry points (``importlib.metadata``), as
pytest plugins and submitit executors are found.

A package registers what it declares under a group of the suite (``protobench.methods``: a
:class:`~methods.declaration.MethodDeclaration`; ``protobench.backbones``: a
``benchmark.trunks.TrunkDeclaration``; ``protobench.datasets``: a
``benchmark.data.declared.DatasetDeclaration``), the entry point's name being the registry key::

    [project.entry-points."protobench.methods"]
    my_proto = "my_proto_pkg.spec:DECLARATION"

A name that clashes, with a built-in or between two distributions, is refused naming both. Only
the group's entry-point *names* are read to check clashes (the distributions' metadata files); a
declaration's module is imported when its name is looked up. This module is the lowest floor's:
the harness's trunk and dataset registries use it too.
"""
from __future__ import annotations

import importlib.metadata
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
def _entry_points(group: str) -> tuple[tuple[importlib.metadata.EntryPoint, Provider], ...]:
    """The group's entry points with the distribution of each, clashes between distributions refused."""
    found: dict[str, tuple[importlib.metadata.EntryPoint, Provider]] = {}
    for point in importlib.metadata.entry_points(group=group):
        dist = point.dist
        provider = Provider(dist.metadata["Name"] if dist is not None else "(unknown distribution)",
                            dist.version if dist is not None else "?")
        if point.name in found and found[point.name][1] != provider:
            other = found[point.name][1]
            raise ValueError(f"{group} name {point.name!r} is declared by two installed distributions, "
                             f"{other.label()} and {provider.label()}; uninstall one, or rename its entry point")
        found[point.name] = (point, provider)
    return tuple(found.values())


def clear_cache() -> None:
    """Forget what was read (after installing or removing a package in the same process)."""
    _entry_points.cache_clear()
    _loaded.cache_clear()


def check_clashes(group: str, builtins: Collection[str]) -> None:
    """Refuse an installed entry point of ``group`` named as a built-in (or as another
    distribution's), naming both; reads entry-point names only, imports nothing."""
    for point, provider in _entry_points(group):
        if point.name in builtins:
            raise ValueError(f"{group} name {point.name!r} of {provider.label()} clashes with the built-in "
                             f"{point.name!r} of protobench; rename the entry point in that package's pyproject "
                             f"([project.entry-points.\"{group}\"]) or uninstall it")


@lru_cache(maxsize=None)
def _loaded(group: str, builtins: tuple[str, ...], kind: type) -> dict[str, tuple[Any, Provider]]:
    check_clashes(group, builtins)
    declared: dict[str, tuple[Any, Provider]] = {}
    for point, provider in _entry_points(group):
        try:
            value = point.load()
        except Exception as err:  # the package's own module: one message naming it, not a traceback
            raise ValueError(f"{group} entry point {point.name!r} = {point.value!r} of {provider.label()} does not "
                             f"load ({type(err).__name__}: {err}); fix or uninstall that package") from err
        if not isinstance(value, kind):
            raise ValueError(f"{group} entry point {point.name!r} = {point.value!r} of {provider.label()} is a "
                             f"{type(value).__name__}, not a {kind.__name__}; point it at the package's declaration")
        if getattr(value, "name", point.name) != point.name:
            raise ValueError(f"{group} entry point {point.name!r} of {provider.label()} names a declaration of "
                             f"{value.name!r}; give the entry point the declaration's name")
        declared[point.name] = (value, provider)
    return declared


def discovered(group: str, builtins: Collection[str], kind: type) -> dict[str, tuple[Any, Provider]]:
    """Registry key → (declaration, provider) of every entry point of ``group``, each declaration
    an instance of ``kind`` named as its entry point. A name a built-in (``builtins``) has, or that
    two distributions declare, is one ValueError naming both."""
    return _loaded(group, tuple(sorted(builtins)), kind)
