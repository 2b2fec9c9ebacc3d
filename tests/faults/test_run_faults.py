"""Fault injection on runs (source: issue 10): a process killed with SIGKILL at each phase of a run →
the next `protobench run` gives the uninterrupted result and leaves no temporary file;
concurrent `protobench run` processes on one runs directory train each run once; every bad
input is one clear error before the trunk's forward pass; a failed run keeps the exit status
non-zero on every invocation; files follow the umask."""
from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from support import scaled
from tiny_grid import TomlLiteral, write_tiny_grid

from benchmark.backbones import FrozenTrunk
from benchmark.cli import main
from benchmark.data import generate_synthbirds
from benchmark.errors import ProtobenchError
from benchmark.run.records import read_records
from benchmark.run.store import RunDir, atomic_write_json, find_run_dirs, run_lock
from benchmark.run.training import NonFiniteLossError, train
from methods.registry import build_method
from methods.testing import SyntheticTokens

REPO = Path(__file__).resolve().parents[2]
# Subprocesses get this long (scaled on a loaded machine by PROTOBENCH_TEST_TIMEOUT_SCALE).
DEADLINE_S = scaled(300)

VMF_ARGS = "{ discovery_epochs = 1, end_to_end_epochs = 2 }"

# A subprocess that runs `protobench ARGS…` single-threaded (as the tests are: conftest) and,
# for a named phase, SIGKILLs itself at the Nth call of the function that phase runs.
DRIVER = r"""
import os, signal, sys
import torch
torch.set_num_threads(1)
import benchmark.run.runner, benchmark.run.training
from benchmark.cli import main

phase, nth, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
calls = 0

def killing(original, applies=lambda *a, **k: True):
    def wrapper(*args, **kwargs):
        global calls
        if applies(*args, **kwargs):
            calls += 1
            if calls == nth:
                os.kill(os.getpid(), signal.SIGKILL)
        return original(*args, **kwargs)
    return wrapper

if phase == "epoch":  # the Nth training batch, between the loss and the optimiser step
    benchmark.run.training.total_loss = killing(benchmark.run.training.total_loss)
elif phase in ("checkpoint-rename", "result-rename", "records-rename"):  # temp file written, rename not done
    target = {"checkpoint-rename": "checkpoint.pt", "result-rename": "result.json",
              "records-rename": ("per_image.parquet", "per_image.csv.gz")}[phase]  # Parquet with pyarrow
    os.replace = killing(os.replace, lambda src, dst, **k: str(dst).endswith(target))
elif phase == "evaluation":
    benchmark.run.runner.evaluate = killing(benchmark.run.runner.evaluate)
sys.exit(main(argv))
"""


def write_grid(path: Path, root: Path, *, name: str = "tiny", js: str = "[2]", method: str = "vmfproto",
               method_args: str = VMF_ARGS, cache_dtype: str = "float16") -> Path:
    """The tests' tiny grid at 56 px on the CPU; ``name`` (inside quotes), ``js`` and ``method_args``
    go into the file as written, so a bad-input case can hand the parser what a user could."""
    return write_tiny_grid(path, TomlLiteral(f'"{name}"'), root, image_size=56, device="cpu", cache_dtype=cache_dtype,
                           method=method, method_args=TomlLiteral(method_args),
                           sweep=[{"prototypes_per_class": TomlLiteral(js)}])


def drive(phase: str, nth: int, argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", DRIVER, phase, str(nth), *argv], capture_output=True, text=True,
                          env=env, timeout=DEADLINE_S, cwd=REPO)


def science(result: dict) -> dict:
    """What a run computed (metrics and evaluation), without timings and provenance."""
    return {"metrics": result["metrics"], "evaluation": result["evaluation"]}


def temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*.tmp") if ".token-cache" not in p.parts]


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("faults")
    generate_synthbirds(work / "synthbirds", classes=4, images_per_class=8, seed=0)
    return work


@pytest.fixture(scope="module")
def solo(work: Path) -> dict[int, dict]:
    """The uninterrupted results of J = 2, 3, 4, one process, by J."""
    grid = write_grid(work / "solo.toml", work / "synthbirds", js="[2, 3, 4]")
    assert main(["run", str(grid), "--runs-dir", str(work / "solo"), "--cache-dir", str(work / "cache")]) == 0
    return {rd.spec()["prototypes_per_class"]: rd.result() for rd in find_run_dirs(work / "solo")}


# ---- kill -9 at each phase of a run -----------------------------------------------------------
@pytest.mark.parametrize("phase, nth, leaves", [
    ("epoch", 3, None),  # the 3rd training batch: inside epoch 3 (discovery has no loss), 2 checkpoints in
    ("checkpoint-rename", 1, ".checkpoint.pt."),  # the first checkpoint, written but not renamed
    ("checkpoint-rename", 2, ".checkpoint.pt."),  # the second, with the first in place
    ("evaluation", 1, None),  # training done, evaluating
    ("records-rename", 1, ".per_image."),  # per-image records (Parquet or gzip CSV) written but not renamed
    ("result-rename", 1, ".result.json."),  # result written but not renamed
])
@pytest.mark.slow
def test_kill_at_each_phase_then_rerun_gives_the_uninterrupted_result(
        work: Path, solo: dict[int, dict], phase: str, nth: int, leaves: str | None) -> None:
    grid = write_grid(work / f"{phase}-{nth}.toml", work / "synthbirds")
    runs = work / f"runs-{phase}-{nth}"
    argv = ["run", str(grid), "--runs-dir", str(runs), "--cache-dir", str(work / "cache")]
    killed = drive(phase, nth, argv)
    assert killed.returncode == -signal.SIGKILL, killed.stderr  # the fault was injected
    (rd,) = find_run_dirs(runs)
    assert rd.result() is None
    if leaves:  # the killed writer's temporary file is there …
        assert [p.name for p in temp_files(runs)] and all(p.name.startswith(leaves) for p in temp_files(runs))
    assert main(argv) == 0  # … the lock died with the process, and the re-run finishes the run
    assert science(rd.result()) == science(solo[2])
    per_image = read_records(rd.path)
    assert len(per_image) == rd.result()["evaluation"]["num_images"]
    assert 100 * per_image["correct"].mean() == pytest.approx(rd.result()["metrics"]["acc"])
    assert temp_files(runs) == []
    log = rd.log_path.read_text()
    if phase in ("epoch", "checkpoint-rename") and nth > 1 or phase in ("evaluation", "records-rename",
                                                                        "result-rename"):
        assert "resuming at stage" in log


# ---- one process per run ---------------------------------------------------------------------
@pytest.mark.slow
def test_three_concurrent_processes_train_each_run_once(work: Path, solo: dict[int, dict]) -> None:
    grid = write_grid(work / "concurrent.toml", work / "synthbirds", js="[2, 3, 4]")
    runs = work / "runs-concurrent"
    argv = ["run", str(grid), "--runs-dir", str(runs), "--cache-dir", str(work / "cache")]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", DRIVER, "none", "0", *argv], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env, cwd=REPO) for _ in range(3)]
    outputs = [p.communicate(timeout=DEADLINE_S) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err for _, err in outputs]
    dirs = find_run_dirs(runs)
    assert len(dirs) == 3
    for rd in dirs:
        lines = rd.log_path.read_text().splitlines()
        total = int(next(line for line in lines if line.startswith("epoch 1/")).split()[1].split("/")[1])
        # one attempt, its lines in order: start, every epoch once, done
        assert lines[0].startswith(f"run {rd.path.name}:") and lines[-1].startswith(f"done {rd.path.name}:")
        assert sum(line.startswith(("run ", "resuming ")) for line in lines) == 1
        epochs = [line.split()[1] for line in lines[1:-1] if line.startswith("epoch ")]
        assert epochs == [f"{e}/{total}" for e in range(1, total + 1)]
        # the rest between start and done are diagnostics lines (methods/diagnostics.py)
        assert all(line.startswith(("epoch ", "diagnostic out of range: ")) for line in lines[1:-1])
        assert science(rd.result()) == science(solo[rd.spec()["prototypes_per_class"]])
    skipped = sum(out.count("running elsewhere: ") for out, _ in outputs)
    print(f"{skipped} run(s) were skipped as running elsewhere")  # how much the processes overlapped


def test_a_run_held_by_a_live_process_is_skipped_and_said_so(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = write_grid(work / "held.toml", work / "synthbirds")
    runs = work / "runs-held"
    argv = ["run", str(grid), "--runs-dir", str(runs), "--cache-dir", str(work / "cache")]
    from benchmark.grid import load_grid

    spec = load_grid(grid).runs[0]
    run_dir = runs / "tiny" / spec.run_id
    with run_lock(run_dir):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert f"running elsewhere: {spec.run_id}" in out and f"pid {os.getpid()} on " in out
        assert not RunDir(run_dir).log_path.exists() and RunDir(run_dir).result() is None
    assert main(argv) == 0  # released: trained now
    assert RunDir(run_dir).result() is not None


def test_a_requeued_job_is_not_locked_out_by_its_killed_predecessor(tmp_path: Path) -> None:
    """A process holding the lock dies by SIGKILL: the lock goes with it."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from benchmark.run.store import run_lock\n"
        "with run_lock(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(600)"), str(tmp_path)],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert holder.stdout.readline().strip() == "held"
    from benchmark.run.store import RunBusy

    with pytest.raises(RunBusy, match=f"running elsewhere: pid {holder.pid} on "):
        with run_lock(tmp_path):
            pass
    killer = threading.Thread(target=holder.kill)
    killer.start()  # while the next attempt waits for the lock, as a requeued job does
    with run_lock(tmp_path, wait_s=DEADLINE_S):
        assert holder.wait(timeout=DEADLINE_S) == -signal.SIGKILL
    killer.join()


def test_a_filesystem_without_locks_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr("benchmark.run.store.fcntl.flock", no_locks)
    with pytest.raises(ProtobenchError, match=r"cannot lock .*\.lock \(No locks available\): the runs directory"):
        with run_lock(tmp_path):
            pass


# ---- exit status -----------------------------------------------------------------------------
def test_a_failed_run_exits_non_zero_on_every_invocation(work: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    grid = write_grid(work / "failing.toml", work / "synthbirds")
    argv = ["run", str(grid), "--runs-dir", str(work / "runs-failing"), "--cache-dir", str(work / "cache")]

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("evaluation broke")

    with monkeypatch.context() as patch:
        patch.setattr("benchmark.run.runner.evaluate", broken)
        assert main(argv) == 1
    err = capsys.readouterr().err
    assert "RuntimeError: evaluation broke" in err and "--retry-failed" in err
    assert main(argv) == 1  # skipped as failed before: still a failed grid
    err = capsys.readouterr().err
    assert "failed before: RuntimeError: evaluation broke" in err and "run the same command with --retry-failed" in err
    assert main([*argv, "--executor", "submitit-local"]) == 1  # nothing submitted, still failed
    assert "--retry-failed" in capsys.readouterr().err
    assert main([*argv, "--retry-failed"]) == 0


# ---- every user error before compute ---------------------------------------------------------
def corrupt_first_image(root: Path) -> None:
    path = root / "images" / (root / "images.txt").read_text().split()[1]
    path.write_bytes(os.urandom(path.stat().st_size))


def truncate_first_image(root: Path) -> None:
    path = root / "images" / (root / "images.txt").read_text().split()[1]
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def box_outside(root: Path) -> None:
    lines = (root / "bounding_boxes.txt").read_text().splitlines()
    lines[0] = f"{lines[0].split()[0]} 5000.0 10.0 20.0 20.0"
    (root / "bounding_boxes.txt").write_text("\n".join(lines) + "\n")


BAD_INPUTS = {  # name: (grid fields, data mutation, what the one error says)
    "grid name '..'": ({"name": ".."}, None, "name = '..' must be a folder name"),
    "grid name with a newline": ({"name": "a\\nb"}, None, "name = 'a\\nb' must be a folder name"),
    "grid name starting with '.'": ({"name": ".hidden"}, None, "name = '.hidden' must be a folder name"),
    "cache_dtype bfloat16": ({"cache_dtype": "bfloat16"}, None, "cache_dtype = 'bfloat16' must be one the token"),
    "cache_dtype int8": ({"cache_dtype": "int8"}, None, "cache_dtype = 'int8'"),
    "zero learning rate": ({"method_args": "{ lr_block = 0.0 }"}, None, "lr_block = 0.0 is a learning rate"),
    "negative learning rate": ({"method_args": "{ lr_mu = -1e-3 }"}, None, "lr_mu = -0.001 is a learning rate"),
    "nan learning rate": ({"method_args": "{ lr_kappa = nan }"}, None, "lr_kappa = nan must be a finite"),
    "learning rate as a string": ({"method_args": "{ lr_block = '1e-4' }"}, None,
                                  "lr_block = '1e-4' must be of type int or float"),
    "negative epochs": ({"method_args": "{ end_to_end_epochs = -1 }"}, None, "end_to_end_epochs = -1 is a number"),
    "fractional epochs": ({"method_args": "{ end_to_end_epochs = 1.5 }"}, None,
                          "end_to_end_epochs = 1.5 must be of type int"),
    "int for a bool": ({"method_args": "{ stage2_prototypes = 1 }"}, None, "stage2_prototypes = 1 must be of type bool"),
    "no epochs at all (adapter's own check)": ({"method_args": "{ discovery_epochs = 0, end_to_end_epochs = 0 }"},
                                               None, "discovery_epochs + end_to_end_epochs must be >= 1"),
    "tau out of range (adapter's own check)": ({"method_args": "{ tau = 2.0 }"}, None, "tau"),
    "unknown gating (adapter's own check)": ({"method_args": "{ gating = 'nope' }"}, None, "gating"),
    "protopnet zero lr step": ({"method": "protopnet", "method_args": "{ joint_lr_step = 0 }"}, None,
                               "joint_lr_step"),
    "nppp momentum 1.5": ({"method": "nppp", "method_args": "{ momentum = 1.5 }"}, None, "momentum"),
    "unknown hyperparameter": ({"method_args": "{ lr_blok = 1e-4 }"}, None, "has no hyperparameter 'lr_blok'"),
    "J = 0": ({"js": "[0]"}, None, "prototypes_per_class (J) = 0 must be ≥ 1"),
    "J beyond the bound": ({"js": "[1000000]"}, None, "prototypes_per_class (J) = 1000000 is more than fits"),
    "C·J beyond the bound": ({"js": "[6000]"}, None, "4 classes × J = 6000 is 24000 prototypes"),
    "corrupt JPEG": ({}, corrupt_first_image, "cannot be decoded"),
    "truncated JPEG": ({}, truncate_first_image, "cannot be decoded"),
    "box outside its image": ({}, box_outside, "starts outside the"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_every_bad_input_is_one_clear_error_before_the_trunk_runs(
        work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        case: str) -> None:
    fields, mutate, needle = BAD_INPUTS[case]
    root = work / "synthbirds"
    if mutate is not None:
        root = tmp_path / "synthbirds"
        shutil.copytree(work / "synthbirds", root)
        mutate(root)

    def no_forward(*args: object, **kwargs: object) -> None:
        raise AssertionError("the trunk ran before the error")

    monkeypatch.setattr(FrozenTrunk, "forward", no_forward)
    grid = write_grid(tmp_path / "bad.toml", root, **fields)
    runs = tmp_path / "runs"
    assert main(["run", str(grid), "--runs-dir", str(runs), "--cache-dir", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert err.count("protobench: error:") == 1 and "Traceback" not in err
    assert needle in err, err
    assert not list(tmp_path.rglob("result.json")) and not list(tmp_path.rglob("log.txt"))
    assert not list(tmp_path.rglob("spec.json"))  # nothing written, inside the runs directory or out


def test_image_check_accepts_bytes_after_the_end_marker_and_names_the_first_bad_image(work: Path, tmp_path: Path) -> None:
    from benchmark.data import check_images, load_dataset

    root = tmp_path / "synthbirds"
    shutil.copytree(work / "synthbirds", root)
    split = load_dataset("synthbirds", root, "train")
    first, second = split.image_paths[:2]
    first.write_bytes(first.read_bytes() + b"\0" * 16)  # a camera trailer: a complete, valid JPEG
    check_images(split)
    second.write_bytes(second.read_bytes()[:-100])  # truncated
    split.image_paths[-1].write_bytes(b"not an image")
    with pytest.raises(ProtobenchError, match=f"2 of {len(split)} images of synthbirds train are unusable; "
                                              f"the first: {second} cannot be decoded"):
        check_images(split)


def test_plan_checks_images_of_datasets_on_disk(work: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "synthbirds"
    shutil.copytree(work / "synthbirds", root)
    truncate_first_image(root)
    assert main(["plan", str(write_grid(tmp_path / "g.toml", root))]) == 2
    assert "cannot be decoded" in capsys.readouterr().err


# ---- numerical failures ----------------------------------------------------------------------
def test_a_failed_decomposition_is_a_non_finite_loss_error_naming_stage_and_epoch() -> None:
    """Learning rates of 100 make vMFProto's parameters diverge (a raw ``torch.linalg.LinAlgError``
    of the log-det term's Cholesky factor once; now a failed factor is a NaN term, read at the
    epoch end like any other non-finite loss; sources: issues 10 and 23)."""
    source = SyntheticTokens()
    torch.manual_seed(0)
    method = build_method("vmfproto", source.context(2), discovery_epochs=1, end_to_end_epochs=2,
                          lr_block=100.0, lr_mu=100.0, lr_kappa=100.0)
    with pytest.raises(NonFiniteLossError) as err:
        train(method, source, seed=0, batch_size=8, device=torch.device("cpu"), checkpoint_path=None,
              log=lambda line: None)
    message = str(err.value)
    assert "stage 'end_to_end', epoch 1 (method 'vmfproto')" in message and message.startswith("non-finite loss")
    assert isinstance(err.value, ProtobenchError)


# ---- shared run directories ------------------------------------------------------------------
@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_files_follow_the_umask(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        atomic_write_json(tmp_path / "run" / "result.json", {"x": 1})
        with run_lock(tmp_path / "run"):
            pass
    finally:
        os.umask(old)
    for path in (tmp_path / "run" / "result.json", tmp_path / "run" / ".lock"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    assert stat.S_IMODE((tmp_path / "run").stat().st_mode) == 0o777 & ~umask


def test_run_files_are_readable_by_the_group(solo: dict[int, dict], work: Path) -> None:
    umask = os.umask(0)
    os.umask(umask)
    for rd in find_run_dirs(work / "solo"):
        for name in ("spec.json", "result.json", "checkpoint.pt", "log.txt"):
            assert stat.S_IMODE((rd.path / name).stat().st_mode) == 0o666 & ~umask, name


def test_stale_temp_files_of_a_killed_writer_are_removed_under_the_lock(tmp_path: Path) -> None:
    rd = RunDir(tmp_path)
    stale = [tmp_path / ".checkpoint.pt.dead1234.tmp", tmp_path / ".result.json.dead5678.tmp",
             tmp_path / ".robustness.parquet.dead9abc.tmp"]  # the robustness stage's records too
    in_flight = tmp_path / ".job.json.live0000.tmp"  # a submitter writes job.json without the lock
    for path in (*stale, in_flight):
        path.write_bytes(b"x")
    with run_lock(tmp_path):
        assert sorted(rd.remove_stale_temp_files()) == sorted(stale)
    assert [p.name for p in tmp_path.glob("*.tmp")] == [in_flight.name]


def test_result_json_written_by_a_subprocess_is_never_half(tmp_path: Path) -> None:
    """Readers see the old or the new file: a writer killed between write and rename leaves the
    old one intact (the kill tests above check the re-run; this checks what readers saw)."""
    path = tmp_path / "result.json"
    atomic_write_json(path, {"old": True})
    code = ("import os, signal, sys\nfrom pathlib import Path\nfrom benchmark.run.store import atomic_write_json\n"
            "os.replace = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)\n"
            "atomic_write_json(Path(sys.argv[1]), {'new': True})")
    proc = subprocess.run([sys.executable, "-c", code, str(path)], env={**os.environ, "PYTHONPATH": str(REPO)},
                          timeout=DEADLINE_S)
    assert proc.returncode == -signal.SIGKILL
    assert json.loads(path.read_text()) == {"old": True}
    assert len(list(tmp_path.glob(".result.json.*.tmp"))) == 1
