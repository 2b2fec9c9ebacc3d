"""K trials of one tuning cell trained together (``tune --batch K``): each an ordinary trial run
with its own run directory, ``spec.json``, ``train.log``, ``metrics.jsonl``, ``result.json`` (or
``pruned.json``, ``failure.json``) and provenance, trained in lockstep over shared token batches
(:mod:`benchmark.run.lockstep`) and then evaluated one by one as a run trained alone is
(:func:`benchmark.run.runner.finish_run`).

A trial whose run is already complete is read back; one with a checkpoint (the defaults asked
again after their worker was killed) resumes alone, as ``execute_run`` resumes it. The step is
vectorised (``torch.func.vmap``) where the method declares it can be (``batches_trials``) and the
device is a GPU (``step = "auto"``), or as asked (``"vectorised"``, ``"per-member"``): on the CPU
the per-member step was faster (docs/guides/tuning.md, its item on batched trials).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.config import RunSpec
from benchmark.method_lookup import declaration
from benchmark.progress import NO_PROGRESS
from benchmark.run.epoch_score import EpochScoreHook, Pruned
from benchmark.run.lockstep import Member, train_lockstep
from benchmark.run.prepare import Loaded, Prepared, prepare
from benchmark.run.runner import (epoch_recorder, execute_run, finish_run, open_run_dir, record_failure,
                                  record_pruned)
from benchmark.run.run_data import RunData, run_data
from benchmark.run.store import RunDir, run_lock
from benchmark.run.training import _rng_state, _set_rng_state, deterministic_algorithms
from methods.common.precision import matmul_precision


@dataclass
class _Trial:
    spec: RunSpec
    rd: RunDir
    hook: EpochScoreHook | None
    say: Callable[[str], None]
    prep: Prepared | None = None
    data: RunData | None = None
    member: Member | None = None
    wall: dict[str, float] | None = None
    error: BaseException | None = None  # why it failed before training


def vectorise(step: str, batches_trials: bool, device_type: str) -> bool:
    """Whether the lockstep's training step is vectorised: ``auto`` on a GPU for a method that
    declares it can be; ``vectorised`` where it can be; never with ``per-member``."""
    if step == "per-member" or not batches_trials:
        return False
    return step == "vectorised" or device_type == "cuda"


def run_batch(specs: list[RunSpec], run_dirs: list[Path], *, cache_root: Path | None, loaded: Loaded | None,
              hooks: list[EpochScoreHook | None], step: str = "auto") -> list[dict[str, Any] | BaseException]:
    """Train and evaluate the trials ``specs`` (one method, one cell, different ``method_args``)
    together; per trial its result, or the exception that ended it (:class:`Pruned`, a failure)."""
    outcomes: list[dict[str, Any] | BaseException | None] = [None] * len(specs)
    fresh: list[int] = []
    for k, (spec, run_dir) in enumerate(zip(specs, run_dirs)):
        rd = RunDir(run_dir)
        done = rd.result()
        if done is not None:
            outcomes[k] = done
        elif rd.checkpoint_path.exists() or spec.run_id in (specs[j].run_id for j in fresh):
            pass  # resumed alone, or the same values twice: the second reads the first's result
        else:
            fresh.append(k)
    with ExitStack() as stack:
        trials, opened = [], []
        for k in fresh:
            try:
                trials.append(_open(stack, specs[k], RunDir(run_dirs[k]), hooks[k]))
                opened.append(k)
            except Exception as err:  # noqa: BLE001 - e.g. RunBusy: another process holds this run
                outcomes[k] = err
        for k, outcome in zip(opened, _train_together(trials, cache_root, loaded, step)):
            outcomes[k] = outcome
    for k, outcome in enumerate(outcomes):
        if outcome is None:  # alone: resumes its checkpoint, or reads the result a twin just wrote
            try:
                outcomes[k] = execute_run(specs[k], run_dirs[k], cache_root=cache_root, progress=False,
                                          log=lambda line: None, on_validation_epoch=hooks[k], loaded=loaded)
            except Exception as err:  # noqa: BLE001 - the trial's outcome
                outcomes[k] = err
    return outcomes  # type: ignore[return-value]


def _open(stack: ExitStack, spec: RunSpec, rd: RunDir, hook: EpochScoreHook | None) -> _Trial:
    """The run directory as ``execute_run`` opens it: locked, stale files gone, ``spec.json``
    written, the log appended to."""
    stack.enter_context(run_lock(rd.path))
    open_run_dir(rd, spec)
    logfile = stack.enter_context(rd.log_path.open("a"))

    def say(line: str) -> None:
        logfile.write(line + "\n")
        logfile.flush()

    say(f"run {spec.run_id}: {spec.label} (trained in a batch of trials)")
    return _Trial(spec, rd, hook, say)


def _train_together(trials: list[_Trial], cache_root: Path | None, loaded: Loaded | None,
                    step: str) -> list[dict[str, Any] | BaseException]:
    if not trials:
        return []
    first = trials[0].spec
    with matmul_precision(first.precision), deterministic_algorithms(first.deterministic):
        ready = []
        for trial in trials:
            try:
                _prepare(trial, cache_root, loaded)
                ready.append(trial)
            except Exception as err:  # noqa: BLE001 - this trial fails before training, the others go on
                trial.member, trial.error = None, err
                record_failure(trial.rd, err, trial.say)
        if ready:
            device = ready[0].prep.device  # type: ignore[union-attr]
            train_lockstep([t.member for t in ready], seed=first.seed, batch_size=first.batch_size,  # type: ignore[misc]
                           device=device, precision=first.precision,
                           vectorised=vectorise(step, declaration(first.method).batches_trials, device.type),
                           log=lambda line: [t.say(line) for t in ready])
        return [_finish(trial) for trial in trials]


def _prepare(trial: _Trial, cache_root: Path | None, loaded: Loaded | None) -> None:
    spec, wall = trial.spec, {}
    tic = time.perf_counter()
    trial.prep = prep = prepare(spec, loaded=loaded)
    wall["prepare"] = time.perf_counter() - tic
    tic = time.perf_counter()
    trial.data = data = run_data(prep, cache_root, NO_PROGRESS)
    wall["token_cache"] = time.perf_counter() - tic
    trial.wall = wall
    trial.member = Member(prep.method, data.train, data.clean, log=trial.say,
                          on_epoch_end=epoch_recorder(trial.rd, prep, data, trial.say, trial.hook))


def _finish(trial: _Trial) -> dict[str, Any] | BaseException:
    """The trial's result (evaluated with its own RNG state, as right after its own training), or
    the exception that ended it, recorded as ``execute_run`` records it."""
    member = trial.member
    if member is None:
        assert trial.error is not None
        return trial.error
    rd, say = trial.rd, trial.say
    if isinstance(member.outcome, Pruned):
        record_pruned(rd, member.outcome, say)
        return member.outcome
    if member.outcome is not None:
        record_failure(rd, member.outcome, say)
        return member.outcome
    prep, data = trial.prep, trial.data
    assert prep is not None and data is not None and trial.wall is not None
    saved = _rng_state(prep.device)
    _set_rng_state(member.rng, prep.device)
    try:
        return finish_run(trial.spec, rd, prep, data, member.report, trial.wall, say)
    except Exception as err:  # noqa: BLE001 - the trial's outcome
        record_failure(rd, err, say)
        return err
    finally:
        _set_rng_state(saved, prep.device)
