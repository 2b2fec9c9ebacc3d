"""Cache arrays as ``.npy`` files written row-block by row-block with a checksum per block.

A file is written with ordinary writes (header, then each batch of rows): a full disk is an
``OSError`` (ENOSPC) the caller can report, not a SIGBUS in a writable memmap. While rows are
written, a SHA-256 digest (hardware-accelerated on current x86 and ARM CPUs, twice as fast as
BLAKE2b there; truncated to 128 bits) is taken of every block of ``rows_per_block`` rows (about
``BLOCK_BYTES``), so opening an entry can check a random sample of blocks cheaply and a full
verify checks all of them; the array's checksum is the digest of its block digests. Writing and
hashing run on a background thread (both release the GIL), overlapping the trunk pass.
"""
from __future__ import annotations

import hashlib
import io
import math
import os
import random
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

#: rows per checksum block are chosen so a block holds about this many bytes
BLOCK_BYTES = 4 << 20
DIGEST_HEX = 32  # 128 bits of SHA-256
#: batches queued for the writer thread before ``write`` waits (bounds the memory held)
MAX_PENDING = 4


class CorruptArray(Exception):
    """An array file disagrees with its manifest (size, header or a block checksum)."""


def digest(data: Any) -> str:
    """SHA-256 of a bytes-like object, hex, truncated to 128 bits."""
    return hashlib.sha256(data).hexdigest()[:DIGEST_HEX]


def array_checksum(blocks: list[str]) -> str:
    """The checksum of a whole array: the digest of its block digests, in order."""
    return digest("".join(blocks).encode())


@dataclass(frozen=True)
class ArraySpec:
    """Shape and dtype of one cache array, and its checksum block size in rows."""

    shape: tuple[int, ...]
    dtype: np.dtype
    rows_per_block: int = 0  # 0: about BLOCK_BYTES per block

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(n) for n in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        if self.rows_per_block <= 0:
            object.__setattr__(self, "rows_per_block", max(1, BLOCK_BYTES // max(1, self.row_bytes)))

    @classmethod
    def from_manifest(cls, meta: dict[str, Any]) -> ArraySpec:
        return cls(tuple(meta["shape"]), np.dtype(meta["dtype"]), int(meta["rows_per_block"]))

    @property
    def row_bytes(self) -> int:
        return math.prod(self.shape[1:]) * self.dtype.itemsize

    @property
    def data_bytes(self) -> int:
        return self.shape[0] * self.row_bytes

    @property
    def num_blocks(self) -> int:
        return math.ceil(self.shape[0] / self.rows_per_block)

    def header(self) -> bytes:
        buffer = io.BytesIO()
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": self.shape}
        np.lib.format.write_array_header_1_0(buffer, header)
        return buffer.getvalue()

    @property
    def file_bytes(self) -> int:
        return len(self.header()) + self.data_bytes

    def block_rows(self, block: int) -> slice:
        return slice(block * self.rows_per_block, min((block + 1) * self.rows_per_block, self.shape[0]))


def _bytes_of(rows: np.ndarray) -> memoryview:
    return memoryview(np.ascontiguousarray(rows).reshape(-1).view(np.uint8))


class ArrayWriter:
    """Appends rows to ``path`` in order, hashing each block of rows as it is written. The rows
    passed to ``write`` must not be modified afterwards (a background thread writes them)."""

    def __init__(self, path: Path, spec: ArraySpec) -> None:
        self.path, self.spec = path, spec
        self._file: BinaryIO = open(path, "wb")  # noqa: SIM115 (closed by close() or abort())
        self._file.write(spec.header())
        self._rows = 0  # rows accepted by write()
        self._written = 0  # rows written by the thread
        self._block = hashlib.sha256()
        self._blocks: list[str] = []
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"write-{path.name}")
        self._pending: deque[Future[None]] = deque()

    def write(self, rows: np.ndarray) -> None:
        """Append ``rows`` (len × shape[1:], the array's dtype) after the rows written so far;
        raises the error of an earlier batch that failed (e.g. ENOSPC)."""
        if rows.dtype != self.spec.dtype or rows.shape[1:] != self.spec.shape[1:]:
            raise ValueError(f"{self.path.name}: rows {rows.dtype}{rows.shape} do not fit {self.spec}")
        if self._rows + len(rows) > self.spec.shape[0]:
            raise ValueError(f"{self.path.name}: more than {self.spec.shape[0]} rows written")
        self._rows += len(rows)
        self._pending.append(self._thread.submit(self._append, rows))
        while len(self._pending) > MAX_PENDING:
            self._pending.popleft().result()

    def _append(self, rows: np.ndarray) -> None:
        start = 0
        while start < len(rows):
            in_block = self._written % self.spec.rows_per_block
            take = min(len(rows) - start, self.spec.rows_per_block - in_block)
            data = _bytes_of(rows[start:start + take])
            self._file.write(data)
            self._block.update(data)
            self._written += take
            start += take
            if self._written % self.spec.rows_per_block == 0 or self._written == self.spec.shape[0]:
                self._blocks.append(self._block.hexdigest()[:DIGEST_HEX])
                self._block = hashlib.sha256()

    def close(self) -> dict[str, Any]:
        """Flush and fsync the complete file; its manifest record (shape, dtype, block checksums)."""
        while self._pending:
            self._pending.popleft().result()
        self._thread.shutdown()
        if self._written != self.spec.shape[0]:
            raise ValueError(f"{self.path.name}: {self._written} of {self.spec.shape[0]} rows written")
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        return {
            "shape": list(self.spec.shape),
            "dtype": str(self.spec.dtype),
            "bytes": self.spec.file_bytes,
            "rows_per_block": self.spec.rows_per_block,
            "blocks": self._blocks,
            "checksum": array_checksum(self._blocks),
        }

    def abort(self) -> None:
        """Stop writing (after a failure elsewhere) and close the file."""
        self._thread.shutdown(cancel_futures=True)
        self._file.close()


def open_array(name: str, meta: dict[str, Any], dir_fd: int) -> np.ndarray:
    """The array ``name`` of the entry open as ``dir_fd``, memory-mapped read-only, after checking
    its header and file size against its manifest record ``meta``."""
    spec = ArraySpec.from_manifest(meta)
    if meta.get("checksum") != array_checksum(list(meta.get("blocks", []))) or len(meta["blocks"]) != spec.num_blocks:
        raise CorruptArray(f"{name}: its manifest's block checksums do not add up")
    try:
        file = open(f"{name}.npy", "rb", opener=lambda path, flags: os.open(path, flags, dir_fd=dir_fd))  # noqa: SIM115
    except FileNotFoundError as error:
        raise CorruptArray(f"{name}.npy is missing") from error
    with file:
        try:
            version = np.lib.format.read_magic(file)
            reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran_order, dtype = reader(file)
        except ValueError as error:
            raise CorruptArray(f"{name}.npy has no valid header ({error})") from error
        if tuple(shape) != spec.shape or dtype != spec.dtype or fortran_order:
            raise CorruptArray(f"{name}.npy holds {dtype}{tuple(shape)}, the manifest says {spec.dtype}{spec.shape}")
        offset, size = file.tell(), os.fstat(file.fileno()).st_size
        if size != offset + spec.data_bytes:
            raise CorruptArray(f"{name}.npy has {size} bytes, {offset + spec.data_bytes} expected (truncated?)")
        if spec.data_bytes == 0:
            return np.zeros(spec.shape, spec.dtype)
        return np.memmap(file, dtype=spec.dtype, mode="r", offset=offset, shape=spec.shape)


#: draws of the blocks to sample, independent of the global ``random`` that training seeds
_SAMPLER = random.SystemRandom()


def sample_blocks(num_blocks: int, count: int) -> list[int]:
    """The first and last block and ``count`` others drawn at random (every open draws anew, so
    repeated opens by many jobs cover the whole array)."""
    chosen = {0, num_blocks - 1} | set(_SAMPLER.sample(range(num_blocks), min(count, num_blocks)))
    return sorted(b for b in chosen if b >= 0)


def bad_blocks(array: np.ndarray, meta: dict[str, Any], blocks: Iterable[int]) -> list[int]:
    """The blocks among ``blocks`` whose bytes do not match their checksum in ``meta``."""
    spec = ArraySpec.from_manifest(meta)
    return [b for b in blocks if digest(_bytes_of(array[spec.block_rows(b)])) != meta["blocks"][b]]
