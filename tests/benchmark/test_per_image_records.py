"""Per-image and per-prototype records: each metric's parts give back its score, logit margins
against a loop, the stored tables round-trip in both formats (source: issue 19 item 1)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from benchmark.run.records import read_records, write_records
from metrics import PartGroundTruth, explanation_metrics, explanation_records, logit_margins

P = 15


def _case(n: int = 9, j: int = 3, grid: int = 8, num_classes: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    maps = torch.randn(n, j, grid, grid, generator=g)
    noisy = maps + 0.3 * torch.randn(n, j, grid, grid, generator=g)
    labels = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2, 2])[:n]  # unbalanced classes
    parts = PartGroundTruth(torch.randint(0, 225, (n, P, 2), generator=g), torch.rand(n, P, generator=g) < 0.7)
    masks = torch.rand(n, 224, 224, generator=g) < 0.4
    return maps, noisy, labels, parts, masks


def test_the_parts_of_each_metric_give_back_its_score() -> None:
    maps, noisy, labels, parts, masks = _case()
    rec = explanation_records(maps, noisy, labels, parts, 3, masks=masks)
    assert rec.scores == explanation_metrics(maps, noisy, labels, parts, 3, masks=masks)
    assert set(rec.per_image) == {"sta", "dis", "comp"} and set(rec.per_prototype) == {"con", "sta"}
    assert all(v.shape == (9,) for v in rec.per_image.values())
    assert all(v.shape == (3, 3) for v in rec.per_prototype.values())
    assert float(rec.per_image["dis"].mean()) == pytest.approx(rec.scores["dis"], abs=1e-9)
    assert float(rec.per_image["comp"].mean()) == pytest.approx(rec.scores["comp"], abs=1e-9)
    assert float(rec.per_prototype["con"].mean()) == pytest.approx(rec.scores["con"], abs=1e-9)
    assert float(rec.per_prototype["sta"].mean()) == pytest.approx(rec.scores["sta"], abs=1e-9)
    # stability is class-balanced: per class the mean of its images' shares, then over classes
    frame = pd.DataFrame({"label": labels.numpy(), "sta": rec.per_image["sta"].numpy()})
    assert frame.groupby("label")["sta"].mean().mean() == pytest.approx(rec.scores["sta"], abs=1e-9)


def test_undefined_scores_have_no_parts() -> None:
    maps, _, labels, parts, _ = _case(j=1)
    rec = explanation_records(maps, None, labels, parts, 3)
    assert set(rec.per_image) == set() and set(rec.per_prototype) == {"con"}


def test_margins_equal_a_loop_over_the_other_classes() -> None:
    logits = torch.randn(20, 5, generator=torch.Generator().manual_seed(1))
    labels = torch.randint(0, 5, (20,), generator=torch.Generator().manual_seed(2))
    expected = [float(logits[i, y]) - max(float(logits[i, c]) for c in range(5) if c != y)
                for i, y in enumerate(labels.tolist())]
    np.testing.assert_allclose(logit_margins(logits, labels).numpy(), expected, rtol=0, atol=1e-6)
    assert ((logit_margins(logits, labels) > 0) == (logits.argmax(1) == labels)).all()


@pytest.mark.parametrize("pyarrow", [False, True])
def test_tables_round_trip_and_one_format_is_kept(tmp_path, monkeypatch, pyarrow: bool) -> None:
    import importlib.util

    if pyarrow:
        pytest.importorskip("pyarrow")
    else:
        real = importlib.util.find_spec
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else real(name, *a))
    frame = pd.DataFrame({"index": [0, 1], "image": ["a/b c.jpg", "d/e.jpg"], "label": [0, 1], "predicted": [0, 0],
                          "correct": [True, False], "margin": [0.5, -math.inf], "sta": [100.0, math.nan]})
    (tmp_path / "per_image.parquet").write_bytes(b"stale")  # the other format, from an earlier evaluation
    (tmp_path / "per_image.csv.gz").write_bytes(b"stale")
    (written,) = write_records(tmp_path, {"per_image": frame})
    assert written.name == ("per_image.parquet" if pyarrow else "per_image.csv.gz")
    assert [p.name for p in tmp_path.iterdir()] == [written.name]
    pd.testing.assert_frame_equal(read_records(tmp_path), frame)
    assert read_records(tmp_path, "per_prototype") is None
