"""``doctor`` checks images with ``run``'s bounds (reliability round 6): every image's header (a
PNG decompression bomb, a truncated JPEG), a part location outside its image, and with ``--deep``
every image decoded (a PNG whose pixel data is damaged behind a valid header)."""
from __future__ import annotations

import struct
import zlib
from pathlib import Path

import huggingface_hub.constants
import pytest

from benchmark.cli import main
from tiny_grid import write_tiny_grid


@pytest.fixture(autouse=True)
def empty_hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-hub"))


def _grid(tmp_path: Path) -> tuple[Path, Path]:
    birds = tmp_path / "birds"
    assert main(["make-data", "synthbirds", "--out", str(birds), "--classes", "2", "--images-per-class", "4"]) == 0
    grid = write_tiny_grid(tmp_path / "g.toml", "g", birds, dataset_args={"classes": 2, "images_per_class": 4})
    return grid, birds


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png(width: int, height: int, idat: bytes) -> bytes:
    """A PNG (ISO/IEC 15948: signature, IHDR, IDAT, IEND) of 8-bit greyscale."""
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + _chunk(b"IDAT", idat) + _chunk(b"IEND", b""))


def _doctor(grid: Path, tmp_path: Path, capsys, *extra: str) -> tuple[int, str]:
    code = main(["doctor", str(grid), "--cache-dir", str(tmp_path / "cache"), *extra])
    return code, capsys.readouterr().out


def test_doctor_reads_every_image_header_and_deep_decodes_every_image(tmp_path: Path, capsys) -> None:
    grid, birds = _grid(tmp_path)
    images = sorted((birds / "images").rglob("*.jpg"))
    code, out = _doctor(grid, tmp_path, capsys)
    assert code == 0 and "images listed, every image's header read" in out
    original = images[0].read_bytes()
    images[0].write_bytes(original[: len(original) // 2])  # truncated JPEG: no end marker
    code, out = _doctor(grid, tmp_path, capsys)
    assert code == 1 and f"{images[0]} cannot be decoded" in out
    images[0].write_bytes(_png(100_000, 100_000, zlib.compress(b"\0" * 64)))  # a bomb behind a .jpg name
    code, out = _doctor(grid, tmp_path, capsys)
    assert code == 1 and f"{images[0]} cannot be decoded" in out and "decompression bomb" in out.lower()
    images[0].write_bytes(original)
    width, height = 64, 64
    from PIL import Image

    with Image.open(images[1]) as image:
        width, height = image.size
    images[1].write_bytes(_png(width, height, b"not zlib data at all"))  # header fine, pixels damaged
    code, out = _doctor(grid, tmp_path, capsys)
    assert code == 0  # the header is all doctor reads by default
    code, out = _doctor(grid, tmp_path, capsys, "--deep")
    assert code == 1 and f"{images[1]} cannot be decoded" in out


def test_doctor_refuses_a_part_location_outside_its_image(tmp_path: Path, capsys) -> None:
    grid, birds = _grid(tmp_path)
    locs = birds / "parts" / "part_locs.txt"
    lines = locs.read_text().splitlines()
    image_id, part, _x, y, _visible = lines[0].split()
    lines[0] = f"{image_id} {part} 5000.0 {y} 1"
    locs.write_text("\n".join(lines) + "\n")
    code, out = _doctor(grid, tmp_path, capsys)
    assert code == 1 and "lies at (5000," in out and "outside the" in out and "part_locs.txt" in out
