"""The two pieces of a trunk's attention the suite computes itself: the CLS→patch attention of a
timm attention module (what CLS-attention gates and sign rules read) and the appended block, the
shared trainable adapter of docs/protocol/harness.md ("block expansion") run on cached ``block_input``. The
trunk around them: :mod:`benchmark.backbones`."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from timm.layers import Attention
from timm.layers.pos_embed_sincos import apply_rot_embed_cat
from timm.models.eva import EvaAttention
from torch import Tensor, nn


def _query_key_weights(attn: nn.Module) -> tuple[Tensor, Tensor | None, Tensor, Tensor | None]:
    """(W_q, b_q, W_k, b_k) of a timm attention module, as its own forward builds q and k."""
    if isinstance(attn, Attention):  # vision_transformer.py: one fused qkv Linear, q|k|v rows
        width = attn.attn_dim
        weight, bias = attn.qkv.weight, attn.qkv.bias
        q_b = bias[:width] if bias is not None else None
        k_b = bias[width : 2 * width] if bias is not None else None
        return weight[:width], q_b, weight[width : 2 * width], k_b
    if isinstance(attn, EvaAttention):  # eva.py: fused qkv without bias, biases q_bias / k_bias (zeros)
        if attn.qkv is None:
            k_b = attn.k_proj.bias
            return attn.q_proj.weight, attn.q_proj.bias, attn.k_proj.weight, k_b
        width = attn.num_heads * attn.head_dim
        weight = attn.qkv.weight
        return weight[:width], attn.q_bias, weight[width : 2 * width], attn.k_bias
    raise TypeError(f"unsupported attention module {type(attn).__name__}")


def cls_attention(attn: nn.Module, x: Tensor, rope: Tensor | None, num_prefix_tokens: int) -> Tensor:
    """CLS→patch attention of one timm attention module, averaged over heads, in float32.

    ``x`` is the module's input (the block's ``norm1`` output). Mirrors the unfused path of
    ``Attention.forward`` / ``EvaAttention.forward``: q, k projections, ``q_norm``/``k_norm``,
    RoPE on the non-prefix tokens (DINOv3), ``softmax(q kᵀ · scale)`` over all keys. Returns the
    CLS row (token 0), patch columns only (B×N); registers are keys but not returned.
    """
    batch, length, _ = x.shape
    heads, head_dim = attn.num_heads, attn.head_dim
    q_w, q_b, k_w, k_b = _query_key_weights(attn)
    x = x.float()
    with torch.autocast(x.device.type, enabled=False):
        q = F.linear(x[:, :1], q_w.float(), None if q_b is None else q_b.float())
        k = F.linear(x, k_w.float(), None if k_b is None else k_b.float())
        q = attn.q_norm(q.view(batch, 1, heads, head_dim).transpose(1, 2))
        k = attn.k_norm(k.view(batch, length, heads, head_dim).transpose(1, 2))
        if rope is not None:  # eva.py: RoPE rotates tokens [num_prefix_tokens:]; CLS is never rotated
            patches = apply_rot_embed_cat(k[:, :, num_prefix_tokens:], rope.float(), half=attn.rotate_half)
            k = torch.cat([k[:, :, :num_prefix_tokens], patches], dim=2)
        probs = torch.softmax((q * attn.scale) @ k.transpose(-2, -1), dim=-1)  # B×heads×1×(P+N)
    return probs[:, :, 0, num_prefix_tokens:].mean(dim=1)


class AppendedBlock(nn.Module):
    """The shared trainable adapter of docs/protocol/harness.md ("block expansion").

    ``block``: a copy of the trunk's last block whose attention output projection and MLP output
    layer (weights and biases) are zero, so both residual branches add exactly 0 (LayerScale
    ``ls1/ls2`` of DINOv2 and ``gamma_1/gamma_2`` of DINOv3 multiply that 0): the block is the
    identity at initialisation. ``norm``: a frozen copy of the final norm. Runs on cached
    ``block_input`` without the trunk; DINOv3's RoPE table for the grid is kept as a buffer.
    """

    def __init__(self, block: nn.Module, norm: nn.Module, num_prefix_tokens: int, rope: Tensor | None) -> None:
        super().__init__()
        self.block = block
        self.norm = norm
        self.num_prefix_tokens = num_prefix_tokens
        self.register_buffer("rope", rope, persistent=False)

    def trainable_parameters(self) -> list[nn.Parameter]:
        """The block's parameters (the frozen norm excluded): what an optimiser group takes.
        Decided by structure, not by ``requires_grad`` (the training loop toggles that per stage)."""
        return list(self.block.parameters())

    def forward(self, block_input: Tensor) -> Tensor:
        """B×(P+N)×D pre-norm tokens → B×N×D ``norm(block(x))`` with the prefix removed."""
        x = self.block(block_input) if self.rope is None else self.block(block_input, rope=self.rope)
        return self.norm(x)[:, self.num_prefix_tokens :]
