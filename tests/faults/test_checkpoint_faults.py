"""Faults injected into checkpoints: a crafted pickle (refused, nothing executed), an old-format
file (refused with the fix), a full disk while writing (clear error, nothing partial, the previous
checkpoint intact), and a resume under another code version (refused, or allowed and recorded)."""
import contextlib
import errno
import io
import json
import os
import pickle
import random
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import benchmark.run.store
import benchmark.run.checkpoint
import benchmark.run.training
from benchmark.cli import main
from benchmark.errors import ProtobenchError
from benchmark.run.store import FREE_SPACE_MARGIN, find_run_dirs
from benchmark.run.checkpoint import CHECKPOINT_FORMAT, load_checkpoint
from benchmark.run.schedules import make_scheduler
from benchmark.run.training import TrainingInterrupted, _rng_state, _set_rng_state, make_optimizer, train
from example_adapter import CosinePrototypes
from support import HELPERS, REPO
from tiny_grid import write_tiny_grid
from methods.registry import build_method, list_methods
from methods.testing import SyntheticTokens

CPU = torch.device("cpu")


def quiet(line: str) -> None:
    pass


def build(source: SyntheticTokens, epochs: int = 3) -> CosinePrototypes:
    torch.manual_seed(0)
    return CosinePrototypes(source.context(2), epochs=epochs)


def train_until(path: Path, stop: int, epochs: int = 3) -> None:
    """Train the example adapter with checkpoints at ``path`` and stop after global epoch ``stop``."""
    source = SyntheticTokens()
    with pytest.raises(TrainingInterrupted):
        train(build(source, epochs), source, seed=3, batch_size=8, device=CPU, checkpoint_path=path, log=quiet,
              stop_after_epoch=stop)


def tmp_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# ---- crafted and old-format checkpoints ------------------------------------------------------------
class Payload:
    """Unpickling this runs ``exec`` and creates ``marker``: what a hostile checkpoint would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').close()",)


def crafted_zip(path: Path, marker: Path) -> None:
    """A torch.save archive shaped like a checkpoint, one value of which is the payload."""
    torch.save({"format": CHECKPOINT_FORMAT, "method": Payload(marker), "global_epoch": 1}, path)


def crafted_raw_pickle(path: Path, marker: Path) -> None:
    """A bare pickle stream (torch.load reads those too, through the legacy path)."""
    path.write_bytes(pickle.dumps({"format": CHECKPOINT_FORMAT, "method": Payload(marker)}, protocol=2))


@pytest.mark.parametrize("craft", [crafted_zip, crafted_raw_pickle])
def test_crafted_checkpoint_is_refused_and_nothing_runs(tmp_path: Path, craft) -> None:
    marker = tmp_path / "pwned"
    checkpoint = tmp_path / "run" / "checkpoint.pt"
    checkpoint.parent.mkdir()
    craft(checkpoint, marker)
    # the payload is live: the unsafe loader does run it (and a bare pickle then fails as corrupt)
    with contextlib.suppress(RuntimeError):
        torch.load(checkpoint, map_location="cpu", weights_only=False)
    assert marker.exists()
    marker.unlink()

    source = SyntheticTokens()
    with pytest.raises(ProtobenchError) as err:
        train(build(source), source, seed=0, batch_size=8, device=CPU, checkpoint_path=checkpoint, log=quiet)
    message = str(err.value)
    assert str(checkpoint) in message and "nothing in it was run" in message
    assert "it references exec," in message  # names what it refused
    assert "weights_only=False" not in message and "safe_globals" not in message  # suggests no unsafe way
    assert not marker.exists()
    with pytest.raises(ProtobenchError):
        load_checkpoint(checkpoint)
    assert not marker.exists()


def test_crafted_backbone_weights_file_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    """``weights = "model.pth"`` goes through timm's loader, which reads with weights_only=True
    from timm 1.0.26 on (pyproject.toml requires it; 1.0.20–1.0.25 read .pth files unsafely)."""
    from benchmark.backbones import create_backbone

    marker = tmp_path / "pwned"
    weights = tmp_path / "model.pth"
    torch.save({"state_dict": Payload(marker)}, weights)
    with pytest.raises(ProtobenchError, match="model.pth cannot be loaded into dinov2_vits14"):
        create_backbone("dinov2_vits14", weights=weights, image_size=28, depth=1, embed_dim=24, num_heads=2)
    assert not marker.exists()


def test_old_format_checkpoint_is_refused_with_the_fix(tmp_path: Path) -> None:
    """Format 1 pickled NumPy's RNG state as an ndarray: the weights-only loader refuses it, and
    the error says to delete the checkpoint rather than loading it unsafely."""
    path = tmp_path / "checkpoint.pt"
    torch.save({"format": 1, "method": {}, "global_epoch": 2,
                "rng": {"python": random.getstate(), "numpy": np.random.get_state(),
                        "torch": torch.get_rng_state()}}, path)
    with pytest.raises(ProtobenchError) as err:
        load_checkpoint(path)
    message = str(err.value)
    assert str(path) in message and "references numpy." in message
    assert f"before protobench checkpoint format {CHECKPOINT_FORMAT}" in message
    assert f"rm {str(path)!r}" in message and "--retry-failed" in message


@pytest.mark.parametrize("payload, shown", [({"format": 1, "method": {}}, "format 1"),
                                            ([1, 2, 3], "format 'list'")])
def test_checkpoint_of_another_format_is_refused(tmp_path: Path, payload, shown) -> None:
    path = tmp_path / "checkpoint.pt"
    torch.save(payload, path)
    with pytest.raises(ProtobenchError, match=re.escape(shown)) as err:
        load_checkpoint(path)
    assert f"reads format {CHECKPOINT_FORMAT}" in str(err.value) and "rm " in str(err.value)


def test_a_cpu_runs_rng_state_never_touches_cuda(monkeypatch) -> None:
    """Only the run's device's generator is saved and restored: a CPU run starts no CUDA context
    (and a checkpoint does not depend on how many GPUs are visible)."""
    def no_cuda(*args, **kwargs):
        raise AssertionError("a CPU run read or set a CUDA generator")

    for name in ("get_rng_state", "get_rng_state_all", "set_rng_state", "set_rng_state_all"):
        monkeypatch.setattr(torch.cuda, name, no_cuda)
    state = _rng_state(torch.device("cpu"))
    assert "cuda" not in state
    _set_rng_state({**state, "cuda": [torch.zeros(16, dtype=torch.uint8)]}, torch.device("cpu"))


def test_rng_states_survive_the_weights_only_loader_exactly() -> None:
    """Draws after restoring a saved state equal the draws right after saving it (Python, NumPy
    with a cached Gaussian, torch)."""
    random.seed(11), np.random.seed(11), torch.manual_seed(11)
    np.random.standard_normal()  # odd number of Box–Muller draws: NumPy caches the second Gaussian
    assert np.random.get_state()[3] == 1
    buffer = io.BytesIO()
    torch.save(_rng_state(torch.device("cpu")), buffer)
    expected = (random.random(), np.random.standard_normal(3).tolist(), np.random.randint(0, 2**31, 5).tolist(),
                torch.rand(4))
    random.seed(0), np.random.seed(0), torch.manual_seed(0)
    _set_rng_state(torch.load(io.BytesIO(buffer.getvalue()), map_location="cpu", weights_only=True), torch.device("cpu"))
    again = (random.random(), np.random.standard_normal(3).tolist(), np.random.randint(0, 2**31, 5).tolist(),
             torch.rand(4))
    assert again[:3] == expected[:3] and torch.equal(again[3], expected[3])


@pytest.mark.parametrize("name", list_methods())
def test_every_method_checkpoint_loads_with_weights_only(name: str) -> None:
    """Model, optimiser and scheduler state of every method's training stages pass the
    weights-only loader and load back (MultiStepLR keeps a Counter, LambdaLR/StepLR their own;
    a per-step ``step_schedule`` is a LambdaLR too)."""
    source = SyntheticTokens(num_classes=4, images_per_class=6)
    torch.manual_seed(0)
    method = build_method(name, source.context(2))
    for stage in (s for s in method.stages() if s.trains and s.epochs > 0):
        optimizer = make_optimizer(stage)
        scheduler = make_scheduler(stage, optimizer, steps_per_epoch=3)
        for p in (p for g in stage.param_groups for p in g.params):
            p.grad = torch.ones_like(p)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        buffer = io.BytesIO()
        torch.save({"method": method.state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict() if scheduler else None}, buffer)
        loaded = torch.load(io.BytesIO(buffer.getvalue()), map_location="cpu", weights_only=True)
        method.load_state_dict(loaded["method"])
        fresh = make_optimizer(stage)
        fresh.load_state_dict(loaded["optimizer"])
        if scheduler is not None:
            fresh_scheduler = make_scheduler(stage, fresh, steps_per_epoch=3)
            fresh_scheduler.load_state_dict(loaded["scheduler"])
            assert fresh_scheduler.get_last_lr() == scheduler.get_last_lr()


# ---- disk full while writing a checkpoint ------------------------------------------------------
def assert_previous_checkpoint_intact(path: Path, before: bytes, epoch: int) -> None:
    assert path.read_bytes() == before
    assert load_checkpoint(path)["global_epoch"] == epoch
    assert tmp_files(path.parent) == []


def test_too_little_free_space_stops_before_writing(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "checkpoint.pt"
    train_until(path, 1)
    before = path.read_bytes()
    free = 4096
    real = shutil.disk_usage
    monkeypatch.setattr(benchmark.run.store.shutil, "disk_usage",
                        lambda p: SimpleNamespace(total=real(p).total, used=real(p).used, free=free))
    with pytest.raises(ProtobenchError) as err:
        train_until(path, 2)
    message = str(err.value)
    assert str(path) in message and f"{free:,} bytes are free" in message
    needed = int(re.search(r"needs ([\d,]+) bytes", message).group(1).replace(",", ""))
    assert abs(needed - len(before)) < 1024  # the epoch-2 checkpoint is about the size of epoch 1's
    assert f"{FREE_SPACE_MARGIN:,}" in message
    assert_previous_checkpoint_intact(path, before, 1)


def test_disk_full_during_the_write_leaves_nothing_partial(tmp_path: Path, monkeypatch) -> None:
    """ENOSPC surfacing at fsync after part of the data reached the temporary file."""
    path = tmp_path / "checkpoint.pt"
    train_until(path, 1)
    before = path.read_bytes()
    partial: list[str] = []

    def full_disk(fd: int) -> None:
        partial.extend(tmp_files(tmp_path))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(benchmark.run.store.os, "fsync", full_disk)
    with pytest.raises(ProtobenchError) as err:
        train_until(path, 2)
    assert len(partial) == 1  # the temporary file existed when the write failed ...
    assert str(path) in str(err.value) and "No space left on device" in str(err.value)
    assert_previous_checkpoint_intact(path, before, 1)  # ... and is gone now


CHILD = """
import resource, signal, sys
from pathlib import Path
import torch
from benchmark.errors import ProtobenchError
from benchmark.run.training import TrainingInterrupted, train
from example_adapter import CosinePrototypes
from methods.testing import SyntheticTokens

path, limit = Path(sys.argv[1]), int(sys.argv[2])
source = SyntheticTokens()
torch.manual_seed(0)
method = CosinePrototypes(source.context(2), epochs=3)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
try:
    train(method, source, seed=3, batch_size=8, device=torch.device("cpu"), checkpoint_path=path,
          log=lambda line: None, stop_after_epoch=2)
except ProtobenchError as err:
    print(err)
    sys.exit(3)
except TrainingInterrupted:
    sys.exit(0)
"""


def test_file_size_limit_during_the_write_leaves_nothing_partial(tmp_path: Path) -> None:
    """A real failing write: RLIMIT_FSIZE below the checkpoint's size in a child process, so the
    kernel refuses the write halfway (EFBIG)."""
    path = tmp_path / "checkpoint.pt"
    train_until(path, 1)
    before = path.read_bytes()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HELPERS), str(REPO)]),
           "PYTHONDONTWRITEBYTECODE": "1"}
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), str(path), str(len(before) // 2)],
                           capture_output=True, text=True, env=env, timeout=600)
    assert child.returncode == 3, child.stdout + child.stderr
    assert str(path) in child.stdout and "File too large" in child.stdout
    assert_previous_checkpoint_intact(path, before, 1)


# ---- a resume under another code version -----------------------------------------------------------
def test_resume_under_other_code_is_refused_naming_both(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "checkpoint.pt"
    for module in (benchmark.run.training, benchmark.run.checkpoint):  # the one that trains, the one that resumes
        monkeypatch.setattr(module, "code_version", lambda: "v-old")
    train_until(path, 1)
    before = path.read_bytes()
    for module in (benchmark.run.training, benchmark.run.checkpoint):  # the one that trains, the one that resumes
        monkeypatch.setattr(module, "code_version", lambda: "v-new")
    source = SyntheticTokens()
    with pytest.raises(ProtobenchError) as err:
        train(build(source), source, seed=3, batch_size=8, device=CPU, checkpoint_path=path, log=quiet)
    message = str(err.value)
    assert "'v-old'" in message and "'v-new'" in message and "--allow-code-change" in message
    assert path.read_bytes() == before


def test_allowed_code_change_resumes_exactly_and_lists_both_versions(tmp_path: Path, monkeypatch) -> None:
    source = SyntheticTokens()
    for module in (benchmark.run.training, benchmark.run.checkpoint):  # the one that trains, the one that resumes
        monkeypatch.setattr(module, "code_version", lambda: "v-old")
    straight = build(source, epochs=4)
    report = train(straight, source, seed=3, batch_size=8, device=CPU, checkpoint_path=tmp_path / "a.pt", log=quiet)
    assert report.code_versions == [{"version": "v-old", "epochs": [1, 4]}]

    train_until(tmp_path / "b.pt", 1, epochs=4)
    train_until(tmp_path / "b.pt", 2, epochs=4)  # a second attempt of the same code extends its entry
    for module in (benchmark.run.training, benchmark.run.checkpoint):  # the one that trains, the one that resumes
        monkeypatch.setattr(module, "code_version", lambda: "v-new")
    resumed = build(source, epochs=4)
    report = train(resumed, source, seed=3, batch_size=8, device=CPU, checkpoint_path=tmp_path / "b.pt",
                   log=quiet, allow_code_change=True)
    assert report.code_versions == [{"version": "v-old", "epochs": [1, 2]}, {"version": "v-new", "epochs": [3, 4]}]
    assert load_checkpoint(tmp_path / "b.pt")["report"]["code_versions"] == report.code_versions
    assert torch.equal(straight.prototypes, resumed.prototypes)


def test_cli_refuses_a_code_change_before_the_token_cache_and_allows_it_on_request(tmp_path: Path,
                                                                                     monkeypatch, capsys) -> None:
    from benchmark.grid import load_grid
    from benchmark.run.runner import execute_run

    grid_file = tmp_path / "grid.toml"
    write_tiny_grid(grid_file, "codechange", tmp_path / "synthbirds",
                    dataset_args={"classes": 3, "images_per_class": 4, "seed": 0},
                    backbone_args={"depth": 1, "embed_dim": 24, "num_heads": 2}, image_size=56,
                    method_args={"end_to_end_epochs": 2})
    runs = tmp_path / "runs"
    spec = load_grid(grid_file).runs[0]
    for module in (benchmark.run.training, benchmark.run.checkpoint):  # the one that trains, the one that resumes
        monkeypatch.setattr(module, "code_version", lambda: "v-old")
    with pytest.raises(TrainingInterrupted):
        execute_run(spec, runs / "codechange" / spec.run_id, cache_root=tmp_path / "cache-old", progress=False,
                    stop_after_epoch=1, log=quiet)

    for module in (benchmark.run.training, benchmark.run.checkpoint):  # the one that trains, the one that resumes

        monkeypatch.setattr(module, "code_version", lambda: "v-new")
    new_cache = tmp_path / "cache-new"
    assert main(["run", str(grid_file), "--runs-dir", str(runs), "--cache-dir", str(new_cache)]) == 1
    (run,) = find_run_dirs(runs)
    reason = run.failure()["reason"]
    assert "'v-old'" in reason and "'v-new'" in reason and "--allow-code-change" in reason
    assert not new_cache.exists()  # refused before the trunk ran
    capsys.readouterr()

    assert main(["run", str(grid_file), "--runs-dir", str(runs), "--cache-dir", str(new_cache),
                 "--retry-failed", "--allow-code-change"]) == 0
    result = json.loads(run.result_path.read_text())
    total = result["timing"]["epochs_timed"]
    assert result["provenance"]["code_versions"] == [{"version": "v-old", "epochs": [1, 1]},
                                                     {"version": "v-new", "epochs": [2, total]}]
    assert total == 3  # one discovery epoch + end_to_end_epochs = 2
