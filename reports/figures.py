"""Activation-map figures (matplotlib) a paper can use.

- :func:`draw_comparison`: the paper's qualitative figure — the same test images (rows) side by
  side across runs (column groups), each run's top-k ground-truth-class prototype maps over the
  image.
- :func:`draw_explanation`: one run, one image — its top ground-truth-class prototype maps, and
  per prediction the prototypes that drove it (nearest training patch, activation map,
  contribution to the logit).

Both use a perceptually uniform colormap (viridis) with a colorbar, equal square panels,
8-pt type and readable class names, and are written as PNG and vector PDF. Reads the plain
arrays of ``benchmark.run.explain.Explanation``; imports no training code.
"""
from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Protocol, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import Normalize  # noqa: E402
from PIL import Image  # noqa: E402

from reports.figure_style import EMBEDDED_FONTS, SCREEN, FigureStyle, drawing  # noqa: E402
from reports.layouts import display_name  # noqa: E402

FORMATS = ("png", "pdf")
COLORMAP = "viridis"  # perceptually uniform, readable in greyscale and by colour-blind readers
OVERLAY_ALPHA = 0.55
PANEL_INCHES = 1.15  # every image panel is this wide and high
FONT_SIZE = 8
plt.rcParams.update(EMBEDDED_FONTS)  # TrueType in the PDF: editable, selectable text


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


def class_label(name: str, width: int = 20) -> str:
    """A dataset class name for a caption: CUB's ``"017.Cardinal"`` / ``"Black_footed_Albatross"``
    → ``"Cardinal"`` / ``"Black footed Albatross"``, wrapped to ``width`` characters a line."""
    readable = re.sub(r"^\d+\.", "", name).replace("_", " ").strip()
    return "\n".join(textwrap.wrap(readable, width)) or name


def upsample(activation: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A token-grid map resized bicubically to the image (``size`` = rows, cols), not rescaled."""
    img = Image.fromarray(activation.astype(np.float32), mode="F").resize(size[::-1], Image.BICUBIC)
    return np.asarray(img)


def joint_normalise(maps: Sequence[np.ndarray], size: tuple[int, int]) -> list[np.ndarray]:
    """The maps upsampled to ``size`` and min-max scaled to [0, 1] with one (min, max) over all of
    them, so the shades compare across the maps of a row and the colorbar reads the same for each."""
    upsampled = [upsample(m, size) for m in maps]
    if not upsampled:
        return []
    low = min(float(u.min()) for u in upsampled)
    span = max(float(u.max()) for u in upsampled) - low
    return [(u - low) / span if span > 0 else np.zeros_like(u) for u in upsampled]


def _blank(ax: plt.Axes) -> None:
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)


def _overlay(ax: plt.Axes, image: np.ndarray, heat: np.ndarray, title: str) -> None:
    ax.imshow(image)
    ax.imshow(heat, cmap=COLORMAP, vmin=0.0, vmax=1.0, alpha=OVERLAY_ALPHA)
    ax.set_title(title, fontsize=FONT_SIZE)
    _blank(ax)


def _colorbar(fig: plt.Figure, axes: np.ndarray, label: str) -> None:
    mappable = plt.cm.ScalarMappable(norm=Normalize(0.0, 1.0), cmap=COLORMAP)
    bar = fig.colorbar(mappable, ax=list(axes.flat), fraction=0.025, pad=0.02, aspect=30)
    bar.set_label(label, fontsize=FONT_SIZE)
    bar.ax.tick_params(labelsize=FONT_SIZE)


def _figure(rows: int, columns: int, title_lines: int = 2, panel: float = PANEL_INCHES) -> tuple[plt.Figure, np.ndarray]:
    """A grid of square panels of ``panel`` inches, room above each for ``title_lines`` lines of text."""
    height = rows * (panel + 0.14 * title_lines + 0.08) + 0.45
    fig, axes = plt.subplots(rows, columns, figsize=(columns * panel + 1.0, height), squeeze=False,
                             layout="constrained")
    for ax in axes.flat:
        ax.set_axis_off()
    return fig, axes


def _centred_rows(fig: plt.Figure, counts: Sequence[int]) -> list[list[plt.Axes]]:
    """Rows of ``counts[r]`` square panels each, every row centred on the widest (no empty slot at
    a row's end): a grid of half-panel columns, a shorter row starting half a panel further in per
    panel it lacks."""
    columns = max(counts)
    grid = fig.add_gridspec(len(counts), 2 * columns)
    rows = []
    for r, count in enumerate(counts):
        offset = columns - count
        rows.append([fig.add_subplot(grid[r, offset + 2 * k: offset + 2 * k + 2]) for k in range(count)])
    return rows


def panel_inches(columns: int, width: float | None) -> float:
    """The panel size that makes ``columns`` panels and the colorbar (1 in) ``width`` inches wide
    (None: PANEL_INCHES)."""
    return PANEL_INCHES if width is None else (width - 1.0) / columns


def draw_explanation(exp: ExplanationLike, *, width: float | None = None, title: bool = True) -> plt.Figure:
    """One figure: row 1 the image and its top ground-truth-class prototype maps; row 2 for each
    prototype that drove the prediction its nearest training patch and its activation map. Rows
    are centred; when the prediction is wrong, row 2's prototypes are named as the predicted
    class's (pN indexes the prototypes within a class)."""
    counts = [1 + len(exp.top_gt), 2 * len(exp.why)] if exp.why else [1 + len(exp.top_gt)]
    columns = max(counts)
    panel = panel_inches(columns, width)
    whose = "" if exp.label == exp.predicted else "predicted class\n"  # a third title line in row 2
    height = len(counts) * (panel + 0.36) + 0.14 * (whose != "") + 0.45
    fig = plt.figure(figsize=(columns * panel + 1.0, height), layout="constrained")
    rows = _centred_rows(fig, counts)
    truth, guess = class_label(exp.class_names[exp.label]), class_label(exp.class_names[exp.predicted])
    size = exp.image.shape[:2]
    rows[0][0].imshow(exp.image)
    rows[0][0].set_title(f"test image #{exp.image_index}\n{truth}", fontsize=FONT_SIZE)
    _blank(rows[0][0])
    for ax, j, heat in zip(rows[0][1:], exp.top_gt, joint_normalise([exp.gt_maps[j] for j in exp.top_gt], size)):
        _overlay(ax, exp.image, heat, f"true class\nprototype p{j}")
    why_heat = joint_normalise([ev.activation_map for ev in exp.why], size)
    for k, (ev, heat) in enumerate(zip(exp.why, why_heat)):
        patch_ax, map_ax = rows[1][2 * k], rows[1][2 * k + 1]
        patch_ax.imshow(ev.nearest_patch)
        patch_ax.set_title(f"{whose}p{ev.prototype}: nearest\ntraining patch", fontsize=FONT_SIZE)
        _blank(patch_ax)
        _overlay(map_ax, exp.image, heat, f"{whose}p{ev.prototype} activation\n{ev.contribution:+.2f} to logit")
    _colorbar(fig, np.array([ax for row in rows for ax in row]), "activation (min–max over the maps of its row)")
    legend = ("row 1: the true class's prototypes with the highest peaks; row 2: the predicted class's "
              "prototypes by contribution to its logit")
    fig.supxlabel(textwrap.fill(legend, width=int(fig.get_figwidth() * 15)), fontsize=FONT_SIZE - 1)
    verdict = "correct" if exp.label == exp.predicted else f"wrong; true: {truth}"
    if title:
        fig.suptitle(f"predicted: {guess} ({verdict})".replace("\n", " "), fontsize=FONT_SIZE + 1)
    return fig


def draw_comparison(runs: Sequence[tuple[str, Sequence[ExplanationLike]]], *, top: int = 3,
                    width: float | None = None) -> plt.Figure:
    """Rows: the test images; columns: the image, then for each run (label, its explanations of
    the same images in the same order) its ``top`` ground-truth-class prototype maps by peak
    activation, one (min, max) per run and image. Each run's label spans its columns over a rule,
    vertical rules separate the column groups, and a ✗ marks a run that misclassified the image."""
    images = runs[0][1]
    widths = [min(top, len(exps[0].top_gt)) for _, exps in runs]
    fig, axes = _figure(len(images), 1 + sum(widths), panel=panel_inches(1 + sum(widths), width))
    for row, first in enumerate(images):
        size = first.image.shape[:2]
        ax = axes[row, 0]
        ax.set_axis_on()
        ax.imshow(first.image)
        ax.set_ylabel(class_label(first.class_names[first.label], 16), fontsize=FONT_SIZE)
        _blank(ax)
        if row == 0:
            ax.set_title("\ntest image", fontsize=FONT_SIZE)  # the first line is the run headers' room
        column = 1
        for _, exps in runs:
            exp = exps[row]
            shown = exp.top_gt[:top]
            for k, (j, heat) in enumerate(zip(shown, joint_normalise([exp.gt_maps[j] for j in shown], size))):
                mark = "" if exp.predicted == exp.label or k else " ✗"
                room = "\n" if row == 0 else ""
                axes[row, column].set_axis_on()
                _overlay(axes[row, column], exp.image, heat, f"{room}p{j}{mark}")
                column += 1
    _colorbar(fig, axes, "activation (min–max over a run's maps of the image)")
    fig.supxlabel("pN: prototype N of the true class, by peak activation; ✗: the run misclassifies the image",
                  fontsize=FONT_SIZE - 1)
    _run_headers(fig, axes, [label for label, _ in runs], widths)
    return fig


def _run_headers(fig: plt.Figure, axes: np.ndarray, labels: Sequence[str], widths: Sequence[int]) -> None:
    """Each run's label centred over its columns with a rule under it, and a vertical rule between
    column groups. Placed on the finished layout, which is then frozen so that saving keeps it."""
    from matplotlib.lines import Line2D

    fig.canvas.draw()  # runs the constrained layout
    fig.set_layout_engine("none")
    boxes = [ax.get_position() for ax in axes[0]]  # figure coordinates
    title = axes[0, 1].title.get_window_extent().transformed(fig.transFigure.inverted())
    rule = (title.y0 + title.y1) / 2  # between the header line and the prototype names
    bottom = axes[-1, 0].get_position().y0
    start = 1
    for label, width in zip(labels, widths):
        first, last = boxes[start], boxes[start + width - 1]
        fig.add_artist(Line2D([first.x0, last.x1], [rule, rule], color="0.25", linewidth=0.6))
        fig.text((first.x0 + last.x1) / 2, rule + 0.004, label, ha="center", va="bottom", fontsize=FONT_SIZE)
        separator = (boxes[start - 1].x1 + first.x0) / 2
        fig.add_artist(Line2D([separator, separator], [bottom, rule], color="0.6", linewidth=0.6))
        start += width


LABEL_FIELDS = (("prototypes_per_class", "J={}"), ("seed", "seed {}"), ("backbone", "{}"), ("variant", "{}"),
                ("dataset", "{}"))


def run_labels(specs: Sequence[dict[str, object]], display_names: Sequence[str | None] | None = None) -> list[str]:
    """A caption per run (from its spec.json): the method's display name
    (:func:`reports.layouts.display_name`; ``display_names``: those the results recorded), then each
    of J, seed, backbone, variant, dataset that differs between the runs."""
    differing = [(key, fmt) for key, fmt in LABEL_FIELDS if len({str(s.get(key)) for s in specs}) > 1]
    names = display_names or [None] * len(specs)
    labels = []
    for spec, name in zip(specs, names):
        method = display_name(str(spec.get("method", "?")), name)
        labels.append(" ".join([method, *(fmt.format(spec.get(key)) for key, fmt in differing)]))
    return labels


def check_same_images(runs: Sequence[tuple[str, Sequence[ExplanationLike]]]) -> None:
    """Every run must explain the same test images (same split, same order) to sit side by side."""
    first_label, first = runs[0]
    for label, exps in runs[1:]:
        same = len(exps) == len(first) and all(
            a.image_index == b.image_index and a.label == b.label and np.array_equal(a.image, b.image)
            for a, b in zip(first, exps))
        if not same:
            from benchmark.errors import ProtobenchError

            raise ProtobenchError(f"runs {first_label!r} and {label!r} do not share their test images (another "
                                  "dataset, data_root or image size); compare runs of one dataset")


def _save(fig: plt.Figure, stem: Path) -> list[Path]:
    written = []
    for fmt in FORMATS:
        path = stem.with_suffix(f".{fmt}")
        fig.savefig(path, dpi=200)
        written.append(path)
    plt.close(fig)
    return written


def write_figures(explanations: Sequence[ExplanationLike], out_dir: Path, *,
                  style: FigureStyle = SCREEN) -> list[Path]:
    """One PNG and one PDF per explained image; returns the files written. ``style`` paper: the
    text width (``reports.figure_style``), no title inside."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for exp in explanations:
        with drawing(style):
            figure = draw_explanation(exp, width=style.text_inches, title=style.titles)
            written += _save(figure, out_dir / f"test_{exp.image_index:05d}")
    return written


def write_comparison(runs: Sequence[tuple[str, Sequence[ExplanationLike]]], out_dir: Path, *,
                     top: int = 3, style: FigureStyle = SCREEN) -> list[Path]:
    """``comparison.png`` and ``comparison.pdf``: :func:`draw_comparison` of the runs (``style``
    paper: the text width)."""
    check_same_images(runs)
    out_dir.mkdir(parents=True, exist_ok=True)
    with drawing(style):
        return _save(draw_comparison(runs, top=top, width=style.text_inches), out_dir / "comparison")
