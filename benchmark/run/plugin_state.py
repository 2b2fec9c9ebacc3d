"""Whether an installed package's method still gives a finished result, judged without importing
the package (reading results never imports code, docs/design/run-identity.md).

A result of a method from an installed distribution records that distribution and version
(``method_provider``) and the method's fingerprint: the digest of the source files of its adapter
module, its package, and what they import from the package or the suite's ``methods``
(benchmark/run/identity.py, :func:`~benchmark.run.identity.method_source_files`). A reader finds
the adapter module in the result (``method_provider.adapter``; a result written before it was
recorded: the module the distribution's entry point names, from the package metadata, which lies
in the adapter's package in the layout the guide shows), hashes those files from disk, and
compares; a changed source is judged by the package's probe lock where it keeps one, as the
suite's methods are (benchmark/run/identity.py, ``installed_package_state``). Nothing of the
package is imported: the declaration's defaults are not read, and a changed default is a changed
file of the package, so it reads as changed code.

"Unverifiable" when the distribution is not installed (with the ``pip install`` that checks it)
or two installed distributions declare the name. An installed, working package is never reported
as not installed."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

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


def installed_source(result: dict[str, Any], method: str, provided: Provider) -> tuple[str, Provider] | str:
    """(the module whose sources fingerprint ``method``'s result, the installed distribution) or,
    where it cannot be judged, the verdict: not installed, or declared by two distributions."""
    from methods.plugins import _entry_points, provider_of

    installed = provider_of(PLUGIN_GROUP, method)
    if installed is None:
        declaring = [p.label() for _, p in _entry_points(PLUGIN_GROUP).get(method, ())]
        if len(declaring) > 1:
            return (f"{UNVERIFIABLE} (method {method!r} is declared by two installed distributions, "
                    f"{' and '.join(declaring)}: uninstall one to check it)")
        return (f"{UNVERIFIABLE} (method {method!r} came from {provided.label()}, which is not installed here: "
                f"pip install {provided.distribution}=={provided.version} to check it)")
    return installed_adapter(result, method) or "", installed
