"""Each metric's reliability over seeds: the intraclass correlation of a cell's runs with the
methods as targets and the seeds as raters (``pingouin.intraclass_corr``).

Reported: the two-way consistency forms, ICC(3,1) and ICC(3,k) of Shrout & Fleiss (1979),
ICC(C,1) and ICC(C,k) of McGraw & Wong (1996):

    ICC(C,1) = (MS_methods − MS_error) / (MS_methods + (k − 1)·MS_error)
    ICC(C,k) = (MS_methods − MS_error) / MS_methods

from the two-way ANOVA of methods × seeds without replication. Consistency, not absolute
agreement: a seed that moves every method alike leaves the ranking unchanged, and the ranking is
what the agreement report is about. ICC(C,1) is the reliability of one seed's numbers, ICC(C,k)
that of the mean over the k seeds the tables show. Methods without a value on every seed are left
out (listwise, as pingouin's ``nan_policy="omit"``); the 95% intervals are pingouin's F-based ones
(McGraw & Wong 1996, table 7), rounded by pingouin to two decimals.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import pandas as pd

from reports.agreement import MIN_METHODS, cells

ICC_SOURCE = ("pingouin.intraclass_corr: ICC(3,1)/ICC(3,k) of Shrout & Fleiss 1979 = ICC(C,1)/ICC(C,k) of "
              "McGraw & Wong 1996, methods as targets, seeds as raters")


@dataclass(frozen=True)
class Reliability:
    """One metric's ICCs over the seeds of one cell (NaN with ``note`` saying why where undefined)."""

    cell: str
    metric: str
    methods: int
    seeds: int
    icc_single: float  # ICC(C,1): one seed
    single_low: float
    single_high: float
    icc_mean: float  # ICC(C,k): the mean over the k seeds
    mean_low: float
    mean_high: float
    note: str


def icc(ratings: pd.DataFrame) -> dict[str, tuple[float, float, float]]:
    """``{"C,1": (icc, low, high), "C,k": …}`` of a methods × seeds table without missing values."""
    import pingouin

    long = ratings.rename_axis(index="method", columns="seed").stack().rename("value").reset_index()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # every value equal: 0/0, NaN
        warnings.filterwarnings("ignore", message="The inplace keyword")  # pingouin 0.7's own pandas call
        table = pingouin.intraclass_corr(long, targets="method", raters="seed", ratings="value").set_index("Type")
    return {form: (float(table.at[f"ICC({form})", "ICC"]), *map(float, table.at[f"ICC({form})", "CI95"]))
            for form in ("C,1", "C,k")}


def reliability(frame: pd.DataFrame, metrics: list[str]) -> list[Reliability]:
    """Every metric's ICCs in every cell with ≥ 3 methods on ≥ 2 common seeds."""
    found: list[Reliability] = []
    for label, cell in cells(frame):
        for metric in metrics:
            ratings = cell.pivot_table(index="method", columns="seed", values=metric, aggfunc="first")
            ratings = ratings.dropna(axis=0, how="any")
            methods, seeds = ratings.shape
            if methods < MIN_METHODS or seeds < 2:
                if cell.loc[cell[metric].notna(), "method"].nunique() >= MIN_METHODS:  # ranked, but not on 2 seeds
                    found.append(Reliability(label, metric, methods, seeds, *[math.nan] * 6,
                                             f"needs ≥ {MIN_METHODS} methods on ≥ 2 common seeds"))
                continue
            forms = icc(ratings)
            note = "" if not math.isnan(forms["C,1"][0]) else "every value equal: undefined"
            found.append(Reliability(label, metric, methods, seeds, *forms["C,1"], *forms["C,k"], note))
    return found
