"""Activation-map figures (matplotlib): the paper's qualitative panel (top-4 ground-truth-class
prototype maps over the image) and a "why" panel per prediction (the prototypes that drove it:
their nearest training patch, activation map and contribution to the logit). Reads the plain
arrays of ``benchmark.explain.Explanation``; imports no training code."""
from __future__ import annotations

from pathlib import Path
from typing import Protocol, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

FORMATS = ("png", "pdf")


class Evidence(Protocol):
    prototype: int
    contribution: float
    activation_map: np.ndarray
    nearest_patch: np.ndarray


class ExplanationLike(Protocol):
    image_index: int
    image: np.ndarray
    label: int
    predicted: int
    class_names: list[str]
    gt_maps: np.ndarray
    top_gt: list[int]
    why: Sequence[Evidence]


def upsample(activation: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A token-grid map resized bicubically to the image and min-max normalised to [0, 1]."""
    img = Image.fromarray(activation.astype(np.float32), mode="F").resize(size[::-1], Image.BICUBIC)
    out = np.asarray(img)
    span = out.max() - out.min()
    return (out - out.min()) / span if span > 0 else np.zeros_like(out)


def _overlay(ax: plt.Axes, image: np.ndarray, activation: np.ndarray, title: str) -> None:
    ax.imshow(image)
    ax.imshow(upsample(activation, image.shape[:2]), cmap="jet", alpha=0.45)
    ax.set_title(title, fontsize=8)
    ax.axis("off")


def draw_explanation(exp: ExplanationLike) -> plt.Figure:
    """One figure: row 1 the image and its top-4 GT-class prototype maps; row 2 the "why" panel."""
    columns = max(1 + len(exp.top_gt), 3 * len(exp.why), 1)
    fig, axes = plt.subplots(2, columns, figsize=(1.9 * columns, 4.2), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    truth, guess = exp.class_names[exp.label], exp.class_names[exp.predicted]
    axes[0, 0].imshow(exp.image)
    axes[0, 0].set_title(f"test #{exp.image_index}\ntrue: {truth}", fontsize=8)
    for k, j in enumerate(exp.top_gt):
        _overlay(axes[0, 1 + k], exp.image, exp.gt_maps[j], f"{truth}\nprototype {j}")
    for k, ev in enumerate(exp.why):
        patch_ax, map_ax, text_ax = axes[1, 3 * k], axes[1, 3 * k + 1], axes[1, 3 * k + 2]
        patch_ax.imshow(ev.nearest_patch)
        patch_ax.set_title(f"prototype {ev.prototype}\nnearest training patch", fontsize=8)
        _overlay(map_ax, exp.image, ev.activation_map, "activation")
        text_ax.text(0.0, 0.5, f"contribution to\nlogit of {guess}:\n{ev.contribution:+.3f}", fontsize=8, va="center")
    fig.suptitle(f"predicted: {guess}" + ("" if exp.label == exp.predicted else f"  (true: {truth})"), fontsize=9)
    fig.tight_layout()
    return fig


def write_figures(explanations: Sequence[ExplanationLike], out_dir: Path) -> list[Path]:
    """One PNG and one PDF per explained image; returns the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for exp in explanations:
        fig = draw_explanation(exp)
        for fmt in FORMATS:
            path = out_dir / f"test_{exp.image_index:05d}.{fmt}"
            fig.savefig(path, dpi=150)
            written.append(path)
        plt.close(fig)
    return written
