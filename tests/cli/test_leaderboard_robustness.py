"""The leaderboard ranks the robustness stage's scores: a bundle carries and checksums the
``robustness`` records; a lower-is-better metric leads with its lowest mean, ranks count entries
with a better mean, ties come from compare's paired test on the per-image values (statsmodels' Holm
as the oracle); the scores are re-derived from the records and a result.json they contradict is
refused; a run without the records keeps its numbers, marked as reported; every table says which
way is better."""
from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.multitest import multipletests

from benchmark.bundle.eval_results import EVAL_METRICS
from benchmark.bundle.make import make_bundle
from benchmark.bundle.manifest import MANIFEST_FILE
from benchmark.cli import main
from benchmark.errors import ProtobenchError
from benchmark.run.records import read_records, write_records
from leaderboard_runs import ROBUSTNESS_IMAGES, add_robustness, lab_run
from reports.columns import LOWER_IS_BETTER
from reports.leaderboard.document import check_document
from reports.leaderboard.hub import HUB_METRICS
from reports.leaderboard.ranked import RANKED_METRICS, ROBUSTNESS_RANKED
from reports.load import load_results
from reports.paired import cell_difference

#: method → (accuracy, pac around): vmfproto lowest pac, tesnet near it, protopnet far above
METHODS = {"vmfproto": (80, 5.0), "tesnet": (76, 6.0), "protopnet": (58, 30.0)}
SEEDS = (0, 1, 2)


def _lab(root: Path) -> Path:
    for method, (accuracy, pac) in METHODS.items():
        for seed in SEEDS:
            add_robustness(lab_run(root, method, seed, accuracy - 2 * seed), pac=pac + seed,
                           attacked={"vmfproto": 70 - 5 * seed, "tesnet": 60, "protopnet": 20 + 5 * seed}[method])
    return root


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _lab(tmp_path_factory.mktemp("robust_lab") / "A")


@pytest.fixture(scope="module")
def bundle(runs: Path) -> Path:
    make_bundle([runs], runs.parent / "labA")
    return runs.parent / "labA"


@pytest.fixture(scope="module")
def board(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("robust_board") / "L"
    assert main(["leaderboard", str(bundle), "--out", str(out)]) == 0
    return out


def _document(out: Path) -> dict:
    return json.loads((out / "leaderboard.json").read_text())


def _ranking(document: dict, metric: str) -> tuple[list[dict], dict[str, dict]]:
    """The standings of ``metric`` on the document's board, and its entries by id."""
    board = document["boards"][0]
    ranking = next(r for r in board["rankings"] if r["metric"] == metric)
    return ranking["standings"], {e["id"]: e for e in board["entries"]}


def test_a_bundle_carries_and_checksums_the_robustness_records(runs: Path, bundle: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    originals = sorted(runs.rglob("robustness.parquet"))
    bundled = sorted(bundle.rglob("robustness.parquet"))
    assert len(originals) == len(bundled) == len(METHODS) * len(SEEDS)
    listed = (bundle / MANIFEST_FILE).read_text()
    for path in bundled:
        assert path.relative_to(bundle).as_posix() in listed
        original = runs / path.relative_to(bundle)
        assert path.read_bytes() == original.read_bytes()
    tampered = tmp_path / "labT"
    shutil.copytree(bundle, tampered)
    target = bundled[0].relative_to(bundle)
    table = read_records(tampered / target.parent, "robustness")
    table.loc[1, "prc"] += 1.0
    (tampered / target).unlink()
    write_records(tampered / target.parent, {"robustness": table})
    capsys.readouterr()
    assert main(["bundle", "verify", str(tampered)]) != 0
    assert target.as_posix() in capsys.readouterr().err


def test_the_leaderboard_ranks_the_robustness_scores_each_in_its_direction(board: Path) -> None:
    document = _document(board)
    jsonschema.Draft202012Validator(json.loads((board / "leaderboard.schema.json").read_text())).validate(document)
    assert document["settings"]["metrics"] == list(RANKED_METRICS)
    rankings = document["boards"][0]["rankings"]
    # the runs record no dis or comp; acc_clean and lpa_* are never ranked
    assert [r["metric"] for r in rankings] == [m for m in RANKED_METRICS if m not in ("dis", "comp")]
    for ranking in rankings:
        means = [s["mean"] for s in ranking["standings"]]
        lower = ranking["metric"] in LOWER_IS_BETTER
        assert ranking["better"] == ("lower" if lower else "higher")
        assert means == sorted(means, reverse=not lower), ranking["metric"]  # the best mean first
        assert ranking["standings"][0]["test"] == f"the leader ({'lowest' if lower else 'highest'} mean)"


@pytest.mark.parametrize(("metric", "undefined"), [("pac", 60 - ROBUSTNESS_IMAGES + 1), ("plc", 60 - ROBUSTNESS_IMAGES)])
def test_a_lower_is_better_metric_leads_with_its_lowest_mean_and_ties_come_from_the_paired_tests(
        runs: Path, board: Path, metric: str, undefined: int) -> None:
    pac, entries = _ranking(_document(board), metric)
    methods = [entries[s["entry"]]["method"] for s in pac]
    assert methods == ["vmfproto", "tesnet", "protopnet"] and pac[0]["group"] == "best" and pac[0]["rank"] == 1
    frame = load_results([runs])
    leader = frame[frame["method"] == "vmfproto"].set_index("seed")
    found = [cell_difference(frame[frame["method"] == m].set_index("seed"), leader, metric, 0.95) for m in methods[1:]]
    expected = multipletests([d.p_value for d in found], method="holm")[1]
    assert np.allclose([s["p_holm"] for s in pac[1:]], expected, rtol=1e-12)
    for standing, difference, adjusted in zip(pac[1:], found, expected):
        assert standing["difference_to_best"] == pytest.approx(standing["mean"] - pac[0]["mean"])  # entry − leader
        assert standing["difference_to_best"] == pytest.approx(difference.difference) and difference.difference > 0
        assert standing["group"] == ("tied" if adjusted >= 0.05 else "below")
        assert standing["rank"] == (1 if adjusted >= 0.05 else 1 + sum(o["mean"] < standing["mean"] for o in pac))
        # the per-image values reach the crossed test: none outside the subsample (nor pac on its first image)
        assert "two-way seeds × images" in standing["test"] and f"{undefined} image(s) with a missing value excluded" \
            in standing["test"]
    assert pac[-1]["group"] == "below" and pac[-1]["rank"] == 3 and pac[-1]["difference_ci_low"] > 0
    assert pac[0]["ci_images"] == 60 - undefined and pac[0]["ci_n"] == len(SEEDS)
    assert {s["group"] for s in pac[1:]} == ({"below"} if metric == "pac" else {"tied", "below"})  # both paths
    attacked, entries = _ranking(_document(board), "acc_attacked")  # higher is better: the highest leads
    assert [entries[s["entry"]]["method"] for s in attacked] == ["vmfproto", "tesnet", "protopnet"]
    assert attacked[-1]["difference_to_best"] < 0 and attacked[-1]["group"] == "below"
    assert attacked[-1]["rank"] == 1 + sum(o["mean"] > attacked[-1]["mean"] for o in attacked)


def test_the_scores_are_rescored_from_the_records(runs: Path, board: Path) -> None:
    document = _document(board)
    frame = load_results([runs])
    for metric in ROBUSTNESS_RANKED:
        standings, entries = _ranking(document, metric)
        for standing in standings:
            assert standing["rescored"]
            folders = frame[frame["method"] == entries[standing["entry"]]["method"]]["run_dir"]
            column = {"acc_attacked": "correct_attacked"}.get(metric, metric)
            scale = 100.0 if metric == "acc_attacked" else 1.0
            oracle = np.mean([scale * np.nanmean(read_records(Path(f), "robustness")[column].to_numpy(dtype=float))
                              for f in folders])
            assert standing["mean"] == pytest.approx(oracle, rel=1e-12), metric


def test_the_leaderboard_reads_each_record_table_of_a_run_once(bundle: Path, tmp_path: Path, monkeypatch) -> None:
    from collections import Counter

    import benchmark.run.records as records_module

    reads: Counter = Counter()
    original = records_module.read_records

    def counting(run_dir, table: str = "per_image"):
        reads[(Path(run_dir).name, table)] += 1
        return original(run_dir, table)

    copy = tmp_path / "labA"  # a copy: the values of runs read before are kept (reports/per_image.py)
    shutil.copytree(bundle, copy)
    monkeypatch.setattr(records_module, "read_records", counting)
    assert main(["leaderboard", str(copy), "--out", str(tmp_path / "L")]) == 0
    runs = len(METHODS) * len(SEEDS)
    assert Counter(table for _, table in reads) == {"per_image": runs, "per_prototype": runs, "robustness": runs}
    assert set(reads.values()) == {1}


@pytest.mark.parametrize("metric", ["pac", "infidelity", "acc_attacked"])
def test_a_result_its_robustness_records_contradict_is_refused(runs: Path, tmp_path: Path, metric: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    lab = tmp_path / "A"
    shutil.copytree(runs, lab)
    result_path = next(lab.rglob("result.json"))
    result = json.loads(result_path.read_text())
    result["robustness"]["metrics"][metric] *= 1.001  # a small change, well above the tolerance
    result_path.write_text(json.dumps(result))
    capsys.readouterr()
    assert main(["leaderboard", str(lab), "--out", str(tmp_path / "L")]) == 2
    err = capsys.readouterr().err
    assert f"result.json gives {metric} = " in err and "its records give" in err
    assert not (tmp_path / "L").exists()


def test_a_run_without_robustness_records_keeps_its_numbers_marked_as_reported(runs: Path, tmp_path: Path) -> None:
    lab = tmp_path / "A"
    shutil.copytree(runs, lab)
    frame = load_results([lab])
    kept = Path(frame[(frame["method"] == "tesnet") & (frame["seed"] == 1)]["run_dir"].iloc[0])
    (kept / "robustness.parquet").unlink()  # its result.json's robustness section stays
    out = tmp_path / "L"
    assert main(["leaderboard", str(lab), "--out", str(out)]) == 0
    document = _document(out)
    pac, entries = _ranking(document, "pac")
    tesnet = next(s for s in pac if entries[s["entry"]]["method"] == "tesnet")
    assert not tesnet["rescored"] and entries[tesnet["entry"]]["rescored"]  # its per-image records were re-scored
    assert all(s["rescored"] for s in pac if s is not tesnet)
    assert tesnet["mean"] == pytest.approx(float(frame[frame["method"] == "tesnet"]["pac"].mean()), rel=1e-12)
    assert "training variance only" in tesnet["test"]  # no per-image pac on one side: the labelled fallback
    acc, _ = _ranking(document, "acc")
    assert all(s["rescored"] for s in acc)
    rows = list(csv.DictReader(io.StringIO((out / "leaderboard.csv").read_text())))
    assert {(r["metric"], r["rescored"]) for r in rows if r["entry"] == "TesNet"} == \
        {*((m, "True") for m in ("acc", "con", "sta")), *((m, "False") for m in ROBUSTNESS_RANKED)}
    markdown = (out / "leaderboard.md").read_text()
    assert next(line for line in markdown.splitlines() if line.startswith("| TesNet ")).count("†") == \
        len(ROBUSTNESS_RANKED)
    page = (out / "index.html").read_text()
    assert f"partly: {', '.join(ROBUSTNESS_RANKED)} as reported (no records of them)" in page


def test_a_run_without_per_image_records_has_its_robustness_scores_rescored_from_their_own(
        runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lab = tmp_path / "A"
    shutil.copytree(runs, lab)
    frame = load_results([lab])
    folder = Path(frame[(frame["method"] == "protopnet") & (frame["seed"] == 0)]["run_dir"].iloc[0])
    (folder / "per_image.parquet").unlink()
    assert main(["leaderboard", str(lab), "--out", str(tmp_path / "L")]) == 0
    document = _document(tmp_path / "L")
    for metric, rescored in (("acc", False), ("sta", False), ("pac", True), ("infidelity", True)):
        standings, entries = _ranking(document, metric)
        assert next(s for s in standings if entries[s["entry"]]["method"] == "protopnet")["rescored"] is rescored
    result = json.loads((folder / "result.json").read_text())
    result["robustness"]["metrics"]["plc"] += 0.01
    (folder / "result.json").write_text(json.dumps(result))
    capsys.readouterr()
    assert main(["leaderboard", str(lab), "--out", str(tmp_path / "L2")]) == 2
    assert "result.json gives plc = " in capsys.readouterr().err


def test_every_table_says_which_way_is_better(board: Path) -> None:
    import yaml

    markdown = (board / "leaderboard.md").read_text()
    header = next(line for line in markdown.splitlines() if line.startswith("| entry "))
    assert "acc ↑" in header and "pac ↓" in header and "region_perturbation ↑" in header and "road ↓" in header
    assert "↓: lower is better (the leader has the lowest mean); a difference is entry − leader" in markdown
    assert "| entry − leader [interval]" in markdown
    tex = (board / "leaderboard.tex").read_text()
    assert r"pac \ensuremath{\downarrow}" in tex and r"entry \ensuremath{-} leader" in tex and "?" not in tex
    page = (board / "index.html").read_text()
    assert "pac ↓" in page and "lower is better for pac, prc, plc, pixel_flipping, road, infidelity" in page
    assert "pac (%; lower is better)" in page and "infidelity (mean squared error; lower is better)" in page
    rows = list(csv.DictReader(io.StringIO((board / "leaderboard.csv").read_text())))
    assert {(r["metric"], r["better"]) for r in rows} == {(m, "lower" if m in LOWER_IS_BETTER else "higher")
                                                          for m in RANKED_METRICS if m != "dis" and m != "comp"}
    infidelity = next(r for r in rows if r["metric"] == "infidelity")
    assert float(infidelity["mean"]) < 2e-3  # full precision in the CSV; the tables print 3 significant digits
    tasks = yaml.safe_load((board / "eval.yaml").read_text())["tasks"]
    assert tuple(HUB_METRICS) == tuple(EVAL_METRICS)  # the Hub's tasks are what the bundles report
    assert {t["id"] for t in tasks} == {f"synthbirds-{m}" for m in HUB_METRICS}
    assert all("(percent, higher is better)" in t["description"] for t in tasks)


def test_a_document_whose_direction_is_not_its_metrics_is_refused(board: Path) -> None:
    document = _document(board)
    check_document(document)
    ranking = next(r for r in document["boards"][0]["rankings"] if r["metric"] == "pac")
    ranking["better"] = "higher"
    with pytest.raises(ValueError, match="metric 'pac': ranked higher is better, but lower is"):
        check_document(document)


@pytest.mark.parametrize(("change", "message"), [
    (lambda t: t.assign(index=[*t["index"][:-1], 60]), "is not a test image"),
    (lambda t: t.assign(index=[t["index"][1], *t["index"][1:]]), "does not follow"),
])
def test_a_robustness_table_with_an_index_outside_the_split_or_twice_is_refused(runs: Path, tmp_path: Path,
                                                                                change, message: str) -> None:
    folder = tmp_path / "run"
    shutil.copytree(next(p.parent for p in runs.rglob("robustness.parquet")), folder)
    table = read_records(folder, "robustness")
    write_records(folder, {"robustness": change(pd.DataFrame(table))})
    with pytest.raises(ProtobenchError, match=message) as refused:
        read_records(folder, "robustness")
    assert "`protobench evaluate RUN_DIR --robustness FAMILIES` to write it again" in str(refused.value)
