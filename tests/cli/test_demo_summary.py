"""The demo's closing story: results sorted by J and seed, mean ± std over seeds (sample std,
checked against numpy), a legend of every metric, and the next commands."""
import numpy as np
from rich.console import Console

from benchmark.config import RunSpec
from benchmark.cli.demo_story import LEGEND, METRICS, demo_table, print_demo_story
from benchmark.run.store import atomic_write_json

RESULTS = {(5, 1): 80.0, (3, 1): 60.0, (5, 0): 70.0, (3, 0): 50.0}


def fake_runs(tmp_path):
    runs, dirs = [], []
    for (j, seed), acc in RESULTS.items():  # written out of order on purpose
        spec = RunSpec(dataset="synthbirds", backbone="dinov2_vits14", method="vmfproto", prototypes_per_class=j,
                       seed=seed)
        path = tmp_path / "demo" / spec.run_id
        atomic_write_json(path / "result.json", {"metrics": {"acc": acc, "con": acc / 2, "sta": None,
                                                             "dis": 10.0, "comp": 1.0}})
        runs.append(spec)
        dirs.append(path)
    return runs, dirs


def render(table) -> str:
    console = Console(width=200, record=True)
    console.print(table)
    return console.export_text()


def test_rows_sorted_by_j_and_seed_then_mean_and_std(tmp_path):
    text = render(demo_table(*fake_runs(tmp_path)))
    rows = [line.split("│") for line in text.splitlines() if "vMFProto" in line]
    assert [(r[2].strip(), r[3].strip()) for r in rows[:4]] == [("3", "0"), ("3", "1"), ("5", "0"), ("5", "1")]
    std3 = np.std([50.0, 60.0], ddof=1)
    assert f"55.0 ± {std3:.1f}" in rows[4][4] and "mean ± std (n=2)" in rows[4][3]
    assert f"75.0 ± {np.std([70.0, 80.0], ddof=1):.1f}" in rows[5][4]
    assert rows[0][6].strip() == "–"  # sta missing is a dash, not a zero


def test_story_has_a_legend_and_next_commands(tmp_path, capsys):
    runs, dirs = fake_runs(tmp_path)
    print_demo_story(runs, dirs, tmp_path / "demo")
    out = capsys.readouterr().out
    assert set(LEGEND) == set(METRICS)
    for name in METRICS:
        assert f"  {name} " in out
    for command in ("protobench report", "protobench plot", "protobench figures"):
        assert command in out


def test_figures_compare_the_two_js_at_the_lowest_seed(tmp_path, capsys):
    runs, dirs = fake_runs(tmp_path)
    print_demo_story(runs, dirs, tmp_path / "demo")
    line = next(line for line in capsys.readouterr().out.splitlines() if "protobench figures" in line)
    expected = [str(d) for spec, d in zip(runs, dirs) if spec.seed == 0]
    assert sorted(line.split("--images")[0].split()[2:]) == sorted(expected)
