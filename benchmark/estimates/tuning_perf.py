"""``protobench perf GRID --tuning K``: what K tuning trials of one cell cost, run three ways.

For each method of the selected runs, on its tuning cell (the run itself, scored on the
validation split), the same K points of its search space (the defaults, then K − 1 drawn by
Optuna's random sampler from a fixed seed) are trained and scored

- **sequentially**, as ``tune`` ran them before packing: one ``execute_run`` each, every trial
  loading its trunk and training split and opening its token-cache entry;
- **packed**: one ``execute_run`` each with the cell's trunk, split and sources kept loaded
  (:class:`benchmark.run.prepare.Loaded`), as ``tune`` runs them now;
- **batched**: all K together (:func:`benchmark.tuning.batched.run_batch`, ``tune --batch K``),
  for a method that declares ``batches_trials`` (else ``batched_s`` is null).

Each repeat runs the three in turn, in fresh run directories, starting with the next mode each
time (sequential, packed, batched; then packed, batched, sequential; …), so a change of machine
load hits each alike; the token-cache entry is built before anything is timed. Per mode the seconds
of the K trials (median over repeats, with the spread), and the per-trial overhead: a trial's
wall time less its training epochs and one validation forward pass (timed on its own).
``max_abs_diff_batched``: the largest |validation accuracy batched − sequential| over the K
trials and the repeats (percentage points), ``max_abs_diff_packed`` the same for packed.
"""
from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

from benchmark.config import RunSpec
from benchmark.estimates.perf import Spread
from benchmark.grid import GridSpec
from benchmark.method_lookup import declaration
from benchmark.progress import NO_PROGRESS
from benchmark.run.epoch_score import validation_accuracy
from benchmark.run.prepare import Loaded, prepare
from benchmark.run.runner import execute_run
from benchmark.run.run_data import run_data
from benchmark.tuning.batched import run_batch
from benchmark.tuning.config import Cell, tuning_cells, tuning_config
from benchmark.tuning.study import distribution

POINTS_SEED = 0  # the random sampler's seed of the K − 1 points after the defaults


def trial_points(cell: Cell, k: int) -> list[RunSpec]:
    """The cell's defaults and ``k − 1`` random points of its space, as trial run specs."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=POINTS_SEED))
    points = [dict(cell.defaults)]
    for _ in range(k - 1):
        points.append(study.ask({name: distribution(d) for name, d in cell.space.items()}).params)
    return [cell.base.with_overrides(method_args={**cell.base.method_args, **p}) for p in points]


def _train_seconds(result: dict[str, Any]) -> float:
    return sum(result["timing"]["stage_seconds"].values())


def _timed(work: Callable[[], Any]) -> tuple[Any, float]:
    tic = time.perf_counter()
    out = work()
    return out, time.perf_counter() - tic


def validation_forward_seconds(spec: RunSpec, cache_root: Path) -> float:
    """One validation forward pass of the method (as built: the cost does not depend on training)."""
    prep = prepare(spec)
    data = run_data(prep, cache_root, NO_PROGRESS)
    validation_accuracy(prep.method, data.evaluation, batch_size=spec.eval_batch_size, device=prep.device,
                        precision=spec.precision)  # warm-up
    return _timed(lambda: validation_accuracy(prep.method, data.evaluation, batch_size=spec.eval_batch_size,
                                              device=prep.device, precision=spec.precision))[1]


def _one_by_one(specs: list[RunSpec], root: Path, cache_root: Path,
                loaded: Loaded | None) -> tuple[list[dict[str, Any]], list[float]]:
    results, seconds = [], []
    for spec in specs:
        result, took = _timed(lambda spec=spec: execute_run(spec, root / spec.run_id, cache_root=cache_root,
                                                             progress=False, log=lambda line: None, loaded=loaded))
        results.append(result)
        seconds.append(took)
    return results, seconds


def _accuracies(results: list[Any]) -> list[float]:
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return [float(r["metrics"]["acc"]) for r in results]


def measure_method(spec: RunSpec, cell: Cell, k: int, cache_root: Path, work: Path, repeats: int,
                   step: str, log: Callable[[str], None]) -> dict[str, Any]:
    """The ``tuning`` row of one method (module docstring)."""
    specs = trial_points(cell, k)
    forward = validation_forward_seconds(specs[0], cache_root)  # also builds the token-cache entry
    batches = declaration(spec.method).batches_trials
    times: dict[str, list[float]] = {"sequential": [], "packed": [], "batched": []}
    one_trial, overheads = [], {"sequential": [], "packed": []}
    diffs: dict[str, list[float]] = {"packed": [], "batched": []}
    modes = ["sequential", "packed"] + (["batched"] if batches else [])
    for repeat in range(repeats):
        base = work / f"{spec.method}-{repeat}"
        results: dict[str, list[Any]] = {}
        # each repeat starts with the next mode, so a drift of the machine's load does not favour one mode
        for mode in modes[repeat % len(modes):] + modes[:repeat % len(modes)]:
            if mode == "batched":
                results[mode], took = _timed(lambda base=base: run_batch(
                    specs, [base / "batched" / s.run_id for s in specs], cache_root=cache_root, loaded=Loaded(),
                    hooks=[None] * len(specs), step=step))
                times[mode].append(took)
                continue
            results[mode], seconds = _one_by_one(specs, base / mode, cache_root,
                                                 Loaded() if mode == "packed" else None)
            times[mode].append(sum(seconds))
            overheads[mode].extend(s - _train_seconds(r) - forward for r, s in zip(results[mode], seconds))
            if mode == "sequential":
                one_trial.extend(seconds)
        reference = _accuracies(results["sequential"])
        for mode in modes[1:]:
            diffs[mode].extend(abs(a - b) for a, b in zip(_accuracies(results[mode]), reference))
        log(f"{spec.method} repeat {repeat + 1}/{repeats}: " + ", ".join(
            f"{mode} {values[-1]:.2f} s" for mode, values in times.items() if values))
    row: dict[str, Any] = {
        "method": spec.method,
        "k": k,
        "one_trial_s": statistics.median(one_trial),
        "sequential_s": statistics.median(times["sequential"]),
        "packed_s": statistics.median(times["packed"]),
        "batched_s": statistics.median(times["batched"]) if batches else None,
        "max_abs_diff_batched": max(diffs["batched"]) if batches else None,
        "max_abs_diff_packed": max(diffs["packed"]),
        "repeats": repeats,
        "batch_step": step if batches else None,
        "validation_forward_s": forward,
        "overhead_per_trial_s": {mode: Spread.of(values).to_json() for mode, values in overheads.items()},
        "seconds": {mode: Spread.of(values).to_json() for mode, values in times.items() if values},
        "packed_over_sequential": Spread.of([p / s for p, s in zip(times["packed"], times["sequential"])]).to_json(),
    }
    if batches:
        row["batched_over_sequential"] = Spread.of(
            [b / s for b, s in zip(times["batched"], times["sequential"])]).to_json()
    row["trials_per_hour"] = {mode: 3600 * k / row[f"{mode}_s"] for mode in ("sequential", "packed", "batched")
                              if row[f"{mode}_s"] is not None}
    return row


def measure_tuning(grid: GridSpec, runs: list[RunSpec], k: int, cache_root: Path, *, repeats: int = 1,
                   step: str = "auto", log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """One ``tuning`` row per method of ``runs`` (its first run's cell), K trials each."""
    config = tuning_config(grid, trials=k)
    rows, seen = [], set()
    with tempfile.TemporaryDirectory(prefix="protobench-perf-tuning-") as work:
        for spec in runs:
            if spec.method in seen:
                continue
            seen.add(spec.method)
            cell = tuning_cells(grid, [spec], config)[0]
            rows.append(measure_method(spec, cell, k, cache_root, Path(work), repeats, step, log))
    return rows
