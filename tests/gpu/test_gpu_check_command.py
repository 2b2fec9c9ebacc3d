"""``make gpu-check`` (benchmark/cli/gpu_check.py): every step runs and writes its output even
when an earlier one failed, the failures are summarised, the exit status says whether any failed;
the CPU dry run has the same steps and files as the CUDA check."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from benchmark.cli.gpu_check import (CHECKOUT, DEMO_GRID, DRY_RUN_PERF, GPU_TEST_PATHS, ROBUSTNESS_TIMINGS, TUNING_TIMINGS,
                                     Step, gpu_check_steps, main, run_steps, select_steps, step_environment,
                                     summarise)


def _write(name: str, code: int) -> list[str]:
    return [sys.executable, "-c", f"import sys; open({name!r}, 'w').write('x'); print('ran {name}'); sys.exit({code})"]


def test_every_step_runs_and_writes_after_a_failure_and_the_summary_names_it(tmp_path: Path) -> None:
    steps = [Step("a", "first", _write("a.txt", 0), "first.log", "a.txt", cwd=tmp_path),
             Step("b", "broken", _write("b.txt", 3), "broken.log", "b.txt", cwd=tmp_path),
             Step("c", "missing", ["/nonexistent/command"], "missing.log", "c.txt", cwd=tmp_path),
             Step("d", "last", _write("d.txt", 0), "last.log", "d.txt", cwd=tmp_path)]
    results = run_steps(steps, tmp_path, echo=lambda line: None)
    assert [(r.name, r.returncode, r.written) for r in results] == [
        ("first", 0, True), ("broken", 3, True), ("missing", 127, False), ("last", 0, True)]
    assert (tmp_path / "last.log").read_text() == "ran d.txt\n"
    assert "did not start" in (tmp_path / "missing.log").read_text()
    table = summarise(results, tmp_path)
    assert table.splitlines()[-1] == "gpu-check: 2 of 4 steps failed: broken, missing"
    assert "FAILED 3" in table and f"(no c.txt; see {tmp_path / 'missing.log'})" in table
    assert [r["name"] for r in json.loads((tmp_path / "summary.json").read_text())] == ["first", "broken", "missing",
                                                                                        "last"]


def test_the_dry_run_runs_the_checks_commands_and_writes_its_files(tmp_path: Path) -> None:
    cuda, cpu = (gpu_check_steps(device, tmp_path) for device in ("cuda", "cpu"))
    assert [(s.key, s.name, s.log, s.writes, s.cwd) for s in cuda] == [(s.key, s.name, s.log, s.writes, s.cwd)
                                                                       for s in cpu]
    timings = " ".join(TUNING_TIMINGS["cuda"]), " ".join(TUNING_TIMINGS["cpu"])
    assert timings == ("--tuning 8 --repeats 3", "--tuning 2 --repeats 1")  # the K = 8, 3 repeats
    robust = " ".join(ROBUSTNESS_TIMINGS["cuda"]), " ".join(ROBUSTNESS_TIMINGS["cpu"])
    assert "image_size=56" in robust[1]  # the dry run's Infidelity: 10 · 14² passes, not 10 · 56²
    for a, b in zip(cuda, cpu):
        shrunk = [*a.command, *(DRY_RUN_PERF if a.name.startswith("perf") else [])]
        expected = " ".join(arg.replace("cuda", "cpu") for arg in shrunk).replace(*timings).replace(*robust)
        assert expected == " ".join(b.command)
    assert [s.writes for s in cuda] == ["pytest-gpu.xml", "perf-paper-scale.json", "perf-tuning.json",
                                        "plan-cub_main.txt", "plan-cub_main-model.txt", "perf-robustness.json"]
    robustness = next(s for s in cuda if s.key == "robustness").command
    assert "misalignment,faithfulness,perturbation" in robustness and str(DEMO_GRID) in robustness
    plan = next(s for s in cuda if s.key == "plan").command  # measured: both perf files, 30 trials per cell
    assert [v for o, v in zip(plan, plan[1:]) if o == "--perf"] == [str(tmp_path / "perf-paper-scale.json"),
                                                                    str(tmp_path / "perf-tuning.json")]
    assert all("--tuning-trials" in s.command for s in cuda if s.key in ("plan", "model"))


def test_steps_can_be_run_a_few_at_a_time(tmp_path: Path, capsys) -> None:
    steps = gpu_check_steps("cpu", tmp_path)
    assert [s.key for s in select_steps(steps, "tuning,plan")] == ["tuning", "plan"]
    assert select_steps(steps, None) == steps
    with pytest.raises(ValueError, match="unknown gpu-check step.*bogus.*tests, perf, tuning, plan, model, robustness"):
        select_steps(steps, "tests,bogus")
    with pytest.raises(SystemExit):
        main(["--device", "cpu", "--out", str(tmp_path / "out"), "--steps", "bogus"])
    assert "unknown gpu-check step(s) bogus" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_the_cuda_check_refuses_a_machine_without_cuda(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert main(["--device", "cuda", "--out", str(tmp_path / "out")]) == 2
    assert "DEVICE=cpu" in capsys.readouterr().err and not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="unknown gpu-check device 'tpu'"):
        gpu_check_steps("tpu", tmp_path)


def test_every_gpu_test_is_in_the_paths_the_check_collects() -> None:
    """The check collects GPU_TEST_PATHS only (so it needs no optional test dependency): a file
    marking a test `gpu` anywhere else would never run on a GPU."""
    marking = {path.relative_to(CHECKOUT).as_posix() for path in (CHECKOUT / "tests").rglob("test_*.py")
               if "mark.gpu" in path.read_text(encoding="utf-8")}
    assert len(marking) >= 6
    outside = [f for f in sorted(marking) if not any(f == path or f.startswith(path + "/") for path in GPU_TEST_PATHS)]
    assert outside == [], f"add them to benchmark.cli.gpu_check.GPU_TEST_PATHS: {outside}"


def test_the_steps_run_from_the_checkout_with_it_on_the_python_path(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    assert step_environment()["PYTHONPATH"].split(os.pathsep) == [str(CHECKOUT), "/elsewhere"]
    steps = gpu_check_steps("cpu", tmp_path)
    assert (CHECKOUT / "benchmark" / "grids" / "cub_main.toml").is_file()
    assert all(s.cwd == CHECKOUT for s in steps if not s.name.startswith("perf"))
