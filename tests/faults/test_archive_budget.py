"""A bundle archive is unpacked within a budget, its manifest first (benchmark/bundle/archive.py):
a 2 MB archive that inflates to 2 GiB is refused before a byte is written (nothing is ever
inflated or written to build it here: its gzip members repeat one compressed block), an
unlisted member or a missing manifest stops everything before writing, the budget is tied to
the archive's size and raised by an option, and a full temporary folder is named with the
space needed."""
from __future__ import annotations

import errno
import gzip
import shutil
import tarfile
from pathlib import Path

import pytest

import benchmark.bundle.archive as archive_module
from benchmark.bundle.archive import UNPACK_FLOOR, unpack_archive, unpack_budget
from benchmark.bundle.make import make_bundle
from benchmark.cli import main
from benchmark.errors import ProtobenchError
from leaderboard_runs import lab_run

BLOCK = 16 << 20  # one gzip member of this many zero bytes is ~16 KB


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("budget")
    for seed in (0, 1):
        lab_run(root / "runs", "vmfproto", seed, 80)
    make_bundle([root / "runs"], root / "labA")
    return root / "labA"


def _member(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mode = size, 0o644
    return info.tobuf(format=tarfile.PAX_FORMAT)


def _padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % tarfile.BLOCKSIZE)


def bomb(path: Path, bundle: Path, pads: dict[str, int]) -> Path:
    """``path``: the bundle's files (members under ``labA/``, as `protobench bundle` writes them),
    then members ``pads`` (name → size) of zeros, gzip-compressed without ever holding the zeros:
    each pad's data is one compressed block of BLOCK zero bytes repeated (gzip members concatenate)."""
    head = b"".join(_member(f"{bundle.name}/{p.relative_to(bundle).as_posix()}", p.stat().st_size)
                    + _padded(p.read_bytes()) for p in sorted(bundle.rglob("*")) if p.is_file())
    zeros = gzip.compress(bytes(BLOCK), compresslevel=9)
    with path.open("wb") as out:
        out.write(gzip.compress(head))
        for name, size in pads.items():
            assert size % BLOCK == 0
            out.write(gzip.compress(_member(f"{bundle.name}/{name}", size)))
            for _ in range(size // BLOCK):
                out.write(zeros)
        out.write(gzip.compress(bytes(2 * tarfile.BLOCKSIZE)))  # the end-of-archive blocks
    return path


def _written(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0


def test_a_2_mb_archive_inflating_to_2_gib_is_refused_before_anything_is_written(bundle: Path, tmp_path: Path,
                                                                                  capsys) -> None:
    archive = bomb(tmp_path / "bomb.tar.gz", bundle, {"lab/pad.bin": 2 << 30})
    assert archive.stat().st_size < 3 << 20  # about 2 MB
    work = tmp_path / "work"
    budget = unpack_budget(archive.stat().st_size)
    assert budget == UNPACK_FLOOR  # 100 × 2 MB is under the floor
    with pytest.raises(ProtobenchError, match=r"member 'labA/lab/pad.bin' declares 2147483648 bytes.*exceeds its "
                                              rf"budget of {budget} bytes .*--unpack-budget-mib N raises it"):
        unpack_archive(archive, work / "source-0")
    assert _written(work) == 0  # the budget is never reached: nothing at all was written
    out = tmp_path / "L"
    assert main(["leaderboard", str(archive), "--out", str(out)]) == 2
    assert "nothing was unpacked" in capsys.readouterr().err and not out.exists()


def test_a_small_budget_bounds_what_is_written_and_an_option_raises_it(bundle: Path, tmp_path: Path, capsys) -> None:
    pads = {f"lab/pad{k}.bin": BLOCK for k in range(3)}  # 48 MiB of listed-size members: over 32 MiB
    archive = bomb(tmp_path / "many.tar.gz", bundle, pads)
    budget = 32 << 20
    with pytest.raises(ProtobenchError, match=r"member 'labA/lab/pad1.bin' declares 16777216 bytes, which with the "
                                              r"\d+ bytes before it exceeds its budget of 33554432 bytes \(set with"):
        unpack_archive(archive, tmp_path / "w1" / "s", budget=budget)
    assert _written(tmp_path / "w1") == 0 <= budget
    assert main(["leaderboard", str(archive), "--out", str(tmp_path / "L"), "--unpack-budget-mib", "32"]) == 2
    assert "exceeds its budget of 33554432 bytes" in capsys.readouterr().err
    assert main(["leaderboard", str(archive), "--out", str(tmp_path / "L"), "--unpack-budget-mib", "0"]) == 2
    assert "--unpack-budget-mib 0 must be ≥ 1" in capsys.readouterr().err
    # under a budget that fits, the pads are still unlisted: refused before writing, whatever the budget
    with pytest.raises(ProtobenchError, match=r"member 'labA/lab/pad0.bin' is not listed in its SHA256SUMS"):
        unpack_archive(archive, tmp_path / "w2" / "s", budget=64 << 20)
    assert _written(tmp_path / "w2") == 0


def test_an_unlisted_member_or_no_manifest_stops_everything_before_writing(bundle: Path, tmp_path: Path,
                                                                          capsys) -> None:
    archive = bomb(tmp_path / "extra.tar.gz", bundle, {"lab/extra.bin": BLOCK})
    for allow in ([], ["--allow-unverified"]):  # unlisted is never written, verified or not
        assert main(["leaderboard", str(archive), "--out", str(tmp_path / "L"), *allow]) == 2
        assert "'labA/lab/extra.bin' is not listed in its SHA256SUMS" in capsys.readouterr().err
    stripped = tmp_path / "nomanifest"
    shutil.copytree(bundle, stripped / "labA")
    (stripped / "labA" / "SHA256SUMS").unlink()
    with tarfile.open(tmp_path / "nomanifest.tar.gz", "w:gz") as tar:
        tar.add(stripped / "labA", arcname="labA")
    with pytest.raises(ProtobenchError, match="has no SHA256SUMS in its top folder"):
        unpack_archive(tmp_path / "nomanifest.tar.gz", tmp_path / "w" / "s")
    assert _written(tmp_path / "w") == 0
    good = tmp_path / "good.tar.gz"  # the bundle's own archive unpacks whole within the default budget
    with tarfile.open(good, "w:gz") as tar:
        tar.add(bundle, arcname="labA")
    folder = unpack_archive(good, tmp_path / "ok" / "s")
    assert sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file()) == \
        sorted(p.relative_to(bundle) for p in bundle.rglob("*") if p.is_file())


def test_a_full_temporary_folder_is_named_with_the_space_needed(bundle: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "labA.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(bundle, arcname="labA")
    needed = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file())
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(archive_module.shutil, "disk_usage", lambda _: usage._replace(free=needed - 1))
    with pytest.raises(ProtobenchError, match=rf"the temporary folder {tmp_path / 'w'} has no room to unpack the "
                                              rf"archive: it needs {needed} bytes .*TMPDIR"):
        unpack_archive(archive, tmp_path / "w" / "s")
    monkeypatch.undo()

    def full(*_args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(archive_module, "_write", full)
    with pytest.raises(ProtobenchError, match=rf"the temporary folder {tmp_path / 'x'} has no room .* needs {needed}"):
        unpack_archive(archive, tmp_path / "x" / "s")
