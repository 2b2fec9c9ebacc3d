"""The training loop: exact resume, checkpoint contents, non-finite losses named."""
import pytest
import torch

from benchmark.run.checkpoint import load_checkpoint
from benchmark.run.training import NonFiniteLossError, TrainingInterrupted, train
from example_adapter import CosinePrototypes
from methods.testing import SyntheticTokens

CPU = torch.device("cpu")


def build(source, **kw):
    torch.manual_seed(0)
    return CosinePrototypes(source.context(2), **kw)


def quiet(line):
    pass


def test_resumed_run_equals_uninterrupted_run(tmp_path):
    source = SyntheticTokens()
    straight = build(source, epochs=4)
    train(straight, source, seed=3, batch_size=8, device=CPU, checkpoint_path=tmp_path / "a.pt", log=quiet)

    interrupted = build(source, epochs=4)
    with pytest.raises(TrainingInterrupted):
        train(interrupted, source, seed=3, batch_size=8, device=CPU, checkpoint_path=tmp_path / "b.pt",
              log=quiet, stop_after_epoch=2)
    assert load_checkpoint(tmp_path / "b.pt")["global_epoch"] == 2
    lines = []
    resumed = build(source, epochs=4)
    report = train(resumed, source, seed=3, batch_size=8, device=CPU, checkpoint_path=tmp_path / "b.pt",
                   log=lines.append)
    assert lines[0].startswith("resuming at stage train, epoch 2")
    assert sum(line.startswith("epoch ") for line in lines) == 2  # only epochs 3 and 4 ran
    assert report.resumed_from_epoch == 2
    assert torch.equal(straight.prototypes, resumed.prototypes)


def test_checkpoint_holds_model_optimizer_scheduler_and_rng(tmp_path):
    source = SyntheticTokens()
    with pytest.raises(TrainingInterrupted):
        train(build(source, epochs=3), source, seed=0, batch_size=8, device=CPU,
              checkpoint_path=tmp_path / "c.pt", log=quiet, stop_after_epoch=1)
    ckpt = load_checkpoint(tmp_path / "c.pt")
    assert set(ckpt) >= {"method", "optimizer", "scheduler", "rng", "stage_index", "epoch_in_stage", "global_epoch"}
    assert ckpt["optimizer"]["state"], "Adam moments are saved"
    assert set(ckpt["rng"]) >= {"python", "numpy", "torch"}


def test_finished_checkpoint_is_not_trained_again(tmp_path):
    source = SyntheticTokens()
    method = build(source, epochs=2)
    train(method, source, seed=0, batch_size=8, device=CPU, checkpoint_path=tmp_path / "d.pt", log=quiet)
    lines = []
    again = build(source, epochs=2)
    train(again, source, seed=0, batch_size=8, device=CPU, checkpoint_path=tmp_path / "d.pt", log=lines.append)
    assert not any(line.startswith("epoch ") for line in lines)
    assert torch.equal(method.prototypes, again.prototypes)


def test_nan_loss_names_stage_epoch_and_term():
    source = SyntheticTokens()
    method = build(source, epochs=2)
    with torch.no_grad():
        method.prototypes[0, 0] = float("nan")
    with pytest.raises(NonFiniteLossError) as err:
        train(method, source, seed=0, batch_size=8, device=CPU, checkpoint_path=None, log=quiet)
    msg = str(err.value)
    assert "term 'ce'" in msg and "stage 'train'" in msg and "epoch 0" in msg


def test_example_adapter_learns():
    source = SyntheticTokens()
    method = build(source)
    train(method, source, seed=0, batch_size=8, device=CPU, checkpoint_path=None, log=quiet)
    batch = source.batch(torch.arange(len(source)))
    acc = (method.logits(batch).argmax(1) == batch.labels).float().mean()
    assert acc > 0.9
