"""The vMFProto adapter: vMF mixture prototypes on an appended block (paper §3, docs/protocol/vmfproto.md)."""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from methods.base import DiagnosticRange, MethodContext, ParamGroup, PrototypeMethod, Stage, TokenBatch, TrainData
from methods.common.lineage import PASS_BATCH_SIZE
from methods.common.ot import grouped_hard_assignment
from methods.common.precision import float32_island
from methods.common.transfer import to_device
from methods.registry import register_method
from methods.vmfproto.gating import ATTENTION_GATES, GATING_VARIANTS, foreground_mask
from methods.vmfproto.overlap import logdet_loss
from methods.vmfproto.vmf import log_vmf_normaliser

MU_INITS: tuple[str, ...] = ("patches", "random")
LOGIT_EPS = 1e-6  # ε of Eq. (class_logit); the paper gives no value (≥ 1 patch is foreground anyway)
#: expected ranges of the diagnostics (``diagnostic_ranges``): a gate keeping under 5 % or over 90 %
#: of an image on average is not separating an object; the OT plan's column shares should be within
#: 0.1 (L1 over the J columns) of π; κ should stay in the range where log C_D is validated (vmf.py)
FOREGROUND_FRACTION_RANGE: DiagnosticRange = (0.05, 0.9)
OT_MARGINAL_ERROR_RANGE: DiagnosticRange = (0.0, 0.1)
KAPPA_RANGE: DiagnosticRange = (1e-4, 1e5)


def _fail(argument: str, value: Any, requirement: str) -> ValueError:
    return ValueError(f"vmfproto: {argument}={value!r} is invalid; {requirement} (set it in method_args)")


def _check_positive(argument: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise _fail(argument, value, "it must be a finite number > 0")


def _check_count(argument: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail(argument, value, f"it must be an integer >= {minimum}")


@register_method("vmfproto")
class VMFProto(PrototypeMethod):
    """vMFProto: per class a J-component vMF mixture (μ, κ = exp ρ, π = softmax α) on the
    L2-normalised tokens of an appended trainable block; foreground gating on the frozen view;
    stage 1 OT momentum discovery, stage 2 end-to-end ``CE + λ_ppd L_ppd + λ_logdet L_logdet``.

    Prototype ``c·J + j`` is component ``j`` of class ``c``. Ablations: ``lambda_ppd=0`` /
    ``lambda_logdet=0`` drop a loss term; ``stage2_prototypes=False`` keeps μ, κ, π as stage 1
    left them; ``fixed_kappa`` fixes every κ (``kappa_init`` is then unused); ``gating`` picks
    the foreground variant; ``mu_init`` = ``"patches"`` (random foreground patches of the class
    the first time it is seen in stage 1) or ``"random"`` (random unit vectors). The Sinkhorn
    runs ``ot_iterations`` iterations (the paper's 10) or, with ``ot_tolerance`` set, until the
    L1 error of every class's column marginal is at most ``ot_tolerance`` (at most
    ``ot_max_iterations`` iterations).
    """

    reads = frozenset({"tokens", "block_input", "attention"})

    def __init__(
        self,
        ctx: MethodContext,
        *,
        gating: str = "attention_pca",
        tau: float = 0.5,
        gamma: float = 0.99,
        ot_epsilon: float = 0.05,
        ot_iterations: int = 10,
        ot_tolerance: float | None = None,
        ot_max_iterations: int = 1000,
        lambda_ppd: float = 0.8,
        lambda_logdet: float = 1.0,
        logdet_delta: float = 1e-4,
        kappa_init: float = 5.0,
        mu_init: str = "patches",
        fixed_kappa: float | None = None,
        stage2_prototypes: bool = True,
        discovery_epochs: int = 1,
        end_to_end_epochs: int = 19,
        lr_block: float = 1e-4,
        lr_mu: float = 5e-4,
        lr_kappa: float = 1.2e-3,
        lr_pi: float = 1e-5,
    ) -> None:
        super().__init__(ctx)
        if gating not in GATING_VARIANTS:
            raise _fail("gating", gating, f"choose one of {', '.join(GATING_VARIANTS)}")
        if gating in ATTENTION_GATES and not ctx.has_cls_attention:
            raise ValueError(
                f"vmfproto: gating={gating!r} reads the CLS attention, and backbone {ctx.backbone or '(this trunk)'} "
                f"has no CLS token; set method_args.gating = \"pca\" (the attention-free gate) or pick a trunk with "
                f"a CLS token")
        if mu_init not in MU_INITS:
            raise _fail("mu_init", mu_init, f"choose one of {', '.join(MU_INITS)}")
        if not (isinstance(tau, (int, float)) and 0.0 <= tau <= 1.0):
            raise _fail("tau", tau, "it must lie in [0, 1]")
        if not (isinstance(gamma, (int, float)) and 0.0 <= gamma < 1.0):
            raise _fail("gamma", gamma, "it must lie in [0, 1)")
        for name, value in (("lambda_ppd", lambda_ppd), ("lambda_logdet", lambda_logdet)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise _fail(name, value, "it must be a finite number >= 0 (0 switches the term off)")
        for name, value in (
            ("ot_epsilon", ot_epsilon), ("logdet_delta", logdet_delta), ("kappa_init", kappa_init),
            ("lr_block", lr_block), ("lr_mu", lr_mu), ("lr_kappa", lr_kappa), ("lr_pi", lr_pi),
        ):
            _check_positive(name, value)
        if fixed_kappa is not None:
            _check_positive("fixed_kappa", fixed_kappa)
        if ot_tolerance is not None:
            _check_positive("ot_tolerance", ot_tolerance)
        _check_count("ot_iterations", ot_iterations, 1)
        _check_count("ot_max_iterations", ot_max_iterations, 1)
        _check_count("discovery_epochs", discovery_epochs, 0)
        _check_count("end_to_end_epochs", end_to_end_epochs, 0)
        if discovery_epochs + end_to_end_epochs == 0:
            raise _fail("end_to_end_epochs", end_to_end_epochs,
                        "discovery_epochs + end_to_end_epochs must be >= 1")
        if not isinstance(stage2_prototypes, bool):
            raise _fail("stage2_prototypes", stage2_prototypes, "it must be true or false")
        if ctx.embed_dim < 2:
            raise ValueError(f"vmfproto needs token dimension >= 2, the trunk gives {ctx.embed_dim}")

        self.gating = gating
        if gating not in ATTENTION_GATES:
            self.reads = frozenset({"tokens", "block_input"})
        self.tau = float(tau)
        self.gamma = float(gamma)
        self.ot_epsilon = float(ot_epsilon)
        self.ot_iterations = ot_iterations
        self.ot_tolerance = None if ot_tolerance is None else float(ot_tolerance)
        self.ot_max_iterations = ot_max_iterations
        self.logdet_delta = float(logdet_delta)
        self.mu_init = mu_init
        self.fixed_kappa = fixed_kappa
        self.stage2_prototypes = stage2_prototypes
        self.discovery_epochs = discovery_epochs
        self.end_to_end_epochs = end_to_end_epochs
        self.lrs = {"block": lr_block, "mu": lr_mu, "kappa": lr_kappa, "pi": lr_pi}
        self.loss_weights = {"ce": 1.0, "ppd": float(lambda_ppd), "logdet": float(lambda_logdet)}

        c, j, d = ctx.num_classes, ctx.prototypes_per_class, ctx.embed_dim
        self.block = ctx.make_block()
        # all randomness of the method comes from this generator; its state is checkpointed
        self._generator = torch.Generator().manual_seed(ctx.seed)
        self.mu = nn.Parameter(F.normalize(torch.randn(c, j, d, generator=self._generator), dim=-1))
        kappa0 = kappa_init if fixed_kappa is None else fixed_kappa
        self.rho = nn.Parameter(torch.full((c, j), math.log(kappa0)))  # κ = exp ρ
        self.alpha = nn.Parameter(torch.zeros(c, j))  # π = softmax α, uniform at α = 0
        self.register_buffer("seen", torch.zeros(c, dtype=torch.bool))  # classes whose μ were initialised
        # column-marginal error of the OT plans of the latest epoch that ran OT (diagnostics)
        self.register_buffer("ot_error_epoch", torch.tensor(-1))
        self.register_buffer("ot_error_sum", torch.zeros((), dtype=torch.float64))
        self.register_buffer("ot_error_max", torch.zeros((), dtype=torch.float64))
        self.register_buffer("ot_problems", torch.zeros((), dtype=torch.long))

    # ---- state --------------------------------------------------------------------------
    def get_extra_state(self) -> dict[str, Tensor]:
        return {"generator": self._generator.get_state()}

    def set_extra_state(self, state: dict[str, Tensor]) -> None:
        self._generator.set_state(state["generator"].cpu())

    # ---- mixture parameters --------------------------------------------------------------
    @property
    def kappa(self) -> Tensor:
        """C×J concentrations κ = exp ρ."""
        return self.rho.exp()

    @property
    def log_pi(self) -> Tensor:
        """C×J log mixture weights, log softmax α."""
        return torch.log_softmax(self.alpha, dim=-1)

    def prototype_means(self) -> Tensor:
        """C×J×D unit mean directions μ."""
        return F.normalize(self.mu, dim=-1)

    # ---- views ---------------------------------------------------------------------------
    def trainable_tokens(self, batch: TokenBatch) -> Tensor:
        """B×N×D unit tokens of the appended block (Eqs. block_expansion, token_normalization)."""
        return F.normalize(self.block(batch.block_input), dim=-1)

    def frozen_features(self, batch: TokenBatch) -> dict[str, Tensor]:
        """The gate depends on the frozen tokens and attention only: the harness computes it once
        per image (``foreground``: B×N bool, ``foreground_fallback``: B bool, gating.py)."""
        mask, fallback = foreground_mask(batch.tokens, batch.attention, self.gating, self.tau)
        return {"foreground": mask, "foreground_fallback": fallback}

    def gate(self, batch: TokenBatch) -> tuple[Tensor, Tensor]:
        """(B×N bool gate, B bool "fell back to all patches") of the frozen view: as the harness
        stored it (``batch.frozen``) or, for a batch without it, computed here (gating.py)."""
        if "foreground" in batch.frozen:
            return batch.frozen["foreground"], batch.frozen["foreground_fallback"]
        with torch.no_grad():
            return foreground_mask(batch.tokens, batch.attention, self.gating, self.tau)

    def foreground(self, batch: TokenBatch) -> Tensor:
        """B×N bool gate from the frozen view (``gate``)."""
        return self.gate(batch)[0]

    # ---- scores ----------------------------------------------------------------------------
    @float32_island  # log C_D(κ) ≈ −1.5e3 at D = 768: bf16's spacing there (8) would swamp κμᵀt (docs/guides/gpu.md)
    def component_scores(self, tokens: Tensor) -> Tensor:
        """``s_{i,c,j} = log C_D(κ_cj) + κ_cj μ_cjᵀ t_i`` (Eq. ot_score) for every class, B×N×C×J."""
        mu, kappa = self.prototype_means(), self.kappa
        log_c = log_vmf_normaliser(kappa, mu.shape[-1])
        weights = (kappa.unsqueeze(-1) * mu).flatten(0, 1)  # (C·J)×D rows κ_cj μ_cj
        flat = torch.addmm(log_c.flatten(), tokens.flatten(0, 1), weights.T)
        return flat.view(*tokens.shape[:2], *kappa.shape)

    @float32_island  # as component_scores
    def class_scores(self, tokens: Tensor, classes: Tensor) -> Tensor:
        """``s_{i,c_b,j}`` of one class per image (Eq. ot_score), B×N×J."""
        mu, kappa = self.prototype_means()[classes], self.kappa[classes]  # B×J×D, B×J
        log_c = log_vmf_normaliser(kappa, mu.shape[-1])
        return log_c.unsqueeze(1) + kappa.unsqueeze(1) * (tokens @ mu.transpose(1, 2))

    def _logits_from_scores(self, scores: Tensor, mask: Tensor) -> Tensor:
        log_p = torch.logsumexp(self.log_pi + scores, dim=-1)  # Eq. (logsumexp): B×N×C
        weights = mask.to(log_p.dtype).unsqueeze(-1)
        return (weights * log_p).sum(1) / (weights.sum(1) + LOGIT_EPS)  # Eq. (class_logit)

    def logits(self, batch: TokenBatch) -> Tensor:
        scores = self.component_scores(self.trainable_tokens(batch))
        return self._logits_from_scores(scores, self.foreground(batch))

    def prototype_contributions(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        """Eq. (class_logit) split over components: ``ℓ_c = Σ_j Σ_i w̃_i r_ij log p(t_i|c)`` with
        the responsibilities ``r_ij = softmax_j(log π_cj + s_icj)`` (Σ_j r_ij = 1, so the J
        terms sum exactly to the logit) and ``w̃`` the normalised foreground weights."""
        joint = self.log_pi[classes].unsqueeze(1) + self.class_scores(self.trainable_tokens(batch), classes)  # B×N×J
        log_p = torch.logsumexp(joint, dim=-1, keepdim=True)
        mask = self.foreground(batch).to(joint.dtype)
        weights = (mask / (mask.sum(1, keepdim=True) + LOGIT_EPS)).unsqueeze(-1)
        return (weights * torch.softmax(joint, dim=-1) * log_p).sum(1)

    def activation_maps(self, batch: TokenBatch, classes: Tensor) -> Tensor:
        scores = self.class_scores(self.trainable_tokens(batch), classes)  # B×N×J
        height, width = batch.grid
        return scores.transpose(1, 2).reshape(scores.shape[0], scores.shape[2], height, width)

    # ---- optimal transport -----------------------------------------------------------------
    def ot_labels(self, scores: Tensor, mask: Tensor, labels: Tensor, epoch: int) -> Tensor:
        """Hard OT label of every patch (Eqs. entropic_ot, ot_harden), B×N long (meaningful on
        foreground patches). Per class c present: the M×J scores of the foreground patches of
        its images, rows 1/M, columns π_c, solved for all classes at once (no host sync). The
        plans' column-marginal errors are recorded for global epoch ``epoch`` (diagnostics)."""
        batch_size, num_patches, _ = scores.shape
        iterations = self.ot_iterations if self.ot_tolerance is None else self.ot_max_iterations
        solved = grouped_hard_assignment(
            scores.detach().flatten(0, 1), labels.repeat_interleave(num_patches), self.log_pi.detach().exp(),  # π_c
            epsilon=self.ot_epsilon, iterations=iterations, tolerance=self.ot_tolerance, mass=mask.flatten())
        self._record_ot_error(solved.column_error.detach(), solved.present, epoch)
        return solved.labels.view(batch_size, num_patches)

    @torch.no_grad()
    def _record_ot_error(self, errors: Tensor, solved: Tensor, epoch: int) -> None:
        """Accumulate the plan errors of the classes ``solved`` in one step (``errors`` is 0 for the
        others); a new epoch starts a new tally (decided on the device: no host sync per step)."""
        kept = self.ot_error_epoch == epoch
        self.ot_error_epoch.fill_(epoch)
        for tally in (self.ot_error_sum, self.ot_error_max, self.ot_problems):
            tally.copy_(torch.where(kept, tally, 0))
        errors = errors.to(self.ot_error_sum.dtype)
        self.ot_error_sum += errors.sum()
        self.ot_error_max.copy_(torch.maximum(self.ot_error_max, errors.max()))  # errors ≥ 0, tally from 0
        self.ot_problems += solved.sum()

    def ppd_loss(self, scores: Tensor, mask: Tensor, labels: Tensor, epoch: int) -> Tensor:
        """``L_ppd`` (Eqs. posterior_k, distill_loss): CE between ``softmax_j s_{i,c,j}`` and the
        hard OT label over the foreground patches of class c, averaged per class, then over the
        classes in the batch. ``scores``: B×N×J of each image's own class."""
        targets = self.ot_labels(scores, mask, labels, epoch)
        nll = -torch.log_softmax(scores, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        per_class = torch.zeros(self.num_classes, dtype=torch.long, device=scores.device).index_add(
            0, labels, mask.sum(-1))  # M_c (integer sums: deterministic; out of place: vmap-safe)
        weights = mask.to(scores.dtype) / per_class[labels].unsqueeze(-1).to(scores.dtype)  # 1/M_c on foreground
        return (weights * nll).sum() / (per_class > 0).sum()

    # ---- the adapter contract ------------------------------------------------------------------
    def stages(self) -> list[Stage]:
        schedule = []
        if self.discovery_epochs:
            schedule.append(Stage("discovery", self.discovery_epochs))
        if self.end_to_end_epochs:
            # the block's trainables are decided by its structure (methods/base.py, MethodContext)
            groups = [ParamGroup("block", self.block.trainable_parameters(), self.lrs["block"])]
            if self.stage2_prototypes:
                groups.append(ParamGroup("mu", [self.mu], self.lrs["mu"]))
                if self.fixed_kappa is None:
                    groups.append(ParamGroup("kappa", [self.rho], self.lrs["kappa"]))
                groups.append(ParamGroup("pi", [self.alpha], self.lrs["pi"]))
            schedule.append(Stage("end_to_end", self.end_to_end_epochs, groups, optimizer="adam"))
        return schedule

    def loss_terms(self, batch: TokenBatch, stage: Stage, epoch: int) -> dict[str, Tensor]:
        if not stage.trains:
            return {}  # discovery: the update happens in after_step
        mask = self.foreground(batch)
        scores = self.component_scores(self.trainable_tokens(batch))
        terms = {"ce": F.cross_entropy(self._logits_from_scores(scores, mask), batch.labels)}
        if self.uses("ppd"):
            index = batch.labels.view(-1, 1, 1, 1).expand(-1, scores.shape[1], 1, scores.shape[3])
            terms["ppd"] = self.ppd_loss(scores.gather(2, index).squeeze(2), mask, batch.labels, epoch)
        if self.uses("logdet"):
            terms["logdet"] = logdet_loss(self.mu, self.kappa, self.logdet_delta)
        return terms

    @torch.no_grad()
    def after_step(self, batch: TokenBatch, stage: Stage, epoch: int) -> None:
        if stage.trains:
            if self.stage2_prototypes:
                self.mu.copy_(F.normalize(self.mu, dim=-1))  # μ renormalised after each step
            return
        self.discover(batch, epoch)

    # ---- stage 1 ----------------------------------------------------------------------------------
    @torch.no_grad()
    def discover(self, batch: TokenBatch, epoch: int) -> None:
        """One stage-1 step: initialise unseen classes (``mu_init="patches"``), OT-assign the
        foreground patches of each class present, and apply Eq. (mu_momentum) to every
        prototype that received a patch."""
        tokens, mask, labels = self.trainable_tokens(batch), self.foreground(batch), batch.labels
        if self.mu_init == "patches":
            self._init_from_patches(tokens, mask, labels)
        targets = self.ot_labels(self.class_scores(tokens, labels), mask, labels, epoch)
        mu = self.prototype_means()
        # Σ_i z_icj t_i as two matmuls (deterministic on GPU, unlike scatter-adds): per image, then per class
        z = F.one_hot(targets, self.prototypes_per_class).to(tokens.dtype) * mask.unsqueeze(-1)  # B×N×J
        images_of_class = F.one_hot(labels, self.num_classes).to(tokens.dtype).T  # C×B
        sums = (images_of_class @ (z.transpose(1, 2) @ tokens).flatten(1)).view_as(mu)
        hit = (images_of_class @ z.sum(1)).unsqueeze(-1) > 0  # C×J×1: prototypes that got a patch
        features = F.normalize(sums, dim=-1)  # F_cj = norm(Σ_i z_icj t_i)
        updated = F.normalize(self.gamma * mu + (1.0 - self.gamma) * features, dim=-1)  # Eq. (mu_momentum)
        self.mu.copy_(torch.where(hit, updated, mu))

    def _init_from_patches(self, tokens: Tensor, mask: Tensor, labels: Tensor) -> None:
        """μ of each class seen for the first time ← J random distinct foreground patches of
        its images in this batch (cycled when it has fewer than J). Decided for every class on
        the device (no host sync), so the random keys are drawn at every call (docs/protocol/vmfproto.md)."""
        present = torch.zeros_like(self.seen).index_fill_(0, labels, True)
        new = present & ~self.seen  # C
        patch_class = labels.repeat_interleave(tokens.shape[1])
        classes = torch.arange(self.num_classes, device=tokens.device)
        eligible = mask.flatten().unsqueeze(0) & (patch_class.unsqueeze(0) == classes.unsqueeze(-1))  # C×(B·N)
        # one uniform key per patch: the top-J keys of a class are a uniform draw without replacement
        keys = to_device(torch.rand(patch_class.shape, generator=self._generator), tokens.device)
        top = torch.where(eligible, keys.unsqueeze(0), -1.0).topk(min(self.prototypes_per_class, len(keys)), dim=-1)
        available = eligible.sum(-1, keepdim=True).clamp_min(1)  # classes not in the batch: any, unused
        pick = torch.arange(self.prototypes_per_class, device=tokens.device) % available
        drawn = tokens.flatten(0, 1)[top.indices.gather(-1, pick)]  # C×J×D
        self.mu.copy_(torch.where(new.view(-1, 1, 1), drawn.to(self.mu.dtype), self.mu))
        self.seen |= new

    # ---- diagnostics ---------------------------------------------------------------------------
    def diagnostics(self, splits: Mapping[str, TrainData]) -> dict[str, Any]:
        """Per split, the images whose gate had no foreground patch (``gating_fallback_images``,
        each image once) and the fraction of patches the gate keeps per image
        (``foreground_fraction``: mean, min), from the gate of each image (``gate``: as the harness
        stored it once per image, or recomputed from the frozen tokens, of which it is a pure function); ``ot_marginal_error``: mean and max over the class problems
        solved in the latest epoch that ran OT of ``‖Qᵀ1 − π_c‖₁`` (0 when the plan meets its
        column marginal), with that epoch; ``kappa``: min, median, max of the final κ."""
        fallback, fraction = {}, {}
        for split, data in splits.items():
            fallbacks, shares = 0, []
            for batch in data.batches(PASS_BATCH_SIZE):
                mask, fell_back = self.gate(batch)
                fallbacks += int(fell_back.sum())
                shares.append(mask.float().mean(-1).cpu())
            fallback[split] = fallbacks
            share = torch.cat(shares) if shares else torch.zeros(0)
            fraction[split] = {"mean": float(share.mean()), "min": float(share.min())} if len(share) else None
        solved = int(self.ot_problems)
        kappa = self.kappa.detach().flatten().double().cpu()
        return {
            "gating_fallback_images": fallback,
            "foreground_fraction": fraction,
            "ot_marginal_error": {
                "mean": float(self.ot_error_sum) / solved, "max": float(self.ot_error_max),
                "epoch": int(self.ot_error_epoch), "problems": solved,
                "iterations": self.ot_iterations if self.ot_tolerance is None else None,
                "tolerance": self.ot_tolerance,
            } if solved else None,
            # the lower median of the C·J values (torch.median), so it is one of the κ
            "kappa": {"min": float(kappa.min()), "median": float(kappa.median()), "max": float(kappa.max())},
        }

    def expected_warnings(self) -> dict[str, str]:
        if self.ot_tolerance is not None:
            return {}
        return {"ot_marginal_error.mean": f"the paper's fixed {self.ot_iterations} Sinkhorn iterations "
                                          "(ot_tolerance unset) stop before the plan's marginals converge; set "
                                          "method_args.ot_tolerance to iterate until they do"}

    def diagnostic_ranges(self) -> dict[str, DiagnosticRange]:
        ranges: dict[str, DiagnosticRange] = {
            "ot_marginal_error.mean": OT_MARGINAL_ERROR_RANGE,
            "kappa.min": KAPPA_RANGE, "kappa.max": KAPPA_RANGE,
        }
        for split in ("train", "test"):
            ranges[f"gating_fallback_images.{split}"] = (0, 0)  # min-max keeps the top patch unless the map is constant
            ranges[f"foreground_fraction.{split}.mean"] = FOREGROUND_FRACTION_RANGE
        return ranges
