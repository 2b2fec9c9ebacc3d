"""``make gpu-check``: every step runs and writes its output, whatever failed before it.

A GPU is lent rarely and for a short time, so one failing step must not cost the others'
measurements: the ``gpu`` tests, ``perf --paper-scale``, ``perf --tuning 8`` (ProtoPNet and
vMFProto on ``demo_all``: K trials sequential, packed and batched, 3 repeats), the
``cub_main`` projections (grid and tuning at 30 trials per cell, measured and from the model) and
``perf --robustness`` (each family of the robustness stage against ``evaluate`` on the demo) each
run as their own process, with their output in ``OUT/``; a table of the steps (exit status,
seconds, file) ends the check and is written to ``OUT/summary.json``, and the check exits
non-zero when any step failed. ``--steps`` runs some of them (a device call is limited in time:
``--steps tests,perf,model``, then ``--steps tuning,plan`` into the same ``OUT``).

``--device cpu`` is the dry run CI makes (.ci/run): the same commands and the same files, the
``gpu`` tests skipped (no CUDA), the paper-scale preset shrunk to a tiny trunk and 8 classes and
the tuning timings to K = 2, one repeat, on the same tiny trunk, so that it takes seconds and the
target cannot rot before a GPU is lent.

Every step is a fresh process: ``import benchmark`` sets ``CUBLAS_WORKSPACE_CONFIG`` in it before
cuBLAS starts (cuBLAS reads it once), so ``deterministic = true`` applies.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path


DEVICES = ("cuda", "cpu")
#: where the ``gpu`` tests live (tests/gpu/test_gpu_check_command.py keeps it complete): collecting
#: only these, the check needs no optional test dependency (optuna, POT, submitit, mkdocs)
GPU_TEST_PATHS = ("tests/gpu", "tests/benchmark/test_prefetch.py", "tests/metrics/test_explanation_metrics.py")
#: the checkout, put on every step's PYTHONPATH: an interpreter without the package installed
#: (``make gpu-check GPU_PYTHON=…`` on a machine without network) runs the steps from it
CHECKOUT = Path(__file__).resolve().parents[2]
#: ``--device cpu``: the paper-scale preset on a tiny trunk and dataset (seconds on a CPU)
DRY_RUN_PERF = ["--set", "backbone_args={depth = 1, embed_dim = 48, num_heads = 2}",
                "--set", "dataset_args={classes = 8, images_per_class = 12, seed = 0}",
                "--set", "batch_size=8", "--set", "eval_batch_size=8", "--warmup", "1", "--timed-batches", "2"]
#: ``perf --tuning``: K trials, repeats (the issue's K = 8 with 3 repeats; the dry run K = 2, once)
TUNING_TIMINGS = {"cuda": ["--tuning", "8", "--repeats", "3"], "cpu": ["--tuning", "2", "--repeats", "1"]}
#: ``perf --robustness``: every family of the robustness stage against evaluate on the demo grid's first run
#: (images, repeats; the dry run: one 56-px image once, so that Infidelity's 10 · (S/4)² passes take seconds)
ROBUSTNESS_TIMINGS = {"cuda": ["--robustness-images", "4", "--repeats", "2"],
                      "cpu": ["--robustness-images", "1", "--repeats", "1", "--set", "image_size=56"]}
DEMO_GRID = CHECKOUT / "benchmark" / "grids" / "demo.toml"
TUNING_GRID = CHECKOUT / "benchmark" / "grids" / "demo_all.toml"
TUNING_METHODS = "method=protopnet,vmfproto"  # the two methods that batch their trials on the paper's grid
CUB_TUNING_TRIALS = "30"  # the plan's tuning projection: 30 trials per cub_main cell


@dataclass(frozen=True)
class Step:
    """One command; its stdout and stderr go to ``log`` (relative to the check's folder)."""

    key: str  # what --steps names it by
    name: str
    command: list[str]
    log: str
    writes: str  # the file the step exists to produce, relative to the check's folder
    cwd: Path | None = None  # None: this process's


@dataclass(frozen=True)
class StepResult:
    name: str
    returncode: int
    seconds: float
    log: str
    writes: str
    written: bool


def gpu_check_steps(device: str, out: Path, python: str = sys.executable) -> list[Step]:
    """The check's steps for ``device`` (``cuda``: the real check; ``cpu``: the dry run)."""
    if device not in DEVICES:
        raise ValueError(f"unknown gpu-check device {device!r}; choose one of {', '.join(DEVICES)}")
    out = out.resolve()
    cli = [python, "-m", "benchmark.cli"]
    shrunk = DRY_RUN_PERF if device == "cpu" else []
    perf = [*cli, "perf", "--paper-scale", "--device", device, "--runs-dir", str(out / "runs"),
            "--out", str(out / "perf-paper-scale.json"), *shrunk]
    # in OUT too: the demo grid's data_root, ./data/synthbirds, is generated there (the preset's are apart)
    tuning = [*cli, "perf", str(TUNING_GRID), "--only", TUNING_METHODS, *TUNING_TIMINGS[device], "--device", device,
              "--runs-dir", str(out / "runs-tuning"), "--out", str(out / "perf-tuning.json"), *shrunk]
    robustness = [*cli, "perf", str(DEMO_GRID), "--robustness", "misalignment,faithfulness,perturbation",
                  *ROBUSTNESS_TIMINGS[device], "--device", device, "--runs-dir", str(out / "runs-robustness"),
                  "--out", str(out / "perf-robustness.json"), *shrunk]
    cub = [*cli, "plan", "benchmark/grids/cub_main.toml", "--tuning-trials", CUB_TUNING_TRIALS]
    return [
        Step("tests", "gpu tests", [python, "-m", "pytest", "-m", "gpu", *GPU_TEST_PATHS, "-q", "-p",
                                    "no:cacheprovider", "-rs", "--junitxml", str(out / "pytest-gpu.xml")],
             "pytest-gpu.txt", "pytest-gpu.xml", cwd=CHECKOUT),
        # in OUT: the preset generates its synthbirds under ./data/, apart from any other set
        Step("perf", "perf --paper-scale", perf, "perf-paper-scale.txt", "perf-paper-scale.json", cwd=out),
        Step("tuning", "perf --tuning", tuning, "perf-tuning.txt", "perf-tuning.json", cwd=out),
        # measured: the paper-scale run costs and the tuning ratios (both files: run it after both steps)
        Step("plan", "plan cub_main", [*cub, "--perf", str(out / "perf-paper-scale.json"), "--perf",
                                       str(out / "perf-tuning.json")], "plan-cub_main.txt", "plan-cub_main.txt",
             cwd=CHECKOUT),
        # the FLOPs model's projection (H100), to compare with the measured one above
        Step("model", "plan cub_main (model)", cub, "plan-cub_main-model.txt", "plan-cub_main-model.txt",
             cwd=CHECKOUT),
        # the robustness stage (live trunk, gradients to the pixels, Quantus) against evaluate, per family
        Step("robustness", "perf --robustness", robustness, "perf-robustness.txt", "perf-robustness.json", cwd=out),
    ]


def select_steps(steps: list[Step], keys: str | None) -> list[Step]:
    """The steps named in ``keys`` (comma-separated, in the check's order), all for None."""
    if keys is None:
        return steps
    wanted = [k.strip() for k in keys.split(",") if k.strip()]
    unknown = [k for k in wanted if k not in {s.key for s in steps}]
    if unknown or not wanted:
        raise ValueError(f"unknown gpu-check step(s) {', '.join(unknown) or '(none named)'}; choose among "
                         f"{', '.join(s.key for s in steps)}")
    return [s for s in steps if s.key in wanted]


def step_environment() -> dict[str, str]:
    """This process's environment with the checkout first on ``PYTHONPATH``."""
    paths = [str(CHECKOUT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def run_steps(steps: list[Step], out: Path, *, echo=print) -> list[StepResult]:  # noqa: ANN001
    """Run every step in order (a failure does not stop the next), each in its own process
    (which sets the deterministic settings when it imports ``benchmark``); output to ``out/step.log``."""
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for step in steps:
        echo(f"gpu-check: {step.name}: {' '.join(step.command)}")
        started = time.perf_counter()
        with open(out / step.log, "wb") as log:
            try:
                code = subprocess.run(step.command, stdout=log, stderr=subprocess.STDOUT, cwd=step.cwd,
                                      env=step_environment()).returncode
            except OSError as err:  # the command itself could not start
                log.write(f"gpu-check: {step.name} did not start: {err}\n".encode())
                code = 127
        results.append(StepResult(step.name, code, round(time.perf_counter() - started, 1), step.log, step.writes,
                                  (out / step.writes).is_file()))
    return results


def summarise(results: list[StepResult], out: Path) -> str:
    """The closing table; also written as ``out/summary.json``."""
    (out / "summary.json").write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    lines = [f"{'step':<20} {'status':<10} {'seconds':>8}  output"]
    for r in results:
        status = "ok" if r.returncode == 0 else f"FAILED {r.returncode}"
        output = f"{out / r.writes}" if r.written else f"(no {r.writes}; see {out / r.log})"
        lines.append(f"{r.name:<20} {status:<10} {r.seconds:>8.1f}  {output}")
    failed = [r.name for r in results if r.returncode != 0]
    lines.append(f"gpu-check: {len(failed)} of {len(results)} steps failed: {', '.join(failed)}" if failed
                 else f"gpu-check: all {len(results)} steps passed")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmark.cli.gpu_check", description=__doc__.split("\n")[0],
                                     allow_abbrev=False)
    parser.add_argument("--device", default="cuda", choices=DEVICES, help="cuda: the check; cpu: the dry run (CI)")
    parser.add_argument("--out", default="gpu-check", help="folder of every step's output (default: gpu-check)")
    parser.add_argument("--steps", help="comma-separated steps to run (tests, perf, tuning, plan, model; default: all)")
    args = parser.parse_args(argv)
    try:
        steps = select_steps(gpu_check_steps(args.device, Path(args.out)), args.steps)
    except ValueError as err:
        parser.error(str(err))
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("gpu-check needs a CUDA GPU: torch.cuda.is_available() is False (`make gpu-check DEVICE=cpu` "
                  "is the dry run)", file=sys.stderr)
            return 2
    out = Path(args.out)
    results = run_steps(steps, out)
    print(summarise(results, out))
    return 0 if all(r.returncode == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
