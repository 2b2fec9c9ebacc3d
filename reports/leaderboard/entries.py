"""The runs of every source (read by :mod:`.reading`) aligned into leaderboard entries.

**Alignment.** An entry is one setting of one method in one board (dataset × backbone × J): runs
pool into it when they agree on dataset, backbone, J, method, variant, the budget (default, or tuned
with its trials and epochs), the validation split's fingerprint, the metric code's fingerprint,
the test data's fingerprint and every other setting of the run (its resolved hyperparameters:
the pooling rule of ``report``). Runs of one board and method that differ in any of these are
separate entries, each naming what sets it apart (``differs``).

**Replicates.** An entry's replicate is a (source, seed): two labs' runs of one spec and seed are
two replicates (reading.py, "Replications"), one lab's two runs of one setting and seed are
refused. On a board every (source, seed) gets one integer, ``replicate``, so entries pair on
the same lab's same seed (reports/leaderboard/ranking.py).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from benchmark.errors import ProtobenchError
from reports.columns import flatten

if TYPE_CHECKING:
    from benchmark.bundle.sources import Source

#: the fields (besides the board and the method) an entry is aligned on, as the outputs name them
ALIGNED = ("variant", "budget", "validation_split", "metric_code", "test_data", "setting")


@dataclass
class Entry:
    """One method's setting in one board and the runs that pool into it."""

    board: tuple[str, str, int]  # dataset, backbone, J
    method: str
    display_name: str
    aligned: dict[str, str]  # ALIGNED → value
    runs: pd.DataFrame  # tidy rows (seed index not set), re-scored, one per (source, seed) replicate
    sources: list[dict[str, Any]] = field(default_factory=list)
    differs: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        key = json.dumps([*self.board, self.method, self.aligned], sort_keys=True)
        return hashlib.sha256(key.encode()).hexdigest()[:12]

    @property
    def label(self) -> str:
        variant = self.aligned["variant"]
        budget = self.aligned["budget"]
        return self.display_name + ("" if variant == "default" else f" ({variant})") + \
            ("" if budget == "default" else f" [{budget}]")


def digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _aligned(row: dict[str, Any]) -> dict[str, str]:
    return {"variant": str(row["variant"]), "budget": str(row["budget"]),
            "validation_split": str(row["validation_split"]), "metric_code": str(row["metric_code"]),
            "test_data": str(row["test_data"]), "setting": digest(row["setting"])}


def entries(frame: pd.DataFrame, sources: Sequence["Source"]) -> list[Entry]:
    """The entries of the runs (see the module), sorted by board, method and alignment; each names
    its sources with their checksum and verification."""
    opened = {s.name: s for s in sources}
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in frame.to_dict(orient="records"):
        aligned = _aligned(row)
        key = (str(row["dataset"]), str(row["backbone"]), int(row["J"]), str(row["method"]),
               json.dumps(aligned, sort_keys=True))
        groups.setdefault(key, []).append(row)
    built = []
    for key in sorted(groups):
        rows = sorted(groups[key], key=lambda r: (int(r["seed"]), str(r["source_name"])))
        units = [(str(r["source_name"]), int(r["seed"])) for r in rows]
        twice = next((unit for unit in units if units.count(unit) > 1), None)
        if twice is not None:
            names = ", ".join(f"{r['grid']}/{r['run_id']}" for r in rows
                              if (str(r["source_name"]), int(r["seed"])) == twice)
            raise ProtobenchError(f"source {twice[0]} has two runs of one setting with seed {twice[1]} ({names}); "
                                  "one lab's seed is one result: leave one of them out of that source")
        runs_of: dict[str, int] = {}
        for r in rows:
            for name in [r["source_name"], *r["also_in"]]:
                runs_of[name] = runs_of.get(name, 0) + 1
        built.append(Entry(board=key[:3], method=key[3], display_name=str(rows[0]["method_display_name"] or key[3]),
                           aligned=json.loads(key[4]), runs=pd.DataFrame.from_records(rows),
                           sources=[{"name": n, "runs": runs_of[n], "checksum": opened[n].checksum,
                                     "verification": opened[n].verification} for n in sorted(runs_of)]))
    _number_replicates(built)
    _name_differences(built)
    return built


def _number_replicates(built: list[Entry]) -> None:
    """Each run's ``replicate``: one integer per (source, seed) of its board, shared by every entry
    of the board, so two entries pair on one lab's one seed (never on one seed of two labs)."""
    boards: dict[tuple[str, str, int], list[Entry]] = {}
    for entry in built:
        boards.setdefault(entry.board, []).append(entry)
    for members in boards.values():
        units = sorted({(str(s), int(n)) for e in members for s, n in zip(e.runs["source_name"], e.runs["seed"])})
        code = {unit: k for k, unit in enumerate(units)}
        for entry in members:
            entry.runs["replicate"] = [code[(str(s), int(n))] for s, n in zip(entry.runs["source_name"],
                                                                               entry.runs["seed"])]


def replicate_runs(entry: Entry) -> pd.DataFrame:
    """The entry's runs with ``seed`` standing for the (source, seed) replicate (its board-wide
    integer), as the paired procedures of ``compare`` read them (reports/paired.py)."""
    return entry.runs.drop(columns=["seed"]).rename(columns={"replicate": "seed"})


def _name_differences(built: list[Entry]) -> None:
    """Each entry that shares its board and method with another gets the fields it differs in."""
    siblings: dict[tuple, list[Entry]] = {}
    for entry in built:
        siblings.setdefault((*entry.board, entry.method), []).append(entry)
    for group in siblings.values():
        if len(group) < 2:
            continue
        settings = [flatten(json.loads(str(e.runs["setting"].iloc[0]))) for e in group]
        for entry, setting in zip(group, settings):
            differs = [f"{name} {entry.aligned[name]}" for name in ALIGNED if name != "setting"
                       and any(other.aligned[name] != entry.aligned[name] for other in group)]
            keys = sorted({k for s in settings for k in s if any(o.get(k) != s.get(k) for o in settings)})
            differs += [f"{k} = {json.dumps(setting.get(k), sort_keys=True, default=str)}" for k in keys
                        if not k.startswith("tuned")]  # the budget names the tuning
            entry.differs = differs
