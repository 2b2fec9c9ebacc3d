"""The leaderboard document as tables: ``leaderboard.csv`` (one line per board × metric × entry,
full precision, no formula cell: benchmark/csv_cells.py), ``leaderboard.md`` and
``leaderboard.tex`` (one table per board: entries in accuracy order, each metric as mean ± std
with its rank; ``*`` marks the leader and the entries tied with it, ``†`` a mean kept as reported;
each metric's header says which way is better, ↑ or ↓). Every number is printed as its metric's
units need (reports/leaderboard/ranked.py). Every table is a function of the document alone."""
from __future__ import annotations

from typing import Any

from benchmark.csv_cells import csv_text
from benchmark.escaping import latex_text, markdown_cell, markdown_text
from reports.leaderboard.ranked import METRIC_TEXT, number

CSV_COLUMNS = ("board", "dataset", "backbone", "J", "metric", "better", "rank", "group", "entry", "method",
               "method_provider", "variant", "budget", "mean", "std", "ci_low", "ci_high", "interval", "ci_n", "ci_images", "n_seeds",
               "test_images", "difference_to_best", "difference_ci_low", "difference_ci_high", "p", "p_holm", "test",
               "differs", "sources", "verified", "rescored", "between_labs_p", "between_labs_test")
TIE_MARK = "*"
AS_REPORTED_MARK = "†"
ARROWS = {"higher": "↑", "lower": "↓"}


def _entries(board: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["id"]: e for e in board["entries"]}


def render_csv(document: dict[str, Any]) -> str:
    lines = []
    for board in document["boards"]:
        entries = _entries(board)
        for ranking in board["rankings"]:
            for s in ranking["standings"]:
                e = entries[s["entry"]]
                lines.append([board["id"], board["dataset"], board["backbone"], board["J"], ranking["metric"],
                              ranking["better"], s["rank"], s["group"], e["label"], e["method"], provider_text(e),
                              e["variant"], e["budget"], s["mean"], s["std"], s["ci_low"], s["ci_high"],
                              s["interval"], s["ci_n"], s["ci_images"], s["n_seeds"],
                              " ".join(map(str, e["test_images"])),
                              s["difference_to_best"], s["difference_ci_low"], s["difference_ci_high"], s["p"],
                              s["p_holm"], s["test"], "; ".join(e["differs"]),
                              " ".join(x["name"] for x in e["sources"]),
                              e["verified"], s["rescored"], (s["between_labs"] or {}).get("p"),
                              (s["between_labs"] or {}).get("test")])
    return csv_text(CSV_COLUMNS, ([("" if v is None else v) for v in line] for line in lines))


def metric_header(ranking: dict[str, Any]) -> str:
    """A ranked metric's column header: its name and the arrow of its better direction."""
    return f"{ranking['metric']} {ARROWS[ranking['better']]}"


def metric_headers(board: dict[str, Any]) -> list[str]:
    """The headers of the board's metric columns, in :func:`board_cells`' order."""
    return [metric_header(r) for r in board["rankings"]]


def board_cells(board: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]], dict[tuple[str, str], dict[str, Any]]]:
    """The metrics of the board, its entries in the first metric's order, and each standing."""
    metrics = [r["metric"] for r in board["rankings"]]
    standing = {(r["metric"], s["entry"]): s for r in board["rankings"] for s in r["standings"]}
    entries = _entries(board)
    first = [s["entry"] for s in board["rankings"][0]["standings"]] if board["rankings"] else []
    ordered = [entries[i] for i in first] + [e for i, e in sorted(entries.items()) if i not in first]
    return metrics, ordered, standing


def cell_value(s: dict[str, Any] | None, metric: str, *, plus_minus: str = " ± ", missing: str = "–",
               as_reported: str = AS_REPORTED_MARK) -> str:
    """``mean ± std (rank*)`` of one standing of ``metric`` (``*``: the leader or tied with it; ``†``
    after it: kept as reported), ``missing`` for none."""
    if s is None:
        return missing
    spread = "" if s["std"] is None else f"{plus_minus}{number(metric, s['std'])}"
    return (f"{number(metric, s['mean'])}{spread} ({s['rank']}{TIE_MARK if s['group'] in ('best', 'tied') else ''})"
            + ("" if s["rescored"] else as_reported))


def provider_text(entry: dict[str, Any]) -> str:
    """Who provided the entry's method: ``distribution version`` of each provider its runs recorded."""
    return "; ".join(f"{p['distribution']} {p['version'] or '(no version)'}" if p["distribution"] else
                     "not recorded (an import-path method or an earlier result)" for p in entry["method_providers"])


def rescored_text(board: dict[str, Any], entry: dict[str, Any]) -> str:
    """Whether the entry's numbers on the board were re-scored from its runs' records, naming the
    metrics kept as reported."""
    kept = [r["metric"] for r in board["rankings"] for s in r["standings"] if s["entry"] == entry["id"]
            and not s["rescored"]]
    if not kept:
        return "yes"
    return f"{'partly' if entry['rescored'] else 'no'}: {', '.join(kept)} as reported (no records of them)"


def verification_line(document: dict[str, Any]) -> str:
    """What "verified" covers and what is trusted, and the guide that says more (one line)."""
    return f"{document['settings']['verification']} See the leaderboard guide of protobench's documentation, " \
        f"{document['settings']['guide']}."


def _range(low: float | None, high: float | None, metric: str) -> str | None:
    return None if low is None or high is None else f"[{number(metric, low)}, {number(metric, high)}]"


def interval_text(s: dict[str, Any], metric: str) -> str:
    """The entry's own interval with its n: ``[lo, hi] (n = 3 × 60 images)``, or why there is none."""
    n = f"n = {s['ci_n']}" + ("" if s["ci_images"] is None else f" × {s['ci_images']} images")
    found = _range(s["ci_low"], s["ci_high"], metric)
    return f"{found} ({n})" if found else f"no interval ({n})"


def difference_text(s: dict[str, Any], metric: str) -> tuple[str, str]:
    """(entry − leader with its interval, its Holm-adjusted p) of one standing of ``metric``."""
    if s["group"] == "best":
        return "the leader", ""
    if s["difference_to_best"] is None:
        return "no test", "no test"
    found = _range(s["difference_ci_low"], s["difference_ci_high"], metric) or "(no interval)"
    holm = "no test" if s["p_holm"] is None else f"{s['p_holm']:.3g}"
    return f"{format(s['difference_to_best'], '+' + METRIC_TEXT[metric].spec)} {found}", holm


def standing_lines(board: dict[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    """(metric with its direction, entry label, mean [interval] (n), entry − leader [interval], p (Holm),
    group) of every standing of the board."""
    labels = {e["id"]: e["label"] for e in board["entries"]}
    return [(metric_header(r), labels[s["entry"]],
             f"{number(r['metric'], s['mean'])} {interval_text(s, r['metric'])}", *difference_text(s, r["metric"]),
             s["group"]) for r in board["rankings"] for s in r["standings"]]


STANDING_HEADER = ("metric", "entry", "mean [interval] (n)", "entry − leader [interval]", "p (Holm)", "group")


def leaderboard_note(document: dict[str, Any]) -> str:
    settings = document["settings"]
    return (f"Mean ± std over seeds (rank; {TIE_MARK}: the leader or tied with it, Holm-adjusted paired tests at "
            f"α = {settings['alpha']:g}, as `protobench compare`). {ARROWS['higher']}: higher is better, "
            f"{ARROWS['lower']}: lower is better (the leader has the lowest mean); a difference is entry − leader, "
            f"in the metric's units. {AS_REPORTED_MARK}: a mean kept as its runs reported it (no records to "
            "re-score it from). –: not submitted for this board. Unverified sources are marked (unverified).")


def between_lab_lines(board: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(entry label, metric, the between-lab check in words) of every entry of several sources."""
    labels = {e["id"]: e["label"] for e in board["entries"]}
    lines = []
    for ranking in board["rankings"]:
        for s in ranking["standings"]:
            check = s["between_labs"]
            if check is None:
                continue
            found = "" if check["p"] is None else f"F = {check['statistic']:.3g}, p = {check['p']:.3g}; "
            lines.append((labels[s["entry"]], ranking["metric"], found + check["test"]))
    return lines


def unreadable_lines(document: dict[str, Any]) -> list[str]:
    """One line per run a source listed but could not be read (--allow-unverified)."""
    return [f"{s['name']}: {u['run']}: {u['reason']}" for s in document["sources"] for u in s["unreadable"]]


def render_markdown(document: dict[str, Any]) -> str:
    from tabulate import tabulate

    guide = document["settings"]["guide"]
    parts = ["# Leaderboard", "", f"{markdown_text(document['settings']['verification'])} See the leaderboard "
             f"guide of protobench's documentation, `{guide}`.", "", leaderboard_note(document), ""]
    if unreadable_lines(document):
        parts += ["Runs listed but not read (unverified sources): " +
                  "; ".join(markdown_text(line) for line in unreadable_lines(document)) + ".", ""]
    for board in document["boards"]:
        metrics, ordered, standing = board_cells(board)
        rows = [[markdown_cell(e["label"] + ("" if e["verified"] else " (unverified)")),
                 markdown_cell(provider_text(e)), markdown_cell(", ".join(x["name"] for x in e["sources"])),
                 str(len(e["seeds"])),
                 *(cell_value(standing.get((m, e["id"])), m) for m in metrics)] for e in ordered]
        parts += [f"## {markdown_text(board['id'])}", "",
                  tabulate(rows, headers=["entry", "method provider", "sources", "seeds", *metric_headers(board)],
                           tablefmt="github", disable_numparse=True), "",
                  f"Intervals ({100 * document['settings']['level']:g}%) and differences to the leader:", "",
                  tabulate([[markdown_cell(c) for c in line] for line in standing_lines(board)],
                           headers=list(STANDING_HEADER), tablefmt="github", disable_numparse=True), ""]
        if board["missing_methods"]:
            parts += [f"Not submitted: {markdown_text(', '.join(board['missing_methods']))}.", ""]
        if board["hardware_note"]:
            parts += [markdown_text(board["hardware_note"]) + ".", ""]
        checks = between_lab_lines(board)
        if checks:
            parts += ["Between labs (does the source explain variance beyond seeds?):", "",
                      tabulate([[markdown_cell(c) for c in line] for line in checks],
                               headers=["entry", "metric", "check"], tablefmt="github", disable_numparse=True), ""]
    return "\n".join(parts)


def render_latex(document: dict[str, Any]) -> str:
    parts = [f"% protobench leaderboard (schema {document['schema_version']}); needs \\usepackage{{booktabs}}",
             f"% {latex_text(verification_line(document))}",
             f"% {latex_text(leaderboard_note(document))}"]  # latex_text: one line, so the comment ends it
    for board in document["boards"]:
        metrics, ordered, standing = board_cells(board)
        parts += [r"\begin{table}[t]", r"\centering", rf"\caption{{Leaderboard: {latex_text(board['id'])}.}}",
                  r"\begin{tabular}{l" + "c" * (len(metrics) + 1) + "}", r"\toprule",
                  " & ".join(["Entry", "Seeds", *(latex_text(h) for h in metric_headers(board))]) + r" \\",
                  r"\midrule"]
        for e in ordered:
            cells = [latex_text(e["label"] + ("" if e["verified"] else " (unverified)")), str(len(e["seeds"]))]
            for m in metrics:
                s = standing.get((m, e["id"]))
                text = cell_value(s, m, plus_minus=r" $\pm$ ", missing="--", as_reported=r"\dag{}")
                cells.append(rf"\textbf{{{text}}}" if s is not None and s["group"] in ("best", "tied") else text)
            parts.append(" & ".join(cells) + r" \\")
        parts += [r"\bottomrule", r"\end{tabular}", r"\end{table}", "", *_latex_standings(document, board)]
    return "\n".join(parts) + "\n"


def _latex_standings(document: dict[str, Any], board: dict[str, Any]) -> list[str]:
    """The board's intervals and differences to the leader as a LaTeX table."""
    level = f"{100 * document['settings']['level']:g}"
    rows = [" & ".join(latex_text(c) for c in line[:5]) + r" \\" for line in standing_lines(board)]
    return [r"\begin{table}[t]", r"\centering",
            rf"\caption{{{latex_text(board['id'])}: each entry's mean with its {level}\% interval and n, and its "
            r"difference to the leader (entry \ensuremath{-} leader) with its interval and Holm-adjusted p.}",
            r"\begin{tabular}{llccc}", r"\toprule",
            " & ".join(latex_text(h) for h in STANDING_HEADER[:5]) + r" \\", r"\midrule", *rows,
            r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
