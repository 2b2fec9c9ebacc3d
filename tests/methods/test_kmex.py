"""KMEx adapter against reference loops written from the official code's behaviour
(``SrishtiGautam/KMEx`` @ 3e9dfad, utils/common.py): per-class k-means with sklearn's settings of
that era and the same seed, the nearest-centre prediction (``kmc.predict``), the soft similarity
of ``BBOX_fwd``, the split the clustering reads, the maps and the deletion override."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans

from benchmark.cli import main
from benchmark.grid import load_grid
from benchmark.run.prepare import check_images_per_class
from methods.base import TokenBatch, TrainData
from methods.kmex import kmeans_per_class
from methods.registry import build_method
from methods.testing import SyntheticTokens, SyntheticTrainData
from tiny_grid import write_tiny_grid

J = 3


def _method(source: SyntheticTokens, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return build_method("kmex", source.context(J, seed=seed), **overrides)


def _clustered(source: SyntheticTokens, seed: int = 0, **overrides):
    method = _method(source, seed, **overrides)
    stage = method.stages()[0]
    method.on_stage_start(stage, 0, SyntheticTrainData(source, batch_size=7))
    return method


def reference_centres(source: SyntheticTokens, seed: int) -> np.ndarray:
    """get_kmeans_class: the float64 embedding array of the push set, then per class in order
    ``KMeans(n_clusters=H)`` with sklearn < 1.4's defaults (k-means++, n_init 10, 300 iterations,
    tol 1e-4; Lloyd), here seeded by one RandomState shared by the classes."""
    embed = source.tokens.float().mean(dim=1).double().numpy()  # the float32 mean, in a float64 array
    label = source.labels.numpy()
    state = np.random.RandomState(seed)
    centres = np.zeros((source.num_classes * J, embed.shape[1]))
    for k in range(source.num_classes):
        fitted = KMeans(n_clusters=J, init="k-means++", n_init=10, max_iter=300, tol=1e-4, algorithm="lloyd",
                        random_state=state).fit(embed[label == k])
        centres[k * J:(k + 1) * J] = fitted.cluster_centers_
    return centres


def test_clustering_equals_sklearn_kmeans_per_class_with_the_same_seed() -> None:
    source = SyntheticTokens(num_classes=4, images_per_class=12)
    method = _clustered(source, seed=3)
    expected = reference_centres(source, 3)
    assert np.abs(method.prototypes.double().numpy() - expected).max() < 1e-6
    assert int(method.cluster_sizes.sum()) == len(source) and int(method.cluster_sizes.min()) >= 1


@pytest.mark.parametrize("seed", [0, 3])
def test_the_centres_equal_the_official_float32_flow_within_6e_8(seed: int) -> None:
    """The official code clusters the float32 embeddings its encoder returns (its ``test()`` fails
    on float64); the adapter clusters them in float64: the two fits' centres differ by ≤ 6e-8."""
    source = SyntheticTokens(num_classes=4, images_per_class=12)
    method = _clustered(source, seed=seed)
    embed = source.tokens.float().mean(dim=1).numpy()  # float32, as the official encoder returns it
    label, state = source.labels.numpy(), np.random.RandomState(seed)
    official = np.zeros((source.num_classes * J, embed.shape[1]), dtype=np.float32)
    for k in range(source.num_classes):
        official[k * J:(k + 1) * J] = KMeans(n_clusters=J, init="k-means++", n_init=10, max_iter=300, tol=1e-4,
                                             algorithm="lloyd", random_state=state).fit(embed[label == k]).cluster_centers_
    assert official.dtype == np.float32
    assert np.abs(method.prototypes.double().numpy() - official.astype(np.float64)).max() <= 6e-8


def test_blobs_one_per_cluster_are_found_in_sklearns_order() -> None:
    """Three well-separated blobs per class: the centres are the blob means, in sklearn's order."""
    rng = np.random.default_rng(0)
    means = rng.normal(size=(2, J, 5)) * 20
    features = np.concatenate([means[k, j] + rng.normal(size=(6, 5)) for k in range(2) for j in range(J)])
    labels = np.repeat([0, 1], J * 6)
    centres, sizes = kmeans_per_class(features, labels, 2, J, seed=1, n_init=10, max_iter=300, tol=1e-4)
    state = np.random.RandomState(1)
    for k in range(2):
        fitted = KMeans(n_clusters=J, init="k-means++", n_init=10, max_iter=300, tol=1e-4, algorithm="lloyd",
                        random_state=state).fit(features[labels == k])
        assert np.abs(centres[k * J:(k + 1) * J] - fitted.cluster_centers_).max() == 0
        blob_means = np.stack([features[labels == k][j * 6:(j + 1) * 6].mean(0) for j in range(J)])
        assert np.abs(np.sort(centres[k * J:(k + 1) * J], axis=0) - np.sort(blob_means, axis=0)).max() < 1e-9
    assert sizes.tolist() == [6] * (2 * J)


def test_same_seed_same_centres_another_seed_other_centres() -> None:
    source = SyntheticTokens(num_classes=3, images_per_class=10)
    a, b, c = _clustered(source, 0), _clustered(source, 0), _clustered(source, 7)
    assert torch.equal(a.prototypes, b.prototypes)
    assert not torch.equal(a.prototypes, c.prototypes)


def reference_predict(embeddings: torch.Tensor, centres: torch.Tensor) -> list[int]:
    """kmc.predict then kmc_prt_classes: the first centre of least squared distance, its class j // J."""
    predictions = []
    for e in embeddings.tolist():
        best, best_index = math.inf, -1
        for j, p in enumerate(centres.tolist()):
            d = sum((x - y) ** 2 for x, y in zip(e, p))
            if d < best:
                best, best_index = d, j
        predictions.append(best_index // J)
    return predictions


def test_prediction_is_the_class_of_the_nearest_centre_with_ties_to_the_lower_index() -> None:
    source = SyntheticTokens(num_classes=3, images_per_class=6)
    method = _clustered(source)
    batch = source.batch(torch.arange(len(source)))
    with torch.no_grad():
        ours = method.logits(batch).argmax(dim=1).tolist()
    assert ours == reference_predict(batch.tokens.float().mean(1), method.prototypes)
    # an exact tie between a centre of class 2 and one of class 1: the lower index (class 1) wins;
    # a point nearest to another class's centre takes that class
    dim = source.dim
    prototypes = torch.zeros(3 * J, dim)
    prototypes[J + 1, 0], prototypes[2 * J, 0] = 1.0, 1.0
    prototypes[:J] = 10.0
    method.prototypes.copy_(prototypes)
    tokens = torch.zeros(2, 4, dim)
    tokens[1, :, 0] = 10.0
    tie = TokenBatch(tokens=tokens, block_input=None, attention=None, labels=torch.tensor([2, 1]),
                     indices=torch.arange(2), grid=(2, 2))
    predicted = method.logits(tie).argmax(dim=1).tolist()
    assert predicted == reference_predict(tokens.mean(1), prototypes) == [1, 1]


def test_similarity_equals_bbox_fwd_and_its_class_probabilities() -> None:
    source = SyntheticTokens(num_classes=3, images_per_class=6)
    method = _clustered(source)
    batch = source.batch(torch.arange(10))
    embeddings = batch.tokens.float().mean(1)
    dist = torch.cdist(embeddings.double(), method.prototypes.double(), p=2)
    s = torch.log(dist + 1) - torch.log(dist + 1e-4)  # BBOX_fwd
    proba = torch.stack([torch.softmax(s, -1)[:, (torch.arange(3 * J) // J) == k].sum(-1) for k in range(3)], 1)
    ours = method.similarities(batch).double()
    assert (ours - s).abs().max() < 1e-5
    via_logsumexp = torch.softmax(torch.logsumexp(ours.view(10, 3, J), dim=-1), dim=-1)
    assert (via_logsumexp - proba).abs().max() < 1e-6
    with torch.no_grad():
        method.prototypes[0] = embeddings[0]
    assert float(method.similarities(batch)[0, 0]) == pytest.approx(math.log(1 / 1e-4), rel=1e-5)


class _TwoSplits(TrainData):
    """A clean split whose ``epoch_data`` holds other (augmented) images."""

    def __init__(self, clean: SyntheticTokens, augmented: SyntheticTokens) -> None:
        self.clean, self.augmented = SyntheticTrainData(clean), SyntheticTrainData(augmented)

    def batches(self, batch_size, *, shuffle=False):
        return self.clean.batches(batch_size, shuffle=shuffle)

    def __len__(self):
        return len(self.clean)

    @property
    def epoch_data(self):
        return self.augmented


def test_clustering_reads_the_unaugmented_split() -> None:
    clean, augmented = SyntheticTokens(num_classes=3, images_per_class=8), SyntheticTokens(num_classes=3, images_per_class=8,
                                                                                            seed=5)
    method = _method(clean)
    method.on_stage_start(method.stages()[0], 0, _TwoSplits(clean, augmented))
    assert np.abs(method.prototypes.double().numpy() - reference_centres(clean, 0)).max() < 1e-6


def test_maps_are_per_token_similarities_peaking_at_the_centre() -> None:
    source = SyntheticTokens(num_classes=3, images_per_class=6)
    method = _clustered(source)
    batch = source.batch(torch.arange(4))
    with torch.no_grad():
        method.prototypes[J * int(batch.labels[0]) + 1] = batch.tokens[0, 7]
        maps = method.activation_maps(batch, batch.labels)
    chosen = method.prototypes.view(3, J, -1)[batch.labels]
    d = torch.stack([torch.stack([(batch.tokens[b] - chosen[b, j]).norm(dim=-1) for j in range(J)]) for b in range(4)])
    expected = (torch.log(d + 1) - torch.log(d + 1e-4)).view(4, J, 6, 6)
    assert (maps - expected).abs().max() < 1e-4
    assert int(maps[0, 1].flatten().argmax()) == 7


def test_switching_off_takes_the_max_over_the_remaining_centres() -> None:
    source = SyntheticTokens(num_classes=3, images_per_class=6)
    method = _clustered(source)
    batch = source.batch(torch.arange(6))
    classes = batch.labels
    with torch.no_grad():
        s = method.similarities(batch).view(6, 3, J)[torch.arange(6), classes]
        logits = method.logits(batch)
        first = torch.tensor([[True, False, False]] * 6)
        without = method.logits_without(batch, classes, first)
        none_left = method.logits_without(batch, classes, torch.ones(6, J, dtype=torch.bool))
        contributions = method.prototype_contributions(batch, classes)
    rows = torch.arange(6)
    assert torch.allclose(without[rows, classes], s[:, 1:].amax(dim=1))
    assert torch.equal(none_left[rows, classes], torch.zeros(6))
    assert torch.allclose(contributions.sum(1), logits[rows, classes]) and int((contributions != 0).sum()) == 6


def test_a_class_with_fewer_images_than_j_is_refused_by_name() -> None:
    source = SyntheticTokens(num_classes=2, images_per_class=2)
    method = _method(source)
    with pytest.raises(ValueError, match="prototypes_per_class"):
        method.on_stage_start(method.stages()[0], 0, SyntheticTrainData(source))
    with pytest.raises(ValueError, match="n_init"):
        _method(source, n_init=0)


def test_a_run_with_fewer_training_images_than_j_in_a_class_is_refused_before_compute(tmp_path, capsys) -> None:
    """The harness knows KMEx clusters each class (``clusters_each_class``): ``protobench run``
    refuses J = 3 on 2 training images per class after reading the annotations, before any trunk
    pass or run directory; J = 2 passes that check."""
    grid = write_tiny_grid(tmp_path / "kmex.toml", "kmex", tmp_path / "synthbirds", device="cpu", method="kmex",
                           dataset_args={"classes": 3, "images_per_class": 4, "seed": 0}, prototypes_per_class=3)
    assert main(["run", str(grid), "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "clusters each class's training images into J = 3 prototypes" in err and "has 2" in err, err
    assert "use J ≤ 2" in err and not (tmp_path / "runs").exists()
    check_images_per_class(load_grid(grid).runs[0].with_overrides(prototypes_per_class=2))
