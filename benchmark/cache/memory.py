"""Whether a cache entry is read into RAM once (RunSpec ``cache_in_memory``) instead of memory-mapped.

``"auto"`` reads it when the arrays a run reads take less than :data:`AUTO_FRACTION` of the
memory available to this process: ``MemAvailable`` of /proc/meminfo, capped by the cgroup's
remaining allowance (``memory.max − memory.current``, cgroup v2, which is how SLURM enforces
``--mem``). A run holds up to three entries (train, test, noisy test), hence the fraction.
"""
from __future__ import annotations

import os
from pathlib import Path

from benchmark.errors import ProtobenchError

#: "auto" reads an entry into RAM when it takes less than this fraction of the available memory
AUTO_FRACTION = 0.25
_CGROUP = Path("/sys/fs/cgroup")


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_allowance() -> int | None:
    try:
        limit = (_CGROUP / "memory.max").read_text().strip()
        used = int((_CGROUP / "memory.current").read_text().strip())
    except (OSError, ValueError):
        return None
    return None if limit == "max" else max(0, int(limit) - used)


def available_memory() -> int:
    """Bytes this process can still allocate (conservative: the smaller of host and cgroup)."""
    found = [v for v in (_meminfo_available(), _cgroup_allowance()) if v is not None]
    if not found:  # no /proc (not Linux): the physical pages the OS reports free
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return min(found)


def read_into_memory(setting: str | bool, nbytes: int) -> bool:
    """The decision for an entry whose read arrays take ``nbytes``."""
    if setting is True or setting is False:
        return setting
    if setting != "auto":
        raise ProtobenchError(f"cache_in_memory = {setting!r} must be 'auto', true or false")
    return nbytes < AUTO_FRACTION * available_memory()
