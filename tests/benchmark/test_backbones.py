"""Frozen trunks: registry, one-pass outputs, CLS attention, appended block, weight loading."""
from __future__ import annotations

from pathlib import Path

import huggingface_hub
import pytest
import torch
from safetensors.torch import save_file
from timm.layers.pos_embed_sincos import apply_rot_embed_cat

from benchmark.backbones import BACKBONES, FrozenTrunk, create_backbone, state_dict_checksum
from benchmark.errors import ProtobenchError

TINY = dict(depth=2, embed_dim=32, num_heads=2)
EXPECTED_PREFIX = {
    "dinov2_vits14": 1,
    "dinov2_vitb14": 1,
    "dinov2_vits14_reg4": 5,  # CLS + 4 registers
    "dinov2_vitb14_reg4": 5,
    "dinov3_vits16": 5,  # CLS + 4 storage tokens (timm: num_reg_tokens=4)
    "dinov3_vitb16": 5,
}


def tiny_trunk(key: str, seed: int = 0, *, scramble: bool = False, **overrides: object) -> FrozenTrunk:
    """A depth-2, width-32 random trunk; ``scramble`` makes weights large so attention is far from uniform."""
    torch.manual_seed(seed)
    trunk = create_backbone(key, weights="random", **{**TINY, **overrides})
    if scramble:
        with torch.no_grad():
            for param in trunk.parameters():
                param.normal_(0.0, 0.3)
        trunk.weights_checksum = state_dict_checksum(trunk.model)
    return trunk


def images(count: int = 2, size: int = 224, seed: int = 0) -> torch.Tensor:
    return torch.randn(count, 3, size, size, generator=torch.Generator().manual_seed(seed))


def test_registry_lists_the_protocol_table() -> None:
    assert set(BACKBONES) == set(EXPECTED_PREFIX)
    assert BACKBONES["dinov3_vitb16"].timm_name == "vit_base_patch16_dinov3.lvd1689m"
    assert BACKBONES["dinov2_vitb14_reg4"].timm_name == "vit_base_patch14_reg4_dinov2.lvd142m"


@pytest.mark.parametrize("key", sorted(BACKBONES))
def test_every_key_builds_with_its_geometry(key: str) -> None:
    trunk = tiny_trunk(key, depth=1)
    grid = (16, 16) if BACKBONES[key].patch_size == 14 else (14, 14)
    prefix, count = EXPECTED_PREFIX[key], grid[0] * grid[1]
    assert (trunk.grid, trunk.num_prefix_tokens, trunk.depth, trunk.embed_dim) == (grid, prefix, 1, 32)
    assert not any(p.requires_grad for p in trunk.parameters())
    trunk.train()
    assert not trunk.training and not trunk.model.training

    x = images()
    out = trunk(x, early_block=0)
    assert out.tokens.shape == (2, count, 32)
    assert out.block_input.shape == (2, prefix + count, 32)
    assert out.attention.shape == (2, count)
    assert out.early_tokens is not None and out.early_tokens.shape == (2, count, 32)
    # the blocks run by hand reproduce timm's own forward_features, and block 0 is the last one here
    torch.testing.assert_close(out.tokens, trunk.model.forward_features(x)[:, prefix:], rtol=0, atol=1e-6)
    torch.testing.assert_close(out.early_tokens, out.block_input[:, prefix:], rtol=0, atol=0)
    assert trunk(x).early_tokens is None


def test_user_errors_are_protobench_errors() -> None:
    with pytest.raises(ProtobenchError, match="dinov2_vits14.*dinov3_vitb16"):
        create_backbone("dinov2_vitl14")
    with pytest.raises(ProtobenchError, match="multiple of the patch size 14"):
        create_backbone("dinov2_vits14", weights="random", image_size=200, **TINY)
    trunk = tiny_trunk("dinov2_vits14")
    with pytest.raises(ProtobenchError, match="early_block 2"):
        trunk(images(), early_block=2)
    with pytest.raises(ProtobenchError, match="resize"):
        trunk(images(size=112))


@pytest.mark.parametrize("key", ["dinov2_vits14_reg4", "dinov3_vits16"])
def test_attention_matches_q_k_of_the_last_block(key: str) -> None:
    trunk = tiny_trunk(key, scramble=True)
    attn = trunk.model.blocks[-1].attn
    captured: dict[str, object] = {}
    attn.register_forward_pre_hook(lambda m, args, kwargs: captured.update(x=args[0], **kwargs), with_kwargs=True)
    attn.fused_attn = False  # timm's explicit softmax path, whose matrix passes through attn_drop
    attn.attn_drop.register_forward_hook(lambda m, i, o: captured.update(timm=o))
    out = trunk(images())

    x, prefix, heads = captured["x"], trunk.num_prefix_tokens, attn.num_heads
    batch, length, _ = x.shape
    q, k, _ = attn.qkv(x).reshape(batch, length, 3, heads, -1).permute(2, 0, 3, 1, 4)
    q, k = attn.q_norm(q), attn.k_norm(k)
    if key.startswith("dinov3"):  # RoPE on patch tokens only, with timm's helper
        rope = captured["rope"]
        q = torch.cat([q[:, :, :prefix], apply_rot_embed_cat(q[:, :, prefix:], rope, half=attn.rotate_half)], 2)
        k = torch.cat([k[:, :, :prefix], apply_rot_embed_cat(k[:, :, prefix:], rope, half=attn.rotate_half)], 2)
    logits = torch.einsum("bhd,bhnd->bhn", q[:, :, 0], k) * attn.head_dim**-0.5
    reference = logits.softmax(dim=-1)

    torch.testing.assert_close(reference.sum(-1), torch.ones(batch, heads))
    torch.testing.assert_close(out.attention, reference[:, :, prefix:].mean(1), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(out.attention, captured["timm"][:, :, 0, prefix:].mean(1), rtol=1e-5, atol=1e-7)
    assert (out.attention.amax(-1) > 2 * out.attention.amin(-1)).all()  # far from a uniform map
    assert (out.attention.sum(-1) < 1).all()  # the prefix columns hold the rest of each row


@pytest.mark.parametrize("key", ["dinov2_vits14", "dinov3_vits16"])
def test_appended_block_is_identity_and_the_only_thing_that_trains(key: str) -> None:
    trunk = tiny_trunk(key, scramble=True)
    out = trunk(images())
    block = trunk.make_appended_block()
    torch.testing.assert_close(block(out.block_input), out.tokens, rtol=0, atol=1e-5)

    assert all(p.requires_grad for p in block.block.parameters())
    assert not any(p.requires_grad for p in block.norm.parameters())
    assert len(block.trainable_parameters()) == len(list(block.block.parameters()))
    block(out.block_input).square().mean().backward()
    assert block.block.attn.proj.weight.grad.abs().sum() > 0
    assert block.block.mlp.fc2.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in trunk.parameters())
    assert all(p.grad is None for p in block.norm.parameters())
    # a fresh block is independent of the first one and of the trunk's last block
    assert trunk.make_appended_block().block.attn.proj.weight.abs().sum() == 0
    assert trunk.model.blocks[-1].attn.proj.weight.abs().sum() > 0


def test_amp_forward_stays_close_and_float32() -> None:
    trunk = tiny_trunk("dinov3_vits16")
    x = images()
    full, amp = trunk(x), trunk(x, amp_dtype=torch.bfloat16)
    assert amp.tokens.dtype == amp.attention.dtype == torch.float32
    torch.testing.assert_close(amp.tokens, full.tokens, rtol=0.05, atol=0.05)
    torch.testing.assert_close(amp.attention, full.attention, rtol=0.05, atol=1e-3)


@pytest.mark.parametrize("key,suffix", [("dinov2_vits14_reg4", ".safetensors"), ("dinov3_vits16", ".pth")])
def test_weights_file_reproduces_the_saved_model(tmp_path: Path, key: str, suffix: str) -> None:
    source = tiny_trunk(key, seed=1, scramble=True)
    path = tmp_path / f"model{suffix}"
    state = {name: t.contiguous() for name, t in source.model.state_dict().items()}
    save_file(state, path) if suffix == ".safetensors" else torch.save(state, path)

    torch.manual_seed(2)  # the loaded model's own random init must not matter
    loaded = create_backbone(key, weights=path, **TINY)
    assert loaded.weights_checksum == source.weights_checksum
    assert loaded.weights_checksum != tiny_trunk(key, seed=2).weights_checksum
    assert loaded.weights_source == str(path)
    x = images()
    torch.testing.assert_close(loaded(x).tokens, source(x).tokens, rtol=0, atol=0)


def test_weights_file_errors_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.safetensors"
    with pytest.raises(ProtobenchError, match="nowhere.safetensors"):
        create_backbone("dinov2_vits14", weights=missing, **TINY)
    with pytest.raises(ProtobenchError, match="weights file"):
        create_backbone("dinov2_vits14", weights="weights.txt", **TINY)
    wrong = tmp_path / "deeper.safetensors"
    save_file(dict(tiny_trunk("dinov2_vits14", depth=3).model.state_dict()), wrong)
    with pytest.raises(ProtobenchError, match="deeper.safetensors cannot be loaded into dinov2_vits14"):
        create_backbone("dinov2_vits14", weights=wrong, **TINY)
    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(b"not a checkpoint")
    with pytest.raises(ProtobenchError, match="corrupt.safetensors cannot be loaded"):
        create_backbone("dinov2_vits14", weights=corrupt, **TINY)


def test_hf_cache_is_read_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ProtobenchError, match="not in the local Hugging Face cache"):
        create_backbone("dinov2_vits14", **TINY)
    # the layout huggingface_hub writes: models--<org>--<name>/{refs/main, snapshots/<rev>/<file>}
    repo = tmp_path / "models--timm--vit_small_patch14_dinov2.lvd142m"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abcd")
    (repo / "snapshots" / "0123abcd").mkdir(parents=True)
    source = tiny_trunk("dinov2_vits14", seed=3)
    save_file(dict(source.model.state_dict()), repo / "snapshots" / "0123abcd" / "model.safetensors")
    for weights in (None, "hf-cache"):
        assert create_backbone("dinov2_vits14", weights=weights, **TINY).weights_checksum == source.weights_checksum
