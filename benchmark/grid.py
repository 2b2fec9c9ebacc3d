"""Grid files: a TOML description of many runs, expanded to RunSpecs.

```toml
name = "demo"                       # runs go to <runs_dir>/<name>/<run_id>/
description = "…"                   # optional
runs_dir = "runs"                   # optional, relative to the working directory

[defaults]                          # any RunSpec field; a list is a grid-wide axis:
dataset = "synthbirds"              # every block's runs once per value, unless the
backbone = "dinov2_vits14"          # block sets that field itself
seed = [0, 1, 2]

[[sweep]]                           # one block of the grid; a list value is an axis,
method = ["vmfproto"]               # a scalar (or table) a fixed value; blocks are
prototypes_per_class = [3, 5]       # expanded as Cartesian products and concatenated,
seed = [0, 1]                       # duplicates (same run id) kept once
```

A relative ``data_root`` or weights file (in the grid or on the command line) is resolved
against the working directory when the grid is read (:func:`absolute_paths`).

``weights`` may be a table by backbone (``weights = { dinov2_vitb14 = "/w/b14.safetensors",
dinov3_vitb16 = "hf-cache" }``): each run takes its backbone's entry. Command-line overrides
(``--data-root``, ``--weights``, ``--set KEY=VALUE``) replace a field in every run;
``--set METHOD.NAME=VALUE`` sets one hyperparameter of one method's runs; ``--sweep KEY=V1,V2``
adds an axis to the whole grid (every run once per value, as Hydra's multirun does).
"""
from __future__ import annotations

import itertools
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmark.checks import unknown_key_error
from benchmark.config import RUN_FIELDS, RunSpec, build_run_spec, canonical_backbone, check_field, read_toml
from benchmark.data.declared import GENERATED_DATASETS
from benchmark.errors import FieldError, ProtobenchError, did_you_mean, nearest_sibling

GRID_KEYS = ("name", "description", "runs_dir", "defaults", "sweep", "tuning",  # tuning: benchmark/tuning/config.py
             "robustness")  # robustness: benchmark/robustness/grid_options.py
TABLE_FIELDS = ("method_args", "dataset_args", "backbone_args")  # fields `--set FIELD.NAME=…` reaches into
ONLY_ALIASES = {"J": "prototypes_per_class"}  # `--only J=3,5`, `--set J=3`, `--sweep J=3,5`
#: the command-line option behind an override key (any other key came from --set or --sweep)
OPTION_OF_KEY = {"data_root": "--data-root", "weights": "--weights", "device": "--device", "cache": "--no-cache"}


class OptionValue(str):
    """A field's value given by its own option (``--device cuda``), not by ``--set device=cuda``:
    an error about it names the option the user typed."""


class SetValue(str):
    """A text value given by ``--set KEY=VALUE`` on the command line (checks that only concern what a
    user typed, such as a data root that must exist, tell it from a caller's overrides)."""


# A grid's name is its folder under the runs directory: one path component, never '.' or '..'.
GRID_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class GridSpec:
    name: str
    runs: tuple[RunSpec, ...]
    description: str = ""
    runs_dir: str = "runs"
    source: str = ""
    tuning: dict[str, Any] = field(default_factory=dict)  # the [tuning] table, read by benchmark.tuning.config
    robustness: dict[str, Any] = field(default_factory=dict)  # [robustness], read by benchmark.robustness.grid_options

    def run_dir(self, root: Path, spec: RunSpec) -> Path:
        return root / self.name / spec.run_id


def _axes(block: dict[str, Any]) -> list[dict[str, Any]]:
    """Cartesian product of a sweep block (list values are axes)."""
    keys = list(block)
    values = [v if isinstance(v, list) else [v] for v in block.values()]
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def _check_default_axes(defaults: dict[str, Any], where: str) -> None:
    """Every ``[defaults]`` field known and of its type, a list (a grid-wide axis) in each of its
    values, non-empty and without repeats; an error names ``[defaults]``, where it was written."""
    for key, value in defaults.items():
        values = value if isinstance(value, list) else [value]
        if not values or len({repr(v) for v in values}) != len(values):
            raise ProtobenchError(f"{where}: {key} = {value!r} is a grid-wide axis; give it one or more distinct values")
        for one in values:
            if not (key == "weights" and isinstance(one, dict)):  # a table by backbone: weights_for_backbone
                check_field(key, one, where=where)


def trunk_and_data(spec: RunSpec) -> tuple[str, ...]:
    """What a token cache entry depends on, besides split and view (the one spelling of it:
    early-token sharing, job-array order and task packing use it)."""
    return (spec.backbone, spec.weights, spec.weights_id, repr(sorted(spec.backbone_args.items())), spec.dataset,
            spec.data_root, repr(sorted(spec.dataset_args.items())), str(spec.image_size), spec.cache_dtype)


def cache_group(spec: RunSpec) -> tuple[str, ...]:
    """Runs with equal groups read the same token-cache entries (the training view included):
    the sort key that makes them neighbours in a job array, and the key of task packing."""
    return (*trunk_and_data(spec), spec.augmentation)


def share_early_token_caches(runs: list[RunSpec]) -> tuple[RunSpec, ...]:
    """When a run needs an early block's tokens (EvalProtoPNet's SDFA), every run on the same
    trunk and data stores them too, so the whole group reads one cache entry per split and view."""
    from benchmark.method_lookup import declaration

    needing = {trunk_and_data(r) for r in runs if declaration(r.method).needs_early_tokens}
    return tuple(r.with_overrides(cache_early_tokens=True) if trunk_and_data(r) in needing else r for r in runs)


def toml_literal(text: str) -> Any:
    """A command-line value read as a TOML literal (``3``, ``1e-3``, ``true``, ``"x"``,
    ``{ depth = 4 }``); anything that is not one (``vmfproto``, ``data/cub``) is the plain string."""
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text


@dataclass(frozen=True)
class Sweep:
    """The value of a ``--sweep KEY=V1,V2`` override: every run of the grid once per value."""
    values: tuple[Any, ...]


def _override_key(key: str, option: str, term: str) -> str:
    """Check an override key: a RunSpec field (``J`` for prototypes_per_class), ``FIELD.NAME`` of a
    table field, or ``METHOD.NAME`` (a hyperparameter of one method, checked once the grid is read)."""
    scope, dot, name = key.rpartition(".")
    if not dot:
        key = ONLY_ALIASES.get(key, key)
        if key not in RUN_FIELDS:
            raise unknown_key_error(key, [*RUN_FIELDS, *ONLY_ALIASES], option)
        return key
    if not scope or not name:
        raise ProtobenchError(f"{option} {term!r}: {key!r} is not FIELD.NAME or METHOD.NAME")
    if scope in RUN_FIELDS and scope not in TABLE_FIELDS:
        raise ProtobenchError(f"{option} {key}: only {', '.join(TABLE_FIELDS)} take FIELD.NAME keys "
                              f"(or a method: {option} vmfproto.lambda_ppd=…)")
    return key


def _split_term(term: str, option: str, example: str) -> tuple[str, str]:
    key, eq, text = term.partition("=")
    if not eq or not key:
        raise ProtobenchError(f"{option} {term!r} is not KEY=VALUE (e.g. {option} {example})")
    return key, text


def parse_set_options(terms: list[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` terms → grid overrides. KEY is a RunSpec field, ``FIELD.NAME`` of a
    table field (``method_args.lambda_ppd=0.5``) or ``METHOD.NAME`` (``vmfproto.lambda_ppd=0.5``:
    that method's runs only); VALUE a TOML literal (:func:`toml_literal`)."""
    overrides: dict[str, Any] = {}
    for term in terms:
        key, text = _split_term(term, "--set", "batch_size=64, --set vmfproto.lambda_ppd=0.5")
        key = _override_key(key, "--set", term)
        value = toml_literal(text)
        parts = [toml_literal(part.strip()) for part in text.split(",")] if "," in text else []
        if isinstance(value, str) and parts and not any(isinstance(part, str) for part in parts):
            value = parts  # seed=0,1: numbers or booleans joined by commas, a sweep written with --set
        if isinstance(value, str):
            value = SetValue(value)
        if isinstance(value, list):  # no RunSpec field or hyperparameter is a list
            shown = ",".join(toml_literal_text(v) for v in value)
            raise ProtobenchError(f"--set {term}: a list of values is a sweep; use --sweep {key}={shown}")
        overrides[key] = value
    return overrides


def toml_literal_text(value: Any) -> str:
    """How a value is written back on the command line (strings bare)."""
    return value if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)


def parse_sweep_options(terms: list[str]) -> dict[str, Sweep]:
    """``--sweep KEY=V1,V2,…`` terms → axes added to the grid (keys as ``--set``'s; each value a
    TOML literal, or the whole right-hand side a TOML array: ``--sweep 'backbone_args={depth=2},{depth=4}'``
    is read as ``[{depth=2},{depth=4}]``)."""
    sweeps: dict[str, Sweep] = {}
    for term in terms:
        key, text = _split_term(term, "--sweep", "seed=0,1,2")
        key = _override_key(key, "--sweep", term)
        array = toml_literal(f"[{text}]")
        values = array if isinstance(array, list) else [toml_literal(v.strip()) for v in text.split(",")]
        if not text.strip() or not values:
            raise ProtobenchError(f"--sweep {term!r} gives no values (e.g. --sweep {key}=0,1,2)")
        if len(set(map(repr, values))) < len(values):
            raise ProtobenchError(f"--sweep {term}: a value is repeated")
        sweeps[key] = Sweep(tuple(values))
    return sweeps


def describe_overrides(overrides: dict[str, Any]) -> str:
    """The command-line options behind ``overrides``, as the user typed them (for error messages)."""
    shown = []
    for key, value in overrides.items():
        if key in OPTION_OF_KEY and (key == "cache" or isinstance(value, OptionValue)):
            shown.append(OPTION_OF_KEY[key] if key == "cache" else f"{OPTION_OF_KEY[key]} {value}")
        elif isinstance(value, Sweep):
            shown.append(f"--sweep {key}={','.join(toml_literal_text(v) for v in value.values)}")
        else:
            shown.append(f"--set {key}={toml_literal_text(value)}")
    return "command-line " + " ".join(shown)


def apply_overrides(values: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``values`` with ``overrides`` applied: a ``FIELD.NAME`` key sets one entry of a table field,
    a ``METHOD.NAME`` key one entry of method_args when the run's method is METHOD, any other key
    replaces the field."""
    merged = dict(values)
    for key, value in overrides.items():
        scope, dot, name = key.rpartition(".")
        if dot and scope not in TABLE_FIELDS:
            if merged.get("method") != scope:
                continue
            scope = "method_args"
        if dot:
            table = merged.get(scope, {})
            merged[scope] = {**(table if isinstance(table, dict) else {}), name: value}
        else:
            merged[key] = value
    return merged


def _check_method_scopes(overrides: dict[str, Any], runs: list[RunSpec]) -> None:
    """A ``METHOD.NAME`` override must reach a run: a misspelt method would otherwise change nothing."""
    methods = sorted({spec.method for spec in runs})
    for key, value in overrides.items():
        scope, dot, _ = key.rpartition(".")
        if dot and scope not in TABLE_FIELDS and scope not in methods:
            option = describe_overrides({key: value}).removeprefix("command-line ")
            hint = did_you_mean(scope, methods)
            raise ProtobenchError(f"{option}: no run of the grid has method {scope!r}{hint}; its methods are "
                                  f"{', '.join(methods)}")


def _build(values: dict[str, Any], overrides: dict[str, Any], where: str, options: str) -> RunSpec:
    """The RunSpec of one grid point with the overrides applied. A bad value is blamed on the
    command-line ``options`` when the grid point alone is valid, on the grid file otherwise."""
    if not overrides:
        return build_run_spec(weights_for_backbone(values, where), where=where)
    blamed = f"{where} with {options}"
    try:
        return build_run_spec(weights_for_backbone(apply_overrides(values, overrides), blamed), where=blamed)
    except ProtobenchError:
        build_run_spec(weights_for_backbone(values, where), where=where)  # raises when the grid is at fault
        raise


def _blamed_on_defaults(err: ProtobenchError, where: str, defaults: str, from_defaults: set[str]) -> ProtobenchError:
    """The error of a grid point blamed on ``[defaults]`` when the field it names (a
    :class:`~benchmark.errors.FieldError`'s) was written there, not in the ``[[sweep]]`` block
    ``where`` (docs/guides/grids.md)."""
    if isinstance(err, FieldError) and err.where == where and err.field in from_defaults:
        return err.written_in(defaults)
    return err


def weights_for_backbone(values: dict[str, Any], where: str) -> dict[str, Any]:
    """A ``weights`` table by backbone (``weights = { dinov2_vitb14 = "/w/b14.safetensors" }``)
    resolved to the run's string, so RunSpec.weights is always one value."""
    table = values.get("weights")
    if not isinstance(table, dict):
        return values
    table = {canonical_backbone(key, where=f"{where}: weights table"): value for key, value in table.items()}
    backbone = values.get("backbone")
    backbone = canonical_backbone(backbone, where=where) if isinstance(backbone, str) else backbone
    if backbone not in table:
        raise ProtobenchError(
            f"{where}: the weights table names {', '.join(sorted(table))} but not backbone {backbone!r}; "
            f'add {backbone} = "/path/to/weights.safetensors" (or "hf-cache") to it, or pass --weights')
    return {**values, "weights": table[backbone]}


def absolute_paths(spec: RunSpec) -> RunSpec:
    """``spec`` with its data root and weights file resolved against the working directory, once,
    when the grid is read: every later step (plan, the pre-submit checks, a job started in a code
    snapshot, spec.json) sees the same absolute path. Both are operational fields: the run id
    is unchanged."""
    def absolute(path: str) -> str:
        return str(Path(path).expanduser().resolve()) if path else path

    weights = spec.weights if spec.weights in ("hf-cache", "random") else absolute(spec.weights)
    return spec.with_overrides(data_root=absolute(spec.data_root), weights=weights)


def parse_grid(data: dict[str, Any], *, source: str, overrides: dict[str, Any] | None = None) -> GridSpec:
    """Validate and expand a parsed grid document; ``overrides`` replace fields of every run
    (e.g. ``--data-root``)."""
    for key in data:
        if key not in GRID_KEYS:
            raise unknown_key_error(key, list(GRID_KEYS), source)
    name = data.get("name")
    if not isinstance(name, str) or not GRID_NAME.fullmatch(name):
        raise ProtobenchError(f"{source}: name = {name!r} must be a folder name of letters, digits, '.', '_' "
                              "and '-' that starts with a letter or digit (runs go to RUNS_DIR/NAME/), e.g. 'cub_main'")
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise ProtobenchError(f"{source}: [defaults] must be a table")
    _check_default_axes(defaults, f"{source} [defaults]")
    sweeps = data.get("sweep", [{}])
    if not isinstance(sweeps, list) or not all(isinstance(s, dict) for s in sweeps):
        raise ProtobenchError(f"{source}: 'sweep' must be an array of tables ([[sweep]])")
    overrides = overrides or {}
    fixed = {k: v for k, v in overrides.items() if not isinstance(v, Sweep)}
    axes = {k: list(v.values) for k, v in overrides.items() if isinstance(v, Sweep)}
    options = describe_overrides(overrides)
    runs: dict[str, RunSpec] = {}
    for i, block in enumerate(sweeps):
        where = f"{source} [[sweep]] #{i + 1}"
        for key in block:
            if key not in RUN_FIELDS:
                raise unknown_key_error(key, list(RUN_FIELDS), where)
        if block == {} and "sweep" not in data:
            where = f"{source} [defaults]"  # no [[sweep]]: every value was written in [defaults]
        grid_wide = _axes({k: v for k, v in defaults.items() if k not in block})  # a block's own value wins
        for values, default in itertools.product(_axes(block), grid_wide):
            for swept in _axes(axes):
                try:
                    spec = absolute_paths(_build({**default, **values}, {**fixed, **swept}, where, options))
                except ProtobenchError as err:
                    raise _blamed_on_defaults(err, where, f"{source} [defaults]", set(default) - set(values)) from None
                runs.setdefault(spec.run_id, spec)
    if not runs:
        raise ProtobenchError(f"{source}: the grid expands to no runs")
    _check_method_scopes(overrides, list(runs.values()))
    _check_option_data_root(overrides, list(runs.values()))
    return GridSpec(
        name=name,
        runs=share_early_token_caches(list(runs.values())),
        description=str(data.get("description", "")),
        runs_dir=str(data.get("runs_dir", "runs")),
        source=source,
        tuning=_tuning_table(data, source),
        robustness=_robustness_table(data, source),
    )


def _robustness_table(data: dict[str, Any], source: str) -> dict[str, Any]:
    robustness = data.get("robustness", {})
    if not isinstance(robustness, dict):
        raise ProtobenchError(f"{source}: 'robustness' must be a table ([robustness]; docs/guides/robustness.md)")
    return robustness


def _tuning_table(data: dict[str, Any], source: str) -> dict[str, Any]:
    tuning = data.get("tuning", {})
    if not isinstance(tuning, dict):
        raise ProtobenchError(f"{source}: 'tuning' must be a table ([tuning]; docs/guides/tuning.md)")
    return tuning


def _check_option_data_root(overrides: dict[str, Any], runs: list[RunSpec]) -> None:
    """A data root given on the command line must exist: only a grid's own data_root makes the
    runner generate a synthbirds set (a typo would otherwise train on a fresh one). ``make-data``
    is suggested only for a dataset the suite generates (GENERATED_DATASETS)."""
    root = overrides.get("data_root")
    if not isinstance(root, (OptionValue, SetValue)) or Path(root).expanduser().exists():
        return  # a caller's own override (the API, tests) may name a synthbirds root to generate
    option = "--data-root" if isinstance(root, OptionValue) else "--set data_root"
    generated = sorted({spec.dataset for spec in runs} & set(GENERATED_DATASETS))
    make = (f" A {generated[0]} set is generated only where a grid file's data_root names it, or make one there "
            f"with `protobench make-data {generated[0]} --out {root}`" if generated else "")
    raise ProtobenchError(f"data root {str(root)!r} given on the command line ({option}) does not exist"
                          f"{nearest_sibling(root)}; pass the folder the dataset was extracted to.{make}")


def load_grid(path: str | Path, *, overrides: dict[str, Any] | None = None) -> GridSpec:
    """Read a grid TOML file; every error names the file and the offending key."""
    path = Path(path)
    data = read_toml(path, "grid file", "give the path of a .toml grid (ready-made grids are in benchmark/grids/)")
    return parse_grid(data, source=str(path), overrides=overrides)


def _existing(grid: GridSpec, only: list[str]) -> str:
    """For each ``key=value`` of ``--only`` naming a value no run of the grid has: the closest
    value and the values the grid has."""
    notes = []
    for term in only:
        key, sep, value = term.partition("=")
        if not sep:
            continue
        present = sorted({str(getattr(r, ONLY_ALIASES.get(key, key))) for r in grid.runs})
        missing = [v for v in value.split(",") if v not in present]
        notes += [f"{key}={v}{did_you_mean(v, present)}" for v in missing]
        if missing:
            notes.append(f"its runs have {key} = {', '.join(present)}")
    return "; " + "; ".join(notes) if notes else ""


def select_runs(grid: GridSpec, only: list[str]) -> list[RunSpec]:
    """Filter runs by ``key=value`` terms (``method=vmfproto``, ``seed=0``, ``J=3,5``: a comma
    list keeps any of its values; ``J`` is ``prototypes_per_class``) or run-id prefixes."""
    selected = list(grid.runs)
    for term in only:
        if "=" in term:
            key, _, value = term.partition("=")
            key = ONLY_ALIASES.get(key, key)
            if key not in RUN_FIELDS:
                raise unknown_key_error(key, [*RUN_FIELDS, *ONLY_ALIASES], "--only")
            wanted = set(value.split(","))
            selected = [r for r in selected if str(getattr(r, key)) in wanted]
        else:
            selected = [r for r in selected if r.run_id.startswith(term)]
    if not selected:
        raise ProtobenchError(f"--only {' '.join(only)} matches no run of grid {grid.name!r}{_existing(grid, only)}")
    return selected
