"""The precision of a run, checked on the CPU where it can be: the ``precision`` and other fast-path
fields of a run (run id, one clear error, own cache entry), TF32 for the run only, and bf16
autocast with fp32 islands training and evaluating vMFProto; on CUDA (``gpu``, make gpu-check)
bf16 metrics against fp32. (Source: issue 12 item 3, the fast GPU path.)"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import methods.common.ot
import methods.vmfproto.model
import methods.vmfproto.overlap
import methods.vmfproto.vmf
from benchmark.cache.tokens import expected_cache_key, token_source
from benchmark.config import build_run_spec
from benchmark.errors import ProtobenchError
from benchmark.run.prediction import predict
from benchmark.run.training import train
from methods.common.precision import autocast, float32_island, matmul_precision
from methods.testing import SyntheticTokens
from small_runs import BASE, CPU, quiet, vmf
from tiny_token_source import KEY, TinyDataset, tiny_trunk


# ---- the RunSpec fields ------------------------------------------------------------------------
def test_precision_changes_the_run_id_operational_fields_do_not() -> None:
    fp32 = build_run_spec(BASE, where="t")
    assert fp32.precision == "fp32" and fp32.cache_in_memory == "auto" and fp32.checkpoint_every == 1
    assert len({fp32.run_id, *(build_run_spec({**BASE, "precision": p}, where="t").run_id for p in ("tf32", "bf16"))}) == 3
    for operational in ({"cache_in_memory": False}, {"cache_in_memory": True}, {"checkpoint_every": 5},
                        {"deterministic": True}):
        assert build_run_spec({**BASE, **operational}, where="t").run_id == fp32.run_id


@pytest.mark.parametrize("key, value, message", [
    ("precision", "fp16", "precision = 'fp16' must be one of fp32, tf32, bf16"),
    ("precision", 16, "precision = 16 must be of type str"),
    ("cache_in_memory", "yes", "cache_in_memory = 'yes' must be 'auto', true or false"),
    ("cache_in_memory", 1, "cache_in_memory = 1 must be 'auto', true or false"),
    ("checkpoint_every", 0, "checkpoint_every = 0 must be ≥ 1"),
    ("deterministic", "yes", "deterministic = 'yes' must be of type bool"),
])
def test_bad_fast_path_fields_are_one_clear_error(key, value, message) -> None:
    with pytest.raises(ProtobenchError, match=message):
        build_run_spec({**BASE, key: value}, where="t")


def test_precision_and_device_type_name_their_own_cache_entry(tmp_path: Path) -> None:
    trunk, data = tiny_trunk(), TinyDataset()
    fp32 = token_source(trunk, data, cache_dir=tmp_path, backbone_key=KEY, dtype="float32")
    bf16 = token_source(trunk, data, cache_dir=tmp_path, backbone_key=KEY, dtype="float32", precision="bf16")
    assert fp32.entry != bf16.entry
    assert fp32.manifest["key"]["device_type"] == "cpu" and fp32.manifest["key"]["precision"] == "fp32"
    assert bf16.manifest["key"]["precision"] == "bf16"
    a, b = fp32.batch(torch.arange(6), CPU).tokens, bf16.batch(torch.arange(6), CPU).tokens
    assert not torch.equal(a, b)  # the trunk pass ran in bfloat16 (8 mantissa bits: ~0.4 % per rounding)
    assert (a - b).norm() / a.norm() < 0.05
    on_gpu = dict(backbone_key=KEY, weights_checksum="w", dataset_fingerprint="d")
    assert expected_cache_key(**on_gpu).dirname != expected_cache_key(**on_gpu, device_type="cuda").dirname


def test_tf32_is_set_for_the_run_only() -> None:
    before = torch.get_float32_matmul_precision()
    with matmul_precision("tf32"):
        assert torch.get_float32_matmul_precision() == "high" and torch.backends.cudnn.allow_tf32
    with matmul_precision("bf16"):
        assert torch.get_float32_matmul_precision() == before
    assert torch.get_float32_matmul_precision() == before


# ---- bf16 autocast with fp32 islands -----------------------------------------------------------
def test_float32_island_widens_low_precision_arguments_and_turns_autocast_off() -> None:
    seen = {}

    @float32_island
    def inside(x, pair, *, y):
        seen.update(x=x.dtype, pair=[t.dtype for t in pair], y=y.dtype, autocast=torch.is_autocast_enabled("cpu"),
                    product=(x @ x).dtype)
        return x

    half = torch.ones(2, 2, dtype=torch.bfloat16)
    with autocast("bf16", "cpu"):
        assert torch.is_autocast_enabled("cpu") and (half.float() @ half.float()).dtype == torch.bfloat16
        inside(half, (half, torch.ones(1, dtype=torch.float64)), y=torch.ones(1, dtype=torch.float16))
    assert seen == {"x": torch.float32, "pair": [torch.float32, torch.float64], "y": torch.float32,
                    "autocast": False, "product": torch.float32}


def test_bf16_vmfproto_trains_and_evaluates_with_fp32_islands(monkeypatch) -> None:
    """Autocast reaches the appended block (its linear layers compute in bfloat16) while the scores
    log C_D(κ) + κμᵀt, the Sinkhorn solver, the vMF normaliser and the LogDet kernel are computed
    from float32/float64 inputs with autocast off (the OT scores arrive in float32)."""
    seen: dict[str, set] = {"ot_scores_outside": set(), "sinkhorn": set(), "normaliser": set(), "logdet": set(),
                            "block": set()}

    def spy(module, name, key, record):
        original = getattr(module, name)

        def wrapper(*args, **kwargs):
            seen[key].add(record(*args))
            return original(*args, **kwargs)
        monkeypatch.setattr(module, name, wrapper)

    autocast_on = lambda: torch.is_autocast_enabled("cpu")  # noqa: E731
    spy(methods.vmfproto.model, "grouped_hard_assignment", "ot_scores_outside", lambda scores, *a: scores.dtype)
    spy(methods.common.ot, "sinkhorn_log", "sinkhorn", lambda scores, *a: (scores.dtype, autocast_on()))
    spy(methods.vmfproto.vmf, "log_normaliser_and_ratio", "normaliser", lambda kappa, *a: (kappa.dtype, autocast_on()))
    spy(methods.vmfproto.overlap, "vmf_kernel", "logdet", lambda mu, kappa: (mu.dtype, autocast_on()))

    source = SyntheticTokens()
    method = vmf(source)
    for layer in method.block.modules():
        if isinstance(layer, torch.nn.Linear):
            layer.register_forward_hook(lambda module, args, output: seen["block"].add(output.dtype))
    train(method, source, seed=0, batch_size=8, device=CPU, checkpoint_path=None, log=quiet, precision="bf16")
    assert seen["block"] == {torch.bfloat16}, "autocast did not reach the appended block"
    assert seen["ot_scores_outside"] == {torch.float32}
    assert seen["sinkhorn"] == {(torch.float32, False)}
    assert seen["normaliser"] == {(torch.float32, False), (torch.float64, False)}  # scores; LogDet's overlap
    assert seen["logdet"] == {(torch.float64, False)}
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in method.parameters())
    pred = predict(method, source, batch_size=16, device=CPU, precision="bf16")
    assert pred.logits.dtype == pred.maps.dtype == torch.float32
    assert (pred.logits.argmax(1) == pred.labels).float().mean() > 0.5  # 4 classes: chance is 0.25


# ---- GPU ---------------------------------------------------------------------------------------
#: bf16 vs fp32 after the same training: accuracy within 10 points on 4 synthetic classes (48
#: images: one image is 2 points), per-image GT-class maps correlated ≥ 0.95
BF16_ACCURACY_POINTS = 10.0
BF16_MAP_CORRELATION = 0.95


@pytest.mark.gpu
def test_bf16_metrics_match_fp32_on_cuda() -> None:
    cuda = torch.device("cuda")
    source = SyntheticTokens()
    preds = {}
    for precision in ("fp32", "bf16"):
        method = vmf(source, end_to_end_epochs=3)
        train(method, source, seed=0, batch_size=8, device=cuda, checkpoint_path=None, log=quiet, precision=precision)
        preds[precision] = predict(method, source, batch_size=16, device=cuda, precision=precision)
    accuracy = {p: 100.0 * (v.logits.argmax(1) == v.labels).float().mean().item() for p, v in preds.items()}
    assert abs(accuracy["bf16"] - accuracy["fp32"]) <= BF16_ACCURACY_POINTS, accuracy
    a, b = (preds[p].maps.flatten(1) for p in ("fp32", "bf16"))
    a, b = a - a.mean(1, keepdim=True), b - b.mean(1, keepdim=True)
    correlation = (a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1))
    assert correlation.min() >= BF16_MAP_CORRELATION, correlation.min()
