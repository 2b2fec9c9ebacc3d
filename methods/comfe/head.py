"""ComFe's head on frozen patch tokens: a transformer decoder whose Q learned queries cross-attend
to the tokens, a prediction head that turns each level's queries into unit image prototypes,
and the learned class prototypes (official ``goo/networks/clustering/comfe_head.py``, cited
``head:LINE``, the ``use_xformers=False`` path that the released DINOv2 configs run,
``configs/R/experiment/comfe_dinov2_vits_14_torchvision_flowers.yaml:54``).

Module names follow the official ones (``cluster_class``, ``decoder.layers.i``,
``decoder_positional_encoding``, ``transformer_norm``, ``mask_embed``, ``query_feat``,
``query_embed``), so the official weight-decay rule by parameter name applies unchanged.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class MaskEmbed(nn.Module):
    """Linear → ReLU → Linear → ReLU → Linear (head:193-196, default Linear init)."""

    def __init__(self, dim: int, out_dim: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, out_dim)])

    def forward(self, x: Tensor) -> Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.relu(x)
        return x


class ComFeHead(nn.Module):
    """Decoder, prediction head and class prototypes, with d = D (config ``exp:56-57``).

    ``levels(tokens)`` gives the L+1 levels' (z, l): z B'×Q×D unit image prototypes, l B'×N×Q
    patch logits ⟨z_q, x̂_n⟩/τ1; level 0 reads the queries before any decoder layer.
    """

    def __init__(self, *, dim: int, tokens: int, queries: int, class_rows: int, layers: int, heads: int,
                 feedforward_dim: int, dropout: float, temp_pred: float) -> None:
        super().__init__()
        self.temp_pred = temp_pred
        # RNG order of the official constructor (head:105-220): class prototypes, decoder layers,
        # positional encoding, norm, MLP, query tables, then the re-draws of init_weights
        self.cluster_class = nn.Parameter(F.normalize(torch.randn(class_rows, dim), dim=-1))  # head:105-107
        layer = nn.TransformerDecoderLayer(d_model=dim, nhead=heads, dim_feedforward=feedforward_dim,
                                           dropout=dropout, batch_first=True)  # head:114-125: post-norm, ReLU
        self.decoder = nn.TransformerDecoder(layer, num_layers=layers)  # deep copies; layers called one by one
        self.decoder_positional_encoding = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)  # head:182
        self.transformer_norm = nn.LayerNorm(dim)  # head:183, shared by every level
        self.mask_embed = MaskEmbed(dim, dim)
        self.query_feat = nn.Embedding(queries, dim)  # head:200-202, N(0, 1)
        self.query_embed = nn.Embedding(queries, dim)
        for parameter in self.decoder.parameters():  # init_weights, head:208-220
            if parameter.dim() > 1:
                nn.init.xavier_normal_(parameter)
        nn.init.trunc_normal_(self.query_embed.weight, std=0.02)  # head:220 (cut at ±2 absolute)

    def predict(self, queries: Tensor, unit_tokens: Tensor) -> tuple[Tensor, Tensor]:
        """Prediction head (head:224-235, 308-314): z = normalize(MLP(LN(q))), l = ⟨z/τ1, x̂⟩ as B'×N×Q."""
        z = F.normalize(self.mask_embed(self.transformer_norm(queries)), dim=-1)
        return z, torch.einsum("bqd,bnd->bnq", z / self.temp_pred, unit_tokens)

    def levels(self, tokens: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Every level's (z, l) (head:237-296), in float32 (the official head disables autocast,
        head:243-244). Each layer reads tgt = q + query_embed (the embedding re-enters the residual
        stream at every layer) and memory = tokens + positional encoding (keys and values)."""
        x = tokens.float()
        unit = F.normalize(x, dim=-1)
        batch = x.shape[0]
        queries = self.query_feat.weight.unsqueeze(0).expand(batch, -1, -1)
        embedding = self.query_embed.weight.unsqueeze(0).expand(batch, -1, -1)
        memory = x + self.decoder_positional_encoding
        out = [self.predict(queries, unit)]
        for layer in self.decoder.layers:
            queries = layer(queries + embedding, memory)
            out.append(self.predict(queries, unit))
        return out
