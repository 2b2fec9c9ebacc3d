"""The runs of every source, re-scored from their records and aligned into leaderboard entries.

**Re-scoring.** A run's per-image metrics are recomputed from its per-image records with the
definitions the evaluation uses (docs/protocol/metrics.md): accuracy = 100 · mean over test images
of [predicted = label]; sta, dis, comp, sanity = the mean over the images where the value is
defined; con = the mean over prototypes of the per-prototype records. A result.json whose number
differs from its records' by more than :data:`RESCORE_TOLERANCE` is refused, naming the run and the
source: the rows show what the records say, never a number only a result file claims. A run
without records keeps its recorded numbers and says so (``rescored: false``).

**Alignment.** An entry is one setting of one method in one board (dataset × backbone × J): runs
pool into it when they agree on dataset, backbone, J, method, variant, the budget (default, or tuned
with its trials and epochs), the validation split's fingerprint, the metric code's fingerprint,
the test data's fingerprint and every other setting of the run (its resolved hyperparameters:
the pooling rule of ``report``). Runs of one board and method that differ in any of these are
separate entries, each naming what sets it apart (``differs``).

**Duplicates.** One run (grid and run id) in two sources is read once when the two copies are
byte-identical in result and records, and refused when they differ (two labs' runs of one spec
and seed are two results, not one).
"""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from benchmark.errors import ProtobenchError
from benchmark.run.store import SCORED_FILES
from reports.columns import flatten
from reports.load import load_results, read_result_json
from reports.per_image import run_values

if TYPE_CHECKING:
    from benchmark.bundle.sources import Source

#: |result.json − records| above which a result is refused (percent; the records' float32 sums)
RESCORE_TOLERANCE = 1e-6
PER_IMAGE_COLUMNS = {"sta": "sta", "dis": "dis", "comp": "comp", "sanity": "sanity"}
#: every metric the records re-score (and so every one a result.json is checked on)
RESCORED = ("acc", "con", *PER_IMAGE_COLUMNS)
#: the fields (besides the board and the method) an entry is aligned on, as the outputs name them
ALIGNED = ("variant", "budget", "validation_split", "metric_code", "test_data", "setting")


@dataclass
class Entry:
    """One method's setting in one board and the runs that pool into it."""

    board: tuple[str, str, int]  # dataset, backbone, J
    method: str
    display_name: str
    aligned: dict[str, str]  # ALIGNED → value
    runs: pd.DataFrame  # tidy rows (seed index not set), re-scored, one per seed
    sources: list[dict[str, Any]] = field(default_factory=list)
    differs: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        key = json.dumps([*self.board, self.method, self.aligned], sort_keys=True)
        return hashlib.sha256(key.encode()).hexdigest()[:12]

    @property
    def label(self) -> str:
        variant = self.aligned["variant"]
        budget = self.aligned["budget"]
        return self.display_name + ("" if variant == "default" else f" ({variant})") + \
            ("" if budget == "default" else f" [{budget}]")


def budget(spec: dict[str, Any]) -> str:
    """``default``, or ``tuned: N trials × E epochs`` (from the run's ``tuned`` record)."""
    tuned = spec.get("tuned") or {}
    if not tuned:
        return "default"
    text = f"tuned: {tuned.get('trials')} trials × {tuned.get('epochs_per_trial')} epochs"
    return text + (f", {tuned['pruned_trials']} pruned" if tuned.get("pruned_trials") else "")


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def validation_fingerprint(spec: dict[str, Any], provenance: dict[str, Any]) -> str:
    """What fixes the validation split a tuned run was tuned on (its fraction, seed and the training
    data's fingerprint); ``none`` for a default run, which never used one."""
    tuned = spec.get("tuned") or {}
    if not tuned:
        return "none"
    train = (provenance.get("dataset_fingerprint") or {}).get("train") if isinstance(
        provenance.get("dataset_fingerprint"), dict) else None
    return _digest({"split": tuned.get("validation_split"), "train": train})


def _records(run_dir: str, table: str) -> pd.DataFrame | None:
    from benchmark.run.records import read_records

    return read_records(Path(run_dir), table)


def rescore(run_dir: str, recorded: dict[str, float], where: str) -> tuple[dict[str, float], int | None, bool]:
    """The run's metrics of :data:`RESCORED` from its records (see the module; none without
    records), the number of test images, and whether it had records; a recorded number the records
    contradict is refused."""
    images = run_values(run_dir)  # read once per command: the ranking's paired tests draw on the same values
    prototypes = _records(run_dir, "per_prototype")
    if images is None:
        return {}, None, False
    scores: dict[str, float] = {}
    right = images.values("correct") == 100.0  # label == predicted: read_records checked `correct` against it
    scores["acc"] = 100.0 * float(right.mean()) if len(right) else math.nan
    for metric, column in PER_IMAGE_COLUMNS.items():
        if column in images.columns:
            values = images.values(column)
            scores[metric] = float(np.nanmean(values)) if np.isfinite(values).any() else math.nan
    if prototypes is not None and "con" in prototypes.columns:
        values = prototypes["con"].to_numpy(dtype=np.float64)
        scores["con"] = float(np.nanmean(values)) if np.isfinite(values).any() else math.nan
    for metric, value in scores.items():
        claimed = recorded.get(metric, math.nan)
        both_missing = math.isnan(value) and math.isnan(claimed)
        if not both_missing and not (abs(value - claimed) <= RESCORE_TOLERANCE):
            raise ProtobenchError(f"{where}: result.json gives {metric} = {claimed!r} but its records give {value!r}; "
                                  "the result and its records disagree (altered, or written by different runs): "
                                  "the source is refused")
    return scores, len(images.ids), True


def _content(run_dir: Path) -> str:
    """SHA-256 over the run's result and records: two copies of one run id are told apart by it."""
    digest = hashlib.sha256()
    for name in SCORED_FILES:
        if (run_dir / name).is_file():
            digest.update(name.encode() + b"\0" + hashlib.sha256((run_dir / name).read_bytes()).digest())
    return digest.hexdigest()


def read_source(source: "Source") -> pd.DataFrame:
    """The tidy rows of one source's runs, re-scored, with the alignment and provenance columns."""
    frame = load_results([source.root])
    rows = []
    for row in frame.to_dict(orient="records"):
        path = Path(str(row["source"]))
        result = read_result_json(path)
        spec = result["spec"]
        provenance = result.get("provenance") if isinstance(result.get("provenance"), dict) else {}
        where = f"source {source.name}: run {row['grid']}/{row['run_id']}"
        scores, n_images, rescored = rescore(str(row["run_dir"]), {m: float(row[m]) for m in RESCORED}, where)
        row.update(scores)
        fingerprints = provenance.get("dataset_fingerprint") if isinstance(provenance.get("dataset_fingerprint"),
                                                                           dict) else {}
        row.update({
            "budget": budget(spec),
            "validation_split": validation_fingerprint(spec, provenance),
            "metric_code": str(result.get("metrics_fingerprint") or "unknown")[:12],
            "test_data": str(fingerprints.get(str(spec.get("evaluation_split", "test"))) or "unknown"),
            "n_images": n_images if n_images is not None else (result.get("evaluation") or {}).get("num_images"),
            "rescored": rescored,
            "source_name": source.name,
            "content": _content(Path(str(row["run_dir"]))),
            "device_type": str(provenance.get("device_type") or provenance.get("device") or "unknown"),
        })
        rows.append(row)
    return pd.DataFrame.from_records(rows)


def read_all(sources: Sequence["Source"]) -> pd.DataFrame:
    """Every source's rows, each run once (see the module: duplicates)."""
    frames = [read_source(s) for s in sources]
    frame = pd.concat(frames, ignore_index=True)
    kept: dict[tuple[str, str], dict[str, Any]] = {}
    also: dict[tuple[str, str], list[str]] = {}
    for row in frame.sort_values(["source_name", "grid", "run_id"]).to_dict(orient="records"):
        key = (str(row["grid"]), str(row["run_id"]))
        if key in kept:
            if kept[key]["content"] != row["content"]:
                raise ProtobenchError(f"run {key[0]}/{key[1]} is in sources {kept[key]['source_name']} and "
                                      f"{row['source_name']} with different content (result or records); one run id "
                                      "is one result: leave one of the sources out, or ask its lab which is right")
            also[key].append(str(row["source_name"]))
            continue
        kept[key], also[key] = row, [str(row["source_name"])]
    return pd.DataFrame.from_records([{**row, "also_in": also[key][1:]} for key, row in kept.items()])


def _aligned(row: dict[str, Any]) -> dict[str, str]:
    return {"variant": str(row["variant"]), "budget": str(row["budget"]),
            "validation_split": str(row["validation_split"]), "metric_code": str(row["metric_code"]),
            "test_data": str(row["test_data"]), "setting": _digest(row["setting"])}


def entries(frame: pd.DataFrame, sources: Sequence["Source"]) -> list[Entry]:
    """The entries of the runs (see the module), sorted by board, method and alignment; each names
    its sources with their checksum and verification."""
    opened = {s.name: s for s in sources}
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in frame.to_dict(orient="records"):
        aligned = _aligned(row)
        key = (str(row["dataset"]), str(row["backbone"]), int(row["J"]), str(row["method"]),
               json.dumps(aligned, sort_keys=True))
        groups.setdefault(key, []).append(row)
    built = []
    for key in sorted(groups):
        rows = sorted(groups[key], key=lambda r: int(r["seed"]))
        seeds = [int(r["seed"]) for r in rows]
        if len(set(seeds)) != len(seeds):
            twice = sorted({s for s in seeds if seeds.count(s) > 1})[0]
            names = ", ".join(f"{r['source_name']}: {r['grid']}/{r['run_id']}" for r in rows if int(r["seed"]) == twice)
            raise ProtobenchError(f"two runs of one setting have seed {twice} ({names}); they are two results for one "
                                  "seed: leave one of the sources out")
        runs_of: dict[str, int] = {}
        for r in rows:
            for name in [r["source_name"], *r["also_in"]]:
                runs_of[name] = runs_of.get(name, 0) + 1
        built.append(Entry(board=key[:3], method=key[3], display_name=str(rows[0]["method_display_name"] or key[3]),
                           aligned=json.loads(key[4]), runs=pd.DataFrame.from_records(rows),
                           sources=[{"name": n, "runs": runs_of[n], "checksum": opened[n].checksum,
                                     "verification": opened[n].verification} for n in sorted(runs_of)]))
    _name_differences(built)
    return built


def _name_differences(built: list[Entry]) -> None:
    """Each entry that shares its board and method with another gets the fields it differs in."""
    siblings: dict[tuple, list[Entry]] = {}
    for entry in built:
        siblings.setdefault((*entry.board, entry.method), []).append(entry)
    for group in siblings.values():
        if len(group) < 2:
            continue
        settings = [flatten(json.loads(str(e.runs["setting"].iloc[0]))) for e in group]
        for entry, setting in zip(group, settings):
            differs = [f"{name} {entry.aligned[name]}" for name in ALIGNED if name != "setting"
                       and any(other.aligned[name] != entry.aligned[name] for other in group)]
            keys = sorted({k for s in settings for k in s if any(o.get(k) != s.get(k) for o in settings)})
            differs += [f"{k} = {json.dumps(setting.get(k), sort_keys=True, default=str)}" for k in keys
                        if not k.startswith("tuned")]  # the budget names the tuning
            entry.differs = differs
