"""Token-cache sizes without building anything: a trunk's token geometry from its model built on
the meta device, and the bytes of one cache entry (``benchmark.cache.tokens.entry_layout``).
Read by ``plan`` (cache sizes, build costs) and ``doctor`` (free disk)."""
from __future__ import annotations

import json
from functools import lru_cache

import torch

from benchmark.backbones import backbone_spec
from benchmark.cache.tokens import entry_layout
from benchmark.config import RunSpec


@lru_cache(maxsize=None)
def trunk_geometry(backbone: str, backbone_args: str, image_size: int) -> tuple[int, int, int]:
    """(patch tokens, prefix tokens, width) of a trunk, from its model (timm's or a user
    factory's) built on the meta device (no memory, no weights)."""
    spec = backbone_spec(backbone)
    with torch.device("meta"):
        model = spec.create_model(pretrained=False, img_size=image_size, num_classes=0, **json.loads(backbone_args))
    rows, cols = spec.grid(image_size)
    return rows * cols, model.num_prefix_tokens, model.embed_dim


def cache_entry_bytes(spec: RunSpec, images: int, early_tokens: bool) -> int:
    """Bytes of the ``.npy`` files of one token-cache entry of ``images`` images of the run's trunk:
    N × (P + HW) × D block inputs and N × HW × D early tokens (if any) in
    the storage dtype, N × HW float32 attentions and N int64 labels, headers included; the
    manifest's few KiB left out."""
    patches, prefix, width = trunk_geometry(spec.backbone, json.dumps(spec.backbone_args, sort_keys=True),
                                            spec.image_size)
    layout = entry_layout(images, patches=patches, prefix=prefix, width=width, dtype=spec.cache_dtype,
                          early_tokens=early_tokens)
    return sum(array.file_bytes for array in layout.values())
