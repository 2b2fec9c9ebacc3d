"""One interval policy for a table cell's mean, the one function every view calls (``report --ci``
and ``--reference`` through ``reports.aggregate``, the site's overview, the leaderboard, the EEE
export), so one cell shows one interval wherever it appears (issue 55):

- a metric whose runs all have per-image records (``reports.per_image.PER_IMAGE_METRICS``: acc,
  sta, dis, comp, sanity, sanity_signed) gets the crossed seeds × images interval
  (``reports.stats.crossed_mean``; one seed: Student t over the images);
- any other metric (``con``, the metrics without records, a run evaluated before records existed)
  falls back to the Student t interval over seeds (``reports.stats.seed_interval``), labelled so;
- a cell whose runs are identical across seeds (every per-image value of the trained model equal: a
  method that ignores the seed, or whose seeds converge to one result) is **deterministic**: its n
  counts distinct results (1), and its interval is over the images of that one result only, saying
  so; a metric without per-image values then has no interval. The sanity columns are left out of
  that comparison and keep their seeds (n, crossed interval): their re-initialised head is drawn
  from the run's seed by design (metrics/sanity.py), so they vary even where the model does not.

Each interval states its method and n (``CellInterval.procedure``).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from reports.columns import METRIC_RANGES

#: the label of a cell whose seeds give one result
DETERMINISTIC = "deterministic: seeds give one result"
#: per-image columns that read the seed's re-initialised head, not the trained model (metrics/sanity.py)
RANDOMISED_COLUMNS: tuple[str, ...] = ("sanity", "sanity_signed", "sanity_ssim")
#: the fallback's label
SEEDS_FALLBACK = "Student t over seeds (no per-image records of the metric)"


@dataclass(frozen=True)
class CellInterval:
    """``ci`` (None: none, ``procedure`` says why), clipped to the metric's range (``clipped``);
    ``procedure`` the method and its n; ``n`` the distinct results behind the mean (seeds, 1 where
    ``deterministic``); ``se`` its standard error where the procedure gives one; ``images`` the test
    images behind a per-image interval."""

    ci: tuple[float, float] | None
    clipped: bool
    procedure: str
    n: int
    deterministic: bool
    se: float = math.nan
    images: int | None = None
    missing: str = ""  # where ci is None, why in short: "n=1", "no spread" or "no interval"


def identical_seeds(values: np.ndarray) -> bool:
    """Whether ``values`` (seeds × images) has two or more seeds whose rows all equal the first
    (NaN equal to NaN): the seeds gave one result on this metric."""
    y = np.atleast_2d(np.asarray(values, dtype=np.float64))
    return len(y) > 1 and all(np.array_equal(y[0], row, equal_nan=True) for row in y[1:])


def is_deterministic(cell_deterministic: bool, metric: str) -> bool:
    """Whether ``metric`` of a cell reads one result: the cell's models are identical and the metric
    does not read the seed's re-initialised head."""
    return cell_deterministic and metric not in RANDOMISED_COLUMNS


def interval_of(per_image: np.ndarray | None, seed_means: Sequence[float], metric: str, level: float, *,
                deterministic: bool = False) -> CellInterval:
    """The policy on the numbers: ``per_image`` (seeds × images, NaN where undefined; None: no
    records of ``metric``) or else ``seed_means`` (one per seed); ``deterministic``: the seeds gave
    one result (:func:`is_deterministic`)."""
    from reports.stats import crossed_mean, seed_interval

    bounds = METRIC_RANGES[metric]
    seeds = [float(v) for v in seed_means if not math.isnan(float(v))]
    if per_image is not None:
        y = np.atleast_2d(np.asarray(per_image, dtype=np.float64))
        got = crossed_mean(y[:1] if deterministic else y, level, bounds, difference=False)
        procedure = (f"{DETERMINISTIC} ({len(y)} seeds, identical per-image values); interval over the images of "
                     f"that one result only: {got.test}" if deterministic else got.test)
        return CellInterval(got.ci if got.has_interval else None, got.clipped, procedure,
                            1 if deterministic else len(y), deterministic, got.se, got.n_images,
                            "" if got.has_interval else "no interval")
    if deterministic:
        return CellInterval(None, False, f"{DETERMINISTIC} ({len(seeds)} seeds, identical records): no per-image "
                            f"values of {metric}, so no interval", 1, True, missing="n=1")
    found = seed_interval(seeds, level, bounds)
    label = f"{SEEDS_FALLBACK}: {len(seeds)} seed(s)"
    if found is None:
        why = "n=1" if len(seeds) < 2 else "no spread"
        return CellInterval(None, False, f"{label}: {why}, no interval (needs 2 with a spread)", len(seeds), False,
                            missing=why)
    return CellInterval(found[0], found[1], label, len(seeds), False)


def cell_interval(rows: pd.DataFrame, metric: str, level: float) -> CellInterval:
    """The interval of a cell's single runs (``rows``: ``seed`` the replicate, ``run_dir``, the
    metric's column) on ``metric`` at confidence ``level``."""
    from reports.per_image import seed_values

    present = rows[rows[metric].notna()]
    values = seed_values(present, metric) if len(present) else None
    return interval_of(None if values is None else values.to_numpy(), present[metric].tolist(), metric, level,
                       deterministic=is_deterministic(cell_is_deterministic(rows), metric))


def cell_is_deterministic(rows: pd.DataFrame) -> bool:
    """Whether the cell's runs (two or more single runs with per-image records) gave one result:
    every per-image value of the trained model (``reports.per_image.PER_IMAGE_METRICS`` but the
    sanity columns) equal across its seeds, image by image."""
    from reports.per_image import PER_IMAGE_METRICS, seed_values

    if len(rows) < 2 or "run_dir" not in rows.columns or not rows["run_dir"].map(lambda d: isinstance(d, str)).all():
        return False
    compared = False
    for metric in PER_IMAGE_METRICS:
        if metric in RANDOMISED_COLUMNS or metric not in rows.columns or rows[metric].isna().all():
            continue
        values = seed_values(rows, metric)
        if values is None:
            continue
        if not identical_seeds(values.to_numpy()):
            return False
        compared = True
    return compared
