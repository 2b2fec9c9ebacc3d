"""``cache_stage = "local"``: copy the entries a job reads to node-local scratch before training.

Epochs then read node-local disk instead of the shared filesystem (worth it when many jobs read
large entries from Lustre/GPFS/NFS at once, or the shared filesystem is slow for random reads).
The copy is an ordinary entry of the same key under ``<scratch>/protobench-token-cache``, built
through the same store (free-space check, lock, atomic publish), and every block's checksum must
equal the shared entry's, so a copy that differs is never used.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from benchmark.cache.arrays import ArraySpec, ArrayWriter
from benchmark.cache.entry import Entry
from benchmark.cache.store import open_or_build
from benchmark.errors import ProtobenchError

STAGE_ENV = ("SLURM_TMPDIR", "TMPDIR")
STAGE_SUBDIR = "protobench-token-cache"


def stage_root() -> Path:
    """Node-local scratch for staged entries: ``$SLURM_TMPDIR``, else ``$TMPDIR``."""
    for variable in STAGE_ENV:
        value = os.environ.get(variable)
        if value:
            return Path(value) / STAGE_SUBDIR
    raise ProtobenchError(
        "cache_stage = 'local' copies token-cache entries to node-local scratch, but neither $SLURM_TMPDIR nor "
        "$TMPDIR is set; set one of them to a node-local directory, or use cache_stage = 'shared'."
    )


def stage_entry(shared: Entry, root: Path) -> Entry:
    """The copy of ``shared`` under ``root`` (made now unless already there), checksum-verified."""
    records = shared.manifest["arrays"]
    layout = {name: ArraySpec.from_manifest(meta) for name, meta in records.items()}

    def copy(writers: dict[str, ArrayWriter]) -> dict[str, Any]:
        for name, writer in writers.items():
            spec = layout[name]
            for block in range(spec.num_blocks):
                writer.write(shared.arrays[name][spec.block_rows(block)])
        body = {k: v for k, v in shared.manifest.items() if k not in ("arrays", "key", "created", "built_by")}
        return {**body, "staged_from": str(shared.path)}

    staged, _ = open_or_build(root, shared.path.name, shared.manifest["key"], layout, copy, expect=records)
    return staged
