"""The training loop: drives a method's stages over token batches, checkpoints every epoch (or
every ``checkpoint_every`` epochs and at the end of each stage), resumes from the last
checkpoint, fails loudly on a non-finite loss.

One loop (:func:`train_members`) drives one run (:func:`train`) or several runs of one method in
lockstep over shared batches (``tune --batch K``, benchmark/run/lockstep.py): a run trained alone
is a lockstep of one. In lockstep each member's RNG states are swapped in around its own work, so
its draws are its alone, and a member that fails leaves while the others go on.

The loop never waits for the device within an epoch: towards CUDA batches are read ahead on a
thread (benchmark/cache/prefetch.py; on a CPU the thread would compete with the compute for the
same cores and gave no gain in tests/helpers/measure_fast_path.py, so there they are read in
step), loss terms stay on the device and are read once at the end of the epoch, which is where a non-finite term is reported, naming its first step. The steps after
that one have updated the weights with non-finite gradients, so the epoch is discarded: it is
not checkpointed, and the checkpoint of the previous epoch is intact to resume from (lower the
learning rates first).

The batch order of epoch ``e`` is a pure function of (seed, e), and the checkpoint holds the
model, optimiser, scheduler and every RNG state, so an interrupted and resumed run follows
exactly the path of an uninterrupted one.

Checkpoints hold only tensors and plain Python data and are read with torch's weights-only
unpickler, so a crafted ``checkpoint.pt`` cannot run code (:mod:`benchmark.run.checkpoint`). Each
records the code versions that trained it; resuming under another version needs ``allow_code_change``.
"""
from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmark import CUBLAS_WORKSPACE
from benchmark.cache.prefetch import Prefetcher
from benchmark.cache.tokens import TokenSource
from benchmark.errors import ProtobenchError
from benchmark.progress import NO_PROGRESS, NO_TASK, Progress, Task
from benchmark.run.checkpoint import CHECKPOINT_FORMAT, resume_checkpoint, save_checkpoint
from benchmark.run.provenance import code_version
from benchmark.run.schedules import clip_gradients, make_optimizer, make_scheduler
from benchmark.run.steps import (EpochRecord, Member, NonFiniteLossError, StepLosses, TrainingReport,
                                 _rng_state, _set_rng_state, epoch_order, numerical_step, prefetch_depth,
                                 seed_everything, total_loss)
from methods.base import PrototypeMethod, Stage, TokenBatch, set_trainable
from methods.common.precision import autocast

#: the workspaces with which cuBLAS is deterministic (CUDA docs, cuBLAS "Results reproducibility")
DETERMINISTIC_CUBLAS_WORKSPACES = (":4096:8", ":16:8")


@dataclass(frozen=True)
class Pass:
    """What every step of a training pass shares: the device and precision it runs in, and how a
    member's work runs (``isolated``, in lockstep: with the member's own RNG states swapped in,
    an exception kept as its outcome while the others go on; alone: as it is)."""

    device: torch.device
    precision: str
    isolated: bool

    def work(self, member: Member, work: Callable[[], None]) -> None:
        if not self.isolated:
            work()
            return
        _set_rng_state(member.rng, self.device)
        try:
            work()
        except Exception as err:  # noqa: BLE001 - the member leaves the lockstep, the others go on
            member.outcome = err
        finally:
            member.rng = _rng_state(self.device)


#: the batch of each active member for the rows of one step (a run alone reads its source)
Reader = Callable[[torch.Tensor, Sequence[Member]], list[TokenBatch]]
#: one training step of the active members on their batches of global epoch ``epoch``
Stepper = Callable[[list[Member], list[TokenBatch], int, Pass], None]


def active(members: Sequence[Member]) -> list[Member]:
    """The members still training (no outcome yet)."""
    return [m for m in members if m.outcome is None]


def step_scheduler_of(member: Member) -> torch.optim.lr_scheduler.LRScheduler | None:
    """The member's scheduler where its stage steps it once per optimiser step, else None."""
    stage = member.stage
    return member.scheduler if member.scheduler is not None and stage is not None and \
        stage.step_schedule is not None else None


def finish_step(member: Member, terms: dict[str, torch.Tensor]) -> None:
    """After the backward pass: the stage's gradient clipping, the optimiser step, the per-step
    scheduler step and the terms kept for the epoch's means."""
    clip_gradients(member.stage, member.optimizer)  # type: ignore[arg-type]
    member.optimizer.step()  # type: ignore[union-attr]
    step_scheduler = step_scheduler_of(member)
    if step_scheduler is not None:
        step_scheduler.step()
    member.losses.record(terms)  # type: ignore[union-attr]


def after_step(method: PrototypeMethod, batch: TokenBatch, stage: Stage, epoch: int, precision: str,
               device: torch.device) -> None:
    """The method's ``after_step`` hook, without gradients, under the run's precision."""
    with torch.no_grad(), numerical_step(method, stage, epoch, "the after_step hook"), \
            autocast(precision, device):
        method.after_step(batch, stage, epoch)


def member_step(member: Member, batch: TokenBatch, epoch: int, run: Pass) -> None:
    """One member's step on ``batch``: loss, backward and :func:`finish_step` when its stage trains
    (a failed decomposition names the step where the loss first went non-finite, if it did), then
    :func:`after_step`."""
    method, stage, optimizer, losses = member.method, member.stage, member.optimizer, member.losses
    precision, device = run.precision, run.device
    try:
        if optimizer is not None:
            with numerical_step(method, stage, epoch, "the loss terms, backward pass and optimiser step"):  # type: ignore[arg-type]
                with autocast(precision, device):
                    terms = method.loss_terms(batch, stage, epoch)  # type: ignore[arg-type]
                    loss = total_loss(method, terms, stage, epoch)  # type: ignore[arg-type]
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                finish_step(member, terms)
    except NonFiniteLossError as err:  # a decomposition failed: say if the loss had gone non-finite before
        where = losses.first_non_finite()  # type: ignore[union-attr]
        if where is None:
            raise
        raise NonFiniteLossError(f"{err}; the loss was first non-finite earlier: {where}") from err.__cause__
    after_step(method, batch, stage, epoch, precision, device)  # type: ignore[arg-type]


def per_member_steps(members: list[Member], batches: list[TokenBatch], epoch: int, run: Pass) -> None:
    """Each member's :func:`member_step` in turn (a run alone: the only one)."""
    for member, batch in zip(members, batches):
        run.work(member, lambda member=member, batch=batch: member_step(member, batch, epoch, run))


def run_pass(members: Sequence[Member], order: torch.Tensor, *, batch_size: int, epoch: int, run: Pass,
             read: Reader, step: Stepper = per_member_steps, task: Task = NO_TASK,
             prefetch: int | None = None) -> None:
    """One pass over ``order`` for every active member, the batches of each step read once for
    all (``prefetch`` batches ahead: 0, synchronously; None: two towards CUDA, none on a CPU,
    :func:`~benchmark.run.steps.prefetch_depth`); each member's losses kept in ``member.losses``."""
    chunks = [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
    started = active(members)
    for member in started:
        member.method.train()
        member.losses = StepLosses(member.method, member.stage, epoch, len(chunks))  # type: ignore[arg-type]
    depth = 0 if len(chunks) < 2 else prefetch_depth(run.device) if prefetch is None else prefetch
    batches = Prefetcher(lambda rows: read(rows, started), chunks, depth=depth, device=run.device)
    try:
        for batch_of in batches:
            now = [(m, b) for m, b in zip(started, batch_of) if m.outcome is None]
            if now:
                step([m for m, _ in now], [b for _, b in now], epoch, run)
            task.advance()
    finally:
        batches.close()


def run_epoch(method: PrototypeMethod, source: TokenSource, stage: Stage, optimizer: torch.optim.Optimizer | None,
              order: torch.Tensor, *, batch_size: int, device: torch.device, epoch: int,
              task: Task = NO_TASK, precision: str = "fp32", prefetch: int | None = None,
              step_scheduler: torch.optim.lr_scheduler.LRScheduler | None = None) -> dict[str, float]:
    """One epoch of one run outside the loop (``perf``, the epoch timings, the adapters' step
    tests): :func:`run_pass` over ``order``, ``step_scheduler`` stepped after each optimiser step
    where the stage schedules per step, and the epoch mean of each loss term."""
    member = Member(method, source, stage=stage, optimizer=optimizer, scheduler=step_scheduler)
    run_pass([member], order, batch_size=batch_size, epoch=epoch, run=Pass(device, precision, False),
             read=source_reader(device), task=task, prefetch=prefetch)
    return member.losses.epoch_means()  # type: ignore[union-attr]


def source_reader(device: torch.device) -> Reader:
    """Each member reads its own source (a run alone; lockstep members without shared rows)."""
    return lambda rows, members: [m.source.batch(rows, device, reads=m.method.reads) for m in members]


def start_stage(member: Member, stage_index: int, global_epoch: int, first_epoch: int, steps_per_epoch: int,
                run: Pass, resume: dict | None = None) -> None:
    """The member's stage ``stage_index`` from its epoch ``first_epoch``: the stage rebuilt on the
    live module (fresh parameter lists), only its parameters trainable, its optimiser and
    scheduler (their states from ``resume`` when the stage was interrupted), and the method's
    ``on_stage_start`` hook when the stage begins."""
    method = member.method
    stage = method.stages()[stage_index]
    set_trainable(method, stage)
    member.stage, member.optimizer = stage, make_optimizer(stage) if stage.trains else None
    member.scheduler = make_scheduler(stage, member.optimizer, steps_per_epoch)
    if resume is not None and first_epoch > 0:
        if member.optimizer is not None:
            member.optimizer.load_state_dict(resume["optimizer"])
        if member.scheduler is not None:
            member.scheduler.load_state_dict(resume["scheduler"])
    if first_epoch == 0:
        precision, device = run.precision, run.device
        with numerical_step(method, stage, global_epoch, "the on_stage_start hook"), autocast(precision, device):
            method.on_stage_start(stage, global_epoch, member.data)  # type: ignore[arg-type]


def end_epoch(member: Member, global_epoch: int, total_epochs: int, started: float, share: int, run: Pass,
              code: str) -> None:
    """The end of the member's global epoch ``global_epoch``: its loss means (a non-finite term
    raises, naming its first step), its epoch-level scheduler step, the method's ``on_epoch_end``
    hook, its report, log line and record (its ``on_epoch_end`` callback)."""
    method, stage = member.method, member.stage
    assert stage is not None and member.losses is not None
    running = member.losses.epoch_means()
    if member.scheduler is not None and stage.step_schedule is None:
        member.scheduler.step()
    precision, device = run.precision, run.device
    with torch.no_grad(), numerical_step(method, stage, global_epoch, "the on_epoch_end hook"), \
            autocast(precision, device):
        method.on_epoch_end(stage, global_epoch, member.data)  # type: ignore[arg-type]
    elapsed = (time.perf_counter() - started) / share  # each member's share of the epoch
    member.report.epoch_seconds.append(elapsed)
    member.report.stage_seconds[stage.name] = member.report.stage_seconds.get(stage.name, 0.0) + elapsed
    terms_text = " ".join(f"{k}={v:.4f}" for k, v in running.items())
    member.log(f"epoch {global_epoch + 1}/{total_epochs} [{stage.name}] {elapsed:.2f}s {terms_text}".rstrip())
    if member.on_epoch_end is not None:
        member.on_epoch_end(EpochRecord(global_epoch + 1, stage.name, elapsed, member.lrs, running))
    member.report.record_epoch(code, global_epoch + 1)


#: after each epoch of a member: (member, stage index, epoch in stage, global epochs done)
EpochDone = Callable[[Member, int, int, int], None]


def train_members(members: Sequence[Member], *, seed: int, batch_size: int, device: torch.device,
                  precision: str = "fp32", read: Reader | None = None, step: Stepper = per_member_steps,
                  prefetch: int | None = None, progress: Progress = NO_PROGRESS, start: tuple[int, int] = (0, 0),
                  resume: dict | None = None, epoch_done: EpochDone | None = None) -> None:
    """Train every member through the stages of the first member's method (members share one
    schedule), from stage and epoch ``start``: each global epoch's batch order a function of
    (``seed``, epoch), its batches read once for all (``read``; default: each member its own
    source) and stepped by ``step``; after each member's epoch, ``epoch_done``. Several members
    train isolated (:class:`Pass`): a member that fails keeps its exception in ``outcome``; one
    member trains as a run alone, its exception raised."""
    run = Pass(device, precision, isolated=len(members) > 1)
    code = code_version()
    stages = members[0].method.stages()
    start_index, start_epoch = start
    global_epoch = sum(s.epochs for s in stages[:start_index]) + start_epoch
    total_epochs = sum(s.epochs for s in stages)
    n = len(members[0].source)
    steps_per_epoch = math.ceil(n / batch_size)
    read = read or source_reader(device)
    for stage_index in range(start_index, len(stages)):
        stage = stages[stage_index]
        first_epoch = start_epoch if stage_index == start_index else 0
        if stage.epochs == 0 or first_epoch >= stage.epochs:
            continue
        for m in active(members):
            run.work(m, lambda m=m: start_stage(m, stage_index, global_epoch, first_epoch, steps_per_epoch, run,
                                                resume if stage_index == start_index else None))
        for epoch_in_stage in range(first_epoch, stage.epochs):
            started_members = active(members)
            if not started_members:
                return
            tic = time.perf_counter()
            task = progress.task(f"{stage.name} epoch {global_epoch + 1}/{total_epochs}", steps_per_epoch)
            for m in started_members:
                m.lrs = {g["name"]: g["lr"] for g in m.optimizer.param_groups} if m.optimizer is not None else {}
            run_pass(started_members, epoch_order(n, seed, global_epoch), batch_size=batch_size, epoch=global_epoch,
                     run=run, read=read, step=step, task=task, prefetch=prefetch)
            for m in active(members):
                run.work(m, lambda m=m: end_epoch(m, global_epoch, total_epochs, tic, len(started_members), run, code))
            task.done()
            global_epoch += 1
            if epoch_done is not None:
                for m in active(members):
                    run.work(m, lambda m=m: epoch_done(m, stage_index, epoch_in_stage, global_epoch))
    for m in active(members):
        m.method.eval()


@contextmanager
def deterministic_algorithms(enabled: bool) -> Iterator[None]:
    """``torch.use_deterministic_algorithms(True)`` for the run (docs/guides/gpu.md): CUDA ops without a deterministic kernel then raise instead of varying. cuBLAS
    reads ``CUBLAS_WORKSPACE_CONFIG`` once, when it starts: importing ``benchmark`` sets it at
    process start (:data:`benchmark.CUBLAS_WORKSPACE`); a value without a deterministic workspace
    is refused here, before the run computes anything."""
    if not enabled:
        yield
        return
    workspace = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    if workspace not in DETERMINISTIC_CUBLAS_WORKSPACES:
        raise ProtobenchError(
            f"deterministic = true needs CUBLAS_WORKSPACE_CONFIG set to {' or '.join(DETERMINISTIC_CUBLAS_WORKSPACES)} "
            f"before the process starts, but it is {workspace!r}; unset it (protobench sets "
            f"{CUBLAS_WORKSPACE} at start) or set one of those, or run with deterministic = false")
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


def train(
    method: PrototypeMethod,
    source: TokenSource,
    *,
    seed: int,
    batch_size: int,
    device: torch.device,
    checkpoint_path: Path | None,
    log: Callable[[str], None] = print,
    progress: Progress = NO_PROGRESS,
    stop_after_epoch: int | None = None,
    allow_code_change: bool = False,
    precision: str = "fp32",
    checkpoint_every: int = 1,
    prefetch: int | None = None,
    on_epoch_end: Callable[[EpochRecord], None] | None = None,
    clean_source: TokenSource | None = None,
) -> TrainingReport:
    """Run every stage of ``method`` on ``source`` (:func:`train_members` with this run alone);
    resume from ``checkpoint_path`` if it holds a checkpoint (written by this code version, or
    any with ``allow_code_change``). ``stop_after_epoch`` ends training after that global epoch
    (tests, preemption); the checkpoint is written after every ``checkpoint_every``-th global
    epoch and the last epoch of each stage. ``precision``: autocast of steps and hooks
    (methods/common/precision.py); ``prefetch``: batches read ahead (0: synchronously; None:
    :func:`~benchmark.run.steps.prefetch_depth`). ``on_epoch_end`` receives each epoch's record
    before the epoch is checkpointed. ``clean_source``: the un-augmented split the method's hooks
    read when ``source`` holds offline-augmented copies (ProtoPNet main.py pushes on
    ``train_push_loader``); None when ``source`` is the un-augmented split itself."""
    if checkpoint_every < 1:
        raise ProtobenchError(f"checkpoint_every = {checkpoint_every} must be ≥ 1")
    method.to(device)
    stages = method.stages()
    report = TrainingReport()
    start_stage, start_epoch = 0, 0
    resume = resume_checkpoint(checkpoint_path, code=code_version(), allow_code_change=allow_code_change)
    if resume is not None:
        method.load_state_dict(resume["method"])
        method.to(device)
        start_stage, start_epoch = resume["stage_index"], resume["epoch_in_stage"]
        report = TrainingReport(**resume["report"])
        report.resumed_from_epoch = resume["global_epoch"]
        _set_rng_state(resume["rng"], device)
        log(f"resuming at stage {stage_name(stages, start_stage)}, epoch {resume['global_epoch']}")
    else:
        seed_everything(seed)
    member = Member(method, source, clean_source, on_epoch_end, log, report)
    member.data = member.hook_data(device, seed)

    def checkpointed(m: Member, stage_index: int, epoch_in_stage: int, global_epoch: int) -> None:
        last_in_stage = epoch_in_stage + 1 == m.stage.epochs  # type: ignore[union-attr]
        if checkpoint_path is not None and (last_in_stage or global_epoch % checkpoint_every == 0):
            save_checkpoint(checkpoint_path, {
                "format": CHECKPOINT_FORMAT,
                "method": method.state_dict(),
                "optimizer": m.optimizer.state_dict() if m.optimizer and not last_in_stage else None,
                "scheduler": m.scheduler.state_dict() if m.scheduler and not last_in_stage else None,
                "stage_index": stage_index + 1 if last_in_stage else stage_index,
                "epoch_in_stage": 0 if last_in_stage else epoch_in_stage + 1,
                "global_epoch": global_epoch,
                "report": {"stage_seconds": report.stage_seconds, "epoch_seconds": report.epoch_seconds,
                           "resumed_from_epoch": report.resumed_from_epoch,
                           "code_versions": report.code_versions},
                "rng": _rng_state(device),
            })
        if stop_after_epoch is not None and global_epoch >= stop_after_epoch:
            raise TrainingInterrupted(global_epoch)

    train_members([member], seed=seed, batch_size=batch_size, device=device, precision=precision, prefetch=prefetch,
                  progress=progress, start=(start_stage, start_epoch), resume=resume, epoch_done=checkpointed)
    return report


class TrainingInterrupted(Exception):
    """Raised by ``train(stop_after_epoch=…)`` after checkpointing (tests, preemption drills)."""

    def __init__(self, epoch: int) -> None:
        super().__init__(f"training stopped after epoch {epoch}")
        self.epoch = epoch


def stage_name(stages: list[Stage], index: int) -> str:
    return stages[index].name if index < len(stages) else "(done)"

