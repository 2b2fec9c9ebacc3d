"""The behaviour probe: a method's whole schedule on a micro set of synthetic tokens, then its
evaluation outputs, deterministic to the last bit on one machine and to rounding across machines.

What it runs, per configuration (the method's defaults and each variant its declaration names):

- **data**: :data:`PROBE` (3 classes, J = 2, 132 training and 12 test images, D = 64 on a 3 × 3 grid),
  drawn by NumPy's legacy ``RandomState`` (its stream is frozen by NumPy's compatibility policy,
  NEP 19), class parts in a 2 × 2 foreground blob as in :mod:`methods.testing`;
- **trunk side**: an identity-initialised ViT block (timm ``Block``, its weights from the same
  stream) with a frozen final norm, as the harness appends to a real trunk;
- **training**: the harness's own loop (:func:`benchmark.run.training.train`) with the method's
  frozen per-image features computed once (:func:`benchmark.cache.frozen.with_frozen_features`),
  seed 0, batches of 32: every stage and event of the schedule (push, EM, last-layer phases), never
  compressed beyond what the declaration's ``probe_args`` allow (fewer epochs of a phase that
  repeats one step; every event still happens); each variant the declaration names runs too;
- **outputs**: logits, the ground-truth class's maps and contributions, the logits with each
  image's top prototype switched off, and the global features, on the test images.

It runs on one CPU thread in float64 (every parameter and token; an output the method casts to
float32 stays float32). An adapter that computes in float32 by design (its official code casts its
inputs, ``tokens.float()``) cannot run in float64: it is probed in float32, and the lock records
which (:mod:`benchmark.behaviour.lock`).

**Pinned arithmetic.** The probe runs in a child process started with :data:`PINNED_ARITHMETIC`:
ATen's scalar kernels (no vector width of this CPU), MKL's Conditional Numerical Reproducibility
(``MKL_CBWR=COMPATIBLE``: the same GEMM results on every x86-64 CPU), oneDNN at its baseline ISA
and one thread, so the same code gives the same bits on another x86-64 CPU (under one torch
build), even for a method whose training amplifies a last-bit difference (TesNet's orthogonality
term at its kink: 3e-3 between MKL's AVX2 and AVX-512 kernels unpinned, 0 pinned). ``python -m
benchmark.behaviour.child`` is that child: it probes the methods it is given under coverage.py
and writes each one's outputs, dtype and executed lines to a folder.
"""
from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from timm.models.vision_transformer import Block
from torch import Tensor, nn

from benchmark.behaviour.setup import OUTPUTS, PROBE, PROBE_DTYPES, ProbeSetup, configurations
from benchmark.cache.frozen import with_frozen_features
from benchmark.cache.tokens import TokenSource
from benchmark.run.training import TrainingInterrupted, train
from methods.base import TOKEN_FIELDS, MethodContext, PrototypeMethod, TokenBatch
from methods.registry import build_method


class MicroTokens(TokenSource):
    """Synthetic trunk outputs of ``per_class`` images per class (a TokenSource): each image has a
    2 × 2 foreground blob whose patches carry its class's part directions plus noise, the other
    patches shared clutter; the CLS attention is higher on the blob; ``tokens`` is the frozen
    final norm of ``block_input`` (CLS first), as a real trunk gives."""

    def __init__(self, setup: ProbeSetup, per_class: int, seed: int, dtype: torch.dtype) -> None:
        draw = np.random.RandomState(seed)
        h, w = setup.grid
        c, d, n = setup.num_classes, setup.embed_dim, setup.num_classes * per_class
        parts = draw.standard_normal((c, setup.parts, d))
        clutter = draw.standard_normal((4, d))
        raw = clutter[draw.randint(0, 4, (n, h * w))] + setup.noise * draw.standard_normal((n, h * w, d))
        attention = np.full((n, h * w), 0.1)
        labels = np.repeat(np.arange(c), per_class)
        for i in range(n):
            top, left = draw.randint(0, h - 1), draw.randint(0, w - 1)
            for r in range(top, top + 2):
                for col in range(left, left + 2):
                    raw[i, r * w + col] = parts[labels[i], (r - top + col - left) % setup.parts] \
                        + setup.noise * draw.standard_normal(d)
                    attention[i, r * w + col] = 1.0 + draw.uniform()
        attention /= attention.sum(axis=1, keepdims=True)
        cls = draw.standard_normal((n, 1, d))
        self.block_input = torch.from_numpy(np.concatenate([cls, raw], axis=1)).to(dtype)
        self.tokens = nn.functional.layer_norm(self.block_input, (d,))[:, 1:]
        self.attention = torch.from_numpy(attention).to(dtype)
        self.labels = torch.from_numpy(labels)
        self.grid = setup.grid
        self.early = True  # whether batches carry early-block tokens (the harness: the method's needs_early_tokens)

    def __len__(self) -> int:
        return len(self.labels)

    def batch(self, indices: Tensor, device: torch.device | str = "cpu", *,
              reads: frozenset[str] = TOKEN_FIELDS) -> TokenBatch:
        return TokenBatch(tokens=self.tokens[indices], block_input=self.block_input[indices],
                          attention=self.attention[indices], labels=self.labels[indices], indices=indices,
                          grid=self.grid, early_tokens=self.tokens[indices] if self.early else None).only(reads)


class MicroBlock(nn.Module):
    """The appended block of the probe: a timm ViT block whose attention output and second MLP
    layer start at zero (identity at initialisation, as the harness's copy of a trunk's last block
    starts from that block), then a frozen LayerNorm; B×(1+N)×D → B×N×D."""

    def __init__(self, dim: int, seed: int) -> None:
        super().__init__()
        self.block = Block(dim, num_heads=2)
        draw = np.random.RandomState(seed)
        with torch.no_grad():
            for parameter in self.block.parameters():
                parameter.copy_(torch.from_numpy(0.05 * draw.standard_normal(tuple(parameter.shape))))
            for layer in (self.block.attn.proj, self.block.mlp.fc2):
                layer.weight.zero_()
                layer.bias.zero_()
        self.norm = nn.LayerNorm(dim, elementwise_affine=False)

    def trainable_parameters(self) -> list[nn.Parameter]:
        return list(self.block.parameters())

    def forward(self, block_input: Tensor) -> Tensor:
        return self.norm(self.block(block_input))[:, 1:]


@contextmanager
def probe_environment(dtype: str) -> Iterator[torch.dtype]:
    """One thread, ``dtype`` as torch's default, the global RNG state and both restored after."""
    chosen = getattr(torch, dtype)
    threads, default = torch.get_num_threads(), torch.get_default_dtype()
    with torch.random.fork_rng(devices=[]):
        torch.set_num_threads(1)
        torch.set_default_dtype(chosen)
        try:
            yield chosen
        finally:
            torch.set_default_dtype(default)
            torch.set_num_threads(threads)


def _context(setup: ProbeSetup) -> MethodContext:
    return MethodContext(num_classes=setup.num_classes, prototypes_per_class=setup.prototypes_per_class,
                         embed_dim=setup.embed_dim, grid=setup.grid, num_prefix_tokens=1, depth=4,
                         make_block=lambda: MicroBlock(setup.embed_dim, setup.block_seed), seed=setup.seed)


@torch.no_grad()
def _outputs(method: PrototypeMethod, source: TokenSource) -> dict[str, np.ndarray]:
    """The evaluation outputs of the trained ``method`` on every image of ``source``, as float64."""
    method.eval()
    batch = source.batch(torch.arange(len(source)), "cpu", reads=method.reads)
    contributions = method.prototype_contributions(batch, batch.labels)
    top = torch.zeros_like(contributions, dtype=torch.bool).scatter_(1, contributions.argmax(1, keepdim=True), True)
    values = {"logits": method.logits(batch), "maps": method.activation_maps(batch, batch.labels),
              "contributions": contributions, "logits_without_top": method.logits_without(batch, batch.labels, top),
              "global_features": method.global_features(batch)}
    return {name: values[name].detach().numpy().copy() for name in OUTPUTS}


def _trained(method: str, args: Mapping[str, Any], tokens: MicroTokens, checkpoint: Path,
             stop_after_epoch: int | None, setup: ProbeSetup) -> PrototypeMethod:
    """``method`` built as a run builds it (seeded with the run's seed) and trained by the harness's
    loop, checkpointing every epoch; ``stop_after_epoch``: interrupted there (the checkpoint stays)."""
    torch.manual_seed(setup.seed)
    model = build_method(method, _context(setup), **args)
    device = torch.device("cpu")
    tokens.early = model.needs_early_tokens  # a run's training cache holds them only then
    source = with_frozen_features(tokens, model.frozen_features, batch_size=len(tokens), device=device)
    try:
        train(model, source, seed=setup.seed, batch_size=setup.batch_size, device=device, checkpoint_path=checkpoint,
              log=lambda line: None, stop_after_epoch=stop_after_epoch,
              on_epoch_end=lambda record: None)  # a run's epoch log is told of each epoch
    except TrainingInterrupted:
        pass
    return model


def probe_configuration(method: str, args: Mapping[str, Any], dtype: str,
                        setup: ProbeSetup = PROBE) -> dict[str, np.ndarray]:
    """Train ``method`` with ``args`` on the micro problem and return its outputs (the dtype the
    method gives them in: float64, or float32 where it casts). The training is interrupted after
    half its epochs and resumed from the checkpoint by a method built anew, as a preempted run
    is (the harness resumes exactly: benchmark/run/training.py), so resuming is probed too."""
    with probe_environment(dtype) as chosen, tempfile.TemporaryDirectory(prefix="protobench-probe-") as folder:
        train_tokens = MicroTokens(setup, setup.train_per_class, setup.train_data_seed, chosen)
        test_tokens = MicroTokens(setup, setup.test_per_class, setup.test_data_seed, chosen)
        checkpoint = Path(folder) / "checkpoint.pt"
        half = sum(stage.epochs for stage in stand_in_stages(method, args, setup)) // 2
        if half > 0:
            _trained(method, args, train_tokens, checkpoint, half, setup)
        model = _trained(method, args, train_tokens, checkpoint, None, setup)
        test_source = with_frozen_features(test_tokens, model.frozen_features, batch_size=len(test_tokens),
                                           device=torch.device("cpu"))
        return _outputs(model, test_source)


def stand_in_stages(method: str, args: Mapping[str, Any], setup: ProbeSetup) -> list[Any]:
    """The stages of ``method`` with ``args`` on the micro problem (a method built only to read them)."""
    with torch.random.fork_rng(devices=[]):
        return build_method(method, _context(setup), **args).stages()


def run_probe(method: str, dtype: str | None = None,
              names: tuple[str, ...] | None = None) -> tuple[str, dict[str, dict[str, np.ndarray]]]:
    """(dtype used, configuration → output → array) of every configuration of ``method`` (``names``:
    of those only). Without ``dtype`` the first of :data:`PROBE_DTYPES` the method runs in (an
    adapter that casts its inputs to float32 fails in float64); the exception of the first dtype
    when none runs."""
    tried = PROBE_DTYPES if dtype is None else (dtype,)
    chosen = {name: args for name, args in configurations(method).items() if names is None or name in names}
    first: Exception | None = None
    for candidate in tried:
        try:
            return candidate, {name: probe_configuration(method, args, candidate) for name, args in chosen.items()}
        except Exception as err:  # noqa: BLE001 - the next dtype, or the first failure reported
            first = first or err
    assert first is not None
    raise first
