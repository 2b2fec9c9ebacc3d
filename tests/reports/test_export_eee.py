"""``protobench export RUNS --format eee --out DIR`` (flat layout): one Every Eval Ever record per run
that validates against the published eval.schema.json 0.3.0 (vendored), its scores the runs'
metrics, its standard errors and intervals those of an independent Student t over the test images,
byte-identical on a second export, and bad input refused before anything is written."""
from __future__ import annotations

import calendar
import hashlib
import json
import time
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from benchmark.cli import main
from benchmark.errors import ProtobenchError
from eee_support import FINISHED, N_IMAGES, correctness, main_raising, stability, validator, write_runs
from reports.eee import INSTANCE_SCHEMA_FILE, SCHEMA_FILE, SCHEMA_VERSION
from reports_support import write_run

#: reports/eee_schema/README.md: the members of every_eval_ever-0.3.0-py3-none-any.whl
SCHEMA_SHA256 = {SCHEMA_FILE: "c9c6195aec8a9dfa0b2aba4924ac1aa8a184c9d8ca97cee778cb531088e39b48",
                 INSTANCE_SCHEMA_FILE: "b16b7fa7f0aa32763444179d94ffb2336ddb12c3fd2903835fe491666c1ff3e6"}


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    return write_runs(tmp_path)


def export(runs: Path, out: Path, *extra: str) -> dict[str, dict]:
    assert main(["export", str(runs), "--format", "eee", "--out", str(out), *extra]) == 0
    return {p.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(out.iterdir())}


def test_vendored_schemas_are_the_published_ones() -> None:
    assert SCHEMA_VERSION == "0.3.0"
    for schema_file, digest in SCHEMA_SHA256.items():
        assert hashlib.sha256(schema_file.read_bytes()).hexdigest() == digest
        assert json.loads(schema_file.read_text(encoding="utf-8"))["version"] == SCHEMA_VERSION
    assert (SCHEMA_FILE.parent / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")


def test_one_valid_record_per_run_with_the_runs_values(runs: Path, tmp_path: Path, capsys) -> None:
    records = export(runs, tmp_path / "eee", "--organization", "Test Lab")
    results = {json.loads(p.read_text())["run_id"]: (p, json.loads(p.read_text())) for p in runs.rglob("result.json")}
    assert set(records) == {f"{run_id}.json" for run_id in results}
    assert capsys.readouterr().out.startswith(
        f"wrote 3 Every Eval Ever record(s) and 0 samples file(s) to {tmp_path / 'eee'} (schema 0.3.0, layout flat)\n")
    check = validator()
    for name, record in records.items():
        assert list(check.iter_errors(record)) == [], name
        path, result = results[record["evaluation_id"]]
        assert name == f"{result['run_id']}.json" and record["schema_version"] == SCHEMA_VERSION
        library = record["eval_library"]
        assert (library["name"], library["version"]) == ("protobench", "v9.9.9-test")
        assert library["additional_details"]["metrics_fingerprint"] == result["metrics_fingerprint"]
        assert record["source_metadata"]["source_organization_name"] == "Test Lab"
        spec = result["spec"]
        model = record["model_info"]
        assert model["id"] == (f"protobench/vmfproto-dinov2_vits14-synthbirds-J{spec['prototypes_per_class']}-default-"
                               f"seed{spec['seed']}")
        assert "developer" not in model  # no --developer: the id's prefix is protobench's, no lab is claimed
        details = model["additional_details"]
        assert (details["deployment_type"], details["model_availability"]) == ("self_deployed", "open_weights")
        finished = result["provenance"]["finished"]
        assert record["retrieved_timestamp"] == str(calendar.timegm(time.strptime(finished, "%Y-%m-%dT%H:%M:%S")))
        scores = {r["evaluation_result_id"]: r["score_details"]["score"] for r in record["evaluation_results"]}
        # every metric the run computed with a bounded range; dis (null) and size_local (a count) are not
        assert scores == {k: v for k, v in result["metrics"].items() if v is not None and k != "size_local"}
        # schema 0.3.0 takes detailed results only as a datastore samples file: the flat record names
        # the run's per-image records in its source metadata instead
        assert "detailed_evaluation_results" not in record
        source = record["source_metadata"]["additional_details"]
        table_file = path.parent / "per_image.parquet"
        if table_file.exists():
            assert source["per_image_file"] == table_file.relative_to(runs).as_posix()
            assert source["per_image_sha256"] == hashlib.sha256(table_file.read_bytes()).hexdigest()
            assert source["per_image_rows"] == str(N_IMAGES)
            assert model["inference_engine"] == {"name": "pytorch", "version": "2.14.1"}
        else:
            assert source["per_image_file"].startswith("none: run `protobench evaluate RUN_DIR`")


def test_a_developer_names_the_models_and_the_source(runs: Path, tmp_path: Path) -> None:
    for record in export(runs, tmp_path / "eee", "--developer", "lab-a").values():
        assert record["model_info"]["id"].startswith("lab-a/vmfproto-dinov2_vits14-synthbirds-J")
        assert record["model_info"]["developer"] == record["source_metadata"]["source_organization_name"] == "lab-a"
        assert list(validator().iter_errors(record)) == []


def test_standard_errors_and_intervals_are_student_t_over_the_test_images(runs: Path, tmp_path: Path) -> None:
    records = export(runs, tmp_path / "eee")
    for seed in FINISHED:
        result = json.loads(next(p for p in runs.rglob("result.json") if p.parent.name == f"s{seed}").read_text())
        by_id = {r["evaluation_result_id"]: r for r in records[f"{result['run_id']}.json"]["evaluation_results"]}
        sta = stability(seed)
        per_image = {"acc": (100.0 * correctness(seed), N_IMAGES), "sta": (sta[~np.isnan(sta)], N_IMAGES - 1)}
        for key, (values, n) in per_image.items():  # the oracle: scipy's t interval of the mean, df n − 1
            low, high = stats.t.interval(0.95, n - 1, loc=values.mean(), scale=stats.sem(values))
            uncertainty = by_id[key]["score_details"]["uncertainty"]
            ci = uncertainty["confidence_interval"]
            assert (ci["lower"], ci["upper"]) == pytest.approx((max(low, 0.0), min(high, 100.0)), abs=1e-9)
            assert uncertainty["standard_error"]["value"] == pytest.approx(stats.sem(values), rel=1e-12)
            assert ci["confidence_level"] == 0.95 and uncertainty["num_samples"] == n
            procedure = (f"crossed seeds × images (reports.intervals, the one policy of report --ci): Student t over {n} "
                         "images (1 seed: training variance not covered)")
            assert ci["method"] == procedure + ("; 1 image(s) with a missing value excluded" if key == "sta" else "")
            assert uncertainty["standard_error"]["method"] == f"analytic, {ci['method']}"
        assert by_id["sta"]["score_details"]["details"]["images_excluded"] == "1"
        assert by_id["con"]["score_details"]["details"]["interval"].startswith("none: the metric has no per-image")
        assert "uncertainty" not in by_id["con"]["score_details"]
        config = by_id["acc"]["metric_config"]
        assert (config["metric_id"], config["metric_unit"], config["min_score"], config["max_score"],
                config["lower_is_better"]) == ("accuracy", "percent", 0.0, 100.0, False)


def test_an_interval_without_spread_has_no_standard_error(tmp_path: Path) -> None:
    from benchmark.run.records import write_records
    import pandas as pd

    path = write_run(tmp_path / "runs" / "grid", "all-right", metrics={"acc": 100.0},
                     provenance={"code_version": "x", "finished": "2026-02-03T04:05:06"},
                     evaluation={"num_images": N_IMAGES})
    write_records(path.parent, {"per_image": pd.DataFrame({
        "index": range(N_IMAGES), "image": [f"{i}.png" for i in range(N_IMAGES)], "label": [0] * N_IMAGES,
        "predicted": [0] * N_IMAGES, "correct": [True] * N_IMAGES, "margin": [1.0] * N_IMAGES})})
    (record,) = export(tmp_path / "runs", tmp_path / "eee").values()
    (acc,) = record["evaluation_results"]
    uncertainty = acc["score_details"]["uncertainty"]
    low, high = stats.binomtest(N_IMAGES, N_IMAGES).proportion_ci(0.95, method="exact")  # Clopper–Pearson
    assert (uncertainty["confidence_interval"]["lower"], uncertainty["confidence_interval"]["upper"]) == \
        pytest.approx((100 * low, 100 * high))
    assert "standard_error" not in uncertainty
    assert acc["score_details"]["details"]["standard_error"].startswith("none: Clopper–Pearson over 60 images")
    assert list(validator().iter_errors(record)) == []


def test_a_second_export_is_byte_identical(runs: Path, tmp_path: Path) -> None:
    export(runs, tmp_path / "a")
    export(runs, tmp_path / "b")
    first = {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir()}
    assert first == {p.name: p.read_bytes() for p in (tmp_path / "b").iterdir()}
    assert all(json.dumps(json.loads(data), sort_keys=True, indent=2).encode() + b"\n" == data for data in first.values())


def test_the_validator_refuses_what_0_3_0_refuses(runs: Path, tmp_path: Path) -> None:
    record = next(iter(export(runs, tmp_path / "eee").values()))
    check = validator()
    model = record["model_info"]
    no_deployment = {**model, "additional_details": {k: v for k, v in model["additional_details"].items()
                                                     if k != "deployment_type"}}
    for broken in ({k: v for k, v in record.items() if k != "model_info"},
                   {**record, "retrieved_timestamp": 1770000000},
                   {**record, "model_info": no_deployment},
                   {**record, "detailed_evaluation_results": {"format": "jsonl", "file_path": "grid/s0/per_image.parquet"}},
                   {**record, "detailed_evaluation_results": {
                       "format": "parquet", "file_path": "data/c/d/m/0b7e0f6a-1c2d-4e3f-8a9b-0c1d2e3f4a5b_samples.jsonl"}}):
        assert list(check.iter_errors(broken))


def test_bad_out_and_bad_runs_are_refused_before_writing(runs: Path, tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.mkdir()
    with pytest.raises(ProtobenchError, match=r"already exists; remove it or choose another --out"):
        main_raising(["export", str(runs), "--format", "eee", "--out", str(taken)])
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ProtobenchError, match=r"cannot write .*file/eee: .* is not a folder you can write to"):
        main_raising(["export", str(runs), "--format", "eee", "--out", str(blocker / "eee")])
    with pytest.raises(ProtobenchError, match=r"--per-image and --format eee do not combine"):
        main_raising(["export", str(runs), "--format", "eee", "--per-image", "--out", str(tmp_path / "x")])
    with pytest.raises(ProtobenchError, match=r"--developer, --organization shape Every Eval Ever records: add --format"):
        main_raising(["export", str(runs), "--developer", "lab-a", "--organization", "L", "--out", str(tmp_path / "x.csv")])
    with pytest.raises(ProtobenchError, match=r"--collection names a folder of the submission tree"):
        main_raising(["export", str(runs), "--format", "eee", "--collection", "c", "--out", str(tmp_path / "x")])
    late = write_run(runs / "grid", "late", J=3, provenance={"code_version": "x"})  # no provenance.finished
    with pytest.raises(ProtobenchError, match=rf"{late}: provenance.finished is None.*protobench evaluate RUN_DIR"):
        main_raising(["export", str(runs), "--format", "eee", "--out", str(tmp_path / "eee")])
    late.unlink()
    crafted_id = runs / "grid" / "s0" / "result.json"
    good = crafted_id.read_text()
    crafted_id.write_text(good.replace(json.loads(good)["run_id"], "../../escape"))
    with pytest.raises(ProtobenchError, match=r"run_id '../../escape' is not a run id the suite writes"):
        main_raising(["export", str(runs), "--format", "eee", "--out", str(tmp_path / "eee")])
    crafted_id.write_text(good)
    copy = runs / "grid" / "s2"  # a crafted result: another seed under s0's run id (the pooling rule passes it)
    copy.mkdir(parents=True)
    crafted = json.loads(good)
    crafted["spec"]["seed"] = 2
    (copy / "result.json").write_text(json.dumps(crafted))
    with pytest.raises(ProtobenchError, match=r"s0/result.json and .*s2/result.json hold the same run id"):
        main_raising(["export", str(runs), "--format", "eee", "--out", str(tmp_path / "eee")])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "runs", "taken"]  # nothing written, no staging left
