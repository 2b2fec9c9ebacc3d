"""metrics/funnybirds_explain.py: the class evidence map, upsampled bilinearly, read as the official
``get_part_importance`` reads an attribution (tests/helpers/funnybirds_official.py, verbatim)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import funnybirds_official as official
from metrics.class_evidence import class_evidence_maps
from metrics.funnybirds_explain import part_explanations
from metrics.funnybirds_parts import COLOURS_TO_PART


class FixedExplainer(official.AbstractAttributionExplainer):
    def __init__(self, attribution: torch.Tensor) -> None:
        self.attribution = attribution

    def explain(self, input, target=None):
        return self.attribution


def _part_map(size: int, rng: np.random.Generator) -> np.ndarray:
    colours = [*COLOURS_TO_PART, (0, 0, 0), (255, 255, 255), (204, 204, 204), (204, 204, 207)]
    coarse = rng.integers(len(colours), size=(size // 8, size // 8)).repeat(8, 0).repeat(8, 1)
    return np.array(colours, dtype=np.uint8)[coarse]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_part_importance_equals_the_official_reading_of_the_evidence_map(seed: int) -> None:
    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)
    maps = torch.randn(3, 4, 7, 7, generator=g, dtype=torch.float64)
    contributions = torch.randn(3, 4, generator=g, dtype=torch.float64)
    part_map = _part_map(64, rng)
    ours = part_explanations(maps, contributions, part_map)
    # oracle: the one rule (metrics/class_evidence.py, tested against a loop in test_class_evidence.py),
    # torch's bilinear upsampling, the official part reading
    evidence = class_evidence_maps(maps, contributions).double()
    full = F.interpolate(evidence[:, None], size=(64, 64), mode="bilinear", align_corners=False)
    pm = torch.from_numpy(part_map).permute(2, 0, 1)[None].double()
    for k in range(3):
        explainer = FixedExplainer(full[k:k + 1])
        expected = explainer.get_part_importance(full[k:k + 1], pm, None, COLOURS_TO_PART, with_bg=True)
        assert set(expected) == set(ours[k].importance)
        assert max(abs(expected[key] - ours[k].importance[key]) for key in expected) < 1e-9
        assert abs(ours[k].total - float(full[k].sum())) < 1e-9


def test_a_part_map_that_is_not_square_is_refused() -> None:
    with pytest.raises(ValueError, match="square"):
        part_explanations(torch.zeros(1, 1, 2, 2), torch.zeros(1, 1), np.zeros((8, 6, 3), dtype=np.uint8))
