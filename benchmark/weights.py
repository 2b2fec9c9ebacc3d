"""Which weights file a trunk loads: ``weights = "random"`` (none), ``"hf-cache"`` or unset (timm's
hub weights, found in the local Hugging Face cache, never downloaded), or a path the user gives;
each refused with the fix before any compute."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import huggingface_hub
import timm

from benchmark.errors import ProtobenchError

if TYPE_CHECKING:
    from benchmark.backbones import BackboneSpec

#: weight files ``weights = "/path/…"`` may name (timm's ``load_state_dict`` reads all of them)
WEIGHT_FILE_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin")
#: files timm's ``load_state_dict_from_hf`` looks for in a ``timm/…`` hub repo, in its order
_HF_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def _hf_cached_weights(spec: BackboneSpec) -> Path | None:
    """The timm hub weights of ``spec`` in the local Hugging Face cache, or None (no network)."""
    repo_id = timm.models.get_pretrained_cfg(spec.timm_name).hf_hub_id
    for filename in _HF_WEIGHT_FILES:
        found = huggingface_hub.try_to_load_from_cache(repo_id, filename)
        if isinstance(found, str):
            return Path(found)
    return None


def resolve_weights(spec: BackboneSpec, weights: str | os.PathLike[str] | None) -> Path | None:
    """None for random init, else the weights file to load (ProtobenchError when absent)."""
    if weights == "random":
        return None
    if spec.factory is not None and weights in (None, "hf-cache"):
        return None  # a user trunk's factory loads its own pretrained weights (create_backbone)
    if weights is None or weights == "hf-cache":
        found = _hf_cached_weights(spec)
        if found is None:
            raise ProtobenchError(
                f"The weights of {spec.key} ({spec.timm_name}) are not in the local Hugging Face cache; "
                f'pass weights = "/path/model.safetensors" or pre-download them on a login node with '
                f"timm.create_model('{spec.timm_name}', pretrained=True)."
            )
        return found
    path = Path(weights).expanduser()
    if path.suffix not in WEIGHT_FILE_SUFFIXES:
        raise ProtobenchError(
            f"weights = {str(weights)!r} for {spec.key} is neither 'hf-cache', 'random' nor a weights file; "
            f"name a {'/'.join(WEIGHT_FILE_SUFFIXES)} file."
        )
    if not path.is_file():
        raise ProtobenchError(f"The weights file {path} for {spec.key} does not exist; fix the path in `weights`.")
    return path
