"""Method diagnostics for ``result.json``: the values a method reports (``PrototypeMethod.diagnostics``)
and a warning for each one outside the range the method expects (``diagnostic_ranges``)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from methods.base import DiagnosticRange, PrototypeMethod, TrainData

#: the key under which ``collect_diagnostics`` lists the out-of-range values a user should act on
WARNINGS = "warnings"
#: … and those the method's configuration makes expected: ``[{"warning": line, "why": reason}]``
EXPECTED_WARNINGS = "expected_warnings"


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts → ``{"a.b": leaf}``."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, path + "."))
        else:
            flat[path] = value
    return flat


def range_warnings(values: Mapping[str, Any], ranges: Mapping[str, DiagnosticRange]) -> list[str]:
    """One line per diagnostic outside its range, e.g. ``"kappa.max = 2e+05 > 1e+05"``. A ranged
    diagnostic that is missing or not a number (e.g. ``None``: nothing was measured) is not checked."""
    flat = flatten(values)
    warnings = []
    for path, (low, high) in ranges.items():
        value = flat.get(path)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if low is not None and not value >= low:  # NaN fails both bounds
            warnings.append(f"{path} = {value:.4g} < {low:.4g}")
        elif high is not None and not value <= high:
            warnings.append(f"{path} = {value:.4g} > {high:.4g}")
    return warnings


@torch.no_grad()
def collect_diagnostics(method: PrototypeMethod, splits: Mapping[str, TrainData]) -> dict[str, Any]:
    """The method's diagnostics plus ``"warnings"``: the out-of-range values, and
    ``"expected_warnings"``: those the method's ``expected_warnings()`` explains, with the reason."""
    values = method.diagnostics(splits)
    for reserved in (WARNINGS, EXPECTED_WARNINGS):
        if reserved in values:
            raise ValueError(f"method {method.name!r} reports a diagnostic named {reserved!r}, which is reserved")
    expected = method.expected_warnings()
    warnings = range_warnings(values, method.diagnostic_ranges())
    explained = [{"warning": w, "why": expected[w.split(" ", 1)[0]]} for w in warnings if w.split(" ", 1)[0] in expected]
    return {**values, WARNINGS: [w for w in warnings if w.split(" ", 1)[0] not in expected],
            EXPECTED_WARNINGS: explained}
