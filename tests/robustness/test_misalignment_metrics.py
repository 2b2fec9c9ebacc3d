"""PAC, PRC, PLC and the attack mask (metrics/misalignment.py) equal the official spatial-misalignment
functions (tests/helpers/sacha_misalignment_official.py, run verbatim) on identical maps."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import sacha_misalignment_official as official
from metrics.misalignment import attack_masks, high_activation_box, misalignment_scores

SIZE = 224


def _maps(seed: int, batch: int, prototypes: int, grid: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, prototypes, grid, grid, generator=generator).exp()  # positive, as log-similarities


@pytest.mark.parametrize("grid", [7, 16])
def test_pac_prc_plc_equal_the_official_definitions(grid: int) -> None:
    official.img_size = SIZE
    C, J, B = 5, 3, 6
    before = _maps(0, B, C * J, grid)
    after = before * _maps(1, B, C * J, grid) ** 0.3  # moved, not independent
    labels = torch.tensor([0, 1, 2, 3, 4, 2])
    for k in (1, 2):
        own_maps = before.view(B, C, J, grid, grid)[torch.arange(B), labels]
        chosen = own_maps.flatten(2).amax(dim=2).topk(k, dim=1).indices
        attacked = labels[:, None] * J + chosen
        own = torch.arange(C * J)[None, :] // J == labels[:, None]
        ours = misalignment_scores(before, after, attacked, own, SIZE)
        for b in range(B):
            ref = official.get_activation_change_metrics(before[b].numpy(), after[b].numpy(), attacked[b].numpy(),
                                                         np.arange(int(labels[b]) * J, int(labels[b]) * J + J))
            assert abs(float(ours["pac"][b]) - ref["PAC"]) < 1e-9
            assert float(ours["prc"][b]) == ref["PRC"]
            assert abs(float(ours["plc"][b]) - ref["PLC"]) < 1e-9


def test_plc_is_zero_for_an_unmoved_map_and_pac_undefined_without_activation() -> None:
    before = _maps(2, 2, 4, 8)
    scores = misalignment_scores(before, before.clone(), torch.tensor([[0], [1]]),
                                 torch.tensor([[True, True, False, False]] * 2), SIZE)
    assert scores["plc"].tolist() == [0.0, 0.0] and scores["prc"].tolist() == [0.0, 0.0]
    assert scores["pac"].abs().max() < 1e-12
    zero = torch.zeros(1, 2, 8, 8)
    assert torch.isnan(misalignment_scores(zero, zero, torch.tensor([[0]]), torch.tensor([[True, False]]), SIZE)["pac"]).all()


@pytest.mark.parametrize("grid", [8, 16])
def test_the_attack_mask_equals_the_official_mask(grid: int) -> None:
    official.img_size = SIZE
    maps = _maps(3, 4, 3, grid)
    chosen = torch.tensor([[0], [2], [1], [0]])
    ours = attack_masks(maps, chosen, SIZE)
    ref = official.get_all_class_proto_low_activation_bbox_mask([c.numpy() for c in chosen], maps.numpy())
    assert np.array_equal(ours.numpy(), ref)
    two = attack_masks(maps, torch.tensor([[0, 1]] * 4), SIZE)
    ref_two = official.get_all_class_proto_low_activation_bbox_mask([np.array([0, 1])] * 4, maps.numpy())
    assert np.array_equal(two.numpy(), ref_two)


def test_the_high_activation_box_is_protopnets_crop() -> None:
    pixel_map = torch.rand(20, 20, generator=torch.Generator().manual_seed(4)) * 0.5
    pixel_map[5:9, 10:15] = 1.0  # 20 of 400 pixels: exactly the top 5 %
    assert high_activation_box(pixel_map, 95) == official.find_high_activation_crop(pixel_map.numpy(), 95) \
        == (5, 9, 10, 15)


def test_pac_of_log_density_maps_is_the_official_pac_of_their_densities_whatever_the_constant() -> None:
    """vMFProto's maps are log densities with a constant log C_D(κ) ≈ +1457: PAC reads exp(map), so it
    equals the official PAC on the densities, and adding the constant moves nothing (on the raw maps the
    ratio would measure the constant). PRC and PLC are those of the raw maps."""
    official.img_size = SIZE
    C, J, B, grid = 4, 2, 5, 7
    log_before = torch.randn(B, C * J, grid, grid, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    log_after = log_before + 0.3 * torch.randn(B, C * J, grid, grid, generator=torch.Generator().manual_seed(4),
                                               dtype=torch.float64)
    labels = torch.tensor([0, 1, 2, 3, 1])
    chosen = log_before.view(B, C, J, grid, grid)[torch.arange(B), labels].flatten(2).amax(dim=2).topk(1, dim=1).indices
    attacked = labels[:, None] * J + chosen
    own = torch.arange(C * J)[None, :] // J == labels[:, None]
    ours = misalignment_scores(log_before, log_after, attacked, own, SIZE, log_density=True)
    shifted = misalignment_scores(log_before + 1457.1, log_after + 1457.1, attacked, own, SIZE, log_density=True)
    raw = misalignment_scores(log_before, log_after, attacked, own, SIZE)
    for b in range(B):
        ref = official.get_activation_change_metrics(log_before[b].exp().numpy(), log_after[b].exp().numpy(),
                                                     attacked[b].numpy(), np.arange(int(labels[b]) * J, int(labels[b]) * J + J))
        assert abs(float(ours["pac"][b]) - ref["PAC"]) < 1e-9
    assert torch.allclose(shifted["pac"], ours["pac"], atol=1e-9) and not torch.isnan(ours["pac"]).any()
    assert torch.equal(ours["prc"], raw["prc"]) and torch.equal(ours["plc"], raw["plc"])
