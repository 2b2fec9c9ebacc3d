"""What the FunnyBirds protocols read off an explanation and the class design (Hesse, Schaub-Meyer and
Roth, ICCV 2023; visinf/funnybirds-framework ``explainers/explainer_wrapper.py`` and
``datasets/funny_birds.py``), as pure functions:

* part importance: the attribution summed inside each part's mask dilated by a 5×5 square (the
  official ``nn.MaxPool2d(5, stride=1, padding=2)`` of the colour mask), the keys of one part
  (``eye01``, ``eye02``) added; background object j (colour (204, 204, 204 + j), j < 50) as ``bg_0jj``;
* important parts at threshold t: the parts whose importance exceeds t × the attribution's total;
* class distance, the minimal sufficient part sets and the class pair target sensitivity uses.
"""
from __future__ import annotations

from itertools import combinations

import numpy as np
from scipy.ndimage import maximum_filter

#: ``get_p_thresholds``: np.linspace(0.01, 0.50, num=80)
THRESHOLDS: np.ndarray = np.linspace(0.01, 0.50, num=80)
#: the official decoding from part map to part (``FunnyBirds.colors_to_part``), in its order
COLOURS_TO_PART: dict[tuple[int, int, int], str] = {
    (255, 255, 253): "eye01", (255, 255, 254): "eye02", (255, 255, 0): "beak", (255, 0, 1): "foot01",
    (255, 0, 2): "foot02", (0, 255, 1): "wing01", (0, 255, 2): "wing02", (0, 0, 255): "tail",
}
BACKGROUND_OBJECTS = 50  # ``get_part_importance(with_bg=True)`` reads colours (204, 204, 204 + i), i < 50


def alpha(key: str) -> str:
    """``eye01`` → ``eye`` (the official ``''.join(x for x in s if x.isalpha())``)."""
    return "".join(c for c in key if c.isalpha())


def background_key(j: int) -> str:
    return f"bg_{j:03d}"


def dilated_masks(part_map: np.ndarray, with_bg: bool) -> tuple[list[str], np.ndarray]:
    """``(keys, masks)``: per official colour (and with ``with_bg`` each of the 50 background objects) its
    part key and its H×W mask dilated by 5×5 (float64, 0/1). A part with two colours has two rows under
    one key; :func:`part_importances` adds them, as the official loop does."""
    colours = [*COLOURS_TO_PART.items()]
    if with_bg:
        colours += [((204, 204, 204 + j), background_key(j)) for j in range(BACKGROUND_OBJECTS)]
    pm = np.asarray(part_map).astype(np.int64)
    codes = pm[..., 0] << 16 | pm[..., 1] << 8 | pm[..., 2]  # one integer per colour: one comparison per key
    present = set(np.unique(codes).tolist())
    keys, masks = [], np.zeros((len(colours), *pm.shape[:2]), dtype=np.float64)
    for q, (colour, key) in enumerate(colours):
        keys.append(key if key.startswith("bg_") else alpha(key))
        code = colour[0] << 16 | colour[1] << 8 | colour[2]
        if code in present:
            mask = codes == code
            masks[q] = maximum_filter(mask.astype(np.float64), size=5, mode="constant", cval=0.0)
    return keys, masks


def part_importances(keys: list[str], masks: np.ndarray, attributions: np.ndarray) -> list[dict[str, float]]:
    """Per attribution map (K×H×W, the part map's size) its ``{key: summed attribution in the dilated
    mask}``, keys in first-seen order (official ``get_part_importance``)."""
    sums = np.einsum("qhw,khw->kq", masks, np.asarray(attributions, dtype=np.float64))
    out = []
    for row in sums:
        scores: dict[str, float] = {}
        for key, value in zip(keys, row):
            scores[key] = scores.get(key, 0.0) + float(value)
        out.append(scores)
    return out


def important_parts(importance: dict[str, float], total: float, thresholds: np.ndarray = THRESHOLDS) -> list[list[str]]:
    """Per threshold t the keys with importance > total × t (official ``get_important_parts``; ``total``
    is the attribution's sum over the whole image)."""
    return [[key for key, value in importance.items() if value > total * t] for t in thresholds]


def class_distance(classes: list[dict[str, int]], a: int, b: int) -> int:
    """How many parts two classes differ in (``FunnyBirds.class_distance``)."""
    return sum(classes[a][p] != classes[b][p] for p in classes[a])


def minimal_sufficient_part_sets(classes: list[dict[str, int]], part_names: list[str], k: int) -> list[list[str]]:
    """The minimal sets of class ``k``'s part variants that no other class has all of
    (``FunnyBirds.get_minimal_sufficient_part_sets``), as part names. The official loop records a
    sufficient subset only on reaching the last class of the list without a match, so for the last
    class, which skips itself there, it records none: that class has no sets, as officially."""
    if k == len(classes) - 1:
        return []  # the official quirk above (docs/protocol/funnybirds.md)
    others = [{(p, c[p]) for p in part_names} for j, c in enumerate(classes) if j != k]
    sufficient = [set(s) for r in range(1, len(part_names) + 1)
                  for s in combinations([(p, classes[k][p]) for p in part_names], r)
                  if not any(set(s) <= o for o in others)]
    minimal = [s for s in sufficient if not any(t < s for t in sufficient)]
    return [[p for p, _ in sorted(s, key=lambda pv: part_names.index(pv[0]))] for s in minimal]


def shared_parts(classes: list[dict[str, int]], a: int, b: int) -> list[str]:
    """The parts (in class ``a``'s key order) in which two classes agree (official ``class_overlap``)."""
    return [p for p in classes[a] if classes[a][p] == classes[b][p]]


def sensitivity_pair(classes: list[dict[str, int]], target: int) -> tuple[int, int] | None:
    """The two classes at distance 3 from ``target`` whose shared parts with it are disjoint, the
    first such pair in class order (official ``target_sensitivity_protocol``); when no pair is
    disjoint, the last pair the official loop tried; None with fewer than two classes at distance 3
    (the official code then fails or reuses the previous image's pair)."""
    near = [j for j in range(len(classes)) if class_distance(classes, target, j) == 3]
    last = None
    for x in range(len(near)):
        for y in range(x + 1, len(near)):
            last = (near[x], near[y])
            if set(shared_parts(classes, target, near[x])).isdisjoint(shared_parts(classes, target, near[y])):
                return last
    return last
