"""The validation split (benchmark/tuning/split.py) and its reading by index (benchmark/tuning/subset.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tiny_grid import tiny_grid

from benchmark.errors import ProtobenchError
from benchmark.tuning.split import validation_split, write_split_file
from benchmark.tuning.subset import RowSubset, augmented_rows
from methods.testing import SyntheticTokens


def test_stratified_rule_by_brute_force():
    rng = np.random.default_rng(3)
    labels = np.repeat(np.arange(7), [30, 29, 2, 3, 10, 31, 15])
    rng.shuffle(labels)
    split = validation_split(labels, fraction=0.1, seed=5)
    for c, n in zip(*np.unique(labels, return_counts=True)):
        held = int(np.sum(labels[split.validation] == c))
        assert held == min(n - 1, max(1, round(0.1 * n)))  # ≥ 1 per class, each class keeps a training image
    assert np.array_equal(np.sort(np.concatenate([split.train, split.validation])), np.arange(len(labels)))
    assert np.intersect1d(split.train, split.validation).size == 0


def test_deterministic_from_seed_and_fraction_and_recorded():
    labels = np.repeat(np.arange(5), 30)
    a, b = validation_split(labels, fraction=0.1, seed=0), validation_split(labels, fraction=0.1, seed=0)
    assert np.array_equal(a.validation, b.validation) and a.fingerprint() == b.fingerprint()
    assert not np.array_equal(a.validation, validation_split(labels, fraction=0.1, seed=1).validation)
    assert len(validation_split(labels, fraction=0.2, seed=0).validation) == 30
    assert a.fingerprint() != validation_split(labels, fraction=0.1, seed=1).fingerprint()


@pytest.mark.parametrize("fraction, seed, message", [
    (0.0, 0, "validation_fraction = 0.0 must be a number in (0, 1)"), (1.5, 0, "must be a number in (0, 1)"),
    (0.1, -1, "validation_seed = -1 must be an integer ≥ 0"),
])
def test_bad_rules_are_refused(fraction, seed, message):
    with pytest.raises(ProtobenchError, match=None) as err:
        validation_split(np.zeros(4, dtype=int), fraction=fraction, seed=seed)
    assert message in str(err.value)


def test_a_class_with_one_image_is_refused():
    with pytest.raises(ProtobenchError, match="class 1 has 1 training image"):
        validation_split(np.array([0, 0, 1]))


def test_split_file_is_readable_json(tmp_path):
    labels = np.repeat(np.arange(3), 4)
    split = validation_split(labels, fraction=0.25, seed=0)
    names = [f"img{i}.jpg" for i in range(12)]
    write_split_file(tmp_path / "validation_split.json", split, names, labels)
    data = json.loads((tmp_path / "validation_split.json").read_text())
    assert data["fingerprint"] == split.fingerprint() and data["validation_images"] == 3
    assert [e["image"] for e in data["images"]] == [names[r] for r in split.validation]


def test_row_subset_reads_rows_by_index_with_local_positions():
    source = SyntheticTokens(num_classes=3, images_per_class=4)
    rows = np.array([1, 5, 6, 11])
    full = source.batch(torch.as_tensor(rows))
    subset = RowSubset(_Source(source), rows)
    got = subset.batch(torch.arange(4), "cpu")
    assert torch.equal(got.tokens, full.tokens) and torch.equal(got.labels, full.labels)
    assert torch.equal(got.indices, torch.arange(4)) and len(subset) == 4
    assert torch.equal(subset.labels, source.labels[torch.as_tensor(rows)])


def test_augmented_rows_follow_the_offline_layout():
    assert augmented_rows(np.array([0, 2]), 3).tolist() == [0, 1, 2, 6, 7, 8]


def test_tuning_fields_change_only_a_trials_run_id(tmp_path):
    spec = tiny_grid("ids", tmp_path).runs[0]
    assert "evaluation_split" not in spec.identity() and "tuned" not in spec.identity()
    assert spec.with_overrides(validation_fraction=0.2).run_id == spec.run_id  # unused by a test-split run
    trial = spec.with_overrides(evaluation_split="validation")
    assert trial.run_id != spec.run_id
    assert trial.with_overrides(validation_seed=1).run_id != trial.run_id
    assert spec.with_overrides(tuned={"study": "s"}).run_id != spec.run_id


class _Source:
    """SyntheticTokens with the TokenSource call signature (device argument)."""

    def __init__(self, tokens: SyntheticTokens) -> None:
        self.tokens, self.labels, self.grid = tokens, tokens.labels, (4, 4)

    def batch(self, indices, device, *, reads=frozenset()):
        return self.tokens.batch(indices)
