"""One procedure per number (issue 29 items 2-4): ``compare``'s interval excludes 0 exactly when its
p < α; ``report --ci`` and ``compare`` compute an accuracy interval with one implementation; no
printed interval leaves the metric's range; too few seeds or images say so instead of a p;
``--ci`` alone draws no best/second-best marks."""
from __future__ import annotations

import csv
import io
import math
import re

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest

from benchmark.cli import main
from benchmark.run.records import write_records
from reports.stats import MIN_IMAGES
from reports_support import markdown_rows, write_run


def write_runs(root, correct: dict[tuple[int, int], np.ndarray], con: dict[tuple[int, int], float]) -> None:
    """One run per (J, seed) with its accuracy, consistency and per-image records."""
    for (j, seed), right in correct.items():
        path = write_run(root, f"j{j}s{seed}", J=j, seed=seed, metrics={
            "acc": 100 * right.mean(), "con": con[(j, seed)], "sta": None, "dis": None, "comp": None})
        labels = np.arange(len(right)) % 3
        write_records(path.parent, {"per_image": pd.DataFrame({
            "index": range(len(right)), "image": [f"c/{i}.png" for i in range(len(right))], "label": labels,
            "predicted": np.where(right, labels, (labels + 1) % 3), "correct": right,
            "margin": np.where(right, 1.0, -1.0)})})


def compare_csv(runs, capsys, *args: str) -> pd.DataFrame:
    assert main(["compare", str(runs), "--by", "J", "--format", "csv", *args]) == 0
    return pd.read_csv(io.StringIO(capsys.readouterr().out))


@pytest.mark.parametrize("level", [95.0, 90.0])
def test_every_compare_row_excludes_zero_exactly_when_p_is_below_alpha(tmp_path, capsys, level: float) -> None:
    rng = np.random.default_rng(int(level))
    rows = []
    for case in range(8):  # random cells: 2-5 seeds, 3 levels of J, small and large true differences
        seeds = int(rng.integers(2, 6))
        shift = {2: 0.0, 4: rng.choice([0.0, 0.05, 0.2]), 8: rng.choice([0.0, 0.1])}
        correct = {(j, s): rng.random(80) < 0.6 + shift[j] for j in shift for s in range(seeds)}
        con = {(j, s): float(np.clip(50 + 100 * shift[j] + rng.normal(0, 25), 0, 100)) for j in shift
               for s in range(seeds)}
        runs = tmp_path / f"case{case}"
        write_runs(runs / "grid", correct, con)
        rows.append(compare_csv(runs, capsys, "--level", str(level)))
    frame = pd.concat(rows)
    alpha = 1 - level / 100
    excludes = (frame["ci_low"] > 0) | (frame["ci_high"] < 0)
    assert len(frame) == 8 * 3 * 2
    kinds = {t.split(" (")[0].split(",")[0] for t in frame["test"]}
    assert kinds == {"two-way seeds × images", "paired Student t over seeds"}  # acc on records; con per seed
    assert (excludes == (frame["p_value"] < alpha)).all()
    assert 0 < excludes.sum() < len(frame)  # both kinds of row occur
    assert frame["clipped"].any() and (frame["ci_low"] >= -100).all() and (frame["ci_high"] <= 100).all()


def test_report_ci_and_compare_give_one_accuracy_interval_for_one_cell(tmp_path, capsys) -> None:
    # J = 2 gets every image wrong, so compare's J=4 − J=2 is J = 4's accuracy, image by image:
    # both commands then ask for the same interval, the mean over images of the seeds' correctness
    rng = np.random.default_rng(7)
    correct = {(4, s): rng.random(90) < 0.7 for s in range(3)} | {(2, s): np.zeros(90, bool) for s in range(3)}
    write_runs(tmp_path / "runs" / "grid", correct, {key: 50.0 + key[1] for key in correct})
    acc = compare_csv(tmp_path / "runs", capsys, "--metrics", "acc").iloc[0]
    assert main(["report", str(tmp_path / "runs"), "--ci", "--format", "csv", "--metrics", "acc"]) == 0
    j4 = next(row for row in csv.DictReader(io.StringIO(capsys.readouterr().out)) if row["J"] == "4")
    column = next(c for c in j4 if c.endswith("Acc. ci_low"))  # the one interval of the cell (issue 55)
    assert j4[column] == f"{acc['ci_low']:.1f}" and j4[column.replace("low", "high")] == f"{acc['ci_high']:.1f}"
    assert main(["compare", str(tmp_path / "runs"), "--by", "J", "--metrics", "acc"]) == 0
    shown = re.search(r"\[(\d+\.\d), (\d+\.\d)\]", markdown_rows(capsys.readouterr().out)[0][5]).groups()
    assert main(["report", str(tmp_path / "runs"), "--ci", "--metrics", "acc"]) == 0
    report_rows = markdown_rows(capsys.readouterr().out)
    assert f"[{shown[0]}, {shown[1]}]" in next(row[-1] for row in report_rows if row[1] == "4")


def test_small_n_says_no_test_and_intervals_stay_in_range(tmp_path, capsys) -> None:
    rng = np.random.default_rng(3)
    correct = {(2, 0): rng.random(MIN_IMAGES - 10) < 0.5, (4, 0): rng.random(MIN_IMAGES - 10) < 0.97,
               (4, 1): rng.random(MIN_IMAGES - 10) < 0.97}
    write_runs(tmp_path / "runs" / "grid", correct, {(2, 0): 30.0, (4, 0): 99.0, (4, 1): 60.0})
    frame = compare_csv(tmp_path / "runs", capsys)
    assert frame["ci_low"].isna().all()
    differ = correct[(4, 0)] != correct[(2, 0)]  # one seed: the exact sign test over the discordant images
    oracle = binomtest(int((correct[(4, 0)] & differ).sum()), int(differ.sum())).pvalue
    assert frame["p_value"].iloc[0] == pytest.approx(oracle, rel=1e-9)
    assert frame["test"].iloc[0] == (f"exact sign-flip test over the {differ.sum()} of {MIN_IMAGES - 10} images where "
                                     "the methods differ (1 seed(s)): too few for an interval")
    assert math.isnan(frame["p_value"].iloc[1]) and frame["test"].iloc[1] == "n = 1 seed: no test (needs 2)"
    assert main(["compare", str(tmp_path / "runs"), "--by", "J"]) == 0
    assert [row[6] for row in markdown_rows(capsys.readouterr().out)] == [f"{oracle:.3g}", "no test"]
    assert main(["report", str(tmp_path / "runs"), "--ci", "--metrics", "acc,con"]) == 0
    out = capsys.readouterr().out
    j4 = next(row for row in markdown_rows(out) if row[1] == "4")
    assert f"[no interval: {MIN_IMAGES - 10} images: no test" in j4[-2]  # acc: the crossed procedure's own answer
    low, high = map(float, re.search(r"\[(-?[\d.]+), (-?[\d.]+)\]‡", j4[-1]).groups())  # 99, 60: t over 2 seeds
    assert (low, high) == (0.0, 100.0)
    assert "‡: clipped to the metric's range" in out
    for low, high in re.findall(r"\[(-?[\d.]+), (-?[\d.]+)\]", out):
        assert 0.0 <= float(low) <= float(high) <= 100.0
    cells = [cell for row in markdown_rows(out) for cell in row]
    assert not any("**" in c or "<u>" in c for c in cells) and "underlined" not in out  # --ci: no marks from means
    assert main(["report", str(tmp_path / "runs"), "--significance", "--metrics", "acc,con"]) == 0
    marked = [row[-1] for row in markdown_rows(capsys.readouterr().out)]
    # con untestable (n = 1): tied with the best, whose own cell (the reference every ≈ is tested
    # against) is plain, in markdown as in LaTeX (reports.marks.typeset_marks; issue 54)
    assert sorted("≈" in c for c in marked) == [False, True] and not any("**" in c for c in marked)
