"""A grid's ``[robustness]`` table: the robustness stage's settings for the runs of the grid, read by
``plan`` (their GPU-hours; ``evaluate --robustness`` takes the same settings as options). Keys: the
fields of :class:`benchmark.robustness.options.RobustnessOptions` (``families`` a list; ``images``
the subsample's size, default all); each checked as the command-line options are."""
from __future__ import annotations

from dataclasses import fields
from typing import Any

from benchmark.checks import unknown_key_error
from benchmark.errors import ProtobenchError
from benchmark.robustness.options import FAMILIES, RobustnessOptions, check_options, parse_families


def grid_robustness(table: dict[str, Any], source: str, test_images: int) -> RobustnessOptions | None:
    """The options of a grid's ``[robustness]`` table (None when the grid has none)."""
    if not table:
        return None
    known = [f.name for f in fields(RobustnessOptions)]
    for key in table:
        if key not in known:
            raise unknown_key_error(key, known, f"{source} [robustness]")
    families = table.get("families", list(FAMILIES))
    if not isinstance(families, list) or not all(isinstance(f, str) for f in families):
        raise ProtobenchError(f"{source} [robustness]: families must be a list of {', '.join(FAMILIES)}")
    options = RobustnessOptions(parse_families(",".join(families)),
                                **{k: v for k, v in table.items() if k != "families"})
    check_options(options, test_images)
    return options
