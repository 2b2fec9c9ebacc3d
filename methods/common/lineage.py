"""Pieces shared by the ProtoPNet lineage (ProtoPNet, Deformable ProtoPNet, TesNet, EvalProtoPNet,
MGProto): docs/protocol/lineage.md.

Conventions: tokens are B×N×K (N = H·W, row-major grid), prototypes P×K class-major (prototype
``p`` belongs to class ``p // J``), per-prototype maps B×P×N, pooled scores B×P. Everything here
is a pure function of its arguments except the two passes over the training split (push and the
last-layer phase), which read a ``TrainData`` and draw randomness only from torch's global RNG.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from methods.base import MethodContext, ParamGroup, SchedulerFactory, Stage, TokenBatch, TrainData

#: images per forward pass when a hook reads the whole training split (push, feature caching);
#: only memory depends on it (P·N scores per image), never the result
PASS_BATCH_SIZE = 128

LatentAndScores = Callable[[TokenBatch], tuple[Tensor, Tensor]]
EpochFactor = Callable[[int], float]  # epoch index of a stage → learning-rate multiplier
PooledScores = Callable[[TokenBatch], Tensor]


# ---- argument checks ------------------------------------------------------------------------
def check_arg(ok: bool, method: str, argument: str, expected: str, value: object) -> None:
    """Raise a ValueError naming ``argument`` unless ``ok``."""
    if not ok:
        raise ValueError(f"{method}: {argument} must be {expected}, got {value!r}")


def _is_number(value: object) -> bool:
    """An int or float, not a bool (``True`` is an int to Python, not a learning rate)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_positive(method: str, **values: float) -> None:
    for argument, value in values.items():
        check_arg(_is_number(value) and math.isfinite(value) and value > 0,
                  method, argument, "a finite number > 0", value)


def check_non_negative(method: str, **values: float) -> None:
    for argument, value in values.items():
        check_arg(_is_number(value) and math.isfinite(value) and value >= 0,
                  method, argument, "a finite number >= 0", value)


def check_finite(method: str, **values: float) -> None:
    for argument, value in values.items():
        check_arg(_is_number(value) and math.isfinite(value), method, argument, "a finite number", value)


def check_count(method: str, *, minimum: int = 0, **values: int) -> None:
    for argument, value in values.items():
        check_arg(isinstance(value, int) and not isinstance(value, bool) and value >= minimum,
                  method, argument, f"an integer >= {minimum}", value)


def check_epochs_in_schedule(method: str, argument: str, epochs: Sequence[int], total: int) -> tuple[int, ...]:
    """Global epoch indices (e.g. push epochs) must lie in ``[0, total)``; returns them as a tuple."""
    values = tuple(epochs)
    check_arg(all(isinstance(e, int) and not isinstance(e, bool) and 0 <= e < total for e in values),
              method, argument, f"global epoch indices in [0, {total})", list(values))
    return values


# ---- the head's input: frozen tokens or the appended block's output ---------------------------
def make_block(ctx: MethodContext, expanded: bool) -> nn.Module | None:
    """The appended trainable block of docs/protocol/harness.md ("block expansion") when ``expanded``."""
    return ctx.make_block() if expanded else None


def head_input(batch: TokenBatch, block: nn.Module | None) -> Tensor:
    """B×N×D tokens the prototype head reads: frozen final-norm tokens, or the block's output."""
    return batch.tokens if block is None else block(batch.block_input)


def head_reads(block: nn.Module | None) -> frozenset[str]:
    """The TokenBatch arrays :func:`head_input` reads (``PrototypeMethod.reads``)."""
    return frozenset({"tokens"} if block is None else {"block_input"})


def block_groups(block: nn.Module | None, lr: float, weight_decay: float) -> list[ParamGroup]:
    """The optimiser group of the appended block (none without it): its ``trainable_parameters()``
    (MethodContext: the frozen final norm stays out)."""
    return [] if block is None else [ParamGroup("block", block.trainable_parameters(), lr, weight_decay)]


def step_before_epoch(step_size: int, gamma: float) -> EpochFactor:
    """``StepLR(step_size, gamma)`` as the lineage's main.py drives it: ``joint_lr_scheduler.step()``
    is called *before* each joint epoch, so joint epoch k (0-based) trains at
    ``lr · gamma^⌊(k + 1)/step_size⌋`` and the first decay comes after ``step_size − 1`` epochs."""
    return lambda k: gamma ** ((k + 1) // step_size)


def step_after_epoch(step_size: int, gamma: float) -> EpochFactor:
    """``StepLR(step_size, gamma)`` stepped *after* each joint epoch (Deformable ProtoPNet's
    main.py): joint epoch k trains at ``lr · gamma^⌊k/step_size⌋``."""
    return lambda k: gamma ** (k // step_size)


def sampled_schedule(factor: EpochFactor, epochs: int, curve_epochs: int | None = None) -> SchedulerFactory:
    """The scheduler of a stage of ``epochs`` epochs whose learning-rate factors sample the official
    ``curve_epochs``-epoch curve ``factor`` (official epoch k → multiplier): epoch k trains at
    ``factor(⌊(k + ½) · curve_epochs / epochs⌋)``, the official epoch at the centre of its share of
    the stage. This is how the offline-augmentation variant compresses a 20-epoch schedule to 5
    (docs/protocol/harness.md, "Grids"); ``curve_epochs`` None (or ``epochs``) is the official curve itself. The
    training loop steps the scheduler after each epoch, so LambdaLR's counter is the epoch index."""
    curve = epochs if curve_epochs is None else curve_epochs
    return lambda optimizer: torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda k: factor((2 * k + 1) * curve // (2 * epochs)))


def warm_joint_stages(warm: list[ParamGroup], joint_extra: list[ParamGroup], *, warm_epochs: int,
                      joint_epochs: int, lr_step: int, lr_gamma: float,
                      lr_curve_epochs: int | None = None) -> list[Stage]:
    """The two stages of the lineage's main.py: ``warm`` (``warm_only``), then ``joint`` with the
    warm groups plus ``joint_extra`` (the trunk's layers there, the appended block here) and
    ``step_before_epoch(lr_step, lr_gamma)`` on the joint optimiser, sampled at ``joint_epochs``
    points of its ``lr_curve_epochs``-epoch curve (``sampled_schedule``)."""
    return [
        Stage("warm", warm_epochs, list(warm)),
        Stage("joint", joint_epochs, [*warm, *joint_extra],
              scheduler=sampled_schedule(step_before_epoch(lr_step, lr_gamma), joint_epochs, lr_curve_epochs)),
    ]


@dataclass(frozen=True)
class WarmJoint:
    """main.py's schedule, which the lineage's official codes (forks of ProtoPNet's) share:
    ``warm_epochs`` of the head alone, then ``joint_epochs`` that add the trunk's features (here
    the appended block at ``block_lr``, weight decay ``block_weight_decay``) under a StepLR
    (``lr_step``, ``lr_gamma``) on the joint optimiser, sampled at ``joint_epochs`` points of its
    ``lr_curve_epochs``-epoch curve when compressed (docs/protocol/harness.md, "Grids")."""

    warm_epochs: int
    joint_epochs: int
    lr_step: int
    lr_gamma: float
    lr_curve_epochs: int | None
    block_lr: float
    block_weight_decay: float

    @classmethod
    def checked(cls, name: str, *, warm_epochs: int, joint_epochs: int, joint_lr_step: int, joint_lr_gamma: float,
                joint_lr_curve_epochs: int | None, block_lr: float, block_weight_decay: float) -> WarmJoint:
        """The schedule of method ``name``'s hyperparameters; a ValueError naming a bad one."""
        check_count(name, minimum=1, joint_lr_step=joint_lr_step)
        check_count(name, warm_epochs=warm_epochs, joint_epochs=joint_epochs)
        check_positive(name, joint_lr_gamma=joint_lr_gamma, block_lr=block_lr)
        check_non_negative(name, block_weight_decay=block_weight_decay)
        if joint_lr_curve_epochs is not None:  # a compressed joint stage samples this many official epochs
            check_count(name, minimum=1, joint_lr_curve_epochs=joint_lr_curve_epochs)
        return cls(warm_epochs, joint_epochs, joint_lr_step, joint_lr_gamma, joint_lr_curve_epochs, block_lr,
                   block_weight_decay)

    def block_groups(self, block: nn.Module | None) -> list[ParamGroup]:
        return block_groups(block, self.block_lr, self.block_weight_decay)

    def stages_of(self, warm: list[ParamGroup], block: nn.Module | None) -> list[Stage]:
        """:func:`warm_joint_stages` with the ``warm`` groups, the block joining the joint stage."""
        return warm_joint_stages(warm, self.block_groups(block), warm_epochs=self.warm_epochs,
                                 joint_epochs=self.joint_epochs, lr_step=self.lr_step, lr_gamma=self.lr_gamma,
                                 lr_curve_epochs=self.lr_curve_epochs)


@dataclass(frozen=True)
class LastLayerPhase:
    """main.py's last-layer epochs after each push (ProtoPNet, TesNet): ``epochs`` of the last
    layer alone at ``lr``, in batches of ``batch_size`` (:func:`last_layer_phase`)."""

    epochs: int
    lr: float
    batch_size: int

    @classmethod
    def checked(cls, name: str, *, last_layer_epochs: int, last_layer_lr: float,
                last_layer_batch_size: int) -> LastLayerPhase:
        check_count(name, minimum=1, last_layer_batch_size=last_layer_batch_size)
        check_count(name, last_layer_epochs=last_layer_epochs)
        check_positive(name, last_layer_lr=last_layer_lr)
        return cls(last_layer_epochs, last_layer_lr, last_layer_batch_size)


def push_then_last_layer(method: nn.Module, data: TrainData, pooled: PooledScores, phase: LastLayerPhase) -> None:
    """After a push epoch: ``method.push(data)`` with the network in eval mode (push.py), then the
    last-layer phase on the images the epochs read (main.py: the push reads ``train_push_loader``,
    the last-layer epochs ``train_loader``), with the method's ``l1`` weight."""
    training = method.training
    method.eval()  # push.py runs the network in eval mode
    method.push(data)
    last_layer_phase(method.last_layer, data.epoch_data, pooled, prototypes_per_class=method.prototypes_per_class,
                     epochs=phase.epochs, lr=phase.lr, batch_size=phase.batch_size,
                     l1_weight=method.loss_weights["l1"])
    method.train(training)


def register_push_records(module: nn.Module, num_prototypes: int) -> None:
    """Where each prototype was last pushed from: its image's index in the training split
    (``push_image``) and its grid position (``push_position``); −1 until it is pushed."""
    module.register_buffer("push_image", torch.full((num_prototypes,), -1, dtype=torch.long))
    module.register_buffer("push_position", torch.full((num_prototypes,), -1, dtype=torch.long))


# ---- construction and initialisation (official model.py of each method) ---------------------
def make_add_on(widths: Sequence[int], *, hidden: type[nn.Module] | None = nn.ReLU,
                final: type[nn.Module] | None = nn.Sigmoid) -> nn.Sequential:
    """Add-on 1×1 convolutions as ``nn.Linear`` on tokens: ``widths = (D, K1, …, K)`` gives
    ``Linear(D→K1) hidden … Linear(→K) final``. Kaiming-normal (fan_out, ReLU gain) weights and
    zero biases (ProtoPNet model.py ``_initialize_weights``; a 1×1 conv's fan_out is out_channels,
    the Linear's ``out_features``)."""
    layers: list[nn.Module] = []
    for index, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:])):
        linear = nn.Linear(fan_in, fan_out)
        nn.init.kaiming_normal_(linear.weight, mode="fan_out", nonlinearity="relu")
        nn.init.zeros_(linear.bias)
        layers.append(linear)
        activation = final if index == len(widths) - 2 else hidden
        if activation is not None:
            layers.append(activation())
    return nn.Sequential(*layers)


def init_prototypes(num_prototypes: int, dim: int) -> nn.Parameter:
    """Prototype vectors uniform in [0, 1) (ProtoPNet model.py: ``torch.rand(prototype_shape)``)."""
    return nn.Parameter(torch.rand(num_prototypes, dim))


def prototype_classes(num_prototypes: int, prototypes_per_class: int, device: torch.device | None = None) -> Tensor:
    """Class of every prototype, class-major: ``p // J``."""
    return torch.arange(num_prototypes, device=device) // prototypes_per_class


def own_class_mask(labels: Tensor, num_prototypes: int, prototypes_per_class: int) -> Tensor:
    """B×P bool: prototype ``p`` belongs to the class of image ``b``."""
    return prototype_classes(num_prototypes, prototypes_per_class, labels.device)[None, :] == labels[:, None]


def make_last_layer(num_classes: int, prototypes_per_class: int, incorrect_strength: float = -0.5) -> nn.Linear:
    """``Linear(C·J → C, bias=False)`` with +1 from a class's own prototypes and ``incorrect_strength``
    from the others (ProtoPNet model.py ``set_last_layer_incorrect_connection(-0.5)``)."""
    layer = nn.Linear(num_classes * prototypes_per_class, num_classes, bias=False)
    own = own_class_mask(torch.arange(num_classes), num_classes * prototypes_per_class, prototypes_per_class)
    with torch.no_grad():
        layer.weight.copy_(torch.where(own, 1.0, incorrect_strength))
    return layer


def last_layer_contributions(last_layer: nn.Linear, pooled: Tensor, classes: Tensor) -> Tensor:
    """B×J terms ``W[c, k] · s_k`` of the logit of class ``c = classes[b]`` from its own J prototypes
    (the other classes' prototypes add the rest of the logit, with negative weights); ``pooled``
    B×(C·J) pooled scores, class-major."""
    num_classes = last_layer.weight.shape[0]
    terms = (last_layer.weight[classes] * pooled).view(len(pooled), num_classes, -1)
    return terms[torch.arange(len(pooled), device=classes.device), classes]


# ---- losses (ProtoPNet train_and_test.py, class_specific=True) -------------------------------
def cluster_cost(min_distances: Tensor, labels: Tensor, prototypes_per_class: int) -> Tensor:
    """``Clst = mean_b min_{p ∈ class(y_b)} d_bp`` on B×P per-prototype min distances over the grid.

    The official code writes the masked min as ``max_dist − max((max_dist − d)·mask)``, which is
    the same number while ``d ≤ max_dist``; the exact masked min is used here."""
    own = own_class_mask(labels, min_distances.shape[1], prototypes_per_class)
    return min_distances.masked_fill(~own, math.inf).amin(dim=1).mean()


def separation_cost(min_distances: Tensor, labels: Tensor, prototypes_per_class: int) -> Tensor:
    """``Sep = mean_b min_{p ∉ class(y_b)} d_bp`` (enters the loss with a negative weight)."""
    own = own_class_mask(labels, min_distances.shape[1], prototypes_per_class)
    return min_distances.masked_fill(own, math.inf).amin(dim=1).mean()


def masked_l1(weight: Tensor, prototypes_per_class: int) -> Tensor:
    """L1 norm of the C×P last-layer weights from prototypes to the *other* classes
    (train_and_test.py: ``(last_layer.weight * (1 − class_identityᵀ)).norm(p=1)``)."""
    own = own_class_mask(torch.arange(weight.shape[0], device=weight.device), weight.shape[1], prototypes_per_class)
    return weight.masked_fill(own, 0.0).abs().sum()


# ---- push / projection (ProtoPNet push.py, class_specific=True) -------------------------------
@dataclass(frozen=True)
class PushResult:
    """Per prototype: the latent patch to copy and where it came from. A prototype whose class has
    no image in the split keeps ``image_index = position = −1`` and ``score = −inf``."""

    vectors: Tensor  # P×K latent patches
    image_index: Tensor  # P, index of the source image in the training split (``batch.indices``)
    position: Tensor  # P, flat grid position n = row·W + col
    score: Tensor  # P, activation of the chosen patch


@torch.no_grad()
def push_prototypes(data: TrainData, latent_and_scores: LatentAndScores, prototypes_per_class: int,
                    batch_size: int = PASS_BATCH_SIZE) -> PushResult:
    """Find, for each prototype, the most activated latent patch among training images of its own
    class (push.py ``update_prototypes_on_batch``). ``latent_and_scores(batch)`` returns the
    latent B×N×K and the activations B×P×N (higher = closer, e.g. ``−d``). Ties go to the first
    image in split order, then the first grid position in row-major order, as push.py's strict
    ``<`` across batches and ``np.argmin`` within one."""
    best: PushResult | None = None
    for batch in data.batches(batch_size):
        latent, scores = latent_and_scores(batch)
        b, p, n = scores.shape
        own = own_class_mask(batch.labels, p, prototypes_per_class)
        flat = scores.masked_fill(~own[:, :, None], -math.inf).transpose(0, 1).reshape(p, b * n)
        arg = flat.argmax(dim=1)  # first maximum: image-major, then row-major grid
        score = flat.gather(1, arg[:, None]).squeeze(1)
        image, position = arg // n, arg % n
        vectors, image_index = latent[image, position], batch.indices[image]
        if best is None:
            none = torch.full_like(position, -1)
            best = PushResult(torch.zeros_like(vectors), none, none, torch.full_like(score, -math.inf))
        better = score > best.score  # strict: an earlier image keeps a tie
        best = PushResult(torch.where(better[:, None], vectors, best.vectors),
                          torch.where(better, image_index, best.image_index),
                          torch.where(better, position, best.position), torch.where(better, score, best.score))
    if best is None:
        raise ValueError("push needs a non-empty training split")
    return best


# ---- the last-layer-only phase (docs/protocol/lineage.md: convex on fixed pooled similarities) --------------
def pooled_features(data: TrainData, pooled: PooledScores, batch_size: int = PASS_BATCH_SIZE) -> tuple[Tensor, Tensor]:
    """The B×P pooled scores the last layer reads, over all of ``data`` (the images the training
    epochs read: main.py's last-layer epochs iterate ``train_loader``), and the labels. The trunk
    (and, in this phase, the head) is frozen, so they are fixed."""
    features, labels = [], []
    with torch.no_grad():
        for batch in data.batches(batch_size):
            features.append(pooled(batch))
            labels.append(batch.labels)
    return torch.cat(features), torch.cat(labels)


def train_last_layer(last_layer: nn.Linear, features: Tensor, labels: Tensor, *, prototypes_per_class: int,
                     epochs: int, lr: float, batch_size: int, l1_weight: float) -> None:
    """``epochs`` epochs of Adam(lr) on ``CE + l1_weight · masked L1`` over shuffled mini-batches of
    fixed features (ProtoPNet main.py: ``last_only`` then 20 × ``tnt.train`` with
    ``last_layer_optimizer``). Only ``last_layer.weight`` changes; the optimiser is a fresh Adam
    on a detached copy, so the caller's ``requires_grad`` flags are left alone. The shuffles
    draw from torch's global (CPU) RNG."""
    weight = last_layer.weight.detach().clone().requires_grad_(True)
    optimizer = torch.optim.Adam([weight], lr=lr)
    with torch.enable_grad():
        for _ in range(epochs):
            order = torch.randperm(len(labels)).to(features.device)
            for start in range(0, len(order), batch_size):
                index = order[start:start + batch_size]
                loss = F.cross_entropy(features[index] @ weight.T, labels[index])
                if l1_weight != 0.0:
                    loss = loss + l1_weight * masked_l1(weight, prototypes_per_class)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
    with torch.no_grad():
        last_layer.weight.copy_(weight)


def last_layer_phase(last_layer: nn.Linear, data: TrainData, pooled: PooledScores, *, prototypes_per_class: int,
                     epochs: int, lr: float, batch_size: int, l1_weight: float) -> None:
    """Pooled scores over the training split once (after a push), then ``train_last_layer``."""
    if epochs == 0:
        return
    features, labels = pooled_features(data, pooled)
    train_last_layer(last_layer, features, labels, prototypes_per_class=prototypes_per_class, epochs=epochs,
                     lr=lr, batch_size=batch_size, l1_weight=l1_weight)
