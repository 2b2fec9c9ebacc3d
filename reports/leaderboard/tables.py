"""The leaderboard document as tables: ``leaderboard.csv`` (one line per board × metric × entry,
full precision, no formula cell: benchmark/csv_cells.py), ``leaderboard.md`` and
``leaderboard.tex`` (one table per board: entries in accuracy order, each metric as mean ± std
with its rank; ``*`` marks the leader and the entries tied with it). Every table is a function of
the document alone."""
from __future__ import annotations

from typing import Any

from benchmark.csv_cells import csv_text
from benchmark.escaping import latex_text, markdown_cell, markdown_text

CSV_COLUMNS = ("board", "dataset", "backbone", "J", "metric", "rank", "group", "entry", "method", "method_provider",
               "variant", "budget", "mean", "std", "ci_low", "ci_high", "interval", "ci_n", "ci_images", "n_seeds",
               "test_images", "difference_to_best", "difference_ci_low", "difference_ci_high", "p", "p_holm", "test",
               "differs", "sources", "verified", "rescored", "between_labs_p", "between_labs_test")
TIE_MARK = "*"


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
                              s["rank"], s["group"], e["label"], e["method"], provider_text(e), e["variant"],
                              e["budget"], s["mean"], s["std"], s["ci_low"], s["ci_high"], s["interval"], s["ci_n"],
                              s["ci_images"], s["n_seeds"], " ".join(map(str, e["test_images"])),
                              s["difference_to_best"], s["difference_ci_low"], s["difference_ci_high"], s["p"],
                              s["p_holm"], s["test"], "; ".join(e["differs"]),
                              " ".join(x["name"] for x in e["sources"]),
                              e["verified"], e["rescored"], (s["between_labs"] or {}).get("p"),
                              (s["between_labs"] or {}).get("test")])
    return csv_text(CSV_COLUMNS, ([("" if v is None else v) for v in line] for line in lines))


def board_cells(board: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]], dict[tuple[str, str], dict[str, Any]]]:
    """The metrics of the board, its entries in the first metric's order, and each standing."""
    metrics = [r["metric"] for r in board["rankings"]]
    standing = {(r["metric"], s["entry"]): s for r in board["rankings"] for s in r["standings"]}
    entries = _entries(board)
    first = [s["entry"] for s in board["rankings"][0]["standings"]] if board["rankings"] else []
    ordered = [entries[i] for i in first] + [e for i, e in sorted(entries.items()) if i not in first]
    return metrics, ordered, standing


def cell_value(s: dict[str, Any] | None, decimals: int, *, plus_minus: str = " ± ", missing: str = "–") -> str:
    """``mean ± std (rank*)`` of one standing (``*``: the leader or tied with it), ``missing`` for none."""
    if s is None:
        return missing
    spread = "" if s["std"] is None else f"{plus_minus}{s['std']:.{decimals}f}"
    return f"{s['mean']:.{decimals}f}{spread} ({s['rank']}{TIE_MARK if s['group'] in ('best', 'tied') else ''})"


def provider_text(entry: dict[str, Any]) -> str:
    """Who provided the entry's method: ``distribution version`` of each provider its runs recorded."""
    return "; ".join(f"{p['distribution']} {p['version'] or '(no version)'}" if p["distribution"] else
                     "not recorded (an import-path method or an earlier result)" for p in entry["method_providers"])


def verification_line(document: dict[str, Any]) -> str:
    """What "verified" covers and what is trusted, and the guide that says more (one line)."""
    return f"{document['settings']['verification']} See the leaderboard guide of protobench's documentation, " \
        f"{document['settings']['guide']}."


def _range(low: float | None, high: float | None, decimals: int) -> str | None:
    return None if low is None or high is None else f"[{low:.{decimals}f}, {high:.{decimals}f}]"


def interval_text(s: dict[str, Any], decimals: int) -> str:
    """The entry's own interval with its n: ``[lo, hi] (n = 3 × 60 images)``, or why there is none."""
    n = f"n = {s['ci_n']}" + ("" if s["ci_images"] is None else f" × {s['ci_images']} images")
    found = _range(s["ci_low"], s["ci_high"], decimals)
    return f"{found} ({n})" if found else f"no interval ({n})"


def difference_text(s: dict[str, Any], decimals: int) -> tuple[str, str]:
    """(the difference to the leader with its interval, its Holm-adjusted p) of one standing."""
    if s["group"] == "best":
        return "the leader", ""
    if s["difference_to_best"] is None:
        return "no test", "no test"
    found = _range(s["difference_ci_low"], s["difference_ci_high"], decimals) or "(no interval)"
    holm = "no test" if s["p_holm"] is None else f"{s['p_holm']:.3g}"
    return f"{s['difference_to_best']:+.{decimals}f} {found}", holm


def standing_lines(board: dict[str, Any], decimals: int) -> list[tuple[str, str, str, str, str, str]]:
    """(metric, entry label, mean [interval] (n), difference to the leader [interval], p (Holm), group)
    of every standing of the board."""
    labels = {e["id"]: e["label"] for e in board["entries"]}
    return [(r["metric"], labels[s["entry"]], f"{s['mean']:.{decimals}f} {interval_text(s, decimals)}",
             *difference_text(s, decimals), s["group"]) for r in board["rankings"] for s in r["standings"]]


STANDING_HEADER = ("metric", "entry", "mean [interval] (n)", "difference to the leader [interval]", "p (Holm)",
                   "group")


def leaderboard_note(document: dict[str, Any]) -> str:
    settings = document["settings"]
    return (f"Mean ± std over seeds (rank; {TIE_MARK}: the leader or tied with it, Holm-adjusted paired tests at "
            f"α = {settings['alpha']:g}, as `protobench compare`). –: not submitted for this board. Unverified "
            "sources are marked (unverified).")


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


def render_markdown(document: dict[str, Any], decimals: int = 1) -> str:
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
                 *(cell_value(standing.get((m, e["id"])), decimals) for m in metrics)] for e in ordered]
        parts += [f"## {markdown_text(board['id'])}", "",
                  tabulate(rows, headers=["entry", "method provider", "sources", "seeds", *metrics],
                           tablefmt="github", disable_numparse=True), "",
                  f"Intervals ({100 * document['settings']['level']:g}%) and differences to the leader:", "",
                  tabulate([[markdown_cell(c) for c in line] for line in standing_lines(board, decimals)],
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


def render_latex(document: dict[str, Any], decimals: int = 1) -> str:
    parts = [f"% protobench leaderboard (schema {document['schema_version']}); needs \\usepackage{{booktabs}}",
             f"% {latex_text(verification_line(document))}",
             f"% {latex_text(leaderboard_note(document))}"]  # latex_text: one line, so the comment ends it
    for board in document["boards"]:
        metrics, ordered, standing = board_cells(board)
        parts += [r"\begin{table}[t]", r"\centering", rf"\caption{{Leaderboard: {latex_text(board['id'])}.}}",
                  r"\begin{tabular}{l" + "c" * (len(metrics) + 1) + "}", r"\toprule",
                  " & ".join(["Entry", "Seeds", *(latex_text(m) for m in metrics)]) + r" \\", r"\midrule"]
        for e in ordered:
            cells = [latex_text(e["label"] + ("" if e["verified"] else " (unverified)")), str(len(e["seeds"]))]
            for m in metrics:
                s = standing.get((m, e["id"]))
                text = cell_value(s, decimals, plus_minus=r" $\pm$ ", missing="--")
                cells.append(rf"\textbf{{{text}}}" if s is not None and s["group"] in ("best", "tied") else text)
            parts.append(" & ".join(cells) + r" \\")
        parts += [r"\bottomrule", r"\end{tabular}", r"\end{table}", "", *_latex_standings(document, board, decimals)]
    return "\n".join(parts) + "\n"


def _latex_standings(document: dict[str, Any], board: dict[str, Any], decimals: int) -> list[str]:
    """The board's intervals and differences to the leader as a LaTeX table."""
    level = f"{100 * document['settings']['level']:g}"
    rows = [" & ".join(latex_text(c) for c in line[:5]) + r" \\" for line in standing_lines(board, decimals)]
    return [r"\begin{table}[t]", r"\centering",
            rf"\caption{{{latex_text(board['id'])}: each entry's mean with its {level}\% interval and n, and its "
            r"difference to the leader with its interval and Holm-adjusted p.}",
            r"\begin{tabular}{llccc}", r"\toprule",
            " & ".join(latex_text(h) for h in STANDING_HEADER[:5]) + r" \\", r"\midrule", *rows,
            r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
