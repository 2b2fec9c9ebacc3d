"""A run's checkpoint file: written atomically with a checksum of its contents, read back with
torch's weights-only unpickler (nothing in the file can run code), refused when its format,
checksum or code version does not match, each refusal naming how to start the run afresh. What a
checkpoint holds is the training loop's (:mod:`benchmark.run.training`)."""
from __future__ import annotations

import hashlib
import io
import pickle
import re
from pathlib import Path
from typing import Any

import torch

from benchmark.errors import ProtobenchError
from benchmark.run.provenance import code_version
from benchmark.run.store import atomic_write_checked

CHECKPOINT_FORMAT = 2  # 2: loadable with weights_only=True (1 pickled NumPy RNG state); records code versions
CHECKSUM_KEY = "checksum"  # payload_checksum of the rest of the checkpoint, verified on every load


def payload_checksum(value: Any) -> str:
    """SHA-256 of a checkpoint's contents: every tensor's dtype, shape and bytes and every plain
    value, walked in a fixed order (dict keys sorted), so any flipped bit of the data changes it."""
    digest = hashlib.sha256()

    def walk(item: Any) -> None:
        if isinstance(item, torch.Tensor):
            flat = item.detach().cpu().contiguous().reshape(-1)
            digest.update(f"T{item.dtype}{tuple(item.shape)}".encode())
            digest.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
        elif isinstance(item, dict):
            digest.update(f"D{len(item)}".encode())
            for key in sorted(item, key=repr):
                walk(key)
                walk(item[key])
        elif isinstance(item, (list, tuple)):
            digest.update(f"L{len(item)}".encode())
            for element in item:
                walk(element)
        else:  # int, float (repr round-trips exactly), str, bool, None
            digest.update(f"V{type(item).__name__}:{item!r}".encode())

    walk(value)
    return digest.hexdigest()


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Serialise in memory with the contents' checksum, check the disk has room, write
    atomically: a failed write leaves the previous checkpoint as it was."""
    buffer = io.BytesIO()
    torch.save({**payload, CHECKSUM_KEY: payload_checksum(payload)}, buffer)
    atomic_write_checked(path, buffer.getvalue())


def _restart_hint(path: Path) -> str:
    return (f"delete it (rm {str(path)!r}) to train the run from the start, then run the grid again "
            "(with --retry-failed if the run is marked failed)")


def load_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint at ``path``, read with torch's weights-only unpickler: tensors, containers and
    plain values only, so nothing in the file can run code."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:  # a global outside torch's allow-list: nothing was called
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(err))
        what = f"it references {found.group(1)}, which" if found else "it holds something that"
        raise ProtobenchError(
            f"checkpoint {str(path)!r} was not loaded: {what} is neither a tensor nor plain data, and nothing "
            f"in it was run. Checkpoints written before protobench checkpoint format {CHECKPOINT_FORMAT} "
            "(they pickled NumPy's RNG state) are refused this way, and so is a crafted file; "
            f"{_restart_hint(path)}"
        ) from err
    except Exception as err:  # a truncated or foreign file
        raise ProtobenchError(f"checkpoint {str(path)!r} cannot be read ({err}); {_restart_hint(path)}") from err
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != CHECKPOINT_FORMAT:
        found = checkpoint.get("format") if isinstance(checkpoint, dict) else type(checkpoint).__name__
        raise ProtobenchError(f"checkpoint {str(path)!r} has format {found!r}, this protobench reads format "
                              f"{CHECKPOINT_FORMAT}; {_restart_hint(path)}")
    recorded = checkpoint.pop(CHECKSUM_KEY, None)  # absent in checkpoints written before checksums
    if recorded is not None and recorded != payload_checksum(checkpoint):
        raise ProtobenchError(f"checkpoint {str(path)!r} is corrupt: its contents differ from the checksum "
                              f"written with them (a changed bit on disk or in transit); {_restart_hint(path)}")
    return checkpoint


def resume_checkpoint(path: Path | None, *, code: str | None = None,
                      allow_code_change: bool = False) -> dict[str, Any] | None:
    """The checkpoint to resume from (None: none yet), refused when another code version than
    ``code`` (default: this checkout's) wrote it, unless ``allow_code_change``."""
    if path is None or not path.exists():
        return None
    checkpoint = load_checkpoint(path)
    written_by = checkpoint["report"]["code_versions"][-1]["version"]
    code = code_version() if code is None else code
    if written_by != code and not allow_code_change:
        raise ProtobenchError(
            f"checkpoint {str(path)!r} was written by code version {written_by!r}, but this is {code!r}: "
            "resuming would train one run with two versions of the code. Resume with the code of "
            f"{written_by!r}, or run again with --allow-code-change (and --retry-failed once the run is "
            "marked failed) to resume anyway (result.json then lists both under provenance.code_versions), "
            f"or {_restart_hint(path)}"
        )
    return checkpoint
