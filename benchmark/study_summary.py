"""Reading a tuning study's ``summary.json`` (written by ``protobench tune``, read by ``report
--tuning`` and ``run --hyperparameters tuned``): parsed safely (benchmark.run.store.load_json:
UTF-8, bounded integers and nesting), its fields checked, and its study the one whose folder and
journal it lies beside; anything else is one error naming the file and the fix."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmark.errors import ProtobenchError
from benchmark.run.store import UnreadableRunFile, load_json

SUMMARY_FILE = "summary.json"
JOURNAL_FILE = "journal.log"
#: field → the type it must have (cell and budget checked field by field below)
_FIELDS: dict[str, type | tuple[type, ...]] = {"study": str, "cell": dict, "budget": dict, "complete": int,
                                               "sampler": str, "objectives": list}
_CELL: dict[str, type] = {"dataset": str, "backbone": str, "method": str, "J": int, "variant": str}
_BUDGET: dict[str, type] = {"trials": int, "epochs_per_trial": int}


def _fix(path: Path) -> str:
    return f"run `protobench tune` of its grid again to rewrite it, or delete {path.parent} to start that study over"


def read_study_summary(path: Path) -> dict[str, Any]:
    """The summary at ``path`` (``RUNS/GRID.tuning/STUDY/summary.json``), checked (see the module)."""
    try:
        data = load_json(path)
    except UnreadableRunFile as err:
        raise ProtobenchError(f"{path} is unreadable: {err.why}; {_fix(path)}") from None
    if data is None:
        raise ProtobenchError(f"{path} does not exist; {_fix(path)}")
    for key, kind in _FIELDS.items():
        if not isinstance(data.get(key), kind) or isinstance(data.get(key), bool):
            raise ProtobenchError(f"{path} has no valid {key!r} (a study summary holds study, cell, budget, complete, "
                                  f"sampler and objectives); {_fix(path)}")
    for section, fields in (("cell", _CELL), ("budget", _BUDGET)):
        for key, kind in fields.items():
            value = data[section].get(key)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ProtobenchError(f"{path}: {section}.{key} = {value!r} is not a {kind.__name__}; {_fix(path)}")
    if data["study"] != path.parent.name:
        raise ProtobenchError(f"{path} names study {data['study']!r}, but it lies in the folder of study "
                              f"{path.parent.name!r}; {_fix(path)}")
    if not (path.parent / JOURNAL_FILE).is_file():
        raise ProtobenchError(f"{path} has no {JOURNAL_FILE} beside it: its study is not recorded; {_fix(path)}")
    return data
