"""``protobench export``: one flat row per finished run, for pandas, W&B or a spreadsheet.

Every ``result.json`` becomes one record with dotted column names: ``spec.*`` (every RunSpec
field, ``spec.method_args.*`` included), ``metrics.*``, ``diagnostics.*`` (when present),
``timing.*``, ``evaluation.*``, ``provenance.*``, ``method_hyperparameters.*`` (the values the
method ran with, defaults included), ``method_fingerprint``, plus ``run_id``, ``grid``,
``method_display_name``, ``run_dir`` and ``stale`` (why the result is stale; empty: current). An empty mapping stays one column holding ``{}``
(so a spec field never vanishes); lists stay lists in JSON Lines and are JSON text in CSV
and Parquet cells.

``--per-image``: one row per run × test image instead: the run's identity (``run_id``, ``grid``,
``run_dir``, ``method_display_name``, ``dataset``, ``backbone``, ``method``, ``J``, ``variant``,
``seed``) and its per-image record (``benchmark.run.records``; missing values empty/null).
"""
from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from benchmark.errors import ProtobenchError
from benchmark.run.records import read_records
from benchmark.csv_cells import frame_csv
from benchmark.output_file import write_output
from reports.columns import flatten
from reports.layouts import display_name
from reports.load import read_result_json, result_files

if TYPE_CHECKING:
    import pandas as pd

#: columns first in every export, in this order; the rest follow in first-seen order
LEADING_COLUMNS: tuple[str, ...] = ("run_id", "grid", "run_dir", "method_display_name", "stale")
FORMATS: tuple[str, ...] = (".csv", ".jsonl", ".parquet")
PARQUET_EXTRA = "pip install 'protobench[parquet]' (or pip install pyarrow)"

Record = dict[str, object]


def export_records(frame: pd.DataFrame) -> list[Record]:
    """One flat record per result row of ``frame`` (``reports.load.load_runs(..., csv=False)``:
    discovery order, the pooling rule of every reader holds), with ``stale`` as the command that
    loaded it filled it (why the result is stale; None: current or not checked)."""
    records = []
    for source, stale, label in zip(frame["source"], frame["stale"], frame["method_display_name"]):
        path = Path(source)
        flat = flatten(read_result_json(path))
        flat["run_dir"] = str(path.parent)
        flat["stale"] = stale
        flat["method_display_name"] = label  # as every reader shows it
        records.append(flat)
    return records


#: the spec fields that name a run's cell and seed in a per-image export, and their column names
PER_IMAGE_SPEC: dict[str, str] = {"dataset": "dataset", "backbone": "backbone", "method": "method",
                                  "prototypes_per_class": "J", "variant": "variant", "seed": "seed"}


def per_image_records(runs_dirs: Iterable[str | Path],
                      judge: Callable[[dict[str, object], Path], str | None] | None = None) -> list[Record]:
    """One record per run × test image: the run's identity (which no record column can override:
    the records' schema has none, benchmark/run/record_schema.py), its ``stale`` verdict by
    ``judge`` (the command's :func:`benchmark.run.identity.result_judge`; None: not checked) and
    its per-image record. Raises before writing when a run has no per-image records, naming the
    runs and the command that writes them, or when a run's records break their schema."""
    records: list[Record] = []
    without: list[str] = []
    for path in result_files(runs_dirs):
        table = read_records(path.parent)
        if table is None:
            without.append(str(path.parent))
            continue
        ids = table["image"].astype(str)
        if ids.duplicated().any():  # as compare refuses them (reports.per_image.seed_values)
            raise ProtobenchError(f"{path.parent}: its per-image records list image {ids[ids.duplicated()].iloc[0]!r} "
                                  "twice; run `protobench evaluate RUN_DIR` to write them again, or leave that run out")
        data = read_result_json(path)
        spec = data.get("spec") if isinstance(data.get("spec"), dict) else {}
        recorded = data.get("method_display_name")
        identity: Record = {"run_id": data.get("run_id"), "grid": data.get("grid"), "run_dir": str(path.parent),
                            "method_display_name": display_name(str(spec.get("method")),
                                                                recorded if isinstance(recorded, str) else None),
                            "stale": judge(data, path.parent) if judge is not None else None}
        identity.update({column: spec.get(field) for field, column in PER_IMAGE_SPEC.items()})
        cells = table.astype(object).where(table.notna(), None)
        records.extend({**identity, **{k: v for k, v in row.items() if k not in identity}}  # never overridden
                       for row in cells.to_dict(orient="records"))
    if without:
        raise ProtobenchError(
            f"{len(without)} run(s) have no per-image records (evaluated before they existed): "
            f"{', '.join(without[:5])}{' …' if len(without) > 5 else ''}; run `protobench evaluate RUN_DIR` on each "
            "to write them, or leave those runs out.")
    return records


def columns_of(records: Iterable[Record]) -> list[str]:
    """The union of the records' keys: LEADING_COLUMNS, then each other key where first seen."""
    seen: dict[str, None] = dict.fromkeys(LEADING_COLUMNS)
    for record in records:
        seen.update(dict.fromkeys(record))
    return list(seen)


def check_export_path(out: Path) -> None:
    """Reject an unknown suffix, or .parquet without pyarrow, before anything is read."""
    if out.suffix not in FORMATS:
        raise ProtobenchError(
            f"Cannot export to {out}: unknown file type {out.suffix or '(none)'!r}; "
            f"end the name with {', '.join(FORMATS)}."
        )
    if out.suffix == ".parquet" and importlib.util.find_spec("pyarrow") is None:
        raise ProtobenchError(f"Writing {out} needs pyarrow, which is not installed: {PARQUET_EXTRA}.")


def write_export(records: list[Record], out: Path) -> None:
    """Write ``records`` to ``out`` (format from the suffix), atomically: no partial file is left."""
    check_export_path(out)
    columns = columns_of(records)
    if out.suffix == ".jsonl":
        lines = (json.dumps({c: record.get(c) for c in columns}) for record in records)
        data = "".join(line + "\n" for line in lines).encode("utf-8")
    else:
        import pandas as pd

        frame = pd.DataFrame.from_records([_cells(record) for record in records], columns=columns)
        data = (frame_csv(frame).encode("utf-8") if out.suffix == ".csv"  # no formula cell
                else frame.to_parquet(index=False))
    write_output(out, data)


def _cells(record: Record) -> Record:
    """Lists and ``{}`` as JSON text: CSV and Parquet cells hold scalars."""
    return {k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in record.items()}
