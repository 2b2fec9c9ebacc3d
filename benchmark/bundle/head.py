"""A finished run's trained head (the method's state dict, the frozen trunk excluded) as
safetensors: tensors and string metadata only, so loading it runs no code (unlike a pickle).
Nested entries (dicts of tensors) are stored flat under ``parent::child`` names."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from benchmark.errors import ProtobenchError
from benchmark.run.checkpoint import load_checkpoint

#: joins the keys of a nested state entry (a module's ``get_extra_state`` dict of tensors, e.g. an
#: RNG state) into one safetensors name; parameter names never hold it (they join with ".")
NESTED = "::"


def _flatten(state: dict[str, Any], where: Path, prefix: str = "") -> dict[str, torch.Tensor]:
    flat: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        name = f"{prefix}{key}"
        if NESTED in str(key):
            raise ProtobenchError(f"{where}: state key {name!r} holds {NESTED!r}; bundle without --checkpoints")
        if isinstance(value, torch.Tensor):
            # safetensors refuses shared or strided storage: each tensor gets its own contiguous copy
            flat[name] = value.detach().cpu().contiguous().clone()
        elif isinstance(value, dict):
            flat.update(_flatten(value, where, f"{name}{NESTED}"))
        else:
            raise ProtobenchError(f"{where}: the method's state entry {name!r} is a {type(value).__name__}, which "
                                  "safetensors cannot store; bundle without --checkpoints")
    return flat


def _unflatten(flat: dict[str, torch.Tensor]) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for name, tensor in flat.items():
        *parents, leaf = name.split(NESTED)
        node = state
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = tensor
    return state


def write_head(checkpoint_path: Path, out: Path, *, metadata: dict[str, str]) -> None:
    """The method weights of the run's final ``checkpoint.pt`` (read weights-only) to ``out``."""
    checkpoint = load_checkpoint(checkpoint_path)
    save_file(_flatten(checkpoint["method"], checkpoint_path), str(out), metadata=metadata)


def read_head(path: Path) -> dict[str, Any]:
    """The state dict in ``path`` (safetensors: parsed, never executed), nested entries rebuilt."""
    try:
        return _unflatten(load_file(str(path), device="cpu"))
    except (SafetensorError, OSError, ValueError) as err:
        raise ProtobenchError(f"{path} is not a readable safetensors file ({err}); `protobench bundle verify` "
                              "on the bundle names a damaged file; ask for the bundle again") from err
