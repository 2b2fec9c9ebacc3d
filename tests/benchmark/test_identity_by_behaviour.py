"""Identity by behaviour (issue 52; docs/design/run-identity.md): a result whose method's source
changed reads current when `protobench check-code` found the behaviour identical, stale when it
changed, stale by bytes when the change lies where the probe cannot see, and "edited locally"
until the edit is probed.

The edits are made to KMEx in a temporary copy of the suite, which a child process imports first
(PYTHONPATH); the results are the KMEx, vMFProto and ProtoPNet results the suite wrote at commit
e81987b, before this mechanism (tests/benchmark/earlier_results)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO

EARLIER = Path(__file__).resolve().parent / "earlier_results"
PACKAGES = ("benchmark", "methods", "metrics", "reports", "slurm")
KMEX_RUN = "bfaeff86ea41"  # earlier_results/earlier/<run id> of KMEx


@pytest.fixture()
def suite(tmp_path: Path) -> Path:
    """A copy of the suite's packages (and the earlier results) to edit."""
    copy = tmp_path / "suite"
    for package in PACKAGES:
        shutil.copytree(REPO / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(EARLIER, tmp_path / "runs")
    return copy


def protobench(suite: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(suite)}
    return subprocess.run([sys.executable, "-m", "benchmark.cli", *args], env=env, capture_output=True, text=True,
                          cwd=suite.parent)


def edit(suite: Path, relative: str, old: str, new: str) -> None:
    path = suite / relative
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} in {relative}"
    path.write_text(text.replace(old, new))


def kmex_line(status: str) -> str:
    """KMEx's row of the status table."""
    (line,) = [line for line in status.splitlines() if KMEX_RUN[:8] in line and line.startswith("│")]
    return line


def check(suite: Path) -> str:
    done = protobench(suite, "check-code", "kmex")
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_results_of_the_earlier_code_read_current(tmp_path: Path) -> None:
    """Written before this issue (their fingerprints are of the methods alone): current, no note
    (their code's digest and today's differ, the probe lock holds both with one behaviour)."""
    from benchmark.run.identity import code_state
    from benchmark.run.own_code import EVERY_ADAPTER

    for result_path in sorted((EARLIER / "earlier").glob("*/result.json")):
        result = json.loads(result_path.read_text())
        assert result["provenance"]["code_version"] == "e81987b"
        state = code_state(result, adapters=EVERY_ADAPTER)
        assert state.stale is None, (result["spec"]["method"], state.stale)
        assert state.note is not None and state.note.startswith("code refactored since; behaviour identical")
    from benchmark.cli import main

    shutil.copytree(EARLIER, tmp_path / "runs")
    assert main(["status", str(tmp_path / "runs")]) == 0


def test_comment_and_rename_edits_read_current_once_checked(suite: Path) -> None:
    edit(suite, "methods/kmex.py", "#: ε of the soft similarity", "#: ε of the soft similarity (a comment edited)")
    status = protobench(suite, "status", str(suite.parent / "runs")).stdout
    assert "edited locally" in status and "protobench check-code kmex" in status  # not probed yet: not current
    assert " stale " in kmex_line(status)
    assert "behaviour identical" in check(suite)
    status = protobench(suite, "status", str(suite.parent / "runs")).stdout
    assert " done " in kmex_line(status) and "current result(s): code refactored since; behaviour identical" in status

    edit(suite, "methods/kmex.py", "random_state = np.random.RandomState(seed)", "draws = np.random.RandomState(seed)")
    text = (suite / "methods/kmex.py").read_text().replace("random_state=random_state", "random_state=draws")
    (suite / "methods/kmex.py").write_text(text)  # a rename, every use with it
    assert "behaviour identical" in check(suite)
    status = protobench(suite, "status", str(suite.parent / "runs")).stdout
    assert " done " in kmex_line(status) and "stale" not in kmex_line(status)
    report = protobench(suite, "report", str(suite.parent / "runs"))
    assert report.returncode == 0 and "current result(s): code refactored since; behaviour identical" in report.stderr


def test_a_constant_that_changes_a_number_reads_stale(suite: Path) -> None:
    edit(suite, "methods/kmex.py", "EPSILON = 1e-4", "EPSILON = 2e-4")
    out = check(suite)
    assert "behaviour CHANGED" in out
    status = protobench(suite, "status", str(suite.parent / "runs")).stdout
    assert " stale " in kmex_line(status) and "the method's behaviour changed since it ran" in status


def test_an_edit_the_probe_cannot_see_reads_stale_by_bytes(suite: Path) -> None:
    """KMEx's inertia term never runs (its weight is 0): the probe's outputs cannot show an edit of it."""
    edit(suite, "methods/kmex.py", '.amin(dim=1).mean().float()}', '.amin(dim=1).sum().float()}')
    assert "behaviour identical" in check(suite)
    status = protobench(suite, "status", str(suite.parent / "runs")).stdout
    assert " stale " in kmex_line(status) and "where the behaviour probe cannot see" in status


def test_a_probe_that_fails_is_reported_and_never_identical(suite: Path) -> None:
    edit(suite, "methods/kmex.py", "        self.prototypes.copy_(torch.from_numpy(centres))",
         "        raise RuntimeError('broken clustering')")
    before = (suite / "methods/probe-lock.json").read_bytes()
    done = protobench(suite, "check-code", "kmex", "protopnet")
    assert done.returncode == 1
    assert "kmex: the probe failed: RuntimeError: broken clustering" in done.stdout
    assert "protopnet: behaviour identical" in done.stdout  # the other method is still checked
    lock = json.loads((suite / "methods/probe-lock.json").read_text())
    assert lock["methods"]["kmex"] == json.loads(before)["methods"]["kmex"]  # nothing recorded for the edit
