"""``protobench leaderboard SOURCE... --out DIR``: read every source (already opened and verified:
benchmark/bundle/sources.py), re-score and align its runs, rank them, and write the folder:

- ``leaderboard.json`` and ``leaderboard.schema.json`` (reports/leaderboard/document.py);
- ``leaderboard.csv``, ``leaderboard.md``, ``leaderboard.tex`` (reports/leaderboard/tables.py);
- ``index.html`` and ``assets/`` (reports/leaderboard/page.py);
- ``eval.yaml`` (reports/leaderboard/hub.py).

The folder is written as the results site is (reports/site/writer.py): built beside ``--out``
after every source was read, then renamed into place; an ``--out`` holding files protobench did
not write is refused before anything is read, so a refusal or a failure leaves nothing half-written
and deletes nothing."""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from benchmark.errors import ProtobenchError
from reports.leaderboard.document import SCHEMA_FILE, build_document, check_document, document_bytes, schema_bytes
from reports.leaderboard.entries import entries
from reports.leaderboard.reading import Unreadable, read_all
from reports.leaderboard.hub import eval_yaml
from reports.leaderboard.page import assets, leaderboard_page
from reports.leaderboard.tables import render_csv, render_latex, render_markdown
from reports.site.writer import check_out, replace_site

if TYPE_CHECKING:
    from benchmark.bundle.sources import Source

DOCUMENT_FILE = "leaderboard.json"


@dataclass(frozen=True)
class Built:
    boards: int
    entries: int
    runs: int


def check_target(out: Path, inputs: Sequence[Path]) -> None:
    """Refuse an ``--out`` that cannot be written or may not be replaced, before any work."""
    check_out(out, inputs)
    parent = out.parent.resolve()
    existing = next((p for p in (parent, *parent.parents) if p.exists()), None)
    if existing is None or not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise ProtobenchError(f"--out {out} cannot be written ({existing} is not a folder you can write to); "
                              "choose another --out")


def marked(source: "Source", failed: list[Unreadable]) -> "Source":
    """``source`` with the runs that could not be read named; a verified one (listed only under
    --allow-unverified: reading.py refuses it otherwise) is then unverified."""
    if not failed:
        return source
    first = failed[0]
    verification = (f"UNVERIFIED: {len(failed)} run(s) cannot be read (first {first.run}: {first.reason})"
                    if source.verified else source.verification)
    return replace(source, verification=verification, unreadable=tuple((f.run, f.reason) for f in failed))


def build_leaderboard(sources: Sequence["Source"], out: Path, *, level: float = 0.95, alpha: float = 0.05,
                      allow_unverified: bool = False) -> tuple[Built, list["Source"]]:
    """Write the leaderboard of ``sources`` to ``out`` (see the module); the sources as listed
    (each with the runs that could not be read, if any)."""
    if not 0 < level < 1 or not 0 < alpha < 1:
        raise ProtobenchError(f"--level {level} and --alpha {alpha} must lie strictly between 0 and 1")
    frame, failed = read_all(sources, allow_unverified=allow_unverified)
    sources = [marked(s, failed[s.name]) for s in sources]
    built = entries(frame, sources)
    document = build_document(sources, built, level=level, alpha=alpha)
    check_document(document)
    files = {DOCUMENT_FILE: document_bytes(document), SCHEMA_FILE: schema_bytes(),
             "leaderboard.csv": render_csv(document).encode("utf-8"),
             "leaderboard.md": render_markdown(document).encode("utf-8"),
             "leaderboard.tex": render_latex(document).encode("utf-8"),
             "index.html": leaderboard_page(document).encode("utf-8"),
             "eval.yaml": eval_yaml(document), **assets()}
    replace_site(out, files)
    return Built(boards=len(document["boards"]), entries=len(built), runs=len(frame)), sources
