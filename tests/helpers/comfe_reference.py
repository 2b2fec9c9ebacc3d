"""An independent reference of ComFe's official behaviour (``emannix/comfe-component-features``
@ 2feeb21, ``goo/networks/clustering/comfe_head.py`` = ``head:LINE``; the ``use_xformers=False``
path) for the equality tests: plain tensor arithmetic and loops over a parameter dict keyed by
the official parameter names, never the adapter's code. Dropout is taken as 0 (eval, or a
dropout-0 training configuration)."""
from __future__ import annotations

import math

import torch
from torch import Tensor

BCE_CLAMP = 1e-6


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def attention(query: Tensor, key: Tensor, value: Tensor, p: dict[str, Tensor], prefix: str, heads: int) -> Tensor:
    """torch MultiheadAttention (batch_first) written out: packed in-projection, per-head scaled dot products."""
    w_q, w_k, w_v = p[f"{prefix}.in_proj_weight"].chunk(3)
    b_q, b_k, b_v = p[f"{prefix}.in_proj_bias"].chunk(3)
    q, k, v = query @ w_q.T + b_q, key @ w_k.T + b_k, value @ w_v.T + b_v
    batch, lq, dim = q.shape
    hd = dim // heads
    out = torch.zeros_like(q)
    for h in range(heads):
        cols = slice(h * hd, (h + 1) * hd)
        weights = torch.softmax(q[..., cols] @ k[..., cols].transpose(1, 2) / math.sqrt(hd), dim=-1)
        out[..., cols] = weights @ v[..., cols]
    return out @ p[f"{prefix}.out_proj.weight"].T + p[f"{prefix}.out_proj.bias"]


def decoder_layer(tgt: Tensor, memory: Tensor, p: dict[str, Tensor], prefix: str, heads: int) -> Tensor:
    """Post-norm nn.TransformerDecoderLayer (torch defaults, head:114-125): self-attention, then
    cross-attention, then the ReLU feed-forward, each residual then LayerNorm."""
    ln = lambda x, i: layer_norm(x, p[f"{prefix}.norm{i}.weight"], p[f"{prefix}.norm{i}.bias"])  # noqa: E731
    a = ln(tgt + attention(tgt, tgt, tgt, p, f"{prefix}.self_attn", heads), 1)
    b = ln(a + attention(a, memory, memory, p, f"{prefix}.multihead_attn", heads), 2)
    hidden = torch.relu(b @ p[f"{prefix}.linear1.weight"].T + p[f"{prefix}.linear1.bias"])
    return ln(b + hidden @ p[f"{prefix}.linear2.weight"].T + p[f"{prefix}.linear2.bias"], 3)


def unit(x: Tensor) -> Tensor:
    """F.normalize: x / max(‖x‖, 1e-12)."""
    return x / x.norm(dim=-1, keepdim=True).clamp(min=1e-12)


def prediction(queries: Tensor, p: dict[str, Tensor]) -> Tensor:
    """head:224-235: LN → Linear, ReLU, Linear, ReLU, Linear → unit."""
    x = layer_norm(queries, p["transformer_norm.weight"], p["transformer_norm.bias"])
    for i in range(3):
        x = x @ p[f"mask_embed.layers.{i}.weight"].T + p[f"mask_embed.layers.{i}.bias"]
        if i < 2:
            x = torch.relu(x)
    return unit(x)


def levels(tokens: Tensor, p: dict[str, Tensor], *, layers: int, heads: int, temp_pred: float) -> list[tuple[Tensor, Tensor]]:
    """(z, l) of every level, l[b, n, q] = Σ_d (z[b,q,d]/τ1)·x̂[b,n,d] by an explicit loop over q."""
    batch = tokens.shape[0]
    xhat = unit(tokens)
    q = p["query_feat.weight"].unsqueeze(0).repeat(batch, 1, 1)
    e = p["query_embed.weight"].unsqueeze(0).repeat(batch, 1, 1)
    memory = tokens + p["decoder_positional_encoding"]
    out = []
    for i in range(layers + 1):
        if i > 0:
            q = decoder_layer(q + e, memory, p, f"decoder.layers.{i - 1}", heads)
        z = prediction(q, p)
        logits = torch.stack([(xhat * (z[:, k, None, :] / temp_pred)).sum(-1) for k in range(z.shape[1])], dim=-1)
        out.append((z, logits))
    return out


def membership(num_classes: int, per_class: int, background: int, smoothing: float) -> Tensor:
    """head:86-110 with the background class: row r < k·(C+1) ↦ class r mod (C+1), then G background rows."""
    total = num_classes + 1
    rows = per_class * total + background
    m = torch.full((rows, total), smoothing / total)
    for r in range(rows):
        c = r % total if r < per_class * total else num_classes
        m[r, c] += 1.0 - smoothing
    return m


def scores(z: Tensor, logits: Tensor, classes: Tensor, member: Tensor, temp_class: float) -> dict[str, Tensor]:
    """head:352-367 by loops: A (softmax over q), R (softmax over k), Π = R·M, P = A·Π, s = max_n P."""
    a = torch.exp(logits) / torch.exp(logits).sum(-1, keepdim=True)
    c = unit(classes)
    cos = torch.stack([torch.stack([torch.stack([(z[b, q] * c[k]).sum() for k in range(c.shape[0])])
                                    for q in range(z.shape[1])]) for b in range(z.shape[0])]) / temp_class
    r = torch.exp(cos - cos.amax(-1, keepdim=True))
    r = r / r.sum(-1, keepdim=True)
    pi = torch.einsum("bqk,kt->bqt", r, member)
    patch = sum(a[:, :, q, None] * pi[:, None, q, :] for q in range(z.shape[1]))  # Σ_q A_bnq Π_bqt
    return {"A": a, "R": r, "Pi": pi, "P": patch, "s": patch.max(dim=1).values}


def bce(scores_: Tensor, y: Tensor) -> Tensor:
    """Σ_t of the stable BCE-with-logits form at x = log(s / clamp(1 − s, 1e-6, 1)), mean over rows."""
    x = torch.log(scores_ / (1 - scores_).clamp(BCE_CLAMP, 1.0))
    per = torch.clamp(x, min=0) - x * y + torch.log1p(torch.exp(-x.abs()))
    return per.sum(1).mean()


def targets(labels: Tensor, num_classes: int) -> Tensor:
    y = torch.zeros(len(labels), num_classes + 1)
    for b, label in enumerate(labels.tolist()):
        y[b, label] = 1.0
        y[b, num_classes] = 1.0
    return y


def image_contrast(z: Tensor, tau: float) -> Tensor:
    total, rows = 0.0, 0
    for b in range(z.shape[0]):
        s = z[b] @ z[b].T / tau
        for q in range(z.shape[1]):
            total = total - (s[q, q] - torch.logsumexp(s[q], 0))
            rows += 1
    return total / rows


def patch_consistency(a: Tensor) -> Tensor:
    """Pairs patch n of image b in the first half with patch n of image b in the second half."""
    half = a.shape[0] // 2
    terms = [-torch.log((a[b, n] * a[b + half, n]).sum()) for b in range(half) for n in range(a.shape[1])]
    return torch.stack(terms).mean()


def class_contrast(classes: Tensor, tau: float) -> Tensor:
    c = unit(classes)
    s = c @ c.T / tau
    probs = torch.exp(s - torch.logsumexp(s, 1, keepdim=True)).clamp(min=BCE_CLAMP)
    return -torch.log(torch.diagonal(probs)).mean()


def pz(logits: Tensor) -> Tensor:
    return -torch.log(torch.exp(logits).sum(-1)).mean()


def loss_terms(tokens: Tensor, labels: Tensor, p: dict[str, Tensor], *, cfg: dict, terms: tuple[str, ...]) -> dict[str, Tensor]:
    """Every term of the total (meth:69) averaged over the L+1 levels (head:418-424)."""
    member = membership(cfg["C"], cfg["k"], cfg["G"], cfg["eps"])
    y = targets(labels, cfg["C"])
    per_level: dict[str, list[Tensor]] = {t: [] for t in terms}
    for z, logits in levels(tokens, p, layers=cfg["L"], heads=cfg["heads"], temp_pred=cfg["tau1"]):
        out = scores(z, logits, p["cluster_class"], member, cfg["tau2"])
        values = {"pyz": lambda: bce(out["s"], y), "pyp": lambda: bce(out["Pi"].max(1).values, y),
                  "pz": lambda: pz(logits), "image_contrast": lambda: image_contrast(z, cfg["tauc"]),
                  "patch_consistency": lambda: patch_consistency(out["A"]),
                  "class_contrast": lambda: class_contrast(p["cluster_class"], cfg["tauc"])}
        for t in terms:
            per_level[t].append(values[t]())
    return {t: torch.stack(v).mean() for t, v in per_level.items()}


def warmup_cosine(step: int, total: int, per_epoch: int, *, warmup_epochs: float, ref: float, start: float,
                  final: float, end: float = 0.8) -> float:
    """PAWS' schedule in absolute learning rates (goo/scheduler/paws_cosine_annealing_with_warmup.py)."""
    w = warmup_epochs * per_epoch
    t = end * total - w
    if step < w:
        return start + (step / w) * (ref - start)
    if step <= end * total:
        return final + (ref - final) * 0.5 * (1 + math.cos(math.pi * (step - w) / t))
    return final


def adamw_steps(params: dict[str, Tensor], grads_of, steps: int, lrs: list[float], *, wd: float, clip: float,
                betas=(0.9, 0.999), eps: float = 1e-8) -> tuple[dict[str, Tensor], list[dict[str, Tensor]]]:
    """``steps`` steps of: gradients → clip_grad_norm_(clip) over all → AdamW (wd 0 for names with
    'bias' or 'bn'); returns the parameters and each step's clipped gradients."""
    p = {k: v.detach().clone() for k, v in params.items()}
    m = {k: torch.zeros_like(v) for k, v in p.items()}
    v2 = {k: torch.zeros_like(v) for k, v in p.items()}
    clipped = []
    for t in range(1, steps + 1):
        g = grads_of(p, t - 1)
        norm = math.sqrt(sum(float((x.double() ** 2).sum()) for x in g.values()))
        coef = min(1.0, clip / (norm + 1e-6))
        g = {k: x * coef for k, x in g.items()}
        clipped.append(g)
        lr = lrs[t - 1]
        for k in p:
            decay = 0.0 if ("bias" in k or "bn" in k) else wd
            p[k] = p[k] * (1 - lr * decay)
            m[k] = betas[0] * m[k] + (1 - betas[0]) * g[k]
            v2[k] = betas[1] * v2[k] + (1 - betas[1]) * g[k] ** 2
            m_hat = m[k] / (1 - betas[0] ** t)
            v_hat = v2[k] / (1 - betas[1] ** t)
            p[k] = p[k] - lr * m_hat / (torch.sqrt(v_hat) + eps)
    return p, clipped
