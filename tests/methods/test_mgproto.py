"""MGProto: Gaussian densities, memory bank, EM, mining, push, schedule, and training on synthetic tokens."""
import copy
import math

import pytest
import torch
import torch.nn.functional as F

from benchmark.run.steps import SourceTrainData
from benchmark.run.training import TrainingInterrupted, train
from methods.contract import check_method
from methods.diagnostics import collect_diagnostics
from methods.mgproto import MGProto
from methods.mgproto.model import MEMORY_CAPACITY, scaled_mine_levels
from methods.mgproto.memory import ClassMemoryBank, unique_top1_features
from methods.mgproto.mixture import (
    EMState,
    em_update,
    log_density,
    mined_logits,
    mixture_log_likelihood,
)
from methods.mgproto.push import unique_image_choice
from methods.testing import SyntheticTokens

CPU = torch.device("cpu")


def quiet(line: str) -> None:
    pass


def test_contract() -> None:
    check_method("methods.mgproto:MGProto")


def test_log_density_is_the_gaussian_with_sigma_one_over_sqrt_two_pi() -> None:
    g = torch.Generator().manual_seed(0)
    x, means = torch.randn(5, 8, generator=g, dtype=torch.float64), torch.randn(3, 8, generator=g, dtype=torch.float64)
    sigma = 1.0 / math.sqrt(2.0 * math.pi)
    full = torch.distributions.Normal(means[None], sigma).log_prob(x[:, None]).sum(-1)  # all constants kept
    assert torch.allclose(log_density(x, means), full)


def _two_cluster_bank(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Two classes, each a bank of 200 unit vectors around two directions, and offset means."""
    g = torch.Generator().manual_seed(seed)
    centres = F.normalize(torch.randn(2, 2, 16, generator=g), dim=-1)
    points = centres[:, torch.arange(200) % 2] + 0.1 * torch.randn(2, 200, 16, generator=g)
    means = F.normalize(centres + 0.5 * torch.randn(2, 2, 16, generator=g), dim=-1)
    return F.normalize(points, dim=-1), means


def _fresh_state(means: torch.Tensor, priors: torch.Tensor) -> EMState:
    return EMState(means.clone(), priors.clone(), torch.zeros_like(means), torch.zeros_like(means),
                   torch.zeros((), dtype=torch.long))


BOTH = torch.tensor([True, True])


def test_em_step_increases_bank_log_likelihood_and_keeps_priors_on_simplex() -> None:
    bank, means = _two_cluster_bank()
    priors = torch.tensor([[0.9, 0.1], [0.3, 0.7]])
    state = _fresh_state(means, priors)
    history = [mixture_log_likelihood(bank, state.means, state.priors)]
    for _ in range(30):
        state = em_update(bank, state, BOTH, loops=3, alpha=0.1, lr=3e-3, diversity_weight=1.0, prior_momentum=0.99)
        history.append(mixture_log_likelihood(bank, state.means, state.priors))
        assert torch.allclose(state.priors.sum(-1), torch.ones(2)) and bool((state.priors >= 0).all())
    lls = torch.stack(history)  # (steps+1)×K
    assert bool((lls[1] > lls[0]).all()), "one EM update raises every class's bank log-likelihood"
    assert bool((lls[1:] >= lls[:-1] - 1e-6).all()) and bool((lls[-1] > lls[0] + 0.5).all())
    assert int(state.steps) == 180  # one step of the shared Adam per loop and class


def official_log_prob(x: torch.Tensor, mu: torch.Tensor, eps: float = 1e-10) -> torch.Tensor:
    """model.py ``_estimate_log_prob`` for points ``x`` (M×d) and means ``mu`` (J×d), σ = 1/√(2π) per
    dimension (``prototype_covs``): ``−½d log 2π − Σ log(σ + eps) − ½ Σ ((x − μ)/(σ + eps))²``, M×J."""
    var = torch.full_like(mu, 1 / math.sqrt(2 * math.pi))[None]  # the official name of σ
    diff = x[:, None] - mu[None]
    log_p = ((diff / (var + eps)) ** 2).sum(-1)
    log_sigma = torch.log(var + eps).sum(-1)
    return -0.5 * x.shape[-1] * math.log(2 * math.pi) - log_sigma - 0.5 * log_p


class _OfficialGMM:
    """Reference with the official structure (model.py): one ``torch.optim.Adam`` over the whole
    C×J×d mean tensor, the priors, and ``memory_updated_cls``: every enqueue sets its classes'
    flags; ``update_GMM`` visits the classes in ascending order, clears each flagged class's flag,
    skips it if its bank is not full, else runs ``loops`` EM steps on it. An EM step: E-step with
    smoothing (densities of ``official_log_prob``), loss −mean Σ_k r (log N + log π) + mean_{i≠j} exp(−‖μ_i − μ_j‖²) on ``means[c]`` of
    the full parameter, zero_grad / backward / step, then the prior momentum update."""

    def __init__(self, means: torch.Tensor, priors: torch.Tensor) -> None:
        self.mu = torch.nn.Parameter(means.clone())
        self.optimizer = torch.optim.Adam([self.mu], lr=3e-3)
        self.priors = priors.clone()
        self.updated = torch.zeros(len(means), dtype=torch.bool)

    def step(self, bank: torch.Tensor, c: int) -> None:
        mu, eye = self.mu, torch.eye(self.mu.shape[1])
        with torch.no_grad():
            resp = torch.softmax(official_log_prob(bank, mu[c]) + torch.log(self.priors[c] + 1e-10), dim=-1)
            resp = (resp + 0.1) / (resp + 0.1).sum(-1, keepdim=True)
        log_lik = official_log_prob(bank, mu[c]) + torch.log(self.priors[c] + 1e-10)
        pair = ((mu[c][:, None] - mu[c][None]) ** 2).sum(-1)
        loss = -(resp * log_lik).sum(1).mean(0) + (torch.exp(-pair) * (1 - eye)).sum() / (1 - eye).sum()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.priors[c] = 0.99 * self.priors[c] + 0.01 * (resp.sum(0) + 1e-10) / len(bank)

    def enqueue(self, labels: torch.Tensor) -> None:
        for c in labels.unique().tolist():
            self.updated[c] = True

    def update_gmm(self, banks: torch.Tensor, full: torch.Tensor, loops: int) -> None:
        for c in range(len(self.updated)):
            if not self.updated[c]:
                continue
            self.updated[c] = False
            if not full[c]:
                continue
            for _ in range(loops):
                self.step(banks[c], c)

    @property
    def steps(self) -> int:
        return int(self.optimizer.state[self.mu]["step"]) if self.optimizer.state else 0


def test_em_is_the_official_loop_with_one_adam_over_all_means() -> None:
    bank, means = _two_cluster_bank(1)
    bank = torch.cat([bank, bank.flip(0)])  # four classes
    means = torch.cat([means, means.flip(0)])
    priors = torch.tensor([[0.5, 0.5], [0.3, 0.7], [0.6, 0.4], [0.5, 0.5]])
    reference = _OfficialGMM(means, priors)
    for _ in range(4):  # 4 earlier steps on class 0 give the moments a history, then EM for classes 1 and 3
        reference.step(bank[0], 0)
    history_means = reference.mu.detach().clone()
    reference.enqueue(torch.tensor([3, 1, 3]))
    reference.update_gmm(bank, torch.ones(4, dtype=torch.bool), loops=3)
    state = _fresh_state(means, priors)
    state = em_update(bank, state, torch.tensor([True, False, False, False]), loops=4, alpha=0.1, lr=3e-3,
                      diversity_weight=1.0, prior_momentum=0.99)
    assert torch.allclose(state.means, history_means, atol=1e-6)
    new = em_update(bank, state, torch.tensor([False, True, False, True]), loops=3, alpha=0.1, lr=3e-3,
                    diversity_weight=1.0, prior_momentum=0.99)
    assert int(new.steps) == reference.steps == 4 + 6
    assert torch.allclose(new.means, reference.mu.detach(), atol=1e-6)
    assert torch.allclose(new.priors, reference.priors, atol=1e-7)
    # class 0 is not in the batch but moves through the Adam moments it built up; class 2 never had any
    assert not torch.allclose(new.means[0], state.means[0], atol=1e-6)
    assert torch.equal(new.means[2], means[2]) and torch.equal(new.priors[0], state.priors[0])


def test_first_em_updates_every_class_enqueued_since_training_began() -> None:
    # official model.py: every enqueue sets memory_updated_cls[c] and only update_GMM clears it, so
    # with 20 classes and batch 8 the first EM updates all 20 classes, the next ones their batch's
    source = SyntheticTokens(num_classes=20, images_per_class=2, dim=16, grid=(4, 4))
    source.tokens, source.block_input = source.tokens.double(), source.block_input.double()
    method = MGProto(source.context(3), memory_capacity=2, em_start_epoch=1).double()  # float64: no rounding noise
    stage, reference = method.stages()[0], _OfficialGMM(method.means, method.priors)
    batches = torch.randperm(len(source), generator=torch.Generator().manual_seed(0)).split(8)
    em_calls = []
    for epoch in range(2):
        for indices in batches:
            batch = source.batch(indices)
            method.after_step(batch, stage, epoch)  # enqueue, then EM if this epoch runs it
            reference.enqueue(batch.labels)
            if bool(method.em_active):
                reference.update_gmm(method.memory.features, method.memory.size == 2, loops=3)
                em_calls.append(len(batch.labels.unique()))
                assert int(method.em_steps) == reference.steps
                assert torch.allclose(method.means, reference.mu.detach(), rtol=0, atol=1e-12)
                assert torch.allclose(method.priors, reference.priors, rtol=0, atol=1e-12)
    assert int(method.em_first_epoch) == 1 and reference.steps == 3 * (20 + sum(em_calls[1:]))
    assert not bool(method.em_pending.any())


def test_memory_bank_is_fifo_with_capacity() -> None:
    bank = ClassMemoryBank(num_classes=2, capacity=3, dim=1)
    item = lambda *values: torch.tensor(values, dtype=torch.float32)[:, None]  # noqa: E731
    bank.push(item(1, 2), torch.tensor([0, 0]))
    bank.push(item(10), torch.tensor([1]))
    assert bank.contents(0).flatten().tolist() == [1, 2] and bank.contents(1).flatten().tolist() == [10]
    bank.push(item(3, 11, 4), torch.tensor([0, 1, 0]))
    assert bank.contents(0).flatten().tolist() == [2, 3, 4]  # the oldest (1) left
    assert bank.size.tolist() == [3, 2] and not bank.full()
    bank.push(item(5, 6, 7, 8, 9), torch.tensor([0] * 5))  # more than capacity at once: the last 3 stay
    assert bank.contents(0).flatten().tolist() == [7, 8, 9]
    bank.push(item(12), torch.tensor([1]))
    assert bank.full() and bank.contents(1).flatten().tolist() == [10, 11, 12]


def test_a_masked_push_equals_pushing_only_the_marked_rows() -> None:
    """The fixed-shape push (rows marked by ``enqueue``, no host sync) against the rows cut out,
    pushed one at a time (the FIFO's definition), over pushes that wrap and overflow a class."""
    g = torch.Generator().manual_seed(0)
    masked, one_by_one = ClassMemoryBank(3, 2, 2), ClassMemoryBank(3, 2, 2)
    for _ in range(6):
        features, classes = torch.randn(9, 2, generator=g), torch.randint(0, 3, (9,), generator=g)
        enqueue = torch.rand(9, generator=g) > 0.3
        before = {name: value.clone() for name, value in masked.state_dict().items()}
        masked.push(features, classes, enqueue)
        for row in enqueue.nonzero().flatten().tolist():
            one_by_one.push(features[row : row + 1], classes[row : row + 1])
        assert torch.equal(masked.size, one_by_one.size)
        for cls in range(3):
            assert torch.equal(masked.contents(cls), one_by_one.contents(cls))
        cut = ClassMemoryBank(3, 2, 2)  # and one push of the marked rows lays them out alike
        cut.load_state_dict(before)
        cut.push(features[enqueue], classes[enqueue])
        for name in ("features", "size", "head"):
            assert torch.equal(getattr(masked, name), getattr(cut, name)), name


def test_enqueued_features_are_deduplicated_by_position() -> None:
    latent = torch.arange(16, dtype=torch.float32).view(2, 4, 2)  # B=2, N=4, d=2
    positions = torch.tensor([[1, 1, 3], [0, 2, 0]])  # top-1 position of each GT prototype
    features, classes, enqueued = unique_top1_features(latent, positions, torch.tensor([5, 7]))
    features, classes = features[enqueued], classes[enqueued]
    assert features.tolist() == [latent[0, 1].tolist(), latent[0, 3].tolist(), latent[1, 0].tolist(),
                                 latent[1, 2].tolist()]
    assert classes.tolist() == [5, 5, 7, 7]


def test_mining_uses_the_t_th_ranked_activation() -> None:
    # two classes, J = 2, one image of class 0; log densities of its GT prototypes over a 4-patch grid
    gt = torch.tensor([[[-1.0, -4.0, -2.0, -3.0], [-5.0, -0.5, -6.0, -7.0]]])  # B×J×N
    ranked = gt.sort(dim=-1, descending=True).values  # [[-1,-2,-3,-4], [-0.5,-5,-6,-7]]
    top = torch.tensor([[[-1.0, -0.5], [-2.0, -3.0]]])  # B×C×J top-1 scores
    priors = torch.tensor([[0.25, 0.75], [0.5, 0.5]])
    logits = mined_logits(top, ranked[..., 1:], torch.tensor([0]), priors)  # levels t = 1, 2, 3
    for t in (1, 2, 3):
        expected_gt = math.log(0.25 * math.exp(ranked[0, 0, t]) + 0.75 * math.exp(ranked[0, 1, t]))
        expected_other = math.log(0.5 * math.exp(-2.0) + 0.5 * math.exp(-3.0))
        assert logits[0, t - 1].tolist() == pytest.approx([expected_gt, expected_other])


def test_mining_term_in_the_model() -> None:
    source = SyntheticTokens(num_classes=3, images_per_class=2)
    method = MGProto(source.context(2), mine_levels=4, mine_start_epoch=1)
    batch = source.batch(torch.arange(6))
    assert set(method.loss_terms(batch, method.stages()[0], 0)) == {"ce"}  # before mining starts
    terms = method.loss_terms(batch, method.stages()[0], 1)
    with torch.no_grad():
        log_dens = method._log_densities(method.latent(batch))  # B×N×C×J
    rows = torch.arange(6)
    ranked = log_dens[rows, :, batch.labels].sort(dim=1, descending=True).values  # B×N×J
    logits = []
    for t in (1, 2, 3):
        per_class = torch.logsumexp(method.priors.log() + log_dens.amax(1), -1).clone()
        per_class[rows, batch.labels] = torch.logsumexp(method.priors[batch.labels].log() + ranked[:, t], -1)
        logits.append(F.cross_entropy(per_class, batch.labels))
    assert terms["mine"].item() == pytest.approx(torch.stack(logits).mean().item(), rel=1e-5)


def test_unique_image_choice_hand_example() -> None:
    # class 0 owns images 0, 2, 3; class 1 owns image 1; J = 2
    scores = torch.tensor([[-3.0, -2.0], [-1.0, -1.0], [-0.5, -0.1], [-2.0, -0.2]])
    choice = unique_image_choice(scores, torch.tensor([0, 1, 0, 0]), num_classes=3)
    # prototype (0, 0) takes image 2; (0, 1) would also prefer image 2 but takes image 3;
    # class 1 has one image for two prototypes; class 2 has none
    assert choice.tolist() == [[2, 3], [1, -1], [-1, -1]]


def test_push_projects_onto_distinct_images_of_the_class() -> None:
    source = SyntheticTokens(num_classes=3, images_per_class=4)
    method = MGProto(source.context(3))
    untouched = method.means.clone()
    with torch.no_grad():
        method.push(SourceTrainData(source, CPU, 0))
    images, positions = method.prototype_source[..., 0], method.prototype_source[..., 1]
    assert bool((images >= 0).all()) and not torch.equal(method.means, untouched)
    for c in range(3):
        assert len(set(images[c].tolist())) == 3, "one prototype per image"
        assert bool((source.labels[images[c]] == c).all())
    batch = source.batch(images.flatten())
    with torch.no_grad():
        latent = method.latent(batch)
    picked = latent[torch.arange(9), positions.flatten()]
    assert torch.allclose(method.means.flatten(0, 1), picked)


def test_prior_pruning_only_above_prune_top_m() -> None:
    source = SyntheticTokens(num_classes=2, images_per_class=2)
    method = MGProto(source.context(4), prune_top_m=2)
    method.priors.copy_(torch.tensor([[0.1, 0.4, 0.3, 0.2], [0.25, 0.25, 0.25, 0.25]]))
    method.prune()
    assert torch.equal(method.priors, torch.tensor([[0.0, 0.4, 0.3, 0.0], [0.25, 0.25, 0.25, 0.25]]))  # ties kept
    small = MGProto(source.context(2), prune_top_m=2, epochs=1, push_epochs=())
    before = small.priors.clone()
    small.on_epoch_end(small.stages()[0], 0, SourceTrainData(source, CPU, 0))
    assert torch.equal(small.priors, before)


def test_compressed_schedule_and_optimiser_groups() -> None:
    source = SyntheticTokens()
    method = MGProto(source.context(3))
    (stage,) = method.stages()
    assert stage.epochs == 20 and [g.name for g in stage.param_groups] == ["add_on"]
    assert (stage.param_groups[0].lr, stage.param_groups[0].weight_decay) == (3e-3, 1e-3)
    optimizer = torch.optim.Adam([{"params": g.params, "lr": g.lr} for g in stage.param_groups])
    scheduler = stage.scheduler(optimizer)
    lrs = []
    for _ in range(20):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    drops = [e for e in range(1, 20) if lrs[e] < lrs[e - 1]]
    assert drops == [5, 8, 10, 13, 15]
    assert (method.em_start_epoch, method.mine_start_epoch, method.push_epochs) == (6, 7, (17, 19))
    expanded = MGProto(source.context(3), expanded=True)
    groups = expanded.stages()[0].param_groups
    assert [g.name for g in groups] == ["add_on", "block"] and groups[1].lr == 1e-4


def test_expanded_variant_trains_the_block() -> None:
    source = SyntheticTokens()
    method = MGProto(source.context(3), expanded=True)
    stage = method.stages()[0]
    for group in stage.param_groups:
        for p in group.params:
            p.requires_grad_(True)
    method.loss_terms(source.batch(torch.arange(8)), stage, 0)["ce"].backward()
    block = stage.param_groups[1].params
    assert any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in block)


def test_invalid_hyperparameters_name_the_argument() -> None:
    ctx = SyntheticTokens().context(3)
    for kwargs, argument in (({"memory_capacity": 0}, "memory_capacity"), ({"push_epochs": (20,)}, "push_epochs"),
                             ({"prior_momentum": 1.0}, "prior_momentum"), ({"em_lr": -1.0}, "em_lr")):
        with pytest.raises((ValueError, TypeError), match=argument):
            MGProto(ctx, **kwargs)


def _trained(source: SyntheticTokens, **kwargs: object) -> MGProto:
    method = MGProto(source.context(3), **kwargs)
    train(method, source, seed=0, batch_size=16, device=CPU, checkpoint_path=None, log=quiet)
    return method


def test_trains_with_em_mining_and_push_to_high_accuracy() -> None:
    source = SyntheticTokens(num_classes=4, images_per_class=12)
    # 20 epochs are 60 steps here (thousands on CUB): a 10× add-on learning rate lets the latent
    # space settle before EM starts; a 16-feature bank fills within the first epochs.
    method = _trained(source, memory_capacity=16, lr_add_on=3e-2)
    assert bool((method.em_steps > 0).all()) and bool((method.prototype_source >= 0).all())
    diagnostics = collect_diagnostics(method, {})
    assert (diagnostics["em_first_epoch"], diagnostics["mining_first_epoch"]) == (6, 7)
    assert diagnostics["warnings"] == []
    held_out = SyntheticTokens(num_classes=4, images_per_class=24)  # same class parts, fresh images
    batch = held_out.batch(torch.arange(len(held_out)))
    with torch.no_grad():
        accuracy = (method.logits(batch).argmax(1) == batch.labels).float().mean().item()
    assert accuracy >= 0.8

    restored = MGProto(source.context(3, seed=5), memory_capacity=16)
    restored.load_state_dict(copy.deepcopy(method.state_dict()))
    for name, value in method.state_dict().items():
        assert torch.equal(value, restored.state_dict()[name]), name  # banks, priors, EM moments, sources
    with torch.no_grad():
        assert torch.equal(method.logits(batch), restored.logits(batch))
    assert collect_diagnostics(restored, {}) == diagnostics  # the diagnostics survive a checkpoint


def _em_start(per_class: int, epochs_run: int, **kwargs: object) -> MGProto:
    """MGProto on 3 classes × 30 training images (CUB's images per class), trained for
    ``epochs_run`` epochs of the 20-epoch schedule, with all J means of a class equal until EM
    moves them: every GT prototype then peaks at the same position, so each image enqueues
    exactly one feature per epoch — the slowest a bank can fill."""
    source = SyntheticTokens(num_classes=3, images_per_class=30, dim=16, grid=(4, 4))
    method = MGProto(source.context(per_class), **kwargs)
    method.means.copy_(method.means[:, :1].expand_as(method.means).clone())
    with pytest.raises(TrainingInterrupted):
        train(method, source, seed=0, batch_size=32, device=CPU, checkpoint_path=None, log=quiet,
              stop_after_epoch=epochs_run)
    return method


@pytest.mark.parametrize("per_class", [3, 5, 7])
def test_em_starts_on_its_scheduled_epoch_with_thirty_images_per_class(per_class: int) -> None:
    method = _em_start(per_class, 7)
    assert method.memory.capacity == 134  # ⌈800 · 20/120⌉
    assert int(method.em_first_epoch) == 6 and int(method.em_steps) > 0


def test_em_waits_for_full_banks_at_the_start_of_an_epoch() -> None:
    # official main.py: update_GMM is decided when an epoch starts; banks of 800 (the uncompressed
    # capacity) hold 180 features after the 6 epochs before EM is due, so EM does not run
    assert int(_em_start(3, 7, memory_capacity=800).em_first_epoch) == -1
    # 190 fills during epoch 6 (180 → 210): EM waits for epoch 7, not the middle of epoch 6
    assert int(_em_start(3, 8, memory_capacity=190).em_first_epoch) == 7


def test_mining_depth_is_scaled_to_the_grid() -> None:
    # official: T = 20 of ResNet-34's 7 × 7 = 49 positions
    assert (scaled_mine_levels(49), scaled_mine_levels(196), scaled_mine_levels(256)) == (20, 80, 104)
    assert MGProto(SyntheticTokens(grid=(6, 6)).context(3)).mine_levels == 15  # 20 · 36/49 = 14.7
    assert MGProto(SyntheticTokens().context(3), mine_levels=4).mine_levels == 4
    assert MEMORY_CAPACITY == 134


def test_perf_times_each_phase_of_the_schedule_with_the_state_it_has() -> None:
    from benchmark.estimates.perf import _phases

    source = SyntheticTokens(num_classes=3, images_per_class=4)
    method = MGProto(source.context(2))
    (stage,) = method.stages()
    assert _phases(method, stage, 0) == [(0, 6), (6, 1), (7, 13)]  # before EM, EM, EM + mining
    method.assume_epoch(0)
    assert not method.memory.full()  # nothing to assume before EM
    method.assume_epoch(6)
    assert method.memory.full()
    method.after_step(source.batch(torch.arange(4)), stage, 6)
    assert int(method.em_steps) == 3 * 1 and int(method.em_first_epoch) == 6  # the batch's one class, 3 loops
