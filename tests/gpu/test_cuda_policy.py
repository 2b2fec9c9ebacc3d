"""The GPU path as CUDA runs it, checked on the CPU: bf16 precision as CUDA autocast applies it
(tests/helpers/cuda_policy.py), the fp32 islands that keep bf16 results right, and the host syncs
of a training step against each method's budget (docs/guides/gpu.md, "Host syncs per training step";
source: issue 23)."""
from __future__ import annotations

import math
import statistics

import pytest
import torch

import methods.mgproto.mixture
import methods.protopnet
from benchmark.cache.frozen import with_frozen_features
from benchmark.run.prediction import predict
from benchmark.run.training import train
from cuda_policy import AutocastPolicy, HostSyncCounter, count_per_step, step_windows
from methods.common.precision import autocast
from methods.registry import build_method
from methods.testing import SyntheticTokens
from short_schedules import ONE_EPOCH, TWO_EPOCHS

CPU = torch.device("cpu")


def quiet(line: str) -> None:
    pass


@pytest.mark.parametrize("name", sorted(TWO_EPOCHS))
def test_bf16_training_of_every_method_calls_no_linalg_under_autocast(name: str) -> None:
    """Every stage and hook of a two-epoch bf16 run, then a bf16 evaluation: every torch.linalg
    call is inside an fp32 island (on CUDA a bf16 input fails, and CUDA autocast does not widen)."""
    source = SyntheticTokens(num_classes=3, images_per_class=4, dim=16)  # no cached gate: computed in place
    torch.manual_seed(0)
    method = build_method(name, source.context(2), **TWO_EPOCHS[name])
    policy = AutocastPolicy()
    with policy:
        train(method, source, seed=0, batch_size=6, device=CPU, checkpoint_path=None, log=quiet, precision="bf16")
        predict(method, source, batch_size=6, device=CPU, precision="bf16")
    assert not policy.violations, dict(policy.violations)


def test_the_policy_catches_a_linalg_call_under_autocast() -> None:
    x = torch.randn(6, 4)
    policy = AutocastPolicy()
    with policy, autocast("bf16", "cpu"):
        torch.linalg.qr(x @ x.T)  # CPU autocast widens this; CUDA's would hand qr a bf16 matrix
    assert policy.violations == {"torch.linalg.qr (under autocast)": 1, "torch.linalg.qr (low-precision input)": 1}


def test_vmfproto_bf16_component_log_posterior_at_d768_is_within_a_tenth_of_a_nat() -> None:
    """log C_D(κ) ≈ −1.5e3 at D = 768: added to κμᵀt in bf16 (spacing 8 there) the scores of a
    patch collapse and log p(j | t, c) moves by nats; in the fp32 island only the bf16 tokens'
    rounding is left (CPU autocast casts addmm/matmul as CUDA does)."""
    source = SyntheticTokens(num_classes=3, images_per_class=1, dim=768, grid=(4, 4))
    torch.manual_seed(0)
    method = build_method("vmfproto", source.context(5))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        method.rho.uniform_(math.log(20.0), math.log(300.0), generator=g)  # κ of trained runs' range
        mu = method.mu.detach()
        near = mu.flatten(0, 1)[torch.randint(0, mu.shape[0] * mu.shape[1], (64,), generator=g)]
        tokens = torch.nn.functional.normalize(near + 0.05 * torch.randn(64, 768, generator=g), dim=-1).view(4, 16, 768)
        exact = torch.log_softmax(method.log_pi + method.component_scores(tokens), dim=-1)
        with autocast("bf16", "cpu"):
            low = torch.log_softmax(method.log_pi + method.component_scores(tokens.bfloat16()), dim=-1)
    assert low.dtype == torch.float32
    assert (low - exact).abs().max() <= 0.1


@pytest.mark.parametrize("distances", [
    lambda z, p: methods.protopnet.squared_distances(z, p),  # B×P×N
    lambda z, p: methods.mgproto.mixture.squared_distances(z, p).transpose(1, 2),  # B×N×P → B×P×N
])
def test_expanded_squared_distances_are_exact_at_a_pushed_patch_in_bf16(distances) -> None:
    """‖z‖² − 2z·p + ‖p‖² at p = z cancels to 0: with the cross term in bf16 it erred by ~0.3
    (ProtoPNet's log-similarity 9.2 → 3.8); in the fp32 island only fp32 rounding is left."""
    g = torch.Generator().manual_seed(0)
    latent = torch.randn(2, 9, 128, generator=g).abs()
    prototypes = latent[:, 4].unsqueeze(1)  # one pushed prototype per image: B×1×K
    with autocast("bf16", "cpu"):
        d = distances(latent.bfloat16().float(), prototypes.bfloat16().float())
    assert d.dtype == torch.float32
    assert d[:, 0, 4].abs().max() <= 1e-3


#: median host syncs per training step allowed for each method; every one not 0 is explained in
#: docs/guides/gpu.md, "Host syncs per training step" (0 unless docs/guides/gpu.md says why)
SYNC_BUDGET = {"protopnet": 0, "tesnet": 0, "evalprotopnet": 0, "deformable_protopnet": 0,
               "vmfproto": 0, "nppp": 0, "mgproto": 0, "pipnet": 0, "kmex": 0, "comfe": 0,
               "linear_probe": 0, "knn": 0, "dinoqpm": 0}


@pytest.mark.parametrize("name", sorted(TWO_EPOCHS))
def test_host_syncs_per_training_step_are_within_the_methods_budget(name: str) -> None:
    """Counted with a dispatch mode over each step of a two-epoch run (loss terms, backward,
    optimiser step, after_step; hooks and epoch ends excluded, host-only reads excluded), on the
    source as the runner hands it over: with the frozen per-image features (vMFProto's gate)."""
    assert set(SYNC_BUDGET) == set(TWO_EPOCHS)
    synthetic = SyntheticTokens(num_classes=3, images_per_class=4, dim=16)
    torch.manual_seed(0)
    method = build_method(name, synthetic.context(2), **TWO_EPOCHS[name])
    source = with_frozen_features(synthetic, method.frozen_features, batch_size=6, device=CPU)
    counter = HostSyncCounter()
    counts = count_per_step(method, counter, lambda: train(method, source, seed=0, batch_size=6, device=CPU,
                                                           checkpoint_path=None, log=quiet))
    assert len(counts) == (2 if name in ONE_EPOCH else 4)  # epochs × 2 batches
    assert statistics.median(counts) <= SYNC_BUDGET[name], dict(counter.where)


def test_the_sync_counter_sees_reads_and_data_dependent_shapes_but_not_host_only_reads() -> None:
    counter = HostSyncCounter()
    x = torch.arange(6.0)
    with counter:
        counter.counting = True
        int(x.max()), x[x > 2], torch.unique_consecutive(x), x.nonzero(), x.repeat_interleave(x.long())
        x.repeat_interleave(x.long(), output_size=15)  # the size given: no sync
        torch.optim.Adam([torch.nn.Parameter(x.clone())]).step()  # step counts on the host (not capturable)
    assert counter.count == 5, dict(counter.where)


#: NPPP's default sign rule ("native", the official pca_lowrank sign) takes it from an SVD, and
#: torch.linalg.svd reads cuSOLVER's status on the host: one sync per step, which the next test
#: pins; the "attention" rule sets the sign itself and computes no SVD.
SYNC_FREE_SETTINGS = {"nppp": {"sign": "attention"}}


@pytest.mark.gpu
def test_nppp_native_sign_is_the_one_sync_and_the_attention_rule_has_none() -> None:
    from methods.nppp.foreground import first_principal_component
    x = torch.randn(64, 16, device="cuda")
    try:
        torch.cuda.set_sync_debug_mode("error")
        first_principal_component(x, 2, torch.Generator().manual_seed(0), backend_sign=False)
        with pytest.raises(RuntimeError, match="synchronizing"):
            first_principal_component(x, 2, torch.Generator().manual_seed(0), backend_sign=True)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(TWO_EPOCHS))
def test_no_training_step_synchronises_on_cuda(name: str) -> None:
    """What the CPU count cannot see (blocking host→device copies, a decomposition's status
    check): CUDA's own sync detector set to raise inside every step of a two-epoch run (batches
    read in step, outside the windows, so that only the step is watched)."""
    cuda = torch.device("cuda")
    synthetic = SyntheticTokens(num_classes=3, images_per_class=4, dim=16)
    torch.manual_seed(0)
    method = build_method(name, synthetic.context(2), **TWO_EPOCHS[name], **SYNC_FREE_SETTINGS.get(name, {}))
    source = with_frozen_features(synthetic, method.frozen_features, batch_size=6, device=cuda)
    steps = []

    def enter() -> None:
        torch.cuda.set_sync_debug_mode("error")

    def leave() -> None:
        torch.cuda.set_sync_debug_mode("default")
        steps.append(True)

    try:
        with step_windows(method, enter, leave):
            train(method, source, seed=0, batch_size=6, device=cuda, checkpoint_path=None, log=quiet, prefetch=0)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert len(steps) == (2 if name in ONE_EPOCH else 4)  # epochs × 2 batches
