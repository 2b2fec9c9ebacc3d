"""Several runs of one method that differ only in hyperparameters, trained in lockstep over shared
token batches (``tune --batch K``, docs/guides/tuning.md "Batched trials").

Each member follows exactly the path :func:`benchmark.run.training.train` gives it alone: the same
stages, the same batch order (a pure function of the seed and the epoch, and the members share
the seed), its own optimiser, scheduler, hooks and RNG streams (each member's Python, NumPy and
torch generators are swapped in around its own work, so one member's draws never shift
another's). What the members share is each batch: it is read from the token source once and
handed to every member with that member's own frozen features. The training step is either

- **per member** (``vectorised=False``): each member's loss, backward and step in turn on the
  shared batch, bit-for-bit the computation of a run trained alone; or
- **vectorised** (``vectorised=True``): the members' loss terms in one pass,
  ``torch.func.vmap`` over their parameters and buffers stacked along a new first dimension
  (``torch.func.functional_call``), then one backward of the sum of their losses (each member's
  parameters receive the gradient of its own loss only: the sum separates). Equal to the
  per-member step up to floating-point reassociation of the batched kernels (tests: validation
  accuracy within 1e-5). The hooks (push, EM, momentum updates) stay per member.

A member that fails (non-finite loss, a failed decomposition) or is pruned leaves the lockstep
and the others go on; each member's outcome is its :class:`TrainingReport` or its exception.
Members are not checkpointed during training: a batch killed midway is trained again.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor, nn

from benchmark.cache.frozen import WithFrozenFeatures
from benchmark.cache.tokens import TokenSource
from benchmark.errors import ProtobenchError
from benchmark.run.provenance import code_version
from benchmark.run.schedules import clip_gradients, make_optimizer, make_scheduler
from benchmark.run.training import (EpochRecord, SourceTrainData, StepLosses, TrainingReport, _rng_state,
                                    _set_rng_state, epoch_order, numerical_step, seed_everything, total_loss)
from benchmark.tuning.subset import RowSubset
from methods.base import PrototypeMethod, Stage, TokenBatch, set_trainable
from methods.common.precision import autocast


@dataclass
class Member:
    """One run of the lockstep: its method, its training tokens (``clean``: the un-augmented split
    its hooks read when ``source`` holds augmented copies) and what it is told after each epoch."""

    method: PrototypeMethod
    source: TokenSource
    clean: TokenSource | None = None
    on_epoch_end: Callable[[EpochRecord], None] | None = None
    log: Callable[[str], None] = print  # its own log: one line per epoch
    report: TrainingReport = field(default_factory=TrainingReport)
    outcome: BaseException | None = None  # why it left the lockstep (failure, pruning), None while it trains
    rng: dict[str, Any] = field(default_factory=dict)
    data: SourceTrainData | None = None
    optimizer: torch.optim.Optimizer | None = None
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None
    stage: Stage | None = None


def schedule_signature(method: PrototypeMethod) -> list[tuple[Any, ...]]:
    """What members must share to train in lockstep: per stage its name, epochs, optimiser, the
    names of its parameter groups and whether it steps per epoch or per step."""
    return [(s.name, s.epochs, s.optimizer, tuple(g.name for g in s.param_groups), s.step_schedule is None)
            for s in method.stages()]


def check_lockstep(methods: Sequence[PrototypeMethod]) -> None:
    """Members must be of one class with one schedule (the vectorised step runs the first member's
    code on every member's parameters; members that switch different loss terms on step one by
    one, :func:`_step`)."""
    first = methods[0]
    for other in methods[1:]:
        if type(other) is not type(first) or schedule_signature(other) != schedule_signature(first):
            raise ProtobenchError(f"runs trained in lockstep need one method and one schedule: "
                                  f"{schedule_signature(first)} ≠ {schedule_signature(other)}")


def _layers(source: TokenSource) -> tuple[Tensor, TokenSource, dict[str, Tensor]] | None:
    """(rows, token source, frozen features) of a trial's training source: rows of an entry
    (:class:`RowSubset`), with the method's frozen features on top (:class:`WithFrozenFeatures`)
    or none; None for any other source."""
    if not isinstance(source, RowSubset):
        return None
    base = source.source
    if isinstance(base, WithFrozenFeatures):
        return source.rows, base.source, base.features
    return source.rows, base, {}


class SharedReads:
    """Each batch read once for every member: when every member's source is the same rows of the
    same token source, each with its own frozen features (or none), the rows are read once and
    each member gets its features; otherwise each member reads its own (the same values, K reads)."""

    def __init__(self, sources: Sequence[TokenSource]) -> None:
        self.sources = list(sources)
        self.shared: RowSubset | None = None
        self.features: list[dict[str, Tensor]] = []
        layers = [_layers(s) for s in self.sources]
        if all(layer is not None for layer in layers):
            rows, raw, _ = layers[0]  # type: ignore[misc]
            if all(layer[1] is raw and torch.equal(layer[0], rows) for layer in layers):  # type: ignore[index]
                self.shared = RowSubset(raw, rows.numpy())
                self.features = [layer[2] for layer in layers]  # type: ignore[index]

    def batches(self, indices: Tensor, device: torch.device, reads: frozenset[str],
                members: Sequence[int]) -> dict[int, TokenBatch]:
        """The batch at ``indices`` for each of the members numbered ``members``."""
        if self.shared is None:
            return {k: self.sources[k].batch(indices, device, reads=reads) for k in members}
        batch = self.shared.batch(indices, device, reads=reads)
        rows = self.shared.rows[indices.detach().cpu()]
        return {k: replace(batch, frozen={name: values[rows.to(values.device)].to(device)
                                          for name, values in self.features[k].items()}) for k in members}


class _StepOf(nn.Module):
    """``method.loss_terms`` as a module call, for ``torch.func.functional_call``."""

    def __init__(self, method: PrototypeMethod) -> None:
        super().__init__()
        self.method = method

    def forward(self, batch: TokenBatch, stage: Stage, epoch: int) -> dict[str, Tensor]:
        return self.method.loss_terms(batch, stage, epoch)


def vectorised_terms(members: Sequence[Member], batches: Sequence[TokenBatch], stage: Stage,
                     epoch: int) -> list[dict[str, Tensor]]:
    """Every member's loss terms in one pass: ``vmap`` of the first member's ``loss_terms`` over
    the members' parameters and buffers stacked on a new first dimension (``torch.stack`` keeps
    each member's own parameters in the graph) and over their frozen features; the shared arrays
    of the batch are read once. Buffers a step updates in place (running tallies) are copied back
    to each member afterwards."""
    from torch.func import functional_call, vmap

    template = _StepOf(members[0].method)
    names = [name for name, _ in template.named_parameters()]
    buffer_names = [name for name, _ in template.named_buffers()]
    owned = [dict(_StepOf(m.method).named_parameters()) for m in members]
    own_buffers = [dict(_StepOf(m.method).named_buffers()) for m in members]
    params = {name: torch.stack([p[name] for p in owned]) for name in names}
    buffers = {name: torch.stack([b[name] for b in own_buffers]) for name in buffer_names}
    frozen = {name: torch.stack([b.frozen[name] for b in batches]) for name in batches[0].frozen}
    shared = replace(batches[0], frozen={})

    def one(p: dict[str, Tensor], b: dict[str, Tensor], f: dict[str, Tensor]) -> dict[str, Tensor]:
        return functional_call(template, (p, b), (replace(shared, frozen=f), stage, epoch))

    terms = vmap(one, randomness="error")(params, buffers, frozen)
    with torch.no_grad():
        for k, mine in enumerate(own_buffers):
            for name in buffer_names:
                if not torch.equal(mine[name], buffers[name][k]):
                    mine[name].copy_(buffers[name][k])
    return [{name: value[k] for name, value in terms.items()} for k in range(len(members))]


def train_lockstep(members: Sequence[Member], *, seed: int, batch_size: int, device: torch.device,
                   precision: str = "fp32", vectorised: bool = False, log: Callable[[str], None] = print) -> None:
    """Train every member as :func:`benchmark.run.training.train` trains one run (no resume, no
    checkpoints), sharing each batch; a member that fails or is pruned (its ``on_epoch_end``
    raised :class:`benchmark.run.epoch_score.Pruned`) gets its exception in ``outcome`` and the
    others go on. Each member's ``log`` gets its epochs; ``log`` what concerns them all."""
    check_lockstep([m.method for m in members])
    code = code_version()
    for m in members:
        m.method.to(device)
        m.data = SourceTrainData(m.source, device, seed, reads=m.method.reads) if m.clean is None else \
            SourceTrainData(m.clean, device, seed, epoch_source=m.source, reads=m.method.reads)
        seed_everything(seed)
        m.rng = _rng_state(device)
    reads = frozenset().union(*(m.method.reads for m in members))
    shared = SharedReads([m.source for m in members])
    n = len(members[0].source)
    stages = members[0].method.stages()
    total_epochs = sum(s.epochs for s in stages)
    global_epoch = 0
    for stage_index, first_stage in enumerate(stages):
        if first_stage.epochs == 0:
            continue
        for m in _active(members):
            _turn(m, device, lambda m=m: _start_stage(m, stage_index, global_epoch, batch_size, n, precision, device))
        for _ in range(first_stage.epochs):
            tic = time.perf_counter()
            active = _active(members)
            if not active:
                return
            losses = {id(m): StepLosses(m.method, m.stage, global_epoch, math.ceil(n / batch_size))  # type: ignore[arg-type]
                      for m in active}
            lrs = {id(m): {g["name"]: g["lr"] for g in m.optimizer.param_groups} if m.optimizer else {} for m in active}
            for m in active:
                m.method.train()
            order = epoch_order(n, seed, global_epoch)
            for start in range(0, n, batch_size):
                active = _active(members)
                batches = shared.batches(order[start:start + batch_size], device, reads,
                                         [members.index(m) for m in active])
                vectorised = _step(active, [batches[members.index(m)] for m in active], losses, global_epoch,
                                   precision, device, vectorised, log)
            elapsed = (time.perf_counter() - tic) / max(len(active), 1)  # each member's share of the epoch
            for m in _active(members):
                _turn(m, device, lambda m=m: _end_epoch(m, losses[id(m)], lrs[id(m)], global_epoch, total_epochs,
                                                         elapsed, precision, device, code))
            global_epoch += 1
    for m in _active(members):
        m.method.eval()


def _active(members: Sequence[Member]) -> list[Member]:
    return [m for m in members if m.outcome is None]


def _turn(member: Member, device: torch.device, work: Callable[[], None]) -> None:
    """Run ``work`` with the member's RNG state in place (and keep what it leaves); an exception
    ends the member's training (``outcome``)."""
    _set_rng_state(member.rng, device)
    try:
        work()
    except Exception as err:  # noqa: BLE001 - the member leaves the lockstep, the others go on
        member.outcome = err
    finally:
        member.rng = _rng_state(device)


def _start_stage(m: Member, stage_index: int, epoch: int, batch_size: int, n: int, precision: str,
                 device: torch.device) -> None:
    stage = m.method.stages()[stage_index]  # rebuilt on the live module (fresh param lists)
    set_trainable(m.method, stage)
    m.stage = stage
    m.optimizer = make_optimizer(stage) if stage.trains else None
    m.scheduler = make_scheduler(stage, m.optimizer, math.ceil(n / batch_size))
    with numerical_step(m.method, stage, epoch, "the on_stage_start hook"), autocast(precision, device):
        m.method.on_stage_start(stage, epoch, m.data)  # type: ignore[arg-type]


def _step(active: list[Member], batches: list[TokenBatch], losses: dict[int, StepLosses], epoch: int,
          precision: str, device: torch.device, vectorised: bool, log: Callable[[str], None]) -> bool:
    """One batch for every active member: loss, backward, clipping, optimiser and per-step
    scheduler step (when the stage trains), then ``after_step``. A vectorised step that raises
    (an op without a batching rule, a value read from the device, a failed decomposition of one
    member) is taken again per member, and so are the later ones: whether to go on vectorising."""
    stage = active[0].stage
    assert stage is not None
    if stage.trains:
        stepped = False
        if vectorised and len(active) > 1 and len({_terms_used(m.method) for m in active}) > 1:
            # the vectorised step runs the first member's code: its `uses` would decide every member's terms
            log("the trials switch different loss terms on (a weight of 0); stepping each trial on its own")
            vectorised = False
        if vectorised and len(active) > 1:
            try:
                with autocast(precision, device):
                    all_terms = vectorised_terms(active, batches, stage, epoch)
                    totals = [total_loss(m.method, t, m.stage, epoch) for m, t in zip(active, all_terms)]  # type: ignore[arg-type]
                for m in active:
                    m.optimizer.zero_grad(set_to_none=True)  # type: ignore[union-attr]
                torch.stack([t.float() for t in totals]).sum().backward()
                stepped = True
            except Exception as err:  # noqa: BLE001 - no parameter has changed yet: step per member instead
                log(f"the vectorised step failed ({type(err).__name__}: {err}); stepping each trial on its own")
                vectorised = False
            if stepped:
                for m, terms in zip(active, all_terms):
                    _turn(m, device, lambda m=m, terms=terms: _optimiser_step(m, terms, losses[id(m)]))
        if not stepped:
            for m, batch in zip(active, batches):
                _turn(m, device, lambda m=m, batch=batch: _whole_step(m, batch, losses[id(m)], epoch, precision, device))
    for m, batch in zip(active, batches):
        if m.outcome is None:
            _turn(m, device, lambda m=m, batch=batch: _after_step(m, batch, epoch, precision, device))
    return vectorised


def _terms_used(method: PrototypeMethod) -> frozenset[str]:
    """The loss terms ``method`` computes (``uses``: a non-zero weight)."""
    return frozenset(term for term in method.loss_weights if method.uses(term))


def _whole_step(m: Member, batch: TokenBatch, losses: StepLosses, epoch: int, precision: str,
                device: torch.device) -> None:
    """The step of :func:`benchmark.run.training.run_epoch` for one member."""
    with numerical_step(m.method, m.stage, epoch, "the loss terms, backward pass and optimiser step"):  # type: ignore[arg-type]
        with autocast(precision, device):
            terms = m.method.loss_terms(batch, m.stage, epoch)  # type: ignore[arg-type]
            loss = total_loss(m.method, terms, m.stage, epoch)  # type: ignore[arg-type]
        m.optimizer.zero_grad(set_to_none=True)  # type: ignore[union-attr]
        loss.backward()
        _optimiser_step(m, terms, losses)


def _optimiser_step(m: Member, terms: dict[str, Tensor], losses: StepLosses) -> None:
    clip_gradients(m.stage, m.optimizer)  # type: ignore[arg-type]
    m.optimizer.step()  # type: ignore[union-attr]
    if m.scheduler is not None and m.stage.step_schedule is not None:  # type: ignore[union-attr]
        m.scheduler.step()
    losses.record(terms)


def _after_step(m: Member, batch: TokenBatch, epoch: int, precision: str, device: torch.device) -> None:
    with torch.no_grad(), numerical_step(m.method, m.stage, epoch, "the after_step hook"), \
            autocast(precision, device):  # type: ignore[arg-type]
        m.method.after_step(batch, m.stage, epoch)  # type: ignore[arg-type]


def _end_epoch(m: Member, losses: StepLosses, lrs: dict[str, float], epoch: int, total_epochs: int,
               elapsed: float, precision: str, device: torch.device, code: str) -> None:
    """The epoch's end for one member, in :func:`benchmark.run.training.train`'s order: its
    epoch-level scheduler step, ``on_epoch_end`` hook, loss means, record and callback."""
    stage = m.stage
    assert stage is not None
    running = losses.epoch_means()  # a non-finite term raises: the member fails
    if m.scheduler is not None and stage.step_schedule is None:
        m.scheduler.step()
    with torch.no_grad(), numerical_step(m.method, stage, epoch, "the on_epoch_end hook"), \
            autocast(precision, device):
        m.method.on_epoch_end(stage, epoch, m.data)  # type: ignore[arg-type]
    m.report.epoch_seconds.append(elapsed)
    m.report.stage_seconds[stage.name] = m.report.stage_seconds.get(stage.name, 0.0) + elapsed
    terms_text = " ".join(f"{k}={v:.4f}" for k, v in running.items())
    m.log(f"epoch {epoch + 1}/{total_epochs} [{stage.name}] {elapsed:.2f}s {terms_text}".rstrip())
    m.report.record_epoch(code, epoch + 1)
    if m.on_epoch_end is not None:
        m.on_epoch_end(EpochRecord(epoch + 1, stage.name, elapsed, lrs, running))
