"""A grid's ``[tuning]`` table and its tuning cells (docs/guides/tuning.md).

```toml
[tuning]
trials = 20                 # per cell, the same for every method (`tune --trials` overrides)
sampler = "tpe"             # "tpe" | "random" | "nsga2"
objectives = ["acc"]        # validation metrics to maximise (two or more: NSGA-II's Pareto front)
seed = 0                    # the sampler's seed
validation_fraction = 0.1   # the validation split (benchmark/tuning/split.py)
validation_seed = 0
hyperparameters = "default" # what `protobench run` trains: "default" | "tuned" (each cell's best trial)
prune = false               # stop a trial early on its validation accuracy after each epoch (`tune --prune`)
[tuning.space.vmfproto]     # narrow or add dimensions of a method's declared search space
tau = { kind = "uniform", low = 0.2, high = 0.8 }
[tuning.replace.protopnet]  # replace a method's space by this one
add_on_lr = { kind = "log_uniform", low = 1e-3, high = 1e-2 }
```

A tuning cell is dataset × backbone × method × J × variant (every grid field but the seed): one
Optuna study, whose trials train with the cell's smallest seed.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from benchmark.checks import unknown_key_error
from benchmark.config import RunSpec
from benchmark.errors import ProtobenchError
from benchmark.grid import GridSpec
from benchmark.method_lookup import declaration, resolved_method_args, validate_method_args
from benchmark.tuning.split import DEFAULT_FRACTION, DEFAULT_SEED, check_rule
from methods.space import Categorical, Dimension, describe, space_fingerprint, space_from_json, space_problems

TUNING_KEYS = ("trials", "sampler", "objectives", "seed", "validation_fraction", "validation_seed",
               "hyperparameters", "prune", "space", "replace")
SAMPLERS = ("tpe", "random", "nsga2")
HYPERPARAMETERS = ("default", "tuned")
OBJECTIVES = ("acc", "con", "dis", "comp", "purity", "loc")  # validation metrics a study may maximise
#: a batch's training step (``tune --batch-step``, ``perf --batch-step``; benchmark/tuning/batched.py)
BATCH_STEPS = ("auto", "vectorised", "per-member")


@dataclass(frozen=True)
class TuningConfig:
    trials: int | None = None
    sampler: str = "tpe"
    objectives: tuple[str, ...] = ("acc",)
    seed: int = 0
    validation_fraction: float = DEFAULT_FRACTION
    validation_seed: int = DEFAULT_SEED
    hyperparameters: str = "default"
    prune: bool = False
    space: dict[str, dict[str, Dimension]] = field(default_factory=dict)
    replace: dict[str, dict[str, Dimension]] = field(default_factory=dict)


def _spaces(table: Any, where: str) -> dict[str, dict[str, Dimension]]:
    if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
        raise ProtobenchError(f"{where} must hold one table per method ([{where.split(' ')[-1]}.vmfproto])")
    out: dict[str, dict[str, Dimension]] = {}
    for method, dims in table.items():
        out[method] = {}
        for name, value in dims.items():
            if not isinstance(value, dict):
                raise ProtobenchError(f"{where}.{method}.{name} must be a table, e.g. "
                                      '{ kind = "log_uniform", low = 1e-4, high = 1e-2 }')
            try:
                out[method][name] = space_from_json(value, f"{where}.{method}.{name}")
            except ValueError as err:
                raise ProtobenchError(str(err)) from None
    return out


MAX_SEED = 2**32 - 1  # numpy.random.RandomState, which Optuna's samplers seed, takes no larger seed


def tuning_config(grid: GridSpec, *, trials: int | None = None, sampler: str | None = None,
                  hyperparameters: str | None = None, prune: bool | None = None) -> TuningConfig:
    """The grid's ``[tuning]`` table with command-line overrides, every value checked."""
    table, where = grid.tuning, f"{grid.source} [tuning]"
    for key in table:
        if key not in TUNING_KEYS:
            raise unknown_key_error(key, list(TUNING_KEYS), where)
    config = TuningConfig(
        trials=trials if trials is not None else table.get("trials"),
        sampler=sampler or table.get("sampler", "tpe"),
        objectives=tuple(table.get("objectives", ["acc"])),
        seed=table.get("seed", 0),
        validation_fraction=table.get("validation_fraction", DEFAULT_FRACTION),
        validation_seed=table.get("validation_seed", DEFAULT_SEED),
        hyperparameters=hyperparameters or table.get("hyperparameters", "default"),
        prune=prune if prune is not None else table.get("prune", False),
        space=_spaces(table.get("space", {}), f"{where} space"),
        replace=_spaces(table.get("replace", {}), f"{where} replace"),
    )
    if config.trials is not None and (isinstance(config.trials, bool) or not isinstance(config.trials, int)
                                      or config.trials < 1):
        if trials is not None:  # the command line's value: name the option, not the grid
            raise ProtobenchError(f"--trials {config.trials!r} must be an integer ≥ 1")
        raise ProtobenchError(f"{where}: trials = {config.trials!r} must be an integer ≥ 1 (or pass --trials N)")
    if config.sampler not in SAMPLERS:
        raise ProtobenchError(f"{where}: sampler = {config.sampler!r} must be one of {', '.join(SAMPLERS)}")
    if config.hyperparameters not in HYPERPARAMETERS:
        raise ProtobenchError(f"{where}: hyperparameters = {config.hyperparameters!r} must be 'default' or 'tuned'")
    bad = [o for o in config.objectives if o not in OBJECTIVES]
    if bad or not config.objectives or len(set(config.objectives)) < len(config.objectives):
        raise ProtobenchError(f"{where}: objectives = {list(config.objectives)} must be distinct validation metrics "
                              f"among {', '.join(OBJECTIVES)}")
    if isinstance(config.seed, bool) or not isinstance(config.seed, int) or not 0 <= config.seed <= MAX_SEED:
        raise ProtobenchError(f"{where}: seed = {config.seed!r} must be an integer in [0, {MAX_SEED}] (the samplers' "
                              "numpy seed)")
    check_pruning(config, where)
    check_rule(config.validation_fraction, config.validation_seed, where)
    for method in {*config.space, *config.replace}:
        if method not in {r.method for r in grid.runs}:
            raise ProtobenchError(f"{where}: a space is given for method {method!r}, which no run of the grid has")
    return config


def check_pruning(config: TuningConfig, where: str) -> None:
    """Pruning (benchmark/tuning/pruning.py) reports the validation accuracy after every epoch to
    one objective: refused, before any trial, for several objectives or another metric."""
    if not isinstance(config.prune, bool):
        raise ProtobenchError(f"{where}: prune = {config.prune!r} must be true or false")
    if not config.prune:
        return
    if len(config.objectives) > 1:
        raise ProtobenchError(
            f"{where}: pruning (--prune or prune = true) cannot be used with several objectives "
            f"({', '.join(config.objectives)}): Optuna prunes single-objective studies only (its "
            "Trial.report raises NotImplementedError in a multi-objective study such as NSGA-II's); drop "
            '--prune, or tune one objective with objectives = ["acc"]')
    if config.objectives != ("acc",):
        raise ProtobenchError(
            f"{where}: pruning (--prune or prune = true) judges a trial by its validation accuracy after "
            f"each epoch, but the objective is {config.objectives[0]!r}; set objectives = [\"acc\"] or drop --prune")


@dataclass(frozen=True)
class Cell:
    """One tuning cell: the trials' base spec (scored on validation), its space and its grid runs."""

    base: RunSpec
    space: dict[str, Dimension]
    runs: tuple[RunSpec, ...]
    config: TuningConfig
    held: tuple[str, ...] = ()  # dimensions of the method's space a named variant holds at its own values

    @property
    def defaults(self) -> dict[str, Any]:
        """The values trial 0 runs: the cell's hyperparameters (the paper's, with the grid's method_args)."""
        resolved = resolved_method_args(self.base.method, self.base.method_args)
        return {name: resolved[name] for name in sorted(self.space)}

    @property
    def space_fingerprint(self) -> str:
        return space_fingerprint(self.space)

    @property
    def study_name(self) -> str:
        """Readable and unique: what the cell is, and a hash of its base run, space, sampler and objectives."""
        blob = json.dumps([self.base.run_id, self.space_fingerprint, self.config.sampler, self.config.objectives,
                           self.config.seed])
        digest = hashlib.sha256(blob.encode()).hexdigest()[:10]
        b = self.base
        variant = "" if b.variant == "default" else f"-{b.variant}"
        return f"{b.method}-J{b.prototypes_per_class}-{b.backbone}-{b.dataset}{variant}-{digest}"

    @property
    def epoch_budget(self) -> int:
        """Epochs every trial of the cell trains (the method's schedule as the grid sets it)."""
        from methods.registry import stand_in_method

        method = stand_in_method(self.base.method, self.base.method_args, self.base.prototypes_per_class)
        return sum(stage.epochs for stage in method.stages())

    @property
    def label(self) -> str:
        b = self.base
        return (f"{b.method} J={b.prototypes_per_class} {b.backbone} {b.dataset}"
                + ("" if b.variant == "default" else f" [{b.variant}]"))


def cell_space(method: str, config: TuningConfig) -> dict[str, Dimension]:
    """A method's declared space, with the grid's dimensions narrowing it or replacing it."""
    if method in config.replace:
        return dict(config.replace[method])
    return {**declaration(method).search_space, **config.space.get(method, {})}


def held_by_variant(base: RunSpec, space: dict[str, Dimension]) -> tuple[str, ...]:
    """The dimensions a named variant holds fixed: the method_args its grid gives it define the
    ablation (``ce_only``: λ_ppd = λ_logdet = 0), so tuning them would undo it; the default
    variant's method_args are only trial 0's starting point (docs/guides/tuning.md)."""
    return () if base.variant == "default" else tuple(sorted(set(space) & set(base.method_args)))


def tuning_cells(grid: GridSpec, runs: list[RunSpec], config: TuningConfig) -> list[Cell]:
    """The grid's runs grouped into tuning cells (every field but the seed), each checked: its space
    names hyperparameters of the method, with valid ranges that hold the cell's own values (a named
    variant's own method_args are held fixed, :func:`held_by_variant`)."""
    groups: dict[str, list[RunSpec]] = {}
    for spec in runs:
        groups.setdefault(spec.with_overrides(seed=0).run_id, []).append(spec)
    cells = []
    for members in groups.values():
        first = min(members, key=lambda r: r.seed)
        base = first.with_overrides(evaluation_split="validation", validation_fraction=config.validation_fraction,
                                    validation_seed=config.validation_seed, measure_inference=False,
                                    measure_live_epoch=False)
        space = cell_space(base.method, config)
        held = held_by_variant(base, space)
        space = {name: dimension for name, dimension in space.items() if name not in held}
        resolved = resolved_method_args(base.method, base.method_args)
        problems = space_problems(space, resolved, f"{grid.source}: tuning cell {first.label}")
        if problems:  # trial 0 runs the cell's own values: they must be a point of the space
            raise ProtobenchError(problems[0].replace(": the default ", ": the cell's value ").replace(
                "widen the range to include the paper's default",
                f"give it a range that holds the value in [tuning.space.{base.method}], or change method_args"))
        check_space_points(base.method, space, f"{grid.source} [tuning.space.{base.method}]")
        cells.append(Cell(base, space, tuple(sorted(members, key=lambda r: r.seed)), config, held))
    return cells


def check_space_points(method: str, space: dict[str, Dimension], where: str) -> None:
    """Every point a trial may draw is a value the method takes (its declaration: kind and range,
    no model code): each categorical choice and each range's ends, so a bad choice is refused
    before the first trial rather than failing trials one by one."""
    for name, dimension in space.items():
        points = dimension.choices if isinstance(dimension, Categorical) else (dimension.low, dimension.high)
        for point in points:
            try:
                validate_method_args(method, {name: point})
            except ProtobenchError as err:
                raise ProtobenchError(f"{where}: {name} = {describe(dimension)} holds {point!r}, which the method "
                                      f"refuses ({err}); choose values it takes") from None


def describe_space(space: dict[str, Dimension]) -> str:
    return ", ".join(f"{name} ~ {describe(d)}" for name, d in sorted(space.items())) or "nothing (no search space)"
