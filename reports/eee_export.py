"""``protobench export RUNS --format eee --out DIR [--layout flat|submission] [--developer NAME]
[--collection NAME] [--organization NAME]``: the Every Eval Ever files of the finished runs under
RUNS, made one run at a time for ``reports.eee_paths.write_eee``.

- ``--layout flat`` (default): ``DIR/<run_id>.json``, one record per run (reports/eee.py); the
  run's per-image records are named in ``source_metadata.additional_details`` (``per_image_file``,
  relative to the RUNS folder given, and its ``per_image_sha256``): schema 0.3.0 takes a
  ``detailed_evaluation_results`` only as a samples file at its datastore path.
- ``--layout submission`` (needs ``--developer``): the datastore's tree,
  ``DIR/data/<collection>/<developer>/<model>/<uuid>.json`` and, for a run with per-image
  records, ``<uuid>_samples.jsonl`` beside it (reports/eee_samples.py), which the record's
  ``detailed_evaluation_results`` names by its canonical path with its SHA-256 and row count.
  ``<collection>`` is ``--collection`` or ``protobench-<dataset>``.

Every name that becomes a folder is checked before anything is written (``reports.eee_paths``).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmark.errors import ProtobenchError
from benchmark.run.records import read_records
from benchmark.run.store import RECORD_SUFFIXES
from reports.eee import RunRecords, eee_record, evaluation_name, malformed, model_folder
from reports.eee_paths import (LAYOUTS, SAMPLES_SUFFIX, check_component, component_problem, record_uuid,
                               submission_folder)
from reports.eee_samples import sample_lines
from reports.load import read_result_json, result_files

#: a submission's collection when --collection is not given
COLLECTION_PREFIX = "protobench-"


@dataclass(frozen=True)
class EeeOptions:
    """The export's choices (the CLI's ``--layout``, ``--developer``, ``--collection``,
    ``--organization``); :meth:`checked` refuses bad ones before anything is read."""

    layout: str = "flat"
    developer: str | None = None
    collection: str | None = None
    organization: str | None = None

    def checked(self) -> EeeOptions:
        if self.layout not in LAYOUTS:
            raise ProtobenchError(f"--layout {self.layout!r} is not one of {', '.join(LAYOUTS)}")
        if self.layout == "submission" and self.developer is None:
            raise ProtobenchError("--layout submission needs --developer NAME: the lab whose heads these are "
                                  "(the datastore's data/<collection>/<developer>/<model>/ folder)")
        if self.layout == "flat" and self.collection is not None:
            raise ProtobenchError("--collection names a folder of the submission tree: use it with --layout submission")
        if self.developer is not None:
            check_component(self.developer, "--developer", "choose a name of those characters")
        if self.collection is not None:
            check_component(self.collection, "--collection", "choose a name of those characters")
        return self

    @property
    def source_organization(self) -> str:
        """``source_metadata.source_organization_name``: --organization, else the developer."""
        return self.organization or self.developer or "unknown"


def eee_files(runs_dirs: Iterable[str | Path], options: EeeOptions) -> Iterator[tuple[str, bytes]]:
    """(relative path, bytes) of every file of the export, run after run, in discovery order.
    Two results of one run id (a copy, or the same spec in two grids) are refused naming both."""
    options = options.checked()
    dirs = [Path(d) for d in runs_dirs]
    seen: dict[str, Path] = {}
    for path in result_files(dirs):
        run = _read_run(path, next(d for d in dirs if path.is_relative_to(d)))
        run_id = run.run_id
        if run_id in seen:
            raise ProtobenchError(f"{seen[run_id]} and {path} hold the same run id {run_id}; an Every Eval Ever "
                                  "export has one record per run: export them separately (--out per folder)")
        seen[run_id] = path
        yield from (_submission(run, options) if options.layout == "submission" else _flat(run, options))


def _flat(run: RunRecords, options: EeeOptions) -> Iterator[tuple[str, bytes]]:
    if component_problem(run.run_id) is not None:  # a crafted run id must not name a path
        raise malformed(run.path, f"run_id {run.run_id!r} is not a run id the suite writes")
    record = eee_record(run, developer=options.developer,
                        organization=options.source_organization, extra_source=_records_source(run))
    yield f"{run.run_id}.json", _json(record)


def _submission(run: RunRecords, options: EeeOptions) -> Iterator[tuple[str, bytes]]:
    assert options.developer is not None  # EeeOptions.checked
    spec = run.spec
    collection = options.collection or check_component(
        f"{COLLECTION_PREFIX}{spec.get('dataset')}", f"{run.path}: the collection named after its dataset",
        "pass --collection NAME")
    model = check_component(model_folder(spec), f"{run.path}: its model folder (spec method, backbone, dataset, "
                            "J, variant, seed)", "its spec is not one the suite writes: leave that run out")
    folder = submission_folder(collection, options.developer, model)
    stem = f"{folder}/{record_uuid(collection, options.developer, run.run_id)}"
    record = eee_record(run, developer=options.developer, organization=options.source_organization,
                        extra_source=_records_source(run))
    if run.table is not None and len(run.table):
        samples_path = f"{stem}{SAMPLES_SUFFIX}"
        samples = sample_lines(run.table, evaluation_id=run.run_id, model_id=f"{options.developer}/{model}",
                               evaluation_name=evaluation_name(spec, "acc"))
        record["detailed_evaluation_results"] = {
            "format": "jsonl", "file_path": samples_path, "hash_algorithm": "sha256",
            "checksum": hashlib.sha256(samples).hexdigest(), "total_rows": len(run.table),
            "additional_details": {"one_line_per": "test image", "mapping": "docs/protocol/harness.md#reports"}}
        yield samples_path, samples
    yield f"{stem}.json", _json(record)


def _read_run(path: Path, root: Path) -> RunRecords:
    table = read_records(path.parent)  # checked against its schema: a crafted file is refused
    records_file = None if table is None else next(
        path.parent / f"per_image{s}" for s in RECORD_SUFFIXES if (path.parent / f"per_image{s}").is_file())
    return RunRecords(path, root, read_result_json(path), table, records_file)


def _records_source(run: RunRecords) -> dict[str, str]:
    """The run's per-image records file (relative to the RUNS folder), its SHA-256 and rows."""
    if run.records_file is None or run.table is None:
        return {"per_image_file": "none: run `protobench evaluate RUN_DIR` to write the per-image records"}
    return {"per_image_file": run.records_file.relative_to(run.root).as_posix(),
            "per_image_sha256": hashlib.sha256(run.records_file.read_bytes()).hexdigest(),
            "per_image_rows": str(len(run.table))}


def _json(record: dict[str, object]) -> bytes:
    return (json.dumps(record, sort_keys=True, indent=2, allow_nan=False) + "\n").encode()
