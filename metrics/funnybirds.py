"""The FunnyBirds protocols (Hesse, Schaub-Meyer and Roth, ICCV 2023, Sec. 4; visinf/funnybirds-framework
``evaluation_protocols.py``, ``evaluate_explainability.py``, ``plot_results.py``) on precomputed model
outputs and part importances, as pure functions. Each follows the official function line by line
(tests/metrics/test_funnybirds_protocols.py runs the official ones as the oracle):

* accuracy: top-1 on the test images;
* CSDC (controlled synthetic data check): over correctly classified images, the largest share of a
  minimal sufficient part set of the target class that the explanation marks important;
* PC (preservation check): removing every part the explanation of the predicted class leaves out keeps
  the prediction; DC (deletion check): removing the parts it marks important changes it;
* D (distractibility): 1 − the share of the target logit's irrelevant parts and background objects
  (removal changes it by < 5 % of its value, or raises it) that the explanation marks important;
* BI (background independence): 1 − the share of background objects whose removal lowers the target
  logit by ≥ 5 % of its value;
* SD (single deletion): Spearman's ρ between each part's logit drop when removed alone and its
  importance, mapped to (ρ + 1)/2, averaged over images where ρ is defined;
* TS (target sensitivity): for two classes at distance 3 sharing disjoint parts with the target,
  whether each class's explanation gives its shared parts more importance than the other's does;
* the threshold: CSDC, PC, DC and D are computed at the 80 official thresholds and read at the one
  maximising CSDC/3 + PC/3 + DC/3 + D (the first strict maximum above 0);
* the folds: Com = ((CSDC + PC + DC)/3 + D)/2, Cor = SD, Con = TS, mX = (Com + Cor + Con)/3.

Model outputs are logits: ``logits`` (N, C) of the images, ``removed`` (N, 2^P, C) of the part
interventions (index: bit b set = ``part_names[b]`` removed), ``background`` per image (B_i, C) of its
background interventions. Explanations: ``{(image, class): Explanation}`` for the pairs
:func:`needed_explanations` lists.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import spearmanr

from metrics.funnybirds_parts import (THRESHOLDS, background_key, important_parts, minimal_sufficient_part_sets,
                                      sensitivity_pair, shared_parts)

BACKGROUND_SHARE = 0.05  # "threshold_for_bg_importances = original_score * 0.05"


@dataclass(frozen=True)
class Explanation:
    """One image's explanation of one class: ``importance`` per part and background key (``bg_000`` …,
    official ``get_part_importance(with_bg=True)``) and ``total``, the attribution's sum over the image."""

    importance: dict[str, float]
    total: float
    #: per threshold, the important keys without / with background objects when another reading than
    #: importance > total × t decides them (ProtoPNet's box reading, metrics/funnybirds_boxes.py); None: that rule
    important: tuple[list[list[str]], list[list[str]]] | None = None

    @property
    def parts(self) -> dict[str, float]:
        """The importances without background keys (``with_bg=False``)."""
        return {k: v for k, v in self.importance.items() if not k.startswith("bg_")}

    def important_keys(self, with_background: bool) -> list[list[str]]:
        """Per threshold of ``THRESHOLDS`` the keys marked important (``get_important_parts``)."""
        if self.important is not None:
            return self.important[int(with_background)]
        return important_parts(self.importance if with_background else self.parts, self.total)


@dataclass(frozen=True)
class ProtocolInputs:
    classes: list[dict[str, int]]
    part_names: list[str]
    labels: np.ndarray
    logits: np.ndarray
    removed: np.ndarray
    background: list[np.ndarray]
    explanations: Mapping[tuple[int, int], Explanation] = field(default_factory=dict)

    def removal_index(self, removed: list[str] | set[str]) -> int:
        return sum(1 << b for b, p in enumerate(self.part_names) if p in set(removed))


@dataclass(frozen=True)
class FunnyBirdsScores:
    """Fractions in [0, 1] (NaN where a protocol had no valid image). ``per_threshold``: CSDC, PC, DC, D at
    each of ``THRESHOLDS``; ``per_image``: each protocol's per-image value (NaN where an image does not
    count; CSDC … D at the best threshold; TS the mean of its two decisions); ``counts``: images used."""

    accuracy: float
    csdc: float
    pc: float
    dc: float
    d: float
    bi: float
    sd: float
    ts: float
    best_threshold: float | None
    per_threshold: dict[str, np.ndarray]
    per_image: dict[str, np.ndarray]
    counts: dict[str, int]

    @property
    def com(self) -> float:
        return ((self.csdc + self.pc + self.dc) / 3 + self.d) / 2  # plot_results.py

    @property
    def cor(self) -> float:
        return self.sd

    @property
    def con(self) -> float:
        return self.ts

    @property
    def mx(self) -> float:
        return (self.com + self.cor + self.con) / 3  # plot_results.py: mean of results[2:] = Com, Cor, Con


def needed_explanations(inputs: ProtocolInputs) -> set[tuple[int, int]]:
    """The (image, class) pairs the protocols read: the target (CSDC, SD, D), the prediction (PC, DC)
    and the target-sensitivity pair."""
    out = set()
    for i, (label, predicted) in enumerate(zip(inputs.labels, inputs.logits.argmax(1))):
        out |= {(i, int(label)), (i, int(predicted))}
        pair = sensitivity_pair(inputs.classes, int(label))
        if pair is not None:
            out |= {(i, pair[0]), (i, pair[1])}
    return out


def csdc(inputs: ProtocolInputs) -> np.ndarray:
    """N×T: per correctly classified image the best minimal-set coverage at each threshold (NaN otherwise)."""
    out = np.full((len(inputs.labels), len(THRESHOLDS)), np.nan)
    for i, label in enumerate(inputs.labels):
        if inputs.logits[i].argmax() != label:
            continue
        e = inputs.explanations[(i, int(label))]
        sets = minimal_sufficient_part_sets(inputs.classes, inputs.part_names, int(label))
        for t, parts in enumerate(e.important_keys(False)):
            out[i, t] = max([0.0, *(len(set(s) & set(parts)) / len(s) for s in sets)])
    return out


def preservation_deletion(inputs: ProtocolInputs) -> tuple[np.ndarray, np.ndarray]:
    """N×T PC and DC decisions (1 or 0) of every image."""
    n, t_count = len(inputs.labels), len(THRESHOLDS)
    pc, dc = np.zeros((n, t_count)), np.zeros((n, t_count))
    for i in range(n):
        predicted = int(inputs.logits[i].argmax())
        e = inputs.explanations[(i, predicted)]
        for t, parts in enumerate(e.important_keys(False)):
            kept_only = inputs.removed[i, inputs.removal_index(set(inputs.part_names) - set(parts))].argmax()
            pc[i, t] = float(kept_only == predicted)
            dc[i, t] = float(inputs.removed[i, inputs.removal_index(parts)].argmax() != predicted)
    return pc, dc


def _irrelevant(inputs: ProtocolInputs, i: int) -> list[str]:
    """Parts and background objects whose removal moves the target logit by < 5 % of it or raises it."""
    label = int(inputs.labels[i])
    original = inputs.logits[i, label]
    scores = {p: inputs.removed[i, 1 << b, label] for b, p in enumerate(inputs.part_names)}
    scores.update({background_key(j): inputs.background[i][j, label] for j in range(len(inputs.background[i]))})
    bound = abs(original * BACKGROUND_SHARE)
    return [k for k, s in scores.items() if abs(original - s) < bound or original < s]


def distractibility(inputs: ProtocolInputs) -> np.ndarray:
    """N×T share of the irrelevant keys the target's explanation marks important (NaN: none irrelevant)."""
    out = np.full((len(inputs.labels), len(THRESHOLDS)), np.nan)
    for i, label in enumerate(inputs.labels):
        irrelevant = _irrelevant(inputs, i)
        if not irrelevant:
            continue
        e = inputs.explanations[(i, int(label))]
        for t, parts in enumerate(e.important_keys(True)):
            out[i, t] = len(set(parts) & set(irrelevant)) / len(irrelevant)
    return out


def background_relevant(inputs: ProtocolInputs) -> tuple[np.ndarray, np.ndarray]:
    """Per image: how many background objects' removal lowers the target logit by ≥ 5 %, of how many."""
    relevant, total = np.zeros(len(inputs.labels)), np.zeros(len(inputs.labels))
    for i, label in enumerate(inputs.labels):
        original = inputs.logits[i, int(label)]
        scores = inputs.background[i][:, int(label)]
        relevant[i] = np.sum((np.abs(original - scores) >= abs(original * BACKGROUND_SHARE)) & (original > scores))
        total[i] = len(scores)
    return relevant, total


def single_deletion(inputs: ProtocolInputs) -> np.ndarray:
    """Per image (ρ + 1)/2 of logit drops against importances over the parts (NaN where ρ is undefined)."""
    out = np.full(len(inputs.labels), np.nan)
    for i, label in enumerate(inputs.labels):
        label = int(label)
        drops = [inputs.logits[i, label] - inputs.removed[i, 1 << b, label] for b in range(len(inputs.part_names))]
        e = inputs.explanations[(i, label)].parts
        with warnings.catch_warnings():  # constant drops or importances: ρ undefined (NaN), the image skipped
            warnings.simplefilter("ignore")
            rho = spearmanr(drops, [e[p] for p in inputs.part_names]).statistic
        if not np.isnan(rho):
            out[i] = rho * 0.5 + 0.5
    return out


def target_sensitivity(inputs: ProtocolInputs) -> tuple[np.ndarray, int]:
    """N×2 decisions (NaN: no class pair, or the pair's logits contradict the assumption) and how many
    images the assumption filter dropped."""
    out, filtered = np.full((len(inputs.labels), 2), np.nan), 0
    for i, label in enumerate(inputs.labels):
        pair = sensitivity_pair(inputs.classes, int(label))
        if pair is None:
            continue
        c1, c2 = pair
        shared1, shared2 = shared_parts(inputs.classes, int(label), c1), shared_parts(inputs.classes, int(label), c2)
        without1 = inputs.removed[i, inputs.removal_index(shared1)]
        without2 = inputs.removed[i, inputs.removal_index(shared2)]
        original = inputs.logits[i]
        # "removing A parts should result in larger drop than removing B parts" for both classes
        if not (without1[c1] - original[c1] < without2[c1] - original[c1]
                and without2[c2] - original[c2] < without1[c2] - original[c2]):
            filtered += 1
            continue
        e1, e2 = inputs.explanations[(i, c1)].parts, inputs.explanations[(i, c2)].parts
        out[i, 0] = float(sum(e1[p] for p in shared1) > sum(e2[p] for p in shared1))
        out[i, 1] = float(sum(e1[p] for p in shared2) < sum(e2[p] for p in shared2))
    return out, filtered


def best_threshold(csdc_t: np.ndarray, pc_t: np.ndarray, dc_t: np.ndarray, d_t: np.ndarray) -> int | None:
    """Index of the threshold with the largest CSDC/3 + PC/3 + DC/3 + D, the first strict maximum above 0
    (evaluate_explainability.py); None when no threshold scores above 0."""
    best, index = 0.0, None
    for t in range(len(csdc_t)):
        score = csdc_t[t] / 3.0 + pc_t[t] / 3.0 + dc_t[t] / 3.0 + d_t[t]
        if score > best:
            best, index = score, t
    return index


def _mean(values: np.ndarray) -> float:
    defined = values[~np.isnan(values)]
    return float(defined.mean()) if defined.size else float("nan")


def funnybirds_scores(inputs: ProtocolInputs) -> FunnyBirdsScores:
    """Every protocol, the best threshold and the per-image values (module docstring)."""
    c, (pc, dc), dist = csdc(inputs), preservation_deletion(inputs), distractibility(inputs)
    csdc_t = np.array([_mean(c[:, t]) for t in range(len(THRESHOLDS))])
    pc_t, dc_t = pc.mean(axis=0), dc.mean(axis=0)
    d_rows = ~np.isnan(dist[:, 0])
    d_t = 1 - np.nansum(dist, axis=0) / (d_rows.sum() + 1e-8)  # official: 1 − Σ / (len + 1e-8)
    relevant, total = background_relevant(inputs)
    sd, (ts, filtered) = single_deletion(inputs), target_sensitivity(inputs)
    best = best_threshold(csdc_t, pc_t, dc_t, d_t)
    at = (lambda a: a[best]) if best is not None else (lambda a: float("nan"))
    per_image = {"csdc": c[:, best] if best is not None else np.full(len(c), np.nan),
                 "pc": pc[:, best] if best is not None else np.full(len(c), np.nan),
                 "dc": dc[:, best] if best is not None else np.full(len(c), np.nan),
                 "d": 1 - dist[:, best] if best is not None else np.full(len(c), np.nan),
                 "bi": np.where(total > 0, 1 - relevant / np.where(total > 0, total, 1), np.nan),
                 "sd": sd, "ts": ts.mean(axis=1)}
    return FunnyBirdsScores(
        accuracy=float(np.mean(inputs.logits.argmax(1) == inputs.labels)),
        csdc=float(at(csdc_t)), pc=float(at(pc_t)), dc=float(at(dc_t)), d=float(at(d_t)),
        bi=float(1 - relevant.sum() / total.sum()) if total.sum() else float("nan"),
        sd=_mean(sd), ts=_mean(ts.reshape(-1)),
        best_threshold=float(THRESHOLDS[best]) if best is not None else None,
        per_threshold={"csdc": csdc_t, "pc": pc_t, "dc": dc_t, "d": d_t}, per_image=per_image,
        counts={"images": len(inputs.labels), "csdc": int((~np.isnan(c[:, 0])).sum()), "d": int(d_rows.sum()),
                "sd": int((~np.isnan(sd)).sum()), "ts": int((~np.isnan(ts[:, 0])).sum()), "ts_filtered": filtered})
