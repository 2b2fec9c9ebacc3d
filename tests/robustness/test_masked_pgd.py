"""The masked L∞ PGD (benchmark/robustness/attack.py) equals cleverhans' ``projected_gradient_descent``
(tests/helpers/cleverhans_pgd.py, verbatim) around the official wrapper's pasting, step for step."""
from __future__ import annotations

import numpy as np
import torch

import cleverhans_pgd
from benchmark.robustness.attack import masked_pgd


def _objective(weight: torch.Tensor):
    def value(x: torch.Tensor) -> torch.Tensor:  # one number per image, non-linear in the pixels
        return torch.tanh((x * weight).flatten(1)).sum(dim=1)
    return value


def test_masked_pgd_equals_cleverhans_pgd_on_the_official_wrapper() -> None:
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(3, 3, 12, 12, generator=generator)
    mask = (torch.rand(3, 1, 12, 12, generator=generator) > 0.4).float()
    weight = torch.randn(1, 3, 12, 12, generator=generator)
    objective = _objective(weight)
    ours = masked_pgd(objective, images, mask, epsilon=0.09, step=0.01, steps=5,
                      generator=torch.Generator().manual_seed(7))

    def wrapper(x: torch.Tensor) -> torch.Tensor:  # PPNetAdversarialWrapper's pasting; logits [s, 0], label 0:
        pasted = x * mask + images * (1 - mask)  # cross-entropy falls as s rises, so its ascent is s's descent
        s = objective(pasted)
        return torch.stack([s, torch.zeros_like(s)], dim=1)

    torch.manual_seed(7)  # cleverhans draws its start from the global generator
    theirs = cleverhans_pgd.projected_gradient_descent(wrapper, images, 0.09, 0.01, 5, np.inf, clip_min=0.0,
                                                       clip_max=1.0, y=torch.zeros(3, dtype=torch.int64))
    theirs = theirs * mask + images * (1 - mask)  # attack_images_target_class_prototypes pastes the result too
    assert (ours - theirs).abs().max() < 1e-6
    assert (ours - images).abs().max() <= 0.09 + 1e-6
    assert torch.equal(ours * (1 - mask), images * (1 - mask))  # the kept region never changes
    assert objective(ours).sum() < objective(images).sum()
