"""Every source's runs read whole, re-scored from their records, each run once per lab.

**All or nothing.** Every ``result.json`` of a source is read (reports/load.py: a number that is
not finite or lies outside its metric's range, JSON nested too deep, an integer of thousands of
digits, bytes that are not UTF-8 are each refused), re-scored, and, in a bundle, found at its
``<grid>/<run_id>/`` (a bundle holds finished runs only: a run folder with records and no result
is refused too). A source with one run that fails, verified or a runs folder, is refused as a
whole, naming the run and the reason, unless ``--allow-unverified``: then the source is listed
unverified and the run is named in the document's ``sources[].unreadable``, never dropped
silently. An entry's seeds are therefore always those of the runs read.

**Re-scoring** (:mod:`.rescoring`). A run's scores are recomputed from its per-image,
per-prototype and robustness records with the rules the evaluation and the robustness stage score
with; a result.json whose number its records contradict is a run that fails (above): the rows show
what the records say, never a number only a result file claims. A metric no record table holds
keeps its recorded number and says so (``rescored: false`` without per-image records;
``as_reported`` per metric).

**Replications.** Run ids hash the spec, so two labs that ran one public grid have the same run ids
with their own content. One run id in two sources is one run, read once and credited to both, when
the copies are byte-identical in result and records (one lab republished the other's run); with
different content it is an **independent replication**, kept with its source and seed as its own
replicate (reports/leaderboard/entries.py). One run id twice in one source with different content
is refused: a lab's run id names one result.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from benchmark.errors import ProtobenchError
from benchmark.run.store import RESULT_FILE, SCORED_FILES, SPEC_FILE
from reports.leaderboard.entries import digest
from reports.leaderboard.rescoring import RESCORED, rescore
from reports.load import read_result_json, read_results_strictly, result_files

if TYPE_CHECKING:
    from benchmark.bundle.sources import Source

#: what ``_malformed`` (reports/load.py) appends for a run's owner; a leaderboard names the source instead
_OWNER_ADVICE = "; re-run that run or delete the file"


@dataclass(frozen=True)
class Unreadable:
    """A run of a source that could not be read whole: where (relative to the source) and why."""

    run: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"run": self.run, "reason": self.reason}


def budget(spec: dict[str, Any]) -> str:
    """``default``, or ``tuned: N trials × E epochs`` (from the run's ``tuned`` record)."""
    tuned = spec.get("tuned") or {}
    if not tuned:
        return "default"
    text = f"tuned: {tuned.get('trials')} trials × {tuned.get('epochs_per_trial')} epochs"
    return text + (f", {tuned['pruned_trials']} pruned" if tuned.get("pruned_trials") else "")


def validation_fingerprint(spec: dict[str, Any], provenance: dict[str, Any]) -> str:
    """What fixes the validation split a tuned run was tuned on (its fraction, seed and the training
    data's fingerprint); ``none`` for a default run, which never used one."""
    tuned = spec.get("tuned") or {}
    if not tuned:
        return "none"
    train = (provenance.get("dataset_fingerprint") or {}).get("train") if isinstance(
        provenance.get("dataset_fingerprint"), dict) else None
    return digest({"split": tuned.get("validation_split"), "train": train})


def _content(run_dir: Path) -> str:
    """SHA-256 over the run's result and records: two copies of one run id are told apart by it."""
    digest = hashlib.sha256()
    for name in SCORED_FILES:
        if (run_dir / name).is_file():
            digest.update(name.encode() + b"\0" + hashlib.sha256((run_dir / name).read_bytes()).digest())
    return digest.hexdigest()


def _why(message: str, path: Path) -> str:
    """A reader's refusal without the path it already names and the advice for the run's owner."""
    text = message.removeprefix(f"{path} is malformed: ").removeprefix(f"{path}: ")
    return text.split(_OWNER_ADVICE)[0].rstrip(".")


def _relative(path: Path, source: "Source") -> str:
    try:
        return path.relative_to(source.root).as_posix()
    except ValueError:
        return str(path)


def _runs_without_result(source: "Source") -> list[Unreadable]:
    """A bundle's run folders (with a spec or records) that have no result.json."""
    found = []
    for folder, _dirs, files in os.walk(source.root, followlinks=False):
        names = set(files)
        if RESULT_FILE not in names and names & {SPEC_FILE, *SCORED_FILES}:
            found.append(Unreadable(_relative(Path(folder), source), "a run folder with records but no result.json "
                                    "(a bundle holds finished runs only)"))
    return sorted(found, key=lambda u: u.run)


def _scored_row(row: dict[str, Any], source: "Source") -> dict[str, Any]:
    """One run's tidy row re-scored, with the alignment and provenance columns (ProtobenchError: it fails)."""
    path = Path(str(row["source"]))
    result = read_result_json(path)
    if source.kind != "runs" and path.relative_to(source.root).parts != (str(row["grid"]), str(row["run_id"]),
                                                                          RESULT_FILE):
        raise ProtobenchError(f"its result names run {row['grid']}/{row['run_id']}, not the folder it lies in "
                              "(a bundle keeps each run at <grid>/<run_id>/)")
    spec = result["spec"]
    provenance = result.get("provenance") if isinstance(result.get("provenance"), dict) else {}
    where = f"source {source.name}: run {row['grid']}/{row['run_id']}"
    found = rescore(str(row["run_dir"]), {m: float(row[m]) for m in RESCORED}, where)
    row.update(found.scores)
    fingerprints = provenance.get("dataset_fingerprint") if isinstance(provenance.get("dataset_fingerprint"),
                                                                       dict) else {}
    row.update({
        "budget": budget(spec),
        "validation_split": validation_fingerprint(spec, provenance),
        "metric_code": str(result.get("metrics_fingerprint") or "unknown")[:12],
        "test_data": str(fingerprints.get(str(spec.get("evaluation_split", "test"))) or "unknown"),
        "n_images": found.images if found.images is not None else (result.get("evaluation") or {}).get("num_images"),
        "rescored": found.records,
        "as_reported": " ".join(found.as_reported),
        "source_name": source.name,
        "content": _content(Path(str(row["run_dir"]))),
        "device_type": str(provenance.get("device_type") or provenance.get("device") or "unknown"),
        **_provider(result),
    })
    return row


def _provider(result: dict[str, Any]) -> dict[str, str]:
    """The distribution and version that provided the run's method, as its result.json records them
    (``method_provider``: protobench for the suite's own methods; empty where the run recorded none,
    an import-path method or an earlier result)."""
    provider = result.get("method_provider") if isinstance(result.get("method_provider"), dict) else {}
    distribution, release = provider.get("distribution"), provider.get("version")
    return {"provider_distribution": distribution if isinstance(distribution, str) else "",
            "provider_version": release if isinstance(release, str) else ""}


def read_source(source: "Source", *, allow_unverified: bool = False) -> tuple[list[dict[str, Any]], list[Unreadable]]:
    """The tidy rows of one source's runs, re-scored, and the runs that failed (see the module:
    a verified source with one is refused unless ``allow_unverified``)."""
    paths = result_files([source.root], required=False)
    frame, refused = read_results_strictly(paths)
    failed = [Unreadable(_relative(path.parent, source), _why(why, path)) for path, why in refused]
    orphans = _runs_without_result(source) if source.kind != "runs" else []
    failed += orphans
    rows = []
    for row in frame.to_dict(orient="records"):
        try:
            rows.append(_scored_row(row, source))
        except ProtobenchError as err:
            failed.append(Unreadable(f"{row['grid']}/{row['run_id']}", _why(str(err), Path(str(row["source"])))))
    if failed and not allow_unverified:
        first = failed[0]
        status = "is verified, but" if source.verified else "(a runs folder):"
        raise ProtobenchError(
            f"source {source.name} {status} {len(failed)} of its {len(paths) + len(orphans)} run(s) cannot be read "
            f"whole: {first.run}: {first.reason}; a source is read whole or not at all, so it is refused (ask its "
            "lab for it again, or pass --allow-unverified to list it unverified with "
            f"{'that run' if len(failed) == 1 else 'those runs'} marked)")
    if not rows and not failed:
        raise ProtobenchError(f"source {source.given} holds no finished run (result.json); give a bundle or a runs "
                              "folder with finished runs")
    return rows, failed


def read_all(sources: Sequence["Source"], *, allow_unverified: bool = False
             ) -> tuple[pd.DataFrame, dict[str, list[Unreadable]]]:
    """Every source's rows (see the module: replications), and each source's runs that failed."""
    kept: dict[tuple[str, str], list[dict[str, Any]]] = {}
    failed: dict[str, list[Unreadable]] = {}
    for source in sorted(sources, key=lambda s: s.name):
        rows, failed[source.name] = read_source(source, allow_unverified=allow_unverified)
        for row in sorted(rows, key=lambda r: (str(r["grid"]), str(r["run_id"]), str(r["source"]))):
            key = (str(row["grid"]), str(row["run_id"]))
            copies = kept.setdefault(key, [])
            mine = next((r for r in copies if r["source_name"] == source.name), None)
            if mine is not None:
                if mine["content"] == row["content"]:
                    continue  # one file reached twice in one source
                raise ProtobenchError(f"source {source.name} holds run {key[0]}/{key[1]} twice with different "
                                      f"content ({mine['source']} and {row['source']}); a lab's run id names one "
                                      "result: leave one of them out of that source")
            same = next((r for r in copies if r["content"] == row["content"]), None)
            if same is not None:  # byte-identical: one run, republished
                same["also_in"].append(source.name)
                continue
            copies.append({**row, "also_in": []})  # the first copy, or an independent replication
    rows = [row for key in sorted(kept) for row in kept[key]]
    if not rows:
        raise ProtobenchError("no source holds a run that could be read; see each source's runs above")
    return pd.DataFrame.from_records(rows), failed
