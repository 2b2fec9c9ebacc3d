"""The method adapter interface: what every part-prototype method implements.

A method never sees images, only token batches from the frozen trunk (see
``docs/design/architecture.md``, seam 1). It declares its training *stages* (which
parameters train, with which learning rates and scheduler), returns *named* loss terms
(so ablations switch terms off by name), class logits, and activation maps of the
prototypes of a requested class. Non-gradient updates (momentum prototypes, EM, push)
happen in hooks the training loop calls.

Prototypes are class-major: prototype ``j`` belongs to class ``j // J``.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from methods.space import Dimension

SchedulerFactory = Callable[[torch.optim.Optimizer], torch.optim.lr_scheduler.LRScheduler]
#: expected range of a diagnostic: (low, high), inclusive, ``None`` for an open end
DiagnosticRange = tuple[float | None, float | None]


@dataclass(frozen=True)
class MethodContext:
    """What the harness tells a method about the problem and the trunk it sits on."""

    num_classes: int
    prototypes_per_class: int  # J
    embed_dim: int  # D of the trunk's tokens
    grid: tuple[int, int]  # (H, W) token grid; N = H * W
    num_prefix_tokens: int  # CLS (+ registers) in the block input
    depth: int  # number of blocks of the trunk
    # Fresh appended trainable block (docs/protocol/harness.md): B×(P+N)×D block input → B×N×D final-norm
    # tokens; its ``trainable_parameters()`` is what an optimiser group takes (the norm stays frozen).
    make_block: Callable[[], nn.Module]
    seed: int = 0
    # whether the trunk gives a CLS→patch ``attention`` (False: no CLS token, e.g. SigLIP; a
    # method that needs it refuses in its constructor, naming the alternative)
    has_cls_attention: bool = True
    backbone: str = ""  # the trunk's key, for those messages

    @property
    def num_prototypes(self) -> int:
        return self.num_classes * self.prototypes_per_class

    @property
    def early_block_index(self) -> int:
        """Index of the early frozen block whose tokens EvalProtoPNet's SDFA reads (docs/protocol/evalprotopnet.md)."""
        return self.depth // 4


#: the arrays of a TokenBatch a method can read (``PrototypeMethod.reads``); labels, indices, grid always
TOKEN_FIELDS: frozenset[str] = frozenset({"tokens", "block_input", "attention", "early_tokens"})


@dataclass
class TokenBatch:
    """One batch of cached (or live) trunk outputs, on the training device.

    tokens       B×N×D  final-norm patch tokens of the frozen trunk (prefix removed)
    block_input  B×(P+N)×D  pre-norm output of the last frozen block, prefix tokens first
    attention    B×N  last layer's CLS→patch attention, averaged over heads
    early_tokens B×N×D  tokens of block ``early_block_index`` (only when a method asks)
    labels       B  class indices
    indices      B  positions of the images in their split (push records them)
    frozen       the method's ``frozen_features`` of these images, when the harness computed
                 them once per image (empty otherwise: the method computes them itself)

    A source reads only the arrays the method declares in ``PrototypeMethod.reads``; the others
    are None.
    """

    tokens: Tensor
    block_input: Tensor
    attention: Tensor
    labels: Tensor
    indices: Tensor
    grid: tuple[int, int]
    early_tokens: Tensor | None = None
    frozen: dict[str, Tensor] = field(default_factory=dict)

    def __len__(self) -> int:
        return self.labels.shape[0]

    def only(self, reads: frozenset[str]) -> TokenBatch:
        """This batch with the arrays outside ``reads`` (⊆ TOKEN_FIELDS) set to None."""
        return replace(self, **{name: None for name in TOKEN_FIELDS - reads})


@dataclass
class ParamGroup:
    """An optimiser parameter group with a name (for logs and checkpoints)."""

    name: str
    params: list[nn.Parameter]
    lr: float
    weight_decay: float = 0.0


@dataclass(frozen=True)
class WarmupCosine:
    """A learning-rate multiplier of every optimiser *step* (not epoch) of a stage, relative to
    each group's ``lr``: linear from ``start_factor`` to 1 over ``warmup_epochs`` epochs' steps,
    then a half cosine down to ``final_factor`` that ends at ``cosine_end`` of the stage's steps,
    then ``final_factor`` (PAWS' ``WarmupCosineSchedule`` as ComFe uses it; the harness computes
    it in benchmark/run/schedules.py)."""

    warmup_epochs: float
    start_factor: float
    final_factor: float
    cosine_end: float = 0.8


@dataclass
class Stage:
    """A phase of training. ``param_groups`` empty ⇒ no optimiser: the stage only runs hooks
    (e.g. vMFProto's momentum prototype discovery). ``scheduler`` is stepped once per epoch,
    ``step_schedule`` once per optimiser step (at most one of them); ``clip_grad_norm`` clips the
    total 2-norm of the stage's gradients before each step (torch ``clip_grad_norm_``)."""

    name: str
    epochs: int
    param_groups: list[ParamGroup] = field(default_factory=list)
    scheduler: SchedulerFactory | None = None
    optimizer: str = "adam"  # "adam" | "adamw" (decoupled weight decay) | "sgd"
    step_schedule: WarmupCosine | None = None
    clip_grad_norm: float | None = None

    @property
    def trains(self) -> bool:
        return bool(self.param_groups)


class TrainData(ABC):
    """Read access to the un-augmented training split's tokens, for hooks that pass over the data
    (push, EM warm starts, last-layer phases): the official code's ``train_push_loader`` over
    ``train_cropped``. Provided by the harness; batches are on the device; ``batch.indices`` are
    positions in this split."""

    @abstractmethod
    def batches(self, batch_size: int, *, shuffle: bool = False) -> Iterator[TokenBatch]: ...

    @abstractmethod
    def __len__(self) -> int: ...

    @property
    def epoch_data(self) -> TrainData:
        """The images the training epochs read (the official ``train_loader``): the offline-augmented
        copies under ``augmentation = "offline40"``, otherwise this split itself."""
        return self


class PrototypeMethod(nn.Module, ABC):
    """Base class of every method adapter. Constructor: ``(ctx, **hyperparameters)``; every
    hyperparameter is a keyword argument with the paper's default, overridable from a grid's
    ``method_args``.

    Subclasses set ``loss_weights`` (term name → coefficient, sign included) in ``__init__``;
    the training loop minimises ``Σ weight · term`` over the terms ``loss_terms`` returns.
    """

    #: name in the registry (set by ``@register_method``)
    name: str = ""
    #: how reports label the method (e.g. ``"My ProtoNet"``); None: the class name
    display_name: str | None = None
    #: whether the trunk cache must hold the early block's tokens (EvalProtoPNet's SDFA)
    needs_early_tokens: bool = False
    #: the TokenBatch arrays the method reads (⊆ TOKEN_FIELDS); sources skip the others
    reads: frozenset[str] = TOKEN_FIELDS
    #: CUDA ops the method uses that have no deterministic kernel (``deterministic = true`` refuses it)
    cuda_ops_without_deterministic_kernel: tuple[str, ...] = ()
    #: whether each class's training images are clustered into its J prototypes (KMEx): a run
    #: with fewer than J training images in a class is refused before any compute
    clusters_each_class: bool = False
    #: whether the training step of K runs that differ only in hyperparameters can run as one
    #: vectorised pass (``torch.func.vmap`` over their stacked parameters, ``tune --batch K``):
    #: ``loss_terms`` draws no random numbers, reads no value from the device to decide what to do,
    #: and updates buffers only out of place or in place on its own buffers
    batches_trials: bool = False
    #: the tunable hyperparameters and their ranges (methods/space.py), each holding the paper's
    #: default; ``{}``: the method is tuned over nothing (``protobench tune`` says so)
    search_space: ClassVar[dict[str, Dimension]] = {}

    def __init__(self, ctx: MethodContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.loss_weights: dict[str, float] = {}

    # ---- what the harness reads -------------------------------------------------------
    @property
    def num_classes(self) -> int:
        return self.ctx.num_classes

    @property
    def prototypes_per_class(self) -> int:
        return self.ctx.prototypes_per_class

    def uses(self, term: str) -> bool:
        """Whether loss ``term`` contributes (weight non-zero): skip computing it otherwise."""
        return self.loss_weights.get(term, 0.0) != 0.0

    @abstractmethod
    def stages(self) -> list[Stage]:
        """The training schedule, in order. Called once per stage start on the live module."""

    @abstractmethod
    def loss_terms(self, batch: TokenBatch, stage: Stage, epoch: int) -> dict[str, Tensor]:
        """Unweighted scalar loss terms for one training batch (keys ⊆ ``loss_weights``).
        A stage without parameter groups may return ``{}``."""

    @abstractmethod
    def logits(self, batch: TokenBatch) -> Tensor:
        """B×C class logits (the ones accuracy is measured on)."""

    @abstractmethod
    def activation_maps(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """B×J×H×W maps of the J prototypes of ``classes[b]`` on the token grid; higher = more
        similar. The explanation metrics read these."""

    @abstractmethod
    def prototype_contributions(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """B×J: what each of the J prototypes of ``classes[b]`` adds to that class's logit (the
        "why" panels of the figures). Exact where the logit is a sum over prototypes."""

    def logits_without(self, batch: TokenBatch, classes: Tensor, off: Tensor) -> Tensor:
        """B×C logits with the prototypes ``off[b]`` (B×J bool) of class ``classes[b]`` switched
        off (the deletion metric ``del``, metrics/deletion.py); the other classes' logits are
        unchanged. Default: subtract their ``prototype_contributions``, exact where the class's
        logit is a sum of them (every adapter of the suite); override it where switching a
        prototype off means something else for the method."""
        contributions = self.prototype_contributions(batch, classes)
        removed = torch.where(off, contributions, torch.zeros_like(contributions)).sum(dim=1)
        return self.logits(batch).scatter_add(1, classes[:, None], -removed[:, None].to(contributions.dtype))

    def global_features(self, batch: TokenBatch) -> Tensor:
        """B×K: the feature vector the classifier reads, one column per feature or prototype (the
        QPM line's class independence and contrastiveness read it, docs/protocol/metrics.md).
        Default: every prototype's map maximum (the ProtoPNet family's max-pooled similarity),
        class-major (K = C·J), from one ``activation_maps`` call per class; a method whose
        classifier reads another pooling or shares features between classes overrides it."""
        device = batch.labels.device
        return torch.cat([self.activation_maps(batch, torch.full((len(batch),), c, device=device)).amax(dim=(2, 3))
                          for c in range(self.num_classes)], dim=1)

    def frozen_features(self, batch: TokenBatch) -> dict[str, Tensor]:
        """Small per-image arrays (first dimension B) that depend only on the frozen trunk outputs
        of ``batch`` and on fixed hyperparameters, never on trained state (e.g. vMFProto's
        foreground gate). The harness computes them once per image of a cached split, before
        training, and hands them back in ``batch.frozen`` of every later batch of that split, so
        a method reads ``batch.frozen.get(name)`` and computes the value itself when it is
        absent (hand-built or live batches). Default: none."""
        return {}

    def appended_block(self) -> nn.Module | None:
        """The appended trainable block (``ctx.make_block()``), whose output evaluation computes
        once per batch for logits and maps; the adapters keep it at ``self.block``."""
        block = getattr(self, "block", None)
        return block if isinstance(block, nn.Module) else None

    # ---- hooks (default: nothing) -------------------------------------------------------
    def on_stage_start(self, stage: Stage, epoch: int, data: TrainData) -> None:
        """Called before the first epoch of ``stage`` (``epoch`` is the global epoch index)."""

    def after_step(self, batch: TokenBatch, stage: Stage, epoch: int) -> None:
        """Called after each batch (after the optimiser step, if any), under ``no_grad``:
        momentum prototype updates, renormalisation, EM steps."""

    def on_epoch_end(self, stage: Stage, epoch: int, data: TrainData) -> None:
        """Called after each epoch (global index ``epoch``): push/projection, last-layer phases."""

    # ---- timing (``protobench perf``) ------------------------------------------------------
    def phase_epochs(self, stage: Stage, first_epoch: int) -> list[int]:
        """Global epochs of ``stage`` (whose first is ``first_epoch``) at which its step starts
        to cost differently (a loss term or an EM switched on): ``perf`` times a step at each
        and weighs it by the epochs until the next. Default: the stage's first epoch."""
        return [first_epoch]

    def assume_epoch(self, epoch: int) -> None:
        """For timing only: bring whatever state a step's cost depends on (e.g. full memory
        banks) to what a run has at global ``epoch``. Default: nothing."""

    # ---- diagnostics (default: none) -----------------------------------------------------
    def diagnostics(self, splits: Mapping[str, TrainData]) -> dict[str, Any]:
        """How the method's internals behaved in this run, as JSON values (numbers, lists, nested
        dicts); the runner writes them to ``result.json`` under ``diagnostics``. Called once after
        training and evaluation, under ``no_grad``, with read access to each split's tokens
        (``"train"``: what training read, ``"test"``). What the final state and the data cannot
        give again must live in buffers, so that it survives a checkpoint and resume."""
        return {}

    def diagnostic_ranges(self) -> dict[str, DiagnosticRange]:
        """Expected range of diagnostics, keyed by their dotted path in ``diagnostics()`` (e.g.
        ``"kappa.max"``); a value outside its range is reported as a warning (``protobench status``)."""
        return {}

    def expected_warnings(self) -> dict[str, str]:
        """Ranged diagnostics (dotted path → why) that this configuration is known to leave its
        range, e.g. the paper's fixed iteration count that does not converge: such a value is
        reported once per grid with the reason, not per run as a fault (default: none)."""
        return {}


def set_trainable(method: PrototypeMethod, stage: Stage) -> None:
    """Only the parameters a stage lists train."""
    for p in method.parameters():
        p.requires_grad_(False)
    for group in stage.param_groups:
        for p in group.params:
            p.requires_grad_(True)
