"""The token cache stores each image once: block inputs in float16, CLS attention in float32, the
final-norm tokens rebuilt on the device within the float16 bound derived below; early tokens
for the training split only; one stability-noise entry per trunk and dataset; plan sizes it."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from benchmark.backbones import create_backbone
from benchmark.cache.noise import STABILITY_NOISE_SEED
from benchmark.cache.tokens import CachedTokens, cache_entries, token_source
from benchmark.cli import main
from benchmark.config import RunSpec
from benchmark.cache.sizing import trunk_geometry
from benchmark.grid import load_grid
from benchmark.estimates.caches import grid_cache_needs
from tiny_grid import write_tiny_grid

REPO = Path(__file__).resolve().parents[2]
SIZE = 112
COUNT = 5
#: unit roundoff of IEEE binary16 (10 stored mantissa bits): round-to-nearest error ≤ u·|x|
FP16_UNIT_ROUNDOFF = 2.0**-11


class Images(torch.utils.data.Dataset):
    split = "train"

    def __init__(self, count: int = COUNT) -> None:
        self.images = torch.randn(count, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))
        self.labels = np.arange(count, dtype=np.int64) % 2

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, int]:
        return self.images[index], int(self.labels[index]), index

    def fingerprint(self) -> str:
        return f"images-{len(self)}"


def tiny(key: str):
    torch.manual_seed(0)
    return create_backbone(key, weights="random", image_size=SIZE, depth=2, embed_dim=32, num_heads=2)


def layer_norm_fp16_bound(x: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
    """First-order bound on |LN(x̃) − LN(x)| per element when x̃ = x(1 + δ), |δ| ≤ u (float16
    rounding of every entry). With s = sqrt(var(x) + ε), LN(x)_i = γ_i (x_i − μ)/s + β_i:
    |Δ(x_i − μ)| ≤ |Δx_i| + |mean Δx| ≤ 2u‖x‖_∞ and |Δs| ≤ ‖Δx − mean Δx‖_2/√D ≤ u·rms(x), so
    |Δ LN_i| ≤ |γ_i| (2u‖x‖_∞ / s + |x_i − μ| u·rms(x) / s²). Doubled for second-order terms and
    float32 arithmetic (both orders of magnitude smaller)."""
    x = x.double()
    u = FP16_UNIT_ROUNDOFF
    mean = x.mean(-1, keepdim=True)
    s = (x.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()
    rms = x.pow(2).mean(-1, keepdim=True).sqrt()
    amax = x.abs().amax(-1, keepdim=True)
    gamma = norm.weight.detach().double().abs()
    return 2 * gamma * (2 * u * amax / s + (x - mean).abs() * u * rms / s**2)


@pytest.mark.parametrize("key", ["dinov2_vits14", "dinov3_vits16"])
def test_tokens_are_the_final_norm_of_the_block_input(key: str) -> None:
    # FrozenTrunk.forward: tokens = norm(x)[:, P:] with x the block input (timm's forward_features
    # equality is test_backbones.py::test_every_key_builds_with_its_geometry)
    trunk = tiny(key)
    out = trunk(Images().images[:2])
    assert isinstance(trunk.model.norm, nn.LayerNorm)
    assert torch.equal(out.tokens, trunk.model.norm(out.block_input)[:, trunk.num_prefix_tokens:])


#: one tiny random instance of each trunk family: DINOv2 (+ registers), DINOv3, CLIP, SigLIP (no CLS), EVA-02
FAMILIES = ["dinov2_vits14", "dinov2_vits14_reg4", "dinov3_vits16", "timm:vit_base_patch16_clip_224.openai",
            "timm:vit_base_patch16_siglip_224.v2_webli", "timm:eva02_tiny_patch14_224.mim_in22k"]


@pytest.mark.parametrize("key", FAMILIES)
def test_rebuilt_tokens_are_within_the_float16_bound(tmp_path: Path, key: str) -> None:
    trunk, data = tiny(key), Images()
    live = token_source(trunk, data, cache_dir=None, backbone_key=key)
    cached = token_source(trunk, data, cache_dir=tmp_path, backbone_key=key)
    everything = torch.arange(COUNT)
    a, b = live.batch(everything, "cpu"), cached.batch(everything, "cpu")
    prefix = trunk.num_prefix_tokens
    if isinstance(trunk.model.norm, nn.Identity):  # EVA-02 (MIM): fc_norm on the pooled token only
        bound = FP16_UNIT_ROUNDOFF * a.block_input.double().abs()[:, prefix:] + 1e-7
    else:
        bound = layer_norm_fp16_bound(a.block_input, trunk.model.norm)[:, prefix:]
    error = (a.tokens.double() - b.tokens.double()).abs()
    assert error.max() > 0  # the float16 rounding is visible …
    assert (error <= bound).all(), f"worst error/bound {(error / bound).max():.3f}"  # … and within the bound
    # block inputs: one float16 rounding each; attention stored exactly
    assert ((a.block_input - b.block_input).abs() <= FP16_UNIT_ROUNDOFF * a.block_input.abs() + 1e-7).all()
    if trunk.has_cls_token:
        assert torch.equal(a.attention, b.attention)
    else:  # SigLIP: no CLS token, no attention array in the entry
        assert a.attention is None and b.attention is None
        assert "attention" not in cache_entries(tmp_path)[0]["arrays"]
    # a float32 cache rebuilds them to float32 rounding
    exact = token_source(trunk, data, cache_dir=tmp_path, backbone_key=key, dtype="float32")
    torch.testing.assert_close(exact.batch(everything, "cpu").tokens, a.tokens, rtol=0, atol=1e-5)


def test_an_entry_stores_each_image_once(tmp_path: Path) -> None:
    key = "dinov2_vits14"
    trunk, data = tiny(key), Images()
    source = token_source(trunk, data, cache_dir=tmp_path, backbone_key=key)
    assert isinstance(source, CachedTokens)
    token_source(trunk, data, cache_dir=tmp_path, backbone_key=key, early_block=0)
    plain, early = sorted(cache_entries(tmp_path), key=lambda m: m["key"]["early_block"] is not None)
    assert set(plain["arrays"]) == {"block_input", "attention", "labels"}
    assert set(early["arrays"]) == {"block_input", "attention", "labels", "early_tokens"}
    assert (plain["arrays"]["block_input"]["dtype"], plain["arrays"]["attention"]["dtype"]) == ("float16", "float32")
    # 8×8 patches + 1 CLS, D = 32: 65·32 half floats, 64 floats, one int64 label per image
    per_image = 65 * 32 * 2 + 64 * 4 + 8
    data_bytes = sum(Path(plain["path"], f"{n}.npy").stat().st_size for n in plain["arrays"])
    assert 0 < data_bytes - COUNT * per_image <= 3 * 128  # + one npy header per array


def test_geometry_without_weights_matches_the_built_trunk() -> None:
    for key in ("dinov2_vits14_reg4", "dinov3_vits16"):
        trunk = tiny(key)
        built = (trunk.grid[0] * trunk.grid[1], trunk.num_prefix_tokens, trunk.embed_dim)
        assert trunk_geometry(key, json.dumps({"depth": 2, "embed_dim": 32, "num_heads": 2}, sort_keys=True),
                              SIZE) == built
    # the paper's trunks at 224: ViT-*/14 → 16×16 patches + CLS; DINOv3 ViT-*/16 → 14×14 + CLS + 4 registers
    assert trunk_geometry("dinov2_vitb14", "{}", 224) == (256, 1, 768)
    assert trunk_geometry("dinov2_vits14", "{}", 224) == (256, 1, 384)
    assert trunk_geometry("dinov3_vitb16", "{}", 224) == (196, 5, 768)
    assert trunk_geometry("dinov3_vits16", "{}", 224) == (196, 5, 384)


def hand_entry_bytes(images: int, patches: int, prefix: int, width: int, early: bool) -> int:
    """Data bytes of an entry: float16 block inputs (and early tokens), float32 attention, int64 labels."""
    halves = (prefix + patches) * width + (patches * width if early else 0)
    return images * (2 * halves + 4 * patches + 8)


def test_cub_main_cache_is_the_hand_computed_size(capsys: pytest.CaptureFixture[str]) -> None:
    # CUB: 5994 train / 5794 test; the grid holds EvalProtoPNet, so the train entries carry early tokens
    train, test = 5994, 5794
    geometry = {"dinov2_vitb14": (256, 1, 768), "dinov2_vits14": (256, 1, 384),
                "dinov3_vitb16": (196, 5, 768), "dinov3_vits16": (196, 5, 384)}
    expected = sum(hand_entry_bytes(train, *g, early=True) + 2 * hand_entry_bytes(test, *g, early=False)
                   for g in geometry.values())
    needs = grid_cache_needs(load_grid(REPO / "benchmark" / "grids" / "cub_main.toml").runs)
    assert len(needs) == 12  # per backbone: train, test clean, test noise (one fixed noise seed)
    assert {n.view for n, _ in needs if n.split == "test"} == {"clean", f"noise seed {STABILITY_NOISE_SEED}"}
    assert all(n.early_tokens == (n.split == "train") for n, _ in needs)
    total = sum(n.bytes for n, _ in needs)
    assert 0 <= total - expected <= 12 * 4 * 256  # npy headers
    assert main(["plan", str(REPO / "benchmark" / "grids" / "cub_main.toml")]) == 0
    shown = re.search(r"token cache: (\d+) entries, ([\d.]+) GB", capsys.readouterr().out)
    assert shown and shown.group(1) == "12" and shown.group(2) == f"{expected / 1e9:.1f}"
    assert expected / 1e9 <= 30


def test_small_grid_cache_size_and_free_space_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    grid = tmp_path / "g.toml"
    write_tiny_grid(grid, "g", tmp_path / "sb", dataset_args={"classes": 3, "images_per_class": 5, "seed": 0},
                    image_size=SIZE, backbone_args={"depth": 2, "embed_dim": 32, "num_heads": 2},
                    sweep=[{"method": ["vmfproto", "nppp"], "seed": [0, 1]}])
    # synthbirds: 3 train + 2 test images per class; 8×8 patches + CLS at 112, D = 32; no early tokens
    expected = hand_entry_bytes(9, 64, 1, 32, False) + 2 * hand_entry_bytes(6, 64, 1, 32, False)
    cache = tmp_path / "cache"
    assert main(["plan", str(grid), "--cache-dir", str(cache)]) == 0
    captured = capsys.readouterr()
    shown = re.search(r"token cache: (\d+) entries, ([\d.]+) GB", captured.out)
    assert shown and shown.group(1) == "3"
    needed = sum(n.bytes for n, _ in grid_cache_needs(load_grid(grid).runs))
    assert 0 < needed - expected <= 3 * 3 * 128
    assert "warning" not in captured.err

    import benchmark.cache.store as store

    monkeypatch.setattr(store, "_free_bytes", lambda path: 1000)  # a nearly full filesystem
    assert main(["plan", str(grid), "--cache-dir", str(cache)]) == 0
    err = capsys.readouterr().err
    assert "warning: Not enough space for the 3 token-cache entries still to build" in err
    assert str(cache) in err and "1000 bytes) are free" in err
    assert main(["run", str(grid), "--cache-dir", str(cache), "--runs-dir", str(tmp_path / "runs")]) != 0
    assert re.search(rf"error: Not enough space .* in {re.escape(str(cache))}: it needs .* \({needed} bytes\)",
                     capsys.readouterr().err)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "sb").exists()  # refused before any compute


def test_runs_share_one_noise_entry_and_record_its_seed(tmp_path: Path) -> None:
    from benchmark.run.runner import execute_run

    base = dict(dataset="synthbirds", data_root=str(tmp_path / "sb"), backbone="dinov2_vits14", weights="random",
                image_size=SIZE, backbone_args={"depth": 1, "embed_dim": 16, "num_heads": 2},
                dataset_args={"classes": 2, "images_per_class": 4, "seed": 0}, prototypes_per_class=1,
                method="nppp", method_args={"discovery_epochs": 0, "finetune_epochs": 1}, batch_size=4)
    results = [execute_run(RunSpec(**base, seed=seed), tmp_path / "runs" / str(seed), cache_root=tmp_path / "cache",
                           progress=False, log=lambda line: None) for seed in (0, 1)]
    noise = [m for m in cache_entries(tmp_path / "cache") if m["key"]["view"]["kind"] == "noise"]
    assert [m["key"]["view"]["seed"] for m in noise] == [STABILITY_NOISE_SEED]
    for result in results:
        assert result["evaluation"]["noise_seed"] == STABILITY_NOISE_SEED
        assert f"fixed seed {STABILITY_NOISE_SEED}" in result["metric_notes"]["sta"]
