"""The settings of the robustness stage (``protobench evaluate RUN --robustness ...``), each checked
before compute and refused naming its option.

Defaults follow the official spatial-misalignment code (Sacha et al., AAAI 2024,
``spatial_alignment_test/run_adversarial_test.py``: ``--epsilon 0.4``, ``--epsilon_iter 0.01``,
``--nb_iter 40`` on ImageNet-normalised images; ``find_high_activation_crop``'s 95th percentile).
The suite attacks images in pixel units ([0, 1], clamped to it), so the official budgets are
carried over through the mean ImageNet standard deviation (0.226): ε = 0.4 · 0.226 ≈ 0.09,
step = 0.01 · 0.226 ≈ 0.00226 (docs/protocol/robustness.md).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from benchmark.errors import ProtobenchError

FAMILIES: tuple[str, ...] = ("misalignment", "faithfulness", "perturbation")
MEAN_IMAGENET_STD = (0.229 + 0.224 + 0.225) / 3
DEFAULT_EPSILON = round(0.4 * MEAN_IMAGENET_STD, 4)  # official --epsilon 0.4 (normalised units)
DEFAULT_STEP = round(0.01 * MEAN_IMAGENET_STD, 5)  # official --epsilon_iter 0.01
DEFAULT_STEPS = 40  # official --nb_iter
DEFAULT_PERCENTILE = 95.0  # ProtoPNet find_high_activation_crop(percentile=95)
DEFAULT_TOP_K = 1  # official --attack_type top_proto: one attacked prototype
DEFAULT_BATCH = 8  # the official script's --batch_size
SUBSAMPLE_SEED = 20230527  # the official script's np.random.seed before drawing its subsample
ATTACK_SEED = 1234  # the official script's np.random.seed in __main__; here, the PGD starts' generator


@dataclass(frozen=True)
class RobustnessOptions:
    """What ``--robustness`` and its companions ask for."""

    families: tuple[str, ...]
    epsilon: float = DEFAULT_EPSILON
    step: float = DEFAULT_STEP
    steps: int = DEFAULT_STEPS
    percentile: float = DEFAULT_PERCENTILE
    top_k: int = DEFAULT_TOP_K
    images: int | None = None  # the subsample's size; None: the whole test split
    batch_size: int = DEFAULT_BATCH

    def settings(self) -> dict[str, Any]:
        """The settings recorded beside the scores (and keying resumable partial results)."""
        return {**asdict(self), "families": list(self.families), "subsample_seed": SUBSAMPLE_SEED,
                "attack_seed": ATTACK_SEED}


def parse_families(text: str) -> tuple[str, ...]:
    """``"misalignment,faithfulness"`` → the families, each known, in the suite's order."""
    asked = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in asked if name not in FAMILIES]
    if not asked or unknown:
        raise ProtobenchError(f"--robustness {text!r}: {'unknown ' + ', '.join(unknown) if unknown else 'empty'}; "
                              f"give a comma-separated list of {', '.join(FAMILIES)}")
    return tuple(name for name in FAMILIES if name in asked)


def check_options(options: RobustnessOptions, test_images: int) -> None:
    """Refuse an option out of range, naming it, before any compute."""
    if not 0 < options.epsilon <= 1:
        raise ProtobenchError(f"--robustness-epsilon {options.epsilon}: the L∞ budget is in pixel units, in (0, 1]; "
                              f"the default is {DEFAULT_EPSILON}")
    if not 0 < options.step <= options.epsilon:
        raise ProtobenchError(f"--robustness-step {options.step}: the PGD step must be in (0, ε = {options.epsilon}]")
    if options.steps < 1:
        raise ProtobenchError(f"--robustness-steps {options.steps}: PGD needs at least 1 step (default "
                              f"{DEFAULT_STEPS})")
    if not 0 < options.percentile < 100:
        raise ProtobenchError(f"--robustness-percentile {options.percentile}: the high-activation box's percentile "
                              f"must be in (0, 100) (default {DEFAULT_PERCENTILE:g})")
    if options.top_k < 1:
        raise ProtobenchError(f"--robustness-top-k {options.top_k}: attack at least 1 prototype")
    if options.images is not None and not 1 <= options.images <= test_images:
        raise ProtobenchError(f"--robustness-images {options.images}: the subsample must hold 1 to {test_images} "
                              "images (the test split's size); leave it out for the whole split")
    if options.batch_size < 1:
        raise ProtobenchError(f"--robustness-batch {options.batch_size}: give at least 1 image per batch")
