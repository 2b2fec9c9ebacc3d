"""``eval.yaml``: what registers the benchmark as a Hugging Face benchmark dataset
(https://huggingface.co/docs/hub/eval-results, "Registering a Benchmark"). Its tasks are the ids
the bundles' ``.eval_results/*.yaml`` files report to (benchmark/bundle/eval_results.py):
``<dataset>-<metric>`` for every dataset of the leaderboard and every metric of :data:`HUB_METRICS`,
each described with its unit and which way is better. The robustness stage's scores are ranked on
the leaderboard but have no task here: the bundles' eval-results files do not report them. The Hub
bases the format on Inspect AI's and validates it at push time; protobench writes the fields the
Hub documents for every benchmark (name, description, evaluation_framework, tasks with id, config
and split) and a description of each task; the Hub's allow-list decides whether it is accepted."""
from __future__ import annotations

from typing import Any

import yaml

from benchmark.escaping import plain_label
from reports.leaderboard.ranked import CORE_METRICS, METRIC_TEXT, better

#: the metrics with a task: those the bundles' eval-results files report (benchmark/bundle/eval_results.py
#: ``EVAL_METRICS``; reports import nothing of the bundles, so a test holds the two equal)
HUB_METRICS = CORE_METRICS


def eval_yaml(document: dict[str, Any], *, name: str = "protobench") -> bytes:
    datasets = sorted({plain_label(b["dataset"]) for b in document["boards"]})
    tasks = [{"id": f"{dataset}-{metric}", "config": "default", "split": "test",
              "name": f"{dataset} {METRIC_TEXT[metric].name}",
              "description": f"{METRIC_TEXT[metric].name} ({METRIC_TEXT[metric].unit}, {better(metric)} is better) of "
                             f"part-prototype classifiers on the {dataset} test split, as protobench scores it "
                             "(docs/protocol/metrics.md)"}
             for dataset in datasets for metric in document["settings"]["metrics"] if metric in HUB_METRICS]
    record = {"name": name,
              "description": "Part-prototype interpretable image classifiers on frozen DINOv2/DINOv3 trunks, "
                             "compared on accuracy and explanation metrics across prototypes per class and seeds "
                             "(protobench leaderboard).",
              "evaluation_framework": "protobench",
              "tasks": tasks}
    return yaml.safe_dump(record, sort_keys=True, allow_unicode=True).encode("utf-8")
