"""The record check's whole-column fast path (benchmark/run/record_schema.py) accepts exactly what
the row-by-row check accepts, returns the same table, and leaves every refusal to the row-by-row
check, so a refusal still names the first bad row: compared on random good tables and on tables
with one bad cell of every kind."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import benchmark.run.record_schema as schema
from benchmark.errors import ProtobenchError


def _table(rng: np.random.Generator, n: int) -> pd.DataFrame:
    labels = rng.integers(0, 5, n)
    predicted = np.where(rng.random(n) < 0.7, labels, (labels + 1) % 5)
    return pd.DataFrame({"index": np.arange(n), "image": [f"birds/{i:04d} a.jpg" for i in range(n)],
                         "label": labels, "predicted": predicted, "correct": labels == predicted,
                         "margin": rng.normal(size=n), "sta": np.where(rng.random(n) < 0.1, np.nan, rng.uniform(0, 100, n)),
                         "sanity_ssim": rng.uniform(-1, 1, n)})


def _row_by_row(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("_all_indices", "_all_images"):
        monkeypatch.setattr(schema, name, lambda values: None)
    monkeypatch.setattr(schema, "_all_numbers", lambda values, bounds, undefined=False: None)


def _outcome(frame: pd.DataFrame) -> pd.DataFrame | str:
    try:
        return schema.check_records(frame, "per_image", "t", len(frame))
    except ProtobenchError as err:
        return str(err)


BAD_CELLS = [("index", 2, -1), ("label", 3, 2.5), ("predicted", 1, -4), ("margin", 4, np.nan), ("sta", 5, 100.5),
             ("sanity_ssim", 0, 1.5), ("image", 6, "../secret"), ("image", 2, "/etc/passwd"), ("image", 7, ""),
             ("image", 1, "a\x07b.jpg"), ("image", 3, "a/../../b"), ("correct", 2, "maybe")]


@pytest.mark.parametrize("seed", range(5))
def test_the_fast_path_equals_the_row_by_row_check(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(seed)
    tables = [_table(rng, 40)]
    for column, row, value in BAD_CELLS:
        bad = _table(rng, 40)
        bad[column] = bad[column].astype(object)
        bad.loc[row, column] = value
        tables.append(bad)
    fast = [_outcome(t) for t in tables]
    _row_by_row(monkeypatch)
    slow = [_outcome(t) for t in tables]
    assert isinstance(fast[0], pd.DataFrame)
    pd.testing.assert_frame_equal(fast[0], slow[0], check_dtype=False)
    for (column, row, _), f, s in zip(BAD_CELLS, fast[1:], slow[1:]):
        assert isinstance(f, str) and f == s, (column, f)
        assert column == "index" or f"row {row + 1}, column {column}" in f
