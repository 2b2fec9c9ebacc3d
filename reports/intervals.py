"""One interval policy for a table cell's mean, the one function every view calls (``report --ci``
and ``--reference`` through ``reports.aggregate``, the site's overview, the leaderboard, the EEE
export), so one cell shows one interval wherever it appears (issue 55):

- a metric whose runs all have per-image records (``reports.per_image.PER_IMAGE_METRICS``: acc,
  sta, dis, comp, sanity, sanity_signed) gets the crossed seeds × images interval
  (``reports.stats.crossed_mean``; one seed: Student t over the images);
- any other metric (``con``, the metrics without records, a run evaluated before records existed)
  falls back to the Student t interval over seeds (``reports.stats.seed_interval``), labelled so;
- a cell whose runs are identical across seeds (every per-image record of the trained model equal: a
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


def identical_runs(records: Sequence[pd.DataFrame | None]) -> bool:
    """Whether two or more runs' per-image records are all present and equal, row by row (the image
    order of the first; NaN equal to NaN), the columns of the re-initialised head left out: the
    trained models gave one result."""
    if len(records) < 2 or any(r is None for r in records):
        return False

    def model_part(frame: pd.DataFrame) -> pd.DataFrame:
        kept = frame.drop(columns=[c for c in RANDOMISED_COLUMNS if c in frame.columns])
        return kept.sort_values("image", kind="stable").reset_index(drop=True)

    first = model_part(records[0])
    for other in map(model_part, records[1:]):
        if list(other.columns) != list(first.columns) or not other.equals(first):
            return False
    return True


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
    """Whether the cell's runs (two or more single runs, each with per-image records) gave one result."""
    from reports.per_image import run_records

    if len(rows) < 2 or "run_dir" not in rows.columns or not rows["run_dir"].map(lambda d: isinstance(d, str)).all():
        return False
    return identical_runs([run_records(d) for d in rows["run_dir"]])
