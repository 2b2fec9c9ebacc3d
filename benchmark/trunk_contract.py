"""The contract a user trunk (``backbone = "module:factory"``) must keep, checked on two probe
images before any compute is spent: what ``FrozenTrunk.forward`` yields (token, prefix and
attention shapes, docs/design/architecture.md seam 2) and that the cached path gives the live tokens
(a pass is deterministic and per-image; the identity-initialised appended block on the cached
``block_input`` reproduces the final tokens, docs/protocol/harness.md "block expansion")."""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from timm.layers import Attention
from timm.models.eva import EvaAttention

from benchmark.errors import ProtobenchError

if TYPE_CHECKING:  # annotations only: benchmark.backbones calls this module's check
    from benchmark.backbones import FrozenTrunk

#: float32 agreement asked of two passes over the same images (batched vs alone: kernels may
#: reduce in a different order, so not bit-exact)
CONTRACT_ATOL = 1e-5
PROBE_SEED = 0


def check_trunk_contract(trunk: FrozenTrunk) -> None:
    """ProtobenchError naming the first broken clause of the contract, or None."""
    key, prefix = trunk.spec.key, trunk.num_prefix_tokens
    patches = trunk.grid[0] * trunk.grid[1]
    generator = torch.Generator().manual_seed(PROBE_SEED)
    probe = torch.randn(2, 3, trunk.image_size, trunk.image_size, generator=generator)

    def broken(clause: str, fix: str) -> ProtobenchError:
        return ProtobenchError(f"backbone {key!r} breaks the trunk contract: {clause}; {fix}.")

    with torch.no_grad():
        sequence = trunk._embed(probe)[0]
    if sequence.shape[1] != prefix + patches:
        raise broken(f"its embedding yields {sequence.shape[1]} tokens, not num_prefix_tokens + grid = "
                     f"{prefix} + {patches}", "set num_prefix_tokens to the CLS + register tokens it prepends")
    last_attention = trunk.model.blocks[-1].attn
    if trunk.has_cls_token and not isinstance(last_attention, (Attention, EvaAttention)):
        raise broken(f"its last block's attention is a {type(last_attention).__name__}, whose CLS attention "
                     "benchmark.attention.cls_attention cannot read", "use timm's Attention or EvaAttention there")
    live = trunk(probe)
    if tuple(live.tokens.shape) != (2, patches, trunk.embed_dim):
        raise broken(f"tokens are {tuple(live.tokens.shape)}, not B×N×D = (2, {patches}, {trunk.embed_dim})",
                     "keep embed_dim the width of every block's output")
    if live.attention is not None:
        shaped = tuple(live.attention.shape) == (2, patches)
        # softmax over prefix and patch keys: patch shares are ≥ 0 and sum to at most 1
        if not shaped or not bool((live.attention >= 0).all() and (live.attention.sum(dim=1) <= 1 + 1e-5).all()):
            raise broken("the CLS attention is not a B×N softmax share over the patches",
                         "use timm's Attention or EvaAttention in the last block")
    again, alone = trunk(probe), trunk(probe[:1])
    if not torch.allclose(again.tokens, live.tokens, atol=CONTRACT_ATOL, rtol=0):
        raise broken("two passes over the same images give different tokens, so cached tokens would not equal "
                     "live ones", "make the trunk deterministic in eval mode (no noise, no dropout)")
    if not torch.allclose(alone.tokens, live.tokens[:1], atol=CONTRACT_ATOL, rtol=0):
        raise broken("an image's tokens depend on the other images of its batch",
                     "normalise per token or per image, never over the batch")
    with torch.no_grad():
        appended = trunk.make_appended_block().eval()(live.block_input)
    if not torch.allclose(appended, live.tokens, atol=CONTRACT_ATOL, rtol=0):
        raise broken("its last block, with attn.proj and mlp.fc2 zeroed, is not the identity, so the appended "
                     "block on cached tokens would not start from the live ones",
                     "keep every residual branch of a block behind attn.proj or mlp.fc2")
