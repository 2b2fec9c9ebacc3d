"""Per-epoch records: metrics.jsonl has one line per epoch with the agreed keys, matches the
epochs after a resume (also after a kill between the record and the checkpoint), and
TensorBoard is optional with one clear error."""
import json
import sys
from dataclasses import replace

import pytest
import torch

from benchmark.run.epochlog import EpochLog, TensorBoardLog, read_epoch_log, summary_writer_class
from benchmark.errors import ProtobenchError
from benchmark.run.training import EpochRecord, TrainingInterrupted, train
from example_adapter import CosinePrototypes
from methods.testing import SyntheticTokens

CPU = torch.device("cpu")
KEYS = {"epoch", "stage", "seconds", "lr", "terms"}


def build(source, **kw):
    torch.manual_seed(0)
    return CosinePrototypes(source.context(2), **kw)


def quiet(line):
    pass


def run(path, log, *, epochs=4, stop=None):
    source = SyntheticTokens()
    train(build(source, epochs=epochs), source, seed=3, batch_size=8, device=CPU, checkpoint_path=path, log=quiet,
          stop_after_epoch=stop, on_epoch_end=log.append)


def test_one_line_per_epoch_with_the_agreed_keys(tmp_path):
    log = EpochLog(tmp_path / "metrics.jsonl")
    captured = []
    source = SyntheticTokens()
    method = build(source, epochs=3)
    train(method, source, seed=3, batch_size=8, device=CPU, checkpoint_path=None, log=quiet,
          on_epoch_end=lambda r: (captured.append(r), log.append(r)))
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["epoch"] for r in records] == [1, 2, 3]
    assert all(set(r) == KEYS for r in records)
    assert all(r["stage"] == "train" and r["seconds"] > 0 for r in records)
    # the learning rate the optimiser's groups held during each epoch, read from an independent optimiser
    stage = method.stages()[0]
    assert set(records[0]["lr"]) == {g.name for g in stage.param_groups}
    assert records[0]["lr"] == {g.name: g.lr for g in stage.param_groups}
    assert set(records[0]["terms"]) == {"ce"} and all(isinstance(v, float) for v in records[0]["terms"].values())
    assert records == [{**r.__dict__} for r in captured]


def test_resumed_run_records_each_epoch_once_with_the_uninterrupted_values(tmp_path):
    straight = EpochLog(tmp_path / "straight.jsonl")
    run(tmp_path / "a.pt", straight)

    resumed = EpochLog(tmp_path / "resumed.jsonl")
    with pytest.raises(TrainingInterrupted):
        run(tmp_path / "b.pt", resumed, stop=2)
    # killed after the record of epoch 3 was written, before its checkpoint: a stale line
    stale = EpochRecord(3, "train", 9.9, {"prototypes": 1.0}, {"ce": 123.0})
    resumed.append(stale)
    assert [r["epoch"] for r in read_epoch_log(resumed.path)] == [1, 2, 3]
    run(tmp_path / "b.pt", resumed)  # resumes at the checkpoint's epoch 2

    a, b = read_epoch_log(straight.path), read_epoch_log(resumed.path)
    assert [r["epoch"] for r in b] == [1, 2, 3, 4]
    for x, y in zip(a, b):  # resume is exact, so the losses and rates are the uninterrupted run's
        assert x["terms"] == pytest.approx(y["terms"], rel=1e-6) and x["lr"] == y["lr"]
    assert b[2]["terms"]["ce"] != 123.0


class Halving(CosinePrototypes):
    """The example adapter with the learning rate halved after every epoch (StepLR, γ = 0.5)."""

    def stages(self):
        (stage,) = super().stages()
        return [replace(stage, scheduler=lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5))]


def test_lr_is_the_rate_the_epochs_steps_used(tmp_path):
    log = EpochLog(tmp_path / "metrics.jsonl")
    source = SyntheticTokens()
    torch.manual_seed(0)
    method = Halving(source.context(2), epochs=3, lr=0.1)
    train(method, source, seed=0, batch_size=8, device=CPU, checkpoint_path=None, log=quiet, on_epoch_end=log.append)
    # epoch e (1-based) steps with 0.1 · 0.5^(e−1): the scheduler steps after the epoch
    assert [r["lr"]["prototypes"] for r in read_epoch_log(log.path)] == pytest.approx([0.1, 0.05, 0.025])


def test_a_corrupt_line_is_one_clear_error(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"epoch": 1}\nnot json\n')
    with pytest.raises(ProtobenchError, match="metrics.jsonl:2"):
        read_epoch_log(path)


def test_tensorboard_missing_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails as if not installed
    with pytest.raises(ProtobenchError, match=r"pip install 'protobench\[tensorboard\]'"):
        summary_writer_class()


def test_tensorboard_events_hold_the_records(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    board = TensorBoardLog(tmp_path / "tb")
    source = SyntheticTokens()
    train(build(source, epochs=2), source, seed=3, batch_size=8, device=CPU, checkpoint_path=None, log=quiet,
          on_epoch_end=board.append)
    board.close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert {"loss/ce", "time/epoch_seconds"} <= set(tags) and any(t.startswith("lr/") for t in tags)
    assert [e.step for e in events.Scalars("loss/ce")] == [1, 2]


def test_tensorboard_command_writes_the_curves_of_finished_runs(tmp_path, monkeypatch, capsys):
    """``protobench tensorboard RUNS --out DIR``: every record of metrics.jsonl, as the live writer
    logs it (a stand-in SummaryWriter records the calls; the real one is tested above)."""
    import benchmark.run.epochlog as epochlog
    from benchmark.cli import main

    calls = []

    class Writer:
        def __init__(self, log_dir, purge_step):
            calls.append(("open", log_dir, purge_step))

        def add_scalar(self, tag, value, step):
            calls.append((tag, value, step))

        def flush(self):
            pass

        def close(self):
            calls.append(("close",))

    monkeypatch.setattr(epochlog, "summary_writer_class", lambda: Writer)
    run = tmp_path / "runs" / "g" / "r1"
    log = EpochLog(run / "metrics.jsonl")
    for epoch, stage in ((1, "discovery"), (2, "end_to_end")):
        log.append(EpochRecord(epoch, stage, 0.5 * epoch, {"mu": 1e-2}, {"ce": 1.0 / epoch}))
    assert main(["tensorboard", str(tmp_path / "runs"), "--out", str(tmp_path / "tb")]) == 0
    assert calls == [("open", str(tmp_path / "tb" / "g" / "r1"), 1),
                     ("loss/ce", 1.0, 1), ("lr/mu", 1e-2, 1), ("time/epoch_seconds", 0.5, 1),
                     ("loss/ce", 0.5, 2), ("lr/mu", 1e-2, 2), ("time/epoch_seconds", 1.0, 2), ("close",)]
    assert "wrote the curves of 1 run(s)" in capsys.readouterr().out
