"""Figures: several runs side by side on the same test images, viridis with a colorbar, equal
panels, readable class names, vector PDF; the single-run panels drawn the same way."""
import importlib.util
from dataclasses import dataclass, field

import numpy as np
import pytest
from matplotlib.lines import Line2D

from benchmark.cli import main
from benchmark.errors import ProtobenchError
from benchmark.run.store import find_run_dirs
from reports.figures import (COLORMAP, class_label, draw_comparison, draw_explanation, joint_normalise, run_labels,
                             write_comparison)
from tiny_grid import write_tiny_grid

NAMES = ["001.Black_footed_Albatross", "017.Cardinal"]


@dataclass
class FakeEvidence:
    prototype: int
    contribution: float
    activation_map: np.ndarray
    nearest_patch: np.ndarray


@dataclass
class FakeExplanation:
    image_index: int
    label: int
    predicted: int
    image: np.ndarray = field(default_factory=lambda: np.full((224, 224, 3), 128, np.uint8))
    class_names: list = field(default_factory=lambda: list(NAMES))
    gt_maps: np.ndarray = field(default_factory=lambda: np.random.default_rng(0).random((3, 16, 16)))
    top_gt: list = field(default_factory=lambda: [2, 0, 1])
    why: list = field(default_factory=lambda: [
        FakeEvidence(j, 0.5 - j / 10, np.random.default_rng(j).random((16, 16)), np.zeros((48, 48, 3), np.uint8))
        for j in range(2)])


def test_class_label_reads_like_a_caption():
    assert class_label("017.Cardinal") == "Cardinal"
    assert class_label("001.Black_footed_Albatross", 12) == "Black footed\nAlbatross"
    assert class_label("n02085620-Chihuahua") == "n02085620-Chihuahua"


def test_joint_normalise_shares_one_scale():
    low, high = np.zeros((4, 4)), np.full((4, 4), 3.0)  # bicubic resizing keeps a constant map constant
    a, b = joint_normalise([low, high], (8, 8))
    assert a.shape == (8, 8) and np.allclose(a, 0.0) and np.allclose(b, 1.0)
    ramp = np.arange(16, dtype=float).reshape(4, 4)
    (r,) = joint_normalise([ramp], (4, 4))  # same size: values as they are, scaled by (x − 0) / 15
    assert np.allclose(r, ramp / 15.0, atol=1e-6)


def _image_axes(fig):
    return [ax for ax in fig.axes if ax.images]


def test_comparison_puts_runs_side_by_side_with_equal_panels_and_a_colorbar():
    runs = [("vmfproto", [FakeExplanation(0, 0, 0), FakeExplanation(5, 1, 0)]),
            ("protopnet", [FakeExplanation(0, 0, 0), FakeExplanation(5, 1, 1)])]
    fig = draw_comparison(runs, top=2)
    panels = _image_axes(fig)
    image_panels = [ax for ax in panels if ax.get_label() != "<colorbar>"]
    assert len(image_panels) == 2 * (1 + 2 * 2)  # rows × (image + 2 runs × top 2)
    sizes = {(round(ax.get_position().width, 4), round(ax.get_position().height, 4)) for ax in image_panels}
    assert len(sizes) == 1, sizes
    heat = [im for ax in image_panels for im in ax.images[1:]]
    assert heat and all(im.get_cmap().name == COLORMAP for im in heat)
    assert any(ax.get_label() == "<colorbar>" for ax in fig.axes)
    titles = " ".join(ax.get_title() for ax in fig.axes)
    assert "✗" in titles  # run 1 misclassifies image 5
    headers = {t.get_text(): t.get_position()[0] for t in fig.texts}
    top = [ax.get_position() for ax in fig.axes[:5]]  # the first row: image, then 2 panels per run
    for label, (first, last) in (("vmfproto", (top[1], top[2])), ("protopnet", (top[3], top[4]))):
        assert abs(headers[label] - (first.x0 + last.x1) / 2) < 1e-6  # centred over the run's columns
    rules = [artist for artist in fig.artists if isinstance(artist, Line2D)]
    spans = sorted((round(min(r.get_xdata()), 4), round(max(r.get_xdata()), 4)) for r in rules
                   if r.get_ydata()[0] == r.get_ydata()[1])
    assert spans == [(round(top[1].x0, 4), round(top[2].x1, 4)), (round(top[3].x0, 4), round(top[4].x1, 4))]
    separators = sorted(r.get_xdata()[0] for r in rules if r.get_xdata()[0] == r.get_xdata()[1])
    assert len(separators) == 2 and top[0].x1 < separators[0] < top[1].x0 and top[2].x1 < separators[1] < top[3].x0
    assert "Cardinal" in " ".join(ax.get_ylabel() for ax in fig.axes)


def test_single_run_panels_use_the_same_colormap_and_names():
    fig = draw_explanation(FakeExplanation(3, 1, 0))
    text = " ".join([ax.get_title() for ax in fig.axes] + [fig._suptitle.get_text()])
    assert "Cardinal" in text and "Black footed" in text and "wrong" in text
    # wrong: the second row's prototypes are the predicted class's, named so (pN is within a class)
    second_row = [ax.get_title() for ax in fig.axes if ax.images and ax.get_position().y0 < 0.4]
    assert second_row and all(t.startswith("predicted class\np") for t in second_row)
    assert all(ax.images for ax in fig.axes if ax.get_label() != "<colorbar>")  # no empty slot
    rows = {}
    for ax in (a for a in fig.axes if a.get_label() != "<colorbar>"):
        rows.setdefault(round(ax.get_position().y0, 3), []).append(ax.get_position())
    centres = [(min(b.x0 for b in row) + max(b.x1 for b in row)) / 2 for row in rows.values()]
    assert len(rows) == 2 and abs(centres[0] - centres[1]) < 1e-3  # 4 panels over 4: rows centred on each other
    assert all(im.get_cmap().name == COLORMAP for ax in fig.axes for im in ax.images[1:])
    assert any(ax.get_label() == "<colorbar>" for ax in fig.axes)


def test_comparison_pdf_is_vector_with_text(tmp_path):
    runs = [("a", [FakeExplanation(0, 0, 0)]), ("b", [FakeExplanation(0, 0, 0)])]
    written = write_comparison(runs, tmp_path, top=2)
    assert sorted(p.name for p in written) == ["comparison.pdf", "comparison.png"]
    pdf = (tmp_path / "comparison.pdf").read_bytes()
    assert pdf.startswith(b"%PDF") and b"/FontFile2" in pdf  # embedded TrueType: text, not pixels


def test_runs_with_other_test_images_are_refused(tmp_path):
    other = FakeExplanation(0, 0, 0, image=np.zeros((224, 224, 3), np.uint8))
    with pytest.raises(ProtobenchError, match="do not share their test images"):
        write_comparison([("a", [FakeExplanation(0, 0, 0)]), ("b", [other])], tmp_path)
    assert not list(tmp_path.iterdir())


def test_run_labels_name_what_differs():
    specs = [{"method": "vmfproto", "prototypes_per_class": 3, "seed": 0},
             {"method": "my.pkg:MyProto", "prototypes_per_class": 5, "seed": 0}]
    assert run_labels(specs) == ["vMFProto J=3", "MyProto J=5"]
    assert run_labels(specs, ["vMFProto", None]) == ["vMFProto J=3", "MyProto J=5"]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    work = tmp_path_factory.mktemp("fig")
    grid = work / "fig.toml"
    write_tiny_grid(grid, "fig", work / "birds", dataset_args={"classes": 3, "images_per_class": 6, "seed": 0},
                    method_args={"end_to_end_epochs": 1}, sweep=[{"prototypes_per_class": [2, 3]}])
    board = ["--tensorboard", str(work / "tb")] if importlib.util.find_spec("tensorboard") else []
    assert main(["run", str(grid), "--runs-dir", str(work / "runs"), *board]) == 0
    return work, [rd.path for rd in find_run_dirs(work / "runs")]


def test_figures_command_compares_runs_on_the_same_images(two_runs, capsys):
    work, runs = two_runs
    out = work / "figures"
    assert main(["figures", *map(str, runs), "--images", "3", "--out", str(out), "--top", "2"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["comparison.pdf", "comparison.png"]
    assert "comparison.png" in capsys.readouterr().out
    assert (out / "comparison.png").stat().st_size > 20_000


def test_each_run_writes_metrics_jsonl(two_runs):
    from benchmark.run.epochlog import read_epoch_log
    from benchmark.run.store import RunDir

    for path in two_runs[1]:
        records = read_epoch_log(RunDir(path).metrics_path)
        epochs = [r["epoch"] for r in records]
        assert epochs == list(range(1, len(epochs) + 1)) and epochs
        assert all({"epoch", "stage", "seconds", "lr", "terms"} <= set(r) for r in records)
        log = RunDir(path).log_path.read_text()
        assert sum(line.startswith("epoch ") for line in log.splitlines()) == len(records)


def test_run_tensorboard_writes_events_per_run(two_runs):
    pytest.importorskip("tensorboard")
    work, runs = two_runs
    for path in runs:
        assert list((work / "tb" / "fig" / path.name).glob("events.out.tfevents.*"))


def test_plot_curves_reads_the_runs_metrics_jsonl(two_runs):
    work, runs = two_runs
    out = work / "curves.png"
    assert main(["plot", "--curves", *map(str, runs), "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000


def test_every_run_is_checked_before_any_compute(tmp_path, capsys):
    """An adapter that does not import (its PYTHONPATH missing) fails at once, not after the first run's maps."""
    import json

    from benchmark.config import RunSpec

    dirs = []
    for name, method in (("good", "vmfproto"), ("adapter", "mypkg.missing:MyMethod")):
        spec = RunSpec(dataset="synthbirds", backbone="dinov2_vits14", method="vmfproto", prototypes_per_class=2)
        run = tmp_path / "runs" / "g" / name
        run.mkdir(parents=True)
        (run / "spec.json").write_text(json.dumps({**spec.to_json(), "method": method}))
        (run / "checkpoint.pt").write_bytes(b"")  # never read: the checks come first
        dirs.append(str(run))
    assert main(["figures", *dirs, "--out", str(tmp_path / "figs")]) == 2
    err = capsys.readouterr().err
    assert "mypkg.missing:MyMethod" in err and "PYTHONPATH" in err
    assert not (tmp_path / "figs").exists()
