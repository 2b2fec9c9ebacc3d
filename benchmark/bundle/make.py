"""``protobench bundle RUNS… --out DIR [--checkpoints]``: the finished runs under RUNS copied as
``DIR/<grid>/<run_id>/`` (spec, result, per-image and per-prototype records, the robustness stage's
records where it ran, training curves, log; with ``checkpoints`` the trained head as safetensors),
its format record (``bundle.json``, benchmark/bundle/format.py), a model card, Hugging Face
eval-results files (``.eval_results/*.yaml``, benchmark/bundle/eval_results.py), the SHA-256
manifest, and ``DIR.tar.gz`` of the same files. Everything is checked before the first file is written, and the
folder appears whole or not at all (built beside it, then renamed)."""
from __future__ import annotations

import gzip
import io
import re
import shutil
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.bundle.card import CARD_FILE, model_card
from benchmark.bundle.eval_results import HUB_BENCHMARK, eval_results_files
from benchmark.bundle.format import BUNDLE_FILE, bundle_record
from benchmark.bundle.manifest import HEAD_FILE, MANIFEST_FILE, write_manifest
from benchmark.errors import ProtobenchError, nearest_sibling
from benchmark.output_file import staging_path, within
from benchmark.run.store import LOG_FILE, METRICS_FILE, RECORD_FILES, RESULT_FILE, SPEC_FILE, RunDir, find_run_dirs

#: the files of a run a bundle carries (where present); no checkpoint.pt (a pickle), no lock, no job files
BUNDLED_FILES = (SPEC_FILE, RESULT_FILE, METRICS_FILE, *RECORD_FILES, LOG_FILE)
#: the bundle is built in ``.NAME.bundling-PID`` beside --out (benchmark.output_file.staging_path:
#: a killed build's is removed by the next bundle of the same --out)
STAGING_KIND = "bundling"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Bundled:
    folder: Path
    archive: Path
    runs: int
    files: int


def _finished_runs(inputs: Sequence[Path]) -> list[tuple[RunDir, dict[str, Any]]]:
    runs: dict[str, tuple[RunDir, dict[str, Any]]] = {}
    for root in inputs:
        if not root.is_dir():
            absent = "does not exist" if not root.exists() else "is not a directory"
            raise ProtobenchError(f"{root} {absent}{nearest_sibling(root)}; give runs directories (runs/GRID) or run "
                                  "directories")
        found = find_run_dirs(root)
        if not found:
            raise ProtobenchError(f"{root} is not a runs folder: it holds no run directory (GRID/RUN_ID with a "
                                  "spec.json); give the folder `protobench run` wrote to (runs/ or runs/GRID)")
        for rd in found:
            result = rd.result()
            if result is None:
                continue
            grid, run_id = str(result.get("grid")), str(result.get("run_id"))
            if not (_SAFE_NAME.match(grid) and _SAFE_NAME.match(run_id)):
                raise ProtobenchError(f"{rd.result_path}: grid {grid!r} / run_id {run_id!r} cannot name a bundle "
                                      "folder; re-run that run or leave it out")
            key = f"{grid}/{run_id}"
            if key in runs and runs[key][0].path.resolve() != rd.path.resolve():
                raise ProtobenchError(f"two runs are named {key}: {runs[key][0].path} and {rd.path}; bundle them "
                                      "separately")
            runs[key] = (rd, result)
    if not runs:
        raise ProtobenchError(f"no finished run (a result.json) under {', '.join(map(str, inputs))}; finish some "
                              "runs first")
    return [runs[key] for key in sorted(runs)]


def _bundled_files(rd: RunDir) -> list[str]:
    """The :data:`BUNDLED_FILES` a run has; a link that leads out of the run folder is refused
    (a bundle never copies an outside file, e.g. a log linked to a private key)."""
    present = []
    for name in BUNDLED_FILES:
        path = rd.path / name
        if not (path.is_file() or path.is_symlink()):
            continue
        if not within(path, rd.path):
            raise ProtobenchError(f"{path} is a link to a file outside the run folder; a bundle copies no outside "
                                  "file: replace the link with the file, or remove it")
        present.append(name)
    return present


def _archive(folder: Path, out: Path, name: str) -> None:
    """A reproducible ``.tar.gz`` of ``folder`` (its entries under ``name``/): sorted entries, zero
    times and owners, files 0644."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(folder.rglob("*")):
            if not path.is_file():
                continue
            info = tarfile.TarInfo(f"{name}/{path.relative_to(folder).as_posix()}")
            info.size, info.mode, info.mtime = path.stat().st_size, 0o644, 0
            with path.open("rb") as handle:
                tar.addfile(info, handle)
    out.write_bytes(gzip.compress(buffer.getvalue(), mtime=0))


def make_bundle(inputs: Sequence[Path], out: Path, *, checkpoints: bool = False, license: str = "unknown",
                name: str | None = None, hub_benchmark: str | None = None, repo_id: str | None = None) -> Bundled:
    """Bundle the finished runs under ``inputs`` into ``out`` and ``out``.tar.gz (see the module);
    ``hub_benchmark`` (default :data:`HUB_BENCHMARK`) and ``repo_id`` (the model repository it is
    pushed to, if any) go into the eval-results files (benchmark/bundle/eval_results.py)."""
    archive = out.parent / f"{out.name}.tar.gz"
    for target in (out, archive):
        if target.exists():
            raise ProtobenchError(f"{target} already exists; remove it or choose another --out")
    runs = _finished_runs(inputs)
    if checkpoints:
        without = [str(rd.path) for rd, _ in runs if not rd.checkpoint_path.is_file()]
        if without:
            raise ProtobenchError(f"{len(without)} run(s) have no checkpoint.pt to take the head from: "
                                  f"{', '.join(without[:5])}; bundle without --checkpoints, or leave them out")
    copied = [(rd, result, _bundled_files(rd)) for rd, result in runs]  # every link refused before writing
    evals = eval_results_files([(result, rd.result_path) for rd, result in runs],  # refusals before writing
                               hub_benchmark=hub_benchmark or HUB_BENCHMARK, repo_id=repo_id)
    if checkpoints:  # the head is read from checkpoint.pt: torch, only here
        from benchmark.bundle.head import write_head
    staging = staging_path(out, STAGING_KIND)
    partial = out.parent / (staging.name + ".tar.gz")
    try:  # a folder that cannot hold the bundle (/proc, read-only, a file on the way) is refused here
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
    except OSError as err:
        raise ProtobenchError(f"--out {out} cannot be written ({err.strerror or err} at {err.filename or out.parent}); "
                              "choose a folder you can write to") from None
    try:
        for rd, result, names in copied:
            target = staging / str(result["grid"]) / str(result["run_id"])
            target.mkdir(parents=True)
            for file in names:
                shutil.copyfile(rd.path / file, target / file)
            if checkpoints:
                write_head(rd.checkpoint_path, target / HEAD_FILE, metadata={
                    "format": "protobench-head-1", "method": str(result["spec"]["method"]),
                    "run_id": str(result["run_id"]),
                    "weights_checksum": str((result.get("provenance") or {}).get("weights_checksum"))})
        card = model_card([r for _, r in runs], license=license, checkpoints=checkpoints, name=name or out.name)
        (staging / CARD_FILE).write_text(card, encoding="utf-8")
        (staging / BUNDLE_FILE).write_bytes(bundle_record())
        for relative, data in evals.items():
            (staging / relative).parent.mkdir(exist_ok=True)
            (staging / relative).write_bytes(data)
        for path in staging.rglob("*"):  # a umask's 0700 and safetensors' 0600 would keep co-authors out
            path.chmod(0o755 if path.is_dir() else 0o644)
        staging.chmod(0o755)
        write_manifest(staging)
        files = sum(1 for p in staging.rglob("*") if p.is_file() and p.name != MANIFEST_FILE)  # as verify counts
        _archive(staging, partial, out.name)
        partial.rename(archive)
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        partial.unlink(missing_ok=True)
        raise
    return Bundled(folder=out, archive=archive, runs=len(runs), files=files)


def push_bundle(folder: Path, repo_id: str, *, private: bool = True) -> str:
    """Upload the bundle folder to the Hugging Face Hub model repository ``repo_id`` (created if
    needed; the token is huggingface_hub's own: ``HF_TOKEN`` or ``huggingface-cli login``)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    api = HfApi()
    try:
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        commit = api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model",
                                   commit_message=f"protobench bundle {folder.name}")
    except (HfHubHTTPError, OSError) as err:
        raise ProtobenchError(f"uploading {folder} to {repo_id} failed ({err}); check the network and your "
                              "token (HF_TOKEN or `huggingface-cli login`), then run `protobench bundle verify` "
                              f"and push again") from err
    return str(commit.commit_url)
