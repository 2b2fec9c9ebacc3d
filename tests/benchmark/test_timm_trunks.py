"""``backbone = "timm:NAME"``: any timm VisionTransformer / Eva as a trunk, geometry and mean/std
from timm, one key per trunk (aliases), and methods that need a CLS token refused without one."""
from __future__ import annotations

import pytest
import torch

from benchmark.backbones import BACKBONES, backbone_spec, create_backbone, list_backbones
from benchmark.config import build_run_spec
from benchmark.errors import ProtobenchError
from methods.base import MethodContext
from benchmark.method_lookup import build_method
from tiny_grid import write_tiny_grid

TINY = dict(depth=2, embed_dim=32, num_heads=2)
SIZE = 112

# name → (patch size, prefix tokens, CLS token?, timm's mean of the data config)
FAMILIES = {
    "timm:vit_small_patch14_dinov2.lvd142m": (14, 1, True, 0.485),
    "timm:vit_small_patch14_reg4_dinov2.lvd142m": (14, 5, True, 0.485),
    "timm:vit_small_patch16_dinov3.lvd1689m": (16, 5, True, 0.485),
    "timm:vit_base_patch16_clip_224.openai": (16, 1, True, 0.48145466),
    "timm:vit_base_patch16_siglip_224.v2_webli": (16, 0, False, 0.5),
    "timm:eva02_tiny_patch14_224.mim_in22k": (14, 1, True, 0.48145466),
}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_family_builds_with_timm_geometry(name: str) -> None:
    patch, prefix, has_cls, mean = FAMILIES[name]
    spec = backbone_spec(name)
    assert (spec.patch_size, spec.architecture.num_prefix_tokens, spec.architecture.has_cls_token) == (
        patch, prefix, has_cls)
    assert spec.architecture.mean[0] == pytest.approx(mean)
    torch.manual_seed(0)
    trunk = create_backbone(name, weights="random", image_size=SIZE, **TINY)
    grid = (SIZE // patch, SIZE // patch)
    assert (trunk.grid, trunk.num_prefix_tokens, trunk.has_cls_token) == (grid, prefix, has_cls)
    x = torch.randn(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(0))
    out = trunk(x)
    assert out.tokens.shape == (2, grid[0] * grid[1], 32)
    assert (out.attention is not None) == has_cls
    if has_cls:
        assert out.attention.shape == (2, grid[0] * grid[1])
    # the blocks run by hand reproduce timm's own forward_features; the appended block starts as identity
    torch.testing.assert_close(out.tokens, trunk.model.forward_features(x)[:, prefix:], rtol=0, atol=1e-5)
    torch.testing.assert_close(trunk.make_appended_block()(out.block_input), out.tokens, rtol=0, atol=1e-5)


def test_one_key_per_trunk_so_aliases_and_timm_names_share_a_run_id() -> None:
    assert backbone_spec("timm:vit_small_patch14_dinov2.lvd142m") is BACKBONES["dinov2_vits14"]
    assert backbone_spec("timm:vit_small_patch14_dinov2").key == "dinov2_vits14"  # timm's default tag
    assert backbone_spec("timm:vit_base_patch16_siglip_224").key == "timm:vit_base_patch16_siglip_224.v2_webli"
    base = {"dataset": "synthbirds", "method": "protopnet", "prototypes_per_class": 2, "weights": "random"}
    ids = {build_run_spec({**base, "backbone": name}, where="test").run_id
           for name in ("dinov2_vits14", "timm:vit_small_patch14_dinov2", "timm:vit_small_patch14_dinov2.lvd142m")}
    assert len(ids) == 1
    assert build_run_spec({**base, "backbone": "timm:vit_small_patch14_dinov2"}, where="t").backbone == "dinov2_vits14"


def test_names_that_are_no_vit_trunk_are_refused_with_the_fix() -> None:
    with pytest.raises(ProtobenchError, match="no model 'vit_nonexistent'.*list backbones"):
        backbone_spec("timm:vit_nonexistent")
    with pytest.raises(ProtobenchError, match="resnet50 is not a timm VisionTransformer or Eva"):
        backbone_spec("timm:resnet50")
    with pytest.raises(ProtobenchError, match="no pretrained tag 'bogus'"):
        backbone_spec("timm:vit_small_patch14_dinov2.bogus")
    with pytest.raises(ProtobenchError, match="grid.toml: unknown backbone 'dinov2_vitl14'"):
        build_run_spec({"dataset": "synthbirds", "method": "nppp", "prototypes_per_class": 2,
                        "backbone": "dinov2_vitl14"}, where="grid.toml")


def test_list_backbones_command(capsys) -> None:
    from benchmark.cli import main

    assert main(["list", "backbones", "*siglip_224*"]) == 0
    header, *shown = capsys.readouterr().out.splitlines()
    assert header == "backbones:" and "  timm:vit_base_patch16_siglip_224.v2_webli: timm" in shown
    assert all("siglip_224" in line for line in shown)


def test_list_backbones_filters_like_timm_list_models() -> None:
    rows = dict(list_backbones("*siglip_224*"))
    assert "timm:vit_base_patch16_siglip_224.v2_webli" in rows
    assert all("siglip_224" in key for key in rows)
    aliases = dict(list_backbones("*dinov2*"))
    assert aliases["dinov2_vits14"] == "vit_small_patch14_dinov2.lvd142m"
    assert aliases["timm:vit_small_patch14_dinov2.lvd142m"] == "alias dinov2_vits14"


def context(has_cls_attention: bool) -> MethodContext:
    return MethodContext(num_classes=3, prototypes_per_class=2, embed_dim=16, grid=(4, 4), num_prefix_tokens=0,
                         depth=2, make_block=lambda: torch.nn.Identity(), has_cls_attention=has_cls_attention,
                         backbone="timm:vit_base_patch16_siglip_224.v2_webli")


def test_a_gate_that_needs_cls_attention_is_refused_on_siglip_naming_the_alternative() -> None:
    with pytest.raises(ProtobenchError, match=r"gating='attention_pca'.*siglip.*no CLS token.*gating = \"pca\""):
        build_method("vmfproto", context(False))
    with pytest.raises(ProtobenchError, match=r"sign='attention'.*no CLS token"):
        build_method("nppp", context(False), sign="attention")
    assert "attention" not in build_method("vmfproto", context(False), gating="pca").reads
    assert "attention" not in build_method("nppp", context(False)).reads
    assert "attention" in build_method("vmfproto", context(True)).reads


def test_siglip_runs_vmfproto_with_the_pca_gate_and_refuses_the_default_before_training(tmp_path, capsys) -> None:
    from benchmark.cli import main
    from benchmark.run.store import find_run_dirs

    for gating in ("pca", "attention_pca"):
        grid = tmp_path / f"{gating}.toml"
        write_tiny_grid(grid, "siglip", tmp_path / "synthbirds",
                        dataset_args={"classes": 3, "images_per_class": 6, "seed": 0},
                        backbone="timm:vit_base_patch16_siglip_224",
                        backbone_args={"depth": 2, "embed_dim": 32, "num_heads": 2},
                        sweep=[{"method_args": {"gating": gating, "discovery_epochs": 1, "end_to_end_epochs": 1}}])
        rc = main(["run", str(grid), "--runs-dir", str(tmp_path / gating)])
        if gating == "pca":
            (run,) = find_run_dirs(tmp_path / gating)
            result = run.result()
            assert rc == 0 and result["spec"]["backbone"] == "timm:vit_base_patch16_siglip_224.v2_webli"
            assert result["evaluation"]["map_grid"] == [14, 14]  # 224 / 16, no prefix token
            assert result["metrics"]["acc"] is not None
        else:  # refused by the preflight, before any run starts
            assert rc == 2 and not (tmp_path / gating).exists()
            assert "gating='attention_pca' reads the CLS attention" in capsys.readouterr().err


def test_a_method_reading_cls_attention_is_refused_on_a_trunk_without_one(tmp_path) -> None:
    from benchmark.run.prepare import prepare

    spec = build_run_spec({"dataset": "synthbirds", "data_root": str(tmp_path / "birds"),
                           "dataset_args": {"classes": 2, "images_per_class": 4, "seed": 0},
                           "backbone": "timm:vit_base_patch16_siglip_224", "weights": "random",
                           "backbone_args": dict(TINY), "method": "example_adapter:CosinePrototypes",
                           "prototypes_per_class": 2}, where="test")
    with pytest.raises(ProtobenchError, match="reads the CLS attention.*leave \"attention\" out of the method's `reads`"):
        prepare(spec)
