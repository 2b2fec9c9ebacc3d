"""The tidy results schema: one row per run (or per published aggregate), these columns.

Every frame the reports build or read (``load_results``, ``load_csv``) has exactly
``TIDY_COLUMNS``, in this order, so frames from runs and from published CSVs concatenate.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

# A table cell is addressed by these five values; they never vary inside one cell.
KEY_COLUMNS: tuple[str, ...] = ("dataset", "backbone", "method", "J", "variant")

# Percentages (acc, con, sta, dis, comp, purity, loc, sanity, class_indep, contrastive, sid5, pointing; del in
# percent points), explanation sizes
# (size_local, size_global: numbers of prototypes) and timings; NaN where not computed or undefined.
# epoch_seconds: the training loop's mean epoch as the run trained (from the token cache by
# default); epoch_seconds_live_trunk: the same schedule's mean epoch with the frozen trunk's
# forward at every step, as the paper times it (tab:supp_runtime; benchmark/run/timing.py).
#: the robustness stage's scores (benchmark/robustness/, ``result.json``'s ``robustness`` section): accuracy
#: before and under the misalignment attack, PAC, PRC, PLC (Sacha et al. 2024) and Quantus' pixel-level
#: faithfulness; lower is better for those in ``LOWER_IS_BETTER``
ROBUSTNESS_METRICS: tuple[str, ...] = ("acc_clean", "acc_attacked", "pac", "prc", "plc", "pixel_flipping",
                                       "region_perturbation", "road", "infidelity")
#: the metrics where a lower value is the better one (every other metric: higher is better)
LOWER_IS_BETTER: tuple[str, ...] = ("pac", "prc", "plc", "pixel_flipping", "road", "infidelity")

METRIC_COLUMNS: tuple[str, ...] = (
    "acc",
    "con",
    "sta",
    "dis",
    "comp",
    "purity",
    "loc",
    "size_local",
    "size_global",
    "del",
    "sanity",
    "sanity_signed",
    "class_indep",
    "contrastive",
    "sid5",
    "pointing",
    *ROBUSTNESS_METRICS,
    "epoch_seconds",
    "epoch_seconds_live_trunk",
    "inference_images_per_second",
)


def std_column(metric: str) -> str:
    """Column holding the published standard deviation of ``metric`` (NaN for single runs)."""
    return f"{metric}_std"


STD_COLUMNS: tuple[str, ...] = tuple(std_column(m) for m in METRIC_COLUMNS)

# seed: the run's seed (NA for a published aggregate); n_seeds: how many seeds a row stands for.
SEED_COLUMNS: tuple[str, ...] = ("seed", "n_seeds")

# Where a row came from: run identity for results, "file.csv:line" in ``source`` for CSV rows.
ORIGIN_COLUMNS: tuple[str, ...] = ("run_id", "grid", "run_dir", "source")

# How reports label the method: the adapter's ``display_name`` the runner wrote (None: unknown).
LABEL_COLUMNS: tuple[str, ...] = ("method_display_name",)


# What a run computed and whether the current code still gives it (benchmark/run/identity.py):
# setting, its resolved configuration but the seed as canonical JSON (the pooling rule: a cell's
# runs share it); stale, why its result is stale (None: current). Both None for CSV rows.
IDENTITY_COLUMNS: tuple[str, ...] = ("setting", "stale")

PROVENANCE_COLUMNS: tuple[str, ...] = (
    "code_version",
    "device",
    "weights_checksum",
    "dataset_fingerprint",
    "packages",
)

TIDY_COLUMNS: tuple[str, ...] = (
    KEY_COLUMNS + SEED_COLUMNS + METRIC_COLUMNS + STD_COLUMNS + ORIGIN_COLUMNS + LABEL_COLUMNS
    + IDENTITY_COLUMNS + PROVENANCE_COLUMNS
)

#: the values a metric can take (metrics/: percentages; deletion, a difference of percentages, in
#: percent points; explanation sizes and timings ≥ 0); its std lies in [0, upper − lower]
PERCENT_METRICS: tuple[str, ...] = ("acc", "con", "sta", "dis", "comp", "purity", "loc", "sanity", "sanity_signed",
                                    "class_indep", "contrastive", "sid5", "pointing")
METRIC_RANGES: dict[str, tuple[float, float]] = {
    **{m: (0.0, 100.0) for m in PERCENT_METRICS}, "del": (-100.0, 100.0),
    "sanity": (0.0, 200.0), "sanity_signed": (0.0, 200.0),  # 100 · (1 − ρ), ρ in [−1, 1] (metrics/sanity.py)
    # benchmark/run/record_schema.py's per-image ranges, accuracies in percent
    "acc_clean": (0.0, 100.0), "acc_attacked": (0.0, 100.0), "pac": (-math.inf, 100.0), "prc": (-math.inf, math.inf),
    "plc": (0.0, 100.0), "region_perturbation": (-1.0, 1.0), "road": (0.0, 1.0),
    **{m: (0.0, math.inf) for m in METRIC_COLUMNS if m not in PERCENT_METRICS and m not in ("del", *ROBUSTNESS_METRICS)},
    "pixel_flipping": (0.0, math.inf), "infidelity": (0.0, math.inf),
}
METRIC_RANGES.update({std_column(m): (0.0, high - low) for m, (low, high) in list(METRIC_RANGES.items())})


def difference_range(metric: str) -> tuple[float, float]:
    """The values a difference of two values of ``metric`` can take: ``[lo − hi, hi − lo]``."""
    low, high = METRIC_RANGES[metric]
    return low - high, high - low

INTEGER_COLUMNS: tuple[str, ...] = ("J", "seed", "n_seeds")
FLOAT_COLUMNS: tuple[str, ...] = METRIC_COLUMNS + STD_COLUMNS

#: prefix of the columns of a table's CSV (``reports.csvtable``) that ``reports.load.load_csv``
#: reads back (the rest are for people)
TIDY_PREFIX = "tidy."


def flatten(value: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    """``{"spec": {"seed": 0}}`` → ``{"spec.seed": 0}``; an empty mapping stays ``{}``."""
    flat: dict[str, object] = {}
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, Mapping) and item:
            flat.update(flatten(item, f"{name}."))
        else:
            flat[name] = dict(item) if isinstance(item, Mapping) else item
    return flat


#: the reference rows (methods whose declaration sets ``reference_row``: no prototypes, they frame
#: the part-prototype methods): never marked best or second in a table, nor ranked by `agreement`
#: unless ``--rank-reference`` (spelt here: reports read no declarations; a test holds it equal)
REFERENCE_ROWS: tuple[str, ...] = ("knn", "linear_probe")
