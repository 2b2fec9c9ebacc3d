"""``protobench site``: write the whole site from the tidy frame (``reports.load.load_runs``, stale
flags filled by the command): ``index.html`` (overview, plots, downloads), ``runs.html`` and one
page per run under ``runs/``, ``compare-<key>.html`` per compared key, ``agreement.html`` (whether the
metrics agree), ``reference.html`` (with a reference row: each method's gap to it), and ``assets/`` (plotly.js,
the site's own script and style). Every page but the index is a pure function of the results;
the index differs between two builds only in its build timestamp."""
from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pandas as pd

from benchmark.errors import ProtobenchError
from benchmark.output_file import within
from reports.columns import KEY_COLUMNS
from reports.pivot import METRICS, display_names
from reports.site import plots
from reports.site.agreementpage import AGREEMENT_CSV, AGREEMENT_PAGE, agreement_page
from reports.leaderboard.page import leaderboard_page
from reports.site.comparepage import compare_page
from reports.site.html import PLOTLY_JS, SITE_CSS, SITE_JS, esc, figure, page, table
from reports.site.overview import COLUMNS, FILTERED, downloads, overview
from reports.site.referencepage import reference_page
from reports.site.robustnesspage import ROBUSTNESS_PAGE, robustness_page
from reports.site.runpage import page_name, run_page
from reports.site.writer import check_out, replace_site

LEADERBOARD_PAGE = "leaderboard.html"
MAX_LEADERBOARD_BYTES = 64 << 20


def read_leaderboard(folder: Path) -> dict:
    """A leaderboard folder's ``leaderboard.json``, checked against the shipped schema (a crafted
    file is refused, never rendered)."""
    import json

    import jsonschema

    from reports.leaderboard.build import DOCUMENT_FILE
    from reports.leaderboard.document import check_document

    path = folder / DOCUMENT_FILE
    if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_LEADERBOARD_BYTES:
        raise ProtobenchError(f"--leaderboard {folder} holds no {DOCUMENT_FILE} (a regular file under "
                              f"{MAX_LEADERBOARD_BYTES >> 20} MiB); build one with `protobench leaderboard SOURCE... "
                              "--out DIR`")
    try:
        document = json.loads(path.read_bytes())
        check_document(document)
    except (ValueError, RecursionError, jsonschema.ValidationError) as err:
        raise ProtobenchError(f"{path} is not a leaderboard this protobench reads ({str(err).splitlines()[0]}); "
                              "rebuild it with `protobench leaderboard`") from None
    return document

PLOTTED = ("acc", "con", "sta", "dis", "comp")
DEFAULT_COMPARED = ("method", "J")  # comparison pages without --compare: those of these keys that vary


@dataclass(frozen=True)
class BuiltSite:
    pages: int
    bytes: int
    files: int


def _version() -> str:
    try:
        return version("protobench")
    except PackageNotFoundError:
        return "(not installed)"


def _filters(rows: pd.DataFrame) -> str:
    menus = []
    for name in FILTERED:
        index = COLUMNS.index(name)
        values = sorted({str(v) for v in rows[name]}, key=lambda v: (len(v), v) if name == "J" else (0, v))
        options = '<option value="">all</option>' + "".join(f'<option value="{esc(v)}">{esc(v)}</option>'
                                                             for v in values)
        menus.append(f'<label>{esc(name)} <select data-table="overview" data-column="{index}" '
                     f'id="filter-{esc(name)}">{options}</select></label>')
    return f'<div class="filters">{"".join(menus)}</div>'


def _index(frame: pd.DataFrame, compared: Sequence[str], built: str,
           reference: str | None, leaderboard: bool = False) -> tuple[str, dict[str, bytes]]:
    view = overview(frame)
    files = downloads(view)
    shown = view.rows.assign(mean=view.rows["mean"].round(2), std=view.rows["std"].round(2),
                             ci_low=view.rows["ci_low"].round(2), ci_high=view.rows["ci_high"].round(2))
    figures = [f for m in PLOTTED if m in frame and (spec := plots.metric_vs_j(frame, m)) is not None
               for f in [figure(f"vs-j-{m}", spec, f"{METRICS[m].header.md} against J; hover for n")]]
    trade = plots.trade_off(frame)
    cd, cd_note = plots.cd_ranks(frame)
    stale = int(sum(isinstance(s, str) for s in frame["stale"]))
    body = "\n".join([
        f"<p>{len(frame)} result(s) of {frame['method'].nunique()} method(s) on "
        f"{frame['dataset'].nunique()} dataset(s); {stale} stale (flagged in the table). Cells: mean over seeds, "
        f"std, 95% interval with its procedure and n (over seeds; accuracy of one seed: over its seeds × test "
        "images, reports/crossed.py), n seeds; mark: best = "
        "significantly better than the runner-up, ≈ = not significantly different from the best (paired tests, "
        "Holm, α = 0.05, as <code>protobench report --ci --significance</code>).</p>",
        "<p>Download: " + " · ".join(f'<a href="{esc(n)}">{esc(n)}</a>' for n in sorted(files)) + "</p>",
        "<p>" + " · ".join([f'<a href="runs.html">All {len(frame)} runs</a>',
                            *(f'<a href="compare-{esc(k)}.html">Comparisons of {esc(k)}</a>' for k in compared),
                            f'<a href="{AGREEMENT_PAGE}">Whether the metrics agree</a>',
                            f'<a href="{ROBUSTNESS_PAGE}">What the prototypes respond to</a>',
                            *([f'<a href="reference.html">Gaps to {esc(reference)}</a>'] if reference else []),
                            *([f'<a href="{LEADERBOARD_PAGE}">Leaderboard</a>'] if leaderboard else [])])
        + "</p>",
        "<h2>Overview</h2>", _filters(shown),
        f'<p><span id="overview-count">{len(shown)}</span> of {len(shown)} cell(s) shown; click a header to sort.</p>',
        table(COLUMNS, shown.itertuples(index=False), table_id="overview", sortable=True),
        "<h2>Metrics against J</h2>", *figures,
        "<h2>Accuracy–explanation trade-off</h2>",
        figure("trade-off", trade, "Acc. against Con. per cell") if trade else "<p>No result has both acc and con.</p>",
        "<h2>Critical-difference ranks (accuracy)</h2>",
        (figure("cd", cd, "Mean ranks of the methods") if cd else "") + f"<p>{esc(cd_note)}</p>",
    ])
    footer = f"Built {esc(built)} by protobench {esc(_version())}."
    nav = (("index.html", "Overview"), ("runs.html", "All runs"))
    return page("protobench results", body, depth=0, plots=True, nav=nav, footer=footer), files


def build_site(frame: pd.DataFrame, out: Path, *, compare_keys: Sequence[str] | None = None,
               built: str | None = None, inputs: Sequence[Path] = (), reference: str | None = None,
               leaderboard: Path | None = None) -> BuiltSite:
    """Write the site of ``frame`` to ``out``; ``built``: the footer's timestamp (default: now, UTC);
    ``reference``: a method whose row every other method's gap is shown against (``reference.html``);
    ``inputs``: the runs folders it was read from, which ``out`` may neither be, hold nor lie in
    (reports/site/writer.py: nothing the suite did not write is ever deleted); ``leaderboard``: a
    ``protobench leaderboard`` folder whose page the site gets (``leaderboard.html``)."""
    import plotly.offline

    if frame["source"].astype(str).str.endswith(".csv").any() or frame["run_dir"].isna().any():
        raise ProtobenchError("the site shows runs (result.json files); leave the CSV files out of RUNS_DIR")
    unknown = [k for k in compare_keys or () if k not in KEY_COLUMNS]
    if unknown:
        raise ProtobenchError(f"--compare {', '.join(unknown)}: compare along one of {', '.join(KEY_COLUMNS)}")
    compared = (list(dict.fromkeys(compare_keys)) if compare_keys
                else [key for key in DEFAULT_COMPARED if frame[key].nunique() > 1])
    check_out(out, [*inputs, *{Path(str(d)) for d in frame["run_dir"]}])
    if reference is not None:  # a reference not in the runs: one error before anything is computed
        from reports.reference import check_reference

        check_reference(frame, reference)
    board = read_leaderboard(leaderboard) if leaderboard is not None else None
    built = built or dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    files: dict[str, bytes] = {}
    assets = resources.files("reports.site") / "assets"
    files[f"assets/{PLOTLY_JS}"] = plotly.offline.get_plotlyjs().encode("utf-8")
    files[f"assets/{SITE_JS}"] = (assets / SITE_JS).read_bytes()
    files[f"assets/{SITE_CSS}"] = (assets / SITE_CSS).read_bytes()
    names = display_names(frame)
    taken: set[str] = set()
    listing = []
    for row in frame.sort_values("source").itertuples(index=False):
        name = page_name(row.grid, row.run_id, taken)
        method = names.get(str(row.method), str(row.method))
        label = f"{method} · {row.dataset} · {row.backbone} · J={row.J} · {row.variant} · seed {row.seed}"
        run = run_page(Path(row.source), name, stale=row.stale, label=label)
        files[f"runs/{name}"] = run.html.encode("utf-8")
        if not within(Path(row.source), Path(row.source).parent):
            raise ProtobenchError(f"{row.source} is a link out of its run folder; the site copies no file from "
                                  "outside the runs it shows: replace the link with the file")
        files[f"runs/{name.removesuffix('.html')}.result.json"] = Path(row.source).read_bytes()
        files.update({f"runs/{n}": p.read_bytes() for n, p in run.images.items()})
        link = f'<a href="runs/{esc(name)}">{esc(row.grid)}/{esc(row.run_id)}</a>'
        listing.append((link, method, row.dataset, row.backbone, row.J, row.variant, row.seed, row.acc,
                        "stale" if isinstance(row.stale, str) else ""))
    runs_table = table(("run", "method", "dataset", "backbone", "J", "variant", "seed", "acc", "stale"), listing,
                       table_id="runs", sortable=True, raw_columns=frozenset({0}))
    nav = (("index.html", "Overview"), ("runs.html", "All runs"))
    files["runs.html"] = page(f"All {len(listing)} runs", runs_table, depth=0, plots=False, nav=nav).encode("utf-8")
    # the run pages read every run's records once; the pages below test on those values (reports.per_image)
    index, downloaded = _index(frame, compared, built, reference, leaderboard=board is not None)
    files["index.html"] = index.encode("utf-8")
    files.update(downloaded)
    for key in compared:
        html, csv = compare_page(frame, key)
        files[f"compare-{key}.html"] = html.encode("utf-8")
        if csv is not None:
            files[f"compare-{key}.csv"] = csv
    html, csv = agreement_page(frame)
    files[AGREEMENT_PAGE] = html.encode("utf-8")
    files[ROBUSTNESS_PAGE] = robustness_page(frame).encode("utf-8")
    if csv is not None:
        files[AGREEMENT_CSV] = csv
    if reference is not None:
        html, files["reference.csv"] = reference_page(frame, reference)
        files["reference.html"] = html.encode("utf-8")
    if board is not None:
        files[LEADERBOARD_PAGE] = leaderboard_page(board, downloads=False, nav=nav).encode("utf-8")
    replace_site(out, files)  # every input read: only now is an older site replaced
    written = [p for p in out.rglob("*") if p.is_file()]
    return BuiltSite(pages=sum(p.suffix == ".html" for p in written), bytes=sum(p.stat().st_size for p in written),
                     files=len(written))
