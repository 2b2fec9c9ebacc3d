"""Known answers on generated synthbirds: activation maps built from the generator's ground-truth
keypoints (read back through the CUB reader) give the metric values the definitions imply."""
import numpy as np
import pytest
import torch

from benchmark.data import generate_synthbirds, load_dataset
from metrics import explanation_metrics, map_parts_to_frame

J = 3
SIZE = 224  # maps given at the 224 frame: upsampling is the identity, peaks land exactly


@pytest.fixture(scope="module")
def birds(tmp_path_factory):
    root = generate_synthbirds(tmp_path_factory.mktemp("m") / "sb", classes=3, images_per_class=8, seed=0)
    test = load_dataset("synthbirds", root, "test")
    ann = test.annotations
    parts = map_parts_to_frame(ann.part_xy, ann.boxes, ann.part_visible)
    return test, parts


def one_hot_maps(points: np.ndarray) -> torch.Tensor:
    """N×J×224×224 maps, each 1 at its (x, y) point and 0 elsewhere."""
    n, j = points.shape[:2]
    maps = torch.zeros(n, j, SIZE, SIZE)
    for i in range(n):
        for k in range(j):
            x, y = points[i, k]
            maps[i, k, y, x] = 1.0
    return maps


def test_prototypes_on_their_parts_are_fully_consistent_and_stable(birds):
    test, parts = birds
    labels = torch.as_tensor(test.labels)
    px, visible = parts.part_px.numpy(), parts.visible.numpy()
    chosen = []  # per class: J parts visible in every test image of the class
    for c in range(test.num_classes):
        always = np.where(visible[test.labels == c].all(0))[0]
        assert len(always) >= J
        chosen.append(always[:J])
    points = np.stack([px[i, chosen[test.labels[i]]] for i in range(len(test))]).clip(0, SIZE - 1)
    maps = one_hot_maps(points)
    scores = explanation_metrics(maps, maps.clone(), labels, parts, test.num_classes)
    assert scores["con"] == 100.0
    assert scores["sta"] == 100.0  # noise 0: the noisy pass equals the clean one


def test_prototypes_at_one_point_are_not_distinctive(birds):
    test, parts = birds
    points = np.full((len(test), J, 2), 100)
    maps = one_hot_maps(points)
    scores = explanation_metrics(maps, None, torch.as_tensor(test.labels), parts, test.num_classes)
    assert scores["dis"] == 0.0


def test_prototypes_on_background_only_are_never_consistent(birds):
    test, parts = birds
    px, visible = parts.part_px.numpy(), parts.visible.numpy()
    ys, xs = np.mgrid[0:SIZE, 0:SIZE]
    points = []
    for i in range(len(test)):
        p = px[i][visible[i]]
        # Chebyshev distance to the nearest visible part: > 36 puts every part outside the 72-px region
        far = np.min(np.maximum(np.abs(xs[..., None] - p[:, 0]), np.abs(ys[..., None] - p[:, 1])), axis=-1)
        y, x = np.unravel_index(far.argmax(), far.shape)
        assert far[y, x] > 36
        points.append([(x, y)] * J)
    maps = one_hot_maps(np.array(points))
    scores = explanation_metrics(maps, maps.clone(), torch.as_tensor(test.labels), parts, test.num_classes)
    assert scores["con"] == 0.0
    assert scores["sta"] == 100.0  # no part covered in either pass counts as unchanged
