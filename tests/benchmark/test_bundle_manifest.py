"""The bundle manifest (``SHA256SUMS``): hashes equal ``hashlib``'s and ``sha256sum``'s format,
verification names changed, missing and unlisted files, and a manifest line that points outside
the bundle is refused rather than followed."""
from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmark.bundle.manifest import MANIFEST_FILE, verify_bundle, write_manifest
from benchmark.errors import ProtobenchError


def bundle(root: Path) -> Path:
    (root / "g" / "r1").mkdir(parents=True)
    (root / "g" / "r1" / "result.json").write_text('{"a": 1}')
    (root / "README.md").write_text("card")
    write_manifest(root)
    return root


def test_manifest_lists_every_file_with_its_sha256(tmp_path: Path) -> None:
    root = bundle(tmp_path)
    lines = (root / MANIFEST_FILE).read_text().splitlines()
    result = hashlib.sha256(b'{"a": 1}').hexdigest()
    assert lines == [f"{hashlib.sha256(b'card').hexdigest()}  README.md", f"{result}  g/r1/result.json"]
    if shutil.which("sha256sum"):
        assert subprocess.run(["sha256sum", "--quiet", "-c", MANIFEST_FILE], cwd=root).returncode == 0


def test_verify_names_changed_missing_unlisted_and_sets_local_outputs_aside(tmp_path: Path) -> None:
    root = bundle(tmp_path)
    assert verify_bundle(root).ok
    (root / "README.md").write_text("cart")
    (root / "g" / "r1" / "result.json").unlink()
    (root / "g" / "r2").mkdir()
    (root / "g" / "r2" / "result.json").write_text("{}")
    (root / "g" / "r1" / "evaluations").mkdir()
    (root / "g" / "r1" / "evaluations" / "map_pool1.json").write_text("{}")
    found = verify_bundle(root)
    assert (found.changed, found.missing, found.unlisted) == (["README.md"], ["g/r1/result.json"], ["g/r2/result.json"])
    assert found.local == ["g/r1/evaluations/map_pool1.json"] and not found.ok


@pytest.mark.parametrize("name", ["../outside.txt", "/etc/passwd", ""])
def test_a_manifest_line_outside_the_bundle_is_refused(tmp_path: Path, name: str) -> None:
    root = bundle(tmp_path)
    with (root / MANIFEST_FILE).open("a") as manifest:
        manifest.write(f"{'0' * 64}  {name}\n")
    with pytest.raises(ProtobenchError, match="manifest was altered"):
        verify_bundle(root)
