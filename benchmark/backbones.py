"""Frozen timm ViT trunks: the backbone registry, the one-pass trunk and the appended block.

docs/protocol/harness.md ("Backbones", "block expansion") fixes the six registry keys, ``img_size=224`` and
the identity-initialised appended block; docs/design/architecture.md (seam 2) fixes what one trunk pass
yields per image. Beyond the six keys (aliases), ``"timm:NAME"`` names any timm
``VisionTransformer`` or ``Eva`` model (CLIP, SigLIP, EVA-02, DINOv2-g, …); patch size, prefix
tokens, width and mean/std come from the timm model and its data config. Every convention below
names the timm source it mirrors (``timm/models/vision_transformer.py`` for DINOv2, CLIP and
SigLIP, ``timm/models/eva.py`` for DINOv3 and EVA-02).
"""
from __future__ import annotations

import copy
import fnmatch
import hashlib
import importlib
import os
import pickle
from contextlib import nullcontext
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import timm
import torch
from safetensors import SafetensorError
from timm.data import resolve_model_data_config
from timm.models import Eva, VisionTransformer, get_pretrained_cfg, is_model, is_model_in_modules, list_models
from timm.models._registry import split_model_name_tag
from torch import Tensor, nn

from benchmark.attention import AppendedBlock, cls_attention
from benchmark.errors import ProtobenchError, did_you_mean
from benchmark.trunks import ALIASES, trunk_declaration
from benchmark.weights import resolve_weights

__all__ = [
    "BACKBONES",
    "TIMM_PREFIX",
    "AppendedBlock",
    "BackboneSpec",
    "backbone_spec",
    "list_backbones",
    "FrozenTrunk",
    "TrunkOutputs",
    "cls_attention",
    "create_backbone",
    "resolve_weights",
    "state_dict_checksum",
]


#: ``backbone = "timm:NAME"``: any timm model of these modules (VisionTransformer, Eva)
TIMM_PREFIX = "timm:"
TRUNK_MODULES = ("vision_transformer", "eva")


@dataclass(frozen=True)
class Architecture:
    """What a timm model's default configuration fixes: read from an instance on the meta device."""

    patch_size: int
    embed_dim: int
    num_prefix_tokens: int
    has_cls_token: bool
    depth: int  # transformer blocks (the cost model's trunk pass)
    mean: tuple[float, float, float]  # timm's data config (resolve_model_data_config): the
    std: tuple[float, float, float]  # normalisation the pretrained weights expect


@lru_cache(maxsize=None)
def _architecture(spec: BackboneSpec) -> Architecture:
    with torch.device("meta"):  # no memory, no weights
        model = spec.create_model(pretrained=False, num_classes=0)
    data = resolve_model_data_config(model)
    return Architecture(patch_size=int(model.patch_embed.patch_size[0]), embed_dim=int(model.embed_dim),
                        num_prefix_tokens=int(model.num_prefix_tokens), has_cls_token=model.cls_token is not None,
                        depth=len(model.blocks),
                        mean=tuple(float(v) for v in data["mean"]), std=tuple(float(v) for v in data["std"]))


@dataclass(frozen=True)
class BackboneSpec:
    """A registry entry: a suite key (an alias, or ``timm:<architecture>.<pretrained tag>``) and
    the timm model it creates; its geometry comes from timm's default configuration."""

    key: str
    timm_name: str
    #: a user trunk (``backbone = "module:factory"``): the factory's import path, else None
    factory: str | None = None

    @property
    def architecture(self) -> Architecture:
        return _architecture(self)

    def create_model(self, *, pretrained: bool, **kwargs: Any) -> nn.Module:
        """The model: ``timm.create_model`` of ``timm_name``, or the user factory called the same way."""
        if self.factory is None:
            return timm.create_model(self.timm_name, pretrained=pretrained, **kwargs)
        try:
            model = _import_factory(self.factory)(pretrained=pretrained, **kwargs)
        except ProtobenchError:
            raise
        except Exception as error:  # the user's code: one message naming it, the cause chained
            raise ProtobenchError(f"backbone {self.key!r}: the factory raised {type(error).__name__}: {error}; "
                                  f"fix the factory or its backbone_args.") from error
        if not isinstance(model, (VisionTransformer, Eva)):
            raise ProtobenchError(f"backbone {self.key!r}: the factory returned a {type(model).__name__}, not a timm "
                                  "VisionTransformer or Eva (or a subclass); return one, e.g. timm.create_model(...).")
        return model

    @property
    def patch_size(self) -> int:
        return self.architecture.patch_size

    def grid(self, image_size: int) -> tuple[int, int]:
        return image_size // self.patch_size, image_size // self.patch_size


#: docs/protocol/harness.md, table "Backbones (timm, frozen)": the six keys it lists, aliases of their timm names
#: (declared without timm in benchmark/trunks.py)
BACKBONES: dict[str, BackboneSpec] = {key: BackboneSpec(key, trunk.timm_name) for key, trunk in ALIASES.items()}
_ALIAS_OF_TIMM_NAME = {spec.timm_name: spec for spec in BACKBONES.values()}
_UNKNOWN_HINT = (f"use one of {', '.join(BACKBONES)} or 'timm:NAME' with a timm VisionTransformer or Eva model "
                 "(`protobench list backbones PATTERN` lists them)")


def backbone_spec(name: str) -> BackboneSpec:
    """The registry entry of an alias or of ``"timm:NAME"``. ``NAME`` without a pretrained tag
    takes timm's default tag, and a name whose model an alias creates gives that alias, so one
    trunk always has one key (and runs on it one run id)."""
    declared = _declared(name)
    if declared is not None:
        return declared
    if ":" in name and not name.startswith(TIMM_PREFIX):
        return _user_trunk_spec(name)
    if not name.startswith(TIMM_PREFIX):
        hint = did_you_mean(name, list(BACKBONES))
        raise ProtobenchError(f"unknown backbone {name!r}{hint}; {_UNKNOWN_HINT}.")
    requested = name[len(TIMM_PREFIX):]
    architecture, tag = split_model_name_tag(requested)
    if not is_model(architecture):
        raise ProtobenchError(f"timm {timm.__version__} has no model {architecture!r} (backbone {name!r}); "
                              f"{_UNKNOWN_HINT}.")
    if not is_model_in_modules(architecture, TRUNK_MODULES):
        raise ProtobenchError(f"backbone {name!r}: {architecture} is not a timm VisionTransformer or Eva model, "
                              f"the trunks the suite can freeze; {_UNKNOWN_HINT}.")
    try:
        cfg = get_pretrained_cfg(requested)
    except RuntimeError:
        raise ProtobenchError(f"backbone {name!r}: timm has no pretrained tag {tag!r} for {architecture}; "
                              f"leave the tag out (timm's default) or pick one of `protobench list backbones "
                              f"'{architecture}*'`.") from None
    canonical = f"{architecture}.{cfg.tag}" if cfg is not None and cfg.tag else architecture
    return _ALIAS_OF_TIMM_NAME.get(canonical) or BackboneSpec(TIMM_PREFIX + canonical, canonical)


def _declared(name: str) -> BackboneSpec | None:
    """An alias, or a trunk an installed package declares (entry point ``protobench.backbones``)."""
    try:
        found = trunk_declaration(name)
    except ValueError as err:  # a clash or a broken package: one message naming it
        raise ProtobenchError(str(err)) from None
    if found is None:
        return None
    trunk, provider = found
    return BACKBONES[name] if provider.builtin else BackboneSpec(name, name, factory=trunk.factory)


def _import_factory(path: str) -> Any:
    """The object ``module:attr`` names (as ``methods.registry`` resolves ``module:Class`` methods)."""
    module_name, _, attr = path.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as error:
        raise ProtobenchError(f"backbone {path!r}: cannot import {attr!r} from {module_name!r} ({error}); "
                              "name a trunk factory as 'module:function' or 'module:Class' on PYTHONPATH.") from None
    except SyntaxError as error:  # the user's module does not parse: where, not a traceback
        raise ProtobenchError(f"backbone {path!r}: {error.filename}, line {error.lineno}: {error.msg}; fix that "
                              "line of the trunk's module.") from None
    except Exception as error:  # the module raised while it was imported
        raise ProtobenchError(f"backbone {path!r}: importing {module_name!r} raised {type(error).__name__}: {error}; "
                              "fix the trunk's module.") from None
    if not callable(factory):
        raise ProtobenchError(f"backbone {path!r} is a {type(factory).__name__}, not a callable; "
                              "name a function or class that returns the trunk model.")
    return factory


def _user_trunk_spec(path: str) -> BackboneSpec:
    """A trunk named by import path. Its key is where the factory is defined
    (``__module__:__qualname__``), so a re-exported factory, named either way, has one key and
    its runs one run id."""
    factory = _import_factory(path)
    defined = f"{factory.__module__}:{factory.__qualname__}"
    key = defined if _import_factory_or_none(defined) is factory else path  # nested: keep the path given
    return BackboneSpec(key, key, factory=key)


def _import_factory_or_none(path: str) -> Any:
    try:
        return _import_factory(path)
    except ProtobenchError:
        return None


def list_backbones(pattern: str | None = None) -> list[tuple[str, str]]:
    """(backbone key, what it is) of the aliases and of every ``timm:NAME`` with pretrained tags
    whose name matches the shell ``pattern`` (``timm.list_models``; None: all)."""
    rows = [(spec.key, spec.timm_name) for spec in BACKBONES.values()
            if pattern is None or fnmatch.fnmatch(spec.key, pattern) or fnmatch.fnmatch(spec.timm_name, pattern)]
    for name in list_models(pattern or "", module=list(TRUNK_MODULES), pretrained=True):
        alias = _ALIAS_OF_TIMM_NAME.get(name)
        rows.append((TIMM_PREFIX + name, f"alias {alias.key}" if alias else "timm"))
    return rows


@dataclass
class TrunkOutputs:
    """Everything one frozen trunk pass yields (docs/design/architecture.md, seam 2), float32.

    tokens        B×N×D      final-norm patch tokens, prefix (CLS + registers) removed
    block_input   B×(P+N)×D  output of the last block before the final norm, prefix first
    attention     B×N        last block's CLS→patch attention, softmax over all keys, mean over heads;
                             None for a trunk without a CLS token (SigLIP)
    early_tokens  B×N×D      output of block ``early_block`` (0-based, pre-norm), patch tokens only
    """

    tokens: Tensor
    block_input: Tensor
    attention: Tensor | None
    early_tokens: Tensor | None = None


def state_dict_checksum(module: nn.Module) -> str:
    """Short sha256 over a module's state dict (names, dtypes, shapes and bytes, sorted by name).

    Depends only on the tensors, so the same weights give the same checksum whether they came
    from the HF cache, a ``.safetensors`` file or an original ``.pth`` checkpoint."""
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        array = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{array.dtype}|{tuple(array.shape)}|".encode())
        # bytes through a uint8 view: numpy has no bfloat16
        digest.update(array.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


class FrozenTrunk(nn.Module):
    """A timm ViT trunk with every parameter frozen and always in eval mode.

    One ``forward`` runs the blocks once and returns final tokens, the last block's pre-norm
    output, the last layer's CLS attention (trunks with a CLS token) and optionally an early
    block's tokens. Geometry (patch size, prefix tokens, width) is read from the model.
    """

    def __init__(self, spec: BackboneSpec, model: VisionTransformer | Eva, image_size: int, weights_source: str) -> None:
        super().__init__()
        if not isinstance(model, (VisionTransformer, Eva)):
            raise ProtobenchError(f"backbone {spec.key}: {type(model).__name__} is not a timm VisionTransformer or Eva")
        if getattr(model, "rope_mixed", False):
            raise ProtobenchError(f"backbone {spec.key}: {spec.timm_name} learns a RoPE table per block (rope_mixed); "
                                  "the appended block needs one table for all blocks: pick a model without it.")
        self.model = model.requires_grad_(False).eval()
        self.spec = spec
        self.image_size = image_size
        self.weights_source = weights_source
        self.embed_dim: int = model.embed_dim
        self.num_prefix_tokens: int = model.num_prefix_tokens
        #: whether the last layer's CLS→patch attention exists (not on SigLIP: no CLS token)
        self.has_cls_token: bool = model.cls_token is not None
        self.depth: int = len(model.blocks)
        patch = int(model.patch_embed.patch_size[0])
        check_patch_multiple(spec.key, image_size, patch)  # the model as built, backbone_args included
        self.grid: tuple[int, int] = (image_size // patch, image_size // patch)
        self.weights_checksum: str = state_dict_checksum(model)
        self.eval()

    def train(self, mode: bool = True) -> FrozenTrunk:
        """Frozen trunk: stays in eval mode whatever the caller asks (no dropout, no RoPE jitter)."""
        return super().train(False)

    def check_early_block(self, early_block: int | None) -> None:
        """``early_block`` must be None or a 0-based block index of this trunk."""
        if early_block is not None and not 0 <= early_block < self.depth:
            raise ProtobenchError(
                f"early_block {early_block} is outside the {self.depth} blocks of {self.spec.key}; "
                f"pass an index in [0, {self.depth - 1}]."
            )

    def _embed(self, images: Tensor) -> tuple[Tensor, Tensor | None]:
        """Token sequence entering block 0 and the RoPE table (DINOv3), as timm's ``forward_features``."""
        model = self.model
        x = model.patch_embed(images)
        if isinstance(model, Eva):  # eva.py Eva.forward_features: _pos_embed returns (x, rope)
            x, rope = model._pos_embed(x)
            return model.norm_pre(x), rope
        x = model.patch_drop(model._pos_embed(x))  # vision_transformer.py forward_features
        return model.norm_pre(x), None

    def rope_table(self) -> Tensor | None:
        """DINOv3's (N, 2·head_dim) RoPE sin|cos table for the trunk's grid; None for DINOv2."""
        rope = getattr(self.model, "rope", None)
        return None if rope is None else rope.get_embed(shape=list(self.grid))

    def forward(
        self, images: Tensor, *, early_block: int | None = None, amp_dtype: torch.dtype | None = None,
        gradients: bool = False,
    ) -> TrunkOutputs:
        """One pass over B×3×S×S normalised images; ``amp_dtype`` (e.g. ``torch.bfloat16``) runs the
        blocks under autocast. No autograd graph is built (``no_grad``, not ``inference_mode``, so
        live outputs can feed the trainable appended block), unless ``gradients``: then the outputs
        carry the graph back to ``images`` (the weights stay frozen), for the input-side
        evaluations of benchmark/robustness/ (PGD, pixel attributions)."""
        self.check_early_block(early_block)
        expected = (3, self.image_size, self.image_size)
        if images.ndim != 4 or tuple(images.shape[1:]) != expected:
            raise ProtobenchError(
                f"{self.spec.key} was created for B×{expected[0]}×{expected[1]}×{expected[2]} images but got "
                f"{tuple(images.shape)}; resize the dataset's images or pass image_size to create_backbone."
            )
        prefix = self.num_prefix_tokens
        autocast = torch.autocast(images.device.type, dtype=amp_dtype) if amp_dtype is not None else nullcontext()
        with torch.set_grad_enabled(gradients), autocast:
            x, rope = self._embed(images)
            extra = {} if rope is None else {"rope": rope}
            early: Tensor | None = None
            attention: Tensor | None = None
            last = len(self.model.blocks) - 1
            for index, block in enumerate(self.model.blocks):
                if index == last and self.has_cls_token:
                    attention = cls_attention(block.attn, block.norm1(x), rope, prefix)
                x = block(x, **extra)
                if index == early_block:
                    early = x[:, prefix:].float()
            tokens = self.model.norm(x)[:, prefix:]
        return TrunkOutputs(tokens=tokens.float(), block_input=x.float(), attention=attention, early_tokens=early)

    def make_appended_block(self) -> AppendedBlock:
        """A fresh identity-initialised trainable copy of the last block + frozen final norm."""
        block = copy.deepcopy(self.model.blocks[-1])
        with torch.no_grad():
            for layer in (block.attn.proj, block.mlp.fc2):
                layer.weight.zero_()
                if layer.bias is not None:
                    layer.bias.zero_()
        block.requires_grad_(True).train()
        norm = copy.deepcopy(self.model.norm).requires_grad_(False)
        rope = self.rope_table()
        return AppendedBlock(block, norm, self.num_prefix_tokens, None if rope is None else rope.detach().clone())


def check_patch_multiple(key: str, image_size: int, patch_size: int) -> None:
    """The patch grid must tile the image: ``image_size`` a multiple of the trunk's patch size."""
    if image_size % patch_size:
        raise ProtobenchError(
            f"image_size {image_size} is not a multiple of the patch size {patch_size} of {key}; "
            f"use e.g. {patch_size * max(1, image_size // patch_size)}."
        )


def create_backbone(
    key: str, *, weights: str | os.PathLike[str] | None = None, image_size: int = 224, **overrides: object
) -> FrozenTrunk:
    """The frozen trunk of registry ``key`` (an alias or ``"timm:NAME"``) at ``image_size`` (docs/protocol/harness.md: 224).

    ``weights``: None or ``"hf-cache"`` → timm's hub weights, read from the local HF cache only;
    a ``.safetensors``/``.pth``/``.pt``/``.bin`` path → that file, through timm's checkpoint
    filter (so original DINOv2/DINOv3 checkpoints convert and position embeddings resample);
    ``"random"`` → no weights (tests, demo). ``overrides`` go to ``timm.create_model``.
    """
    spec = backbone_spec(key)
    if spec.factory is None:  # a factory's patch size may come from backbone_args: checked on its model
        check_patch_multiple(key, image_size, spec.patch_size)
    weights_file = resolve_weights(spec, weights)
    kwargs = dict(img_size=image_size, num_classes=0, **overrides)
    if spec.factory is not None:
        return _create_user_trunk(spec, weights, weights_file, image_size, kwargs)
    if weights_file is None:
        model = timm.create_model(spec.timm_name, pretrained=False, **kwargs)
        source = "random"
    else:
        try:
            model = timm.create_model(
                spec.timm_name, pretrained=True, pretrained_cfg_overlay=dict(file=str(weights_file)), **kwargs
            )
        except _LOAD_ERRORS as error:
            raise _unloadable(weights_file, spec, error) from error
        source = str(weights_file)
    return FrozenTrunk(spec, model, image_size, source)


_LOAD_ERRORS = (RuntimeError, KeyError, ValueError, SafetensorError, pickle.UnpicklingError)


def _unloadable(weights_file: Path, spec: BackboneSpec, error: Exception) -> ProtobenchError:
    first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return ProtobenchError(f"The weights file {weights_file} cannot be loaded into {spec.key} ({spec.timm_name}): "
                           f"{first_line}; pass a checkpoint of that model.")


def _create_user_trunk(spec: BackboneSpec, weights: str | os.PathLike[str] | None, weights_file: Path | None,
                       image_size: int, kwargs: dict[str, Any]) -> FrozenTrunk:
    """A user trunk: ``factory(pretrained=…, img_size=…, num_classes=0, **backbone_args)`` as
    ``timm.create_model`` is called ('hf-cache': the factory's own weights; a file: loaded strictly
    through timm's ``load_checkpoint``), then the contract check of :mod:`benchmark.trunk_contract`."""
    from benchmark.trunk_contract import check_trunk_contract

    own_weights = weights in (None, "hf-cache")
    model = spec.create_model(pretrained=own_weights, **kwargs)
    if weights_file is not None:
        try:
            timm.models.load_checkpoint(model, str(weights_file), strict=True)
        except _LOAD_ERRORS as error:
            raise _unloadable(weights_file, spec, error) from error
    source = str(weights_file) if weights_file is not None else ("factory" if own_weights else "random")
    trunk = FrozenTrunk(spec, model, image_size, source)
    check_trunk_contract(trunk)
    return trunk

