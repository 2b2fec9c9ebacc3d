"""The MGProto adapter (Wang et al., "MGProto"; official code ``cwangrun/MGProto``) on a frozen
trunk's tokens, as docs/protocol/mgproto.md specifies.

Add-on ``Linear(D→64) → Linear(64→64)`` then L2 normalisation (``add_on_layers_type =
'regular'``); per class a J-component Gaussian mixture with σ = 1/√(2π), so ``log N = −π‖z−μ‖²``;
logits ``log Σ_j π_cj max_grid N(z | μ_cj)`` with means and priors detached (they are buffers,
changed only by EM and push); ``L = CE + 0.2 L_mine`` (mining from ``mine_start_epoch``). After
every step the top-1 features of the ground-truth prototypes enter a per-class FIFO memory bank;
in every epoch from ``em_start_epoch`` whose start finds every class's bank full (main.py decides
``update_GMM`` once per epoch), EM runs after each step on every class enqueued since the last EM
(model.py ``memory_updated_cls``: every enqueue sets a class's flag, only ``update_GMM`` clears it,
so the first EM updates every class enqueued since training began).
Push with the unique-image constraint after the epochs in ``push_epochs``; prior-based pruning
to ``prune_top_m`` prototypes per class after the last epoch when J is larger. The Proxy-Anchor
auxiliary branch (a metric loss on a pooled trunk embedding) is off: on a frozen trunk it cannot
reach the prototypes (docs/protocol/mgproto.md **Decision**).

The 120-epoch official schedule is compressed to 20 epochs (docs/protocol/mgproto.md **Decision**): every
official epoch milestone e is mapped to ⌈e·20/120⌉ — EM from 35 → 6, mining from 40 → 7, pushes
at 100, 110 → 17, 19, and the joint optimiser's ×0.4 learning-rate steps at 30, 45, 60, 75, 90
(main.py) → 5, 8, 10, 13, 15. All epochs are 0-based global indices.

Two quantities scale with the setting so that the compressed schedule does what the official one
does. The memory bank holds ⌈800·20/120⌉ = 134 features per class: in the official run the banks
(800) fill within the first few of 120 epochs, long before EM starts at 35; a bank fills at the
same rate per epoch here, so at 800 it would still be filling when the compressed EM is due
(epoch 6). At 134, a class with n training images is full after ⌈134/n⌉ epochs even when each
image adds only one feature (5 epochs for CUB's 29–30 images per class), and the bank spans the
same fraction of the schedule as 800 of 120 epochs. The mining depth is T = round(20·N/49): the
official T = 20 ranked positions of ResNet-34's 7×7 grid, the same share of an N-patch token grid.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from methods.base import DiagnosticRange, MethodContext, ParamGroup, PrototypeMethod, Stage, TokenBatch, TrainData
from methods.common.lineage import (
    PASS_BATCH_SIZE,
    block_groups,
    check_arg,
    check_count,
    check_epochs_in_schedule,
    check_non_negative,
    check_positive,
    head_input,
    head_reads,
    make_add_on,
    make_block,
)
from methods.mgproto.memory import ClassMemoryBank, unique_top1_features
from methods.mgproto.mixture import (
    EMState,
    class_log_likelihoods,
    em_update,
    log_density,
    mined_logits,
)
from methods.mgproto.push import unique_image_choice
from methods.registry import register_method

NAME = "mgproto"
#: the official schedule (settings.py: 120 epochs; main.py: ``-mem_sz 800``, ``-mine_level 20``)
#: and the grid the official mining depth is set for (ResNet-34 at 224 px: 7×7)
OFFICIAL_EPOCHS, OFFICIAL_MEMORY_CAPACITY, OFFICIAL_MINE_LEVELS, OFFICIAL_GRID_POSITIONS = 120, 800, 20, 49
COMPRESSED_EPOCHS = 20
#: bank capacity of the compressed schedule, ⌈800·20/120⌉ = 134 (module docstring)
MEMORY_CAPACITY = math.ceil(OFFICIAL_MEMORY_CAPACITY * COMPRESSED_EPOCHS / OFFICIAL_EPOCHS)


def scaled_mine_levels(grid_positions: int) -> int:
    """Mining depth T on an N-position grid: the official 20 of 49 positions, round(20·N/49), at least 2."""
    return max(2, round(OFFICIAL_MINE_LEVELS * grid_positions / OFFICIAL_GRID_POSITIONS))


@register_method(NAME)
class MGProto(PrototypeMethod):
    """MGProto head (docs/protocol/mgproto.md).

    Hyperparameters (official defaults, schedule compressed to 20 epochs): ``epochs`` length of
    the single joint stage; ``latent_dim`` add-on width; ``lr_add_on`` / ``add_on_weight_decay``
    and ``lr_block`` / ``block_weight_decay`` the Adam groups (the block only when ``expanded``);
    ``lr_milestones`` / ``lr_gamma`` the MultiStepLR of that optimiser; ``lambda_mine`` and
    ``mine_levels`` (T: the ground-truth prototypes' activations ranked 2..T, clamped to the grid
    size; ``None``: scaled to the grid, :func:`scaled_mine_levels`) and ``mine_start_epoch``;
    ``memory_capacity`` features per class (default scaled to the schedule, module docstring); ``em_start_epoch``,
    ``em_loops``, ``em_alpha`` (responsibility smoothing), ``em_lr`` (Adam on the means),
    ``em_diversity`` (weight of the mean pairwise ``exp(−‖μ_i − μ_j‖²)``) and ``prior_momentum``;
    ``push_epochs`` 0-based global epochs after which a push runs; ``prune_top_m`` prototypes kept
    per class by prior after training (only when J is larger); ``expanded`` runs the head on the
    appended trainable block (docs/protocol/harness.md).
    """

    def __init__(
        self,
        ctx: MethodContext,
        *,
        epochs: int = 20,
        latent_dim: int = 64,
        lr_add_on: float = 3e-3,
        add_on_weight_decay: float = 1e-3,
        lr_block: float = 1e-4,
        block_weight_decay: float = 0.0,
        lr_milestones: Sequence[int] = (5, 8, 10, 13, 15),
        lr_gamma: float = 0.4,
        lambda_mine: float = 0.2,
        mine_levels: int | None = None,
        mine_start_epoch: int = 7,
        memory_capacity: int = MEMORY_CAPACITY,
        em_start_epoch: int = 6,
        em_loops: int = 3,
        em_alpha: float = 0.1,
        em_lr: float = 3e-3,
        em_diversity: float = 1.0,
        prior_momentum: float = 0.99,
        push_epochs: Sequence[int] = (17, 19),
        prune_top_m: int = 8,
        expanded: bool = False,
    ) -> None:
        super().__init__(ctx)
        if mine_levels is None:
            mine_levels = scaled_mine_levels(ctx.grid[0] * ctx.grid[1])
        check_count(NAME, minimum=1, epochs=epochs, latent_dim=latent_dim, mine_levels=mine_levels,
                    memory_capacity=memory_capacity, em_loops=em_loops, prune_top_m=prune_top_m)
        check_count(NAME, mine_start_epoch=mine_start_epoch, em_start_epoch=em_start_epoch)
        check_positive(NAME, lr_add_on=lr_add_on, lr_block=lr_block, lr_gamma=lr_gamma, em_lr=em_lr)
        check_non_negative(NAME, add_on_weight_decay=add_on_weight_decay, block_weight_decay=block_weight_decay,
                           lambda_mine=lambda_mine, em_alpha=em_alpha, em_diversity=em_diversity)
        check_arg(isinstance(prior_momentum, (int, float)) and 0.0 <= prior_momentum < 1.0, NAME, "prior_momentum",
                  "a number in [0, 1)", prior_momentum)
        check_arg(all(isinstance(m, int) and not isinstance(m, bool) and m >= 1 for m in lr_milestones), NAME,
                  "lr_milestones", "epoch indices >= 1", list(lr_milestones))
        check_arg(isinstance(expanded, bool), NAME, "expanded", "a bool", expanded)
        self.epochs = epochs
        self.push_epochs = check_epochs_in_schedule(NAME, "push_epochs", push_epochs, epochs)
        self.lr_add_on, self.add_on_weight_decay = lr_add_on, add_on_weight_decay
        self.lr_block, self.block_weight_decay = lr_block, block_weight_decay
        self.lr_milestones, self.lr_gamma = tuple(lr_milestones), lr_gamma
        self.mine_levels, self.mine_start_epoch = mine_levels, mine_start_epoch
        self.em_start_epoch, self.em_loops, self.em_alpha = em_start_epoch, em_loops, em_alpha
        self.em_lr, self.em_diversity, self.prior_momentum = em_lr, em_diversity, prior_momentum
        self.prune_top_m = prune_top_m
        self.loss_weights = {"ce": 1.0, "mine": lambda_mine}

        classes, per_class = ctx.num_classes, ctx.prototypes_per_class
        with torch.random.fork_rng(devices=[]):  # initialisation is a function of ctx.seed alone
            torch.manual_seed(ctx.seed)
            self.block = make_block(ctx, expanded)
            self.reads = head_reads(self.block)
            # model.py, add_on_layers_type='regular': two 1×1 convs, no non-linearity (Kaiming fan_out)
            self.add_on = make_add_on((ctx.embed_dim, latent_dim, latent_dim), hidden=None, final=None)
            # model.py: prototype_means = l2_normalize(torch.rand(C, J, d))
            means = F.normalize(torch.rand(classes, per_class, latent_dim), dim=-1)
        self.register_buffer("means", means)
        # model.py initialize_weights: own-class last-layer weights (the priors) 1/J
        self.register_buffer("priors", torch.full((classes, per_class), 1.0 / per_class))
        self.register_buffer("em_exp_avg", torch.zeros_like(means))
        self.register_buffer("em_exp_avg_sq", torch.zeros_like(means))
        self.register_buffer("em_steps", torch.zeros((), dtype=torch.long))  # one Adam over all means
        # model.py ``memory_updated_cls``: classes enqueued since the last EM
        self.register_buffer("em_pending", torch.zeros(classes, dtype=torch.bool))
        # main.py's per-epoch ``update_GMM`` (decided for epoch ``em_decided_epoch``) and, for the
        # diagnostics, the first epochs in which EM and mining ran (−1: not yet)
        self.register_buffer("em_decided_epoch", torch.tensor(-1))
        self.register_buffer("em_active", torch.tensor(False))
        self.register_buffer("em_first_epoch", torch.tensor(-1))
        self.register_buffer("mining_first_epoch", torch.tensor(-1))
        # (training-split image index, grid position) each prototype was last pushed from; −1 before
        self.register_buffer("prototype_source", torch.full((classes, per_class, 2), -1, dtype=torch.long))
        self.memory = ClassMemoryBank(classes, memory_capacity, latent_dim)
        self._pending: tuple[TokenBatch, Tensor, Tensor] | None = None
        # host copy of (em_decided_epoch, em_active), so that a step branches on EM without reading the
        # device: decided at the end of the epoch before (when the bank is as the next epoch's first
        # step finds it) or when a state is loaded; an empty bank runs no EM in the first epoch
        self._em_decision: tuple[int, bool] = (0, False)
        self.register_load_state_dict_post_hook(lambda module, keys: setattr(
            module, "_em_decision", (int(module.em_decided_epoch), bool(module.em_active))))

    # ---- forward pieces ------------------------------------------------------------------------
    def latent(self, batch: TokenBatch) -> Tensor:
        """B×N×d L2-normalised add-on output (model.py ``forward``: ``l2_normalize(base_feature)``)."""
        return F.normalize(self.add_on(head_input(batch, self.block)), dim=-1)

    def _log_densities(self, latent: Tensor) -> Tensor:
        """B×N×C×J ``log N(z_n | μ_cj)``."""
        b, n, _ = latent.shape
        return log_density(latent, self.means.flatten(0, 1)).view(b, n, self.num_classes, -1)

    def logits(self, batch: TokenBatch) -> Tensor:
        return class_log_likelihoods(self._log_densities(self.latent(batch)).amax(dim=1), self.priors)

    def prototype_contributions(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """``log p(x|c)`` split over components by their posterior share
        ``π_cj p_cj / Σ_j' π_cj' p_cj'`` (c = ``classes[b]``); the J terms sum to the logit."""
        top = self._log_densities(self.latent(batch)).amax(dim=1)  # B×C×J top-1 log densities
        rows = torch.arange(len(batch), device=classes.device)
        joint = torch.log(self.priors[classes]) + top[rows, classes]  # B×J
        return torch.softmax(joint, dim=-1) * torch.logsumexp(joint, dim=-1, keepdim=True)

    def activation_maps(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """``exp(−π‖z − μ‖²)`` of the J components of ``classes[b]`` on the grid (push.py's activation)."""
        dens = log_density(self.latent(batch), self.means[classes]).exp()  # B×N×J
        return dens.transpose(1, 2).reshape(len(batch), -1, *batch.grid)

    # ---- training ----------------------------------------------------------------------------
    def stages(self) -> list[Stage]:
        groups = [ParamGroup("add_on", list(self.add_on.parameters()), self.lr_add_on, self.add_on_weight_decay),
                  *block_groups(self.block, self.lr_block, self.block_weight_decay)]
        milestones, gamma = list(self.lr_milestones), self.lr_gamma

        def scheduler(optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
            return torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=milestones, gamma=gamma)

        return [Stage("joint", self.epochs, groups, scheduler=scheduler)]

    def loss_terms(self, batch: TokenBatch, stage: Stage, epoch: int) -> dict[str, Tensor]:
        latent = self.latent(batch)
        log_dens = self._log_densities(latent)
        top, where = log_dens.max(dim=1)  # top-1 over the grid, B×C×J
        rows, labels = torch.arange(len(batch), device=latent.device), batch.labels
        self._pending = (batch, latent.detach(), where[rows, labels])
        terms = {"ce": F.cross_entropy(class_log_likelihoods(top, self.priors), labels)}
        levels = min(self.mine_levels, log_dens.shape[1])
        if epoch >= self.mine_start_epoch and levels > 1 and self.uses("mine"):
            # train_and_test.py: L_mine = mean over k = 1..T−1 of CE with the GT prototypes' k-th ranked activation
            ranked = log_dens[rows, :, labels].topk(levels, dim=1).values.transpose(1, 2)  # B×J×T
            mined = mined_logits(top, ranked[..., 1:], labels, self.priors)  # B×(T−1)×C
            terms["mine"] = F.cross_entropy(mined.flatten(0, 1), labels.repeat_interleave(levels - 1))
            first = self.mining_first_epoch
            first.copy_(torch.where(first < 0, epoch, first))
        return terms

    def after_step(self, batch: TokenBatch, stage: Stage, epoch: int) -> None:
        """Enqueue the batch's top-1 ground-truth features (computed in ``loss_terms`` before the
        optimiser step, as model.py's forward; recomputed if this batch had no ``loss_terms``),
        then EM if this epoch runs EM (main.py sets ``update_GMM`` at the start of each epoch, from
        ``em_start_epoch`` on, when every class's bank is full) on every class enqueued since the
        last EM (model.py ``memory_updated_cls``, set by every enqueue, cleared only by EM)."""
        if self._em_decision[0] != epoch:  # no epoch end decided it (a direct call): decide before the features enter
            self.decide_em(epoch)
        pending, self._pending = self._pending, None
        if pending is not None and pending[0] is batch:
            latent, positions = pending[1], pending[2]
        else:
            latent = self.latent(batch)
            positions = log_density(latent, self.means[batch.labels]).argmax(dim=1)
        self.memory.push(*unique_top1_features(latent, positions, batch.labels))
        # index_fill_, not `[labels] = True`, whose CPU-made value is copied to CUDA (a sync per step)
        self.em_pending.index_fill_(0, batch.labels, True)
        if self._em_decision[1]:
            self.expectation_maximisation()
            self.em_first_epoch.copy_(torch.where(self.em_first_epoch < 0, epoch, self.em_first_epoch))

    @torch.no_grad()
    def decide_em(self, epoch: int) -> None:
        """main.py's ``update_GMM`` for ``epoch``: EM runs in it from ``em_start_epoch`` on when
        every class's bank is full at its start (one read of the device; at an epoch end)."""
        active = epoch >= self.em_start_epoch and self.memory.full()
        self.em_decided_epoch.fill_(epoch)
        self.em_active.fill_(active)
        self._em_decision = (epoch, active)

    def expectation_maximisation(self) -> None:
        """model.py ``update_GMM``: EM, with the one Adam over all means, on the banks of the
        pending classes in ascending order, then every flag cleared. (``update_GMM`` also skips a
        class whose bank is not full; none is here: EM runs only in an epoch whose start found
        every bank full, and a bank never shrinks.)"""
        state = EMState(self.means, self.priors, self.em_exp_avg, self.em_exp_avg_sq, self.em_steps)
        new = em_update(self.memory.features, state, self.em_pending, loops=self.em_loops, alpha=self.em_alpha,
                        lr=self.em_lr, diversity_weight=self.em_diversity, prior_momentum=self.prior_momentum)
        for buffer, value in ((self.means, new.means), (self.priors, new.priors), (self.em_exp_avg, new.exp_avg),
                              (self.em_exp_avg_sq, new.exp_avg_sq), (self.em_steps, new.steps)):
            buffer.copy_(value)
        self.em_pending.fill_(False)

    def on_epoch_end(self, stage: Stage, epoch: int, data: TrainData) -> None:
        if epoch in self.push_epochs:
            self.push(data)
        if epoch == self.epochs - 1 and self.prototypes_per_class > self.prune_top_m:
            self.prune()
        self.decide_em(epoch + 1)  # the bank is now as the next epoch's first step finds it

    def phase_epochs(self, stage: Stage, first_epoch: int) -> list[int]:
        """Before EM, EM from ``em_start_epoch``, EM + mining from ``mine_start_epoch``."""
        switches = (self.em_start_epoch, self.mine_start_epoch)
        return sorted({first_epoch, *(e for e in switches if first_epoch < e < first_epoch + stage.epochs)})

    @torch.no_grad()
    def assume_epoch(self, epoch: int) -> None:
        """From ``em_start_epoch`` a run's banks are full: fill the missing slots with random
        unit vectors (EM's cost does not depend on their values)."""
        if epoch >= self.em_start_epoch and not self.memory.full():
            generator = torch.Generator().manual_seed(epoch)
            for cls in range(self.num_classes):
                missing = self.memory.capacity - int(self.memory.size[cls])
                features = F.normalize(torch.randn(missing, self.memory.features.shape[-1], generator=generator),
                                       dim=-1)
                self.memory.push(features.to(self.memory.features.device),
                                 torch.full((missing,), cls, dtype=torch.long, device=self.memory.features.device))
        self.decide_em(epoch)

    @torch.no_grad()
    def push(self, data: TrainData) -> None:
        """Project every prototype onto its best latent patch among training images of its class,
        at most one prototype per image (push.py). A prototype left without an image keeps μ."""
        per_class = self.prototypes_per_class
        scores = torch.full((len(data), per_class), -torch.inf, device=self.means.device)
        positions = torch.zeros((len(data), per_class), dtype=torch.long, device=self.means.device)
        vectors = torch.zeros((len(data), per_class, self.means.shape[-1]), device=self.means.device)
        labels = torch.zeros(len(data), dtype=torch.long, device=self.means.device)
        for batch in data.batches(PASS_BATCH_SIZE):
            latent = self.latent(batch)
            best, where = log_density(latent, self.means[batch.labels]).max(dim=1)  # B×J
            scores[batch.indices], positions[batch.indices], labels[batch.indices] = best, where, batch.labels
            vectors[batch.indices] = latent[torch.arange(len(batch), device=latent.device)[:, None], where].to(vectors.dtype)
        choice = unique_image_choice(scores, labels, self.num_classes)  # C×J
        found = choice >= 0
        component = torch.arange(per_class, device=choice.device).expand_as(choice)[found]
        image = choice[found]
        self.means[found] = vectors[image, component]
        self.prototype_source[found] = torch.stack([image, positions[image, component]], dim=-1)

    def prune(self) -> None:
        """Keep the ``prune_top_m`` prototypes of highest prior per class (ties kept), zero the
        others' priors (model.py ``prune_prototypes_topM``; priors are not renormalised)."""
        threshold = self.priors.topk(self.prune_top_m, dim=1).values[:, -1:]
        self.priors.mul_((self.priors >= threshold).to(self.priors.dtype))

    # ---- diagnostics ---------------------------------------------------------------------------
    def diagnostics(self, splits: Mapping[str, TrainData]) -> dict[str, Any]:
        """The first epochs in which EM and mining ran (−1: never), the bank capacity and the mining depth."""
        return {"em_first_epoch": int(self.em_first_epoch), "mining_first_epoch": int(self.mining_first_epoch),
                "memory_capacity": self.memory.capacity, "mine_levels": self.mine_levels}

    def diagnostic_ranges(self) -> dict[str, DiagnosticRange]:
        """EM and mining must start on their scheduled epochs (when the schedule reaches them)."""
        ranges: dict[str, DiagnosticRange] = {}
        if self.em_start_epoch < self.epochs:
            ranges["em_first_epoch"] = (self.em_start_epoch, self.em_start_epoch)
        if self.mine_start_epoch < self.epochs and self.uses("mine") and self.mine_levels > 1:
            ranges["mining_first_epoch"] = (self.mine_start_epoch, self.mine_start_epoch)
        return ranges
