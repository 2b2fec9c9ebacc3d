"""``leaderboard.json``: the leaderboard as one versioned document, checked against
``leaderboard.schema.json`` (JSON Schema 2020-12, shipped in this package and written beside the
document) before it is written. The same inputs give the same bytes: sorted keys, sorted lists,
and no clock (the only times in it are the runs' own)."""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from importlib import resources
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from reports.leaderboard.entries import Entry
from reports.leaderboard.ranked import RANKED_METRICS, better, direction_text
from reports.leaderboard.ranking import Standing, rank_metric

if TYPE_CHECKING:
    from benchmark.bundle.sources import Source

SCHEMA_FILE = "leaderboard.schema.json"
#: 2: replications across labs (entries' replicates, per-source breakdown, between-lab check) and
#: each source's unreadable runs; 3: the difference to the leader's interval, the entry's interval's n,
#: each entry's method providers, and what "verified" covers (settings.verification); 4: the robustness
#: stage's scores ranked, each ranking's direction (``better``), each standing's ``rescored``
SCHEMA_VERSION = 4
#: what a verified source's rows were checked for, and what the leaderboard takes on trust
VERIFICATION_SCOPE = ("Verified: every file of a bundle against its SHA256SUMS, and every score re-computed from "
                      "the run's per-image, per-prototype and robustness records. Trusted: that training followed "
                      "the spec, the records themselves, and the devices the runs name.")
GUIDE = "docs/guides/leaderboard.md"


def schema() -> dict[str, Any]:
    return json.loads((resources.files("reports.leaderboard") / SCHEMA_FILE).read_text(encoding="utf-8"))


def schema_bytes() -> bytes:
    return (resources.files("reports.leaderboard") / SCHEMA_FILE).read_bytes()


def _version() -> str:
    try:
        return version("protobench")
    except PackageNotFoundError:
        return "unknown"


def _number(value: float | None) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def _standing(s: Standing) -> dict[str, Any]:
    return {"entry": s.entry, "mean": _number(s.mean), "std": _number(s.std), "n_seeds": s.n_seeds,
            "ci_low": None if s.ci is None else _number(s.ci[0]), "ci_high": None if s.ci is None else _number(s.ci[1]),
            "interval": s.interval, "ci_n": s.ci_n, "ci_images": s.ci_images, "rank": s.rank, "group": s.group,
            "difference_to_best": _number(s.difference),
            "difference_ci_low": None if s.difference_ci is None else _number(s.difference_ci[0]),
            "difference_ci_high": None if s.difference_ci is None else _number(s.difference_ci[1]),
            "p": _number(s.p), "p_holm": _number(s.p_holm), "test": s.test,
            "per_source": [{"source": x.source, "n_seeds": x.n_seeds, "mean": _number(x.mean),
                            "ci_low": None if x.ci is None else _number(x.ci[0]),
                            "ci_high": None if x.ci is None else _number(x.ci[1]), "interval": x.interval}
                           for x in s.per_source],
            "between_labs": None if s.between_labs is None else {
                k: _number(v) if isinstance(v, float) else v for k, v in s.between_labs.to_json().items()},
            "rescored": s.rescored}


def _entry(e: Entry) -> dict[str, Any]:
    runs = e.runs
    images = sorted({int(n) for n in runs["n_images"].dropna()})
    return {
        "id": e.id, "method": e.method, "display_name": e.display_name, "label": e.label, **e.aligned,
        "differs": e.differs,
        "seeds": sorted(int(s) for s in runs["seed"]),  # one per run read: a seed twice is two labs' replicates
        "replicates": sorted(({"source": str(src), "seed": int(seed), "run": f"{g}/{r}"} for src, seed, g, r in
                              zip(runs["source_name"], runs["seed"], runs["grid"], runs["run_id"])),
                             key=lambda x: (x["source"], x["seed"], x["run"])),
        "test_images": images,
        "rescored": bool(runs["rescored"].all()),
        "devices": sorted({str(d) for d in runs["device"].dropna()}),
        "code_versions": sorted({str(c) for c in runs["code_version"].dropna()}),
        "method_providers": [{"distribution": d or None, "version": v or None} for d, v in
                             sorted({(str(d), str(v)) for d, v in zip(runs["provider_distribution"],
                                                                       runs["provider_version"])})],
        "runs": sorted(f"{g}/{r}" for g, r in zip(runs["grid"], runs["run_id"])),
        "sources": e.sources,
        "verified": all(s["verification"] == "verified" for s in e.sources),
    }


def build_document(sources: Sequence["Source"], built: list[Entry], *, level: float, alpha: float) -> dict[str, Any]:
    """The leaderboard document (see the module) of the entries, ranked per board and metric."""
    runs_per_source: dict[str, int] = {}
    for entry in built:  # a run is in one entry: its sources' counts add up to each source's runs read
        for source in entry.sources:
            runs_per_source[source["name"]] = runs_per_source.get(source["name"], 0) + source["runs"]
    boards: dict[tuple[str, str, int], list[Entry]] = {}
    for entry in built:
        boards.setdefault(entry.board, []).append(entry)
    methods = sorted({e.method for e in built})
    board_records = []
    for key in sorted(boards):
        members = boards[key]
        rankings = [{"metric": metric, "better": better(metric), "standings": [_standing(s) for s in found]}
                    for metric in RANKED_METRICS
                    if (found := rank_metric(members, metric, level=level, alpha=alpha))]
        devices = sorted({str(d) for e in members for d in e.runs["device_type"].dropna()})
        present = {e.method for e in members}
        board_records.append({
            "id": f"{key[0]}/{key[1]}/J={key[2]}", "dataset": key[0], "backbone": key[1], "J": key[2],
            "entries": [_entry(e) for e in members],
            "rankings": rankings,
            "missing_methods": [m for m in methods if m not in present],
            "device_types": devices,
            "hardware_note": (f"entries ran on different kinds of device ({', '.join(devices)}): accuracy and the "
                              "explanation metrics do not depend on it beyond floating-point order; timings do"
                              if len(devices) > 1 else None),
        })
    return {
        "$schema": SCHEMA_FILE,
        "schema_version": SCHEMA_VERSION,
        "generator": {"name": "protobench", "version": _version()},
        "settings": {
            "level": level, "alpha": alpha, "metrics": list(RANKED_METRICS),
            "verification": VERIFICATION_SCOPE, "guide": GUIDE,
            "ranking": "entries ordered by mean over replicates, a replicate being one source's seed, best first "
                       f"({direction_text()}: each ranking's `better`); the leader and every entry whose "
                       "Holm-adjusted p against it (two-sided, on entry − leader, paired on (source, seed) "
                       f"replicates and test images, as `protobench compare`) is ≥ {alpha:g} share rank 1 (tied "
                       "with the best); others: 1 + entries with a better mean",
            "rescoring": "per-image metrics, con and the robustness stage's scores recomputed from each run's records "
                         "(per-image, per-prototype, robustness); a result that disagrees with its records is "
                         "refused; a score no record table holds is kept as reported (a standing's `rescored`: false)",
            "replication": "one run id in two sources with different content is an independent replication: its "
                           "own replicate (source, seed); byte-identical copies are one run; an entry of several "
                           "sources gets the between-lab check (one-way ANOVA F test of the source over its runs)",
        },
        "sources": [{"name": s.name, "kind": s.kind, "checksum": s.checksum, "verification": s.verification,
                     "runs": runs_per_source.get(s.name, 0),
                     "unreadable": [{"run": run, "reason": why} for run, why in s.unreadable]}
                    for s in sorted(sources, key=lambda s: s.name)],
        "methods": methods,
        "boards": board_records,
        "coverage": [{"method": m, "missing": [b["id"] for b in board_records if m in b["missing_methods"]]}
                     for m in methods],
    }


def check_document(document: dict[str, Any]) -> None:
    """Validate against the shipped schema (jsonschema), then what a schema cannot say: every
    standing names an entry of its board, once, and every ranking's direction is its metric's
    (ValueError names the first that does not). For a document this code built, a failure is a bug;
    for one read back (``site --leaderboard``), a crafted or damaged file."""
    import jsonschema

    jsonschema.Draft202012Validator(schema()).validate(document)
    for board in document["boards"]:
        ids = [e["id"] for e in board["entries"]]
        if len(set(ids)) != len(ids):
            raise ValueError(f"board {board['id']!r} lists entry {next(i for i in ids if ids.count(i) > 1)!r} twice")
        for ranking in board["rankings"]:
            if ranking["better"] != better(ranking["metric"]):
                raise ValueError(f"board {board['id']!r}, metric {ranking['metric']!r}: ranked {ranking['better']} is "
                                 f"better, but {better(ranking['metric'])} is")
            named = [s["entry"] for s in ranking["standings"]]
            unknown = next((e for e in named if e not in ids), None)
            if unknown is not None or len(set(named)) != len(named):
                raise ValueError(f"board {board['id']!r}, metric {ranking['metric']!r}: a standing names entry "
                                 f"{unknown or named[0]!r}, which the board does not hold once")


def document_bytes(document: dict[str, Any]) -> bytes:
    return (json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
