"""``tune --executor slurm --workers 4`` on the single-node test cluster: the array tasks share each
cell's study, every cell ends with exactly N complete trials and no trial number twice, also
when one worker is killed with SIGKILL mid-trial."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO, wait_until
from test_cluster import slurm_cluster  # noqa: F401 - the session's cluster fixture
from tuning_grid import write_tuning_grid

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def _running_pids(runs: Path) -> list[int]:
    pids = []
    for beat in runs.glob("tun.tuning/*/heartbeats/*"):
        if beat.name.isdigit():
            try:
                pids.append(int(beat.read_text().split()[1]))
            except (OSError, IndexError, ValueError):
                continue  # written in this instant, or gone
    return pids


def test_four_workers_share_the_studies_and_survive_a_killed_one(tmp_path, slurm_cluster):  # noqa: F811
    grid = write_tuning_grid(tmp_path / "grid.toml", tmp_path / "data")
    runs = tmp_path / "runs"
    tune = subprocess.Popen(
        [sys.executable, "-m", "benchmark.cli", "tune", str(grid), "--trials", "4", "--runs-dir", str(runs),
         "--executor", "slurm", "--workers", "4", "--profile", str(REPO / "slurm" / "profiles" / "local.toml"),
         "--heartbeat-seconds", "1"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    victim = wait_until(lambda: _running_pids(runs), "a worker's first trial", 600, poll_s=0.2,
                        context=lambda: tune.stdout.read() if tune.poll() is not None else "")[0]
    os.kill(victim, signal.SIGKILL)
    out, _ = tune.communicate(timeout=1800)
    assert tune.returncode == 0, out
    summaries = [json.loads(p.read_text()) for p in runs.glob("tun.tuning/*/summary.json")]
    assert len(summaries) == 2
    for summary in summaries:
        numbers = [t["number"] for t in summary["trials"]]
        assert summary["complete"] == 4 and len(numbers) == len(set(numbers))
    assert sum(t["state"] == "FAIL" for s in summaries for t in s["trials"]) >= 1, out
