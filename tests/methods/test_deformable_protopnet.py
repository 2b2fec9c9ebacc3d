"""Deformable ProtoPNet: sampling, activation, margin, push, orthogonality, schedule, training."""
import copy
import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from benchmark.run.training import TrainingInterrupted, make_optimizer, train
from methods.base import set_trainable
from methods.base import MethodContext
from methods.common.lineage import prototype_classes
from methods.contract import check_method
from methods.deformable import DeformableProtoPNet
from methods.deformable.functional import (
    norm_preserving_sample,
    subtractive_margin,
    tap_positions,
    within_class_orthogonality,
)
from methods.deformable.model import FEATURE_SCALE
from methods.registry import build_method
from methods.testing import SyntheticTokens, SyntheticTrainData, TinyAppendedBlock

CPU = torch.device("cpu")
NAME = "deformable_protopnet"


def build(ctx: MethodContext, **overrides: object) -> DeformableProtoPNet:
    method = build_method(NAME, ctx, **overrides)
    assert isinstance(method, DeformableProtoPNet)
    return method



def bilinear_corners(row: float, col: float, height: int, width: int) -> list[tuple[int, int, float]]:
    """In-grid corners (r, c, weight) of a bilinear read at (row, col); outside corners weigh 0."""
    r0, c0 = math.floor(row), math.floor(col)
    corners = []
    for r, wr in ((r0, 1 - (row - r0)), (r0 + 1, row - r0)):
        for c, wc in ((c0, 1 - (col - c0)), (c0 + 1, col - c0)):
            if 0 <= r < height and 0 <= c < width:
                corners.append((r, c, wr * wc))
    return corners


def sample_by_definition(features: torch.Tensor, row: float, col: float) -> torch.Tensor:
    """D-vector sqrt(Σ_corners w · x²) of one image's D×H×W features."""
    _, height, width = features.shape
    squared = torch.zeros(features.shape[0], dtype=torch.float64)
    for r, c, w in bilinear_corners(row, col, height, width):
        squared += w * features[:, r, c].double() ** 2
    return squared.sqrt()


def set_constant_offsets(method: DeformableProtoPNet, offsets: torch.Tensor) -> None:
    """Offsets equal to ``offsets`` (K×2, (Δrow, Δcol) per part) at every cell of every image."""
    with torch.no_grad():
        method.offset_net[2].weight.zero_()
        method.offset_net[2].bias.copy_(offsets.flatten())


# ---- sampling ---------------------------------------------------------------------------------
def test_tap_positions_are_the_dilated_2x2_window_plus_offsets():
    offsets = torch.zeros(1, 8, 3, 4)
    offsets[0, 2 * 3] = 0.25  # Δrow of part 3 (i = 1, j = 1)
    offsets[0, 2 * 1 + 1] = -0.5  # Δcol of part 1 (i = 0, j = 1)
    pos = tap_positions(offsets)
    assert pos.shape == (1, 4, 3, 4, 2)
    y, x = 2, 1
    assert pos[0, :, y, x].tolist() == [[1.0, 0.0], [1.0, 1.5], [3.0, 0.0], [3.25, 2.0]]


def test_norm_preserving_sample_is_the_root_of_interpolated_squares_and_keeps_norms():
    g = torch.Generator().manual_seed(0)
    height, width = 4, 5
    features = torch.rand(2, 6, height, width, generator=g) * torch.rand(2, 1, height, width, generator=g) * 3
    # arbitrary fractional positions, some half outside the grid
    positions = torch.stack((torch.rand(2, 4, 3, 2, generator=g) * (height + 1) - 1,
                             torch.rand(2, 4, 3, 2, generator=g) * (width + 1) - 1), dim=-1)
    samples = norm_preserving_sample(features, positions)
    assert samples.shape == (2, 6, 4, 3, 2)
    for b, k, y, x in torch.cartesian_prod(*(torch.arange(n) for n in (2, 4, 3, 2))).tolist():
        row, col = positions[b, k, y, x].tolist()
        expected = sample_by_definition(features[b], row, col)
        assert torch.allclose(samples[b, :, k, y, x].double(), expected, atol=1e-5)
        norm_sq = sum(w * features[b, :, r, c].double().square().sum()
                      for r, c, w in bilinear_corners(row, col, height, width))
        got_sq = samples[b, :, k, y, x].double().square().sum().item()
        assert math.isclose(got_sq, float(norm_sq), rel_tol=1e-5, abs_tol=1e-7)
    # features of one common length keep it at every in-grid fractional position
    unit = F.normalize(features, dim=1)
    inside = torch.stack((torch.rand(2, 4, 3, 2, generator=g) * (height - 1),
                          torch.rand(2, 4, 3, 2, generator=g) * (width - 1)), dim=-1)
    norms = norm_preserving_sample(unit, inside).norm(dim=1)
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-6)
    # plain bilinear interpolation would shrink them
    plain = F.grid_sample(unit, torch.stack(((2 * inside[..., 1] + 1) / width - 1,
                                             (2 * inside[..., 0] + 1) / height - 1), -1).view(2, 12, 2, 2),
                          align_corners=False)
    assert plain.norm(dim=1).min() < 0.99


def test_norm_preserving_sample_gradients_reach_features_and_positions():
    g = torch.Generator().manual_seed(3)
    features = (torch.rand(1, 3, 3, 4, generator=g, dtype=torch.float64) + 0.1).requires_grad_()
    positions = torch.tensor([[[[[0.3, 1.6]], [[1.45, -0.4]], [[2.2, 2.7]], [[-0.5, 3.25]]]]], dtype=torch.float64)
    assert torch.autograd.gradcheck(norm_preserving_sample, (features, positions.requires_grad_()))


# ---- activation -------------------------------------------------------------------------------
def loop_activation(unit: torch.Tensor, prototypes: torch.Tensor, offsets: torch.Tensor | None = None) -> torch.Tensor:
    """B×M×H×W ReLU(mean over the 2×2 parts of cos(x at (y−1+2i, x−1+2j) [+ offset], p_ij) / 1.01),
    parts outside the grid contributing 0; the read is norm-preserving bilinear when offsets are given."""
    batch, _, height, width = unit.shape
    parts = F.normalize(prototypes, dim=1)
    out = torch.zeros(batch, prototypes.shape[0], height, width, dtype=torch.float64)
    for b in range(batch):
        for y in range(height):
            for x in range(width):
                for i in range(2):
                    for j in range(2):
                        row, col = y - 1 + 2 * i, x - 1 + 2 * j
                        if offsets is None:
                            if not (0 <= row < height and 0 <= col < width):
                                continue
                            vector = unit[b, :, row, col].double()
                        else:
                            dr, dc = offsets[2 * i + j].tolist()
                            vector = sample_by_definition(unit[b], row + dr, col + dc)
                        out[b, :, y, x] += parts[:, :, i, j].double() @ vector
    return (out / 4 / 1.01).relu()


def test_zero_offsets_give_the_plain_dilated_mean_cosine():
    source = SyntheticTokens(num_classes=3, images_per_class=2, dim=8, grid=(5, 6))
    method = build(source.context(2))
    with torch.no_grad():
        method.prototypes.copy_(torch.randn(method.prototypes.shape, generator=torch.Generator().manual_seed(1)))
        batch = source.batch(torch.arange(3))
        expected = loop_activation(method.unit_features(batch), method.prototypes)
        got = method.prototype_activations(batch)
        assert (got == 0).any() and (got > 0).any()  # negative cosines are cut by the ReLU
        assert torch.allclose(got.double(), expected, atol=1e-6)
        maps = method.activation_maps(batch, torch.tensor([2, 0, 1]))
        assert torch.allclose(maps, got.view(3, 3, 2, 5, 6)[torch.arange(3), torch.tensor([2, 0, 1])], atol=1e-6)


def test_offsets_read_parts_at_deformed_positions_with_norm_preserving_interpolation():
    source = SyntheticTokens(num_classes=2, images_per_class=1, dim=6, grid=(4, 5))
    method = build(source.context(1))
    offsets = torch.tensor([[0.3, -0.6], [-0.25, 0.7], [0.5, 0.5], [-1.2, 0.1]])
    set_constant_offsets(method, offsets)
    with torch.no_grad():
        batch = source.batch(torch.arange(2))
        expected = loop_activation(method.unit_features(batch), method.prototypes, offsets)
        assert torch.allclose(method.prototype_activations(batch).double(), expected, atol=1e-6)


# ---- margin and logits --------------------------------------------------------------------------
def test_subtractive_margin_hand_values():
    a = torch.tensor([[0.9, 0.5, 0.05, -0.05, 0.999, 0.3]])
    wrong = torch.tensor([[True, True, True, True, True, False]])
    expected = torch.tensor([[0.939020, 0.583960, 0.149459, 0.049958, 1.0, 0.3]])
    assert torch.allclose(subtractive_margin(a, wrong, 0.1), expected, atol=1e-5)


def test_margin_only_on_wrong_classes_in_training_and_never_in_logits():
    source = SyntheticTokens(num_classes=3, images_per_class=2, dim=8)
    method = build(source.context(2))
    batch = source.batch(torch.arange(6))
    with torch.no_grad():
        plain = method.prototype_activations(batch)
        margined = method.prototype_activations(batch, batch.labels)
    own = (torch.arange(6) // 2)[None, :] == batch.labels[:, None]
    own = own[..., None, None].expand_as(plain)
    assert torch.equal(margined[own], plain[own])
    wrong, positive = ~own, plain > 0
    assert (wrong & positive).any()
    hand = torch.cos(torch.relu(torch.arccos(plain) - 0.1))
    assert torch.allclose(margined[wrong & positive], hand[wrong & positive], atol=1e-6)
    assert (margined[wrong & positive] > plain[wrong & positive]).all()  # a smaller angle, a larger cosine
    with torch.no_grad():
        assert torch.equal(method.logits(batch), method.last_layer(plain.amax(dim=(-2, -1))))
        terms = method.loss_terms(batch, method.stages()[0], 0)
    expected_ce = F.cross_entropy(method.last_layer(margined.amax(dim=(-2, -1))), batch.labels)
    assert torch.allclose(terms["ce"], expected_ce)
    pooled = margined.amax(dim=(-2, -1))
    own_pooled = own[..., 0, 0]
    assert torch.allclose(terms["clst"], pooled.masked_fill(~own_pooled, 0).amax(1).mean())
    assert torch.allclose(terms["sep"], pooled.masked_fill(own_pooled, 0).amax(1).mean())
    assert set(terms) == {"ce", "clst", "sep"}  # no orthogonality in the warm stage


def test_last_layer_is_fixed_plus_one_minus_half():
    source = SyntheticTokens(num_classes=3)
    method = build(source.context(2))
    expected = torch.full((3, 6), -0.5)
    for c in range(3):
        expected[c, 2 * c:2 * c + 2] = 1.0
    assert torch.equal(method.last_layer.weight, expected)
    trained = {id(p) for stage in method.stages() for g in stage.param_groups for p in g.params}
    assert id(method.last_layer.weight) not in trained


# ---- orthogonality -------------------------------------------------------------------------------
def test_orthogonality_hand_example_is_within_class():
    e = torch.eye(4)
    # prototypes D×2×2 with part k = 2i + j; class 0: parts 2e1, 3e1, e2, e3 (one pair parallel)
    class0 = torch.stack((2 * e[0], 3 * e[0], e[1], e[2]), dim=1).view(4, 2, 2)
    # class 1: parts e1, 5(e1 + e2)/√2, e3, e4 (one pair at 45°)
    class1 = torch.stack((e[0], 5 * (e[0] + e[1]) / math.sqrt(2), e[2], e[3]), dim=1).view(4, 2, 2)
    prototypes = torch.stack((class0, class1))
    # ‖G0 − I‖² = 1² + 1² = 2, ‖G1 − I‖² = 2 · (1/√2)² = 1; e1, shared across classes, costs nothing
    assert math.isclose(within_class_orthogonality(prototypes, 1).item(), math.sqrt(3), rel_tol=1e-6)
    orthonormal = torch.eye(8).view(8, 2, 4).permute(1, 0, 2).reshape(2, 8, 2, 2)  # J = 2, parts e1..e8
    repeated = torch.cat((orthonormal, orthonormal))  # class 1 repeats class 0
    assert within_class_orthogonality(repeated, 2).item() == pytest.approx(0.0, abs=1e-7)


# ---- push ----------------------------------------------------------------------------------------
def test_push_copies_the_best_same_class_deformed_parts_and_records_them():
    source = SyntheticTokens(num_classes=3, images_per_class=3, dim=8, grid=(5, 5), seed=2)
    method = build(source.context(2), push_epochs=(3,))
    offsets = torch.tensor([[0.4, -0.3], [0.1, 0.6], [-0.7, 0.2], [0.25, -0.45]])
    set_constant_offsets(method, offsets)
    everything = source.batch(torch.arange(len(source)))
    with torch.no_grad():
        unit = method.unit_features(everything)
        # bait: prototype 0 (class 0) becomes the parts of an image of class 1, so its best cell overall
        # lies in another class's image
        samples, _ = method.deformed_parts(unit)
        method.prototypes[0] = samples[4, :, :, 2, 2].view(8, 2, 2)
        before = method.prototype_activations(everything)
    assert before[4, 0].max() > before[:3, 0].max()
    with torch.no_grad():
        method.on_epoch_end(method.stages()[0], 2, SyntheticTrainData(source, batch_size=4))  # not a push epoch
        assert method.push_image.eq(-1).all()
        method.on_epoch_end(method.stages()[1], 3, SyntheticTrainData(source, batch_size=4))
    labels = source.labels
    for m in range(6):
        own = labels == m // 2
        scores = before[:, m].masked_fill(~own[:, None, None], -1.0)
        best = scores.flatten().argmax().item()
        b, y, x = best // 25, (best % 25) // 5, best % 5
        assert labels[method.push_image[m]] == m // 2  # never another class's image
        assert (method.push_image[m].item(), method.push_position[m].item()) == (b, y * 5 + x)
        for k, (i, j) in enumerate(((0, 0), (0, 1), (1, 0), (1, 1))):
            row, col = y - 1 + 2 * i + offsets[k, 0].item(), x - 1 + 2 * j + offsets[k, 1].item()
            assert method.push_part_positions[m, k].tolist() == pytest.approx([row, col], abs=1e-6)
            expected = FEATURE_SCALE * sample_by_definition(unit[b], row, col)
            assert torch.allclose(method.prototypes[m, :, i, j].double(), expected, atol=1e-4)
    with torch.no_grad():  # a pushed prototype scores at least as high on its source cell
        after = method.prototype_activations(everything).flatten(2)
    at_source = after[method.push_image, torch.arange(6), method.push_position]
    assert (at_source >= before.flatten(2)[method.push_image, torch.arange(6), method.push_position] - 1e-6).all()


def per_prototype_push(method: DeformableProtoPNet, source: SyntheticTokens,
                       split: torch.Tensor) -> dict[int, tuple[int, int, torch.Tensor, torch.Tensor]]:
    """Oracle: push.py's loop, one prototype at a time over the images of its class in split order
    (one image per forward pass), cells row-major, replaced only on a strictly higher activation.
    Returns prototype → (image, cell, D×2×2 parts at FEATURE_SCALE, K×2 part positions)."""
    per_image = {}
    with torch.no_grad():
        for i in split.tolist():
            image = source.batch(torch.tensor([i]))
            samples, positions = method.deformed_parts(method.unit_features(image))
            scores = method.prototype_activations(image)[0].flatten(1)  # M×N
            per_image[i] = (samples[0], positions[0], scores)
    width = source.grid[1]
    found = {}
    for m in range(method.ctx.num_prototypes):
        best = -math.inf
        for i in split.tolist():
            if source.labels[i] != m // method.prototypes_per_class:
                continue
            samples, positions, scores = per_image[i]
            for n in range(scores.shape[1]):
                if scores[m, n] > best:
                    best, y, x = scores[m, n].item(), n // width, n % width
                    found[m] = (i, n, FEATURE_SCALE * samples[:, :, y, x].reshape(-1, 2, 2), positions[:, y, x])
    return found


def test_batched_push_equals_the_per_prototype_loop_with_ties_and_an_absent_class():
    source = SyntheticTokens(num_classes=3, images_per_class=4, dim=8, grid=(5, 5), seed=5)
    # ties: image 1 repeats image 0 (same batch) and image 3 (next batch); image 6 holds one token at
    # every cell, so its interior cells tie; class 2 has no image in the split
    for copy_to in (1, 3):
        source.tokens[copy_to] = source.tokens[0]
    source.tokens[6] = source.tokens[6, 12]
    method = build(source.context(2), push_epochs=(3,))
    # offsets of exact binary fractions: the same corner weights at every cell, so the ties are exact
    set_constant_offsets(method, torch.tensor([[0.5, -0.25], [0.0, 0.5], [-0.75, 0.0], [0.25, -0.5]]))
    with torch.no_grad():  # class 1's prototypes: its constant image's parts, so they tie on its interior
        constant, _ = method.deformed_parts(method.unit_features(source.batch(torch.tensor([6]))))
        method.prototypes[2:4] = constant[0, :, :, 2, 2].view(8, 2, 2)
        on_constant = method.prototype_activations(source.batch(torch.tensor([6])))[0, 2].flatten()
    assert (on_constant == on_constant.max()).sum() >= 2
    untouched = method.prototypes[4:].clone()
    split = torch.nonzero(source.labels != 2).squeeze(1)
    expected = per_prototype_push(method, source, split)
    with torch.no_grad():
        method.on_epoch_end(method.stages()[1], 3, SyntheticTrainData(source, split, batch_size=3))
    assert set(expected) == {0, 1, 2, 3}
    assert {expected[m][0] for m in (0, 1)} <= {0, 2}  # a tie with a later copy goes to image 0
    assert expected[2][0] == 6 and expected[2][1] == int(on_constant.argmax())  # the first tied cell
    for m, (image, cell, parts, positions) in expected.items():
        assert (method.push_image[m].item(), method.push_position[m].item()) == (image, cell)
        assert torch.allclose(method.prototypes[m], parts, atol=1e-5)
        assert torch.allclose(method.push_part_positions[m], positions, atol=1e-6)
    assert method.push_image[4:].eq(-1).all() and method.push_position[4:].eq(-1).all()
    assert torch.equal(method.prototypes[4:], untouched)



# ---- stages, expanded variant, validation ----------------------------------------------------------
def test_stages_follow_the_official_schedule():
    source = SyntheticTokens()
    method = build(source.context(2))
    assert method.loss_weights == {"ce": 1.0, "clst": -0.8, "sep": 0.08, "orth": 0.1}
    warm, joint = method.stages()
    assert (warm.name, warm.epochs, joint.name, joint.epochs) == ("warm", 5, "joint", 15)
    assert [(g.name, g.lr, g.weight_decay) for g in warm.param_groups] == [
        ("add_on", 3e-3, 1e-3), ("prototypes", 3e-3, 0.0)]
    assert [(g.name, g.lr) for g in joint.param_groups] == [("add_on", 3e-3), ("prototypes", 3e-3), ("offsets", 1e-4)]
    optimizer = make_optimizer(joint)
    scheduler = joint.scheduler(optimizer)
    lrs = []  # the loop steps the scheduler after each epoch, as main.py does after tnt.train
    for _ in range(joint.epochs):
        lrs.append(optimizer.param_groups[2]["lr"])
        optimizer.step()  # no gradients: nothing moves
        scheduler.step()
    assert lrs == pytest.approx([1e-4] * 5 + [2e-5] * 5 + [4e-6] * 5)
    assert method.push_epochs == (10, 19)
    assert all((p == 0).all() for p in method.offset_net.parameters())
    method.on_stage_start(joint, 5, SyntheticTrainData(source, batch_size=4))
    weights = torch.cat([method.offset_net[0].weight.flatten(), method.offset_net[2].weight.flatten()])
    assert 1e-5 < weights.std().item() < 3e-5 and weights.abs().max() < 2e-4
    batch = source.batch(torch.arange(8))
    set_trainable(method, joint)
    assert "orth" in method.loss_terms(batch, joint, 5)
    method.loss_terms(batch, joint, 5)["ce"].backward()
    assert method.offset_net[2].weight.grad.abs().sum() > 0  # offsets learn through grid_sample


def test_expanded_variant_trains_the_appended_block_in_the_joint_stage_only():
    source = SyntheticTokens()

    def block_with_frozen_norm() -> nn.Module:
        block = TinyAppendedBlock(source.dim)
        block.norm = nn.LayerNorm(source.dim).requires_grad_(False)
        return block

    ctx = dataclasses.replace(source.context(2), make_block=block_with_frozen_norm)
    method = build(ctx, expanded=True)
    batch = source.batch(torch.arange(8))
    with torch.no_grad():  # the block starts as the identity: same head, same logits as the frozen variant
        assert torch.allclose(method.logits(batch), build(source.context(2)).logits(batch), atol=1e-5)
    warm, joint = method.stages()
    set_trainable(method, warm)  # every requires_grad flag off but the warm groups'
    warm, joint = method.stages()
    assert "block" not in [g.name for g in warm.param_groups]
    block_group = joint.param_groups[-1]
    assert (block_group.name, block_group.lr, block_group.weight_decay) == ("block", 1e-4, 1e-3)
    frozen = {id(p) for p in method.block.norm.parameters()}
    assert {id(p) for p in block_group.params} == {id(p) for p in method.block.parameters()} - frozen
    set_trainable(method, joint)
    method.loss_terms(batch, joint, 5)["ce"].backward()
    assert method.block.block.mlp.fc2.weight.grad.abs().sum() > 0
    with torch.no_grad():  # the head reads the block's output, not batch.tokens
        before = method.logits(batch)
        method.block.block.mlp.fc2.bias.copy_(torch.linspace(-1, 1, source.dim))
        assert not torch.allclose(method.logits(batch), before)


@pytest.mark.parametrize("kwargs, named", [
    ({"margin": -0.1}, "margin"), ({"push_epochs": (20,)}, "push_epochs"), ({"offset_lr": 0.0}, "offset_lr"),
    ({"warm_epochs": -1}, "warm_epochs"), ({"offset_channels": 0}, "offset_channels"),
    ({"push_epochs": [10.5]}, "push_epochs"), ({"offset_init_std": -1.0}, "offset_init_std"),
])
def test_bad_hyperparameters_are_named(kwargs, named):
    with pytest.raises((ValueError, TypeError), match=named):
        build(SyntheticTokens().context(2), **kwargs)


# ---- contract, determinism, round trip, training ----------------------------------------------------
def test_adapter_contract():
    check_method(NAME, prototypes_per_class=2)


def test_state_dict_round_trip_keeps_pushed_prototypes_and_records():
    source = SyntheticTokens()
    method = build(source.context(2), warm_epochs=1, joint_epochs=1, push_epochs=(1,))
    train(method, source, seed=0, batch_size=16, device=CPU, checkpoint_path=None, log=lambda line: None)
    assert (method.push_image >= 0).all()
    restored = build(source.context(2, seed=9), warm_epochs=1, joint_epochs=1, push_epochs=(1,))
    restored.load_state_dict(copy.deepcopy(method.state_dict()))
    for name in ("push_image", "push_position", "push_part_positions"):
        assert torch.equal(getattr(method, name), getattr(restored, name))
    batch = source.batch(torch.arange(10))
    with torch.no_grad():
        assert torch.equal(method.activation_maps(batch, batch.labels), restored.activation_maps(batch, batch.labels))


def test_same_seed_same_run():
    source = SyntheticTokens()
    runs = []
    for _ in range(2):
        method = build(source.context(2, seed=4), warm_epochs=1, joint_epochs=2, push_epochs=(2,))
        train(method, source, seed=4, batch_size=16, device=CPU, checkpoint_path=None, log=lambda line: None)
        runs.append(method.state_dict())
    assert all(torch.equal(runs[0][k], runs[1][k]) for k in runs[0])


def test_run_resumed_at_the_joint_stage_start_equals_the_uninterrupted_run(tmp_path):
    source = SyntheticTokens()
    schedule = {"warm_epochs": 1, "joint_epochs": 2, "push_epochs": (2,)}
    straight = build(source.context(2), **schedule)
    train(straight, source, seed=1, batch_size=16, device=CPU, checkpoint_path=None, log=lambda line: None)
    with pytest.raises(TrainingInterrupted):  # stops after the warm stage, before the offsets' re-initialisation
        train(build(source.context(2), **schedule), source, seed=1, batch_size=16, device=CPU,
              checkpoint_path=tmp_path / "run.pt", log=lambda line: None, stop_after_epoch=1)
    resumed = build(source.context(2), **schedule)
    train(resumed, source, seed=1, batch_size=16, device=CPU, checkpoint_path=tmp_path / "run.pt",
          log=lambda line: None)
    assert all(torch.equal(value, resumed.state_dict()[key]) for key, value in straight.state_dict().items())


def test_trains_to_high_accuracy_on_synthetic_tokens_with_pushed_prototypes_of_their_class():
    source = SyntheticTokens()
    method = build(source.context(2))
    train(method, source, seed=0, batch_size=16, device=CPU, checkpoint_path=None, log=lambda line: None)
    batch = source.batch(torch.arange(len(source)))
    with torch.no_grad():
        accuracy = (method.logits(batch).argmax(1) == batch.labels).float().mean().item()
    assert accuracy >= 0.8
    assert torch.equal(source.labels[method.push_image],
                       prototype_classes(method.ctx.num_prototypes, method.prototypes_per_class))
