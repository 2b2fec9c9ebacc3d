"""Issue 40 end to end on synthbirds: protopnet, kmex, knn and linear_probe over seeds 0 and 1;
every result has ``sanity`` (and its per-image records); ``report --reference`` adds each method's
gap to the reference row, equal to the difference of the runs' own numbers, and the site shows
the same gaps; ``agreement`` prints Kendall's τ with intervals over the test images; a reference
not in the runs is one error naming those present and the closest, with nothing written."""
from __future__ import annotations

import csv
import io
import json

import pandas as pd
import pytest

from benchmark.cli import main
from benchmark.run.records import read_records
from reference_grid import run_reference_grid


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return run_reference_grid(tmp_path_factory.mktemp("reference"))


def _results(runs):
    return [json.loads(path.read_text()) | {"dir": path.parent} for path in sorted(runs.rglob("result.json"))]


def test_every_trained_method_records_sanity_with_per_image_values(runs) -> None:
    results = _results(runs)
    assert sorted({r["spec"]["method"] for r in results}) == ["kmex", "knn", "linear_probe", "protopnet"]
    assert len(results) == 8
    for result in results:
        records = read_records(str(result["dir"]))
        for name in ("sanity", "sanity_signed"):  # 100 · (1 − ρ), ρ in [−1, 1]
            score = result["metrics"][name]
            assert isinstance(score, float) and 0.0 <= score <= 200.0, (result["spec"]["method"], name)
            per_image = records[name].dropna()
            assert len(per_image) > 0 and abs(float(per_image.mean()) - score) < 1e-6
        assert records["sanity_ssim"].dropna().between(-1, 1).all()
        assert set(result["evaluation"]["sanity"]) >= {"spearman_mean", "ssim_mean", "randomised"}


def test_report_reference_shows_each_methods_gap_equal_to_the_runs_difference(runs, capsys) -> None:
    assert main(["report", str(runs), "--reference", "linear_probe", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {r["method"] for r in rows} == {"kmex", "knn", "protopnet"}
    assert {"acc", "sta", "dis", "sanity"} <= {r["metric"] for r in rows}
    by_method: dict[str, dict[int, dict]] = {}
    for result in _results(runs):
        by_method.setdefault(result["spec"]["method"], {})[result["spec"]["seed"]] = result["metrics"]
    for row in rows:
        metric = row["metric"]
        ours = [by_method[row["method"]][s][metric] for s in (0, 1)]
        reference = [by_method["linear_probe"][s][metric] for s in (0, 1)]
        if any(v is None for v in ours + reference):
            continue
        expected = sum(ours) / 2 - sum(reference) / 2
        assert abs(float(row["gap"]) - expected) < 1e-6, row
        if row["metric"] in ("acc", "sta", "sanity"):  # per-image records: the crossed procedure's n
            assert row["n_images"] == "16" and "seed" in row["test"]
    assert main(["report", str(runs), "--reference", "linear_probe"]) == 0
    text = capsys.readouterr().out
    assert "Gap to the reference row linear_probe" in text and "gap to linear_probe" in text


def test_a_reference_not_in_the_runs_is_one_error_naming_those_present(runs, tmp_path, capsys) -> None:
    out = tmp_path / "table.md"
    assert main(["report", str(runs), "--reference", "linear_prob", "--out", str(out)]) != 0
    err = capsys.readouterr().err
    assert "did you mean 'linear_probe'" in err and "kmex, knn, linear_probe, protopnet" in err, err
    assert not out.exists()


def test_the_site_shows_the_same_gaps_and_the_agreement(runs, tmp_path, capsys) -> None:
    assert main(["report", str(runs), "--reference", "linear_probe", "--format", "csv"]) == 0
    printed = pd.read_csv(io.StringIO(capsys.readouterr().out))
    site = tmp_path / "site"
    assert main(["site", str(runs), "--out", str(site), "--reference", "linear_probe"]) == 0
    shown = pd.read_csv(site / "reference.csv")
    pd.testing.assert_frame_equal(shown, printed)
    index = (site / "index.html").read_text()
    assert 'href="reference.html"' in index and 'href="agreement.html"' in index
    assert "Gaps to linear_probe" in index and "gap to linear_probe" in (site / "reference.html").read_text()
    agreement = (site / "agreement.html").read_text()  # as `agreement`: the reference rows are not ranked
    assert "The reference rows knn, linear_probe are left out of the rankings" in agreement
    assert not (site / "agreement.csv").exists()
    capsys.readouterr()
    assert main(["site", str(runs), "--out", str(tmp_path / "other"), "--reference", "linear_prob"]) != 0
    assert "did you mean 'linear_probe'" in capsys.readouterr().err and not (tmp_path / "other").exists()


def test_reference_rows_are_never_marked_and_leave_the_methods_marks_as_without_them(runs, capsys) -> None:
    def method_rows(argv: list[str]) -> dict[str, str]:
        assert main(["report", str(runs), "--metrics", "acc,sta,sanity", *argv]) == 0
        lines = [[cell.strip() for cell in line.split("|")[1:-1]]
                 for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
        return {cells[0]: " | ".join(cells) for cells in lines}

    everything = method_rows([])
    without = method_rows(["--where", "method=kmex,protopnet"])
    for name, line in everything.items():
        if name in ("k-NN", "Linear probe"):
            assert "**" not in line and "<u>" not in line, line  # a reference row frames, it is not ranked
        elif name in without:
            assert line == without[name]  # the methods' marks as if the reference rows were absent
    assert {"k-NN", "Linear probe"} <= set(everything)


def test_agreement_leaves_the_reference_rows_out_unless_asked(runs, capsys) -> None:
    assert main(["agreement", str(runs), "--resamples", "200"]) == 2  # kmex and protopnet: two methods
    err = capsys.readouterr().err
    assert "The reference rows knn, linear_probe are left out of the rankings; `--rank-reference` ranks them" in err


def test_agreement_prints_kendalls_tau_with_intervals_over_the_test_images(runs, capsys) -> None:
    assert main(["agreement", str(runs), "--resamples", "200", "--rank-reference"]) == 0
    text = capsys.readouterr().out
    for part in ("## Kendall's τ between the metrics' method rankings", "## Reliability over seeds",
                 "## Rank stability across J", "## What this grid supports"):
        assert part in text
    assert main(["agreement", str(runs), "--resamples", "200", "--format", "csv", "--rank-reference"]) == 0
    tau = pd.read_csv(io.StringIO(capsys.readouterr().out)).set_index(["metric_a", "metric_b"])
    row = tau.loc[("acc", "sanity")]
    assert row["methods"] == 4 and row["n_images"] == 16 and row["ci_low"] <= row["tau"] <= row["ci_high"]
    assert "percentile bootstrap over 16 test images" in row["interval"]
    assert tau.loc[("acc", "con"), "interval"] == "no interval: no per-image values of con"
