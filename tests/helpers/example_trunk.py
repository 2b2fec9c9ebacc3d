"""A user trunk outside the suite, named by import path (``backbone = "example_trunk:tiny_vit"``).

The docs' "Adding a trunk" guide (docs/guides/adding-a-trunk.md) walks through this file: a factory called like
``timm.create_model`` that returns a timm ``VisionTransformer``; tiny, random, no download.
"""
from __future__ import annotations

from typing import Any

from timm.models import VisionTransformer


def tiny_vit(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    """A depth-2, width-32 ViT-S/16 with a CLS token and 4 registers (as DINOv2-reg), random weights."""
    if pretrained:
        raise ValueError("tiny_vit has no pretrained weights: set weights = \"random\" or a weights file")
    config = dict(patch_size=16, embed_dim=32, depth=2, num_heads=2, reg_tokens=4, no_embed_class=True)
    return VisionTransformer(**{**config, **kwargs})
