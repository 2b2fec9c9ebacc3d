"""A killed writer's temporary files go with the next attempt, finished runs included (issue 30,
defect 5).

Cases and verdicts:

- a ``protobench run`` killed (SIGKILL) at its first ``os.replace`` (the run's ``spec.json``),
  then run again to completion: no ``.spec.json.*.tmp`` remains;
- a finished run beside which a killed writer left ``.spec.json.*.tmp`` (a process killed while
  writing it; and an unstamped one aged two hours): the next ``run`` of the grid, which does not
  re-enter the finished run, removes both; a live writer's file is kept.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import scaled
from tiny_grid import write_tiny_grid

from benchmark.cli import main
from benchmark.data import generate_synthbirds
from benchmark.run.store import RunDir, find_run_dirs

REPO = Path(__file__).resolve().parents[2]
KILL_AT_FIRST_SPEC_REPLACE = r"""
import os, signal, sys
import torch
torch.set_num_threads(1)
from benchmark.cli import main
replace = os.replace
def killing(src, dst, **kwargs):
    if str(dst).endswith("spec.json"):
        os.kill(os.getpid(), signal.SIGKILL)
    return replace(src, dst, **kwargs)
os.replace = killing
sys.exit(main(sys.argv[1:]))
"""


def temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*.tmp") if ".token-cache" not in p.parts]


@pytest.fixture(scope="module")
def grid_argv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    work = tmp_path_factory.mktemp("tempfiles")
    generate_synthbirds(work / "synthbirds", classes=4, images_per_class=8, seed=0)
    grid = write_tiny_grid(work / "g.toml", "g", work / "synthbirds", image_size=56, device="cpu",
                           method_args={"discovery_epochs": 1, "end_to_end_epochs": 1})
    runs = work / "runs"
    return runs, ["run", str(grid), "--runs-dir", str(runs), "--cache-dir", str(work / "cache")]


def _killed(argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", KILL_AT_FIRST_SPEC_REPLACE, *argv], capture_output=True, text=True,
                          env=env, timeout=scaled(300), cwd=REPO)


def test_fault_killed_at_the_first_replace_then_run_to_completion_leaves_no_temp_file(
        grid_argv: tuple[Path, list[str]]) -> None:
    runs, argv = grid_argv
    killed = _killed(argv)
    assert killed.returncode == -signal.SIGKILL, killed.stderr  # the fault was injected
    assert [p.name.startswith(".spec.json.") for p in temp_files(runs)] == [True]  # the killed writer's file
    assert main(argv) == 0
    (rd,) = find_run_dirs(runs)
    assert rd.result() is not None and temp_files(runs) == []


def test_fault_a_finished_runs_abandoned_temp_files_go_with_the_next_run(grid_argv: tuple[Path, list[str]]) -> None:
    runs, argv = grid_argv
    if not find_run_dirs(runs) or find_run_dirs(runs)[0].result() is None:
        assert main(argv) == 0
    (rd,) = find_run_dirs(runs)
    killed = subprocess.run([sys.executable, "-c", KILL_AT_FIRST_SPEC_REPLACE.replace(
        "sys.exit(main(sys.argv[1:]))", "from benchmark.run.store import atomic_write_json\n"
        "atomic_write_json(__import__('pathlib').Path(sys.argv[1]), {'x': 1})"), str(rd.spec_path)],
        env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=scaled(300), capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    aged = rd.path / ".spec.json.0123abcd.tmp"  # no writer in its name, two hours old
    aged.write_text("{}")
    two_hours_ago = time.time() - 7200
    os.utime(aged, (two_hours_ago, two_hours_ago))
    live = rd.path / f".job.json.89abcdef.{os.getpid()}@{os.uname().nodename}.tmp"  # this process: alive
    live.write_text("{}")
    assert len(temp_files(runs)) == 3
    assert main(argv) == 0  # the run is done: skipped, never re-entered
    assert temp_files(runs) == [live] and RunDir(rd.path).result() is not None
    live.unlink()
