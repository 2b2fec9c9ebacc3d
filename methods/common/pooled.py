"""The image features of the black-box reference rows (``linear_probe``, ``knn``) from a token
batch: the last layer's final-norm CLS token, the mean of the final-norm patch tokens, or both
concatenated (DINOv2 ``dinov2/eval/linear.py`` ``create_linear_input`` with one block:
``cat(class_token, mean(patch_tokens))``; DINO ``eval_knn.py`` reads the CLS token).

The cache stores the last block's pre-norm output (``block_input``, prefix first) and rebuilds the
patch tokens as ``norm(block_input)[:, P:]`` (benchmark/cache/tokens.py); the CLS token is the same
frozen norm applied to the first prefix token, so the norm is taken from the appended block the
harness builds (``ctx.make_block().norm``, a frozen copy of the trunk's final norm).
"""
from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from methods.base import MethodContext, TokenBatch

#: the feature choices (``pool``): CLS token, patch mean, both concatenated (CLS first)
POOLS = ("cls", "mean", "cls+mean")


def frozen_final_norm(ctx: MethodContext, method: str, pool: str) -> nn.Module:
    """A frozen copy of the trunk's final norm; refuses a CLS pool on a trunk without a CLS token."""
    if pool not in POOLS:
        raise ValueError(f"{method}: pool must be one of {', '.join(map(repr, POOLS))}, got {pool!r}")
    if "cls" in pool and (not ctx.has_cls_attention or ctx.num_prefix_tokens < 1):
        raise ValueError(f"{method}: pool = {pool!r} reads the CLS token, which trunk {ctx.backbone or '(this one)'!r} "
                         f"does not have; set method_args.pool = \"mean\"")
    norm = getattr(ctx.make_block(), "norm", None)
    if not isinstance(norm, nn.Module):
        raise ValueError(f"{method}: the appended block of this trunk has no final norm (.norm) to rebuild "
                         f"the CLS token with; set method_args.pool = \"mean\"")
    norm = copy.deepcopy(norm)
    norm.requires_grad_(False)
    return norm


def feature_width(embed_dim: int, pool: str) -> int:
    """The width of ``pool``'s features: D, or 2D for ``cls+mean``."""
    return embed_dim * (2 if pool == "cls+mean" else 1)


def cls_token(batch: TokenBatch, norm: nn.Module) -> Tensor:
    """B×D final-norm CLS token: ``norm(block_input)[:, 0]`` (timm puts CLS before registers)."""
    return norm(batch.block_input[:, :1].float())[:, 0].float()


def pooled_features(batch: TokenBatch, norm: nn.Module, pool: str) -> Tensor:
    """B×D (B×2D for ``cls+mean``) float32 features of ``pool``."""
    if pool == "cls":
        return cls_token(batch, norm)
    mean = batch.tokens.float().mean(dim=1)
    return mean if pool == "mean" else torch.cat([cls_token(batch, norm), mean], dim=1)
