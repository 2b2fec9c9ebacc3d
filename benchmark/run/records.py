"""Per-image and per-prototype records of one evaluation, stored beside ``result.json``.

``per_image``: one row per test image: ``index`` (position in the test split), ``image`` (path
below the dataset root), ``label``, ``predicted``, ``correct``, ``margin`` (true-class logit
minus the largest other logit: > 0 iff correct, ties aside) and, where defined, the image's
part of each explanation metric that is a mean over images (``sta``, ``dis``, ``comp``: see
:class:`metrics.ExplanationRecords`). ``per_prototype``: one row per (``class``, ``prototype``)
with ``con`` and ``sta``. The tables are built by ``benchmark.run.evaluation.record_tables``;
this module only stores and reads them (pandas only: the reports read them without torch).

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

from benchmark.csv_cells import frame_csv, restore_frame
from benchmark.errors import ProtobenchError
from benchmark.run.record_schema import check_records, rewrite_command
from benchmark.run.store import RECORD_SUFFIXES, RESULT_FILE, atomic_write_checked, read_json


def _encode(frame: pd.DataFrame, suffix: str) -> bytes:
    if suffix == ".parquet":
        return frame.to_parquet(index=False)
    buffer = io.BytesIO()
    frame_csv(frame, path_or_buf=buffer, compression={"method": "gzip", "mtime": 0})
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
    """The run's ``table`` (``per_image`` or ``per_prototype``), checked against its schema
    (benchmark/run/record_schema.py: a crafted file is refused, naming row and column), or None
    when the run has none (a run evaluated before records existed: ``protobench evaluate
    RUN_DIR`` writes them)."""
    for suffix in RECORD_SUFFIXES:
        path = Path(run_dir) / f"{table}{suffix}"
        if not path.exists():
            continue
        if suffix == ".parquet" and importlib.util.find_spec("pyarrow") is None:
            raise ProtobenchError(f"reading {path} needs pyarrow, which is not installed: pip install pyarrow")
        try:
            frame = pd.read_parquet(path) if suffix == ".parquet" else \
                restore_frame(pd.read_csv(path, compression="gzip", keep_default_na=False, na_values=[""]))
        except (OSError, ValueError, EOFError) as err:
            raise ProtobenchError(f"{path} is unreadable ({err}); run `{rewrite_command(table, str(run_dir))}` to "
                                  "write it again") from err
        evaluation = (read_json(Path(run_dir) / RESULT_FILE) or {}).get("evaluation")
        num_images = evaluation.get("num_images") if isinstance(evaluation, dict) else None
        return check_records(frame, table, path, num_images if isinstance(num_images, int) else None)
    return None
