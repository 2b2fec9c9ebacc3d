"""Bundles on the Hugging Face Hub: ``protobench bundle pull ORG/NAME --out DIR`` and the
leaderboard's ``hf:ORG/NAME[@REVISION]`` sources.

huggingface_hub's ``snapshot_download`` fetches the repository into its cache (or finds it there:
with ``HF_HUB_OFFLINE=1`` nothing is fetched). A snapshot in that cache is a folder of links into
the repository's ``blobs/``; it is copied into a plain folder, a file at a time, and a link that
leads anywhere but into that repository's ``blobs/`` is refused, as is every path with ``..``.
The copy is then an ordinary bundle, checked against its ``SHA256SUMS``."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from benchmark.bundle.manifest import verify_bundle
from benchmark.bundle.limits import HUB_LOCAL, Tally, UnsafeSource, member_path
from benchmark.errors import ProtobenchError
from benchmark.output_file import staging_path


def _snapshot(repo: str, revision: str | None) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, HfHubHTTPError, LocalEntryNotFoundError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo)
    except HFValidationError as err:
        raise ProtobenchError(f"hf:{repo} is not a Hugging Face repository id ({err}); give hf:ORG/NAME") from None
    try:
        return Path(snapshot_download(repo_id=repo, repo_type="model", revision=revision))
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as err:
        raise ProtobenchError(f"cannot read the bundle hf:{repo}{'@' + revision if revision else ''} from the Hub "
                              f"({type(err).__name__}: {err}); check the name, the network and your token "
                              "(HF_TOKEN)") from None


def copy_snapshot(snapshot: Path, target: Path, label: str) -> None:
    """The files of a downloaded ``snapshot`` as plain files in ``target`` (new), with the checks
    of the module; the Hub's own files (:data:`HUB_LOCAL`) are left out."""
    blobs = snapshot.parent.parent / "blobs"  # huggingface_hub's cache: REPO/snapshots/COMMIT → REPO/blobs
    tally = Tally(label)
    planned: list[tuple[Path, Path]] = []
    for folder, dirs, files in os.walk(snapshot, followlinks=False):
        here = Path(folder)
        if here == snapshot:
            dirs[:] = [d for d in dirs if d not in HUB_LOCAL]
            files = [f for f in files if f not in HUB_LOCAL]
        for name in dirs:
            if (here / name).is_symlink():
                raise UnsafeSource(f"{label}: {(here / name).relative_to(snapshot)} is a link to a folder; a bundle "
                                   "holds none: it is refused")
        for name in files:
            path = here / name
            relative = path.relative_to(snapshot).as_posix()
            if member_path(relative) is None:
                raise UnsafeSource(f"{label}: unsafe file name {relative!r}; it is refused")
            real = path.resolve() if path.is_symlink() else path
            if path.is_symlink() and not (real.is_file() and real.is_relative_to(blobs.resolve())):
                raise UnsafeSource(f"{label}: {relative} links outside the repository's downloaded files; it is "
                                   "refused")
            if not real.is_file():
                raise UnsafeSource(f"{label}: {relative} is not a regular file; it is refused")
            tally.add(real.stat().st_size)
            planned.append((real, target / relative))
    target.mkdir(parents=True)
    for real, destination in planned:
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(real, destination)


def hub_bundle(repo: str, revision: str | None, workdir: Path) -> tuple[Path, str]:
    """The bundle ``hf:repo[@revision]`` copied into ``workdir`` (new), and the commit it is at."""
    snapshot = _snapshot(repo, revision)
    copy_snapshot(snapshot, workdir, f"hf:{repo}")
    return workdir, snapshot.name


def pull_bundle(repo: str, out: Path, *, revision: str | None = None) -> tuple[Path, str, int]:
    """``bundle pull``: the Hub bundle as the folder ``out`` (new), verified against its SHA256SUMS
    before it appears (a bundle that fails is not kept); its commit and number of files checked."""
    if out.exists() or out.is_symlink():
        raise ProtobenchError(f"{out} already exists; remove it or choose another --out")
    snapshot = _snapshot(repo, revision)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_path(out, "pulling")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        copy_snapshot(snapshot, staging, f"hf:{repo}")
        found = verify_bundle(staging)
        if not found.ok:
            problems = found.links + found.changed + found.missing + found.unlisted
            raise ProtobenchError(f"hf:{repo}@{snapshot.name} FAILED verification against its SHA256SUMS "
                                  f"({len(problems)} file(s), first {problems[0]}); nothing was kept: ask its lab "
                                  "to push it again")
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out, snapshot.name, found.checked
