"""One Every Eval Ever aggregate record per run, at schema 0.3.0 (``export --format eee``).

Every Eval Ever (EvalEval Coalition, https://github.com/evaleval/every_eval_ever) is a shared
JSON format for evaluation results; its schemas ``eval.schema.json`` and
``instance_level_eval.schema.json``, version 0.3.0, are vendored in ``reports/eee_schema/``
(README.md there: where they came from). A record holds:

- ``evaluation_id``: the run id; ``retrieved_timestamp``: the run's ``provenance.finished`` as Unix
  epoch seconds (the runner's wall clock, read as UTC), never the exporting clock, so the same runs
  give byte-identical records; ``evaluation_timestamp``: ``provenance.finished`` as recorded;
- ``model_info``: the frozen trunk with the head trained on it (:func:`model_folder` names it),
  self-deployed and open-weights (:data:`DEPLOYMENT_TYPE`, :data:`MODEL_AVAILABILITY`);
  ``eval_library``: protobench at the run's ``provenance.code_version`` (the code that evaluated it);
- ``evaluation_results``: one per metric in :data:`EEE_METRICS` the run computed, its
  ``metric_config`` (id, unit, range, direction) and ``score_details``: the result.json value and,
  where the run's per-image records hold the metric's per-image part, its standard error and
  interval over the test images at :data:`LEVEL` by the crossed seeds × images procedure
  (``reports.intervals.interval_of``, the one policy ``report --ci`` uses; one run is one seed: Student t
  over its images, or Clopper–Pearson where every image is right or wrong), named with its n.

The samples file and the paths are ``reports.eee_samples`` and ``reports.eee_paths``; the docs list
each mapping (docs/protocol/harness.md, "Reports").
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from benchmark.errors import ProtobenchError
from reports.columns import METRIC_RANGES
from reports.layouts import display_name
from reports.per_image import PER_IMAGE_METRICS
from reports.intervals import interval_of

if TYPE_CHECKING:
    import pandas as pd

#: the Every Eval Ever schema version the records and samples follow (reports/eee_schema/)
SCHEMA_VERSION = "0.3.0"
SCHEMA_DIR = Path(__file__).resolve().parent / "eee_schema"
SCHEMA_FILE = SCHEMA_DIR / "eval.schema.json"
INSTANCE_SCHEMA_FILE = SCHEMA_DIR / "instance_level_eval.schema.json"
#: the confidence level of every interval (the default of ``report --ci``)
LEVEL = 0.95
#: ``provenance.finished`` as the runner writes it (benchmark/run/runner.py: time.strftime)
FINISHED_FORMAT = "%Y-%m-%dT%H:%M:%S"
#: the lab ran the model on its own machines (upstream: "a runtime operated by the evaluator")
DEPLOYMENT_TYPE = "self_deployed"
#: the trunk's weights are public and the head's are a file of the run (head.safetensors, which a
#: bundle publishes; its checksum is ``weights_checksum``): docs/protocol/harness.md, Reports
MODEL_AVAILABILITY = "open_weights"
#: a model id's prefix when the export names no developer (``--developer``)
UNNAMED_DEVELOPER = "protobench"
#: the name of the uncertainty procedure, followed in each record by its design and n
PROCEDURE = "crossed seeds × images (reports.intervals, the one policy of report --ci)"


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
                        "Model-parameter randomisation test of the explanations (Adebayo et al., NeurIPS 2018): "
                        "100 · (1 − Spearman ρ) of the absolute max-normalised maps, as Quantus's MPRT"),
    "sanity_signed": EeeMetric("protobench.sanity_signed", "Sanity (signed)", "sanity_signed", "percent",
                               False,
                               "The same test on the signed maps: 100 · (1 − Spearman ρ) of the raw maps"),
    "class_indep": EeeMetric("protobench.class_independence", "Class independence", "class_independence", "percent",
                             False, "How little of each feature's mass one class holds (QPM line, DINO-QPM's code)"),
    "contrastive": EeeMetric("protobench.contrastiveness", "Contrastiveness", "contrastiveness", "percent", False,
                             "One minus the overlap of a two-Gaussian mixture fitted to each feature (QPM line)"),
    "sid5": EeeMetric("protobench.sid5", "SID@5", "sid5", "percent", False,
                      "Spatial diversity of the predicted class's five strongest maps (Q-SENN, DINO-QPM)"),
    "pointing": EeeMetric("protobench.pointing", "Pointing", "pointing", "percent", False,
                          "Share of prototype peaks on their part's keypoint (PF-CBM; docs/protocol/metrics.md)"),
}


@dataclass(frozen=True)
class RunRecords:
    """One finished run as the export reads it: its ``result.json`` (``path``, found under the
    RUNS folder ``root``; ``data`` its object) and its per-image records (None: evaluated before
    records existed), with the file they came from."""

    path: Path
    root: Path
    data: Mapping[str, object]
    table: pd.DataFrame | None
    records_file: Path | None

    @property
    def run_id(self) -> str:
        run_id = self.data.get("run_id")
        if not isinstance(run_id, str) or not run_id:
            raise malformed(self.path, f"run_id must be a non-empty string, got {run_id!r}")
        return run_id

    @property
    def spec(self) -> Mapping[str, object]:
        return _object(self.path, self.data, "spec")


def model_folder(spec: Mapping[str, object]) -> str:
    """The model's name: ``<method>-<backbone>-<dataset>-J<J>-<variant>-seed<seed>``, the head a
    run trained on its trunk (an adapter's ``module:Class`` method with ``_`` for ``:``, as
    upstream's publisher spells a colon in a folder)."""
    parts = (spec.get("method"), spec.get("backbone"), spec.get("dataset"), f"J{spec.get('prototypes_per_class')}",
             spec.get("variant"), f"seed{spec.get('seed')}")
    return "-".join(str(p) for p in parts).replace(":", "_")


def eee_record(run: RunRecords, *, developer: str | None, organization: str,
               extra_source: Mapping[str, str] | None = None) -> dict[str, object]:
    """The Every Eval Ever record of ``run``; its model id is ``<developer>/<model folder>``
    (:data:`UNNAMED_DEVELOPER` for None, and no ``model_info.developer``). ``extra_source``:
    further ``source_metadata.additional_details`` (strings)."""
    data, path = run.data, run.path
    spec, metrics = run.spec, _object(path, data, "metrics")
    provenance = data.get("provenance") if isinstance(data.get("provenance"), dict) else {}
    finished = provenance.get("finished")
    results = [_result(path, key, metrics[key], spec, data, run.table, finished)
               for key in EEE_METRICS if metrics.get(key) is not None]
    packages = provenance.get("packages") if isinstance(provenance.get("packages"), dict) else {}
    return {
        "schema_version": SCHEMA_VERSION,
        "evaluation_id": run.run_id,
        "evaluation_timestamp": finished,
        "retrieved_timestamp": retrieved_timestamp(path, finished),
        "source_metadata": {
            "source_name": "protobench", "source_type": "evaluation_run",
            "source_organization_name": organization, "evaluator_relationship": "first_party",
            "additional_details": {**_strings({"grid": data.get("grid"),
                                               "run_dir": path.parent.relative_to(run.root).as_posix()}),
                                   **(extra_source or {})}},
        "model_info": _model_info(spec, data, provenance, developer),
        "eval_library": {
            "name": "protobench", "version": str(provenance.get("code_version") or "unknown"),
            "additional_details": _strings({"metrics_fingerprint": data.get("metrics_fingerprint"),
                                            "package_version": packages.get("protobench")})},
        "evaluation_results": results,
    }


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


def evaluation_name(spec: Mapping[str, object], key: str) -> str:
    """``<dataset> test: <metric name>``: a result's ``evaluation_name`` (and its samples')."""
    return f"{spec.get('dataset')} test: {EEE_METRICS[key].name}"


def _result(path: Path, key: str, value: object, spec: Mapping[str, object], data: Mapping[str, object],
            table: pd.DataFrame | None, finished: object) -> dict[str, object]:
    metric = EEE_METRICS[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise malformed(path, f"metrics.{key} must be a finite number or null, got {value!r}")
    low, high = METRIC_RANGES[key]
    evaluation = data.get("evaluation") if isinstance(data.get("evaluation"), dict) else {}
    fingerprints = (data.get("provenance") or {}).get("dataset_fingerprint") if isinstance(
        data.get("provenance"), dict) else None
    test_fingerprint = fingerprints.get("test") if isinstance(fingerprints, dict) else None
    return {
        "evaluation_result_id": key,
        "evaluation_name": evaluation_name(spec, key),
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


def _score(value: float, key: str, table: pd.DataFrame | None) -> dict[str, object]:
    """The value and, where the per-image records hold the metric's part, its standard error and
    interval over the test images by ``reports.intervals.interval_of`` (one run: one seed), the
    procedure and n beside them."""
    column = PER_IMAGE_METRICS.get(key)
    if table is None or column is None or column not in table.columns:
        why = ("no per-image records (run `protobench evaluate RUN_DIR` to write them)" if table is None
               else "the metric has no per-image part: a single run gives no interval")
        return {"score": value, "details": {"interval": f"none: {why}"}}
    scale = 100.0 if column == "correct" else 1.0  # correctness is 0/1, the metrics' parts are percent
    values = scale * table[column].astype(np.float64).to_numpy()
    got = interval_of(values[None, :], [value], key, LEVEL)  # reports.intervals' one policy, one run
    procedure = f"{PROCEDURE}: {got.procedure}"
    excluded = int(np.isnan(values).sum())
    details = {"interval_clipped": str(got.clipped).lower(), "images_excluded": str(excluded), "seeds": "1"}
    if got.ci is None:
        return {"score": value, "details": {**details, "interval": f"none: {got.procedure}"}}
    uncertainty: dict[str, object] = {
        "num_samples": int(got.images or 0),
        "confidence_interval": {"lower": got.ci[0], "upper": got.ci[1], "confidence_level": LEVEL,
                                "method": procedure}}
    if math.isnan(got.se):  # Clopper–Pearson: every image alike, no spread to take an error from
        details["standard_error"] = f"none: {got.procedure}"
    else:
        uncertainty["standard_error"] = {"value": got.se, "method": f"analytic, {procedure}"}
    return {"score": value, "details": details, "uncertainty": uncertainty}


def _model_info(spec: Mapping[str, object], data: Mapping[str, object], provenance: Mapping[str, object],
                developer: str | None) -> dict[str, object]:
    method, backbone = str(spec.get("method")), str(spec.get("backbone"))
    recorded = data.get("method_display_name")
    label = display_name(method, recorded if isinstance(recorded, str) else None)
    J, variant, seed = spec.get("prototypes_per_class"), spec.get("variant"), spec.get("seed")
    packages = provenance.get("packages") if isinstance(provenance.get("packages"), dict) else {}
    info: dict[str, object] = {
        "name": f"{label} (J={J}, {variant}, seed {seed}) on {backbone}, trained on {spec.get('dataset')}",
        "id": f"{developer or UNNAMED_DEVELOPER}/{model_folder(spec)}",
        "additional_details": {
            "deployment_type": DEPLOYMENT_TYPE, "model_availability": MODEL_AVAILABILITY,
            **_strings({
                "method": method, "backbone": backbone, "dataset": spec.get("dataset"), "prototypes_per_class": J,
                "variant": variant, "seed": seed, "trunk_weights": _trunk_weights(spec),
                "method_hyperparameters": data.get("method_hyperparameters"),
                "method_fingerprint": data.get("method_fingerprint"),
                "weights_checksum": provenance.get("weights_checksum"), "device": provenance.get("device"),
                "precision": provenance.get("precision")})},
    }
    if developer is not None:
        info["developer"] = developer
    if isinstance(packages.get("torch"), str):
        info["inference_engine"] = {"name": "pytorch", "version": packages["torch"]}
    return info


def _trunk_weights(spec: Mapping[str, object]) -> str:
    """Where the frozen trunk's weights came from: the spec's named source (``hf-cache``,
    ``random``) and weights id; a local weights file is named as ``file`` (its path is the lab's)."""
    weights, weights_id = spec.get("weights"), spec.get("weights_id")
    source = weights if weights in ("hf-cache", "random") else "file"
    return f"{source} {weights_id}" if isinstance(weights_id, str) and weights_id else str(source)


def _strings(values: Mapping[str, object]) -> dict[str, str]:
    """EEE's ``additional_details``: every value a string (structures as sorted JSON); None left out."""
    return {k: v if isinstance(v, str) else json.dumps(v, sort_keys=True)
            for k, v in values.items() if v is not None}


def _object(path: Path, data: Mapping[str, object], name: str) -> Mapping[str, object]:
    value = data.get(name)
    if not isinstance(value, dict):
        raise malformed(path, f"'{name}' must be a JSON object")
    return value


def malformed(path: Path, problem: str) -> ProtobenchError:
    return ProtobenchError(f"{path} is malformed: {problem}; re-run that run or leave it out of the export.")
