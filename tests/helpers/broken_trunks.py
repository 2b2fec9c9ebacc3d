"""User trunks that each break one clause of the trunk contract (``benchmark.trunk_contract``);
``test_user_trunks.py`` names them by import path, as a user would."""
from __future__ import annotations

from typing import Any

import torch
from timm.models import VisionTransformer
from timm.models.vision_transformer import Block
from torch import Tensor, nn

from example_trunk import tiny_vit


def not_a_vit(pretrained: bool = False, **kwargs: Any) -> nn.Module:
    return nn.Linear(3, 32)


def wrong_prefix(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    model = tiny_vit(**kwargs)
    model.num_prefix_tokens = 2  # prepends CLS + 4 registers = 5
    return model


def wrong_width(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    model = tiny_vit(**kwargs)
    model.embed_dim = 64  # its blocks are 32 wide
    return model


class HeadAverage(nn.Module):
    """Self-attention that is not timm's: a per-token linear map."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, x: Tensor, **kwargs: Any) -> Tensor:
        return self.proj(x)


def foreign_attention(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    model = tiny_vit(**kwargs)
    model.blocks[-1].attn = HeadAverage(model.embed_dim)
    return model


class NoisyBlock(Block):
    def forward(self, x: Tensor, **kwargs: Any) -> Tensor:
        return super().forward(x, **kwargs) + 1e-3 * torch.randn_like(x)


def noisy(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return tiny_vit(block_fn=NoisyBlock, **kwargs)


class BatchCentredNorm(nn.LayerNorm):
    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x - x.mean(dim=0, keepdim=True))


def batch_mixing(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    model = tiny_vit(**kwargs)
    model.norm = BatchCentredNorm(model.embed_dim)
    return model


class ShiftedBlock(Block):
    """A residual branch outside attn.proj and mlp.fc2: the zeroed copy is not the identity."""

    def __init__(self, dim: int, *args: Any, **kwargs: Any) -> None:
        super().__init__(dim, *args, **kwargs)
        self.shift = nn.Parameter(torch.linspace(-1.0, 1.0, dim))  # not constant: LayerNorm would remove it

    def forward(self, x: Tensor, **kwargs: Any) -> Tensor:
        return super().forward(x, **kwargs) + self.shift


def extra_residual(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return tiny_vit(block_fn=ShiftedBlock, **kwargs)
