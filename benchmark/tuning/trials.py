"""A tuning worker: asks a cell's study for trials and runs each as an ordinary run.

A trial is the cell's base RunSpec (``evaluation_split = "validation"``) with the sampled values in
its ``method_args``, run by :func:`benchmark.run.runner.execute_run` under
``RUNS/GRID.tuning/trials/RUN_ID``: caching, checkpoints, resume and stale detection apply
unchanged. Any number of workers (one process, SLURM array tasks) may run :func:`work_on` on
the same cells: under the study's lock a worker asks a trial only while finished (complete or
pruned) + running trials are fewer than N, and fails trials whose worker stopped beating, so
every cell ends with exactly N finished trials.

With pruning (``tune --prune``) a trial reports its validation accuracy after every epoch
(:mod:`benchmark.run.epoch_score`) and stops when the study's pruner says so; its run directory
then holds ``pruned.json`` and no ``result.json``.
"""
from __future__ import annotations

import hashlib
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from benchmark.errors import ProtobenchError
from benchmark.run.epoch_score import EpochScoreHook, Pruned
from benchmark.study_summary import SUMMARY_FILE
from benchmark.tuning.config import Cell
from benchmark.tuning.split import validation_split, write_split_file
from benchmark.tuning.study import (GRACE_S, HEARTBEAT_S, Heartbeat, counts, distribution, fail_stale_trials,
                                    finished, open_study, sampler, study_dir, study_lock, summary, write_summary)

POLL_S = 2.0  # how often a worker with no slot left looks again (a running trial elsewhere may fail)


@dataclass(frozen=True)
class WorkerSettings:
    tuning_root: Path
    cache_root: Path | None
    trials: int
    heartbeat_s: float = HEARTBEAT_S
    grace_s: float = GRACE_S
    log: Callable[[str], None] = print


def failure_budget(trials: int) -> int:
    """Failed trials a cell may record before ``tune`` stops it: a method that crashes on part of
    its space keeps being tried (each failure is recorded, as Optuna does) until N trials finish,
    but a method that crashes on every point stops after 2·N + 3 failures, not never."""
    return 2 * trials + 3


def _write_summary(study: optuna.Study, cell: Cell, directory: Path, settings: WorkerSettings) -> dict[str, Any]:
    """``summary.json`` as the study stands now (after every trial: ``report --tuning`` shows an
    unfinished study as unfinished, and a failing one has a summary to point to)."""
    record = summary(study, cell, settings.trials)
    with study_lock(directory):
        write_summary(directory, record)
    return record


def lost_defaults(study: optuna.Study) -> int | None:
    """The number of the last defaults trial when none of them completed, runs or waits (its
    worker was killed, or it crashed): the defaults are what a tuned result is set against, so
    they are asked again until they complete (within the failure budget). A retry with the same
    values is the same run: it resumes the killed trial's checkpoint, and its record names the
    trial it retries (``retry_of``)."""
    tried = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("defaults")]
    alive = (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING)
    if not tried or any(t.state in alive for t in tried):
        return None
    return tried[-1].number


def sampler_seed(cell: Cell, asked: int) -> int:
    """The sampler's seed for the next trial: the grid's ``[tuning] seed``, the study and how many
    trials it holds, hashed. Every process resuming the study (a second ``tune``, another
    worker) draws from the study's own history instead of restarting the same random stream, and
    the same journal always gives the same proposals."""
    blob = f"{cell.config.seed}:{cell.study_name}:{asked}".encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:4], "big")


def trials_root(tuning_root: Path) -> Path:
    return tuning_root / "trials"


def _ask(study: optuna.Study, cell: Cell, directory: Path, settings: WorkerSettings) -> optuna.Trial | None | str:
    """Under the lock: a new trial, None (no slot free now: others are running), or "done"."""
    with study_lock(directory):
        for number in fail_stale_trials(study, directory, settings.grace_s):
            settings.log(f"{cell.study_name}: trial {number} failed: its worker stopped (heartbeat lost)")
        if not study.trials:  # trial 0: the cell's own values (the paper's defaults)
            study.enqueue_trial(cell.defaults, user_attrs={"defaults": True})
        elif (retry := lost_defaults(study)) is not None:  # killed or crashed: asked again, first
            study.enqueue_trial(cell.defaults, user_attrs={"defaults": True, "retry_of": retry})
            settings.log(f"{cell.study_name}: the defaults (trial {retry}) did not finish: asked again")
        state = counts(study)
        if finished(state) >= settings.trials:
            return "done"
        if finished(state) + state.get("RUNNING", 0) >= settings.trials:
            return None
        study.sampler = sampler(cell.config.sampler, sampler_seed(cell, len(study.trials)))
        trial = study.ask({name: distribution(d) for name, d in cell.space.items()})
        (directory / "heartbeats").mkdir(exist_ok=True)
        # alive from the moment it is asked; the file names its worker (host, pid) for a reader
        (directory / "heartbeats" / str(trial.number)).write_text(f"{socket.gethostname()} {os.getpid()}\n")
        return trial


def _score(result: dict[str, Any], cell: Cell) -> list[float]:
    values = [result["metrics"].get(name) for name in cell.config.objectives]
    if any(v is None or v != v for v in values):
        raise ProtobenchError(f"the trial's validation {', '.join(cell.config.objectives)} = {values} is undefined")
    return [float(v) for v in values]


def pruning_hook(trial: optuna.Trial, cell: Cell) -> EpochScoreHook:
    """Report each epoch's validation accuracy to the study and raise :class:`Pruned` when its
    pruner says so; never for the defaults (trial 0, what a tuned result is set against) nor
    after the last epoch (the trial is then complete)."""
    last_epoch = cell.epoch_budget
    defaults = bool(trial.user_attrs.get("defaults"))

    def report(epoch: int, accuracy: float) -> None:
        trial.report(accuracy, epoch)
        if epoch < last_epoch and not defaults and trial.should_prune():
            raise Pruned(epoch, accuracy)

    return report


def run_trial(trial: optuna.Trial, cell: Cell, settings: WorkerSettings) -> list[float]:
    """Train and score one trial; its run id and wall time become user attributes of the trial.
    With pruning, :class:`Pruned` ends it early."""
    from benchmark.run.runner import execute_run

    spec = cell.base.with_overrides(method_args={**cell.base.method_args, **trial.params})
    trial.set_user_attr("run_id", spec.run_id)
    tic = time.perf_counter()
    try:
        result = execute_run(spec, trials_root(settings.tuning_root) / spec.run_id, cache_root=settings.cache_root,
                             progress=False, log=lambda line: None,
                             on_validation_epoch=pruning_hook(trial, cell) if cell.config.prune else None)
    finally:
        trial.set_user_attr("seconds", time.perf_counter() - tic)
    trial.set_user_attr("validation_split", result.get("validation_split"))
    return _score(result, cell)


def write_split(cell: Cell, directory: Path) -> None:
    """The cell's readable ``validation_split.json`` (the same rows for every cell of the dataset)."""
    from benchmark.run.runner import load_split

    train = load_split(cell.base, "train")
    split = validation_split(train.labels, fraction=cell.base.validation_fraction, seed=cell.base.validation_seed)
    names = [str(p.relative_to(train.root)) if p.is_relative_to(train.root) else str(p) for p in train.image_paths]
    write_split_file(directory / "validation_split.json", split, names, train.labels)


def work_on(cell: Cell, settings: WorkerSettings) -> dict[str, Any]:
    """Run trials of ``cell`` until its study holds N finished ones; the study's summary."""
    directory = study_dir(settings.tuning_root, cell)
    study = open_study(directory, cell)
    write_split(cell, directory)
    failures = 0
    while True:
        asked = _ask(study, cell, directory, settings)
        if asked == "done":
            break
        if asked is None:
            time.sleep(POLL_S)  # another worker holds the last slots; one may still fail
            continue
        assert isinstance(asked, optuna.Trial)
        beat = Heartbeat(directory, asked.number, settings.heartbeat_s)
        try:
            values = run_trial(asked, cell, settings)
        except Pruned as pruned:  # counts towards N like a complete trial (benchmark/tuning/study.py)
            asked.set_user_attr("pruned_after_epoch", pruned.epoch)
            study.tell(asked, state=TrialState.PRUNED)
            beat.stop()
            settings.log(f"{cell.study_name}: trial {asked.number} {pruned}")
            _write_summary(study, cell, directory, settings)
            continue
        except (Exception, KeyboardInterrupt) as err:  # noqa: BLE001 - the trial fails, the study goes on
            asked.set_user_attr("fail_reason", f"{type(err).__name__}: {err}")
            study.tell(asked, state=TrialState.FAIL)
            beat.stop()
            if isinstance(err, KeyboardInterrupt):
                raise
            failures += 1
            budget = failure_budget(settings.trials)
            settings.log(f"{cell.study_name}: trial {asked.number} failed ({failures} of the {budget} failures "
                         f"allowed): {type(err).__name__}: {err}")
            _write_summary(study, cell, directory, settings)
            if failures >= budget:
                raise ProtobenchError(f"tuning cell {cell.label}: {failures} trials failed in this worker, its "
                                      f"failure budget (2·N + 3 for N = {settings.trials}) (last: "
                                      f"{type(err).__name__}: {err}); each failure is in "
                                      f"{directory / SUMMARY_FILE}") from err
            continue
        study.tell(asked, values)
        beat.stop()
        settings.log(f"{cell.study_name}: trial {asked.number} {dict(zip(cell.config.objectives, values))}")
        _write_summary(study, cell, directory, settings)
    return _write_summary(study, cell, directory, settings)
