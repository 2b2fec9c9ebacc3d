"""benchmark/run/funnybirds_eval.py without a trunk: the interventions' logits are split back per image in
the order the protocols index them, and a method without maps gets accuracy only, its empty scores stating
why."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmark.data import load_dataset
from benchmark.data.funnybirds import read_funnybirds_set
from benchmark.data.synthetic_funnybirds import generate_funnybirds
from benchmark.run.funnybirds_eval import (FUNNYBIRDS_KEYS, FunnyBirdsData, InterventionImages,
                                           funnybirds_evaluation, protocol_scores)


class IndexSource:
    """A token source whose tokens are just each row's index (and the image's mean pixel)."""

    grid = (2, 2)

    def __init__(self, values: np.ndarray, labels: np.ndarray) -> None:
        self.values, self.labels = torch.as_tensor(values, dtype=torch.float64), torch.as_tensor(labels)

    def __len__(self) -> int:
        return len(self.labels)

    def batch(self, indices, device, *, reads=frozenset()):
        return type("Batch", (), {"tokens": self.values[indices], "labels": self.labels[indices],
                                  "grid": self.grid, "__len__": lambda s: len(indices)})()


class PixelMeanMethod(torch.nn.Module):
    """Logits from each image's mean colour through a fixed random matrix; maps optional."""

    reads = frozenset()

    def __init__(self, classes: int, with_maps: bool) -> None:
        super().__init__()
        self.weight = torch.randn(3, classes, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        self.with_maps, self.prototypes_per_class = with_maps, 2

    def appended_block(self):
        return None

    def logits(self, batch):
        return batch.tokens @ self.weight

    def activation_maps(self, batch, classes):
        if not self.with_maps:
            raise NotImplementedError("a black-box head")
        return torch.rand(len(classes), 2, 4, 4, generator=torch.Generator().manual_seed(int(classes.sum())),
                          dtype=torch.float64)

    def prototype_contributions(self, batch, classes):
        return torch.ones(len(classes), 2, dtype=torch.float64)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = generate_funnybirds(tmp_path_factory.mktemp("fb") / "set", classes=9, images_per_class=2, seed=1,
                               image_size=64)
    test = load_dataset("funnybirds", root, "test")
    truth = read_funnybirds_set(root, "test")
    interventions = InterventionImages(test, truth)
    means = np.stack([interventions[k][0].mean(dim=(1, 2)).numpy() for k in range(len(interventions))])
    clean = np.stack([test[i][0].mean(dim=(1, 2)).numpy() for i in range(len(test))])
    return truth, IndexSource(clean, truth.labels), IndexSource(means, interventions.labels), interventions


def test_intervention_logits_line_up_with_the_protocols_indexing(data) -> None:
    truth, clean, inter, images = data
    method = PixelMeanMethod(9, with_maps=True)
    logits = method.logits(clean.batch(torch.arange(len(clean)), "cpu")).numpy()
    scores, boxed = protocol_scores(method, logits, clean, FunnyBirdsData(truth, inter), batch_size=4,
                                    device=torch.device("cpu"), precision="fp32")
    assert boxed is None and 0 <= scores.sd <= 1
    # nothing removed (mask 0) is the original picture; its logits equal the clean image's
    first = images.owners.tolist().index(3)
    assert images.paths[first].name == "body_beak_eye_foot_tail_wing.png"
    assert torch.equal(method.logits(inter.batch(torch.tensor([first]), "cpu")),
                       method.logits(clean.batch(torch.tensor([3]), "cpu")))
    assert len(images) == 9 * 32 + int(truth.background.sum())


def test_a_method_without_maps_gets_accuracy_only_and_says_why(data) -> None:
    truth, clean, inter, _ = data
    method = PixelMeanMethod(9, with_maps=False)
    logits = method.logits(clean.batch(torch.arange(len(clean)), "cpu")).float()
    record, per_image = funnybirds_evaluation(method, None, logits, clean, FunnyBirdsData(truth, inter), batch_size=4,
                                              device=torch.device("cpu"), precision="fp32")
    assert record["scores"]["acc"] is not None and per_image == {}
    assert all(record["scores"][key] is None for key in FUNNYBIRDS_KEYS)
    (note,) = record["notes"].values()
    assert "gives no activation maps (a black-box head)" in note and "accuracy only" in note
