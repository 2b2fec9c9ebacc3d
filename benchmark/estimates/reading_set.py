"""A synthetic result set at the paper's scale, for ``protobench perf --reading N``.

The reading commands (``report``, ``compare``, ``agreement``, ``leaderboard``, ``site``) are timed
on runs shaped like one backbone of the paper's CUB grid: 7 methods × J ∈ {3, 5, 10} × 5 seeds
= 105 runs per backbone (issue 58), up to the four DINO backbones of ``cub_main`` (420 runs), each
with CUB's 5,794 test images by default. Runs are laid out backbone by backbone, then J, then seed,
then method, so the first N runs of a small N still rank every method of a cell.

Every run is written with the suite's own writers, as :func:`benchmark.run.runner.finish_run`
writes a trained one: the per-image and per-prototype records by
:func:`benchmark.run.records.write_records` (float32 values, as the evaluation's tensors give),
then ``result.json`` by :func:`benchmark.run.store.atomic_write_checked`, its metrics the means of
its records (so ``leaderboard`` re-scores them without refusal) and its fingerprints the running
code's (so no run reads stale). The values come from a logistic model with a shared image
difficulty, a method ability and a seed shift (the design ``reports.stats_simulation`` simulates),
so the statistics meet realistic spreads; they are not a benchmark result.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from benchmark.config import RunSpec
from benchmark.errors import ProtobenchError

READING_METHODS = ("vmfproto", "protopnet", "deformable_protopnet", "tesnet", "evalprotopnet", "mgproto", "nppp")
READING_BACKBONES = ("dinov2_vitb14", "dinov2_vits14", "dinov3_vitb16", "dinov3_vits16")  # cub_main's
READING_J = (3, 5, 10)
READING_SEEDS = (0, 1, 2, 3, 4)
CUB_TEST_IMAGES = 5794
CUB_CLASSES = 200
READING_GRID = "cub_reading"
MARKER_FILE = "reading-set.json"  # what a folder holds: reused by a later call asking for the same set
MAX_READING_RUNS = len(READING_BACKBONES) * len(READING_J) * len(READING_SEEDS) * len(READING_METHODS)
MIN_READING_IMAGES = 30  # the crossed intervals' least (reports.stats.MIN_IMAGES)


@dataclass(frozen=True)
class ReadingSet:
    """A written synthetic result set: its folder (the runs directory), runs and test images."""

    root: Path
    runs: int
    images: int

    @property
    def marker(self) -> dict[str, int | str]:
        return {"grid": READING_GRID, "runs": self.runs, "images": self.images}


def reading_specs(runs: int) -> list[RunSpec]:
    """The first ``runs`` specs of the layout (module docstring)."""
    if not 1 <= runs <= MAX_READING_RUNS:
        raise ProtobenchError(f"--reading {runs}: the synthetic set holds 1 to {MAX_READING_RUNS} runs "
                              f"({len(READING_METHODS)} methods × J {READING_J} × {len(READING_SEEDS)} seeds per backbone, "
                              f"{len(READING_BACKBONES)} backbones); 105 is one backbone of the CUB grid")
    specs = [RunSpec(dataset="cub", backbone=backbone, method=method, prototypes_per_class=J, seed=seed)
             for backbone in READING_BACKBONES for J in READING_J for seed in READING_SEEDS
             for method in READING_METHODS]
    return specs[:runs]


def check_reading_folder(root: Path, runs: int, images: int) -> bool:
    """Whether ``root`` already holds this set (True: reuse it); an empty or absent folder is
    False; a folder holding anything else is refused before anything is written."""
    if images < MIN_READING_IMAGES:
        raise ProtobenchError(f"--reading-images {images}: at least {MIN_READING_IMAGES} test images (the least the "
                              "crossed intervals use); CUB has 5794")
    if not root.exists() or (root.is_dir() and not any(root.iterdir())):
        return False
    marker = root / MARKER_FILE
    wanted = ReadingSet(root, runs, images).marker
    if marker.is_file():
        try:
            found = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            found = None
        if found == wanted:
            return True
    raise ProtobenchError(f"--reading-dir: {root} is not empty and does not hold the synthetic set of {runs} runs × "
                          f"{images} images; give --reading-dir an empty or new folder (the set is written to its "
                          "runs/ and kept)")


def write_reading_set(root: Path, runs: int, images: int = CUB_TEST_IMAGES, *, seed: int = 0) -> ReadingSet:
    """Write ``runs`` synthetic runs of ``images`` test images under ``root/cub_reading/RUN_ID``
    (reused when ``root`` already holds the same set); the set."""
    specs = reading_specs(runs)
    written = ReadingSet(root, runs, images)
    if check_reading_folder(root, runs, images):
        return written
    from benchmark.run.identity import method_fingerprint, metrics_fingerprint
    from benchmark.run.records import write_records
    from benchmark.run.store import atomic_write_checked, json_bytes
    from methods.registry import display_name_of, resolved_method_args

    rng = np.random.default_rng(seed)
    difficulty = rng.normal(0.0, 1.5, images)  # shared by every run: the image term of the crossed design
    labels = np.arange(images) % CUB_CLASSES
    names = [f"images/{label + 1:03d}.class/img_{i:05d}.jpg" for i, label in enumerate(labels)]
    explanation = {m: rng.normal(0.0, 8.0, images) for m in ("sta", "dis", "comp", "sanity")}
    metrics_code = metrics_fingerprint()
    fingerprints = {m: method_fingerprint(m) for m in READING_METHODS}
    for number, spec in enumerate(specs):
        run_rng = np.random.default_rng([seed, number])
        ability = 2.4 + 0.12 * READING_METHODS.index(spec.method) + 0.05 * READING_J.index(spec.prototypes_per_class)
        shift = run_rng.normal(0.0, 0.05)  # the seed: a whole model moves
        right = run_rng.random(images) < 1.0 / (1.0 + np.exp(difficulty - ability - shift))
        predicted = np.where(right, labels, (labels + 1 + run_rng.integers(0, CUB_CLASSES - 1, images)) % CUB_CLASSES)
        per_image = pd.DataFrame({
            "index": np.arange(images), "image": names, "label": labels, "predicted": predicted, "correct": right,
            "margin": np.where(right, 1.0, -1.0).astype(np.float32) * run_rng.gamma(2.0, 1.0, images).astype(np.float32)})
        for offset, (metric, image_term) in enumerate(explanation.items()):
            level = 55.0 + 4.0 * ((READING_METHODS.index(spec.method) + offset) % len(READING_METHODS))
            values = np.clip(level + image_term + run_rng.normal(shift * 20, 6.0, images), 0.0, 100.0)
            per_image[metric] = values.astype(np.float32)
        per_image.loc[run_rng.random(images) < 0.02, "sanity"] = np.nan  # ρ undefined on a constant map
        per_image["sanity_ssim"] = np.clip(run_rng.normal(0.3, 0.2, images), -1.0, 1.0).astype(np.float32)
        prototypes = CUB_CLASSES * spec.prototypes_per_class
        per_prototype = pd.DataFrame({
            "class": np.repeat(np.arange(CUB_CLASSES), spec.prototypes_per_class),
            "prototype": np.tile(np.arange(spec.prototypes_per_class), CUB_CLASSES),
            "con": np.clip(run_rng.normal(60.0 + 3 * READING_METHODS.index(spec.method), 15.0, prototypes), 0, 100)
            .astype(np.float32)})
        metrics = {"acc": 100.0 * float(right.mean()),
                   "con": float(np.nanmean(per_prototype["con"].to_numpy(dtype=np.float64)))}
        metrics.update({m: float(np.nanmean(per_image[m].to_numpy(dtype=np.float64))) for m in explanation})
        run_dir = root / READING_GRID / spec.run_id
        result = {
            "run_id": spec.run_id, "grid": READING_GRID, "spec": spec.to_json(),
            "method_display_name": display_name_of(spec.method),
            "method_hyperparameters": resolved_method_args(spec.method, spec.method_args),
            "method_fingerprint": fingerprints[spec.method], "metrics_fingerprint": metrics_code,
            "metrics": metrics, "evaluation": {"num_images": images, "map_pool": spec.map_pool},
            "timing": {"epoch_seconds": 1.0},
            "provenance": {"code_version": "synthetic", "device": "cpu: synthetic reading set", "device_type": "cpu",
                           "dataset_fingerprint": {"test": f"synthetic-cub-{images}"}},
        }
        write_records(run_dir, {"per_image": per_image, "per_prototype": per_prototype})  # before result.json
        atomic_write_checked(run_dir / "result.json", json_bytes(result))
    atomic_write_checked(root / MARKER_FILE, json_bytes(written.marker))
    return written
