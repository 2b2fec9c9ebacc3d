"""Several runs of one method that differ only in hyperparameters, trained in lockstep over shared
token batches (``tune --batch K``, docs/guides/tuning.md "Batched trials"), by the one training
loop (:func:`benchmark.run.training.train_members`); what is the lockstep's own lives here: the
rows each batch reads once for every member, and the vectorised step.

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

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor, nn

from benchmark.cache.frozen import WithFrozenFeatures
from benchmark.cache.tokens import TokenSource
from benchmark.errors import ProtobenchError
from benchmark.run.steps import Member, _rng_state, seed_everything
from benchmark.run.training import (Pass, Reader, after_step, finish_step, per_member_steps,
                                    total_loss, train_members)
from benchmark.tuning.subset import RowSubset
from methods.base import PrototypeMethod, Stage, TokenBatch
from methods.common.precision import autocast

__all__ = ["Member", "SharedReads", "check_lockstep", "train_lockstep", "vectorised_terms"]


def schedule_signature(method: PrototypeMethod) -> list[tuple[Any, ...]]:
    """What members must share to train in lockstep: per stage its name, epochs, optimiser, the
    names of its parameter groups and whether it steps per epoch or per step."""
    return [(s.name, s.epochs, s.optimizer, tuple(g.name for g in s.param_groups), s.step_schedule is None)
            for s in method.stages()]


def check_lockstep(methods: Sequence[PrototypeMethod]) -> None:
    """Members must be of one class with one schedule (the vectorised step runs the first member's
    code on every member's parameters; members that switch different loss terms on step one by
    one, :func:`vectorised_steps`)."""
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


def _terms_used(method: PrototypeMethod) -> frozenset[str]:
    """The loss terms ``method`` computes (``uses``: a non-zero weight)."""
    return frozenset(term for term in method.loss_weights if method.uses(term))


def vectorised_steps(log: Callable[[str], None]) -> Callable[[list[Member], list[TokenBatch], int, Pass], None]:
    """The vectorised step (:func:`vectorised_terms`), one pass for every member, then each member's
    :func:`~benchmark.run.training.finish_step` and ``after_step``. Members that switch different
    loss terms on, or a pass that raises (an op without a batching rule, a value read from the
    device, a failed decomposition of one member), step per member instead, and so do the later
    steps: whether to go on vectorising."""
    state = {"vectorised": True}

    def step(members: list[Member], batches: list[TokenBatch], epoch: int, run: Pass) -> None:
        stage = members[0].stage
        assert stage is not None
        if state["vectorised"] and stage.trains and len(members) > 1 and len({_terms_used(m.method) for m in members}) > 1:
            # the vectorised step runs the first member's code: its `uses` would decide every member's terms
            log("the trials switch different loss terms on (a weight of 0); stepping each trial on its own")
            state["vectorised"] = False
        if not (state["vectorised"] and stage.trains and len(members) > 1):
            per_member_steps(members, batches, epoch, run)
            return
        try:
            with autocast(run.precision, run.device):
                all_terms = vectorised_terms(members, batches, stage, epoch)
                totals = [total_loss(m.method, t, m.stage, epoch) for m, t in zip(members, all_terms)]  # type: ignore[arg-type]
            for m in members:
                m.optimizer.zero_grad(set_to_none=True)  # type: ignore[union-attr]
            torch.stack([t.float() for t in totals]).sum().backward()
        except Exception as err:  # noqa: BLE001 - no parameter has changed yet: step per member instead
            log(f"the vectorised step failed ({type(err).__name__}: {err}); stepping each trial on its own")
            state["vectorised"] = False
            per_member_steps(members, batches, epoch, run)
            return
        for m, terms, batch in zip(members, all_terms, batches):
            run.work(m, lambda m=m, terms=terms, batch=batch: (
                finish_step(m, terms), after_step(m.method, batch, m.stage, epoch, run.precision, run.device)))  # type: ignore[arg-type]

    return step


def shared_reader(shared: SharedReads, device: torch.device, members: Sequence[Member]) -> Reader:
    """Each step's batch of the active members, the shared rows read once (:class:`SharedReads`)."""
    reads = frozenset().union(*(m.method.reads for m in members))
    index = {id(m): k for k, m in enumerate(members)}

    def read(rows: Tensor, active: Sequence[Member]) -> list[TokenBatch]:
        batches = shared.batches(rows, device, reads, [index[id(m)] for m in active])
        return [batches[index[id(m)]] for m in active]

    return read


def train_lockstep(members: Sequence[Member], *, seed: int, batch_size: int, device: torch.device,
                   precision: str = "fp32", vectorised: bool = False, log: Callable[[str], None] = print) -> None:
    """Train every member as :func:`benchmark.run.training.train` trains one run (no resume, no
    checkpoints), sharing each batch; a member that fails or is pruned (its ``on_epoch_end``
    raised :class:`benchmark.run.epoch_score.Pruned`) gets its exception in ``outcome`` and the
    others go on. Each member's ``log`` gets its epochs; ``log`` what concerns them all."""
    check_lockstep([m.method for m in members])
    for m in members:
        m.method.to(device)
        m.data = m.hook_data(device, seed)
        seed_everything(seed)
        m.rng = _rng_state(device)
    train_members(members, seed=seed, batch_size=batch_size, device=device, precision=precision,
                  read=shared_reader(SharedReads([m.source for m in members]), device, members),
                  step=vectorised_steps(log) if vectorised else per_member_steps)
