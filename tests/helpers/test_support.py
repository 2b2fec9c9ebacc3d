"""The test helpers' waits: deadlines scale with PROTOBENCH_TEST_TIMEOUT_SCALE, and a wait with
``progress`` goes on while the progress value changes."""
from __future__ import annotations

import pytest

from support import TIMEOUT_SCALE_ENV, scaled, wait_until


def test_deadlines_scale_with_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TIMEOUT_SCALE_ENV, raising=False)
    assert scaled(180) == 180
    monkeypatch.setenv(TIMEOUT_SCALE_ENV, "2.5")
    assert scaled(180) == 450
    for bad in ("0", "-1", "nan", "three"):
        monkeypatch.setenv(TIMEOUT_SCALE_ENV, bad)
        with pytest.raises(pytest.UsageError, match=f"{TIMEOUT_SCALE_ENV}="):
            scaled(1)


def test_a_wait_fails_at_the_scaled_deadline_naming_what_it_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TIMEOUT_SCALE_ENV, "0.001")  # 1 s → 1 ms
    polls = []
    with pytest.raises(pytest.fail.Exception, match=r"waiting for the job\nqueue: empty"):
        wait_until(lambda: polls.append(1), "the job", 1.0, poll_s=0.005, context=lambda: "queue: empty")
    assert polls  # it polled before failing


def test_a_wait_goes_on_while_its_progress_advances(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TIMEOUT_SCALE_ENV, "0.1")  # 1 s → 0.1 s
    done = {"epoch": 0}

    def advance() -> int:  # a job that finishes an epoch between any two polls
        done["epoch"] += 1
        return done["epoch"]

    # every poll sleeps 3× past the 0.1 s deadline, yet the wait lasts until epoch 5: each poll saw progress
    assert wait_until(lambda: done["epoch"] >= 5 and done["epoch"], "epoch 5", 1.0, poll_s=0.3, progress=advance) == 5


def test_same_metrics_allow_a_last_bit_of_float32_and_nothing_a_table_shows() -> None:
    from support import assert_same_metrics

    assert_same_metrics({"loc": 39.04911050479381, "acc": 80.0, "purity": None},
                        {"loc": 39.04911053197037, "acc": 80.0, "purity": None})  # seen across processes
    for ours in ({"loc": 39.05, "acc": 80.0, "purity": None}, {"loc": 39.04911050479381, "acc": 80.0, "purity": 1.0},
                 {"loc": 39.04911050479381, "acc": 80.0}):
        with pytest.raises(AssertionError):
            assert_same_metrics(ours, {"loc": 39.04911053197037, "acc": 80.0, "purity": None})
