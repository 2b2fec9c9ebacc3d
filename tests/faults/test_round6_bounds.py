"""Reliability round 6's remaining tracebacks and bounds, each one clear refusal (rc 2) now:
``bundle --out /proc/x``, ``report --reference knn --ci 150``, ``site --leaderboard`` with a
schema-valid document whose standing names an unknown entry, ``perf --tuning 100000000``, and a
duplicated image id in ``export --per-image`` (as ``compare`` refuses it)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from benchmark.bundle.make import make_bundle
from benchmark.cli import main
from leaderboard_runs import lab_run

REPO = Path(__file__).resolve().parents[2]


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("protobench: error: ") and "Traceback" not in err
    return err


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bounds") / "runs"
    for seed in (0, 1):
        lab_run(root, "vmfproto", seed, 80 - seed)
        lab_run(root, "knn", seed, 70 + seed)
    return root


def test_bundle_to_an_unwritable_out_is_refused_naming_it(runs: Path, tmp_path: Path, capsys) -> None:
    assert "--out /proc/x cannot be written" in _refused(["bundle", str(runs), "--out", "/proc/x"], capsys)
    (tmp_path / "file").write_text("a file on the way")
    err = _refused(["bundle", str(runs), "--out", str(tmp_path / "file" / "bundle")], capsys)
    assert f"--out {tmp_path / 'file' / 'bundle'} cannot be written" in err


def test_ci_out_of_range_is_refused_with_reference_as_without(runs: Path, capsys) -> None:
    for extra in ([], ["--reference", "knn"]):
        err = _refused(["report", str(runs), "--ci", "150", *extra], capsys)
        assert "--ci 150 must lie strictly between 0 and 100" in err
    assert main(["report", str(runs), "--ci", "90", "--reference", "knn"]) == 0  # the path it guards runs


def test_a_leaderboard_whose_standing_names_an_unknown_entry_is_refused_by_site(runs: Path, tmp_path: Path,
                                                                                capsys) -> None:
    make_bundle([runs], tmp_path / "labA")
    assert main(["leaderboard", str(tmp_path / "labA"), "--out", str(tmp_path / "L")]) == 0
    document = json.loads((tmp_path / "L" / "leaderboard.json").read_text())
    document["boards"][0]["rankings"][0]["standings"][0]["entry"] = "ffffffffffff"
    (tmp_path / "L" / "leaderboard.json").write_text(json.dumps(document))
    err = _refused(["site", str(runs), "--out", str(tmp_path / "S"), "--leaderboard", str(tmp_path / "L")], capsys)
    assert "is not a leaderboard this protobench reads" in err and "'ffffffffffff'" in err
    assert not (tmp_path / "S").exists()


def test_perf_tuning_has_an_upper_bound(capsys) -> None:
    err = _refused(["perf", str(REPO / "benchmark" / "grids" / "demo.toml"), "--tuning", "100000000"], capsys)
    assert "--tuning 100000000 must lie in 1..64" in err


def test_export_per_image_refuses_a_duplicated_image_id_as_compare_does(runs: Path, tmp_path: Path, capsys) -> None:
    import shutil

    copy = Path(shutil.copytree(runs, tmp_path / "runs"))
    run = sorted(copy.glob("lab/*/per_image.parquet"))[0]
    table = pd.read_parquet(run)
    table.loc[1, "image"] = table.loc[0, "image"]
    table.to_parquet(run, index=False)
    expected = f"{run.parent}: its per-image records list image 'images/000.jpg' twice"
    assert expected in _refused(["compare", str(copy), "--by", "method"], capsys)
    assert expected in _refused(["export", str(copy), "--out", str(tmp_path / "x.csv"), "--per-image"], capsys)
    assert not (tmp_path / "x.csv").exists()
