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

Packed trials: a worker keeps each cell's trunk, training split and token sources loaded
(:class:`benchmark.run.prepare.Loaded`) across its trials, so only the first trial of a cell opens
the token-cache entry. Batched trials (``tune --batch K``): for a method that declares
``batches_trials``, the worker asks K trials at once (TPE with ``constant_liar``: the trials still
running count as their worst so far, so K proposals spread out) and trains them together
(:mod:`benchmark.tuning.batched`); each is told to the study as an ordinary trial. A method that
does not declare it runs its trials one by one (said once per cell).
"""
from __future__ import annotations

import hashlib
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState

from benchmark.errors import ProtobenchError
from benchmark.method_lookup import declaration
from benchmark.run.epoch_score import EpochScoreHook, Pruned
from benchmark.study_summary import SUMMARY_FILE
from benchmark.config import RunSpec
from benchmark.tuning.config import Cell
from benchmark.tuning.split import validation_split, write_split_file
from benchmark.tuning.study import (GRACE_S, HEARTBEAT_S, Heartbeat, counts, distribution, fail_stale_trials,
                                    finished, open_study, sampler, study_dir, study_lock, summary, write_summary)

if TYPE_CHECKING:
    from benchmark.run.prepare import Loaded

POLL_S = 2.0  # how often a worker with no slot left looks again (a running trial elsewhere may fail)


@dataclass(frozen=True)
class WorkerSettings:
    tuning_root: Path
    cache_root: Path | None
    trials: int
    heartbeat_s: float = HEARTBEAT_S
    grace_s: float = GRACE_S
    log: Callable[[str], None] = print
    batch: int = 1  # trials asked and trained together (methods that declare batches_trials)
    batch_step: str = "auto"  # the batched step: benchmark.tuning.config.BATCH_STEPS
    packed: bool = True  # keep the cell's trunk and token sources loaded across trials


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


def _ask(study: optuna.Study, cell: Cell, directory: Path, settings: WorkerSettings,
         size: int) -> list[optuna.Trial] | None | str:
    """Under the lock: up to ``size`` new trials (fewer when fewer slots of the budget are free),
    None (no slot free now: others are running), or "done"."""
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
        free = settings.trials - finished(state) - state.get("RUNNING", 0)
        if free <= 0:
            return None
        asked = []
        for _ in range(min(size, free)):
            study.sampler = sampler(cell.config.sampler, sampler_seed(cell, len(study.trials)),
                                    constant_liar=settings.batch > 1)
            trial = study.ask({name: distribution(d) for name, d in cell.space.items()})
            (directory / "heartbeats").mkdir(exist_ok=True)
            # alive from the moment it is asked; the file names its worker (host, pid) for a reader
            (directory / "heartbeats" / str(trial.number)).write_text(f"{socket.gethostname()} {os.getpid()}\n")
            asked.append(trial)
        return asked


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


def _trial_spec(trial: optuna.Trial, cell: Cell) -> RunSpec:
    spec = cell.base.with_overrides(method_args={**cell.base.method_args, **trial.params})
    trial.set_user_attr("run_id", spec.run_id)
    return spec


def run_trial(trial: optuna.Trial, cell: Cell, settings: WorkerSettings, loaded: Loaded | None = None) -> list[float]:
    """Train and score one trial; its run id and wall time become user attributes of the trial.
    With pruning, :class:`Pruned` ends it early. ``loaded``: the worker's packed cell data."""
    from benchmark.run.runner import execute_run

    spec = _trial_spec(trial, cell)
    tic = time.perf_counter()
    try:
        result = execute_run(spec, trials_root(settings.tuning_root) / spec.run_id, cache_root=settings.cache_root,
                             progress=False, log=lambda line: None,
                             on_validation_epoch=pruning_hook(trial, cell) if cell.config.prune else None,
                             loaded=loaded)
    finally:
        trial.set_user_attr("seconds", time.perf_counter() - tic)
    trial.set_user_attr("validation_split", result.get("validation_split"))
    return _score(result, cell)


def run_trials_together(trials: list[optuna.Trial], cell: Cell, settings: WorkerSettings,
                        loaded: Loaded | None) -> list[list[float] | BaseException]:
    """Train and score ``trials`` in one batch (:func:`benchmark.tuning.batched.run_batch`); per
    trial its objective values or the exception that ended it. Each trial's ``seconds`` is its
    share of the batch's wall time."""
    from benchmark.tuning.batched import run_batch

    specs = [_trial_spec(trial, cell) for trial in trials]
    tic = time.perf_counter()
    outcomes = run_batch(specs, [trials_root(settings.tuning_root) / spec.run_id for spec in specs],
                         cache_root=settings.cache_root, loaded=loaded, step=settings.batch_step,
                         hooks=[pruning_hook(trial, cell) if cell.config.prune else None for trial in trials])
    share = (time.perf_counter() - tic) / len(trials)
    scored: list[list[float] | BaseException] = []
    for trial, outcome in zip(trials, outcomes):
        trial.set_user_attr("seconds", share)
        trial.set_user_attr("batch", [t.number for t in trials])
        if isinstance(outcome, BaseException):
            scored.append(outcome)
            continue
        trial.set_user_attr("validation_split", outcome.get("validation_split"))
        try:
            scored.append(_score(outcome, cell))
        except ProtobenchError as err:
            scored.append(err)
    return scored


def write_split(cell: Cell, directory: Path) -> None:
    """The cell's readable ``validation_split.json`` (the same rows for every cell of the dataset)."""
    from benchmark.run.prepare import load_split

    train = load_split(cell.base, "train")
    split = validation_split(train.labels, fraction=cell.base.validation_fraction, seed=cell.base.validation_seed)
    names = [str(p.relative_to(train.root)) if p.is_relative_to(train.root) else str(p) for p in train.image_paths]
    write_split_file(directory / "validation_split.json", split, names, train.labels)


def batch_size(cell: Cell, settings: WorkerSettings) -> int:
    """Trials asked at once for ``cell``: ``settings.batch`` when its method declares
    ``batches_trials``, else 1 (said once)."""
    if settings.batch <= 1:
        return 1
    if not declaration(cell.base.method).batches_trials:
        settings.log(f"{cell.study_name}: {cell.base.method} does not train trials in batches (its protocol page "
                     f"says why): its trials run one by one, not {settings.batch} at a time")
        return 1
    return settings.batch


class _Tally:
    """The worker's failures in one cell, against its failure budget."""

    def __init__(self, cell: Cell, directory: Path, settings: WorkerSettings) -> None:
        self.cell, self.directory, self.settings, self.failures = cell, directory, settings, 0

    def tell(self, study: optuna.Study, trial: optuna.Trial, outcome: list[float] | BaseException) -> None:
        """Tell the study how ``trial`` ended: complete, pruned (counts towards N) or failed."""
        cell, settings = self.cell, self.settings
        if isinstance(outcome, Pruned):  # counts towards N like a complete trial (benchmark/tuning/study.py)
            trial.set_user_attr("pruned_after_epoch", outcome.epoch)
            study.tell(trial, state=TrialState.PRUNED)
            settings.log(f"{cell.study_name}: trial {trial.number} {outcome}")
        elif isinstance(outcome, BaseException):
            trial.set_user_attr("fail_reason", f"{type(outcome).__name__}: {outcome}")
            study.tell(trial, state=TrialState.FAIL)
            self.failures += 1
            budget = failure_budget(settings.trials)
            settings.log(f"{cell.study_name}: trial {trial.number} failed ({self.failures} of the {budget} failures "
                         f"allowed): {type(outcome).__name__}: {outcome}")
        else:
            study.tell(trial, outcome)
            settings.log(f"{cell.study_name}: trial {trial.number} {dict(zip(cell.config.objectives, outcome))}")
        _write_summary(study, cell, self.directory, settings)

    def check(self, last: BaseException) -> None:
        """Stop the cell once its failure budget is spent."""
        if self.failures >= failure_budget(self.settings.trials):
            raise ProtobenchError(f"tuning cell {self.cell.label}: {self.failures} trials failed in this worker, its "
                                  f"failure budget (2·N + 3 for N = {self.settings.trials}) (last: "
                                  f"{type(last).__name__}: {last}); each failure is in "
                                  f"{self.directory / SUMMARY_FILE}") from last


def work_on(cell: Cell, settings: WorkerSettings) -> dict[str, Any]:
    """Run trials of ``cell`` until its study holds N finished ones; the study's summary."""
    from benchmark.run.prepare import Loaded

    directory = study_dir(settings.tuning_root, cell)
    study = open_study(directory, cell)
    write_split(cell, directory)
    loaded = Loaded() if settings.packed else None
    size = batch_size(cell, settings)
    tally = _Tally(cell, directory, settings)
    trimmed = False
    while True:
        asked = _ask(study, cell, directory, settings, size)
        if asked == "done":
            break
        if asked is None:
            time.sleep(POLL_S)  # another worker holds the last slots; one may still fail
            continue
        assert isinstance(asked, list)
        if len(asked) < size and not trimmed:
            trimmed = True
            settings.log(f"{cell.study_name}: --batch {size} is more than the {len(asked)} trial(s) left of the "
                         f"budget of {settings.trials}: this batch trains {len(asked)}")
        beats = [Heartbeat(directory, trial.number, settings.heartbeat_s) for trial in asked]
        try:
            if size == 1:
                outcomes: list[list[float] | BaseException] = []
                try:
                    outcomes.append(run_trial(asked[0], cell, settings, loaded))
                except Exception as err:  # noqa: BLE001 - the trial fails (or is pruned), the study goes on
                    outcomes.append(err)
            else:
                try:
                    outcomes = run_trials_together(asked, cell, settings, loaded)
                except Exception as err:  # noqa: BLE001 - the batch's trials fail, the study goes on
                    outcomes = [err] * len(asked)
        except KeyboardInterrupt as err:
            for trial, beat in zip(asked, beats):
                trial.set_user_attr("fail_reason", f"{type(err).__name__}: {err}")
                study.tell(trial, state=TrialState.FAIL)
                beat.stop()
            raise
        for trial, beat, outcome in zip(asked, beats, outcomes):
            tally.tell(study, trial, outcome)
            beat.stop()
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, Pruned):
                tally.check(outcome)
    return _write_summary(study, cell, directory, settings)
