"""Per-image and per-prototype records of one evaluation, stored beside ``result.json``.

``per_image``: one row per test image: ``index`` (position in the test split), ``image`` (path
below the dataset root), ``label``, ``predicted``, ``correct``, ``margin`` (true-class logit
minus the largest other logit: > 0 iff correct, ties aside) and, where defined, the image's
part of each explanation metric that is a mean over images (``sta``, ``dis``, ``comp``: see
:class:`metrics.ExplanationRecords`). ``per_prototype``: one row per (``class``, ``prototype``)
with ``con`` and ``sta``.

Stored as Parquet when pyarrow is installed, else as gzip CSV (plain text: reading either
executes no code). Written before ``result.json``, each atomically: a run killed in between
has no ``result.json`` and is evaluated again, so a complete run's records are its result's.
"""
from __future__ import annotations

import importlib.util
import io
from collections.abc import Mapping
from pathlib import Path

import pandas as pd
import torch

from benchmark.data import ImageDataset
from benchmark.errors import ProtobenchError
from benchmark.run.store import RECORD_SUFFIXES, atomic_write_checked
from metrics import ExplanationRecords



def logit_margins(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(N,) ``logits[i, y_i] - max_{c != y_i} logits[i, c]`` (float64; +inf with one class)."""
    logits = logits.double()
    own = logits.gather(1, labels[:, None]).squeeze(1)
    others = logits.scatter(1, labels[:, None], float("-inf")).amax(dim=1)
    return own - others


def record_tables(dataset: ImageDataset, logits: torch.Tensor, labels: torch.Tensor,
                  explained: ExplanationRecords | None) -> dict[str, pd.DataFrame]:
    """The ``per_image`` (and, with explanation metrics, ``per_prototype``) tables of one evaluation."""
    predicted = logits.argmax(dim=1)  # metrics.accuracy: the first maximal logit
    per_image = pd.DataFrame({
        "index": range(len(labels)),
        "image": [str(Path(p).relative_to(dataset.root)) if Path(p).is_relative_to(dataset.root) else str(p)
                  for p in dataset.image_paths],
        "label": labels.numpy(),
        "predicted": predicted.numpy(),
        "correct": (predicted == labels).numpy(),
        "margin": logit_margins(logits, labels).numpy(),
    })
    tables = {"per_image": per_image}
    if explained is not None:
        for name, values in explained.per_image.items():
            per_image[name] = values.cpu().numpy()
        if explained.per_prototype:
            c, j = next(iter(explained.per_prototype.values())).shape
            per_prototype = pd.DataFrame({"class": torch.arange(c).repeat_interleave(j).numpy(),
                                          "prototype": torch.arange(j).repeat(c).numpy()})
            for name, values in explained.per_prototype.items():
                per_prototype[name] = values.cpu().reshape(-1).numpy()
            tables["per_prototype"] = per_prototype
    return tables


def _encode(frame: pd.DataFrame, suffix: str) -> bytes:
    if suffix == ".parquet":
        return frame.to_parquet(index=False)
    buffer = io.BytesIO()
    frame.to_csv(buffer, index=False, lineterminator="\n", compression={"method": "gzip", "mtime": 0})
    return buffer.getvalue()


def write_records(run_dir: Path, tables: Mapping[str, pd.DataFrame]) -> list[Path]:
    """Write each table atomically into ``run_dir`` (Parquet with pyarrow, else gzip CSV),
    removing that table's file of the other format; the paths written."""
    suffix = RECORD_SUFFIXES[0] if importlib.util.find_spec("pyarrow") is not None else RECORD_SUFFIXES[1]
    written = []
    for table, frame in tables.items():
        path = run_dir / f"{table}{suffix}"
        atomic_write_checked(path, _encode(frame, suffix))
        for other in RECORD_SUFFIXES:
            if other != suffix:
                (run_dir / f"{table}{other}").unlink(missing_ok=True)
        written.append(path)
    return written


def read_records(run_dir: Path, table: str = "per_image") -> pd.DataFrame | None:
    """The run's ``table`` (``per_image`` or ``per_prototype``), or None when the run has none
    (a run evaluated before records existed: ``protobench evaluate RUN_DIR`` writes them)."""
    for suffix in RECORD_SUFFIXES:
        path = Path(run_dir) / f"{table}{suffix}"
        if not path.exists():
            continue
        if suffix == ".parquet" and importlib.util.find_spec("pyarrow") is None:
            raise ProtobenchError(f"reading {path} needs pyarrow, which is not installed: pip install pyarrow")
        try:
            return pd.read_parquet(path) if suffix == ".parquet" else pd.read_csv(path, compression="gzip")
        except (OSError, ValueError, EOFError) as err:
            raise ProtobenchError(f"{path} is unreadable ({err}); run `protobench evaluate {run_dir}` to write "
                                  "it again") from err
    return None
