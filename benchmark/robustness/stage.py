"""``protobench evaluate RUN --robustness misalignment,faithfulness,perturbation``: the input-side evaluations of a
finished run, as their own stage from its checkpoint on the live trunk (benchmark/robustness/live.py).

The ordinary evaluation never waits for it: it runs only when asked, after the run's ``result.json``
exists. Images are processed in batches over a fixed subsample (the first ``images`` of a
permutation drawn from ``SUBSAMPLE_SEED``, kept in test-split order; all by default); each finished
batch is written at once to ``RUN_DIR/robustness.partial/<settings digest>/`` (atomically), so a
killed stage resumes without repeating finished images, and batch b's attack starts from a generator
seeded with ``ATTACK_SEED + b``, so resumed and uninterrupted stages give the same numbers. Only when
every batch is done are the per-image ``robustness`` records and ``result.json``'s ``robustness``
section written (records first, each atomically, both under the run's lock), and the partial folder
removed: a run's results never hold part of a stage.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from benchmark.errors import ProtobenchError
from benchmark.method_lookup import declaration
from benchmark.robustness.faithfulness import FAITHFULNESS_COLUMNS, FAITHFULNESS_SEED, faithfulness_batch
from benchmark.robustness.live import LiveMethod, normalisation, pixel_images
from benchmark.robustness.misalignment import MISALIGNMENT_COLUMNS, misalignment_batch
from benchmark.robustness.perturbation import PERTURBATION_COLUMNS, perturbation_batch
from benchmark.robustness.options import ATTACK_SEED, SUBSAMPLE_SEED, RobustnessOptions, check_options
from benchmark.run.identity import method_fingerprint, metrics_fingerprint
from benchmark.run.provenance import provenance
from benchmark.run.records import read_records, write_records
from benchmark.run.store import (ROBUSTNESS_TABLE, STAGE_PARTIAL_DIR, RunDir, atomic_write_checked, atomic_write_json,
                                  json_bytes, read_json, run_lock)
from benchmark.run.training import deterministic_algorithms
from methods.common.precision import matmul_precision



#: how long the finished stage waits for the run's lock before it writes (another holder writes in seconds;
#: a stage turned away keeps its batches and finishes at once when run again)
RESULT_LOCK_WAIT_S = 120.0


def subsample(test_images: int, images: int | None) -> list[int]:
    """The test-split positions the stage scores, in split order."""
    if images is None or images == test_images:
        return list(range(test_images))
    drawn = np.random.default_rng(SUBSAMPLE_SEED).permutation(test_images)[:images]
    return sorted(int(i) for i in drawn)


def recorded_test_images(run_dir: Path) -> int:
    """How many test images the run's evaluation scored (its ``result.json``), checked before compute."""
    result = RunDir(run_dir).result()
    if result is None:
        raise ProtobenchError(f"run {str(run_dir)!r} has no result.json: the robustness stage runs after the run "
                              "finished; run the grid first")
    count = (result.get("evaluation") or {}).get("num_images")
    if not isinstance(count, int) or count < 1:
        raise ProtobenchError(f"run {str(run_dir)!r}: its result.json records no evaluation.num_images; run "
                              f"`protobench evaluate {run_dir}` first")
    return count


#: what each family writes: its scores in ``robustness.metrics``, its per-image columns, its notes' keys
FAMILY_METRICS = {"misalignment": ("acc_clean", "acc_attacked", "pac", "prc", "plc"),
                  "faithfulness": FAITHFULNESS_COLUMNS, "perturbation": PERTURBATION_COLUMNS}
FAMILY_COLUMNS = {"misalignment": MISALIGNMENT_COLUMNS, "faithfulness": FAITHFULNESS_COLUMNS,
                  "perturbation": PERTURBATION_COLUMNS}
FAMILY_NOTES = {"misalignment": ("pac, prc, plc", "pac"), "faithfulness": (), "perturbation": ("lpa",)}


def run_robustness(run_dir: Path, options: RobustnessOptions) -> dict[str, Any]:
    """Run the stage (module docstring); the ``robustness`` section it wrote to ``result.json``.
    Families scored earlier on the same subsample and not asked now are kept beside the new ones
    (records and section); those of another subsample are dropped, and the section says so."""
    from benchmark.run.reevaluate import check_trained, load_trained

    run_dir = Path(run_dir)
    spec = check_trained(run_dir)
    test_images = recorded_test_images(run_dir)
    check_options(options, test_images)  # every option, before the trunk is built
    prep = load_trained(run_dir)
    if prep.test_set is None or len(prep.test_set) != test_images:
        raise ProtobenchError(f"run {str(run_dir)!r}: the test split here does not hold the images its result "
                              "scored; evaluate it where its data are")
    reference = declaration(spec.method).reference_row
    mean, std = normalisation(prep.test_set)
    live = LiveMethod(prep.method, prep.trunk, mean, std, spec.precision).to(prep.device).eval()
    indices = subsample(len(prep.test_set), options.images)
    fingerprint = method_fingerprint(spec.method)
    key = hashlib.sha256(json.dumps([options.settings(), fingerprint, metrics_fingerprint()],
                                    sort_keys=True).encode()).hexdigest()[:16]
    partial = run_dir / STAGE_PARTIAL_DIR / key
    rows: list[dict[str, list[float]]] = []
    with matmul_precision(spec.precision), deterministic_algorithms(spec.deterministic):
        for number, start in enumerate(range(0, len(indices), options.batch_size)):
            path = partial / f"batch-{number:06d}.json"
            done = read_json(path) if path.exists() else None
            if done is None:
                chunk = indices[start:start + options.batch_size]
                done = _score_batch(live, prep, chunk, options, reference=reference, number=number)
                atomic_write_json(path, done)
            rows.append(done)
    section = _summary(rows, options, reference, spec.method)
    section["provenance"] = {**provenance(prep.device), "precision": spec.precision, "method_fingerprint": fingerprint,
                             "metrics_fingerprint": metrics_fingerprint()}
    table = _table(prep.test_set, indices, rows)
    rd = RunDir(run_dir)
    # one holder at a time reads the earlier families and writes records and result together, so two
    # stages finishing on one run (another process: a job and a local command) never mix their writes
    with run_lock(rd.path, wait_s=RESULT_LOCK_WAIT_S):
        earlier_table = read_records(run_dir, ROBUSTNESS_TABLE)
        _keep_earlier(section, table, (rd.result() or {}).get("robustness"), earlier_table, options)
        write_records(run_dir, {ROBUSTNESS_TABLE: table})
        result = rd.result() or {}
        atomic_write_checked(rd.result_path, json_bytes({**result, "robustness": section}))
    shutil.rmtree(run_dir / STAGE_PARTIAL_DIR, ignore_errors=True)
    return section


def _keep_earlier(section: dict[str, Any], table: pd.DataFrame, earlier: Any, earlier_table: pd.DataFrame | None,
                  options: RobustnessOptions) -> None:
    """Carry the families an earlier stage scored, and this one did not, into ``section`` and ``table``
    where the earlier stage scored the same images; note the ones dropped for another subsample."""
    if not isinstance(earlier, dict) or not isinstance(earlier.get("families"), dict):
        return
    others = [f for f in earlier["families"] if f in FAMILY_METRICS and f not in options.families]
    if not others:
        return
    same = earlier_table is not None and earlier_table["index"].tolist() == table["index"].tolist()
    if not same:
        section["notes"]["earlier families"] = (f"{', '.join(others)} dropped: scored earlier on another subsample "
                                                "of test images; run them again with these settings")
        return
    metrics, notes = earlier.get("metrics") or {}, earlier.get("notes") or {}
    for family in others:
        section["families"][family] = earlier["families"][family]
        section["metrics"].update({k: metrics.get(k) for k in FAMILY_METRICS[family]})
        section["notes"].update({k: notes[k] for k in FAMILY_NOTES[family] if k in notes})
        for column in FAMILY_COLUMNS[family]:
            if column in earlier_table.columns:
                table[column] = earlier_table[column].to_numpy()


def _score_batch(live: LiveMethod, prep: Any, chunk: list[int], options: RobustnessOptions, *, reference: bool,
                 number: int) -> dict[str, list[float]]:
    pixels = pixel_images(prep.test_set, chunk).to(prep.device)
    labels = torch.as_tensor([int(prep.test_set.labels[i]) for i in chunk], dtype=torch.int64, device=prep.device)
    done: dict[str, list[float]] = {"index": [float(i) for i in chunk]}
    log_density = declaration(prep.spec.method).log_density_maps  # relative changes of exp(map)
    if "misalignment" in options.families:
        generator = torch.Generator().manual_seed(ATTACK_SEED + number)
        scored = misalignment_batch(live, pixels, labels, options, prototypes=not reference, generator=generator,
                                    log_density=log_density)
        done.update({name: [float(v) for v in values] for name, values in scored.items()})
    if "faithfulness" in options.families:
        scored = faithfulness_batch(live, pixels, labels, seed=FAITHFULNESS_SEED + number)
        done.update({name: [float(v) for v in values] for name, values in scored.items()})
    if "perturbation" in options.families:
        scored = perturbation_batch(live, pixels, labels, log_density=log_density) if not reference else \
            {name: [float("nan")] * len(chunk) for name in PERTURBATION_COLUMNS}
        done.update({name: [float(v) for v in values] for name, values in scored.items()})
    return done


def _column(rows: list[dict[str, list[float]]], name: str) -> np.ndarray:
    return np.concatenate([np.asarray(row[name], dtype=np.float64) for row in rows])


def _mean(values: np.ndarray) -> float | None:
    defined = values[~np.isnan(values)]
    return float(defined.mean()) if len(defined) else None


def _summary(rows: list[dict[str, list[float]]], options: RobustnessOptions, reference: bool,
             method: str) -> dict[str, Any]:
    """The ``robustness`` section: metrics (means over the subsample; acc in percent), notes, settings."""
    metrics: dict[str, float | None] = {}
    notes: dict[str, str] = {}
    if "misalignment" in options.families:
        metrics["acc_clean"] = 100 * _mean(_column(rows, "correct_clean"))
        metrics["acc_attacked"] = 100 * _mean(_column(rows, "correct_attacked"))
        for name in ("pac", "prc", "plc"):
            metrics[name] = _mean(_column(rows, name))
        if reference:
            notes["pac, prc, plc"] = (f"undefined for {method}: a reference row has no prototypes (its J maps are "
                                      "copies of one class map); accuracy under attack only, PGD on the whole image "
                                      "increasing the true class's cross-entropy")
        elif metrics["pac"] is None:
            notes["pac"] = "undefined: the top prototype's activation before the attack is ≤ 0 on every image"
    if "faithfulness" in options.families:
        for name in FAITHFULNESS_COLUMNS:
            metrics[name] = _mean(_column(rows, name))
    if "perturbation" in options.families:  # the method's profile: the mean relative drop per perturbation
        for name in PERTURBATION_COLUMNS:
            metrics[name] = _mean(_column(rows, name))
        if reference:
            notes["lpa"] = (f"undefined for {method}: a reference row has no prototypes whose similarity a "
                            "perturbation could change")
    count = sum(len(row["index"]) for row in rows)
    return {"metrics": metrics, "notes": notes, "families": {family: options.settings() for family in options.families},
            "num_images": count}


def _table(test_set: Any, indices: list[int], rows: list[dict[str, list[float]]]) -> pd.DataFrame:
    """The per-image ``robustness`` records: ``index``, ``image`` and every scored column."""
    root = Path(test_set.root)
    images = [str(Path(test_set.image_paths[i]).relative_to(root)) if Path(test_set.image_paths[i]).is_relative_to(root)
              else str(test_set.image_paths[i]) for i in indices]
    frame = pd.DataFrame({"index": indices, "image": images})
    for name in (*MISALIGNMENT_COLUMNS, *FAITHFULNESS_COLUMNS, *PERTURBATION_COLUMNS):
        if name in rows[0]:
            frame[name] = _column(rows, name)
    return frame
