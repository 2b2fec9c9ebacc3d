"""One explanation per image and class, the same rule for every method: the class's J prototype maps,
each weighted by its contribution to the class logit, summed on the token grid.

Rule (after Opłatek, Rymarczyk and Zieliński, xAI 2024, "Revisiting FunnyBirds evaluation framework for
prototypical parts networks", code hamer101/FunnyBirds_PrototypesRevisited
``explainers/explainer_wrapper.py``: ``AbstractSSMExplainer.explain`` adds each target-class
prototype's similarity map times its class connection):

    E_c(x) = sum_j  contribution_{c,j}(x) * (m_j(x) - min m_j) / (max m_j - min m_j)

(a constant map spreads its contribution evenly: its shape is 1 everywhere). Each map is min-max
normalised, so the rule does not depend on a map's additive constant or its units: vMFProto's maps
are log densities whose constant (log C_D(kappa), about +1,458 at D = 768) dwarfs their spread of
at most 2 kappa, and a peak-only normalisation would leave them nearly flat. The normalised map
carries the *where*, the contribution the *how much*, so one rule reads every method in logit units.
For ProtoPNet, whose contribution is ``w_{c,j} * max_x sim_j(x)``, this is Opłatek et al.'s
``sum_j w_{c,j} * sim_j(x)`` wherever a map's floor is 0 (``sim = log((d + 1) / (d + eps))`` tends
to 0 far from its prototype); otherwise it differs by each map's floor, which carries no location.
Upsampling is linear, so the caller upsamples ``E`` itself (``metrics.upsample_maps``) rather than
each map.
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
    floor = maps.amin(dim=(2, 3), keepdim=True)
    spread = maps.amax(dim=(2, 3), keepdim=True) - floor
    flat = spread <= 0
    shape = torch.where(flat, torch.ones_like(maps), (maps - floor) / torch.where(flat, torch.ones_like(spread), spread))
    return torch.einsum("bj,bjhw->bhw", contributions.to(shape.dtype), shape)
