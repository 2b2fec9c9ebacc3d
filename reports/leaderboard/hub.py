"""``eval.yaml``: what registers the benchmark as a Hugging Face benchmark dataset
(https://huggingface.co/docs/hub/eval-results, "Registering a Benchmark"). Its tasks are the ids
the bundles' ``.eval_results/*.yaml`` files report to (benchmark/bundle/eval_results.py):
``<dataset>-<metric>`` for every dataset of the leaderboard and every ranked metric. The Hub bases
the format on Inspect AI's and validates it at push time; protobench writes the fields the Hub
documents for every benchmark (name, description, evaluation_framework, tasks with id, config and
split) and a description of each task; the Hub's allow-list decides whether it is accepted."""
from __future__ import annotations

from typing import Any

import yaml

from benchmark.escaping import plain_label

METRIC_NAMES = {"acc": "accuracy", "con": "consistency", "sta": "stability", "dis": "distinctiveness",
                "comp": "comprehensiveness"}


def eval_yaml(document: dict[str, Any], *, name: str = "protobench") -> bytes:
    datasets = sorted({plain_label(b["dataset"]) for b in document["boards"]})
    tasks = [{"id": f"{dataset}-{metric}", "config": "default", "split": "test",
              "name": f"{dataset} {METRIC_NAMES.get(metric, metric)}",
              "description": f"{METRIC_NAMES.get(metric, metric)} (percent, higher is better) of part-prototype "
                             f"classifiers on the {dataset} test split, as protobench scores it "
                             "(docs/protocol/metrics.md)"}
             for dataset in datasets for metric in document["settings"]["metrics"]]
    record = {"name": name,
              "description": "Part-prototype interpretable image classifiers on frozen DINOv2/DINOv3 trunks, "
                             "compared on accuracy and explanation metrics across prototypes per class and seeds "
                             "(protobench leaderboard).",
              "evaluation_framework": "protobench",
              "tasks": tasks}
    return yaml.safe_dump(record, sort_keys=True, allow_unicode=True).encode("utf-8")
