"""``protobench export RUNS --format eee --out DIR``: one Every Eval Ever record per run that
validates against the published eval.schema.json (0.2.2, vendored), its scores the runs' metrics,
its intervals those of an independent Student t over the test images, byte-identical on a second
export, and bad input refused before anything is written."""
from __future__ import annotations

import calendar
import hashlib
import json
import time
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd
import pytest
from scipy import stats

from benchmark.cli import main
from benchmark.errors import ProtobenchError
from benchmark.run.records import write_records
from reports.eee import SCHEMA_FILE, SCHEMA_VERSION
from reports_support import write_run

N_IMAGES = 60
FINISHED = {0: "2026-02-03T04:05:06", 1: "2026-02-04T10:00:00"}
SCHEMA_SHA256 = "088fed8029d42fb3a607aa67e1a05c39e425241b5cd90803705b37562f402f2a"  # reports/eee_schema/README.md


def correctness(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random(N_IMAGES) < 0.7


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """Two runs of one cell with per-image records (accuracy and stability per image) and one without."""
    root = tmp_path / "runs" / "grid"
    for seed, finished in FINISHED.items():
        correct = correctness(seed)
        sta = np.random.default_rng(100 + seed).uniform(20.0, 90.0, N_IMAGES)
        path = write_run(root, f"s{seed}", seed=seed,
                         metrics={"acc": 100 * correct.mean(), "con": 55.0 + seed, "sta": float(sta.mean()),
                                  "dis": None, "size_local": 4.0},
                         provenance={"code_version": "v9.9.9-test", "device": "cpu", "finished": finished,
                                     "dataset_fingerprint": {"test": "fp-test"}},
                         evaluation={"num_images": N_IMAGES})
        labels = np.arange(N_IMAGES) % 3
        write_records(path.parent, {"per_image": pd.DataFrame({
            "index": range(N_IMAGES), "image": [f"c/{i}.png" for i in range(N_IMAGES)], "label": labels,
            "predicted": np.where(correct, labels, (labels + 1) % 3), "correct": correct,
            "margin": np.where(correct, 1.0, -1.0), "sta": sta})})
    write_run(root, "bare", J=7, metrics={"acc": 61.0},
              provenance={"code_version": "v9.9.9-test", "finished": "2026-02-05T00:00:00"})
    return tmp_path / "runs"


def validator() -> jsonschema.Draft7Validator:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def export(runs: Path, out: Path, *extra: str) -> dict[str, dict]:
    assert main(["export", str(runs), "--format", "eee", "--out", str(out), *extra]) == 0
    return {p.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(out.iterdir())}


def main_raising(argv: list[str]) -> None:
    from benchmark.cli import build_parser

    args = build_parser().parse_args(argv)
    args.func(args)


def test_vendored_schema_is_the_published_one() -> None:
    assert hashlib.sha256(SCHEMA_FILE.read_bytes()).hexdigest() == SCHEMA_SHA256
    assert json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))["version"] == SCHEMA_VERSION
    assert (SCHEMA_FILE.parent / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")


def test_one_valid_record_per_run_with_the_runs_values(runs: Path, tmp_path: Path, capsys) -> None:
    records = export(runs, tmp_path / "eee", "--organization", "Test Lab")
    results = {json.loads(p.read_text())["run_id"]: (p, json.loads(p.read_text())) for p in runs.rglob("result.json")}
    assert set(records) == {f"{run_id}.json" for run_id in results}
    assert capsys.readouterr().out.startswith(f"wrote 3 Every Eval Ever record(s) to {tmp_path / 'eee'}\n")
    check = validator()
    for name, record in records.items():
        assert list(check.iter_errors(record)) == [], name
        path, result = results[record["evaluation_id"]]
        assert name == f"{result['run_id']}.json" and record["schema_version"] == SCHEMA_VERSION
        assert record["eval_library"] == {"name": "protobench", "version": "v9.9.9-test", "additional_details":
                                          {"metrics_fingerprint": result["metrics_fingerprint"]}}
        assert record["source_metadata"]["source_organization_name"] == "Test Lab"
        finished = result["provenance"]["finished"]
        assert record["retrieved_timestamp"] == str(calendar.timegm(time.strptime(finished, "%Y-%m-%dT%H:%M:%S")))
        scores = {r["evaluation_result_id"]: r["score_details"]["score"] for r in record["evaluation_results"]}
        # every metric the run computed with a bounded range; dis (null) and size_local (a count) are not
        assert scores == {k: v for k, v in result["metrics"].items() if v is not None and k != "size_local"}
        details = record.get("detailed_evaluation_results")
        if (path.parent / "per_image.parquet").exists() or (path.parent / "per_image.csv.gz").exists():
            table_file = runs / details["file_path"]
            assert table_file.parent == path.parent and table_file.name.startswith("per_image.")
            assert details["checksum"] == hashlib.sha256(table_file.read_bytes()).hexdigest()
            assert details["hash_algorithm"] == "sha256" and details["total_rows"] == N_IMAGES
        else:
            assert details is None


def test_intervals_are_student_t_over_the_test_images(runs: Path, tmp_path: Path) -> None:
    records = export(runs, tmp_path / "eee")
    for seed in FINISHED:
        result = json.loads(next(p for p in runs.rglob("result.json") if p.parent.name == f"s{seed}").read_text())
        by_id = {r["evaluation_result_id"]: r for r in records[f"{result['run_id']}.json"]["evaluation_results"]}
        per_image = {"acc": 100.0 * correctness(seed), "sta": np.random.default_rng(100 + seed).uniform(20, 90, N_IMAGES)}
        for key, values in per_image.items():  # the oracle: scipy's t interval of the per-image mean, df n − 1
            low, high = stats.t.interval(0.95, N_IMAGES - 1, loc=values.mean(), scale=stats.sem(values))
            uncertainty = by_id[key]["score_details"]["uncertainty"]
            ci = uncertainty["confidence_interval"]
            assert (ci["lower"], ci["upper"]) == pytest.approx((max(low, 0.0), min(high, 100.0)), abs=1e-9)
            assert ci["confidence_level"] == 0.95 and uncertainty["num_samples"] == N_IMAGES
            assert ci["method"] == f"Student t over {N_IMAGES} images (1 seed: training variance not covered)"
        assert by_id["con"]["score_details"]["details"]["interval"].startswith("none: the metric has no per-image")
        assert "uncertainty" not in by_id["con"]["score_details"]
        config = by_id["acc"]["metric_config"]
        assert (config["metric_id"], config["metric_unit"], config["min_score"], config["max_score"],
                config["lower_is_better"]) == ("accuracy", "percent", 0.0, 100.0, False)


def test_a_second_export_is_byte_identical(runs: Path, tmp_path: Path) -> None:
    export(runs, tmp_path / "a")
    export(runs, tmp_path / "b")
    first = {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir()}
    assert first == {p.name: p.read_bytes() for p in (tmp_path / "b").iterdir()}
    assert all(json.dumps(json.loads(data), sort_keys=True, indent=2).encode() + b"\n" == data for data in first.values())


def test_the_validator_refuses_a_broken_record(runs: Path, tmp_path: Path) -> None:
    record = next(iter(export(runs, tmp_path / "eee").values()))
    check = validator()
    for broken in ({k: v for k, v in record.items() if k != "model_info"},
                   {**record, "retrieved_timestamp": 1770000000},
                   {**record, "detailed_evaluation_results": {"format": "parquet"}}):
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
    late = write_run(runs / "grid", "late", J=3, provenance={"code_version": "x"})  # no provenance.finished
    with pytest.raises(ProtobenchError, match=rf"{late}: provenance.finished is None.*protobench evaluate RUN_DIR"):
        main_raising(["export", str(runs), "--format", "eee", "--out", str(tmp_path / "eee")])
    late.unlink()
    copy = runs / "grid" / "s2"  # a crafted result: another seed under s0's run id (the pooling rule passes it)
    copy.mkdir(parents=True)
    crafted = json.loads((runs / "grid" / "s0" / "result.json").read_text())
    crafted["spec"]["seed"] = 2
    (copy / "result.json").write_text(json.dumps(crafted))
    with pytest.raises(ProtobenchError, match=r"s0/result.json and .*s2/result.json hold the same run id"):
        main_raising(["export", str(runs), "--format", "eee", "--out", str(tmp_path / "eee")])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "runs", "taken"]  # nothing written, no staging left
