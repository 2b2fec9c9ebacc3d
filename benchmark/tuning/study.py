"""One Optuna study per tuning cell, in a journal file that many workers share.

Storage: ``optuna.storages.JournalStorage`` over ``JournalFileBackend`` with its open(2)-based lock
(``JournalFileOpenLock``), which Optuna documents as safe on NFS; no SQLite (whose locking NFS
breaks). Layout: ``RUNS/GRID.tuning/STUDY/journal.log`` (the study), ``summary.json`` (what
``report --tuning`` reads; no Optuna needed), ``heartbeats/TRIAL`` (one file per running trial,
touched by its worker). Optuna's own heartbeat needs an RDB storage, so a worker beats here: a
running trial whose file has not been touched for ``grace_s`` (measured against the shared
filesystem's clock) belongs to a dead worker (SIGKILL, preemption) and is marked FAIL, so its
slot is trialled again and the study still ends with exactly N finished trials.

Pruning (``tune --prune``): Optuna's ``MedianPruner`` with its defaults (:func:`pruner`); a pruned
trial counts towards N like a complete one (``finished`` = COMPLETE + PRUNED), so every method
still gets N trials of at most its schedule's epochs. Whether a study prunes is recorded in its
user attributes when it is created; tuning it again the other way is refused.
"""
from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock
from optuna.trial import TrialState

from benchmark.errors import ProtobenchError
from benchmark.study_summary import JOURNAL_FILE, SUMMARY_FILE
from benchmark.tuning.config import Cell
from methods.space import Categorical, Dimension, IntRange, LogUniform, space_to_json

HEARTBEAT_S = 10.0  # a running trial's file is touched this often
GRACE_S = 60.0  # untouched this long: its worker is dead


def study_dir(tuning_root: Path, cell: Cell) -> Path:
    return tuning_root / cell.study_name


def distribution(dimension: Dimension) -> optuna.distributions.BaseDistribution:
    """Optuna's distribution of a declared dimension."""
    if isinstance(dimension, Categorical):
        return optuna.distributions.CategoricalDistribution(dimension.choices)
    if isinstance(dimension, IntRange):
        return optuna.distributions.IntDistribution(dimension.low, dimension.high)
    return optuna.distributions.FloatDistribution(dimension.low, dimension.high, log=isinstance(dimension, LogUniform))


def sampler(name: str, seed: int, *, constant_liar: bool = False) -> optuna.samplers.BaseSampler:
    """TPE (the default), random search, or NSGA-II (for several objectives), seeded.
    ``constant_liar`` (``tune --batch K``): TPE counts the trials still running as the worst
    finished ones, so the K trials asked before any of them finishes spread out instead of
    repeating one proposal (Optuna's ``TPESampler(constant_liar=True)``); random search and
    NSGA-II propose independently of running trials anyway."""
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, constant_liar=constant_liar)


def pruner(prune: bool) -> optuna.pruners.BasePruner:
    """Optuna's ``MedianPruner`` with its defaults when pruning, else none (``NopPruner``): after
    each epoch a trial stops if its best validation accuracy so far is below the median of the
    complete trials' accuracies at that epoch; nothing is pruned before 5 trials have completed
    (``n_startup_trials``), and every epoch may be checked (``n_warmup_steps = 0``,
    ``interval_steps = 1``). One rule for every method: the trials of a cell compared at an epoch
    all follow the same schedule."""
    if not prune:
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=0, interval_steps=1)


def describe_pruner(chosen: optuna.pruners.BasePruner) -> str:
    """The class and its settings, e.g. ``MedianPruner(interval_steps=1, n_min_trials=1,
    n_startup_trials=5, n_warmup_steps=0, percentile=50.0)``."""
    settings = ", ".join(f"{name.lstrip('_')}={value}" for name, value in sorted(vars(chosen).items())
                         if isinstance(value, int | float | bool) and not name.startswith("__"))
    return f"{type(chosen).__name__}({settings})"


def journal_storage(directory: Path) -> JournalStorage:
    """The study's journal file ``directory/journal.log`` with its open(2) lock."""
    path = str(directory / JOURNAL_FILE)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return JournalStorage(JournalFileBackend(path, lock_obj=JournalFileOpenLock(path)))


def readable_journal(directory: Path) -> JournalStorage:
    """:func:`journal_storage`, with a journal Optuna cannot replay or append to one error naming
    it and the fix: a last line without its newline (a write killed midway; checked under the
    journal's own lock, so never a write in progress), or lines that are not JSON."""
    path = directory / JOURNAL_FILE

    def refused(why: str) -> ProtobenchError:
        return ProtobenchError(f"{path} cannot be replayed ({why}): a write to it was cut short or it was altered; "
                               f"remove its last, partial line, or delete {directory} to start the study over")

    if path.is_file():
        lock = JournalFileOpenLock(str(path))
        lock.acquire()
        try:
            with path.open("rb") as handle:
                size = handle.seek(0, os.SEEK_END)
                handle.seek(max(0, size - 1))
                partial = size > 0 and handle.read(1) != b"\n"
        finally:
            lock.release()
        if partial:
            raise refused("its last line has no newline")
    try:
        return journal_storage(directory)
    except (ValueError, UnicodeDecodeError) as err:  # json.JSONDecodeError is a ValueError
        raise refused(f"{type(err).__name__}: {err}") from None


def open_study(directory: Path, cell: Cell) -> optuna.Study:
    """The cell's study, created on first use (by whichever worker comes first); loading an
    existing one writes nothing to its journal. A study created with the other pruning setting is
    refused: its trials would not share one budget rule."""
    directory.mkdir(parents=True, exist_ok=True)
    chosen = sampler(cell.config.sampler, cell.config.seed)
    chosen_pruner = pruner(cell.config.prune)
    try:
        storage = readable_journal(directory)
        study = optuna.load_study(study_name=cell.study_name, storage=storage, sampler=chosen, pruner=chosen_pruner)
    except KeyError:
        with study_lock(directory):
            study = optuna.create_study(study_name=cell.study_name, storage=storage, load_if_exists=True,
                                        directions=["maximize"] * len(cell.config.objectives), sampler=chosen,
                                        pruner=chosen_pruner)
            if "prune" not in study.user_attrs:  # what summary.json states
                study.set_user_attr("prune", cell.config.prune)
                study.set_user_attr("pruner", describe_pruner(chosen_pruner))
    check_pruning_matches(study, cell, directory)
    return study


def check_existing_studies(tuning_root: Path, cells: list[Cell]) -> None:
    """:func:`check_pruning_matches` for every cell whose study exists already (nothing is created)."""
    for cell in cells:
        directory = study_dir(tuning_root, cell)
        if (directory / JOURNAL_FILE).is_file():
            try:
                study = optuna.load_study(study_name=cell.study_name, storage=readable_journal(directory))
            except KeyError:
                continue
            check_pruning_matches(study, cell, directory)


def check_pruning_matches(study: optuna.Study, cell: Cell, directory: Path) -> None:
    """One error when the study was created with the other pruning setting (a study that
    recorded none was created without pruning)."""
    was = bool(study.user_attrs.get("prune", False))
    if was != cell.config.prune:
        raise ProtobenchError(
            f"tuning cell {cell.label}: its study ({directory}) was created with pruning "
            f"{'on' if was else 'off'}, and this tune has it {'on' if cell.config.prune else 'off'}; tune it "
            f"{'with' if was else 'without'} --prune (or [tuning] prune = {str(was).lower()}), or delete "
            f"{directory} to start the study again")


@contextmanager
def study_lock(directory: Path) -> Iterator[None]:
    """Exclusive for counting trials and asking one (so no two workers overshoot N); flock on NFS
    v4 is a lease the server frees when a client dies."""
    lock = directory / ".lock"
    try:
        handle = lock.open("a")
    except OSError as err:  # a folder or an unwritable file where the lock belongs
        raise ProtobenchError(f"{lock} cannot be opened as the study's lock file ({err.strerror or err}); remove it "
                              "(tune creates it again) and tune again") from None
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def filesystem_now(directory: Path) -> float:
    """The shared filesystem's clock (a file touched now), so heartbeats compare one clock."""
    probe = directory / "heartbeats" / ".now"
    probe.parent.mkdir(parents=True, exist_ok=True)
    probe.touch()
    return probe.stat().st_mtime


class Heartbeat:
    """Touches ``heartbeats/NUMBER`` every ``interval_s`` in a daemon thread while a trial runs."""

    def __init__(self, directory: Path, number: int, interval_s: float) -> None:
        self.path = directory / "heartbeats" / str(number)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, args=(interval_s,), daemon=True)
        self._thread.start()

    def _beat(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            self.path.touch()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.path.unlink(missing_ok=True)


def fail_stale_trials(study: optuna.Study, directory: Path, grace_s: float) -> list[int]:
    """Mark FAIL every running trial whose heartbeat is older than ``grace_s`` (or missing: its
    worker died before the first beat); the numbers failed."""
    now = filesystem_now(directory)
    failed = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        beat = directory / "heartbeats" / str(trial.number)
        age = now - beat.stat().st_mtime if beat.exists() else float("inf")
        if age > grace_s:
            storage = study._storage  # noqa: SLF001 - the storage API Optuna's own fail_stale_trials uses
            storage.set_trial_system_attr(trial._trial_id, "fail_reason",  # before FAIL: a finished trial is frozen
                                          f"worker stopped beating ({age:.0f} s > {grace_s:.0f} s)")
            storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
            beat.unlink(missing_ok=True)
            failed.append(trial.number)
    return failed


def counts(study: optuna.Study) -> dict[str, int]:
    """Trials by state name (COMPLETE, RUNNING, WAITING, FAIL, PRUNED)."""
    out: dict[str, int] = {}
    for trial in study.get_trials(deepcopy=False):
        out[trial.state.name] = out.get(trial.state.name, 0) + 1
    return out


def finished(state: dict[str, int]) -> int:
    """The trials that count towards the budget N: complete and pruned (a failed one does not)."""
    return state.get("COMPLETE", 0) + state.get("PRUNED", 0)


def _trial_record(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    return {"number": trial.number, "state": trial.state.name, "params": trial.params,
            "values": trial.values, "run_id": trial.user_attrs.get("run_id"),
            "validation_acc_per_epoch": {str(step): value for step, value in sorted(trial.intermediate_values.items())},
            "seconds": trial.user_attrs.get("seconds"), "defaults": bool(trial.user_attrs.get("defaults")),
            "retry_of": trial.user_attrs.get("retry_of"),
            "fail_reason": trial.system_attrs.get("fail_reason") or trial.user_attrs.get("fail_reason")}


def _cross_referenced(record: dict[str, Any], trials: list[optuna.trial.FrozenTrial]) -> dict[str, Any]:
    """A trial's record with ``retried_as``: the trial that asked its values again (the defaults
    retried after a kill or crash, which is the same run, one run id), else None."""
    retries = [t.number for t in trials if t.user_attrs.get("retry_of") == record["number"]]
    return {**record, "retried_as": retries[0] if retries else None}


def best_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    """The complete trial with the best first objective (on the Pareto front when there are several;
    ties: the earliest, so trial 0, the defaults, wins a tie)."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    pool = study.best_trials if len(study.directions) > 1 and complete else complete
    return max(pool, key=lambda t: (t.values[0], -t.number)) if pool else None


def summary(study: optuna.Study, cell: Cell, target: int) -> dict[str, Any]:
    """What ``summary.json`` holds: the cell, the budget (trials, epochs), the space, the default
    and best trials and every trial."""
    trials = study.get_trials(deepcopy=False)
    tried = [t for t in trials if t.user_attrs.get("defaults")]  # trial 0, and its retries if it was lost
    default = next((t for t in tried if t.state == TrialState.COMPLETE), tried[-1] if tried else None)
    best = best_trial(study)
    b = cell.base
    state = counts(study)
    epochs = cell.epoch_budget
    trained = sum(epochs if t.state == TrialState.COMPLETE else max(t.intermediate_values, default=0)
                  for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED))
    return {
        "study": cell.study_name,
        "cell": {"dataset": b.dataset, "backbone": b.backbone, "method": b.method, "J": b.prototypes_per_class,
                 "variant": b.variant, "trial_seed": b.seed, "base_run_id": b.run_id},
        "budget": {"trials": target, "epochs_per_trial": epochs,
                   "note": "every method of the grid gets the same number of trials; each trial trains the "
                           "method's own schedule, as its default run does"
                           + ("; a pruned trial stops earlier and counts towards the trials" if cell.config.prune
                              else "")},
        "pruning": {"on": cell.config.prune,
                    "pruner": study.user_attrs.get("pruner") or describe_pruner(pruner(cell.config.prune)),
                    "pruned": state.get("PRUNED", 0), "epochs_trained": trained,
                    "rule": "trials = complete + pruned; the defaults (trial 0) and a trial's last epoch are "
                            "never pruned" if cell.config.prune else "off: every trial trains every epoch"},
        "sampler": cell.config.sampler, "objectives": list(cell.config.objectives), "sampler_seed": cell.config.seed,
        "validation": {"fraction": b.validation_fraction, "seed": b.validation_seed},
        "space": space_to_json(cell.space), "space_fingerprint": cell.space_fingerprint,
        "tuned_over_nothing": not cell.space,
        "held_by_variant": {name: b.method_args[name] for name in cell.held},
        "counts": state,
        "complete": state.get("COMPLETE", 0),
        "finished": finished(state),
        "default": _trial_record(default) if default else None,
        "best": _trial_record(best) if best else None,
        "trials": [_cross_referenced(_trial_record(t), trials) for t in trials],
    }


def write_summary(directory: Path, record: dict[str, Any]) -> None:
    temp = directory / f"{SUMMARY_FILE}.{os.getpid()}.tmp"
    temp.write_text(json.dumps(record, indent=1, default=str) + "\n")
    temp.replace(directory / SUMMARY_FILE)
