"""One explanation per image and class, the same rule for every method: the class's J prototype maps,
each weighted by its contribution to the class logit, summed on the token grid.

Rule (Opłatek, Rymarczyk and Zieliński, xAI 2024, "Revisiting FunnyBirds evaluation framework for
prototypical parts networks", code hamer101/FunnyBirds_PrototypesRevisited
``explainers/explainer_wrapper.py``: ``AbstractSSMExplainer.explain`` adds each target-class
prototype's similarity map times its class connection):

    E_c(x) = sum_j  contribution_{c,j}(x) * m_j^+(x) / max_x' m_j^+(x')        (m^+ = max(m, 0))

For ProtoPNet, whose contribution is ``w_{c,j} * max_x sim_j(x)`` and whose map is ``sim_j >= 0``,
this is exactly Opłatek et al.'s ``sum_j w_{c,j} * sim_j(x)``. For a method whose maps are not in
logit units (a log-likelihood, a cosine, a soft assignment) the normalised map carries only the
*where* and the contribution the *how much*, so one rule reads every method in logit units.
A map whose positive part is zero everywhere adds nothing. Upsampling is linear, so the caller
upsamples ``E`` itself (``metrics.upsample_maps``) rather than each map.
"""
from __future__ import annotations

import torch
from torch import Tensor


def class_evidence_maps(maps: Tensor, contributions: Tensor) -> Tensor:
    """``maps`` (B, J, H, W): the class's J prototype maps; ``contributions`` (B, J): what each adds to
    the class logit. Returns (B, H, W) in logit units (see the module's rule)."""
    if maps.dim() != 4:
        raise ValueError(f"maps must be (B, J, H, W); got shape {tuple(maps.shape)}")
    if contributions.shape != maps.shape[:2]:
        raise ValueError(
            f"contributions must be (B, J) = {tuple(maps.shape[:2])} to match the maps; got {tuple(contributions.shape)}"
        )
    positive = maps.clamp_min(0)
    peak = positive.amax(dim=(2, 3), keepdim=True)
    shape = torch.where(peak > 0, positive / torch.where(peak > 0, peak, torch.ones_like(peak)), torch.zeros_like(positive))
    return torch.einsum("bj,bjhw->bhw", contributions.to(shape.dtype), shape)
