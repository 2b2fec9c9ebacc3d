"""``plot --curves`` of runs of different methods: each drawn line's colour and legend label are
its own run's in every panel, and stages of different schedules are never mixed or overprinted."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import reports.curves
from reports.curves import plot_curves


def write_run(run_dir: Path, method: str, records: list[tuple[str, dict[str, float]]]) -> None:
    run_dir.mkdir(parents=True)
    lines = [{"epoch": n, "stage": stage, "seconds": 1.0, "lr": {"head": 0.1}, "terms": terms}
             for n, (stage, terms) in enumerate(records)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    (run_dir / "spec.json").write_text(json.dumps({"method": method, "prototypes_per_class": 5, "seed": 0}))


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list:
    kept = []
    save = reports.curves.save_figure

    def keep(fig, out):
        kept.append(fig)
        save(fig, out)

    monkeypatch.setattr(reports.curves, "save_figure", keep)
    return kept


def test_every_line_has_its_own_runs_colour_label_and_data(tmp_path: Path, figures: list) -> None:
    runs = tmp_path / "runs"
    # ProtoPNet logs clst/sep in warm+joint; the own method logs orth only, in discovery+finetune
    protopnet = [("warm", {"ce": 2.0, "clst": 0.9, "sep": 0.1}), ("warm", {"ce": 1.8, "clst": 0.8, "sep": 0.2}),
                 ("joint", {"ce": 1.5, "clst": 0.7, "sep": 0.3})]
    own = [("discovery", {"ce": 3.0, "orth": 19.7}), ("finetune", {"ce": 2.5, "orth": 12.0}),
           ("finetune", {"ce": 2.2, "orth": 9.0}), ("finetune", {"ce": 2.0, "orth": 8.0})]
    write_run(runs / "a", "protopnet", protopnet)
    write_run(runs / "b", "tests.helpers.example_adapter:ExampleAdapter", own)
    curves = plot_curves([runs / "a", runs / "b"], tmp_path / "c.pdf", quantities=["orth", "ce", "clst", "sep"])
    fig = figures[0]
    legend = {t.get_text(): h.get_color() for t, h in zip(fig.legends[0].get_texts(), fig.legends[0].legend_handles)}
    by_label = {}
    for curve, records in zip(curves, (protopnet, own)):
        label = next(text for text in legend if text.startswith(curve.label))
        by_label[label] = records
    assert len(by_label) == 2 and len(set(legend.values())) == 2
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_ylabel()]
    assert [ax.get_ylabel().split()[0] for ax in panels] == ["orth", "ce", "clst", "sep"]
    for ax in panels:
        term = ax.get_ylabel().split()[0]
        lines = [line for line in ax.lines if not line.get_label().startswith("_")]
        assert lines
        for line in lines:
            records = by_label[line.get_label()]  # the line's label is a run's legend entry ...
            assert line.get_color() == legend[line.get_label()]  # ... drawn in that entry's colour ...
            expected = [terms.get(term, math.nan) for _, terms in records]  # ... through that run's values
            assert [y for y in line.get_ydata()] == pytest.approx(expected, nan_ok=True)
    # two schedules: no shared stage axis along the top, each run's stages in its own label
    assert not any(ax.child_axes for ax in panels)
    assert sorted(legend) == sorted([f"{curves[0].label} [warm 1\u20132, joint 3]",
                                     f"{curves[1].label} [discovery 1, finetune 2\u20134]"])
    boundaries = {(line.get_color(), line.get_xdata()[0]) for line in panels[0].lines if line.get_linestyle() == ":"}
    assert boundaries == {(legend[next(t for t in legend if "warm" in t)], 2.5),
                          (legend[next(t for t in legend if "discovery" in t)], 1.5)}
