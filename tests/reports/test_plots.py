"""``protobench plot``: metric vs a dimension (mean, seed spread as error bars) and --curves from
per-epoch ``metrics.jsonl`` (written here by hand in the runner's agreed format)."""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from PIL import Image

from benchmark.cli import main
from benchmark.errors import ProtobenchError
from reports.curves import plot_curves, read_curve
from reports.load import load_results
from reports.plots import plot_results, result_series
from reports_support import write_run

ACC = {
    ("vmfproto", 3): [80.0, 83.0, 86.5], ("vmfproto", 5): [85.0, 87.0], ("nppp", 3): [70.0], ("nppp", 5): [72.0, 71.0],
}


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    for (method, J), values in ACC.items():
        for seed, acc in enumerate(values):
            write_run(root, f"{method}{J}s{seed}", method=method, J=J, seed=seed, metrics={"acc": acc})
    return root


def test_points_are_seed_means_with_sample_std(runs: Path) -> None:
    series = result_series(load_results([runs]), x="J", y="acc", hue="method")
    assert [s.hue for s in series] == ["nppp", "vmfproto"]  # the paper's method order
    for s in series:
        for p in s.points:
            values = ACC[(s.hue, p.x)]
            assert p.n == len(values) and math.isclose(p.mean, statistics.fmean(values))
            assert p.std is None if len(values) == 1 else math.isclose(p.std, statistics.stdev(values))
    assert [s.label for s in series] == ["NPPP", "vMFProto"]


@pytest.mark.parametrize("suffix", [".png", ".pdf"])
def test_cli_draws_a_figure(runs: Path, tmp_path: Path, suffix: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "figs" / f"acc{suffix}"
    assert main(["plot", str(runs), "--x", "J", "--y", "acc", "--hue", "method", "--out", str(out)]) == 0
    assert capsys.readouterr().out == (f"wrote 4 point(s) in 2 series to {out}\n"
                                       "  NPPP: J=3 n=1, J=5 n=2\n  vMFProto: J=3 n=3, J=5 n=2\n")
    if suffix == ".png":
        with Image.open(out) as image:
            assert image.format == "PNG" and image.width > 400
    else:
        assert out.read_bytes().startswith(b"%PDF")


def test_facets_one_panel_per_value(runs: Path, tmp_path: Path) -> None:
    write_run(runs, "other-backbone", backbone="dinov2_vitb14", J=3, metrics={"acc": 90.0})
    series = plot_results(load_results([runs]), tmp_path / "f.png", x="J", y="acc", hue="method", facet="backbone")
    assert {(s.facet, s.hue) for s in series} == {
        ("dinov2_vitb14", "vmfproto"), ("dinov2_vits14", "vmfproto"), ("dinov2_vits14", "nppp")}


def test_plot_mistakes_are_clear_errors(runs: Path, tmp_path: Path) -> None:
    frame = load_results([runs])
    with pytest.raises(ProtobenchError, match=r"method takes 2 values .* --hue or --facet"):
        result_series(frame, x="J", y="acc")
    with pytest.raises(ProtobenchError, match="--y loss: unknown metric; choose one of"):
        result_series(frame, x="J", y="loss", hue="method")
    with pytest.raises(ProtobenchError, match="must differ"):
        result_series(frame, x="method", y="acc", hue="method")
    with pytest.raises(ProtobenchError, match="No result has a value for con"):
        result_series(frame, x="J", y="con", hue="method")
    with pytest.raises(ProtobenchError, match=r"unknown figure type '\.jpg'"):
        plot_results(frame, tmp_path / "x.jpg", x="J", y="acc", hue="method")


def write_metrics(run_dir: Path, records: list[dict], *, spec: dict | None = None) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    if spec is not None:
        (run_dir / "spec.json").write_text(json.dumps(spec), encoding="utf-8")


def epoch(stage: str, n: int, ce: float, lr: float, **terms: float) -> dict:
    return {"epoch": n, "stage": stage, "seconds": 0.5 + n, "lr": {"prototypes": lr}, "terms": {"ce": ce, **terms}}


def test_curves_read_every_term_and_a_resumed_epoch_replaces_the_old_one(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "g" / "r1"
    write_metrics(run, [epoch("discovery", 0, 2.0, 0.1), epoch("end_to_end", 0, 1.5, 0.01, ppd=0.3),
                        epoch("end_to_end", 1, 9.9, 0.01, ppd=9.9),  # interrupted, logged again below
                        epoch("end_to_end", 1, 1.2, 0.005, ppd=0.2)],
                  spec={"method": "vmfproto", "prototypes_per_class": 5, "seed": 1})
    curve = read_curve(run / "metrics.jsonl")
    assert curve.stages == ("discovery", "end_to_end", "end_to_end")
    assert curve.values["ce"] == (2.0, 1.5, 1.2)
    assert curve.values["ppd"][1:] == (0.3, 0.2) and math.isnan(curve.values["ppd"][0])
    assert curve.values["lr.prototypes"] == (0.1, 0.01, 0.005) and curve.values["seconds"] == (0.5, 0.5, 1.5)
    assert curve.label == "vMFProto J=5 seed=1"  # the display name; the run id only where labels collide


def test_cli_curves_of_several_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs" / "g"
    for name, scale in (("r1", 1.0), ("r2", 0.5)):
        write_metrics(runs / name, [epoch("train", n, scale / (n + 1), 0.1) for n in range(4)])
    out = tmp_path / "curves.png"
    assert main(["plot", "--curves", str(runs), "--out", str(out)]) == 0  # a folder holding run dirs
    assert capsys.readouterr().out == f"wrote curves of 2 run(s) to {out}\n"
    with Image.open(out) as image:
        assert image.format == "PNG"
    curves = plot_curves([runs / "r1"], tmp_path / "lr.pdf", quantities=["lr.prototypes", "seconds"])
    assert [c.label for c in curves] == ["r1"]  # no spec.json: the directory name


def test_curves_mistakes_name_the_file_and_the_fix(tmp_path: Path) -> None:
    run = tmp_path / "r"
    run.mkdir()
    with pytest.raises(ProtobenchError, match="No metrics.jsonl in or below"):
        plot_curves([run], tmp_path / "c.png")
    (run / "metrics.jsonl").write_text(json.dumps(epoch("train", 0, 1.0, 0.1)) + "\n{oops\n", encoding="utf-8")
    with pytest.raises(ProtobenchError, match=r"metrics.jsonl line 2 is not JSON"):
        plot_curves([run], tmp_path / "c.png")
    (run / "metrics.jsonl").write_text(json.dumps({**epoch("train", 0, 1.0, 0.1), "terms": {"ce": "x"}}) + "\n")
    with pytest.raises(ProtobenchError, match=r"line 1: terms.ce must be a number or null"):
        plot_curves([run], tmp_path / "c.png")
    (run / "metrics.jsonl").write_text(json.dumps(epoch("train", 0, 1.0, 0.1)) + "\n")
    with pytest.raises(ProtobenchError, match="No curve named kl; the runs logged: seconds, ce, lr.prototypes"):
        plot_curves([run], tmp_path / "c.png", quantities=["kl"])
    assert not (tmp_path / "c.png").exists()
    assert main(["plot", "--curves", str(run), "--hue", "method", "--out", str(tmp_path / "c.png")]) == 2


def drawn(monkeypatch: pytest.MonkeyPatch, module: str) -> list:
    """The figures the plot code hands to save_figure (then saved as usual)."""
    import reports.curves
    import reports.plots

    figures = []
    save = reports.plots.save_figure

    def keep(fig, out):
        figures.append(fig)
        save(fig, out)

    monkeypatch.setattr({"plots": reports.plots, "curves": reports.curves}[module], "save_figure", keep)
    return figures


def test_categorical_x_draws_dodged_dots_with_n_and_one_legend(runs: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    figures = drawn(monkeypatch, "plots")
    plot_results(load_results([runs]), tmp_path / "m.png", x="method", y="acc", hue="J")
    fig = figures[0]
    ax = fig.axes[0]
    assert ax.get_legend() is None and len(fig.legends) == 1  # one legend for the figure
    dots = [line for line in ax.lines if line.get_marker() == "o"]
    assert dots and all(line.get_linestyle() == "None" for line in dots)  # no line between categories
    xs = sorted(x for line in ax.lines if line.get_marker() == "o" for x in line.get_xdata())
    assert len(xs) == 4 and len(set(xs)) == 4  # each J beside the other at each method
    assert sorted(t.get_text() for t in ax.texts) == sorted(f"n={len(v)}" for v in ACC.values())
    assert ax.get_xlabel() == "method" and "J" not in fig.get_suptitle().split(";")[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["NPPP", "vMFProto"]


def test_same_n_everywhere_is_in_the_title_and_fixed_dimensions_read_key_equals_value(
        runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figures = drawn(monkeypatch, "plots")
    plot_results(load_results([runs]), tmp_path / "m.png", x="method", y="acc", hue="J", facet=None)
    frame = load_results([runs])
    plot_results(frame[frame["J"] == 5], tmp_path / "j5.pdf", x="method", y="acc")
    title = " ".join(figures[1].get_suptitle().split())
    assert "J = 5" in title and "n = 2 seed(s) per point" in title and not figures[1].axes[0].texts


def test_curves_have_integer_epochs_axis_labels_one_legend_and_named_stages(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figures = drawn(monkeypatch, "curves")
    runs = tmp_path / "runs" / "g"
    spec = {"method": "vmfproto", "prototypes_per_class": 5, "seed": 0}
    write_metrics(runs / "r1", [epoch("discovery", 0, 2.0, 0.1)] + [epoch("end_to_end", n, 1 / (n + 1), 0.1)
                                                                    for n in range(5)], spec=spec)
    plot_curves([runs / "r1"], tmp_path / "c.pdf", quantities=["ce", "seconds", "lr.prototypes"])
    fig = figures[0]
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_ylabel() for ax in panels] == ["ce (epoch mean)", "epoch time (s)", "learning rate (prototypes)"]
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["vMFProto J=5 seed=0"]
    ticks = panels[0].get_xticks()
    assert all(float(t).is_integer() for t in ticks)
    stage_axis = panels[0].child_axes[0]  # the stages' names along the top
    assert [t.get_text() for t in stage_axis.get_xticklabels()] == ["discovery", "end_to_end"]
    assert [line.get_xdata()[0] for line in panels[0].lines if line.get_linestyle() == ":"] == [1.5]
