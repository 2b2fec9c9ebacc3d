"""The one evaluation preprocessing shared by every dataset (docs/protocol/harness.md, "Datasets").

CUB-format images are cropped to the integer annotation box first; every image is then
``Resize((S, S))`` (aspect ratio not kept, PIL bilinear, torchvision's default),
``ToTensor`` and ImageNet mean/std normalisation — the test-time pipeline of the official
EvalProtoPNet and NPPP code.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torchvision import transforms as T

from benchmark.errors import ProtobenchError

IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)

Transform = Callable[[Image.Image], torch.Tensor]


def model_transform(image_size: int, mean: tuple[float, float, float] = IMAGENET_MEAN,
                    std: tuple[float, float, float] = IMAGENET_STD) -> Transform:
    """``Resize((S, S))`` (bilinear) → ``ToTensor`` → normalisation, as in docs/protocol/harness.md: ImageNet's
    mean/std, or the trunk's (timm data config: CLIP, SigLIP) for ``timm:NAME`` backbones."""
    if image_size < 1:
        raise ProtobenchError(f"image_size must be a positive number of pixels, got {image_size}; pass e.g. 224.")
    return T.Compose(
        [
            T.Resize((image_size, image_size), interpolation=T.InterpolationMode.BILINEAR),
            T.ToTensor(),
            T.Normalize(mean, std),
        ]
    )


def integer_box(x: float, y: float, w: float, h: float) -> tuple[int, int, int, int]:
    """CUB float box → ``(x1, y1, x2, y2)``: each value truncated, then ``x2 = x1 + w``, ``y2 = y1 + h``.

    Same as EvalProtoPNet's ``util/crop_cub_data.py`` (``int(v.split('.')[0])`` per value).
    """
    x1, y1 = int(x), int(y)
    return x1, y1, x1 + int(w), y1 + int(h)


def crop_to_box(image: Image.Image, box: np.ndarray | tuple[int, int, int, int]) -> Image.Image:
    """Crop to the integer box ``(x1, y1, x2, y2)``, clipped to the image like the official
    ``img[y1:y2, x1:x2]`` array slice (a box reaching past the border is not padded)."""
    x1, y1, x2, y2 = (int(v) for v in box)
    return image.crop((x1, y1, min(x2, image.width), min(y2, image.height)))


def open_rgb(path: Path) -> Image.Image:
    """Decode an image file fully and convert it to RGB (CUB has a few greyscale images)."""
    try:
        with Image.open(path) as image:
            image.load()
            return image.convert("RGB")
    except FileNotFoundError as err:
        raise ProtobenchError(
            f"Image file {path} does not exist; re-download or regenerate the dataset."
        ) from err
    except (OSError, SyntaxError, ValueError) as err:
        reason = "not a recognised image format" if isinstance(err, UnidentifiedImageError) else str(err)
        raise ProtobenchError(
            f"Image file {path} could not be decoded ({reason}); re-download or regenerate the dataset."
        ) from err
