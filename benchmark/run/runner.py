"""One run, end to end: data → frozen trunk → token cache → method (prepared by
benchmark/run/prepare.py) → training → evaluation → ``result.json``. A pure function of the
RunSpec (plus the cache), so any executor can call it and re-running a finished run is a no-op."""
from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmark.cache.noise import STABILITY_NOISE_SEED
from benchmark.config import RunSpec
from benchmark.data import AUGMENTATION_SEED
from benchmark.errors import ProtobenchError
from benchmark.method_lookup import resolved_method_args
from benchmark.progress import Progress
from benchmark.run.checkpoint import resume_checkpoint
from benchmark.run.epoch_score import EpochScoreHook, Pruned, validation_accuracy
from benchmark.run.epochlog import EpochLog, TensorBoardLog
from benchmark.run.evaluation import evaluate
from benchmark.run.identity import method_fingerprint, metrics_fingerprint, recorded_behaviour
from benchmark.run.own_code import own_code_paths
from benchmark.run.prepare import Loaded, Prepared, prepare
from benchmark.run.provenance import provenance, providers
from benchmark.run.records import write_records
from benchmark.run.run_data import RunData, run_data
from benchmark.run.steps import SourceTrainData
from benchmark.run.store import RunDir, atomic_write_checked, check_runs_space, json_bytes, run_lock
from benchmark.run.timing import inference_throughput, live_trunk_epoch_seconds
from benchmark.run.training import (EpochRecord, TrainingInterrupted, TrainingReport,
                                    deterministic_algorithms, train)
from methods.common.precision import matmul_precision
from methods.diagnostics import collect_diagnostics
from methods.registry import method_display_name


def execute_run(
    spec: RunSpec,
    run_dir: Path,
    *,
    cache_root: Path | None,
    progress: bool | None = None,
    stop_after_epoch: int | None = None,
    log: Callable[[str], None] | None = None,
    tensorboard_dir: Path | None = None,
    allow_code_change: bool = False,
    lock_wait_s: float = 0.0,
    on_validation_epoch: EpochScoreHook | None = None,
    loaded: Loaded | None = None,
) -> dict[str, Any]:
    """Train and evaluate ``spec`` in ``run_dir``; return the result (read back if already done).
    Every epoch is recorded in ``metrics.jsonl`` and, with ``tensorboard_dir``, as TensorBoard
    scalars there. ``allow_code_change`` resumes a checkpoint that another code version wrote.
    ``on_validation_epoch`` (a tuning trial with pruning only) gets the validation accuracy after
    every epoch and may stop the run by raising :class:`benchmark.run.epoch_score.Pruned`: the run
    then leaves ``pruned.json`` (epoch, score) and no result or checkpoint. ``loaded``: a packed
    tuning worker's trunk, training split and token sources of the run's cell (:class:`Loaded`).

    The attempt holds the run's lock (:func:`benchmark.run.store.run_lock`) from start to end: a run
    another live process holds (still, after ``lock_wait_s``) raises
    :class:`benchmark.run.store.RunBusy` and is left alone.
    A failure writes ``failure.json`` (reason and traceback) and re-raises; the checkpoint is
    kept so a re-run resumes."""
    rd = RunDir(run_dir)
    done = rd.result()
    if done is not None:  # not re-entered, but a killed writer's temporary files go
        rd.remove_abandoned_temp_files()
        return done
    if on_validation_epoch is not None and spec.evaluation_split != "validation":
        raise ProtobenchError(f"run {spec.label}: a per-epoch score hook is for tuning trials only (scored on the "
                              f"validation split); this run is scored on {spec.evaluation_split!r}")
    with run_lock(run_dir, wait_s=lock_wait_s):
        return _locked_run(spec, rd, cache_root, progress, stop_after_epoch, log, allow_code_change, tensorboard_dir,
                           on_validation_epoch, loaded)


def _locked_run(spec: RunSpec, rd: RunDir, cache_root: Path | None, progress: bool | None,
                stop_after_epoch: int | None, log: Callable[[str], None] | None,
                allow_code_change: bool, tensorboard_dir: Path | None,
                on_validation_epoch: EpochScoreHook | None, loaded: Loaded | None) -> dict[str, Any]:
    done = rd.result()  # finished by another process between the first look and the lock
    if done is not None:
        return done
    open_run_dir(rd, spec)
    with rd.log_path.open("a") as logfile, Progress(progress) as bars:
        echo = log or bars.printer()

        def say(line: str) -> None:
            logfile.write(line + "\n")
            logfile.flush()
            echo(line)

        try:
            with matmul_precision(spec.precision), deterministic_algorithms(spec.deterministic):
                return _execute(spec, rd, cache_root, bars, say, stop_after_epoch, allow_code_change,
                                tensorboard_dir, on_validation_epoch, loaded)
        except Pruned as pruned:
            record_pruned(rd, pruned, say)
            raise
        except BaseException as err:
            if not isinstance(err, (KeyboardInterrupt, SystemExit, TrainingInterrupted)):
                record_failure(rd, err, say)
            raise


def open_run_dir(rd: RunDir, spec: RunSpec) -> None:
    """A locked run directory made ready for an attempt: stale temporary files gone, free space
    checked, ``spec.json`` written, an earlier attempt's failure or pruning record removed."""
    rd.remove_stale_temp_files()
    check_runs_space(rd.path)
    atomic_write_checked(rd.spec_path, json_bytes(spec.to_json()))
    rd.failure_path.unlink(missing_ok=True)
    rd.pruned_path.unlink(missing_ok=True)


def record_pruned(rd: RunDir, pruned: Pruned, say: Callable[[str], None]) -> None:
    """A pruned trial: said in the log, its checkpoint removed (never resumed: a later trial with
    these values trains afresh) and ``pruned.json`` (epoch, validation accuracy) written."""
    say(str(pruned))
    rd.checkpoint_path.unlink(missing_ok=True)
    atomic_write_checked(rd.pruned_path, json_bytes({
        "epoch": pruned.epoch, "validation_acc": pruned.score, "time": time.strftime("%Y-%m-%dT%H:%M:%S")}))


def record_failure(rd: RunDir, err: BaseException, say: Callable[[str], None]) -> None:
    """The FAILED line in the log and ``failure.json``; what cannot be written (a full disk) is
    said on stderr with the original error, which the caller then raises unchanged."""
    reason = f"{type(err).__name__}: {err}"
    try:
        say(f"FAILED: {reason}")
    except OSError as log_err:
        print(f"protobench: could not log the failure in {rd.log_path} ({log_err})", file=sys.stderr)
    try:
        atomic_write_checked(rd.failure_path, json_bytes({
            "reason": reason, "traceback": "".join(traceback.format_exception(err)), "time": time.strftime("%Y-%m-%dT%H:%M:%S")}))
    except (OSError, ProtobenchError) as write_err:
        print(f"protobench: could not write {rd.failure_path} ({write_err}); the run failed with {reason}",
              file=sys.stderr)


def _execute(spec: RunSpec, rd: RunDir, cache_root: Path | None, bars: Progress,
             say: Callable[[str], None], stop_after_epoch: int | None, allow_code_change: bool,
             tensorboard_dir: Path | None = None, on_validation_epoch: EpochScoreHook | None = None,
             loaded: Loaded | None = None) -> dict[str, Any]:
    wall: dict[str, float] = {}
    tic = time.perf_counter()
    say(f"run {spec.run_id}: {spec.label}")
    resume_checkpoint(rd.checkpoint_path, allow_code_change=allow_code_change)  # refuse before the token cache
    prep = prepare(spec, loaded=loaded)
    wall["prepare"] = time.perf_counter() - tic

    tic = time.perf_counter()
    data = run_data(prep, cache_root, bars)
    train_src, clean_src = data.train, data.clean
    wall["token_cache"] = time.perf_counter() - tic

    board = TensorBoardLog(tensorboard_dir) if tensorboard_dir is not None else None
    try:
        report = train(prep.method, train_src, seed=spec.seed, batch_size=spec.batch_size, device=prep.device,
                       checkpoint_path=rd.checkpoint_path, log=say, progress=bars,
                       stop_after_epoch=stop_after_epoch, allow_code_change=allow_code_change,
                       on_epoch_end=epoch_recorder(rd, prep, data, say, on_validation_epoch, board),
                       clean_source=clean_src, precision=spec.precision, checkpoint_every=spec.checkpoint_every)
    finally:
        if board is not None:
            board.close()
    return finish_run(spec, rd, prep, data, report, wall, say)


def epoch_recorder(rd: RunDir, prep: Prepared, data: RunData, say: Callable[[str], None],
                   on_validation_epoch: EpochScoreHook | None,
                   board: TensorBoardLog | None = None) -> Callable[[EpochRecord], None]:
    """What a run does after each epoch: append it to ``metrics.jsonl`` (and TensorBoard), and,
    for a pruned tuning trial, score the validation split and hand the score to the hook (which may
    raise :class:`Pruned`; before the epoch's checkpoint: a pruned trial writes none)."""
    spec, epoch_log = prep.spec, EpochLog(rd.metrics_path)

    def record_epoch(record: EpochRecord) -> None:
        epoch_log.append(record)
        if board is not None:
            board.append(record)
        if on_validation_epoch is not None:
            score = validation_accuracy(prep.method, data.evaluation, batch_size=spec.eval_batch_size,
                                        device=prep.device, precision=spec.precision)
            say(f"epoch {record.epoch}: validation acc {score:.2f}")
            on_validation_epoch(record.epoch, score)

    return record_epoch


def finish_run(spec: RunSpec, rd: RunDir, prep: Prepared, data: RunData, report: TrainingReport,
               wall: dict[str, float], say: Callable[[str], None]) -> dict[str, Any]:
    """Evaluate a trained run, collect its diagnostics and timings, and write its records and
    ``result.json`` (last: it marks the run complete); the result. Shared by a run trained alone
    and by the trials of a batch (benchmark/tuning/batched.py)."""
    train_src, clean_src = data.train, data.clean
    wall.update({f"train/{k}": v for k, v in report.stage_seconds.items()})

    tic = time.perf_counter()
    evaluated = evaluate(prep.method, data.evaluation_set, data.evaluation, data.noisy, batch_size=spec.eval_batch_size,
                         device=prep.device, map_pool=spec.map_pool, noise_seed=STABILITY_NOISE_SEED,
                         precision=spec.precision, train=clean_src or train_src, train_dataset=data.train_set,
                         initial=prep.initial_method(), funnybirds=data.funnybirds)
    wall["evaluate"] = time.perf_counter() - tic
    diagnostics = collect_diagnostics(prep.method, {
        "train": SourceTrainData(clean_src or train_src, prep.device, spec.seed),
        spec.evaluation_split: SourceTrainData(data.evaluation, prep.device, spec.seed),
    })
    for warning in diagnostics["warnings"]:
        say(f"diagnostic out of range: {warning}")

    timing: dict[str, Any] = {**report.to_json(), "wall_seconds": wall}
    if spec.measure_inference:
        timing["inference_images_per_second"] = inference_throughput(
            prep.trunk, prep.method, data.evaluation_set, batch_size=spec.eval_batch_size, device=prep.device)
    if spec.measure_live_epoch:
        timing.update(live_trunk_epoch_seconds(  # cache_root None: the trunk runs on every batch
            prep.method, prep.train_source(None), seed=spec.seed, batch_size=spec.batch_size, device=prep.device))
    result = {
        "run_id": spec.run_id,
        "grid": rd.path.parent.name,
        "spec": spec.to_json(),
        "method_display_name": method_display_name(type(prep.method)),  # what reports label it
        # the values the method ran with (defaults included; what the run id hashes), the source
        # digest of its code and that code's behaviour in its probe lock (benchmark/run/identity.py)
        "method_hyperparameters": resolved_method_args(spec.method, spec.method_args),
        "method_fingerprint": method_fingerprint(spec.method),
        "method_behaviour": recorded_behaviour(spec.method, method_fingerprint(spec.method)),
        **providers(spec.method, spec.backbone, spec.dataset),  # the suite or the installed package behind each
        "metrics_fingerprint": metrics_fingerprint(),  # the metric code that scored it
        **evaluated.summary,
        "diagnostics": diagnostics,
        **data.records(),  # a trial: its validation split; a tuned run: the study it came from
        "timing": timing,
        "provenance": {
            **provenance(prep.device),  # code_version: the code that evaluated
            "code_versions": report.code_versions,  # the code that trained, epochs per version
            "weights_checksum": prep.trunk.weights_checksum,
            "precision": spec.precision,  # also in every cache entry's key, with the device type
            "device_type": prep.device.type,
            "deterministic_algorithms": spec.deterministic,
            "dataset_fingerprint": data.fingerprints(),
            "augmentation_seed": AUGMENTATION_SEED,
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
            # where its own adapter or trunk was imported from: the reading commands' PYTHONPATH hint
            "adapter_paths": [str(path) for path in own_code_paths((spec.method, spec.backbone))],
        },
    }
    write_records(rd.path, evaluated.tables)  # before result.json, which marks the run complete
    atomic_write_checked(rd.result_path, json_bytes(result))
    shown = " ".join(f"{k}={v:.1f}" for k, v in evaluated.summary["metrics"].items() if v is not None)
    say(f"done {spec.run_id}: {shown}")
    return result
