"""The agreement report of ``protobench agreement`` and the site's agreement page: its parts
(``reports.agreement``, ``reports.reliability``, ``reports.supported``) computed once, and
rendered as markdown (tabulate), as CSV (the τ table alone, full precision, no formula cell) or
as the rows of the site's tables."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import pandas as pd

from benchmark.csv_cells import frame_csv
from benchmark.errors import ProtobenchError
from reports.agreement import MIN_METHODS, Bootstrap, Stability, Tau, check_agreement_input, metric_taus, rank_stability
from reports.cell_text import markdown_cell
from reports.columns import REFERENCE_ROWS
from reports.ground_truth import TruthRho, against_ground_truth, chance_levels, has_ground_truth
from reports.reliability import ICC_SOURCE, Reliability, reliability
from reports.supported import Ordering, orderings

STABILITY_KEYS: tuple[str, ...] = ("J", "backbone")


@dataclass(frozen=True)
class AgreementReport:
    metrics: list[str]
    boot: Bootstrap
    taus: list[Tau]
    reliabilities: list[Reliability]
    stability: dict[str, list[Stability]]  # by key, empty where the key has one value
    orderings: list[Ordering]
    tests: int  # the comparisons Holm corrects over
    left_out: list[str]  # reference rows present but not ranked (``--rank-reference`` ranks them)
    ground_truth: list[TruthRho] | None = None  # FunnyBirds runs: each metric against Cor, Com, Con, BI
    chance: pd.DataFrame | None = None  # FunnyBirds runs: each protocol's mean, trained and control heads


def build_agreement(frame: pd.DataFrame, boot: Bootstrap, *, rank_reference: bool = False) -> AgreementReport:
    """Every part of the report; bad input is refused before any of it is computed. Reference rows
    (:data:`reports.columns.REFERENCE_ROWS`) are left out of every ranking unless ``rank_reference``."""
    left_out = [] if rank_reference else sorted(set(frame["method"]) & set(REFERENCE_ROWS))
    frame = frame[~frame["method"].isin(left_out)]
    try:
        metrics = check_agreement_input(frame)
    except ProtobenchError as err:
        if not left_out:
            raise
        raise ProtobenchError(f"{err} The reference rows {', '.join(left_out)} are left out of the rankings; "
                              "`--rank-reference` ranks them with the methods.") from None
    found, tests = orderings(frame, metrics, boot.level)
    truth = has_ground_truth(frame)
    return AgreementReport(metrics, boot, metric_taus(frame, metrics, boot), reliability(frame, metrics),
                           {key: rank_stability(frame, metrics, key) for key in STABILITY_KEYS}, found, tests,
                           left_out, against_ground_truth(frame, metrics, boot) if truth else None,
                           chance_levels(frame) if truth else None)


def number(value: float, decimals: int = 2) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:.{decimals}f}"


def interval(low: float, high: float) -> str:
    return "–" if math.isnan(low) else f"[{number(low)}, {number(high)}]"


def tau_rows(report: AgreementReport) -> tuple[list[str], list[list[str]]]:
    headers = ["cell", "metric a", "metric b", "methods", "Kendall τ", f"{100 * report.boot.level:g}% CI", "images",
               "interval"]
    return headers, [[t.cell, t.metric_a, t.metric_b, str(t.methods), number(t.tau), interval(t.ci_low, t.ci_high),
                      "–" if t.n_images is None else str(t.n_images), t.interval] for t in report.taus]


def reliability_rows(report: AgreementReport) -> tuple[list[str], list[list[str]]]:
    headers = ["cell", "metric", "methods", "seeds", "ICC(3,1) one seed", "95% CI", "ICC(3,k) seed mean", "95% CI",
               "note"]
    return headers, [[r.cell, r.metric, str(r.methods), str(r.seeds), number(r.icc_single),
                      interval(r.single_low, r.single_high), number(r.icc_mean), interval(r.mean_low, r.mean_high),
                      r.note] for r in report.reliabilities]


def stability_rows(found: list[Stability]) -> tuple[list[str], list[list[str]]]:
    key = found[0].key if found else "key"
    return (["cell", "metric", f"{key} a", f"{key} b", "methods", "Kendall τ"],
            [[s.cell, s.metric, s.a, s.b, str(s.methods), number(s.tau)] for s in found])


def supported_lines(report: AgreementReport) -> list[str]:
    """The summary: supported orderings, flips, and how many pairs stay undecided."""
    alpha = 1 - report.boot.level
    lines = [f"Pairs of methods compared on every metric both have ({report.tests} paired tests, Holm at "
             f"α = {alpha:.2g}: the crossed seeds × images procedure where per-image records exist, else paired "
             f"Student t over seeds; docs/guides/statistics.md)."]
    supported = [o for o in report.orderings if o.supported]
    flips = [o for o in report.orderings if o.flips]
    for o in supported:
        winner, loser = (o.a, o.b) if o.better else (o.b, o.a)
        lines.append(f"supported: {winner} > {loser} on every metric ({', '.join(o.better or o.worse)}) [{o.cell}]")
    for o in flips:
        lines.append(f"flips: {o.a} > {o.b} on {', '.join(o.better)} but {o.b} > {o.a} on {', '.join(o.worse)} "
                     f"[{o.cell}]")
    rest = len(report.orderings) - len(supported) - len(flips)
    lines.append(f"{len(supported)} ordering(s) supported on every metric, {len(flips)} flip between metrics, {rest} "
                 "not significant on every metric (no conclusion on their order).")
    return lines


def tau_note(report: AgreementReport) -> str:
    return ("τ: Kendall's τ-b (scipy.stats.kendalltau) between the method rankings (means over seeds) of two "
            "metrics in one cell; 1 = same order, −1 = reversed. Interval: the procedure and its n are named in "
            "each row (images resampled, each method's value recomputed on the drawn images; seeds fixed, so "
            "training variance is not covered); a metric without per-image values (con) gets τ without an "
            "interval. docs/guides/agreement.md.")


def reliability_note() -> str:
    return (f"Reliability over seeds: {ICC_SOURCE}; ICC(3,1): of one seed's numbers, ICC(3,k): of the mean over the "
            "k seeds the tables show; 95% F-based intervals (McGraw & Wong 1996), as pingouin rounds them.")


def ground_truth_rows(report: AgreementReport) -> tuple[list[str], list[list[str]]]:
    headers = ["metric", "ground truth", "heads", "runs", "methods", "Spearman ρ", f"{100 * report.boot.level:g}% CI",
               "interval"]
    return headers, [[r.metric, r.truth, r.heads, str(r.runs), str(r.methods), number(r.rho),
                      interval(r.ci_low, r.ci_high), r.interval] for r in report.ground_truth or []]


def chance_rows(chance: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    headers = ["method", *[f"{c.split('_', 1)[1]} ({'trained' if c.startswith('fb_') else 'control'})"
                           for c in chance.columns]]
    return headers, [[str(method), *(number(v, 1) for v in row)] for method, row in chance.iterrows()]


def ground_truth_note() -> str:
    return ("Against ground truth: Spearman's ρ across the runs between a suite metric and a FunnyBirds protocol "
            "(Cor = SD, Com = completeness, Con = TS, BI; docs/protocol/funnybirds.md). Runs of one method are not "
            "independent: the interval resamples methods (a cluster bootstrap; the procedure and its n in each row). "
            "Control rows: the same metric against the protocols of each run's head at initialisation; their "
            "intervals should hold 0. The table below gives each protocol's mean for trained and initial heads "
            "(percent): the chance level. docs/guides/metric-validity.md.")


def render_agreement(report: AgreementReport, fmt: str) -> str:
    """Markdown: every part with its note; CSV: the τ table alone."""
    if fmt == "csv":
        return frame_csv(pd.DataFrame([asdict(t) for t in report.taus], columns=list(Tau.__dataclass_fields__))
                         .astype({"n_images": "Int64"}))
    from tabulate import tabulate

    def markdown(headers: list[str], rows: list[list[str]]) -> str:
        return tabulate([[markdown_cell(c) for c in row] for row in rows], headers=headers, tablefmt="github",
                        disable_numparse=True)

    ranked = (f"Reference rows left out of every ranking: {', '.join(report.left_out)} (`--rank-reference` ranks "
              "them with the methods)." if report.left_out else "")
    parts = [f"Agreement of the metrics {', '.join(report.metrics)}", "", *([ranked, ""] if ranked else []),
             "## Kendall's τ between the metrics' method rankings", "",
             markdown(*tau_rows(report)) if report.taus else "No cell ranks three methods on two metrics.", "",
             tau_note(report), "", "## Reliability over seeds", "",
             markdown(*reliability_rows(report)) if report.reliabilities
             else f"No cell has {MIN_METHODS} methods with a metric.", "",
             reliability_note(), ""]
    for key, found in report.stability.items():
        parts += [f"## Rank stability across {key}", "",
                  markdown(*stability_rows(found)) + "\n\nτ between a metric's method rankings at two values of "
                  f"{key} (methods ranked at both; means over seeds, no interval)." if found
                  else f"One value of {key} per cell (or fewer than three methods at two): no stability to show.", ""]
    parts += ["## What this grid supports", "", *[f"- {line}" for line in supported_lines(report)], ""]
    if report.ground_truth is not None:
        parts += ["## Against ground truth", "",
                  markdown(*ground_truth_rows(report)) if report.ground_truth else "No metric has a value on these runs.",
                  "", ground_truth_note(), ""]
        if report.chance is not None and not report.chance.empty:
            parts += [markdown(*chance_rows(report.chance)), ""]
    return "\n".join(parts)
