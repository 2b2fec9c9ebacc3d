"""The readers read each run's records once and keep only its per-image values
(reports/per_image.py): ``agreement`` and the whole site read every run's per-image table exactly
once, the values kept are the records' (float32 where that is exact), and a rewritten record file
is read again."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import benchmark.run.records as records_module
from benchmark.cli import main
from benchmark.estimates.reading_set import write_reading_set
from reports.per_image import run_values, seed_values


@pytest.fixture
def counted_reads(monkeypatch) -> Counter:
    reads: Counter = Counter()
    original = records_module.read_records

    def counting(run_dir, table: str = "per_image"):
        reads[(str(run_dir), table)] += 1
        return original(run_dir, table)

    monkeypatch.setattr(records_module, "read_records", counting)
    return reads


def per_image_reads(reads: Counter) -> list[int]:
    return [count for (_, table), count in reads.items() if table == "per_image"]


def test_agreement_reads_every_run_once(tmp_path: Path, counted_reads: Counter, capsys) -> None:
    written = write_reading_set(tmp_path / "runs", 21, images=40)
    assert main(["agreement", str(written.root), "--resamples", "100"]) == 0
    assert "Kendall's τ" in capsys.readouterr().out
    assert per_image_reads(counted_reads) == [1] * 21


def test_the_site_reads_every_run_once_for_all_its_pages(tmp_path: Path, counted_reads: Counter) -> None:
    written = write_reading_set(tmp_path / "runs", 21, images=40)
    assert main(["site", str(written.root), "--out", str(tmp_path / "site")]) == 0
    assert per_image_reads(counted_reads) == [1] * 21  # run pages, overview, comparisons, agreement
    assert (tmp_path / "site" / "agreement.html").read_text().count("percentile bootstrap over 40 test images") > 0


def test_the_kept_values_are_the_records_and_a_rewritten_file_is_read_again(tmp_path: Path,
                                                                            counted_reads: Counter) -> None:
    written = write_reading_set(tmp_path / "runs", 7, images=40)
    run_dir = str(next((written.root / "cub_reading").iterdir()))
    records = records_module.read_records(Path(run_dir))
    kept = run_values(run_dir)
    assert kept.columns["sta"].dtype == np.float32 and kept.columns["correct"].dtype == np.float32  # exact
    assert np.array_equal(kept.values("sta"), records["sta"].to_numpy(), equal_nan=True)
    assert np.array_equal(kept.values("correct"), 100.0 * records["correct"].to_numpy())
    other = str(sorted((written.root / "cub_reading").iterdir())[-1])
    assert run_values(other).ids is kept.ids  # one shared Index per test split
    before = counted_reads[(run_dir, "per_image")]
    run_values(run_dir)
    assert counted_reads[(run_dir, "per_image")] == before  # cached
    changed = records.assign(sta=np.float64(1 / 3))  # not a float32: kept as float64
    records_module.write_records(Path(run_dir), {"per_image": changed})
    table = seed_values(pd.DataFrame({"seed": [0], "run_dir": [run_dir]}), "sta")
    assert counted_reads[(run_dir, "per_image")] == before + 1 and table.to_numpy().tolist() == [[1 / 3] * 40]
