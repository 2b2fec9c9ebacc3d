"""L∞ projected gradient descent on the pixels a mask frees (Madry et al., ICLR 2018), as the official
spatial-misalignment code runs it: cleverhans' ``projected_gradient_descent`` (cleverhans-lab/cleverhans,
``cleverhans/torch/attacks/projected_gradient_descent.py``, ``norm=np.inf``, ``rand_init=True``)
around ``PPNetAdversarialWrapper``, whose forward pastes the attacked pixels outside the mask onto the
clean image (``x * mask + img * (1 - mask)``).

Written here rather than taken from torchattacks (its 3.5.1 pins ``requests~=2.25.1``, which
breaks the suite's other dependencies) and tested step for step against cleverhans' function
(tests/helpers/cleverhans_pgd.py). The start is uniform in [−ε, ε] from a seeded generator; each
step moves every free pixel by ``step · sign(−∇ objective)`` (the objective is *decreased*),
projects onto the ε-ball around the clean image and clamps to [0, 1] (the suite attacks pixels,
cleverhans' ``clip_min=0, clip_max=1``).
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


def masked_pgd(objective: Callable[[Tensor], Tensor], images: Tensor, mask: Tensor, *, epsilon: float, step: float,
               steps: int, generator: torch.Generator) -> Tensor:
    """The attacked images: ``objective`` (B images → B values, each image's own) decreased by
    ``steps`` signed steps within ``epsilon`` of ``images`` (B×3×S×S in [0, 1]), changing only the
    pixels where ``mask`` (B×1×S×S) is 1."""
    clean = images.detach()
    free = mask.to(clean.dtype)
    start = torch.empty(clean.shape, dtype=clean.dtype).uniform_(-epsilon, epsilon, generator=generator)
    adv = torch.clamp(clean + start.to(clean.device), 0.0, 1.0)
    for _ in range(steps):
        adv = adv.detach().requires_grad_(True)
        pasted = adv * free + clean * (1 - free)
        gradient, = torch.autograd.grad(objective(pasted).sum(), adv)
        adv = adv.detach() - step * gradient.sign()
        adv = torch.clamp(clean + torch.clamp(adv - clean, -epsilon, epsilon), 0.0, 1.0)
    return (adv * free + clean * (1 - free)).detach()
