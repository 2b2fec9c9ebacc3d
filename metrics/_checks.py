"""Argument checks shared by the metric functions.

Every check raises ``ValueError`` whose message starts with the argument's name, so a
caller sees at once which input has the wrong shape, dtype or value.
"""
from __future__ import annotations

import torch
from torch import Tensor


def check_maps(name: str, maps: object) -> Tensor:
    """``maps`` must be a finite floating tensor ``(N, J, h, w)`` with J, h, w >= 1."""
    if not isinstance(maps, Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor of shape (N, J, h, w), got {type(maps).__name__}")
    if maps.dim() != 4:
        raise ValueError(f"{name}: expected shape (N, J, h, w), got {tuple(maps.shape)}")
    if not maps.is_floating_point():
        raise ValueError(f"{name}: expected a floating-point tensor, got dtype {maps.dtype}")
    if maps.shape[1] < 1 or maps.shape[2] < 1 or maps.shape[3] < 1:
        raise ValueError(f"{name}: J, h and w must be >= 1, got shape {tuple(maps.shape)}")
    if maps.numel() and not bool(torch.isfinite(maps).all()):
        raise ValueError(f"{name}: contains NaN or infinite values")
    return maps


def check_noisy_maps(noisy_maps: object, clean_maps: Tensor) -> Tensor:
    """``noisy_maps`` must be valid maps of exactly ``clean_maps``' shape."""
    check_maps("noisy_maps", noisy_maps)
    if noisy_maps.shape != clean_maps.shape:
        raise ValueError(
            f"noisy_maps: shape {tuple(noisy_maps.shape)} differs from clean_maps {tuple(clean_maps.shape)}"
        )
    return noisy_maps


def check_labels(name: str, labels: object, n: int, num_classes: int, device: torch.device) -> Tensor:
    """``labels`` must be an integer tensor ``(n,)`` with values in ``[0, num_classes)``."""
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes: expected a positive int, got {num_classes!r}")
    if not isinstance(labels, Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor of shape ({n},), got {type(labels).__name__}")
    if labels.shape != (n,):
        raise ValueError(f"{name}: expected shape ({n},) (one label per image), got {tuple(labels.shape)}")
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ValueError(f"{name}: expected an integer tensor, got dtype {labels.dtype}")
    if n and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
        raise ValueError(
            f"{name}: values must lie in [0, {num_classes}) (num_classes={num_classes}), "
            f"got range [{int(labels.min())}, {int(labels.max())}]"
        )
    return labels.to(device=device, dtype=torch.int64)


def check_bool(name: str, x: object, shape: tuple[int, ...]) -> Tensor:
    """``x`` must be a bool tensor of exactly ``shape``."""
    if not isinstance(x, Tensor):
        raise ValueError(f"{name}: expected a bool torch.Tensor of shape {shape}, got {type(x).__name__}")
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(x.shape)}")
    if x.dtype != torch.bool:
        raise ValueError(f"{name}: expected dtype torch.bool, got {x.dtype}")
    return x


def check_positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")
    return value
