"""The token cache: the frozen trunk runs once per key, every run of a grid reads its tokens.

A key is (backbone key, weights checksum, dataset fingerprint, split, view, image size, early
block, storage dtype, device type and precision of the trunk pass, format version); its digest names the entry directory (see
``benchmark/cache/store.py`` for publication, checksums and locking, ``stage.py`` for copies to
node-local scratch). An entry stores each image once, only what no method can recompute
(arrays in dataset order): ``block_input`` N×(P+HW)×D (the last block's pre-norm output,
prefix tokens first) in the storage dtype (float16 by default), ``attention`` N×HW (CLS→patch;
absent for a trunk without a CLS token, SigLIP) float32, ``labels`` N int64, and ``early_tokens`` N×HW×D in the storage dtype only when the key
names an early block (the runner asks for it on the training split alone). The attention stays
float32 (0.3 % of an entry): gating min-max normalises it, which magnifies float16 rounding when
it is nearly flat (a random trunk's spans 1e-4 around 1/N: float16 changed 79 of 12,288 gate
entries of the demo data, float32 none). The final-norm
``tokens`` are not stored: ``CachedTokens`` applies the trunk's frozen final norm to
``block_input`` on the device, exactly as the trunk pass computes them
(``FrozenTrunk.forward``: ``tokens = norm(x)[:, P:]`` with ``x`` the block input), so they differ
from the live ones only by the storage rounding of ``block_input`` propagated through the
norm (bound: docs/guides/token-cache.md). ``cache_dir = None`` gives the same interface computed live.
"""
from __future__ import annotations

import copy
import hashlib
import json
import signal
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import timm
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from benchmark.backbones import FrozenTrunk
from benchmark.cache.arrays import ArraySpec, ArrayWriter
from benchmark.cache.memory import read_into_memory
from benchmark.cache.noise import stability_noise
from benchmark.cache.stage import stage_entry
from benchmark.cache.entry import Entry, rm_command
from benchmark.cache.store import Fill, list_manifests, open_or_build
from benchmark.config import STORAGE_DTYPES
from benchmark.errors import ProtobenchError
from benchmark.progress import NO_PROGRESS, Progress
from methods.base import TOKEN_FIELDS, TokenBatch
from methods.common.precision import autocast
from methods.common.transfer import to_device

__all__ = [
    "CacheKey",
    "CachedTokens",
    "FORMAT_VERSION",
    "LiveTokens",
    "TokenSource",
    "View",
    "cache_entries",
    "entry_layout",
    "expected_cache_key",
    "token_source",
]

#: bump when the arrays or their meaning change: every older entry then misses and is rebuilt
FORMAT_VERSION = 3  # 2: per-block checksums in the manifest; 3: no tokens array (rebuilt from block_input)


class TokenDataset(Protocol):
    """What the cache needs of a ``benchmark.data`` split: ``ds[i] -> (image 3×S×S, label, index)``.

    An optional ``split`` attribute (e.g. ``"train"``) enters the key next to the fingerprint."""

    labels: np.ndarray

    def __getitem__(self, index: int) -> tuple[Tensor, int, int]: ...

    def __len__(self) -> int: ...

    def fingerprint(self) -> str: ...


@dataclass(frozen=True)
class View:
    """Which images the trunk sees: ``clean``, or ``noise`` (clean + stability noise of ``seed``)."""

    kind: str = "clean"  # "clean" | "noise"
    seed: int = 0  # noise only

    def __post_init__(self) -> None:
        if self.kind not in ("clean", "noise"):
            raise ProtobenchError(f"Unknown view kind {self.kind!r}; use 'clean' or 'noise'.")

    def key(self) -> dict[str, Any]:
        """The view's part of a cache key (a clean view ignores the seed)."""
        return {"kind": "clean"} if self.kind == "clean" else {"kind": "noise", "seed": self.seed}

    def apply(self, image: Tensor, index: int) -> Tensor:
        """The image as this view shows it; noise is added in normalised space and not clamped."""
        if self.kind == "clean":
            return image
        return image + stability_noise(image.shape, seed=self.seed, index=index).to(image.dtype)


class _ViewedDataset(Dataset):
    """``dataset`` seen through ``view``: item i → (image, label, i)."""

    def __init__(self, dataset: TokenDataset, view: View) -> None:
        self.dataset = dataset
        self.view = view

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[Tensor, int, int]:
        image, label, _ = self.dataset[index]
        return self.view.apply(image, index), label, index


@dataclass(frozen=True)
class CacheKey:
    """Everything the cached arrays depend on; its digest names the entry directory."""

    backbone_key: str
    weights_checksum: str
    dataset_fingerprint: str
    split: str
    view: View
    image_size: int
    early_block: int | None
    dtype: str
    # a CPU-built and a GPU-built entry differ (kernels), and so do fp32/tf32/bf16 trunk passes
    device_type: str = "cpu"
    precision: str = "fp32"
    format_version: int = FORMAT_VERSION

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "view": self.view.key()}

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode()).hexdigest()[:16]

    @property
    def dirname(self) -> str:
        split = f"-{self.split}" if self.split else ""
        return f"{self.backbone_key}{split}-{self.view.kind}-{self.digest}"


def expected_cache_key(
    *,
    backbone_key: str,
    weights_checksum: str,
    dataset_fingerprint: str,
    split: str = "",
    view: View = View(),
    image_size: int = 224,
    early_block: int | None = None,
    dtype: str = "float16",
    device_type: str = "cpu",
    precision: str = "fp32",
) -> CacheKey:
    """The key (and so the directory ``cache_dir / key.dirname``) a run will read, without building it."""
    if dtype not in STORAGE_DTYPES:
        raise ProtobenchError(f"Unsupported cache dtype {dtype!r}; use one of {', '.join(STORAGE_DTYPES)}.")
    return CacheKey(backbone_key, weights_checksum, dataset_fingerprint, split, view, image_size, early_block, dtype,
                    device_type, precision)


def cache_entries(cache_dir: Path | str) -> list[dict[str, Any]]:
    """Manifests of every complete entry in ``cache_dir`` (with ``"path"``), for status and plan commands."""
    return list_manifests(Path(cache_dir))


class TokenSource(ABC):
    """Token batches of one split, cached or live: the same interface either way."""

    labels: Tensor  # (N,) int64
    grid: tuple[int, int]

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def batch(self, indices: Tensor, device: torch.device | str, *,
              reads: frozenset[str] = TOKEN_FIELDS) -> TokenBatch:
        """The images at positions ``indices`` as a float32 TokenBatch on ``device``, with the
        arrays outside ``reads`` (``PrototypeMethod.reads``) left out (None)."""


def _labels_tensor(dataset: TokenDataset) -> Tensor:
    return torch.as_tensor(np.asarray(dataset.labels), dtype=torch.int64)


class CachedTokens(TokenSource):
    """A published cache entry, read memory-mapped (or, ``in_memory``, the arrays that give the
    fields in ``reads`` read into RAM once); batches are gathered rows, float32 on the device, with
    the final-norm tokens computed there from the block input by ``norm`` (the trunk's frozen final
    norm). Towards CUDA the rows are gathered into pinned memory and copied ``non_blocking``."""

    def __init__(self, entry: Entry, norm: nn.Module, num_prefix_tokens: int, *, in_memory: str | bool = False,
                 reads: frozenset[str] = TOKEN_FIELDS) -> None:
        self._open = entry  # holds the reader's lock on the entry while this source lives
        self.entry = entry.path
        self.manifest = entry.manifest
        self._arrays = dict(entry.arrays)
        self._norm = copy.deepcopy(norm).requires_grad_(False).eval()
        self.num_prefix_tokens = num_prefix_tokens
        self.labels = torch.from_numpy(np.array(self._arrays["labels"]))
        self.grid = tuple(entry.manifest["grid"])
        stored = {"block_input" if name == "tokens" else name for name in reads}  # tokens: norm(block_input)
        read = [name for name in sorted(stored) if name in self._arrays]
        self.in_memory = read_into_memory(in_memory, sum(self._arrays[name].nbytes for name in read))
        if self.in_memory:
            for name in read:
                self._arrays[name] = np.array(self._arrays[name])  # one sequential read of the file

    def __len__(self) -> int:
        return len(self.labels)

    def _take(self, name: str, rows: np.ndarray, device: torch.device) -> Tensor:
        # gather in the storage dtype, move (half the bytes for float16), widen on the device
        return to_device(torch.from_numpy(np.ascontiguousarray(self._arrays[name][rows])), device).float()

    def final_tokens(self, block_input: Tensor) -> Tensor:
        """B×N×D final-norm patch tokens of B×(P+N)×D block inputs (``FrozenTrunk.forward``)."""
        norm = self._norm.to(block_input.device)
        with torch.no_grad():
            return norm(block_input)[:, self.num_prefix_tokens :]

    def batch(self, indices: Tensor, device: torch.device | str, *,
              reads: frozenset[str] = TOKEN_FIELDS) -> TokenBatch:
        rows, device = indices.detach().cpu().numpy(), torch.device(device)

        def take(name: str) -> Tensor | None:
            return self._take(name, rows, device) if name in self._arrays else None

        block_input = take("block_input") if reads & {"tokens", "block_input"} else None
        return TokenBatch(
            tokens=self.final_tokens(block_input) if "tokens" in reads else None,
            block_input=block_input if "block_input" in reads else None,
            attention=take("attention") if "attention" in reads else None,
            labels=to_device(self.labels[indices.cpu()], device),
            indices=to_device(indices, device),
            grid=self.grid,
            early_tokens=take("early_tokens") if "early_tokens" in reads else None,
        )


class LiveTokens(TokenSource):
    """``cache = false``: runs the trunk on the requested images at every call."""

    def __init__(self, trunk: FrozenTrunk, dataset: TokenDataset, view: View, early_block: int | None,
                 precision: str = "fp32") -> None:
        self.trunk = trunk
        self.early_block = early_block
        self.precision = precision
        self._images = _ViewedDataset(dataset, view)
        self.labels = _labels_tensor(dataset)
        self.grid = trunk.grid

    def __len__(self) -> int:
        return len(self.labels)

    def batch(self, indices: Tensor, device: torch.device | str, *,
              reads: frozenset[str] = TOKEN_FIELDS) -> TokenBatch:
        trunk_device = next(self.trunk.parameters()).device
        images = to_device(torch.stack([self._images[int(i)][0] for i in indices]), trunk_device)
        with autocast(self.precision, trunk_device):
            out = self.trunk(images, early_block=self.early_block)
        return TokenBatch(
            tokens=out.tokens.to(device).float(),
            block_input=out.block_input.to(device).float(),
            attention=None if out.attention is None else out.attention.to(device).float(),
            labels=to_device(self.labels[indices.cpu()], device),
            indices=to_device(indices, device),
            grid=self.grid,
            early_tokens=None if out.early_tokens is None else out.early_tokens.to(device).float(),
        ).only(reads)


def _to_storage(values: Tensor, dtype: np.dtype, name: str, key: CacheKey) -> np.ndarray:
    array = values.float().cpu().numpy().astype(dtype, copy=False)  # bf16 (autocast) has no NumPy dtype
    if not np.isfinite(array).all():
        raise ProtobenchError(
            f"The {name} of {key.backbone_key} are not finite in {key.dtype} (overflow or NaN input); "
            f"build the cache with dtype = 'float32'."
        )
    return array


def entry_layout(count: int, *, patches: int, prefix: int, width: int, dtype: str,
                 early_tokens: bool, attention: bool = True) -> dict[str, ArraySpec]:
    """The arrays of an entry of ``count`` images from a trunk with ``patches`` patch tokens,
    ``prefix`` prefix tokens and ``width`` channels (also what ``protobench plan`` and ``doctor``
    size); ``attention``: whether the trunk has a CLS token. No ``tokens`` array:
    ``CachedTokens`` rebuilds them from ``block_input``."""
    storage = np.dtype(dtype)
    layout = {
        "block_input": ArraySpec((count, prefix + patches, width), storage),
        "labels": ArraySpec((count,), np.dtype("int64")),
    }
    if attention:
        layout["attention"] = ArraySpec((count, patches), np.dtype("float32"))
    if early_tokens:
        layout["early_tokens"] = ArraySpec((count, patches, width), storage)
    return layout


def _layout(trunk: FrozenTrunk, count: int, key: CacheKey) -> dict[str, ArraySpec]:
    """The arrays of an entry, known before the trunk pass (so free space is checked first)."""
    return entry_layout(count, patches=trunk.grid[0] * trunk.grid[1], prefix=trunk.num_prefix_tokens,
                        width=trunk.embed_dim, dtype=key.dtype, early_tokens=key.early_block is not None,
                        attention=trunk.has_cls_token)


def _trunk_pass(
    trunk: FrozenTrunk,
    dataset: TokenDataset,
    key: CacheKey,
    *,
    device: torch.device,
    batch_size: int,
    num_workers: int,
    progress: Progress,
) -> Fill:
    """The ``fill`` callback of ``open_or_build``: one trunk pass over the split, rows in dataset order."""

    def fill(writers: dict[str, ArrayWriter]) -> dict[str, Any]:
        started = time.perf_counter()
        storage = np.dtype(key.dtype)
        loader = DataLoader(
            _ViewedDataset(dataset, key.view),
            batch_size=batch_size,
            shuffle=False,  # rows are appended in dataset order
            num_workers=num_workers,
            pin_memory=device.type == "cuda",
            worker_init_fn=_leave_termination_to_the_main_process if num_workers else None,
        )
        task = progress.task(f"trunk pass {key.dirname}", len(loader))
        for images, labels, _ in loader:
            with torch.inference_mode(), autocast(key.precision, device):
                out = trunk(images.to(device, non_blocking=True), early_block=key.early_block)
            writers["block_input"].write(_to_storage(out.block_input, storage, "block inputs", key))
            if out.attention is not None:
                writers["attention"].write(out.attention.float().cpu().numpy())
            writers["labels"].write(labels.numpy().astype(np.int64, copy=False))
            if out.early_tokens is not None:
                writers["early_tokens"].write(_to_storage(out.early_tokens, storage, "early tokens", key))
            task.advance()
        task.done()
        return {
            "num_images": len(dataset),
            "grid": list(trunk.grid),
            "num_prefix_tokens": trunk.num_prefix_tokens,
            "embed_dim": trunk.embed_dim,
            "weights_source": trunk.weights_source,
            "device": str(device),
            "precision": key.precision,
            "build_seconds": round(time.perf_counter() - started, 3),
            "versions": {"torch": torch.__version__, "timm": timm.__version__, "numpy": np.__version__},
        }

    return fill


def _leave_termination_to_the_main_process(_worker_id: int) -> None:
    """A DataLoader worker ignores SIGTERM. SLURM sends it to every process of a job (scancel,
    preemption); a worker that died of it first would make the main process raise "DataLoader
    worker exited unexpectedly" and record the run as failed by that error, hiding the
    cancellation. The main process (submitit's handlers) decides; the workers end with it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def token_source(
    trunk: FrozenTrunk,
    dataset: TokenDataset,
    *,
    view: View = View(),
    cache_dir: Path | str | None,
    backbone_key: str,
    early_block: int | None = None,
    dtype: str = "float16",
    device: torch.device | str = "cpu",
    batch_size: int = 64,
    num_workers: int = 0,
    progress: Progress = NO_PROGRESS,
    stage_dir: Path | None = None,
    precision: str = "fp32",
    in_memory: str | bool = False,
    reads: frozenset[str] = TOKEN_FIELDS,
) -> TokenSource:
    """Tokens of ``dataset`` through ``trunk``: from the cache entry of their key (built on first
    use, on ``device``), or live when ``cache_dir`` is None (``cache = false``). A building pass
    shows a bar in ``progress`` (the caller's running display; one live display at a time).
    ``stage_dir`` (``cache_stage = "local"``): read a verified copy of the entry made there.
    ``precision``: of the trunk pass (methods/common/precision.py), in the key with the device
    type; ``in_memory``: read the arrays in ``reads`` into RAM once (benchmark/cache/memory.py)."""
    if backbone_key != trunk.spec.key:
        raise ProtobenchError(
            f"backbone_key {backbone_key!r} does not name the trunk passed ({trunk.spec.key!r}); pass the trunk's key."
        )
    trunk.check_early_block(early_block)
    device = torch.device(device)
    trunk.to(device)
    if cache_dir is None:
        return LiveTokens(trunk, dataset, view, early_block, precision)
    key = expected_cache_key(
        backbone_key=backbone_key,
        weights_checksum=trunk.weights_checksum,
        dataset_fingerprint=dataset.fingerprint(),
        split=str(getattr(dataset, "split", "")),
        view=view,
        image_size=trunk.image_size,
        early_block=early_block,
        dtype=dtype,
        device_type=device.type,
        precision=precision,
    )
    fill = _trunk_pass(
        trunk, dataset, key, device=device, batch_size=batch_size, num_workers=num_workers, progress=progress
    )
    entry, _ = open_or_build(Path(cache_dir), key.dirname, key.as_dict(), _layout(trunk, len(dataset), key), fill)
    if stage_dir is not None:
        entry = stage_entry(entry, stage_dir)
    source = CachedTokens(entry, trunk.model.norm, trunk.num_prefix_tokens, in_memory=in_memory, reads=reads)
    if not torch.equal(source.labels, _labels_tensor(dataset)):
        raise ProtobenchError(
            f"The cache entry {entry.path} holds other labels than the dataset it was looked up for, so the dataset "
            f"fingerprint does not identify its images; make fingerprint() cover the split and remove the entry "
            f"(`{rm_command(entry.path)}`)."
        )
    return source
