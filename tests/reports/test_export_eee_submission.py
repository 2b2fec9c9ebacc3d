"""``protobench export RUNS --format eee --layout submission --developer NAME --out DIR``: the Every
Eval Ever datastore tree. Every record validates against the vendored eval.schema.json 0.3.0 and
every samples line against instance_level_eval.schema.json 0.3.0; the paths, the companion
relationship and the counts are checked as upstream's validator checks them
(every_eval_ever/validator/validation_core.py: check_path_structure, check_companion_exists,
check_instance_companion, check_model_identity_path), written out here; the record's checksum is the
samples file's SHA-256; bad names and a taken --out are refused before anything is written."""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest

from benchmark.cli import main
from benchmark.errors import ProtobenchError
from eee_support import (N_IMAGES, correctness, instance_validator, labels, main_raising, predictions, stability,
                         validator, write_runs)
from reports_support import write_run

UUID4 = r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"  # upstream's _UUID_RE
RECORD_PATH = re.compile(rf"data/([^/]+)/([^/]+)/([^/]+)/({UUID4})\.json")
SAMPLES_PATH = re.compile(rf"data/([^/]+)/([^/]+)/([^/]+)/({UUID4})_samples\.jsonl")


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    return write_runs(tmp_path)


def submit(runs: Path, out: Path, *extra: str) -> dict[str, bytes]:
    """The tree's files by their datastore path (relative to ``out``)."""
    assert main(["export", str(runs), "--format", "eee", "--layout", "submission", "--out", str(out), *extra]) == 0
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def sample_hash_oracle(raw: str, reference: list[str]) -> str:
    """The hash as the schema describes it, "hash of (input.raw + input.reference)", in the canonical
    JSON form of upstream's openeval adapter (sorted keys, compact separators)."""
    return hashlib.sha256(json.dumps({"raw": raw, "reference": reference}, sort_keys=True,
                                     separators=(",", ":")).encode()).hexdigest()


def test_the_tree_validates_and_each_record_checks_its_samples(runs: Path, tmp_path: Path, capsys) -> None:
    tree = submit(runs, tmp_path / "E", "--developer", "lab-a")
    assert capsys.readouterr().out.startswith(
        f"wrote 3 Every Eval Ever record(s) and 2 samples file(s) to {tmp_path / 'E'} (schema 0.3.0, layout submission)")
    records = {path: json.loads(data) for path, data in tree.items() if RECORD_PATH.fullmatch(path)}
    samples = {path: data for path, data in tree.items() if SAMPLES_PATH.fullmatch(path)}
    assert len(records) == 3 and len(samples) == 2 and len(tree) == 5  # nothing else in the tree
    check, check_line = validator(), instance_validator()
    results = {json.loads(p.read_text())["run_id"]: json.loads(p.read_text()) for p in runs.rglob("result.json")}
    for path, record in records.items():
        assert list(check.iter_errors(record)) == [], path
        collection, developer, model, uuid = RECORD_PATH.fullmatch(path).groups()
        spec = results[record["evaluation_id"]]["spec"]
        assert (collection, developer) == ("protobench-synthbirds", "lab-a")
        assert model == f"vmfproto-dinov2_vits14-synthbirds-J{spec['prototypes_per_class']}-default-seed{spec['seed']}"
        # upstream's model identity check: the id's prefix is the developer folder, the rest the model folder
        assert record["model_info"]["id"] == f"{developer}/{model}" and record["model_info"]["developer"] == "lab-a"
        assert record["source_metadata"]["source_organization_name"] == "lab-a"  # --organization defaults to it
        detail = record.get("detailed_evaluation_results")
        if spec["prototypes_per_class"] == 7:  # the run without per-image records: no samples, none claimed
            assert detail is None and f"data/{collection}/{developer}/{model}/{uuid}_samples.jsonl" not in tree
            continue
        # upstream's companion check: exactly <uuid>_samples.jsonl beside the record, jsonl, rows agree
        assert detail["file_path"] == f"data/{collection}/{developer}/{model}/{uuid}_samples.jsonl"
        assert detail["format"] == "jsonl" and detail["hash_algorithm"] == "sha256"
        data = samples[detail["file_path"]]
        assert detail["checksum"] == hashlib.sha256(data).hexdigest()
        lines = [json.loads(line) for line in data.decode().splitlines()]
        assert detail["total_rows"] == len(lines) == N_IMAGES
        for line in lines:
            assert list(check_line.iter_errors(line)) == [], line
            assert (line["evaluation_id"], line["model_id"]) == (record["evaluation_id"], record["model_info"]["id"])
            assert line["schema_version"] == "0.3.0" and line["evaluation_result_id"] == "acc"
            assert line["evaluation_name"] == next(r["evaluation_name"] for r in record["evaluation_results"]
                                                   if r["evaluation_result_id"] == "acc")


def test_each_line_is_its_test_image(runs: Path, tmp_path: Path) -> None:
    tree = submit(runs, tmp_path / "E", "--developer", "lab-a")
    by_seed = {}
    for path, data in tree.items():
        if SAMPLES_PATH.fullmatch(path):
            by_seed[int(path.split("-seed")[1].split("/")[0])] = [json.loads(x) for x in data.decode().splitlines()]
    assert sorted(by_seed) == [0, 1]
    for seed, lines in by_seed.items():
        correct, sta = correctness(seed), stability(seed)
        for i, line in enumerate(lines):
            image, label, predicted = f"c{i % 3}/{i}.png", str(labels()[i]), str(predictions(seed)[i])
            assert line["sample_id"] == line["input"]["raw"] == image
            assert line["input"]["reference"] == [label] and line["output"] == {"raw": [predicted]}
            assert line["interaction_type"] == "single_turn" and "messages" not in line
            assert line["answer_attribution"] == [{"turn_idx": 0, "source": "output.raw", "extracted_value": predicted,
                                                   "extraction_method": "argmax of the class logits",
                                                   "is_terminal": True}]
            expected = {"score": float(correct[i]), "is_correct": bool(correct[i])}
            if not np.isnan(sta[i]):  # an undefined part is left out, never written as NaN
                expected["sta"] = pytest.approx(float(sta[i]), rel=1e-15)
            assert line["evaluation"] == expected
            assert line["metadata"] == {"test_index": str(i)}
            assert line["sample_hash"] == sample_hash_oracle(image, [label])
        # the run's accuracy is the mean of its lines' scores
        assert 100 * np.mean([x["evaluation"]["score"] for x in lines]) == pytest.approx(100 * correct.mean())
    # one image with one label hashes alike in every run, whatever the prediction
    assert [x["sample_hash"] for x in by_seed[0]] == [x["sample_hash"] for x in by_seed[1]]
    assert len({x["sample_hash"] for x in by_seed[0]}) == N_IMAGES


def test_the_line_validator_refuses_what_0_3_0_refuses(runs: Path, tmp_path: Path) -> None:
    tree = submit(runs, tmp_path / "E", "--developer", "lab-a")
    line = json.loads(next(d for p, d in tree.items() if SAMPLES_PATH.fullmatch(p)).decode().splitlines()[0])
    check_line = instance_validator()
    assert list(check_line.iter_errors(line)) == []
    for broken in ({k: v for k, v in line.items() if k != "output"},  # single_turn needs output
                   {**line, "messages": []},  # … and no messages
                   {**line, "evaluation": {"score": 1.0}},  # is_correct is required
                   {**line, "input": {"raw": line["input"]["raw"]}},  # reference is required
                   {**line, "metadata": {"test_index": 3}},  # metadata values are strings
                   {**line, "label": 1}):  # no field outside the schema
        assert list(check_line.iter_errors(broken)), broken


def test_a_second_export_is_byte_identical_and_names_depend_on_the_developer(runs: Path, tmp_path: Path) -> None:
    first = submit(runs, tmp_path / "a", "--developer", "lab-a")
    assert submit(runs, tmp_path / "b", "--developer", "lab-a") == first
    other = submit(runs, tmp_path / "c", "--developer", "lab-b", "--collection", "cub.v2")
    uuids = {RECORD_PATH.fullmatch(p).group(4) for p in first if RECORD_PATH.fullmatch(p)}
    assert uuids.isdisjoint(RECORD_PATH.fullmatch(p).group(4) for p in other if RECORD_PATH.fullmatch(p))
    assert all(p.startswith("data/cub.v2/lab-b/") for p in other)


@pytest.mark.parametrize(("option", "name"), [
    ("--developer", "lab a"), ("--developer", "../up"), ("--developer", "data"), ("--developer", "Unknown"),
    ("--developer", "NUL.txt"), ("--developer", "lab."), ("--developer", "-lab"), ("--developer", ""),
    ("--collection", "a/b"), ("--collection", 'c:"x"'), ("--collection", "é")])
def test_a_name_outside_the_allowed_set_is_refused_before_anything_is_read(
        runs: Path, tmp_path: Path, option: str, name: str) -> None:
    argv = ["export", str(runs / "missing"), "--format", "eee", "--layout", "submission", "--out", str(tmp_path / "E")]
    extra = [f"{option}={name}"] + (["--developer", "lab-a"] if option != "--developer" else [])
    with pytest.raises(ProtobenchError, match=rf"^{option} .* an Every Eval Ever datastore folder takes letters A-Z "
                                              r"a-z, digits 0-9, '\.', '_' and '-'"):
        main_raising(argv + extra)  # runs/missing does not exist: the name was refused first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]


def test_bad_input_is_refused_and_leaves_nothing(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "E"
    with pytest.raises(ProtobenchError, match=r"--layout submission needs --developer NAME"):
        main_raising(["export", str(runs), "--format", "eee", "--layout", "submission", "--out", str(out)])
    held = tmp_path / "held"
    submit(runs, held, "--developer", "lab-a")
    before = sorted(p.relative_to(held) for p in held.rglob("*"))
    with pytest.raises(ProtobenchError, match=rf"{held} already holds an Every Eval Ever tree \({held / 'data'}\)"):
        main_raising(["export", str(runs), "--format", "eee", "--layout", "submission", "--developer", "lab-b",
                      "--out", str(held)])
    assert sorted(p.relative_to(held) for p in held.rglob("*")) == before  # the tree there is untouched
    # a run whose dataset makes no folder name: refused after the first runs were staged, nothing left
    odd = write_run(runs / "zz", "odd", J=3, metrics={"acc": 10.0},
                    provenance={"code_version": "x", "finished": "2026-02-05T00:00:00"})
    crafted = json.loads(odd.read_text())  # a crafted result: what no spec the suite validates can hold
    crafted["spec"]["dataset"] = "birds/../.."
    odd.write_text(json.dumps(crafted))
    with pytest.raises(ProtobenchError, match=r"odd/result.json: the collection named after its dataset "
                                              r"'protobench-birds/\.\./\.\.' has characters outside the allowed set: .*"
                                              r"pass --collection NAME"):
        main_raising(["export", str(runs), "--format", "eee", "--layout", "submission", "--developer", "lab-a",
                      "--out", str(out)])
    with pytest.raises(ProtobenchError, match=r"odd/result.json: its model folder .* leave that run out"):
        main_raising(["export", str(runs), "--format", "eee", "--layout", "submission", "--developer", "lab-a",
                      "--collection", "c", "--out", str(out)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["held", "runs"]  # no E, no staging folder
