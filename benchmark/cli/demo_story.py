"""The closing story of ``protobench demo``: its results sorted by J and seed with mean ± std over
seeds, what each metric means, and the commands to try next."""
from __future__ import annotations

import os
import shlex
import shutil
import statistics
import sys
from pathlib import Path

from rich.table import Table

from benchmark.config import RunSpec
from benchmark.progress import output_console
from methods.registry import display_name_of
from benchmark.run.store import RunDir

METRICS = ("acc", "con", "sta", "dis", "comp")
#: docs/protocol/metrics.md (definitions) and evaluation.py; all in percent, higher is better
LEGEND = {
    "acc": "top-1 test accuracy",
    "con": "consistency: prototypes whose peak region covers the same part in ≥ 80% of their class's test images",
    "sta": "stability: part coverage unchanged when the input is perturbed with clipped Gaussian noise",
    "dis": "distinctiveness: 100 − mean IoU of the peak regions of a class's J prototypes on an image",
    "comp": "comprehensiveness (NPPP): IoU of the union of the thresholded maps with the object mask",
}


def _cell(values: list[float]) -> str:
    """Mean ± sample standard deviation (n − 1 in the denominator) of the seeds' values."""
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f}"


def demo_table(runs: list[RunSpec], run_dirs: list[Path]) -> Table:
    """One row per finished run, sorted by (J, seed), then per J the mean ± std over its seeds."""
    finished = [(spec, result) for spec, path in zip(runs, run_dirs) if (result := RunDir(path).result())]
    finished.sort(key=lambda pair: (pair[0].method, pair[0].prototypes_per_class, pair[0].seed))
    table = Table(title="demo results (%, test split)")
    for column in ("method", "J", "seed", *METRICS):
        table.add_column(column, justify="left" if column == "method" else "right")
    by_j: dict[tuple[str, int], list[dict[str, float | None]]] = {}
    for spec, result in finished:
        metrics = result["metrics"]
        by_j.setdefault((spec.method, spec.prototypes_per_class), []).append(metrics)
        table.add_row(display_name_of(spec.method), str(spec.prototypes_per_class), str(spec.seed),
                      *(_cell([metrics[m]] if metrics.get(m) is not None else []) for m in METRICS))
    table.add_section()
    for (method, j), rows in by_j.items():
        table.add_row(display_name_of(method), str(j), f"mean ± std (n={len(rows)})",
                      *(_cell([r[m] for r in rows if r.get(m) is not None]) for m in METRICS), style="bold")
    return table


def figure_runs(runs: list[RunSpec], run_dirs: list[Path]) -> list[Path]:
    """Finished runs to compare in a figure: the lowest seed of each J (at most two)."""
    finished = sorted(((spec.seed, spec.prototypes_per_class, path) for spec, path in zip(runs, run_dirs)
                       if RunDir(path).is_complete), key=lambda t: (t[0], t[1]))
    chosen: dict[int, Path] = {}
    for _, j, path in finished:
        chosen.setdefault(j, path)
    return list(chosen.values())[:2]


def protobench_command() -> str:
    """How to type ``protobench`` in the shell that started this process: the bare name when PATH
    finds this interpreter's entry script (an activated venv), else that script's path (relative
    when under the working directory: ``.venv/bin/protobench`` after ``make demo``), else
    ``PYTHON -m benchmark.cli`` (the suite run from a source tree without an install)."""
    script = Path(sys.executable).parent / "protobench"
    if not script.is_file():
        return f"{shlex.quote(sys.executable)} -m benchmark.cli"
    found = shutil.which("protobench")
    if found and Path(found).resolve() == script.resolve():
        return "protobench"
    absolute = Path(os.path.abspath(script))  # the venv's bin/, its links unresolved
    try:
        shown = absolute.relative_to(Path.cwd())
    except ValueError:
        shown = absolute
    return shlex.quote(str(shown))


def print_demo_story(runs: list[RunSpec], run_dirs: list[Path], grid_dir: Path) -> None:
    console = output_console()
    console.print(demo_table(runs, run_dirs))
    console.print("metrics (percent, higher is better; std over seeds with n − 1):")
    for name, meaning in LEGEND.items():
        console.print(f"  {name:<5} {meaning}")
    shown = figure_runs(runs, run_dirs)
    if not shown:
        return
    protobench = protobench_command()
    commands = [
        (f"{protobench} report {grid_dir}", "a table of any grid"),
        (f"{protobench} plot {grid_dir} --x J --y con --out con.png", "a metric against J, seeds as error bars"),
        (f"{protobench} plot --curves {shown[0]} --out curves.png", "loss terms per epoch (metrics.jsonl)"),
        (f"{protobench} figures {' '.join(map(str, shown))} --images 4 --out figures/", "prototype maps side by side"),
        (f"{protobench} status {grid_dir} --json", "every run's state and metrics"),
    ]
    width = max(len(command) for command, _ in commands)
    bin_dir = Path(protobench).parent
    activate = f" (`source {bin_dir}/activate` to type `protobench`)" if protobench.endswith("/protobench") else ""
    console.print(f"next{activate}:", markup=False)
    for command, what in commands:
        console.print(f"  {command:<{width}}  # {what}", markup=False)
