"""``protobench agreement`` against independent oracles: Kendall's τ-b against a brute-force count
of concordant and discordant pairs, the τ interval drawn by ``scipy.stats.bootstrap`` (reproducible
with its seed; certain where every image orders the methods alike), ICC(3,1)/ICC(3,k) against the
two-way ANOVA of statsmodels, the supported and flipped orderings on a grid built to have them,
and bad input refused before anything is written."""
from __future__ import annotations

import io
import itertools
import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from scipy import stats
from statsmodels.stats.anova import anova_lm

from benchmark.cli import main
from benchmark.errors import ProtobenchError
from benchmark.run.records import write_records
from reports.agreement import Bootstrap, kendall
from reports.tau_bootstrap import tau_statistic
from reports.reliability import icc
from reports_support import markdown_rows, write_run

METHODS = ("vmfproto", "protopnet", "kmex", "tesnet")
IMAGES = 80


def brute_force_tau_b(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall (1945) τ-b = (C − D) / √((n0 − n1)(n0 − n2)) by looping over every pair."""
    concordant = discordant = ties_x = ties_y = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
        ties_x += dx == 0
        ties_y += dy == 0
        concordant += dx * dy > 0
        discordant += dx * dy < 0
    pairs = len(x) * (len(x) - 1) / 2
    return (concordant - discordant) / math.sqrt((pairs - ties_x) * (pairs - ties_y))


def test_tau_equals_the_brute_force_pair_count_ties_included() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(3, 9))
        x, y = rng.integers(0, 4, n).astype(float), rng.integers(0, 4, n).astype(float)  # many ties
        if len(set(x)) == 1 or len(set(y)) == 1:
            assert math.isnan(kendall(x, y))
            continue
        assert kendall(x, y) == pytest.approx(brute_force_tau_b(x, y), abs=1e-12)


def write_grid(root, sta_order: dict[str, float], *, seeds=(0, 1), noise: float = 0.0, seed: int = 0) -> None:
    """One run per method and seed with per-image correctness and sta: method m is right on the
    first images up to its rate (so every image orders the methods alike: vmfproto > protopnet >
    kmex > tesnet), its per-image sta is ``sta_order[m]`` (+ noise), and con follows acc's order."""
    rng = np.random.default_rng(seed)
    rates = dict(zip(METHODS, (0.9, 0.6, 0.35, 0.1)))
    for method, s in itertools.product(METHODS, seeds):
        right = np.arange(IMAGES) < rates[method] * IMAGES
        sta = np.clip(sta_order[method] + noise * rng.normal(size=IMAGES), 0, 100)
        con = 80.0 - 20 * METHODS.index(method) + rng.normal()
        path = write_run(root, f"{method}-{s}", method=method, seed=s, J=3, metrics={
            "acc": 100 * right.mean(), "con": con, "sta": float(sta.mean()),
            "dis": None, "comp": None})
        labels = np.arange(IMAGES) % 4
        write_records(path.parent, {"per_image": pd.DataFrame({
            "index": range(IMAGES), "image": [f"c/{i}.png" for i in range(IMAGES)], "label": labels,
            "predicted": np.where(right, labels, (labels + 1) % 4), "correct": right,
            "margin": np.where(right, 1.0, -1.0), "sta": sta})})


def agreement_csv(runs, capsys, *args: str) -> pd.DataFrame:
    assert main(["agreement", str(runs), "--format", "csv", "--resamples", "200", *args]) == 0
    return pd.read_csv(io.StringIO(capsys.readouterr().out)).set_index(["metric_a", "metric_b"])


def test_the_tau_interval_is_scipys_bootstrap_over_images_reproducible_with_its_seed(tmp_path, capsys,
                                                                                       monkeypatch) -> None:
    write_grid(tmp_path / "g", {"vmfproto": 90.0, "protopnet": 60.0, "kmex": 70.0, "tesnet": 20.0}, noise=30.0)
    calls = []
    original = stats.bootstrap

    def recording(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(stats, "bootstrap", recording)
    first = agreement_csv(tmp_path, capsys)
    assert calls and all(c["method"] == "percentile" and c["n_resamples"] == 200 for c in calls)
    assert first.equals(agreement_csv(tmp_path, capsys))  # the same seed: the same intervals
    other = agreement_csv(tmp_path, capsys, "--seed", "7")
    row = first.loc[("acc", "sta")]
    assert row["n_images"] == IMAGES and f"percentile bootstrap over {IMAGES} test images" in row["interval"]
    assert "200 resamples, seed 0" in row["interval"] and "seed 7" in other.loc[("acc", "sta"), "interval"]
    assert row["ci_low"] <= row["tau"] <= row["ci_high"]
    assert (row["ci_low"], row["ci_high"]) != tuple(other.loc[("acc", "sta"), ["ci_low", "ci_high"]]) or \
        row["ci_low"] == row["ci_high"]
    con = first.loc[("acc", "con")]  # no per-image values: τ alone, labelled
    assert math.isnan(con["ci_low"]) and con["interval"] == "no interval: no per-image values of con"


def test_tau_of_the_run_means_is_the_bootstrap_statistic_on_the_original_images(tmp_path, capsys) -> None:
    """The statistic each resample recomputes gives, on the images as drawn, the table's τ; and
    metrics that order every image alike give the interval [τ, τ]."""
    write_grid(tmp_path / "g", {"vmfproto": 90.0, "protopnet": 60.0, "kmex": 70.0, "tesnet": 20.0})
    from reports.agreement import cell_cubes, cells, method_means
    from reports.load import load_runs

    frame = load_runs([tmp_path], csv=False)
    (_, cell), = cells(frame)
    means = method_means(cell, ["acc", "sta"])
    methods = list(means.index)
    statistic = tau_statistic(cell_cubes(cell, methods, ["acc", "sta"]), [("acc", "sta")])
    assert float(statistic(np.arange(IMAGES))[0]) == pytest.approx(kendall(means["acc"].to_numpy(), means["sta"].to_numpy()))
    table = agreement_csv(tmp_path, capsys)
    assert table.loc[("con", "sta"), "tau"] == pytest.approx(brute_force_tau_b(
        means["sta"].to_numpy(), cell.groupby("method")["con"].mean().loc[methods].to_numpy()))
    constant = tmp_path / "constant"  # sta: the same value on every image, so every resample ranks alike
    write_grid(constant / "g", {"vmfproto": 90.0, "protopnet": 60.0, "kmex": 40.0, "tesnet": 20.0})
    row = agreement_csv(constant, capsys).loc[("acc", "sta")]
    assert row["tau"] == row["ci_low"] == row["ci_high"] == pytest.approx(1.0)


def test_icc_equals_the_two_way_anova_formula() -> None:
    rng = np.random.default_rng(3)
    for methods, seeds in ((4, 2), (7, 3), (12, 5)):
        ratings = pd.DataFrame(rng.normal(size=(methods, 1)) * 5 + rng.normal(size=(methods, seeds)),
                               index=[f"m{i}" for i in range(methods)], columns=range(seeds))
        long = ratings.stack().rename("y").rename_axis(["method", "seed"]).reset_index()
        table = anova_lm(smf.ols("y ~ C(method) + C(seed)", data=long).fit())
        ms_methods, ms_error = table.loc["C(method)", "mean_sq"], table.loc["Residual", "mean_sq"]
        # Shrout & Fleiss (1979) ICC(3,1) and ICC(3,k)
        single = (ms_methods - ms_error) / (ms_methods + (seeds - 1) * ms_error)
        mean = (ms_methods - ms_error) / ms_methods
        forms = icc(ratings)
        assert forms["C,1"][0] == pytest.approx(single, abs=1e-10)
        assert forms["C,k"][0] == pytest.approx(mean, abs=1e-10)
        assert forms["C,1"][1] <= forms["C,1"][0] <= forms["C,1"][2]


def test_supported_orderings_and_flips(tmp_path, capsys) -> None:
    """acc and con order vmfproto > protopnet > kmex > tesnet; sta agrees for vmfproto over tesnet and is
    reversed for kmex against protopnet: a supported order and a flip."""
    write_grid(tmp_path / "g", {"vmfproto": 95.0, "protopnet": 10.0, "kmex": 90.0, "tesnet": 5.0}, noise=2.0,
               seeds=(0, 1, 2))
    assert main(["agreement", str(tmp_path), "--resamples", "200"]) == 0
    text = capsys.readouterr().out
    summary = text.split("## What this grid supports")[1]
    assert "supported: vmfproto > tesnet on every metric (acc, con, sta)" in summary
    assert "flips: kmex > protopnet on sta but protopnet > kmex on acc, con" in summary
    reliability = {row[1]: row for row in markdown_rows(text.split("## Reliability over seeds")[1].split("## Rank")[0])}
    assert set(reliability) == {"acc", "con", "sta"} and all(row[3] == "3" for row in reliability.values())


def test_fewer_than_three_methods_or_one_metric_is_one_error_with_nothing_written(tmp_path, capsys) -> None:
    for method in ("vmfproto", "kmex"):
        write_run(tmp_path / "two", method, method=method, metrics={"acc": 50.0, "con": 40.0})
    for method in ("vmfproto", "kmex", "tesnet"):
        write_run(tmp_path / "one", method, method=method, metrics={"acc": 50.0})
    out = tmp_path / "agreement.md"
    assert main(["agreement", str(tmp_path / "two"), "--out", str(out)]) != 0
    assert "at least 3 methods" in capsys.readouterr().err and not out.exists()
    assert main(["agreement", str(tmp_path / "one"), "--out", str(out)]) != 0
    assert "two or more metrics" in capsys.readouterr().err and not out.exists()
    from reports.agreement_report import build_agreement
    from reports.load import load_runs

    with pytest.raises(ProtobenchError, match="at least 3 methods"):
        build_agreement(load_runs([tmp_path / "two"], csv=False), Bootstrap())


def test_rank_stability_across_j_is_tau_between_the_rankings_at_each_pair_of_j(tmp_path) -> None:
    rng = np.random.default_rng(5)
    acc = {(m, j): float(rng.uniform(0, 100)) for m in METHODS for j in (3, 5, 7)}
    for (method, j), value in acc.items():
        for s in (0, 1):
            write_run(tmp_path / "g", f"{method}-{j}-{s}", method=method, J=j, seed=s,
                      metrics={"acc": value + s, "con": 100 - value})
    from reports.agreement import rank_stability
    from reports.load import load_runs

    found = {(s.a, s.b, s.metric): s for s in rank_stability(load_runs([tmp_path], csv=False), ["acc", "con"], "J")}
    assert set(found) == {(a, b, m) for a, b in (("3", "5"), ("3", "7"), ("5", "7")) for m in ("acc", "con")}
    for (a, b, metric), stability in found.items():
        x = np.array([acc[(m, int(a))] for m in sorted(METHODS)])
        y = np.array([acc[(m, int(b))] for m in sorted(METHODS)])
        assert stability.methods == 4 and stability.tau == pytest.approx(brute_force_tau_b(x, y))
