"""Code snapshots and the code version, without a cluster: a snapshot holds the tracked files
with their edits and nothing untracked, records the checkout's commit and a diff that rebuilds
its code, and ``code_version`` names the same code alike in a checkout and in its snapshot."""
from __future__ import annotations

import json
import shutil
from importlib import metadata
from pathlib import Path

import pytest

from benchmark.errors import ProtobenchError
from benchmark.run.provenance import DIFF_FILE, SNAPSHOT_RECORD_DIR, SOURCE_FILE, code_version
from slurm.snapshot import code_snapshot
from support import git

pytestmark = pytest.mark.skipif(not shutil.which("git"), reason="code snapshots need git")
BLOB = bytes(range(256))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A committed and tagged checkout: a package with a binary file, tests/ and a .gitignore."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    for name in ("pkg/a.py", "pkg/gone.py", "tests/result.json"):
        (repo / name).write_text("committed\n")
    (repo / "pkg" / "blob.bin").write_bytes(BLOB)
    (repo / ".gitignore").write_text("ignored.txt\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "c")
    git(repo, "tag", "v1")
    return repo


def edit(repo: Path) -> None:
    """Edits of every kind, and files beside the code that are not code."""
    (repo / "pkg" / "a.py").write_text("edited\n")
    (repo / "pkg" / "blob.bin").write_bytes(BLOB[::-1])
    (repo / "pkg" / "gone.py").unlink()
    (repo / "pkg" / "staged.py").write_text("staged\n")
    git(repo, "add", "pkg/staged.py")
    (repo / ".env").write_text("API_TOKEN=secret\n")
    (repo / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (repo / "pkg" / "scratch.py").write_text("untracked\n")
    (repo / "ignored.txt").write_text("ignored\n")


def files(root: Path, *skip: str) -> dict[str, bytes]:
    """Every file under ``root`` (relative path → bytes), leaving out .git and ``skip`` folders."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and not str(p.relative_to(root)).startswith((".git/", *skip))}


def snapshot(repo: Path, dest: Path) -> Path:
    with code_snapshot(dest, root=repo) as snap:
        return snap


def test_snapshot_copies_tracked_files_with_their_edits_and_nothing_untracked(
        repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    edit(repo)
    monkeypatch.chdir(tmp_path)
    with code_snapshot(tmp_path / "snap", root=repo) as snap:
        assert Path.cwd() == snap
    assert Path.cwd() == tmp_path
    copied = files(snap, f"{SNAPSHOT_RECORD_DIR}/")
    assert copied == {".gitignore": b"ignored.txt\n", "pkg/a.py": b"edited\n", "pkg/blob.bin": BLOB[::-1],
                      "pkg/staged.py": b"staged\n"}  # no .env, id_rsa, untracked or ignored file, no tests/


def test_snapshot_records_the_commit_and_a_diff_that_rebuilds_the_code(repo: Path, tmp_path: Path) -> None:
    edit(repo)
    snap = snapshot(repo, tmp_path / "snap")
    source = json.loads((snap / SNAPSHOT_RECORD_DIR / SOURCE_FILE).read_text())
    assert source["commit"] == git(repo, "rev-parse", "HEAD").strip()
    assert source["dirty"] is True and source["checkout"] == str(repo)
    assert source["files"] == 4 and source["code_version"] == code_version(snap)
    # a fresh clone at the recorded commit plus the recorded diff is the snapshot's code
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    git(clone, "checkout", "-q", source["commit"])
    git(clone, "apply", str(snap / SNAPSHOT_RECORD_DIR / DIFF_FILE))
    assert files(clone, "tests/") == files(snap, f"{SNAPSHOT_RECORD_DIR}/")


def test_snapshot_of_a_clean_checkout_records_no_edits(repo: Path, tmp_path: Path) -> None:
    snap = snapshot(repo, tmp_path / "snap")
    source = json.loads((snap / SNAPSHOT_RECORD_DIR / SOURCE_FILE).read_text())
    assert source["dirty"] is False and source["edits"] == ""
    assert (snap / SNAPSHOT_RECORD_DIR / DIFF_FILE).read_bytes() == b""
    assert code_version(snap) == "v1" and not (snap / ".git").exists()


def test_code_version_names_the_same_code_alike_in_checkout_and_snapshot(repo: Path, tmp_path: Path) -> None:
    def described() -> str:  # git's own name for the checkout's state, the oracle
        return git(repo, "describe", "--always", "--tags", "--dirty").strip()

    assert code_version(repo) == described() == code_version(snapshot(repo, tmp_path / "clean")) == "v1"
    (repo / "pkg" / "a.py").write_text("one edit\n")
    first = code_version(repo)
    assert first.startswith(f"{described()}+") and described() == "v1-dirty"
    assert code_version(snapshot(repo, tmp_path / "first")) == first
    (repo / "pkg" / "a.py").write_text("another edit\n")
    second = code_version(repo)
    assert second.startswith("v1-dirty+") and second != first
    assert code_version(snapshot(repo, tmp_path / "second")) == second
    (repo / "pkg" / "a.py").write_text("one edit\n")
    (repo / ".env").write_text("API_TOKEN=secret\n")  # untracked: not code
    assert code_version(repo) == first
    git(repo, "add", "pkg/a.py")  # staging does not change the code
    assert code_version(repo) == first
    (repo / "pkg" / "a.py").write_text("committed\n")
    assert code_version(repo) == "v1"


def test_code_version_outside_the_top_of_a_checkout_is_the_package_version(repo: Path) -> None:
    # an installed suite that happens to lie inside someone's repository is not that repository
    assert code_version(repo / "pkg") == f"protobench {metadata.version('protobench')}"


def test_a_checkout_without_a_commit_leaves_no_snapshot(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("x\n")
    git(repo, "init", "-q")
    with pytest.raises(ProtobenchError, match="HEAD"):
        snapshot(repo, tmp_path / "snap")
    assert not (tmp_path / "snap").exists()


def test_a_failed_copy_leaves_no_snapshot(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = shutil.copy2

    def copy_then_fill_the_disk(src: Path, dst: Path, **kw: bool) -> object:
        if Path(dst).name == "blob.bin":
            raise OSError(28, "No space left on device")
        return copy(src, dst, **kw)

    monkeypatch.setattr(shutil, "copy2", copy_then_fill_the_disk)
    with pytest.raises(ProtobenchError, match="No space left on device"):
        snapshot(repo, tmp_path / "snap")
    assert not (tmp_path / "snap").exists()


def test_an_unreadable_snapshot_record_is_an_error_naming_it(repo: Path, tmp_path: Path) -> None:
    snap = snapshot(repo, tmp_path / "snap")
    (snap / SNAPSHOT_RECORD_DIR / SOURCE_FILE).write_text('{"commit": 1}\n')
    with pytest.raises(ProtobenchError, match=f"{SNAPSHOT_RECORD_DIR}/{SOURCE_FILE} is not a code snapshot record"):
        code_version(snap)
