"""The optimiser side of a stage, as its method declares it (``methods.base.Stage``): the
optimiser (Adam, AdamW with decoupled weight decay, SGD with momentum 0.9), the learning-rate
schedule stepped per epoch (``Stage.scheduler``) or per optimiser step (``Stage.step_schedule``,
a :class:`methods.base.WarmupCosine`), and gradient-norm clipping before each step."""
from __future__ import annotations

import math

import torch

from benchmark.errors import ProtobenchError
from methods.base import Stage, WarmupCosine

OPTIMIZERS = ("adam", "adamw", "sgd")


def make_optimizer(stage: Stage) -> torch.optim.Optimizer:
    """The stage's optimiser over its named groups. ``adamw``: torch AdamW, p ← p·(1 − lr·wd)
    before the Adam update (Loshchilov & Hutter 2019), betas (0.9, 0.999), eps 1e-8."""
    groups = [{"params": g.params, "lr": g.lr, "weight_decay": g.weight_decay, "name": g.name}
              for g in stage.param_groups]
    if stage.optimizer == "adam":
        return torch.optim.Adam(groups)
    if stage.optimizer == "adamw":
        return torch.optim.AdamW(groups)
    if stage.optimizer == "sgd":
        return torch.optim.SGD(groups, momentum=0.9)
    raise ProtobenchError(f"stage {stage.name!r} asks for unknown optimizer {stage.optimizer!r} "
                          f"({' | '.join(OPTIMIZERS)})")


def warmup_cosine_factor(schedule: WarmupCosine, step: int, total_steps: int, steps_per_epoch: int) -> float:
    """Multiplier of step ``step`` (0-based) of ``total_steps``: with W = warmup_epochs ·
    steps_per_epoch and E = cosine_end · total_steps, ``start + (s/W)(1 − start)`` for s < W,
    ``final + (1 − final)·½(1 + cos(π(s − W)/(E − W)))`` for W ≤ s ≤ E, ``final`` after (ComFe's
    ``goo/scheduler/paws_cosine_annealing_with_warmup.py:10-48``, lrs divided by the reference lr)."""
    warmup = schedule.warmup_epochs * steps_per_epoch
    end = schedule.cosine_end * total_steps
    if step < warmup:
        return schedule.start_factor + (step / warmup) * (1.0 - schedule.start_factor)
    if step <= end and end > warmup:
        progress = (step - warmup) / (end - warmup)
        return schedule.final_factor + (1.0 - schedule.final_factor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    return schedule.final_factor


def make_scheduler(stage: Stage, optimizer: torch.optim.Optimizer | None,
                   steps_per_epoch: int) -> torch.optim.lr_scheduler.LRScheduler | None:
    """The stage's scheduler: its per-epoch factory, or a per-step LambdaLR of its
    ``step_schedule`` over ``stage.epochs · steps_per_epoch`` steps (λ(0) applies from the first
    step, as LambdaLR sets it at construction); None without either."""
    if optimizer is None:
        return None
    if stage.scheduler is not None and stage.step_schedule is not None:
        raise ProtobenchError(f"stage {stage.name!r} declares both a per-epoch scheduler and a per-step "
                              "step_schedule; declare one of them")
    if stage.scheduler is not None:
        return stage.scheduler(optimizer)
    schedule = stage.step_schedule
    if schedule is None:
        return None
    total = stage.epochs * steps_per_epoch
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_cosine_factor(schedule, step, total, steps_per_epoch))


def clip_gradients(stage: Stage, optimizer: torch.optim.Optimizer) -> None:
    """Scale the gradients of every parameter of the optimiser so that their total 2-norm is at
    most ``stage.clip_grad_norm`` (torch ``clip_grad_norm_``: coef = min(1, max/(‖g‖ + 1e-6)), as
    Lightning's ``gradient_clip_algorithm="norm"`` calls it); nothing without a clip."""
    if stage.clip_grad_norm is None:
        return
    params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    torch.nn.utils.clip_grad_norm_(params, stage.clip_grad_norm)
