"""metrics/funnybirds.py against the official FunnyBirds protocols (tests/helpers/funnybirds_official.py,
run verbatim) on identical model outputs and explanations, on a set `make-data funnybirds` writes; and
the known answers: a perfect explanation of a part-based model scores 1 on SD and TS and near 1 on
completeness, a random one near chance."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

import funnybirds_official as official
from benchmark.data.funnybirds import read_funnybirds_set
from benchmark.data.synthetic_funnybirds import class_codes, generate_funnybirds
from metrics.funnybirds import Explanation, ProtocolInputs, funnybirds_scores, needed_explanations
from metrics.funnybirds_parts import THRESHOLDS, dilated_masks, part_importances

SIZE = 64


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory):
    return generate_funnybirds(tmp_path_factory.mktemp("fb") / "funnybirds", classes=9, images_per_class=6, seed=3,
                               image_size=SIZE)


class LinearModel(torch.nn.Module):
    """logit_c = <W_c, x> + b_c with W_c smooth (a 16×16 grid blown up): its input × gradient, W_c ⊙ x
    summed over channels, is an exact explanation of the logit."""

    def __init__(self, classes: int, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        coarse = torch.randn(classes, 3, 16, 16, generator=g)
        self.weight = torch.nn.Parameter(coarse.repeat_interleave(SIZE // 16, 2).repeat_interleave(SIZE // 16, 3))
        self.bias = torch.nn.Parameter(torch.randn(classes, generator=g))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bchw,kchw->bk", x, self.weight) + self.bias


class OracleExplainer(official.AbstractAttributionExplainer):
    def __init__(self, model: LinearModel) -> None:
        self.model = model

    def explain(self, input, target=None):
        return (self.model.weight[target] * input).sum(1, keepdim=True)


def _tensor(path) -> torch.Tensor:
    with Image.open(path) as image:  # the official reading: ToTensor of the RGBA file, alpha dropped
        return torch.from_numpy(np.asarray(image.convert("RGBA"))[..., :3].copy()).permute(2, 0, 1).float() / 255


def _our_inputs(root, model: LinearModel) -> ProtocolInputs:
    truth = read_funnybirds_set(root, "test")
    names = truth.part_names
    with torch.no_grad():
        def logits(paths):
            return model(torch.stack([_tensor(p) for p in paths])).numpy()
        n = len(truth.labels)
        original = logits([truth.image_path(i) for i in range(n)])
        removed = np.stack([logits([truth.intervention_path(i, [p for b, p in enumerate(names) if m >> b & 1])
                                    for m in range(2 ** len(names))]) for i in range(n)])
        background = [logits([truth.background_path(i, j) for j in range(int(truth.background[i]))])
                      for i in range(n)]
        inputs = ProtocolInputs(classes=truth.classes, part_names=names, labels=truth.labels, logits=original,
                                removed=removed, background=background)
        explanations = {}
        for i, c in sorted(needed_explanations(inputs)):
            x = _tensor(truth.image_path(i))
            attribution = (model.weight[c] * x).sum(0).numpy()
            keys, masks = dilated_masks(truth.part_map(i), with_bg=True)
            explanations[(i, c)] = Explanation(part_importances(keys, masks, attribution[None])[0],
                                               float(torch.from_numpy(attribution).sum()))
    return ProtocolInputs(**{**inputs.__dict__, "explanations": explanations})


@pytest.mark.parametrize("seed", [0, 1])
def test_equal_to_the_official_protocols(dataset, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    model = LinearModel(9, seed).eval()
    ours = funnybirds_scores(_our_inputs(dataset, model))
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *a, **k: self)  # the official code's unguarded .cuda
    args = SimpleNamespace(data=str(dataset), gpu=None, nr_itrs=2501, batch_size=8)
    explainer = OracleExplainer(model)
    with torch.no_grad():
        reference = {
            "csdc": official.controlled_synthetic_data_check_protocol(model, explainer, args),
            "pc": official.preservation_check_protocol(model, explainer, args),
            "dc": official.deletion_check_protocol(model, explainer, args),
            "d": official.distractibility_protocol(model, explainer, args),
        }
        sd = official.single_deletion_protocol(model, explainer, args)
        bi = official.background_independence_protocol(model, args)
        try:
            ts = official.target_sensitivity_protocol(model, explainer, args)
        except ZeroDivisionError:  # every image filtered by the assumption: the official code divides by 0
            ts = float("nan")
    for name, by_threshold in reference.items():
        expected = np.array([by_threshold[t] for t in THRESHOLDS])
        assert np.abs(ours.per_threshold[name] - expected).max() < 1e-9, name
    assert abs(ours.sd - sd) < 1e-9 and abs(ours.bi - bi) < 1e-12
    assert (np.isnan(ours.ts) and np.isnan(ts)) or abs(ours.ts - ts) < 1e-12
    best = official.best_threshold_rule(reference["csdc"], reference["pc"], reference["dc"], reference["d"])
    assert ours.best_threshold == pytest.approx(float(best), abs=0)
    assert 0 < ours.counts["csdc"] and ours.counts["ts"] + ours.counts["ts_filtered"] == len(ours.per_image["sd"])


# ---------------------------------------------------------------- known answers on a part-based model

PART_WEIGHTS = np.array([1.0, 2.0, 3.0, 4.0, 5.0])  # beak, eye, foot, tail, wing
NAMES = ["beak", "eye", "foot", "tail", "wing"]


def _part_model_inputs(images_per_class: int, explain, rng: np.random.Generator) -> ProtocolInputs:
    """A model whose logit for class c is Σ_p w_p [the image shows c's variant of part p]: removing part
    p lowers exactly the classes sharing it by w_p; background objects change nothing."""
    codes = class_codes(9, np.random.default_rng([0, 0]))
    classes = [dict(zip(NAMES, map(int, code))) for code in codes]
    labels = np.repeat(np.arange(9), images_per_class)
    match = (codes[labels][:, None, :] == codes[None, :, :]).astype(float)  # N×C×P
    masks = np.array([[not (m >> b & 1) for b in range(5)] for m in range(32)], dtype=float)  # 32×P kept
    removed = np.einsum("ncp,mp,p->nmc", match, masks, PART_WEIGHTS)
    logits = removed[:, 0]
    background = [np.repeat(logits[i][None], 3, axis=0) for i in range(len(labels))]
    inputs = ProtocolInputs(classes=classes, part_names=NAMES, labels=labels, logits=logits, removed=removed,
                            background=background)
    explanations = {(i, c): explain(match[i, c], rng) for i, c in needed_explanations(inputs)}
    return ProtocolInputs(**{**inputs.__dict__, "explanations": explanations})


def _perfect(match: np.ndarray, rng: np.random.Generator) -> Explanation:
    importance = {p: float(w * m) for p, w, m in zip(NAMES, PART_WEIGHTS, match)}
    importance.update({f"bg_{j:03d}": 0.0 for j in range(50)})
    return Explanation(importance, sum(importance.values()))


def _random(match: np.ndarray, rng: np.random.Generator) -> Explanation:
    importance = {p: float(v) for p, v in zip(NAMES, rng.normal(size=5))}
    importance.update({f"bg_{j:03d}": float(v) for j, v in enumerate(rng.normal(size=50))})
    return Explanation(importance, float(rng.normal()) + sum(importance.values()))


def test_a_perfect_explanation_scores_one_and_a_random_one_chance() -> None:
    perfect = funnybirds_scores(_part_model_inputs(20, _perfect, np.random.default_rng(0)))
    assert perfect.accuracy == 1.0
    assert perfect.sd == 1.0 and perfect.ts == 1.0 and perfect.pc == 1.0
    # every image but the last class's: the official minimal-sufficient-set loop gives the last class none
    assert perfect.csdc == pytest.approx(8 / 9)
    assert perfect.d == pytest.approx(1.0) and perfect.dc == pytest.approx(8 / 9)  # removing all: class 0 wins the tie
    assert perfect.com > 0.95
    chance = funnybirds_scores(_part_model_inputs(40, _random, np.random.default_rng(1)))
    assert abs(chance.sd - 0.5) < 0.05 and abs(chance.ts - 0.5) < 0.08
    assert chance.com < perfect.com - 0.1 and chance.mx < perfect.mx - 0.2


def test_the_equality_inputs_are_not_degenerate(dataset) -> None:
    """The official comparison above means something: the linear model's protocols are neither all 0 nor all 1."""
    scores = funnybirds_scores(_our_inputs(dataset, LinearModel(9, 0).eval()))
    spread = {name: (float(v.min()), float(v.max())) for name, v in scores.per_threshold.items()}
    assert all(hi > lo for lo, hi in spread.values()), spread
    assert 0 < scores.sd < 1 and scores.counts["d"] > 0 and scores.best_threshold is not None
