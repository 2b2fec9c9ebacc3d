"""Local perturbation analysis (benchmark/robustness/perturbation.py): the sine distortion against a
brute-force loop of CaBRNet's rule, identity perturbations giving no drop, the profile recorded."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from benchmark.robustness import perturbation
from benchmark.robustness.perturbation import PERTURBATION_COLUMNS, perturbation_batch, sine_distortion


def test_the_sine_distortion_rolls_rows_then_columns_as_cabrnet_describes() -> None:
    image = torch.rand(3, 20, 20, generator=torch.Generator().manual_seed(0))
    attribution = torch.zeros(20, 20)
    attribution[4:9, 6:16] = 1.0  # box 5 rows × 10 columns: extent max(15 − 6, 8 − 4) = 9
    periods = 5 / 9
    expected = image.numpy().transpose(1, 2, 0).copy()  # H × W × C, as CaBRNet's numpy image
    for y in range(20):
        expected[y] = np.roll(expected[y], int(7.0 * math.sin(2 * math.pi * y * periods)), axis=0)
    for x in range(20):
        expected[:, x] = np.roll(expected[:, x], int(7.0 * math.sin(2 * math.pi * x * periods)), axis=0)
    assert np.array_equal(sine_distortion(image, attribution).numpy().transpose(1, 2, 0), expected)


def test_identity_perturbations_give_no_drop_and_the_stage_records_the_profile(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmark.robustness.live import LiveMethod, normalisation, pixel_images
    from benchmark.robustness.options import RobustnessOptions
    from benchmark.robustness.stage import run_robustness
    from benchmark.run.records import read_records
    from benchmark.run.reevaluate import load_trained
    from test_robustness_stage import _trained

    run_dir = _trained(tmp_path)
    prep = load_trained(run_dir)
    live = LiveMethod(prep.method, prep.trunk, *normalisation(prep.test_set)).eval()
    pixels = pixel_images(prep.test_set, [0, 1, 2])
    labels = torch.tensor([int(prep.test_set.labels[i]) for i in range(3)])
    for name, value in (("BRIGHTNESS", 1.0), ("CONTRAST", 1.0), ("SATURATION", 1.0), ("HUE", 0.0)):
        monkeypatch.setattr(perturbation, name, value)  # each adjustment the identity
    drops = perturbation_batch(live, pixels, labels)
    for name in ("brightness", "contrast", "saturation", "hue"):
        for target in ("focus", "dual"):
            assert np.abs(drops[f"lpa_{name}_{target}"]).max() < 1e-5, (name, target)
    monkeypatch.undo()
    section = run_robustness(run_dir, RobustnessOptions(("perturbation",), images=4, batch_size=2))
    records = read_records(run_dir, "robustness")
    assert set(PERTURBATION_COLUMNS) <= set(records.columns)
    for name in PERTURBATION_COLUMNS:
        assert section["metrics"][name] == pytest.approx(float(np.nanmean(records[name])))
