"""A tuning worker killed with SIGKILL mid-trial: its trial is failed once its heartbeat goes
silent, and the next ``tune`` still ends the study with exactly N complete trials."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO, wait_until
from tuning_grid import write_tuning_grid

from benchmark.cli import main

pytestmark = pytest.mark.slow


def _beating(root: Path) -> list[Path]:
    return [p for p in root.glob("tun.tuning/*/heartbeats/*") if p.name.isdigit()]


def test_a_sigkilled_worker_leaves_its_trial_failed_and_the_study_completes(tmp_path, capsys):
    grid = write_tuning_grid(tmp_path / "grid.toml", tmp_path / "data")
    runs = tmp_path / "runs"
    command = [sys.executable, "-m", "benchmark.cli", "tune", str(grid), "--trials", "2", "--only", "method=vmfproto",
               "--runs-dir", str(runs), "--heartbeat-seconds", "0.5"]
    worker = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: _beating(runs), "the worker's first trial to start", 180,
                   context=lambda: worker.stderr.read().decode() if worker.poll() is not None else "", poll_s=0.1)
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
    killed = int(_beating(runs)[0].name)

    assert main(["tune", str(grid), "--trials", "2", "--only", "method=vmfproto", "--runs-dir", str(runs),
                 "--heartbeat-seconds", "0.5"]) == 0
    assert f"trial {killed} failed: its worker stopped (heartbeat lost)" in capsys.readouterr().out
    summary = json.loads(next(runs.glob("tun.tuning/*/summary.json")).read_text())
    states = {t["number"]: t["state"] for t in summary["trials"]}
    assert states[killed] == "FAIL" and summary["complete"] == 2, summary["trials"]
    assert sum(state == "COMPLETE" for state in states.values()) == 2
    assert len(states) == len(summary["trials"])  # no trial number twice
    # the killed trial was the defaults (trial 0): asked again until they complete, the retry naming it
    defaults = [t for t in summary["trials"] if t["defaults"]]
    assert [t["state"] for t in defaults] == ["FAIL", "COMPLETE"] and defaults[1]["retry_of"] == killed == 0
    assert defaults[0]["retried_as"] == defaults[1]["number"]  # the two records of the one run name each other
    assert summary["default"]["number"] == defaults[1]["number"]


def test_two_tune_processes_on_one_study_draw_different_points(tmp_path):
    """Two `tune` processes started together on one study: each asks under the study's lock, with
    the sampler seeded from the study's trial count, so no two trials draw the same point (which
    would be one run, and fail as running elsewhere) and the study ends with exactly N trials."""
    grid = write_tuning_grid(tmp_path / "grid.toml", tmp_path / "data")
    runs = tmp_path / "runs"
    assert main(["tune", str(grid), "--trials", "1", "--only", "method=vmfproto", "--runs-dir", str(runs)]) == 0
    command = [sys.executable, "-m", "benchmark.cli", "tune", str(grid), "--trials", "5", "--only", "method=vmfproto",
               "--runs-dir", str(runs)]
    workers = [subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(2)]
    outputs = [worker.communicate(timeout=600) for worker in workers]
    assert all(worker.returncode == 0 for worker in workers), outputs
    summary = json.loads(next(runs.glob("tun.tuning/*/summary.json")).read_text())
    points = [tuple(sorted(t["params"].items())) for t in summary["trials"]]
    assert summary["complete"] == 5 and len(points) == 5 and len(set(points)) == 5, summary["trials"]
    assert not any("running elsewhere" in out for pair in outputs for out in pair)
