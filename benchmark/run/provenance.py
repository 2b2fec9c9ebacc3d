"""Where a result came from: code version, package versions, device.

The code version names the code exactly. In a git checkout it is ``git describe --always
--tags`` of HEAD and, when tracked files differ from HEAD, ``-dirty+<8 hex>``: a fingerprint
of those files' contents, so the same edits give the same version and other edits another
one. In a code snapshot (:mod:`slurm.snapshot`, no git there) it is the version recorded
from the checkout the snapshot was copied from, in ``.protobench-snapshot/source.json``.
Elsewhere (an installed package) it is the package version.
"""
from __future__ import annotations

import hashlib
import platform
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from benchmark.errors import ProtobenchError
from benchmark.run.store import read_json

_PACKAGES = ("torch", "timm", "numpy", "scipy", "protobench")
SNAPSHOT_RECORD_DIR = ".protobench-snapshot"  # in a code snapshot: the state of the checkout it copies
SOURCE_FILE = "source.json"
DIFF_FILE = "uncommitted.diff"


def git(root: Path, *args: str) -> bytes:
    """``git ARGS`` in ``root``: its stdout; a missing git or a failure is a ProtobenchError."""
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, timeout=60)
    except FileNotFoundError as err:
        raise ProtobenchError("git is not installed; it is needed to name the suite's code") from err
    except subprocess.TimeoutExpired as err:
        raise ProtobenchError(f"`git {' '.join(args)}` in {root} did not answer in 60 s") from err
    if out.returncode != 0:
        raise ProtobenchError(f"`git {' '.join(args)}` failed in {root}: {out.stderr.decode(errors='replace').strip()}")
    return out.stdout


@dataclass(frozen=True)
class SourceState:
    """The code of a git checkout: HEAD and a fingerprint of the tracked files that differ from it."""

    commit: str  # HEAD's full hash
    describe: str  # `git describe --always --tags HEAD`
    edits: str = ""  # sha256 hex of the edited tracked files (see _fingerprint); "" for a clean tree

    @property
    def dirty(self) -> bool:
        return bool(self.edits)

    @property
    def version(self) -> str:
        return f"{self.describe}-dirty+{self.edits[:8]}" if self.edits else self.describe


def _fingerprint(root: Path, paths: list[str]) -> str:
    """sha256 over (path, kind, content) of each edited tracked file, in path order: a symlink
    by its target, a file by its executable bit and bytes, a deleted file as deleted."""
    if not paths:
        return ""
    digest = hashlib.sha256()
    for path in sorted(paths):
        file = root / path
        if file.is_symlink():
            content = b"link " + str(file.readlink()).encode()
        elif file.is_file():
            content = (b"exec " if file.stat().st_mode & 0o111 else b"file ") + file.read_bytes()
        else:
            content = b"deleted"
        digest.update(path.encode() + b"\0" + hashlib.sha256(content).digest())
    return digest.hexdigest()


def checkout_state(root: Path) -> SourceState:
    """The state of the git checkout whose top level is ``root``."""
    commit = git(root, "rev-parse", "--verify", "HEAD").decode().strip()
    describe = git(root, "describe", "--always", "--tags", "HEAD").decode().strip()
    # tracked files whose working-tree content differs from HEAD (staged or not); untracked ones never count
    edited = git(root, "diff", "HEAD", "--name-only", "--no-renames", "--no-ext-diff", "-z").decode()
    return SourceState(commit, describe, _fingerprint(root, [p for p in edited.split("\0") if p]))


def uncommitted_diff(root: Path) -> bytes:
    """The edits of the checkout's tracked files against HEAD, as ``git apply`` takes them."""
    return git(root, "diff", "HEAD", "--binary", "--no-color", "--no-ext-diff", "--no-textconv")


def recorded_state(snapshot: Path) -> SourceState | None:
    """The checkout state a code snapshot recorded; None when ``snapshot`` is no snapshot."""
    path = snapshot / SNAPSHOT_RECORD_DIR / SOURCE_FILE
    if not path.exists():
        return None
    data = read_json(path)
    fields = ("commit", "describe", "edits")
    if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in fields):
        raise ProtobenchError(f"{path} is not a code snapshot record (commit, describe, edits); "
                              "submit the runs again to take a new snapshot")
    return SourceState(data["commit"], data["describe"], data["edits"])


def code_version(root: Path | None = None) -> str:
    """The version of the code at ``root`` (default: the running suite's): see the module doc."""
    root = root or Path(__file__).resolve().parents[2]
    recorded = recorded_state(root)
    if recorded is not None:
        return recorded.version
    try:
        if Path(git(root, "rev-parse", "--show-toplevel").decode().strip()).resolve() == root.resolve():
            return checkout_state(root).version
    except ProtobenchError:
        pass  # no git, or no commit yet: the package version names the code
    return f"protobench {metadata.version('protobench')}"


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def device_description(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    return f"cpu: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def provenance(device: torch.device) -> dict[str, Any]:
    return {"code_version": code_version(), "packages": package_versions(), "device": device_description(device)}


def providers(method: str, backbone: str, dataset: str) -> dict[str, dict[str, str]]:
    """Who provided a run's method, trunk and dataset: ``method_provider`` (always: the suite, or
    the installed distribution of an entry point ``protobench.methods``), ``backbone_provider`` and
    ``dataset_provider`` (an installed package's only), each ``{"distribution", "version"}``; an
    import path is recorded by its ``adapter_paths`` instead. Readers compare the method's
    (benchmark/run/identity.py)."""
    from benchmark.data.declared import dataset_declaration
    from benchmark.method_lookup import declaration, method_provider
    from methods.plugins import BUILTIN
    from benchmark.run.own_code import is_own_method
    from benchmark.trunks import trunk_declaration

    found: dict[str, dict[str, str]] = {}
    if not is_own_method(method):
        provider = method_provider(method)
        found["method_provider"] = ({"distribution": BUILTIN.distribution,
                                     "version": metadata.version(BUILTIN.distribution)}
                                    if provider.builtin else {**provider.to_json(), "adapter": declaration(method).adapter})
    trunk = trunk_declaration(backbone) if ":" not in backbone else None
    if trunk is not None and not trunk[1].builtin:
        found["backbone_provider"] = trunk[1].to_json()
    data = dataset_declaration(dataset)
    if data is not None and not data[1].builtin:
        found["dataset_provider"] = data[1].to_json()
    return found
