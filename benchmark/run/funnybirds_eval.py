"""The FunnyBirds protocols in a run's evaluation (docs/protocol/funnybirds.md): on a FunnyBirds test
split, every rendered intervention goes through the trunk once, into the token cache like the
stability-noise view (:class:`InterventionImages`, split ``test_interventions``), and the method's head
reads those tokens for the logits the protocols compare. Explanations are the class evidence maps of
:mod:`metrics.funnybirds_explain` (one rule for every method), of the classes each protocol asks for.
The same protocols score the method's head at initialisation (the head ``sanity`` rebuilds): the
control row, chance level for every protocol."""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from benchmark.cache.tokens import TokenSource
from benchmark.data import ImageDataset
from benchmark.data.fingerprint import split_fingerprint
from benchmark.data.funnybirds import FunnyBirdsSet, intervention_paths, read_funnybirds_set
from benchmark.data.transforms import open_rgb
from benchmark.progress import Progress
from benchmark.run.prediction import block_output_reused
from methods.base import PrototypeMethod
from methods.common.precision import autocast
from metrics.funnybirds import Explanation, FunnyBirdsScores, ProtocolInputs, funnybirds_scores, needed_explanations
from metrics.funnybirds_boxes import box_important_parts
from metrics.funnybirds_explain import part_explanations
from metrics.maps import upsample_maps
from metrics.funnybirds_parts import THRESHOLDS, dilated_masks

if TYPE_CHECKING:
    from benchmark.run.prepare import Prepared

#: the scores a FunnyBirds run records (percent; None where undefined), in ``result.json``'s ``funnybirds``
#: section (not in ``metrics``: FunnyBirds' Con, contrastivity, is not the suite's con, consistency)
FUNNYBIRDS_KEYS: tuple[str, ...] = ("csdc", "pc", "dc", "d", "bi", "sd", "ts", "com", "cor", "con", "mx")
#: the per-image columns (percent; CSDC … D at the best threshold)
PER_IMAGE_KEYS: tuple[str, ...] = ("csdc", "pc", "dc", "d", "bi", "sd", "ts")
INTERVENTION_SPLIT = "test_interventions"
BOX_READING_METHODS = ("protopnet",)  # the methods whose published FunnyBirds numbers read prototype boxes


class InterventionImages(torch.utils.data.Dataset):
    """Every rendered intervention of a FunnyBirds test split (:func:`intervention_paths` order: image i's
    2^P part interventions, then its background objects), transformed as the test images are; item k →
    (image, label of its test image, k). A token-cache dataset (its own split and fingerprint)."""

    def __init__(self, test_set: ImageDataset, truth: FunnyBirdsSet) -> None:
        self.test_set, self.truth, self.split = test_set, truth, INTERVENTION_SPLIT
        per_image = [intervention_paths(truth, i) for i in range(len(truth.labels))]
        self.paths = [p for paths in per_image for p in paths]
        self.owners = np.repeat(np.arange(len(per_image)), [len(paths) for paths in per_image])
        self.labels = truth.labels[self.owners]
        self._fingerprint: str | None = None

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, int]:
        return self.test_set.transform(open_rgb(self.paths[index])), int(self.labels[index]), index

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            root = self.truth.root
            self._fingerprint = split_fingerprint(
                name="funnybirds", split=self.split, root=root,
                annotation_files=[root / "parts.json", root / "classes.json", root / "dataset_test.json"],
                content_files=self.paths)
        return self._fingerprint


@dataclass
class FunnyBirdsData:
    """A FunnyBirds test split's ground truth and its interventions' tokens."""

    truth: FunnyBirdsSet
    interventions: TokenSource
    box_reading: bool = False  # ProtoPNet: also its box reading (metrics/funnybirds_boxes.py)
    #: per test image its part map and dilated part masks, read once for the trained head and the control
    masks: dict[int, tuple[np.ndarray, tuple[list[str], np.ndarray]]] = field(default_factory=dict)

    def part_masks(self, i: int) -> tuple[np.ndarray, tuple[list[str], np.ndarray]]:
        if i not in self.masks:
            part_map = self.truth.part_map(i)
            self.masks[i] = part_map, dilated_masks(part_map, with_bg=True)
        return self.masks[i]


def open_funnybirds(prep: Prepared, cache_root: Path | None, progress: Progress) -> FunnyBirdsData | None:
    """The interventions' tokens of a run scored on a FunnyBirds test split (built into the token cache on
    first use: one trunk pass per intervention image), else None."""
    if prep.spec.dataset != "funnybirds" or prep.test_set is None:
        return None
    truth = read_funnybirds_set(prep.test_set.root, "test")
    return FunnyBirdsData(truth, prep.view_source(InterventionImages(prep.test_set, truth), cache_root, progress),
                          box_reading=prep.spec.method in BOX_READING_METHODS)


@torch.no_grad()
def _logits(method: PrototypeMethod, source: TokenSource, *, batch_size: int, device: torch.device,
            precision: str) -> np.ndarray:
    method.eval()
    rows = []
    for start in range(0, len(source), batch_size):
        batch = source.batch(torch.arange(start, min(start + batch_size, len(source))), device, reads=method.reads)
        with block_output_reused(method), autocast(precision, device):
            rows.append(method.logits(batch).float().cpu())
    return torch.cat(rows).double().numpy()


@torch.no_grad()
def _explanations(method: PrototypeMethod, clean: TokenSource, data: FunnyBirdsData, pairs: set[tuple[int, int]], *,
                  batch_size: int, device: torch.device, precision: str,
                  boxes: dict[tuple[int, int], Explanation] | None = None) -> dict[tuple[int, int], Explanation]:
    """The explanation of every (image, class) pair asked for, from one pass per class slot; with ``boxes``,
    the same importances with the box reading's important parts are put there too."""
    wanted: dict[int, list[int]] = {i: [] for i in range(len(clean))}
    for i, c in sorted(pairs):
        wanted[i].append(c)
    slots = max(len(v) for v in wanted.values())
    out: dict[tuple[int, int], Explanation] = {}
    for start in range(0, len(clean), batch_size):
        rows = torch.arange(start, min(start + batch_size, len(clean)))
        batch = clean.batch(rows, device, reads=method.reads)
        per_slot = []
        with block_output_reused(method), autocast(precision, device):  # one block pass for every slot
            for s in range(slots):  # slot s: each image's s-th class (its last one again where it has fewer)
                classes = torch.tensor([wanted[i][min(s, len(wanted[i]) - 1)] for i in rows.tolist()], device=device)
                per_slot.append((method.activation_maps(batch, classes).double().cpu(),
                                 method.prototype_contributions(batch, classes).double().cpu()))
        for b, i in enumerate(rows.tolist()):
            classes = wanted[i]  # never empty: every image's target is asked for
            maps = torch.stack([per_slot[s][0][b] for s in range(len(classes))])
            contributions = torch.stack([per_slot[s][1][b] for s in range(len(classes))])
            part_map, masks = data.part_masks(i)
            for k, (c, explanation) in enumerate(zip(classes, part_explanations(maps, contributions, part_map, masks))):
                out[(i, c)] = explanation
                if boxes is not None:  # ProtoPNet's push and figures upsample with cv2 INTER_CUBIC: bicubic
                    upsampled = upsample_maps(maps[k], size=part_map.shape[0], mode="bicubic").numpy()
                    boxes[(i, c)] = replace(explanation, important=box_important_parts(upsampled, part_map, masks=masks))
    return out


def protocol_scores(method: PrototypeMethod, logits: np.ndarray, clean: TokenSource, data: FunnyBirdsData, *,
                    batch_size: int, device: torch.device, precision: str,
                    box_reading: bool = False) -> tuple[FunnyBirdsScores, FunnyBirdsScores | None]:
    """Every protocol for ``method`` (``logits``: its N×C test logits, in test order); with ``box_reading``
    also every protocol under ProtoPNet's box reading."""
    truth = data.truth
    inter = _logits(method, data.interventions, batch_size=batch_size, device=device, precision=precision)
    subsets = 2 ** len(truth.part_names)
    removed, background, at = np.zeros((len(truth.labels), subsets, inter.shape[1])), [], 0
    for i in range(len(truth.labels)):
        removed[i] = inter[at:at + subsets]
        count = int(truth.background[i])
        background.append(inter[at + subsets:at + subsets + count])
        at += subsets + count
    inputs = ProtocolInputs(classes=truth.classes, part_names=truth.part_names, labels=truth.labels,
                            logits=np.asarray(logits, dtype=np.float64), removed=removed, background=background)
    boxes: dict[tuple[int, int], Explanation] | None = {} if box_reading else None
    explanations = _explanations(method, clean, data, needed_explanations(inputs), batch_size=batch_size,
                                 device=device, precision=precision, boxes=boxes)
    return (funnybirds_scores(replace(inputs, explanations=explanations)),
            funnybirds_scores(replace(inputs, explanations=boxes)) if boxes is not None else None)


def _percent(value: float) -> float | None:
    return None if value is None or np.isnan(value) else 100.0 * float(value)


def _summary(scores: FunnyBirdsScores) -> dict[str, float | None]:
    return {key: _percent(getattr(scores, key)) for key in FUNNYBIRDS_KEYS}


def funnybirds_evaluation(method: PrototypeMethod, initial: PrototypeMethod | None, logits: torch.Tensor,
                          clean: TokenSource, data: FunnyBirdsData, *, batch_size: int, device: torch.device,
                          precision: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``result.json``'s ``funnybirds`` section (``scores``, ``control``: the same for the head at
    initialisation, ``notes``, best threshold, counts) and the per-image columns of one run."""
    tic = time.perf_counter()
    notes: dict[str, str] = {}
    run = dict(batch_size=batch_size, device=device, precision=precision)
    accuracy = _percent(float(np.mean(logits.argmax(dim=1).numpy() == data.truth.labels)))
    try:
        scores, boxed = protocol_scores(method, logits.double().numpy(), clean, data, box_reading=data.box_reading,
                                        **run)
    except NotImplementedError as err:
        notes[", ".join(FUNNYBIRDS_KEYS)] = (f"not computed: {type(method).__name__} gives no activation maps "
                                             f"({err}); FunnyBirds reads its accuracy only")
        return {"scores": {"acc": accuracy, **{key: None for key in FUNNYBIRDS_KEYS}}, "notes": notes}, {}
    details: dict[str, Any] = {
        "scores": {"acc": accuracy, **_summary(scores)},
        "best_threshold": scores.best_threshold,
        "thresholds": f"np.linspace(0.01, 0.50, num={len(THRESHOLDS)}) (official get_p_thresholds)",
        "counts": scores.counts,
        "interventions": len(data.interventions),
        "explanation": "class evidence maps (metrics/class_evidence.py), upsampled bilinearly to the part map",
    }
    if boxed is not None:
        details["protopnet_boxes"] = {
            **{key: _percent(getattr(boxed, key)) for key in ("csdc", "pc", "dc", "d", "com")},
            "best_threshold": boxed.best_threshold,
            "reading": "a part is important where the union of the class's prototype boxes (95th-percentile "
                       "crops of the bicubically upsampled maps) covers more than the threshold's share of it; "
                       "SD, TS and BI do not read important parts and equal the headline's"}
    if scores.best_threshold is None:
        notes["csdc, pc, dc, d"] = "undefined: no threshold scores CSDC/3 + PC/3 + DC/3 + D above 0"
    if initial is not None:
        control_logits = _logits(initial, clean, **run)
        control, _ = protocol_scores(initial, control_logits, clean, data, **run)
        details["control"] = {"acc": _percent(control.accuracy), **_summary(control),
                              "best_threshold": control.best_threshold,
                              "head": "re-initialised as the method builds it (the run's seed); the trunk unchanged"}
    else:
        notes["funnybirds control"] = "not computed: no re-initialised head was given to this evaluation"
    details["notes"] = notes
    details["seconds"] = time.perf_counter() - tic
    per_image = {key: 100.0 * scores.per_image[key] for key in PER_IMAGE_KEYS}
    return details, per_image
