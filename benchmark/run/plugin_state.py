"""Whether an installed package's method still gives a finished result, judged without importing
the package (reading results never imports code, docs/design/run-identity.md).

A result of a method from an installed distribution records that distribution and version
(``method_provider``) and the method's fingerprint: the digest of the source files of its adapter
module, its package, and what they import from the package or the suite's ``methods``
(benchmark/run/identity.py, :func:`~benchmark.run.identity.method_source_files`). A reader finds
the adapter module in the result (``method_provider.adapter``; a result written before it was
recorded: the module the distribution's entry point names, from the package metadata, which lies
in the adapter's package in the layout the guide shows), hashes those files from disk, and
compares. Nothing of the package is imported: the declaration's defaults are not read, and a
changed default is a changed file of the package, so it reads as changed code.

The verdicts: current (None); "the method's code changed since it ran" (with the versions when
the installed one differs); "unverifiable" when the distribution is not installed (with the
``pip install`` that checks it) or two installed distributions declare the name. An installed,
working package is never reported as not installed."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from benchmark.errors import ProtobenchError
from benchmark.run.own_code import UNVERIFIABLE

if TYPE_CHECKING:
    from methods.plugins import Provider

PLUGIN_GROUP = "protobench.methods"  # methods.registry.PLUGIN_GROUP, spelt here: no registry import


def installed_adapter(result: dict[str, Any], method: str) -> str | None:
    """The module whose sources fingerprint ``method``'s result (see the module), None: not installed."""
    from methods.plugins import entry_point_module

    recorded = (result.get("method_provider") or {}).get("adapter")
    if isinstance(recorded, str) and recorded:
        return recorded.partition(":")[0]
    return entry_point_module(PLUGIN_GROUP, method)


def plugin_staleness(result: dict[str, Any], provided: Provider, fingerprint_of: Callable[[str], str]) -> str | None:
    """The verdict on a result of an installed package's method (see the module); ``fingerprint_of``:
    a module's method fingerprint from disk (benchmark/run/identity.py, the caller)."""
    from methods.plugins import _entry_points, provider_of

    method = str(result["spec"]["method"])
    installed = provider_of(PLUGIN_GROUP, method)
    if installed is None:
        declaring = [p.label() for _, p in _entry_points(PLUGIN_GROUP).get(method, ())]
        if len(declaring) > 1:
            return (f"{UNVERIFIABLE} (method {method!r} is declared by two installed distributions, "
                    f"{' and '.join(declaring)}: uninstall one to check it)")
        return (f"{UNVERIFIABLE} (method {method!r} came from {provided.label()}, which is not installed here: "
                f"pip install {provided.distribution}=={provided.version} to check it)")
    module = installed_adapter(result, method)
    try:
        fingerprint = fingerprint_of(module or "")
    except ProtobenchError as err:
        return f"cannot check against the current code ({err})"
    if fingerprint == result.get("method_fingerprint"):
        return None
    moved = f" ({provided.label()} when it ran, {installed.label()} now)" if installed != provided else ""
    return "the method's code changed since it ran" + moved
