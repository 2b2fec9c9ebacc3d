"""``protobench export RUNS --format eee --out DIR``: one Every Eval Ever record per run.

Every Eval Ever (EvalEval Coalition, https://github.com/evaleval/every_eval_ever) is a shared
JSON format for evaluation results; its schema ``eval.schema.json`` version 0.2.2 is vendored in
``reports/eee_schema/`` (README.md there: where it came from). One record per finished run,
``DIR/<run_id>.json``, holds:

- ``evaluation_id``: the run id; ``retrieved_timestamp``: the run's ``provenance.finished`` as Unix
  epoch seconds (the runner's wall clock, read as UTC), never the exporting clock, so the same runs
  give byte-identical records; ``evaluation_timestamp``: ``provenance.finished`` as recorded;
- ``model_info``: the trained head (method, backbone, J, variant, seed); ``eval_library``:
  protobench at the run's ``provenance.code_version`` (the code that evaluated it);
- ``evaluation_results``: one per metric in :data:`EEE_METRICS` the run computed, its
  ``metric_config`` (id, unit, range, direction) and ``score_details``: the result.json value and,
  where the run's per-image records hold the metric's per-image part, the interval over the test
  images at :data:`LEVEL` by ``reports.stats.crossed_mean`` (one seed: Student t over images, or
  Clopper–Pearson where every image is right or wrong; the procedure and n written beside it);
- ``detailed_evaluation_results``: the run's per-image records file, its path relative to the
  RUNS folder given, its SHA-256 and row count.

The docs list each mapping (docs/protocol/harness.md, "Reports").
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from benchmark.errors import ProtobenchError
from benchmark.output_file import staging_path
from benchmark.run.records import read_records
from benchmark.run.store import RECORD_SUFFIXES
from reports.columns import METRIC_RANGES
from reports.layouts import display_name
from reports.load import read_result_json, result_files
from reports.per_image import PER_IMAGE_METRICS
from reports.stats import crossed_mean

#: the Every Eval Ever schema version the records follow (reports/eee_schema/eval.schema.json)
SCHEMA_VERSION = "0.2.2"
SCHEMA_FILE = Path(__file__).resolve().parent / "eee_schema" / "eval.schema.json"
#: the confidence level of every interval (the default of ``report --ci``)
LEVEL = 0.95
#: ``provenance.finished`` as the runner writes it (benchmark/run/runner.py: time.strftime)
FINISHED_FORMAT = "%Y-%m-%dT%H:%M:%S"
#: the export is built in ``.NAME.exporting-PID`` beside --out, then renamed (whole or not at all)
STAGING_KIND = "exporting"


@dataclass(frozen=True)
class EeeMetric:
    """How one result.json metric reads in Every Eval Ever's ``metric_config``."""

    metric_id: str  # a canonical global id where one exists (accuracy), else namespaced protobench.*
    name: str
    kind: str
    unit: str
    lower_is_better: bool
    description: str


#: the metrics a record carries (finite range: EEE's continuous score needs min and max); the
#: explanation sizes (unbounded counts) and timings are left out (docs/protocol/harness.md)
EEE_METRICS: dict[str, EeeMetric] = {
    "acc": EeeMetric("accuracy", "Top-1 accuracy", "accuracy", "percent", False,
                     "Top-1 classification accuracy on the test split"),
    "con": EeeMetric("protobench.consistency", "Consistency", "consistency", "percent", False,
                     "Consistency of the prototypes' parts over their class's test images (docs/protocol/metrics.md)"),
    "sta": EeeMetric("protobench.stability", "Stability", "stability", "percent", False,
                     "Stability of the prototypes' parts under input noise (docs/protocol/metrics.md)"),
    "dis": EeeMetric("protobench.distinctiveness", "Distinctiveness", "distinctiveness", "percent", False,
                     "Distinctiveness of the prototypes' regions (NPPP; docs/protocol/metrics.md)"),
    "comp": EeeMetric("protobench.comprehensiveness", "Comprehensiveness", "comprehensiveness", "percent", False,
                      "Comprehensiveness (NPPP; docs/protocol/metrics.md)"),
    "purity": EeeMetric("protobench.purity", "Purity", "purity", "percent", False,
                        "Part purity of the prototypes (PIP-Net, Nauta et al., CVPR 2023)"),
    "loc": EeeMetric("protobench.localisation", "Localisation", "localisation", "percent", False,
                     "Share of each prototype's activation mass on the object (Kohlbrenner et al., IJCNN 2020)"),
    "del": EeeMetric("protobench.deletion", "Deletion", "deletion", "percent points", False,
                     "Prototype-deletion faithfulness: deleting the prototypes an explanation names versus as many random ones"),
    "sanity": EeeMetric("protobench.sanity", "Sanity", "sanity", "percent", False,
                        "Model-parameter randomisation test of the explanations (Adebayo et al., NeurIPS 2018)"),
    "class_indep": EeeMetric("protobench.class_independence", "Class independence", "class_independence", "percent",
                             False, "How little of each feature's mass one class holds (QPM line, DINO-QPM's code)"),
    "contrastive": EeeMetric("protobench.contrastiveness", "Contrastiveness", "contrastiveness", "percent", False,
                             "One minus the overlap of a two-Gaussian mixture fitted to each feature (QPM line)"),
    "sid5": EeeMetric("protobench.sid5", "SID@5", "sid5", "percent", False,
                      "Spatial diversity of the predicted class's five strongest maps (Q-SENN, DINO-QPM)"),
    "pointing": EeeMetric("protobench.pointing", "Pointing", "pointing", "percent", False,
                          "Share of prototype peaks on their part's keypoint (PF-CBM; docs/protocol/metrics.md)"),
}


def eee_files(runs_dirs: Iterable[str | Path], *, organization: str = "unknown") -> dict[str, bytes]:
    """``<run_id>.json`` → its record's bytes (sorted keys), for every result.json under
    ``runs_dirs``; everything is read and checked before the caller writes anything. Two results
    of one run id (a copy, or the same spec in two grids) are refused naming both."""
    dirs = [Path(d) for d in runs_dirs]
    files: dict[str, bytes] = {}
    seen: dict[str, Path] = {}
    for path in result_files(dirs):
        root = next(d for d in dirs if path.is_relative_to(d))
        record = eee_record(path, root, organization=organization)
        run_id = record["evaluation_id"]
        if run_id in seen:
            raise ProtobenchError(f"{seen[run_id]} and {path} hold the same run id {run_id}; an Every Eval Ever "
                                  "export has one record per run: export them separately (--out per folder)")
        seen[run_id] = path
        files[f"{run_id}.json"] = (json.dumps(record, sort_keys=True, indent=2, allow_nan=False) + "\n").encode()
    return files


def eee_record(path: Path, root: Path, *, organization: str = "unknown") -> dict[str, object]:
    """The Every Eval Ever record of the run whose result.json is ``path`` (found under ``root``)."""
    data = read_result_json(path)
    spec, metrics = _object(path, data, "spec"), _object(path, data, "metrics")
    provenance = data.get("provenance") if isinstance(data.get("provenance"), dict) else {}
    run_id = data.get("run_id")
    if not isinstance(run_id, str) or not run_id:
        raise _malformed(path, f"run_id must be a non-empty string, got {run_id!r}")
    finished = provenance.get("finished")
    table, records_file = _per_image(path.parent)
    results = [_result(path, key, metrics[key], spec, data, table, finished)
               for key in EEE_METRICS if metrics.get(key) is not None]
    record: dict[str, object] = {
        "schema_version": SCHEMA_VERSION,
        "evaluation_id": run_id,
        "evaluation_timestamp": finished,
        "retrieved_timestamp": retrieved_timestamp(path, finished),
        "source_metadata": {
            "source_name": "protobench", "source_type": "evaluation_run",
            "source_organization_name": organization, "evaluator_relationship": "first_party",
            "additional_details": _strings({"grid": data.get("grid"),
                                            "run_dir": path.parent.relative_to(root).as_posix()})},
        "model_info": _model_info(spec, data, provenance),
        "eval_library": {
            "name": "protobench", "version": str(provenance.get("code_version") or "unknown"),
            "additional_details": _strings({"metrics_fingerprint": data.get("metrics_fingerprint")})},
        "evaluation_results": results,
    }
    if records_file is not None:
        record["detailed_evaluation_results"] = {
            "file_path": records_file.relative_to(root).as_posix(),
            "hash_algorithm": "sha256", "checksum": hashlib.sha256(records_file.read_bytes()).hexdigest(),
            "total_rows": len(table),
            # EEE's "format" names jsonl or json only: the records' own format is said here
            "additional_details": {"format": records_file.name.partition(".")[2], "table": "per_image",
                                   "schema": "benchmark/run/record_schema.py"}}
    return record


def retrieved_timestamp(path: Path, finished: object) -> str:
    """``provenance.finished`` (local wall-clock time without a zone, as the runner writes it) as
    Unix epoch seconds, the time read as UTC: the schema asks for epoch time, and the inputs give
    no zone (docs/protocol/harness.md)."""
    try:
        moment = datetime.strptime(str(finished), FINISHED_FORMAT)
    except ValueError:
        raise ProtobenchError(
            f"{path}: provenance.finished is {finished!r}, not a time like 2026-01-01T12:00:00; an Every Eval "
            "Ever record takes its timestamp from it: run `protobench evaluate RUN_DIR` to write the result "
            "again, or leave the run out") from None
    return str(int(moment.replace(tzinfo=timezone.utc).timestamp()))


def _result(path: Path, key: str, value: object, spec: Mapping[str, object], data: Mapping[str, object],
            table: object, finished: object) -> dict[str, object]:
    metric = EEE_METRICS[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _malformed(path, f"metrics.{key} must be a finite number or null, got {value!r}")
    low, high = METRIC_RANGES[key]
    evaluation = data.get("evaluation") if isinstance(data.get("evaluation"), dict) else {}
    fingerprints = (data.get("provenance") or {}).get("dataset_fingerprint") if isinstance(
        data.get("provenance"), dict) else None
    test_fingerprint = fingerprints.get("test") if isinstance(fingerprints, dict) else None
    return {
        "evaluation_result_id": key,
        "evaluation_name": f"{spec.get('dataset')} test: {metric.name}",
        "evaluation_timestamp": finished,
        "source_data": {"dataset_name": str(spec.get("dataset")), "source_type": "other",
                        "additional_details": _strings({"split": "test", "fingerprint": test_fingerprint,
                                                        "num_images": evaluation.get("num_images")})},
        "metric_config": {
            "evaluation_description": metric.description, "metric_id": metric.metric_id,
            "metric_name": metric.name, "metric_kind": metric.kind, "metric_unit": metric.unit,
            "lower_is_better": metric.lower_is_better, "score_type": "continuous",
            "min_score": low, "max_score": high,
            "additional_details": {"result_json_key": f"metrics.{key}"}},
        "score_details": _score(float(value), key, table),
    }


def _score(value: float, key: str, table: object) -> dict[str, object]:
    """The value and, where the per-image records hold the metric's part, its interval over the test
    images by ``reports.stats.crossed_mean`` (one run: one seed), procedure and n beside it."""
    column = PER_IMAGE_METRICS.get(key)
    if table is None or column is None or column not in table.columns:  # type: ignore[attr-defined]
        why = ("no per-image records (run `protobench evaluate RUN_DIR` to write them)" if table is None
               else "the metric has no per-image part: a single run gives no interval")
        return {"score": value, "details": {"interval": f"none: {why}"}}
    scale = 100.0 if column == "correct" else 1.0  # correctness is 0/1, the metrics' parts are percent
    values = scale * table[column].astype(np.float64).to_numpy()  # type: ignore[index]
    got = crossed_mean(values[None, :], LEVEL, METRIC_RANGES[key], difference=False)
    details = {"interval_procedure": got.test, "interval_clipped": str(got.clipped).lower(),
               "images_excluded": str(got.excluded)}
    if not got.has_interval:
        return {"score": value, "details": {**details, "interval": f"none: {got.test}"}}
    return {"score": value, "details": details,
            "uncertainty": {"num_samples": int(got.n_images or 0),
                            "confidence_interval": {"lower": got.ci[0], "upper": got.ci[1],
                                                    "confidence_level": LEVEL, "method": got.test}}}


def _per_image(run_dir: Path) -> tuple[object, Path | None]:
    table = read_records(run_dir)  # checked against its schema: a crafted file is refused
    if table is None:
        return None, None
    return table, next(run_dir / f"per_image{s}" for s in RECORD_SUFFIXES if (run_dir / f"per_image{s}").is_file())


def _model_info(spec: Mapping[str, object], data: Mapping[str, object],
                provenance: Mapping[str, object]) -> dict[str, object]:
    method, backbone = str(spec.get("method")), str(spec.get("backbone"))
    recorded = data.get("method_display_name")
    label = display_name(method, recorded if isinstance(recorded, str) else None)
    J, variant, seed = spec.get("prototypes_per_class"), spec.get("variant"), spec.get("seed")
    return {
        "name": f"{label} (J={J}, {variant}, seed {seed}) on {backbone}",
        "id": f"protobench/{method}-{backbone}-J{J}-{variant}-seed{seed}",
        "additional_details": _strings({
            "method": method, "backbone": backbone, "prototypes_per_class": J, "variant": variant, "seed": seed,
            "method_hyperparameters": data.get("method_hyperparameters"),
            "method_fingerprint": data.get("method_fingerprint"),
            "weights_checksum": provenance.get("weights_checksum"), "device": provenance.get("device"),
            "precision": provenance.get("precision")}),
    }


def _strings(values: Mapping[str, object]) -> dict[str, str]:
    """EEE's ``additional_details``: every value a string (structures as sorted JSON); None left out."""
    return {k: v if isinstance(v, str) else json.dumps(v, sort_keys=True)
            for k, v in values.items() if v is not None}


def _object(path: Path, data: Mapping[str, object], name: str) -> Mapping[str, object]:
    value = data.get(name)
    if not isinstance(value, dict):
        raise _malformed(path, f"'{name}' must be a JSON object")
    return value


def _malformed(path: Path, problem: str) -> ProtobenchError:
    return ProtobenchError(f"{path} is malformed: {problem}; re-run that run or leave it out of the export.")


def check_eee_out(out: Path) -> None:
    """Refuse, before anything is read, an ``out`` that exists or whose nearest existing folder is
    not a folder this process can write into."""
    if out.exists() or out.is_symlink():
        raise ProtobenchError(f"{out} already exists; remove it or choose another --out")
    parent = next(p for p in out.absolute().parents if p.exists())
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ProtobenchError(f"cannot write {out}: {parent} is not a folder you can write to; choose another --out")


def write_eee(files: Mapping[str, bytes], out: Path) -> None:
    """Write ``files`` into the new folder ``out``: built beside it and renamed, so it appears whole
    or not at all; an existing ``out`` or one that cannot be written is one error naming it."""
    check_eee_out(out)
    staging = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = staging_path(out, STAGING_KIND)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        for name, data in files.items():
            (staging / name).write_bytes(data)
        staging.rename(out)
    except OSError as err:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        raise ProtobenchError(f"cannot write {out}: {err.strerror or err}; choose a folder you can write to "
                              "(--out)") from None
    except BaseException:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        raise
