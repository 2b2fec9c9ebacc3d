"""reports/ground_truth.py: the "against ground truth" section of `protobench agreement`. Its interval (a
cluster bootstrap over methods, scipy.stats.bootstrap) keeps its false-positive rate near the nominal level
when runs of one method share a method effect, where a bootstrap over runs does not (simulation); a metric
built to track Cor is found to track it, and not the control heads' Cor."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from reports.agreement import Bootstrap
from reports.ground_truth import against_ground_truth, chance_levels, cluster_interval, has_ground_truth, spearman


def _null_design(rng: np.random.Generator, methods: int = 8, runs: int = 6) -> tuple[np.ndarray, ...]:
    """A metric and a ground truth with no association, each with its own method effect (the design:
    runs of one method share it)."""
    clusters = np.repeat(np.arange(methods), runs)
    x = rng.normal(size=methods)[clusters] + 0.5 * rng.normal(size=methods * runs)
    y = rng.normal(size=methods)[clusters] + 0.5 * rng.normal(size=methods * runs)
    return x, y, clusters


def test_the_cluster_interval_holds_its_level_where_a_bootstrap_over_runs_does_not() -> None:
    rng = np.random.default_rng(0)
    sims, cluster_misses, run_misses = 100, 0, 0
    for s in range(sims):
        x, y, clusters = _null_design(rng)
        low, high, kept = cluster_interval(x, y, clusters, Bootstrap(n_resamples=200, seed=s))
        assert kept > 190  # 8 methods: a resample of one method only is rare
        cluster_misses += not low <= 0 <= high
        naive = stats.bootstrap((x, y), lambda a, b: spearman(a, b), paired=True, vectorized=False,
                                n_resamples=200, method="percentile", rng=np.random.default_rng(s))
        run_misses += not naive.confidence_interval.low <= 0 <= naive.confidence_interval.high
    # nominal 5 %; a percentile bootstrap over 8 clusters runs a little liberal (8 % here, seeded)
    assert cluster_misses / sims <= 0.12, cluster_misses
    assert run_misses / sims >= 0.25, run_misses  # ignoring the design: about one in three


def _runs(tmp_path: Path, rng: np.random.Generator) -> pd.DataFrame:
    """Six methods × four runs: ``tracker`` follows the trained heads' Cor, ``noise`` does not."""
    rows = []
    for m in range(6):
        level = rng.normal()
        for seed in range(4):
            cor = 50 + 10 * level + rng.normal()
            source = tmp_path / f"m{m}s{seed}.json"
            source.write_text(json.dumps({"funnybirds": {
                "scores": {"cor": cor, "com": 50 + rng.normal(), "con": 50 + rng.normal(), "bi": 90 + rng.normal()},
                "control": {"cor": 50 + rng.normal(), "com": 40 + rng.normal(), "con": 50 + rng.normal(),
                            "bi": 95 + rng.normal()}}}))
            rows.append({"method": f"method{m}", "seed": seed, "source": str(source), "tracker": cor + rng.normal(),
                         "noise": rng.normal()})
    return pd.DataFrame(rows)


def test_a_metric_that_tracks_cor_is_found_and_the_control_stays_at_zero(tmp_path: Path) -> None:
    frame = _runs(tmp_path, np.random.default_rng(1))
    assert has_ground_truth(frame)
    rows = {(r.metric, r.truth, r.heads.split()[0]): r
            for r in against_ground_truth(frame, ["tracker", "noise"], Bootstrap(n_resamples=500, seed=0))}
    tracked = rows[("tracker", "cor", "trained")]
    assert tracked.rho > 0.8 and tracked.ci_low > 0.3 and tracked.runs == 24 and tracked.methods == 6
    assert "cluster bootstrap over 6 methods (24 runs" in tracked.interval
    control = rows[("tracker", "cor", "control")]
    assert control.ci_low < 0 < control.ci_high
    assert rows[("noise", "cor", "trained")].ci_low < 0 < rows[("noise", "cor", "trained")].ci_high
    chance = chance_levels(frame)
    assert list(chance.index) == [f"method{m}" for m in range(6)]
    assert abs(chance["control_com"].mean() - 40) < 1


def test_runs_without_funnybirds_have_no_ground_truth(tmp_path: Path) -> None:
    source = tmp_path / "r.json"
    source.write_text(json.dumps({"metrics": {"acc": 1.0}}))
    assert not has_ground_truth(pd.DataFrame({"method": ["a"], "source": [str(source)]}))
