"""The robustness stage's scores reach the reports: the tidy frame (result.json's ``robustness``
section), the per-image values (NaN outside the subsample), ``compare`` and ``agreement`` (a
lower-is-better metric ranked negated)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmark.robustness.options import RobustnessOptions
from benchmark.robustness.stage import run_robustness
from reports.agreement import check_agreement_input, method_means, per_image_cube
from reports.load import load_results
from reports.paired import compare_levels
from reports.per_image import run_values


@pytest.fixture(scope="module")
def scored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from benchmark.run.runner import execute_run
    from tiny_grid import tiny_grid

    root = tmp_path_factory.mktemp("robust_reports")
    for method in ("vmfproto", "protopnet", "linear_probe"):
        for seed in (0, 1):
            spec = tiny_grid("g", root / "data").runs[0].with_overrides(
                method=method, seed=seed, image_size=28,
                method_args={"end_to_end_epochs": 1} if method == "vmfproto" else {})
            run_dir = root / "runs" / "g" / spec.run_id
            execute_run(spec, run_dir, cache_root=root / "runs" / ".token-cache", progress=False)
            run_robustness(run_dir, RobustnessOptions(("misalignment",), steps=1, images=5, batch_size=5))
    return root / "runs"


def test_the_tidy_frame_and_the_per_image_values_hold_the_robustness_scores(scored: Path) -> None:
    frame = load_results([scored])
    assert frame["acc_attacked"].notna().all() and frame["pac"].notna().sum() == 4  # none for the reference row
    values = run_values(frame[frame["method"] == "vmfproto"]["run_dir"].iloc[0])
    plc = values.values("plc")
    assert len(plc) == 16 and np.isfinite(plc).sum() == 5  # the subsample; NaN on the other test images
    assert set(np.unique(values.values("correct_attacked")[np.isfinite(plc)])) <= {0.0, 100.0}


def test_compare_and_agreement_include_them(scored: Path) -> None:
    frame = load_results([scored])
    comparisons = compare_levels(frame, "method", metrics=["acc_attacked", "plc"])
    assert {c.metric for c in comparisons} == {"acc_attacked", "plc"}
    assert any(c.n_images is not None and c.n_images > 0 for c in comparisons if c.metric == "plc")
    for c in comparisons:  # the probability of improvement in the metric's direction (rliable's, on the runs)
        runs_a, runs_b = (frame[frame["method"] == level][c.metric].dropna().to_numpy() for level in (c.a, c.b))
        better = (runs_a[:, None] < runs_b[None, :]) if c.metric == "plc" else (runs_a[:, None] > runs_b[None, :])
        expected = better.mean() + 0.5 * (runs_a[:, None] == runs_b[None, :]).mean() if len(runs_a) and len(runs_b) else np.nan
        assert c.prob_improvement == pytest.approx(expected, nan_ok=True)
    metrics = check_agreement_input(frame)
    assert {"acc_attacked", "pac", "prc", "plc"} <= set(metrics)
    means = method_means(frame, ["plc", "acc_attacked"])
    raw = frame.groupby("method")[["plc", "acc_attacked"]].mean()
    pd.testing.assert_series_equal(means["plc"], -raw["plc"])  # lower is better: ranked negated
    pd.testing.assert_series_equal(means["acc_attacked"], raw["acc_attacked"])
    cube, ids = per_image_cube(frame, ["protopnet", "vmfproto"], "plc")
    assert cube.shape == (2, 2, 16) and np.isfinite(cube).sum() == 2 * 2 * 5
