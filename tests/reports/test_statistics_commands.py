"""report --ci, compare and export --per-image on hand-made runs with per-image records: shapes,
the numbers against independent computations, clear errors (source: issue 19 items 1-3)."""
from __future__ import annotations

import csv
import io
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from benchmark.cli import main
from benchmark.run.records import write_records
from crossed_oracle import crossed_interval
from reports.load import load_runs
from reports.per_image import seed_values
from reports_support import check_latex, markdown_rows, write_run

N_IMAGES = 60
SEEDS = (0, 1, 2)


def con_value(j: int, seed: int) -> float:
    """Consistency: J = 4 about 20 points above J = 2, the seed differences 21.5, 18, 20.5."""
    return 40.0 + 10 * j + seed + (0.0 if j == 2 else (1.5, -2.0, 0.5)[seed])


def correctness(j: int, seed: int) -> np.ndarray:
    return np.random.default_rng(10 * j + seed).random(N_IMAGES) < (0.5 if j == 2 else 0.8)


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "runs" / "grid"
    for j in (2, 4):
        for seed in SEEDS:
            correct = correctness(j, seed)
            con = con_value(j, seed)
            path = write_run(root, f"j{j}s{seed}", J=j, seed=seed,
                             metrics={"acc": 100 * correct.mean(), "con": con, "sta": None, "dis": None, "comp": None})
            labels = np.arange(N_IMAGES) % 3
            write_records(path.parent, {"per_image": pd.DataFrame({
                "index": range(N_IMAGES), "image": [f"c/{i}.png" for i in range(N_IMAGES)], "label": labels,
                "predicted": np.where(correct, labels, (labels + 1) % 3), "correct": correct,
                "margin": np.where(correct, 1.0, -1.0)})})
    return tmp_path / "runs"


def test_export_per_image_has_one_row_per_run_and_image(runs, tmp_path, capsys) -> None:
    out = tmp_path / "per_image.csv"
    assert main(["export", str(runs), "--per-image", "--out", str(out)]) == 0
    assert "wrote 360 row(s) of 6 run(s)" in capsys.readouterr().out
    frame = pd.read_csv(out)
    assert len(frame) == 6 * N_IMAGES and frame.groupby("run_id").size().eq(N_IMAGES).all()
    assert {"run_id", "J", "seed", "index", "image", "label", "predicted", "correct", "margin"} <= set(frame.columns)
    j4s1 = frame[(frame["J"] == 4) & (frame["seed"] == 1)].sort_values("index")
    assert (j4s1["correct"].to_numpy() == correctness(4, 1)).all()


def test_export_per_image_names_runs_without_records_and_writes_nothing(runs, tmp_path, capsys) -> None:
    write_run(runs / "grid", "old", J=2, seed=9)
    out = tmp_path / "per_image.csv"
    assert main(["export", str(runs), "--per-image", "--out", str(out)]) == 2
    assert re.search(r"1 run\(s\) have no per-image records.*old.*protobench evaluate", capsys.readouterr().err)
    assert not out.exists()


def test_report_ci_puts_an_interval_in_every_cell(runs, capsys) -> None:
    assert main(["report", str(runs), "--ci", "--metrics", "acc,con"]) == 0
    out = capsys.readouterr().out
    rows = markdown_rows(out)
    assert len(rows) == 2
    for row in rows:
        acc, con = row[-2:]
        assert "[" in con and "[" in acc and "img" not in acc  # one interval per cell (issue 55)
    assert "Student t interval over seeds" in out and "two-way seeds × images" in out and "seeds 0, 1, 2" in out
    con = [con_value(2, s) for s in SEEDS]  # con has no per-image records: Student t over the seeds
    low, high = sps.t.interval(0.95, 2, loc=np.mean(con), scale=sps.sem(con))
    assert f"[{low:.1f}, {high:.1f}]" in rows[0][-1]
    frame = load_runs([runs], csv=False)  # acc: the crossed seeds × images interval of its records (oracle)
    _, (low, high), _ = crossed_interval(seed_values(frame[frame["J"] == 2], "acc").to_numpy(), 0.95)
    assert f"[{max(low, 0.0):.1f}, {min(high, 100.0):.1f}]" in rows[0][-2]


def test_report_ci_csv_and_latex(runs, capsys) -> None:
    assert main(["report", str(runs), "--ci", "90", "--format", "csv", "--metrics", "acc,con"]) == 0
    captured = capsys.readouterr()
    table = list(csv.DictReader(io.StringIO(captured.out)))
    assert "90% interval of each cell" in captured.err
    for row in table:
        for name in ("Acc.", "Con."):
            column = next(c for c in row if c.endswith(name) or c == name)
            assert float(row[f"{column} ci_low"]) < float(row[column]) < float(row[f"{column} ci_high"])
        assert row[f"{next(c for c in row if c.endswith('Acc.'))} ci_method"].startswith("two-way seeds × images")
        assert row[f"{next(c for c in row if c.endswith('Con.'))} ci_method"].startswith("Student t over seeds")
    assert main(["report", str(runs), "--ci", "--format", "latex", "--metrics", "acc,con"]) == 0
    latex = capsys.readouterr().out
    check_latex(latex)
    assert r"95\% interval of each cell" in latex


def test_compare_by_j_against_independent_computations(runs, capsys) -> None:
    assert main(["compare", str(runs), "--by", "J", "--format", "csv"]) == 0
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert {"metric", "a", "b", "difference", "ci_low", "ci_high", "p_value", "p_holm", "prob_improvement",
            "n_seeds"} <= set(frame.columns)
    assert list(frame["metric"]) == ["acc", "con"] and (frame["a"] == 4).all() and (frame["b"] == 2).all()
    assert np.isfinite(frame[["p_value", "p_holm", "ci_low", "ci_high"]].to_numpy()).all()
    acc = frame.iloc[0]
    a = np.stack([correctness(4, s) for s in SEEDS])
    b = np.stack([correctness(2, s) for s in SEEDS])
    assert acc["difference"] == pytest.approx(100 * (a.mean() - b.mean()))
    _, interval, p = crossed_interval(100 * (a.astype(float) - b), 0.95)  # seeds × images, crossed
    assert acc["p_value"] == pytest.approx(p, rel=1e-6)
    assert (acc["ci_low"], acc["ci_high"]) == pytest.approx(interval, rel=1e-9)
    assert acc["n_images"] == N_IMAGES and not acc["clipped"]
    assert acc["test"] == f"two-way seeds × images, Cochran–Cox critical value (3 seeds: the seed term has 2 df; {N_IMAGES} images)"
    con = frame.iloc[1]
    paired_t = sps.ttest_rel([con_value(4, s) for s in SEEDS], [con_value(2, s) for s in SEEDS])
    assert con["difference"] == pytest.approx(20.0) and con["p_value"] == pytest.approx(paired_t.pvalue)
    assert (con["ci_low"], con["ci_high"]) == pytest.approx(tuple(paired_t.confidence_interval(0.95)))
    assert con["prob_improvement"] == 1.0 and con["n_seeds"] == 3
    assert list(frame["p_holm"]) == pytest.approx(list(multipletests(frame["p_value"], method="holm")[1]))


def test_compare_markdown_and_mistakes(runs, capsys) -> None:
    assert main(["compare", str(runs), "--by", "J", "--baseline", "4"]) == 0
    out = capsys.readouterr().out
    assert "| acc" in out and "Holm over the 2 tested comparisons" in out and "−" in out
    assert main(["compare", str(runs), "--by", "J", "--baseline", "3"]) == 2
    assert "--baseline '3' is not a value of J" in capsys.readouterr().err
    assert main(["compare", str(runs), "--by", "method"]) == 2
    assert "needs at least two values of method" in capsys.readouterr().err
    assert main(["compare", str(runs), "--by", "gating"]) == 2
    assert "--by 'gating' is not a key" in capsys.readouterr().err


def test_significance_bolds_only_a_tested_best_and_marks_ties(runs, capsys) -> None:
    assert main(["report", str(runs), "--significance", "--metrics", "acc,con"]) == 0
    out = capsys.readouterr().out
    (j2_acc, j2_con), (j4_acc, j4_con) = (row[-2:] for row in markdown_rows(out))
    # acc: 50 % vs 80 % on the same 60 images (t over images, p ≪ 0.05) → J=4 bold, J=2 unmarked
    assert j4_acc.startswith("**") and "≈" not in j2_acc and "**" not in j2_acc
    # con: +20 ± 1.8 over 3 seeds: paired t p = 0.003 → J=4 bold
    assert j4_con.startswith("**") and "≈" not in j2_con
    assert "paired Student t over the n seeds" in out and "two-way seeds × images test" in out and "α = 0.05" in out
    assert "second-best" not in out  # the legend replaces the caption's best/second-best sentence
    assert main(["report", str(runs), "--significance", "--format", "latex", "--metrics", "acc,con"]) == 0
    latex = capsys.readouterr().out
    check_latex(latex)
    assert r"{\boldmath$" in latex and "second-best" not in latex
    assert main(["report", str(runs), "--metrics", "acc,con"]) == 0  # without marks: the sentence stays
    assert "second-best is <u>underlined</u>" in capsys.readouterr().out


def test_compare_keeps_a_row_a_metric_cannot_fill_and_labels_its_interval(runs, tmp_path, capsys) -> None:
    # issue 42: J = 4 has dis on every seed, J = 2 on none; the row stays and says why it has no value
    root = tmp_path / "more" / "grid"
    for j in (2, 4):
        for seed in SEEDS:
            write_run(root, f"j{j}s{seed}", J=j, seed=seed,
                      metrics={"acc": 50.0 + j + seed, "con": con_value(j, seed), "sta": None,
                               "dis": None if j == 2 else 60.0 + seed, "comp": None})
    assert main(["compare", str(tmp_path / "more"), "--by", "J", "--format", "csv"]) == 0
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out))
    dis = frame[frame["metric"] == "dis"]
    assert len(dis) == 1 and np.isnan(dis["p_value"].iloc[0]) and np.isnan(dis["difference"].iloc[0])
    assert dis["test"].iloc[0] == "J=2 has no dis on seed(s) 0, 1, 2: no test"
    assert main(["compare", str(tmp_path / "more"), "--by", "J"]) == 0
    out = capsys.readouterr().out
    assert "95% CI (unadjusted)" in out and "it is not adjusted for multiplicity, p_holm is" in out
    assert "training variance only" in out  # the seed-level fallback names what it covers


def test_report_ci_names_the_procedure_and_n_of_each_interval(runs, capsys) -> None:
    assert main(["report", str(runs), "--ci", "--metrics", "acc"]) == 0
    out = capsys.readouterr().out
    assert f"two-way seeds × images, Cochran–Cox critical value (3 seeds: the seed term has 2 df; {N_IMAGES} images)" in out


def test_paired_runs_on_different_test_images_are_refused_naming_them(runs, capsys) -> None:
    run = next((runs / "grid").glob("j2s1*"))
    frame = pd.read_csv(run / "per_image.csv.gz") if (run / "per_image.csv.gz").exists() else \
        pd.read_parquet(run / "per_image.parquet")
    frame["image"] = [f"c/other{i}.png" if i == 5 else name for i, name in enumerate(frame["image"])]
    write_records(run, {"per_image": frame})
    assert main(["compare", str(runs), "--by", "J", "--metrics", "acc"]) == 2
    err = capsys.readouterr().err
    assert "hold different test images" in err and "j2s1" in err and err.count("\n") <= 2


def test_one_side_without_records_falls_back_to_seeds_and_says_which(runs, capsys) -> None:
    for run in (runs / "grid").glob("j2s*"):
        for table in run.glob("per_image.*"):
            table.unlink()
    assert main(["compare", str(runs), "--by", "J", "--metrics", "acc", "--format", "csv"]) == 0
    acc = pd.read_csv(io.StringIO(capsys.readouterr().out)).iloc[0]
    assert acc["test"] == "paired Student t over seeds (3 seeds; training variance only: J=2 has no per-image acc records)"
    assert np.isnan(acc["n_images"])


def test_report_ci_gives_no_zero_width_interval_when_every_seed_is_equal(tmp_path, capsys) -> None:
    root = tmp_path / "same" / "grid"
    for seed in SEEDS:  # con 50.0 on every seed: no spread, so no interval (never [50.0, 50.0])
        write_run(root, f"s{seed}", J=2, seed=seed, metrics={"acc": 60.0 + seed, "con": 50.0, "sta": None,
                                                             "dis": None, "comp": None})
    assert main(["report", str(tmp_path / "same"), "--ci", "--metrics", "acc,con"]) == 0
    out = capsys.readouterr().out
    con = next(cell for cell in markdown_rows(out)[0] if cell.startswith("50.0"))
    assert "[no spread]" in con and "[50.0, 50.0]" not in con
