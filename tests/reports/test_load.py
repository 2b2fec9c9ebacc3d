"""Loading results and published CSVs into the tidy frame (reports.load)."""
from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from benchmark.errors import ProtobenchError
from reports.columns import TIDY_COLUMNS
from reports.load import load_csv, load_results
from reports_support import PAPER_CSV as PAPER
from reports_support import GOOD_RESULT, REPO, RUNS


def write_result(root: Path, payload: object, name: str = "run") -> Path:
    path = root / "grid" / name / "result.json"
    path.parent.mkdir(parents=True)
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload))
    return path


def one(frame: pd.DataFrame, **where: object) -> pd.Series:
    mask = pd.Series(True, index=frame.index)
    for column, value in where.items():
        mask &= frame[column] == value
    assert mask.sum() == 1, where
    return frame[mask].iloc[0]


def test_fixture_loads_one_row_per_run_with_tidy_columns() -> None:
    frame = load_results([RUNS])
    assert list(frame.columns) == list(TIDY_COLUMNS)
    assert len(frame) == len(list(RUNS.rglob("result.json"))) == 32
    assert str(frame["J"].dtype) == "Int64" and str(frame["seed"].dtype) == "Int64"
    row = one(frame, dataset="cub", backbone="dinov2_vitb14", method="vmfproto", J=5, variant="default", seed=1)
    assert (row["con"], row["sta"], row["dis"], row["acc"], row["comp"]) == (78.0, 81.5, 96.8, 90.4, 55.0)
    assert row["epoch_seconds"] == 210.0 and row["inference_images_per_second"] == 73.0
    assert row["n_seeds"] == 1 and row["grid"] == "cub_main" and len(row["run_id"]) == 12
    assert Path(row["run_dir"]).name == row["run_id"]
    assert row["device"] == "cpu" and json.loads(row["packages"])["torch"] == "2.14.1"
    assert json.loads(row["dataset_fingerprint"]) == {"train": "cub-train", "test": "cub-test"}


def test_null_and_absent_metrics_are_nan() -> None:
    frame = load_results([RUNS])
    null_dis = one(frame, method="tesnet", backbone="dinov2_vits14", dataset="cub")
    assert math.isnan(null_dis["dis"]) and null_dis["acc"] == 82.7
    absent_sta = one(frame, method="mgproto", backbone="dinov3_vitb16", dataset="cub")
    assert math.isnan(absent_sta["sta"]) and absent_sta["con"] == 17.2
    no_timing = one(frame, method="tesnet", backbone="dinov2_vitb14", J=3)
    assert math.isnan(no_timing["epoch_seconds"])


def test_a_result_reached_through_two_directories_is_read_once() -> None:
    assert len(load_results([RUNS, RUNS / "cub_main"])) == 32


def test_missing_directory_and_empty_directory_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(ProtobenchError, match="does not exist"):
        load_results([tmp_path / "nope"])
    with pytest.raises(ProtobenchError, match="No result.json under"):
        load_results([tmp_path])


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "the top level is a list, not a JSON object"),
        ('{"run_id": "x", "metrics": {"acc": 1' + "0" * 5000 + "}}", "an integer of 5001 digits"),
        ("[" * 100_000 + "]" * 100_000, "nested deeper than 32 levels"),
        ({**GOOD_RESULT, "spec": None}, "'spec' must be a JSON object"),
        ({k: v for k, v in GOOD_RESULT.items() if k != "metrics"}, "'metrics' must be a JSON object"),
        ({**GOOD_RESULT, "spec": {**GOOD_RESULT["spec"], "prototypes_per_class": "5"}},
         "spec.prototypes_per_class must be an integer"),
        ({**GOOD_RESULT, "spec": {**GOOD_RESULT["spec"], "seed": True}}, "spec.seed must be an integer"),
        ({**GOOD_RESULT, "spec": {k: v for k, v in GOOD_RESULT["spec"].items() if k != "variant"}},
         "spec.variant must be a non-empty string"),
        ({**GOOD_RESULT, "metrics": {"acc": "90.4"}}, "metrics.acc must be a number or null"),
        ({**GOOD_RESULT, "timing": [1]}, "'timing' must be a JSON object"),
        ({k: v for k, v in GOOD_RESULT.items() if k != "run_id"}, "run_id must be a non-empty string"),
    ],
)
def test_malformed_result_names_the_file(tmp_path: Path, payload: object, problem: str, capsys) -> None:
    write_result(tmp_path, GOOD_RESULT, name="fine")
    bad = write_result(tmp_path, payload, name="broken")
    assert len(load_results([tmp_path])) == 1  # the bad file costs its own row only
    warning = capsys.readouterr().err
    assert str(bad) in warning and problem in warning
    shutil.rmtree(tmp_path / "grid" / "fine")
    with pytest.raises(ProtobenchError) as info:  # nothing readable left
        load_results([tmp_path])
    assert str(bad) in str(info.value) and problem in str(info.value)


def test_optional_sections_may_be_absent(tmp_path: Path) -> None:
    bare = {k: v for k, v in GOOD_RESULT.items() if k not in ("timing", "provenance", "grid")}
    write_result(tmp_path, bare)
    row = load_results([tmp_path]).iloc[0]
    assert math.isnan(row["epoch_seconds"]) and pd.isna(row["code_version"]) and pd.isna(row["grid"])
    assert row["con"] == 77.7


@pytest.mark.parametrize("name", sorted(p.stem for p in PAPER.glob("*.csv")))
def test_published_csvs_load(name: str) -> None:
    frame = load_csv(PAPER / f"{name}.csv")
    assert list(frame.columns) == list(TIDY_COLUMNS)
    assert len(frame) > 0 and frame["J"].notna().all()
    assert frame["source"].iloc[0].endswith(f"{name}.csv:2")


def test_published_cub_main_marks_five_seed_rows() -> None:
    frame = load_csv(PAPER / "cub_main.csv")
    assert len(frame) == 7 * 3 * 4
    multi = frame[frame["n_seeds"] == 5]
    assert set(multi["method"]) == {"nppp", "vmfproto"} and multi["seed"].isna().all()
    row = one(frame, method="vmfproto", backbone="dinov2_vitb14", J=5)
    assert (row["con"], row["sta"], row["dis"], row["acc"]) == (77.7, 81.3, 96.9, 90.4)
    assert (frame.loc[frame["n_seeds"] == 1, "method"] != "nppp").all()


def test_published_seed_robustness_carries_std() -> None:
    row = one(load_csv(PAPER / "seed_robustness.csv"), method="nppp", backbone="dinov3_vits16", J=5)
    assert (row["con"], row["con_std"], row["acc"], row["acc_std"]) == (0.3, 0.1, 57.4, 0.3)


def test_exported_frame_loads_back_as_csv(tmp_path: Path) -> None:
    frame = load_results([RUNS])
    frame.to_csv(tmp_path / "all.csv", index=False)
    again = load_csv(tmp_path / "all.csv")
    pd.testing.assert_frame_equal(
        frame.drop(columns="source"), again.drop(columns="source"), check_dtype=False
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("dataset,backbone,method,J,acc\ncub,b,m,5,1\n", "lacks required column(s) variant"),
        ("dataset,backbone,method,J,variant,Acc\ncub,b,m,5,default,1\n", "unknown column(s) Acc"),
        ("dataset,backbone,method,J,variant\ncub,b,m,5,default\n", "has no metric column"),
        ("dataset,backbone,method,J,variant,acc\ncub,b,m,five,default,1\n", "line 2: J must be an integer"),
        ("dataset,backbone,method,J,variant,acc\ncub,b,m,5,default,1\ncub,b,m,3,default,x\n",
         "line 3: acc must be a number"),
        ("dataset,backbone,method,J,variant,acc\ncub,,m,5,default,1\n", "line 2: column backbone is empty"),
        ("dataset,backbone,method,J,variant,seed,n_seeds,acc\ncub,b,m,5,default,0,5,1\n",
         "leave its seed empty"),
        ("dataset,backbone,method,J,variant,n_seeds,acc\ncub,b,m,5,default,0,1\n",
         "n_seeds must be a positive"),
    ],
)
def test_bad_csv_is_a_clear_user_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "paper.csv"
    path.write_text(text)
    with pytest.raises(ProtobenchError) as info:
        load_csv(path)
    assert str(path) in str(info.value) and message in str(info.value)


def test_missing_csv_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(ProtobenchError, match="does not exist"):
        load_csv(tmp_path / "paper.csv")


def test_building_the_cli_parser_does_not_import_pandas() -> None:
    # every protobench command builds the parser; only `report` needs pandas (~0.3 s to import)
    code = ("import sys; from benchmark.cli import build_parser; build_parser(); "
            "assert 'pandas' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_reports_never_import_training_code() -> None:
    code = (
        "import sys; import benchmark.cli.results, reports.render, reports.load, reports.pivot, reports.export, "
        "reports.plots, reports.curves, reports.coverage; "
        "heavy = ('torch', 'timm', 'methods', 'metrics', 'benchmark.run.training'); "
        "loaded = [m for m in heavy if m in sys.modules]; "
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
