"""The tests' one tiny grid: vMFProto (J = 2) on 4 generated synthbirds classes × 8 images with a
2-block random trunk, small batches. A test names only what it changes: ``tiny_grid`` parses it,
``tiny_grid_toml`` / ``write_tiny_grid`` write it as a grid file (as a user's would be), both with
overrides of any ``[defaults]`` field and an optional ``[[sweep]]``."""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmark.grid import GridSpec, parse_grid

TINY_DEFAULTS: dict[str, Any] = {
    "dataset": "synthbirds",
    "dataset_args": {"classes": 4, "images_per_class": 8, "seed": 0},
    "backbone": "dinov2_vits14",
    "weights": "random",
    "backbone_args": {"depth": 2, "embed_dim": 48, "num_heads": 2},
    "batch_size": 8,
    "eval_batch_size": 16,
    "method": "vmfproto",
    "prototypes_per_class": 2,
}


class TomlLiteral(str):
    """A value written into the grid file as it is (TOML the test wants verbatim, e.g. ``nan`` or
    a literal string ``'1e-4'`` that a bad-input test feeds the parser)."""


def tiny_grid_table(name: str, data_root: Path | str, *, sweep: Sequence[Mapping[str, Any]] = (),
                    without: Sequence[str] = (), **fields: Any) -> dict[str, Any]:
    """The grid as the parser reads it: ``TINY_DEFAULTS`` with ``data_root`` and ``fields``
    overridden, the fields in ``without`` removed, and ``sweep`` as its ``[[sweep]]`` tables."""
    defaults = {**TINY_DEFAULTS, "data_root": str(data_root), **fields}
    for field in without:
        del defaults[field]
    table: dict[str, Any] = {"name": name, "defaults": defaults}
    if sweep:
        table["sweep"] = [dict(entry) for entry in sweep]
    return table


def tiny_grid(name: str, data_root: Path, *, epochs: int = 1, seeds: tuple[int, ...] = (0,),
              js: tuple[int, ...] = (2,), backbones: tuple[str, ...] = ("dinov2_vits14",)) -> GridSpec:
    """The tiny grid on the CPU, parsed, sweeping ``backbones`` × ``js`` × ``seeds``."""
    table = tiny_grid_table(name, data_root, device="cpu", method_args={"end_to_end_epochs": epochs},
                            sweep=[{"backbone": list(backbones), "prototypes_per_class": list(js), "seed": list(seeds)}])
    return parse_grid(table, source=f"{name} (test)")


def tiny_grid_toml(name: str, data_root: Path | str, **overrides: Any) -> str:
    """The tiny grid as the text of a grid file (``overrides`` as for ``tiny_grid_table``)."""
    table = tiny_grid_table(name, data_root, **overrides)
    lines = [f"name = {_value(table['name'])}", "[defaults]"]
    lines += [f"{key} = {_value(value)}" for key, value in table["defaults"].items()]
    for entry in table.get("sweep", ()):
        lines += ["[[sweep]]", *(f"{key} = {_value(value)}" for key, value in entry.items())]
    return "\n".join(lines) + "\n"


def write_tiny_grid(path: Path, name: str, data_root: Path | str, **overrides: Any) -> Path:
    """``tiny_grid_toml`` written to ``path``; returns ``path``."""
    path.write_text(tiny_grid_toml(name, data_root, **overrides))
    return path


def write_adapter_grid(path: Path, root: Path | str, method: str = "example_adapter:CosinePrototypes") -> Path:
    """The tiny grid of an adapter named by import path (grid "custom"): 2 epochs, J = 2, seeds 0 and 1."""
    return write_tiny_grid(path, "custom", root, method=method, method_args={"epochs": 2},
                           sweep=[{"prototypes_per_class": [2], "seed": [0, 1]}])


def _value(value: Any) -> str:
    """One TOML value (TOML v1.0.0: basic strings share JSON's escapes; inline tables, arrays)."""
    if isinstance(value, TomlLiteral):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ("nan" if math.isnan(value) else ("inf" if value > 0 else "-inf"))
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{key} = {_value(item)}" for key, item in value.items()) + " }" if value else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    raise TypeError(f"no TOML form for {value!r} in the tiny grid")
