"""The reference pages of the docs site that list what the code defines, generated at build time:
grid keys (from :class:`benchmark.config.RunSpec`), methods with their hyperparameters, defaults
and search spaces (from the registry), metrics with their definitions and sources (from the
``metrics`` modules' docstrings), datasets and backbones.

``docs/hooks.py`` calls :data:`PAGES` by name; nothing here is copied by hand, so whatever lands in
the code appears in the next build (``tests/cli/test_docs_reference.py``).
"""
from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from benchmark.cli.docs_cli import cli_reference, table_cell
from benchmark.data.declared import DATASETS

REPO = Path(__file__).resolve().parents[2]

#: metric key → the module that computes it (its docstring is the definition the page shows)
METRIC_MODULES: dict[str, str] = {
    "acc": "metrics.accuracy",
    "con": "metrics.consistency",
    "sta": "metrics.stability",
    "dis": "metrics.distinctiveness",
    "comp": "metrics.comprehensiveness",
    "purity": "metrics.purity",
    "loc": "metrics.localisation",
    "size_local": "metrics.size",
    "size_global": "metrics.size",
    "del": "metrics.deletion",
    "sanity": "metrics.sanity",
    "class_indep": "metrics.global_interpretability",
    "contrastive": "metrics.global_interpretability",
    "sid5": "metrics.global_interpretability",
    "pointing": "metrics.pointing",
}

#: dataset name → the module that reads it
DATASET_MODULES: dict[str, str] = {name: d.reader for name, d in DATASETS.items()}  # benchmark/data/declared.py


def _source_link(module: str) -> str:
    """``module`` as a repository path in code font (the docs build checks no link into the code)."""
    path = module.replace(".", "/")
    return f"`{path}/__init__.py`" if (REPO / path).is_dir() else f"`{path}.py`"


def _docstring(module: str) -> str:
    doc = inspect.getdoc(importlib.import_module(module)) or ""
    return doc.strip()


def _quoted(text: str) -> str:
    """A docstring as a markdown block quote (kept verbatim: line breaks and ``code``)."""
    return "\n".join("> " + line if line else ">" for line in text.splitlines())


# ---- grid keys ---------------------------------------------------------------------------------

def _field_comments() -> dict[str, str]:
    """The comments beside each RunSpec field in ``benchmark/config.py``: the block of ``#`` lines
    just above it and the comment at the end of its line."""
    from benchmark import config

    lines = inspect.getsource(config.RunSpec).splitlines()
    tree = ast.parse(textwrap.dedent("\n".join(lines)))
    comments: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            row = node.lineno - 1
            above = []
            k = row - 1
            while k >= 0 and lines[k].strip().startswith("#"):
                above.insert(0, lines[k].strip().lstrip("#").strip())
                k -= 1
            own = lines[row].partition("  #")[2].strip() if "  #" in lines[row] else ""
            comments[node.target.id] = " ".join(part for part in (*above, own) if part)
    return comments


def _default(f: Any) -> str:
    if f.default is not MISSING:
        return f"`{f.default!r}`"
    if f.default_factory is not MISSING:
        return f"`{f.default_factory()!r}`"
    return "required"


def grid_keys() -> str:
    """Every RunSpec field (a grid's ``[defaults]``/``[[sweep]]`` key and a ``--set`` key) with its
    type, default, whether it changes the run id, and the comment the code gives it; then the
    grid file's own top-level keys."""
    from benchmark.config import RunSpec
    from benchmark.grid import GRID_KEYS
    from benchmark.spec_fields import OPERATIONAL_FIELDS

    comments = _field_comments()
    lines = ["| key | type | default | changes the run id | what it is |", "|---|---|---|---|---|"]
    for f in fields(RunSpec):
        in_id = "no (operational)" if f.name in OPERATIONAL_FIELDS else "yes"
        lines.append(f"| `{f.name}` | `{table_cell(f.type)}` | {table_cell(_default(f))} | {in_id} | {table_cell(comments.get(f.name, ''))} |")
    lines += ["", "Top-level keys of a grid file: " + ", ".join(f"`{k}`" for k in GRID_KEYS) + ".", ""]
    return "\n".join(lines)


# ---- methods -----------------------------------------------------------------------------------

def method_section(name: str) -> str:
    """One registered method: display name, class, source, hyperparameters with defaults and,
    where the adapter declares a ``search_space``, the range each one is tuned over."""
    from methods.registry import get_method_class, method_display_name, method_hyperparameters
    from methods.space import describe

    cls = get_method_class(name)
    space = getattr(cls, "search_space", None) or {}
    summary = (inspect.getdoc(importlib.import_module(cls.__module__)) or "").split("\n\n")[0]
    protocol = (f"protocol and deviations: [{method_display_name(cls)}](../protocol/{name}.md)"
                if (REPO / "docs" / "protocol" / f"{name}.md").is_file() else "no protocol page yet")
    lines = [f"## `{name}` — {method_display_name(cls)}", "",
             f"Class `{cls.__module__}.{cls.__qualname__}` ({_source_link(cls.__module__)}); {protocol}.", "",
             " ".join(summary.split()), ""]
    params = method_hyperparameters(cls)
    head = "| hyperparameter | default |" + (" search space |" if space else "")
    lines += [head, "|---|---|" + ("---|" if space else "")]
    for key, default in params.items():
        shown = "required" if default is inspect.Parameter.empty else f"`{default!r}`"
        row = f"| `{key}` | {table_cell(shown)} |"
        if space:
            row += f" {table_cell(describe(space[key])) if key in space else ''} |"
        lines.append(row)
    lines.append("")
    return "\n".join(lines)


def methods_reference() -> str:
    from methods.registry import list_methods

    names = list_methods()
    intro = ("Registered methods: " + ", ".join(f"`{n}`" for n in names) + ". A grid overrides any "
             "hyperparameter through `method_args` (or `--set METHOD.NAME=VALUE`); every value a run "
             "used, defaults included, is in its `result.json` under `method_hyperparameters`.\n")
    return intro + "\n" + "\n".join(method_section(n) for n in names)


# ---- metrics -----------------------------------------------------------------------------------

def metric_keys() -> list[str]:
    """Every metric a run records: accuracy, the paper's explanation metrics and the extras."""
    from benchmark.run.extra_metrics import EXTRA_METRIC_KEYS
    from metrics import METRIC_KEYS

    return ["acc", *METRIC_KEYS, *EXTRA_METRIC_KEYS]


def metrics_reference() -> str:
    """One section per metric key: the module that computes it and that module's docstring (the
    definition, its source paper and official code, and where the suite differs)."""
    parts = []
    for key in metric_keys():
        if key not in METRIC_MODULES:
            raise KeyError(f"metric {key!r} has no module in benchmark/cli/docs_catalog.py METRIC_MODULES; "
                           "add the module that computes it")
        module = METRIC_MODULES[key]
        parts += [f"## `{key}`", "", f"Computed by {_source_link(module)}.", "", _quoted(_docstring(module)), ""]
    return "\n".join(parts)


# ---- datasets and backbones --------------------------------------------------------------------

def datasets_reference() -> str:
    from benchmark.cli.data import GENERATORS
    from benchmark.config import DATASET_NAMES
    from benchmark.data.synthbirds import SYNTHBIRDS_DEFAULTS

    parts = []
    for name in DATASET_NAMES:
        module = DATASET_MODULES[name]
        parts += [f"## `{name}`", "", f"Read by {_source_link(module)}.", "", _quoted(_docstring(module)), ""]
        if name == "synthbirds":
            parts += ["Generation arguments (`dataset_args`) and their defaults: "
                      + ", ".join(f"`{k} = {v!r}`" for k, v in SYNTHBIRDS_DEFAULTS.items()) + ".", ""]
        elif name in GENERATORS:
            home, defaults, _ = GENERATORS[name]
            values = getattr(importlib.import_module(home), defaults)
            parts += [f"`protobench make-data {name} --out DIR` writes a small synthetic set in this layout "
                      f"({_source_link(home)}); its defaults: "
                      + ", ".join(f"`{k} = {v!r}`" for k, v in values.items()) + ".", ""]
    return "\n".join(parts)


def backbones_reference() -> str:
    """The backbone aliases with their timm model and geometry (timm's config on the meta device:
    no weights are read)."""
    from benchmark.backbones import BACKBONES

    lines = ["| key | timm model | patch | grid at 224 | width | depth | prefix tokens |",
             "|---|---|---|---|---|---|---|"]
    for key, spec in BACKBONES.items():
        a = spec.architecture
        grid = 224 // a.patch_size
        lines.append(f"| `{key}` | `{spec.timm_name}` | {a.patch_size} | {grid}×{grid} | {a.embed_dim} | "
                     f"{a.depth} | {a.num_prefix_tokens} |")
    return "\n".join(lines) + "\n"


#: marker name in a docs page → the generator that replaces it (``docs/hooks.py``)
PAGES: dict[str, Callable[[], str]] = {
    "cli": cli_reference,
    "grid-keys": grid_keys,
    "methods": methods_reference,
    "metrics": metrics_reference,
    "datasets": datasets_reference,
    "backbones": backbones_reference,
}
