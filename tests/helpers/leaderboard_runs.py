"""Runs of several labs for the leaderboard tests: result.json files (reports_support.write_run)
with per-image and per-prototype records whose means are the recorded metrics."""
from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pandas as pd

from benchmark.run.records import write_records
from reports_support import write_run

IMAGES = 60


#: what the runner records for the suite's own methods (benchmark/run/provenance.py ``providers``)
SUITE = {"distribution": "protobench", "version": version("protobench")}


def lab_run(root: Path, method: str, seed: int, accuracy: float, *, J: int = 3, grid: str = "lab",
            sta: float = 80.0, noise: int = 0, draw: int | None = None,
            provider: dict[str, str] | None = SUITE) -> Path:
    """One run under ``root/grid/RUN_ID`` right on the first ``accuracy`` share of the images (the
    images shuffled by ``noise``), with per-image stability around ``sta``; its folder. ``draw``:
    the seed of the random draw (default: ``seed``; one draw for several seeds gives identical runs,
    a method that ignores the seed). ``provider``: the result's ``method_provider`` (None: none recorded)."""
    rng = np.random.default_rng(1000 * (seed if draw is None else draw) + noise + len(method))
    right = np.zeros(IMAGES, dtype=bool)
    right[rng.permutation(IMAGES)[: int(round(accuracy * IMAGES / 100))]] = True
    labels = np.arange(IMAGES) % 5
    predicted = np.where(right, labels, (labels + 1) % 5)
    stability = np.clip(sta + rng.normal(0, 5, IMAGES), 0, 100)
    con = np.resize([0.0, 50.0, 100.0, 50.0], 5 * J)
    metrics = {"acc": 100.0 * right.mean(), "sta": float(stability.mean()), "con": float(con.mean())}
    path = write_run(root / grid, "staging", method=method, J=J, seed=seed, metrics=metrics,
                     evaluation={"num_images": IMAGES},
                     provenance={"code_version": "abc1234", "device": "cpu: test", "device_type": "cpu",
                                 "dataset_fingerprint": {"test": "feedfacecafebeef"},
                                 "finished": "2026-01-01T00:00:00"},
                     **({} if provider is None else {"method_provider": provider}))
    run_id = json.loads(path.read_text())["run_id"]
    folder = path.parent.rename(path.parent.parent / run_id)
    images = pd.DataFrame({"index": range(IMAGES), "image": [f"images/{i:03d}.jpg" for i in range(IMAGES)],
                           "label": labels, "predicted": predicted, "correct": right,
                           "margin": np.where(right, 1.0, -1.0), "sta": stability})
    prototypes = pd.DataFrame({"class": np.repeat(np.arange(5), J), "prototype": np.tile(np.arange(J), 5), "con": con})
    write_records(folder, {"per_image": images, "per_prototype": prototypes})
    (folder / "spec.json").write_text(json.dumps(json.loads((folder / "result.json").read_text())["spec"]))
    return folder


#: the robustness stage's subsample in these runs: 40 of the 60 test images (the crossed test needs 30)
ROBUSTNESS_IMAGES = 40
#: robustness record column → the score result.json's ``robustness.metrics`` holds (reports.per_image)
ROBUSTNESS_COLUMNS = {"correct_clean": "acc_clean", "correct_attacked": "acc_attacked", "pac": "pac", "prc": "prc",
                      "plc": "plc", "pixel_flipping": "pixel_flipping", "region_perturbation": "region_perturbation",
                      "road": "road", "infidelity": "infidelity"}


def add_robustness(folder: Path, *, pac: float, attacked: float = 50.0, images: int = ROBUSTNESS_IMAGES,
                   noise: int = 0, records: bool = True) -> Path:
    """The robustness stage's results on the run in ``folder``: per-image misalignment and
    faithfulness values on the stage's subsample of ``images`` test images (its own rule,
    benchmark/robustness/stage.py ``subsample``), ``pac`` around ``pac`` (undefined on the first
    image), ``correct_attacked`` right on ``attacked`` percent of them; ``result.json``'s ``robustness``
    section holds their means by the stage's rule (``_summary``). ``records=False`` leaves the records
    out (a run bundled before bundles carried them). The folder."""
    from benchmark.robustness.stage import subsample

    result = json.loads((folder / "result.json").read_text())
    spec = result["spec"]
    rng = np.random.default_rng(5000 + 1000 * spec["seed"] + noise + len(spec["method"]))
    indices = subsample(IMAGES, images)
    n = len(indices)
    right = np.zeros(n)
    right[rng.permutation(n)[: int(round(attacked * n / 100))]] = 1.0
    table = pd.DataFrame({"index": indices, "image": [f"images/{i:03d}.jpg" for i in indices],
                          "correct_clean": np.ones(n), "correct_attacked": right,
                          "pac": np.minimum(pac + rng.normal(0, 3, n), 100.0),
                          "prc": rng.integers(0, 4, n).astype(float),
                          "plc": np.clip(pac / 2 + rng.normal(0, 3, n), 0.0, 100.0),
                          "pixel_flipping": rng.uniform(5, 20, n), "region_perturbation": rng.uniform(-0.2, 0.6, n),
                          "road": rng.uniform(0, 1, n), "infidelity": rng.uniform(0, 2e-3, n)})
    table.loc[0, "pac"] = np.nan  # the top prototype's activation ≤ 0 before the attack: undefined
    metrics = {}
    for column, metric in ROBUSTNESS_COLUMNS.items():
        values = table[column].to_numpy(dtype=np.float64)
        metrics[metric] = (100.0 if column.startswith("correct") else 1.0) * float(values[~np.isnan(values)].mean())
    if records:
        write_records(folder, {"robustness": table})
    result["robustness"] = {"metrics": metrics, "notes": {}, "num_images": n,
                            "families": {family: {"images": images} for family in ("misalignment", "faithfulness")}}
    (folder / "result.json").write_text(json.dumps(result))
    return folder
