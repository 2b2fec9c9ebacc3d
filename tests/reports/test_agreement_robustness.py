"""``agreement`` on the robustness stage's scores, defined on its subsample only: the τ interval's
label names how many images such a metric is defined on, and ``n_images`` counts the images where
one of the pair has a value; the interval itself is the bootstrap over all the cell's images,
unchanged (``reports.tau_bootstrap`` as the oracle)."""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmark.cli import main
from leaderboard_runs import IMAGES, ROBUSTNESS_IMAGES, add_robustness, lab_run
from reports.agreement import Bootstrap, cell_cubes, cells, method_means
from reports.load import load_results
from reports.tau_bootstrap import tau_intervals

#: method → (accuracy, pac around, the stage's subsample): tesnet scored on fewer images
METHODS = {"vmfproto": (80, 5.0, ROBUSTNESS_IMAGES), "tesnet": (70, 12.0, 30),
           "protopnet": (55, 30.0, ROBUSTNESS_IMAGES)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("agree_robust")
    for method, (accuracy, pac, images) in METHODS.items():
        for seed in (0, 1):
            add_robustness(lab_run(root, method, seed, accuracy), pac=pac, images=images)
    return root


@pytest.fixture(scope="module")
def taus(runs: Path) -> pd.DataFrame:
    from contextlib import redirect_stdout

    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["agreement", str(runs), "--format", "csv", "--resamples", "200"]) == 0
    return pd.read_csv(io.StringIO(out.getvalue())).set_index(["metric_a", "metric_b"])


def test_the_label_and_n_images_say_on_how_many_images_each_metric_is_defined(taus: pd.DataFrame) -> None:
    # pac is undefined on the first image of each subsample; tesnet's subsample has 30 images
    pac = f"pac defined on 29–{ROBUSTNESS_IMAGES - 1} per method"
    plc = f"plc defined on 30–{ROBUSTNESS_IMAGES} per method"
    whole = taus.loc[("acc", "sta")]
    assert whole["n_images"] == IMAGES and f"bootstrap over {IMAGES} test images (scipy.stats.bootstrap" in \
        whole["interval"]
    with_pac = taus.loc[("acc", "pac")]
    assert with_pac["n_images"] == IMAGES
    assert f"percentile bootstrap over {IMAGES} test images ({pac}) (scipy.stats.bootstrap" in with_pac["interval"]
    both = taus.loc[("pac", "plc")]
    assert both["n_images"] == ROBUSTNESS_IMAGES  # no image outside the subsample can move their τ
    assert f"over {IMAGES} test images ({pac}, {plc})" in both["interval"]
    assert f"(road defined on 30–{ROBUSTNESS_IMAGES} per method)" in taus.loc[("acc", "road")]["interval"]


def test_the_interval_is_the_bootstrap_over_every_image_of_the_cell(runs: Path, taus: pd.DataFrame) -> None:
    frame = load_results([runs])
    (_, cell), = cells(frame)
    methods = [str(m) for m in method_means(cell, ["acc", "pac"]).dropna().index]
    cubes = cell_cubes(cell, methods, ["acc", "pac"])
    boot = Bootstrap()
    low, high = tau_intervals(cubes, [("acc", "pac")], n_resamples=200, seed=boot.seed, level=boot.level,
                              method=boot.method)
    row = taus.loc[("acc", "pac")]
    assert np.isfinite(row["ci_low"]) and (row["ci_low"], row["ci_high"]) == pytest.approx((low[0], high[0]))


def test_the_label_of_a_metric_defined_on_every_image_is_unchanged() -> None:
    boot = Bootstrap()
    assert boot.label(60) == boot.label(60, {"acc": (60, 60)}) == \
        "percentile bootstrap over 60 test images (scipy.stats.bootstrap, 2000 resamples, seed 0; seeds fixed)"
    assert boot.label(60, {"acc": (60, 60), "pac": (24, 24)}) == \
        "percentile bootstrap over 60 test images (pac defined on 24) (scipy.stats.bootstrap, 2000 resamples, " \
        "seed 0; seeds fixed)"
