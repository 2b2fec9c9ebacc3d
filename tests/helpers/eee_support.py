"""Shared pieces of the Every Eval Ever export tests: runs with per-image records, the vendored
schemas' validators, and a CLI call that raises."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd

from benchmark.cli import build_parser
from benchmark.run.records import write_records
from reports.eee import INSTANCE_SCHEMA_FILE, SCHEMA_FILE
from reports_support import write_run

N_IMAGES = 60
FINISHED = {0: "2026-02-03T04:05:06", 1: "2026-02-04T10:00:00"}
PROVENANCE = {"code_version": "v9.9.9-test", "device": "cpu", "dataset_fingerprint": {"test": "fp-test"},
              "packages": {"protobench": "0.1.0", "torch": "2.14.1"}, "weights_checksum": "abc123"}


def correctness(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random(N_IMAGES) < 0.7


def stability(seed: int) -> np.ndarray:
    """Per-image stability in percent, one image undefined (NaN: left out of its samples line)."""
    values = np.random.default_rng(100 + seed).uniform(20.0, 90.0, N_IMAGES)
    values[5] = np.nan
    return values


def labels() -> np.ndarray:
    return np.arange(N_IMAGES) % 3


def predictions(seed: int) -> np.ndarray:
    return np.where(correctness(seed), labels(), (labels() + 1) % 3)


def write_runs(tmp_path: Path) -> Path:
    """Two runs of one cell with per-image records (accuracy and stability per image) and one
    without; returns the RUNS folder."""
    root = tmp_path / "runs" / "grid"
    for seed, finished in FINISHED.items():
        correct, sta = correctness(seed), stability(seed)
        path = write_run(root, f"s{seed}", seed=seed,
                         metrics={"acc": 100 * correct.mean(), "con": 55.0 + seed, "sta": float(np.nanmean(sta)),
                                  "dis": None, "size_local": 4.0},
                         provenance={**PROVENANCE, "finished": finished}, evaluation={"num_images": N_IMAGES})
        write_records(path.parent, {"per_image": pd.DataFrame({
            "index": range(N_IMAGES), "image": [f"c{i % 3}/{i}.png" for i in range(N_IMAGES)], "label": labels(),
            "predicted": predictions(seed), "correct": correct, "margin": np.where(correct, 1.0, -1.0),
            "sta": sta})})
    write_run(root, "bare", J=7, metrics={"acc": 61.0},
              provenance={"code_version": "v9.9.9-test", "finished": "2026-02-05T00:00:00"})
    return tmp_path / "runs"


def validator(schema_file: Path = SCHEMA_FILE) -> jsonschema.Draft7Validator:
    schema = json.loads(schema_file.read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def instance_validator() -> jsonschema.Draft7Validator:
    return validator(INSTANCE_SCHEMA_FILE)


def main_raising(argv: list[str]) -> None:
    """Run a CLI command with its ProtobenchError raised (``main`` prints it and returns 2)."""
    args = build_parser().parse_args(argv)
    args.func(args)
