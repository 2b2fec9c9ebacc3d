"""What a trunk declares, as data that imports no torch or timm (timm's ``PretrainedCfg`` idea).

The six aliases of docs/protocol/harness.md ("Backbones (timm, frozen)") and every trunk an
installed package registers under the entry-point group ``protobench.backbones`` (a
:class:`TrunkDeclaration` whose ``factory`` is the ``module:function`` that builds the model)
are named, checked and keyed by a grid without loading timm; ``benchmark.backbones`` loads the
model to build a cache or train. A test checks each alias's geometry against timm's own
configuration (tests/benchmark/test_trunk_declarations.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from methods.plugins import BUILTIN, Provider, check_clash, discovered, installed

PLUGIN_GROUP = "protobench.backbones"


@dataclass(frozen=True)
class TrunkDeclaration:
    """A trunk's name and geometry: patch size, width (token dimension), prefix tokens (CLS and
    registers), depth, and where its weights come from (``weights_id``: the Hugging Face hub
    repository timm reads). ``timm_name`` is the timm model an alias creates; a package's trunk
    gives ``factory`` (``module:function``, called like ``timm.create_model``) instead."""

    name: str
    patch_size: int
    width: int
    prefix_tokens: int
    depth: int
    timm_name: str = ""
    factory: str = ""
    weights_id: str = ""

    def tokens(self, image_size: int = 224) -> int:
        """Patch tokens of one image of ``image_size`` pixels (prefix tokens not counted)."""
        return (image_size // self.patch_size) ** 2


def _alias(name: str, timm_name: str, patch: int, width: int, prefix: int) -> TrunkDeclaration:
    return TrunkDeclaration(name, patch, width, prefix, 12, timm_name=timm_name, weights_id=f"timm/{timm_name}")


#: the six aliases (docs/protocol/harness.md): DINOv2 ViT-S/B 14 with and without 4 registers,
#: DINOv3 ViT-S/B 16 (4 registers): their timm names and geometry (timm's default configurations)
ALIASES: dict[str, TrunkDeclaration] = {
    trunk.name: trunk
    for trunk in (
        _alias("dinov2_vits14", "vit_small_patch14_dinov2.lvd142m", 14, 384, 1),
        _alias("dinov2_vitb14", "vit_base_patch14_dinov2.lvd142m", 14, 768, 1),
        _alias("dinov2_vits14_reg4", "vit_small_patch14_reg4_dinov2.lvd142m", 14, 384, 5),
        _alias("dinov2_vitb14_reg4", "vit_base_patch14_reg4_dinov2.lvd142m", 14, 768, 5),
        _alias("dinov3_vits16", "vit_small_patch16_dinov3.lvd1689m", 16, 384, 5),
        _alias("dinov3_vitb16", "vit_base_patch16_dinov3.lvd1689m", 16, 768, 5),
    )
}


def installed_trunks() -> dict[str, tuple[TrunkDeclaration, Provider]]:
    """The trunks installed packages declare (``protobench.backbones``) that load; one whose name
    an alias has, or two distributions declare, or that does not load, is skipped with a warning."""
    return discovered(PLUGIN_GROUP, ALIASES, TrunkDeclaration)


def trunk_declaration(name: str) -> tuple[TrunkDeclaration, Provider] | None:
    """The declaration of an alias or of an installed package's trunk (None: neither, e.g.
    ``timm:NAME`` or an import path), and who provides it."""
    if name in ALIASES:
        check_clash(PLUGIN_GROUP, name, ALIASES)
        return ALIASES[name], BUILTIN
    if ":" in name:
        return None
    return installed(PLUGIN_GROUP, name, ALIASES, TrunkDeclaration)
