"""``protobench bundle`` writes Hugging Face eval-results files (``.eval_results/*.yaml``, the
format of https://huggingface.co/docs/hub/eval-results): one per run, exactly the documented
fields, the values of each run's result.json, huggingface_hub reads them back, a rebuild gives the
same bytes, they are in SHA256SUMS (a changed byte fails ``bundle verify`` naming the bundle), and a
bad finished time or repository id is refused before anything is written. No training: the runs
are spec and result files, as the readers see them."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from huggingface_hub import parse_eval_result_entries

from benchmark.bundle.eval_results import EVAL_METRICS, HUB_BENCHMARK, eval_results_file
from benchmark.bundle.manifest import MANIFEST_FILE
from benchmark.cli import main

METRICS = {"acc": 81.25, "con": 40.5, "sta": 77.0, "dis": 12.125, "comp": 3.0, "n_test": 96}
#: the keys the Hub documents for one entry (https://huggingface.co/docs/hub/eval-results) that a
#: bundle writes: no verifyToken (no HF Jobs run), no revision (the Hub dataset's git revision)
DOCUMENTED = {"dataset", "value", "date", "notes"}


def _run(root: Path, grid: str, run_id: str, seed: int, metrics: dict[str, object],
         finished: object = "2026-02-03T04:05:06") -> None:
    spec = {"dataset": "synthbirds", "backbone": "dinov2_vits14", "method": "vmfproto", "prototypes_per_class": 2,
            "seed": seed}
    run = root / grid / run_id
    run.mkdir(parents=True)
    (run / "spec.json").write_text(json.dumps(spec))
    (run / "result.json").write_text(json.dumps({"run_id": run_id, "grid": grid, "spec": spec, "metrics": metrics,
                                                 "provenance": {"finished": finished}}))


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    _run(tmp_path / "runs", "tiny", "0123456789ab", 0, METRICS)
    _run(tmp_path / "runs", "tiny", "ba9876543210", 1, {**METRICS, "acc": 62.5, "con": float("nan")},
         finished="2026-02-04T00:00:00")
    _run(tmp_path / "runs", "other", "0123456789ab", 0, {"acc": 50.0})  # same run id, another grid
    return tmp_path / "runs"


def _results(root: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted(root.rglob("result.json"))]


def test_every_run_has_its_file_with_the_documented_fields_and_its_metrics(runs: Path, tmp_path: Path) -> None:
    assert main(["bundle", str(runs), "--out", str(tmp_path / "b")]) == 0
    bundle = tmp_path / "b"
    files = sorted(p.name for p in (bundle / ".eval_results").iterdir())
    assert files == ["other+0123456789ab.yaml", "tiny+0123456789ab.yaml", "tiny+ba9876543210.yaml"]
    for result in _results(runs):
        path = bundle / ".eval_results" / f"{result['grid']}+{result['run_id']}.yaml"
        entries = yaml.safe_load(path.read_text(encoding="utf-8"))
        expected = {m: v for m, v in result["metrics"].items() if m in EVAL_METRICS and math.isfinite(v)}
        assert {e["dataset"]["task_id"]: e["value"] for e in entries} == {f"synthbirds-{m}": v
                                                                          for m, v in expected.items()}
        for entry in entries:
            assert set(entry) == DOCUMENTED and set(entry["dataset"]) == {"id", "task_id"}
            assert entry["dataset"]["id"] == HUB_BENCHMARK
            assert entry["date"] == result["provenance"]["finished"]  # a string, not a YAML timestamp
            assert f"seed {result['spec']['seed']}; run {result['grid']}/{result['run_id']}" in entry["notes"]
        parsed = parse_eval_result_entries(entries)  # huggingface_hub's own reader
        assert [(e.dataset_id, e.value) for e in parsed] == [(HUB_BENCHMARK, v) for v in expected.values()]
    listed = (bundle / MANIFEST_FILE).read_text()
    assert all(f"  .eval_results/{name}\n" in listed for name in files)
    assert (bundle / "README.md").read_text().startswith("---\n")  # the model card is still written


def test_a_rebuild_gives_the_same_bytes_and_push_names_the_source(runs: Path, tmp_path: Path) -> None:
    for out in ("a", "b"):
        assert main(["bundle", str(runs), "--out", str(tmp_path / out)]) == 0
    first, second = (sorted((tmp_path / out / ".eval_results").iterdir()) for out in ("a", "b"))
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]
    assert main(["bundle", str(runs), "--out", str(tmp_path / "c"), "--hub-benchmark", "lab/birds"]) == 0
    (entry, *_) = yaml.safe_load((tmp_path / "c" / ".eval_results" / "tiny+0123456789ab.yaml").read_text())
    assert entry["dataset"]["id"] == "lab/birds" and "source" not in entry
    (result,) = [r for r in _results(runs) if r["grid"] == "tiny" and r["spec"]["seed"] == 0]
    (entry, *_) = yaml.safe_load(eval_results_file(result, runs / "result.json", repo_id="lab/heads"))
    assert entry["source"] == {"url": "https://huggingface.co/lab/heads/tree/main/tiny/0123456789ab",
                               "name": "protobench run tiny/0123456789ab"}


def test_a_changed_byte_in_an_eval_results_file_fails_verify_naming_the_bundle(
        runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundle = tmp_path / "b"
    assert main(["bundle", str(runs), "--out", str(bundle)]) == 0
    assert main(["bundle", "verify", str(bundle)]) == 0
    target = bundle / ".eval_results" / "tiny+0123456789ab.yaml"
    target.write_bytes(target.read_bytes().replace(b"81.25", b"91.25"))
    capsys.readouterr()
    assert main(["bundle", "verify", str(bundle)]) == 1
    err = capsys.readouterr().err
    assert f"{target}: changed" in err and f"bundle {bundle} FAILED" in err


@pytest.mark.parametrize(("option", "finished", "expected"), [
    ([], "yesterday", "provenance.finished is 'yesterday'"),
    (["--hub-benchmark", "not a repo id"], "2026-02-03T04:05:06", "--hub-benchmark 'not a repo id'"),
])
def test_bad_input_is_refused_before_writing(tmp_path: Path, capsys: pytest.CaptureFixture[str], option: list[str],
                                             finished: str, expected: str) -> None:
    _run(tmp_path / "runs", "tiny", "0123456789ab", 0, METRICS, finished=finished)
    assert main(["bundle", str(tmp_path / "runs"), "--out", str(tmp_path / "b"), *option]) == 2
    assert expected in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]
