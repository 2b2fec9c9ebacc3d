"""One interval policy (issue 55, ``reports.intervals``): a cell shows the same interval, with the
same method, in ``report --ci``, the site and the leaderboard (crossed seeds × images where
per-image records exist, against an independent oracle; Student t over seeds for ``con``), and a cell whose seeds gave one result (KMEx) reads
"deterministic" with n = 1 distinct result and an interval over its images only."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from benchmark.bundle.make import make_bundle
from benchmark.cli import main
from crossed_oracle import crossed_interval
from leaderboard_runs import IMAGES, lab_run
from reports.load import load_runs
from reports.per_image import seed_values
from reports.site.build import build_site

METRICS = ("acc", "sta", "con")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vMFProto on seeds 0–2 (they differ); KMEx on seeds 0–2 from one draw (identical runs)."""
    root = tmp_path_factory.mktemp("policy") / "lab"
    for seed, accuracy in enumerate((80, 72, 86)):
        lab_run(root, "vmfproto", seed, accuracy, sta=70.0 + 4 * seed)
        lab_run(root, "kmex", seed, 65, draw=0)
    return root


def _report(lab: Path, capsys) -> dict[tuple[str, str], dict[str, str]]:
    assert main(["report", str(lab), "--ci", "--format", "csv", "--metrics", ",".join(METRICS)]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    out = {}
    for row in rows:
        method = next(v for k, v in row.items() if k == "Method")
        for metric, name in zip(METRICS, ("Acc.", "Sta.", "Con.")):
            column = next(c for c in row if c == name or c.endswith(name))
            out[(method, metric)] = {k.removeprefix(column).strip(): v for k, v in row.items() if k.startswith(column)}
    return out


def test_one_cell_has_one_interval_in_every_view(lab: Path, tmp_path: Path, capsys) -> None:
    report = _report(lab, capsys)
    build_site(load_runs([lab], csv=False), tmp_path / "site")
    site = {(r["method"], r["metric"]): r
            for r in csv.DictReader(io.StringIO((tmp_path / "site" / "overview.csv").read_text()))}
    make_bundle([lab], tmp_path / "bundle")
    assert main(["leaderboard", str(tmp_path / "bundle"), "--out", str(tmp_path / "board")]) == 0
    capsys.readouterr()
    document = json.loads((tmp_path / "board" / "leaderboard.json").read_text())
    (group,) = document["boards"]
    methods = {e["id"]: e["method"] for e in group["entries"]}
    board = {(methods[s["entry"]], r["metric"]): s for r in group["rankings"] for s in r["standings"]}
    frame = load_runs([lab], csv=False)
    vmf = frame[frame["method"] == "vmfproto"]
    for metric in METRICS:
        site_cell, standing, shown = site[("vMFProto", metric)], board[("vmfproto", metric)], report[("vMFProto", metric)]
        assert standing["interval"] == site_cell["ci_method"] == shown["ci_method"]
        if metric == "con":  # no per-image records: Student t over the seeds; equal on every seed here
            assert site_cell["ci_method"].startswith("Student t over seeds") and "no spread" in site_cell["ci_method"]
            assert site_cell["ci_low"] == shown["ci_low"] == "" and standing["ci_low"] is None
            continue
        low, high = float(site_cell["ci_low"]), float(site_cell["ci_high"])
        assert (standing["ci_low"], standing["ci_high"]) == pytest.approx((low, high), abs=1e-12)
        assert (shown["ci_low"], shown["ci_high"]) == (f"{low:.1f}", f"{high:.1f}")
        _, expected, _ = crossed_interval(seed_values(vmf, metric).to_numpy(), 0.95)  # independent oracle
        assert site_cell["ci_method"].startswith("two-way seeds × images")
        assert (low, high) == pytest.approx((max(expected[0], 0.0), min(expected[1], 100.0)), abs=1e-9)


def test_a_cell_whose_seeds_give_one_result_reads_deterministic_with_n_1(lab: Path, tmp_path: Path, capsys) -> None:
    assert main(["report", str(lab), "--ci", "--metrics", ",".join(METRICS)]) == 0
    out = capsys.readouterr().out
    kmex_line = next(line for line in out.splitlines() if line.startswith("| KMEx"))
    assert kmex_line.count("[deterministic]") == 3 and "(n=" not in kmex_line
    assert "deterministic: seeds give one result" in out
    report = _report(lab, capsys)
    assert report[("KMEx", "acc")]["n"] == "1" and report[("KMEx", "con")]["n"] == "1"
    assert report[("KMEx", "con")]["ci_low"] == ""  # one distinct result, no per-image values: no interval
    method = report[("KMEx", "acc")]["ci_method"]
    assert method.startswith("deterministic: seeds give one result (3 seeds") and f"Student t over {IMAGES} images" in method
    frame = load_runs([lab], csv=False)
    correct = seed_values(frame[frame["method"] == "kmex"], "acc").to_numpy()[0]  # one result's images
    low, high = stats.t.interval(0.95, IMAGES - 1, loc=correct.mean(), scale=stats.sem(correct))
    assert (report[("KMEx", "acc")]["ci_low"], report[("KMEx", "acc")]["ci_high"]) == (
        f"{max(low, 0.0):.1f}", f"{min(high, 100.0):.1f}")
    build_site(load_runs([lab], csv=False), tmp_path / "site")
    site = [r for r in csv.DictReader(io.StringIO((tmp_path / "site" / "overview.csv").read_text()))
            if r["method"] == "KMEx"]
    assert site and all(r["n"] == "1" for r in site)
    assert np.isfinite(float(next(r for r in site if r["metric"] == "acc")["ci_low"]))


def test_the_deterministic_interval_keeps_its_level_by_simulation() -> None:
    """A method that ignores the seed: three identical seeds of 60 images drawn from a population of
    mean 50 (per-image values sd 15). The policy's interval (over the images of the one result)
    covers the population mean at its level: 2,000 cells, 95 % within 3 binomial standard errors."""
    from reports.intervals import interval_of

    rng = np.random.default_rng(55)
    covered = []
    for _ in range(2000):
        one = np.clip(rng.normal(50.0, 15.0, IMAGES), 0, 100)
        got = interval_of(np.repeat(one[None, :], 3, axis=0), [one.mean()] * 3, "sta", 0.95, deterministic=True)
        assert got.deterministic and got.n == 1
        covered.append(got.ci[0] <= 50.0 <= got.ci[1])
    assert abs(np.mean(covered) - 0.95) < 3 * np.sqrt(0.95 * 0.05 / 2000)


def test_without_intervals_the_deterministic_cell_is_still_labelled(lab: Path, capsys) -> None:
    assert main(["report", str(lab), "--metrics", "acc,con"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "(deterministic)" in next(line for line in lines if line.startswith("| KMEx"))
    assert "(n=3)" in next(line for line in lines if line.startswith("| vMFProto"))


def test_a_cell_is_one_result_when_its_model_values_agree_whatever_the_sanity_head(lab: Path) -> None:
    """The sanity columns read a head re-initialised from each seed (metrics/sanity.py): they may
    differ while the trained models gave one result; any other per-image value differing makes
    several results."""
    from reports.intervals import cell_is_deterministic, identical_seeds, is_deterministic

    assert identical_seeds(np.array([[1.0, np.nan], [1.0, np.nan]])) and not identical_seeds(np.array([[1.0, 2.0]]))
    assert not identical_seeds(np.array([[1.0, 2.0], [1.0, 2.5]]))
    frame = load_runs([lab], csv=False)
    assert cell_is_deterministic(frame[frame["method"] == "kmex"])
    assert not cell_is_deterministic(frame[frame["method"] == "vmfproto"])
    assert not cell_is_deterministic(frame[frame["method"] == "kmex"].iloc[:1])  # one run is no replication
    assert is_deterministic(True, "acc") and not is_deterministic(True, "sanity") and not is_deterministic(False, "acc")
