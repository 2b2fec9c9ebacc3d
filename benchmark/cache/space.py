"""Free space for a grid's token cache, checked before any compute (``protobench plan`` warns,
``protobench run`` refuses). Entries already in the cache directory are not counted: an entry
is taken as present when a published manifest of the current ``FORMAT_VERSION`` has the
entry's backbone, split, view, image size, storage dtype, early-tokens choice and image count
(weights checksum and dataset fingerprint need the weights and data, which a plan does not
load; the per-entry check of ``open_or_build`` still guards each build exactly)."""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmark.cache.store import check_free_space, list_manifests
from benchmark.cache.tokens import FORMAT_VERSION

if TYPE_CHECKING:
    from benchmark.estimates.caches import CacheNeed


def _present(need: CacheNeed, manifest: dict[str, Any]) -> bool:
    key = manifest.get("key", {})
    return (
        key.get("format_version") == FORMAT_VERSION
        and key.get("backbone_key") == need.backbone
        and key.get("split") == need.split
        and key.get("view") == need.view_key
        and key.get("image_size") == need.image_size
        and key.get("dtype") == need.dtype
        and (key.get("early_block") is not None) == need.early_tokens
        and manifest.get("num_images") == need.images
    )


def missing_entries(needs: Iterable[CacheNeed], cache_dir: Path) -> list[CacheNeed]:
    """The entries of ``needs`` that ``cache_dir`` does not hold yet."""
    manifests = list_manifests(cache_dir)
    return [need for need in needs if not any(_present(need, manifest) for manifest in manifests)]


def check_cache_space(needs: Iterable[CacheNeed], cache_dir: Path) -> None:
    """``ProtobenchError`` (path, bytes needed, bytes free) when the entries still to build do not fit."""
    missing = missing_entries(needs, cache_dir)
    needed = sum(need.bytes for need in missing)
    if missing:
        check_free_space(cache_dir, needed, f"the {len(missing)} token-cache entries still to build")
