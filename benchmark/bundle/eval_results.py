"""A bundle's Hugging Face eval-results files: ``.eval_results/<grid>+<run_id>.yaml``, one per run,
in the format the Hub documents (https://huggingface.co/docs/hub/eval-results; field list:
https://github.com/huggingface/hub-docs/blob/main/eval_results.yaml), built with huggingface_hub's
own ``EvalResultEntry`` / ``eval_result_entries_to_yaml`` so ``parse_eval_result_entries`` reads
them back. Each file is a YAML list with one entry per metric of :data:`EVAL_METRICS` the run
computed (a finite number):

- ``dataset.id``: the Hub benchmark dataset (``bundle --hub-benchmark``, default
  :data:`HUB_BENCHMARK`); ``dataset.task_id``: ``<dataset>-<metric>`` (e.g. ``cub-acc``), the task
  ids the benchmark's ``eval.yaml`` declares; ``dataset.revision`` is left out: it is the Hub
  dataset repository's git revision, which a run does not know;
- ``value``: the run's result.json metric as recorded (percent);
- ``date``: the run's ``provenance.finished`` as recorded (runner's wall clock, ISO-8601), never
  the bundling clock, so the same runs give byte-identical files; left out where a result has no
  ``finished`` (the Hub then takes the commit time);
- ``source``: with ``bundle --push REPO``, the run's folder in that model repository (its per-image
  records), named ``protobench run GRID/RUN_ID``; without a repository, no source;
- ``notes``: what the model is: method, backbone (weights), J, variant, seed, run.

The decisions are listed in docs/protocol/harness.md ("Sharing")."""
from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import EvalResultEntry, eval_result_entries_to_yaml
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from benchmark.bundle.card import CARD_METRICS
from benchmark.errors import ProtobenchError
from benchmark.escaping import plain_label

#: the folder the Hub reads (huggingface_hub.constants.EVAL_RESULTS_FOLDER)
EVAL_RESULTS_FOLDER = ".eval_results"
#: the metrics written: the model card's
EVAL_METRICS = CARD_METRICS
#: the Hub benchmark dataset the results belong to, unless ``bundle --hub-benchmark`` names another
HUB_BENCHMARK = "protobench/protobench"
#: ``provenance.finished`` as the runner writes it (benchmark/run/runner.py: time.strftime)
FINISHED_FORMAT = "%Y-%m-%dT%H:%M:%S"
#: joins grid and run id in a file name: "+" is outside the names a bundle accepts
#: (benchmark/bundle/make.py _SAFE_NAME), so two runs never share a file
SEPARATOR = "+"


def eval_results_name(result: dict[str, Any]) -> str:
    """The file of one run, relative to the bundle."""
    return f"{EVAL_RESULTS_FOLDER}/{result['grid']}{SEPARATOR}{result['run_id']}.yaml"


def _date(result: dict[str, Any], where: Path) -> str | None:
    finished = (result.get("provenance") or {}).get("finished")
    if finished is None:
        return None
    try:
        datetime.strptime(str(finished), FINISHED_FORMAT)
    except ValueError:
        raise ProtobenchError(f"{where}: provenance.finished is {finished!r}, not a time like 2026-01-01T12:00:00; "
                              "the eval-results date comes from it: re-run that run or leave it out") from None
    return str(finished)


def _notes(result: dict[str, Any]) -> str:
    spec = result["spec"]
    return (f"protobench {spec.get('method')} on {spec.get('backbone')} ({spec.get('weights', 'default')}), "
            f"J={spec.get('prototypes_per_class')}, variant {spec.get('variant', 'default')}, seed {spec.get('seed')}; "
            f"run {result['grid']}/{result['run_id']}")


def eval_results_file(result: dict[str, Any], where: Path, *, hub_benchmark: str = HUB_BENCHMARK,
                      repo_id: str | None = None) -> bytes | None:
    """The ``.eval_results`` YAML of one run's ``result.json`` (read from ``where``), or None when
    it computed none of :data:`EVAL_METRICS`."""
    date, notes = _date(result, where), plain_label(_notes(result))
    source = (f"https://huggingface.co/{repo_id}/tree/main/{result['grid']}/{result['run_id']}"
              if repo_id else None)
    metrics = result.get("metrics") or {}
    entries = [
        EvalResultEntry(dataset_id=hub_benchmark, task_id=f"{plain_label(result['spec']['dataset'])}-{metric}",
                        value=float(value), date=date, notes=notes, source_url=source,
                        source_name=f"protobench run {result['grid']}/{result['run_id']}" if source else None)
        for metric in EVAL_METRICS
        if isinstance(value := metrics.get(metric), (int, float)) and not isinstance(value, bool)
        and math.isfinite(value)  # YAML's .nan is no Hub metric value
    ]
    if not entries:
        return None
    # safe_dump: plain data only; sorted keys and no clock, so the same runs give the same bytes
    return yaml.safe_dump(eval_result_entries_to_yaml(entries), sort_keys=True, allow_unicode=True).encode("utf-8")


def eval_results_files(runs: Sequence[tuple[dict[str, Any], Path]], *, hub_benchmark: str = HUB_BENCHMARK,
                       repo_id: str | None = None) -> dict[str, bytes]:
    """Every run's file by its path in the bundle (runs as ``(result, result.json path)``)."""
    for option, repo in (("--hub-benchmark", hub_benchmark), ("--push", repo_id)):
        try:
            if repo is not None:
                validate_repo_id(repo)
        except HFValidationError as err:
            raise ProtobenchError(f"{option} {repo!r} is not a Hugging Face repository id ({err}); give one like "
                                  "ORG/NAME") from None
    files = {}
    for result, where in runs:
        data = eval_results_file(result, where, hub_benchmark=hub_benchmark, repo_id=repo_id)
        if data is not None:
            files[eval_results_name(result)] = data
    return files
