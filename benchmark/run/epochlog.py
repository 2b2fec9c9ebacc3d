"""Per-epoch records of a run: ``metrics.jsonl`` in its directory and, optionally, TensorBoard.

``metrics.jsonl`` holds one JSON object per trained epoch: ``epoch`` (1-based, global over
stages), ``stage``, ``seconds``, ``lr`` (param-group name → learning rate) and ``terms`` (loss
term → epoch mean). ``train`` reports an epoch before checkpointing it, so a run killed in
between trains that epoch again on resume: writing epoch ``e`` drops every line with epoch ≥ e,
which keeps exactly one line per epoch the checkpoint holds plus the one just trained.
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmark.errors import ProtobenchError
from benchmark.run.store import UnreadableRunFile, atomic_write_checked, parse_run_json

if TYPE_CHECKING:
    from benchmark.run.training import EpochRecord

TENSORBOARD_INSTALL = "pip install 'protobench[tensorboard]'"


def read_epoch_log(path: Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` (none when the file is absent)."""
    if not path.exists():
        return []
    records = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        try:
            record = parse_run_json(line, Path(f"{path}:{number}"))
        except UnreadableRunFile as err:
            raise ProtobenchError(f"{path}:{number} is not a JSON line ({err.why}); delete the file, the next "
                                  "epochs write it again") from None
        if not isinstance(record.get("epoch"), int):
            raise ProtobenchError(f"{path}:{number} is not an epoch record (no integer 'epoch'); delete the file")
        records.append(record)
    return records


class EpochLog:
    """Appends records to ``metrics.jsonl``, replacing any earlier line of the same or a later epoch.
    Each write replaces the file atomically, so a reader never sees half a line."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, record: EpochRecord) -> None:
        kept = [r for r in read_epoch_log(self.path) if r["epoch"] < record.epoch]
        lines = [json.dumps(r, sort_keys=True) for r in (*kept, asdict(record))]
        atomic_write_checked(self.path, ("\n".join(lines) + "\n").encode())


def summary_writer_class() -> type:
    """torch's TensorBoard ``SummaryWriter``, or one error saying how to install it."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as err:
        raise ProtobenchError(f"--tensorboard needs the tensorboard package: {TENSORBOARD_INSTALL}") from err
    return SummaryWriter


class TensorBoardLog:
    """The same records as TensorBoard scalars (``loss/TERM``, ``lr/GROUP``, ``time/epoch_seconds``,
    step = epoch) in ``log_dir``. Opened at the first record with ``purge_step`` = its epoch, so
    events of epochs trained again after a resume replace the earlier ones."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self._writer: Any = None

    def append(self, record: EpochRecord) -> None:
        if self._writer is None:
            self._writer = summary_writer_class()(log_dir=str(self.log_dir), purge_step=record.epoch)
        scalars = {**{f"loss/{k}": v for k, v in record.terms.items()},
                   **{f"lr/{k}": v for k, v in record.lr.items()}, "time/epoch_seconds": record.seconds}
        for tag, value in scalars.items():
            self._writer.add_scalar(tag, value, record.epoch)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def export_tensorboard(run_dirs: list[Path], out: Path) -> list[Path]:
    """The curves of runs (finished or not) from their ``metrics.jsonl`` as TensorBoard scalars
    under ``out/GRID/RUN_ID`` (the layout ``run --tensorboard`` writes live); a folder given
    stands for every run below it. Returns the event folders written. A folder written before is
    rewritten from the first epoch (``purge_step``), so exporting again adds no duplicates."""
    from benchmark.run.store import curve_files
    from benchmark.run.training import EpochRecord

    summary_writer_class()  # the missing package named before any file is read
    written = []
    for path in curve_files(run_dirs):
        records = read_epoch_log(path)
        if not records:
            continue
        run_dir = path.parent
        board = TensorBoardLog(out / run_dir.parent.name / run_dir.name)
        try:
            for record in records:
                board.append(EpochRecord(**{k: record[k] for k in ("epoch", "stage", "seconds", "lr", "terms")}))
        except (KeyError, TypeError) as err:
            raise ProtobenchError(f"{path} holds a record without epoch, stage, seconds, lr and terms ({err}); "
                                  "it was written by another version: run the run again to rewrite it") from err
        finally:
            board.close()
        written.append(board.log_dir)
    return written
