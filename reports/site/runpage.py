"""One page per run: its spec and resolved hyperparameters, provenance, metrics, training curves
(metrics.jsonl), per-image distributions (its per-image records) and the explanation gallery
where ``protobench figures RUN_DIR --out RUN_DIR/figures`` has drawn one."""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.errors import ProtobenchError
from benchmark.output_file import within
from benchmark.run.store import METRICS_FILE
from reports.curves import read_curve
from reports.load import read_result_json
from reports.per_image import read_run_records
from reports.site import plots
from reports.site.html import esc, figure, key_values, page, table

FIGURES_DIR = "figures"  # RUN_DIR/figures: where the gallery's PNGs are taken from
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class RunPage:
    name: str  # file name under runs/
    html: str
    images: dict[str, Path]  # file name under runs/ → the PNG to copy


def page_name(grid: object, run_id: object, taken: set[str]) -> str:
    """``<grid>-<run_id>.html`` with anything but letters, digits, ``_.-`` replaced; unique in ``taken``."""
    stem = _UNSAFE.sub("_", f"{grid}-{run_id}").strip("._") or "run"
    name, n = f"{stem}.html", 1
    while name in taken:
        n += 1
        name = f"{stem}-{n}.html"
    taken.add(name)
    return name


def _flat(prefix: str, value: Any) -> list[tuple[str, object]]:
    if isinstance(value, Mapping):
        return [pair for k, v in sorted(value.items()) for pair in _flat(f"{prefix}.{k}" if prefix else str(k), v)]
    return [(prefix, value)]


def _curves(run_dir: Path) -> str:
    path = run_dir / METRICS_FILE
    if not path.is_file():
        return "<p>No training curves: the run has no metrics.jsonl.</p>"
    try:
        curve = read_curve(path)
    except ProtobenchError as err:
        return f"<p>No training curves: {esc(err)}</p>"
    return figure("curves", plots.curves(curve.stages, curve.values), "Loss terms, learning rates per epoch")


def _distributions(run_dir: Path) -> str:
    try:
        records = read_run_records(str(run_dir))  # the statistics of the other pages draw on this read
    except ProtobenchError as err:
        return f"<p>No per-image records: {esc(err)}</p>"
    if records is None:
        return "<p>No per-image records (`protobench evaluate RUN_DIR` writes them).</p>"
    numeric = [c for c in records.columns if c not in ("index", "label", "predicted", "correct")
               and records[c].dtype.kind in "fiu"]
    accuracy = 100.0 * records["correct"].astype(float).mean() if "correct" in records else float("nan")
    return (f"<p>{len(records)} test image(s); accuracy over them {accuracy:.2f} %.</p>"
            + figure("per-image", plots.distributions(records, numeric), "Per-image parts of each metric"))


def _gallery(run_dir: Path, stem: str) -> tuple[str, dict[str, Path]]:
    pngs = sorted(p for p in (run_dir / FIGURES_DIR).glob("*.png") if within(p, run_dir)) \
        if (run_dir / FIGURES_DIR).is_dir() else []  # a link out of the run is never copied
    if not pngs:
        return ("<p>No explanation gallery yet: <code>protobench figures " + esc(run_dir) + " --out "
                + esc(run_dir / FIGURES_DIR) + "</code> draws the \u201cthis looks like that\u201d panels of a few "
                "test images (with each shown prototype's nearest training patch), and the next "
                "<code>protobench site</code> shows them here. (Top-k training patches per prototype are not "
                "drawn by the suite yet.)</p>"), {}
    images = {f"{stem}.{FIGURES_DIR}.{_UNSAFE.sub('_', p.name)}": p for p in pngs}
    body = "".join(f'<figure><img src="{esc(name)}" alt="{esc(p.stem)}"><figcaption>{esc(p.name)}</figcaption>'
                   "</figure>" for name, p in images.items())
    return f'<div class="gallery">{body}</div>', images


def run_page(source: Path, name: str, *, stale: object, label: str) -> RunPage:
    """The page of the run whose result.json is ``source``."""
    result = read_result_json(source)
    run_dir = source.parent
    spec = result.get("spec") if isinstance(result.get("spec"), dict) else {}
    stale_note = f'<p class="stale">Stale result: {esc(stale)}</p>' if isinstance(stale, str) else ""
    gallery, images = _gallery(run_dir, name.removesuffix(".html"))
    metrics = sorted((result.get("metrics") or {}).items()) if isinstance(result.get("metrics"), dict) else []
    timing = _flat("timing", result.get("timing")) if isinstance(result.get("timing"), dict) else []
    body = "\n".join([
        stale_note,
        f'<p>Run <code>{esc(result.get("grid"))}/{esc(result.get("run_id"))}</code> · '
        f'<a href="{esc(name.removesuffix(".html"))}.result.json">result.json</a></p>',
        "<h2>Metrics</h2>", table(("metric", "value"), metrics + timing),
        "<h2>Per-image distributions</h2>", _distributions(run_dir),
        "<h2>Training curves</h2>", _curves(run_dir),
        "<h2>Explanation gallery</h2>", gallery,
        "<h2>Spec</h2>", key_values(_flat("", spec)),
        "<h2>Resolved hyperparameters</h2>", key_values(_flat("", result.get("method_hyperparameters") or {})),
        "<h2>Provenance</h2>", key_values(_flat("", result.get("provenance") or {})),
    ])
    nav = (("index.html", "Overview"), ("runs.html", "All runs"))
    return RunPage(name=name, html=page(label, body, depth=1, plots=True, nav=nav), images=images)
