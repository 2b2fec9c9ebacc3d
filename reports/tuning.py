"""``report RUNS --tuning``: per tuning cell, the study (trials, epoch budget, default and best
validation score, the chosen hyperparameters) and the test accuracy of the default against the
tuned runs, paired on seed (and on test images where per-image records exist) by
:func:`reports.paired.cell_difference`, Holm-corrected across the cells (:func:`reports.stats.holm`).

Reads the ``summary.json`` that ``protobench tune`` writes beside each grid's runs
(``RUNS/GRID.tuning/STUDY/summary.json``): no Optuna, no torch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from benchmark.errors import ProtobenchError
from benchmark.spec_fields import tuned_variant
from benchmark.study_summary import SUMMARY_FILE, read_study_summary
from reports.layouts import display_name
from reports.paired import cell_difference
from reports.pivot import method_labels
from reports.stats import holm



def summary_files(inputs: list[Path]) -> list[Path]:
    """The study summaries that belong to ``inputs``: ``X.tuning`` beside a runs folder ``X``, any
    ``*.tuning`` inside it, or a ``*.tuning`` folder given itself."""
    roots: dict[Path, None] = {}
    for path in inputs:
        if path.name.endswith(".tuning"):
            roots[path] = None
        roots.update({p: None for p in [path.with_name(path.name + ".tuning"), *sorted(path.glob("*.tuning"))]
                      if p.is_dir()})
    return sorted(f for root in roots for f in root.glob(f"*/{SUMMARY_FILE}"))


def read_summaries(inputs: list[Path]) -> list[dict[str, Any]]:
    files = summary_files(inputs)
    if not files:
        raise ProtobenchError(f"no study summary (GRID.tuning/*/summary.json) beside or inside "
                              f"{', '.join(map(str, inputs))}; run `protobench tune GRID --trials N` first")
    return [read_study_summary(path) for path in files]


@dataclass(frozen=True)
class TuningRow:
    summary: dict[str, Any]
    default_acc: float
    tuned_acc: float
    difference: float
    ci: tuple[float, float]
    p_value: float
    p_holm: float
    n_seeds: int
    test: str


def _cell_runs(frame: pd.DataFrame, cell: dict[str, Any], variant: str) -> pd.DataFrame:
    keep = ((frame["dataset"] == cell["dataset"]) & (frame["backbone"] == cell["backbone"])
            & (frame["method"] == cell["method"]) & (frame["J"] == cell["J"]) & (frame["variant"] == variant))
    return frame[keep].set_index("seed")


def tuning_rows(frame: pd.DataFrame, summaries: list[dict[str, Any]], level: float) -> list[TuningRow]:
    """One row per study whose default and tuned runs share a seed."""
    rows = []
    for summary in summaries:
        cell = summary["cell"]
        default, tuned = _cell_runs(frame, cell, cell["variant"]), _cell_runs(frame, cell, tuned_variant(cell["variant"]))
        diff = cell_difference(tuned, default, "acc", level, names=("tuned", "default")) \
            if len(default) and len(tuned) else None
        if diff is None:
            continue
        n_seeds = diff.n_seeds
        common = sorted(set(default.index) & set(tuned.index))
        rows.append(TuningRow(summary, float(default.loc[common, "acc"].mean()), float(tuned.loc[common, "acc"].mean()),
                              diff.difference, diff.ci, diff.p_value, math.nan, n_seeds, diff.test))
    adjusted = holm([r.p_value for r in rows])
    return [TuningRow(**{**r.__dict__, "p_holm": p}) for r, p in zip(rows, adjusted)]


def _number(value: float | None, decimals: int = 1) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{decimals}f}"


def _params(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(params.items())) or "–"


def _trials(summary: dict[str, Any]) -> str:
    """``3/3`` (complete of N), with pruning ``1/3 +2 pruned`` (complete and pruned trials both count)."""
    pruning = summary.get("pruning") or {}
    shown = f"{summary['complete']}/{summary['budget']['trials']}"
    shown = f"{shown} +{pruning['pruned']} pruned" if pruning.get("on") else shown
    failed = (summary.get("counts") or {}).get("FAIL", 0)
    shown += f", {failed} failed" if failed else ""
    finished = summary.get("finished", summary["complete"])
    return shown if finished >= summary["budget"]["trials"] else f"{shown} (unfinished)"


def _pruning_note(summaries: list[dict[str, Any]]) -> str:
    """Whether the studies pruned, with which pruner, and how many trials it stopped."""
    on = [s for s in summaries if (s.get("pruning") or {}).get("on")]
    if not on:
        return "Pruning off: every trial trained every epoch."
    pruners = sorted({s["pruning"]["pruner"] for s in on})
    pruned = sum(s["pruning"]["pruned"] for s in on)
    off = len(summaries) - len(on)
    return (f"Pruning on in {len(on)} of {len(summaries)} cells ({', '.join(pruners)} on the validation accuracy "
            f"after each epoch): {pruned} trial(s) stopped early, each counted in the trials (complete + pruned = "
            "N); the defaults are never pruned." + (f" {off} cell(s) without pruning." if off else ""))


def render_tuning(frame: pd.DataFrame, summaries: list[dict[str, Any]], level: float = 0.95) -> str:
    """The markdown table of ``report --tuning`` with its note (the budget, the tests)."""
    from tabulate import tabulate

    rows = tuning_rows(frame, summaries, level)
    labels = method_labels(frame)  # the display names every other table shows
    by_study = {r.summary["study"]: r for r in rows}
    lines = []
    for s in summaries:
        cell, r = s["cell"], by_study.get(s["study"])
        default_val = s["default"]["values"][0] if s.get("default") and s["default"].get("values") else None
        best = s.get("best") or {}
        lines.append([
            labels.get(cell["method"]) or display_name(cell["method"], None), str(cell["J"]), cell["backbone"], cell["dataset"],
            _trials(s), str(s["budget"]["epochs_per_trial"]),
            _number(default_val), f"{_number((best.get('values') or [None])[0])} (#{best.get('number', '–')})",
            _params(best.get("params", {})),
            _number(r.default_acc) if r else "–", _number(r.tuned_acc) if r else "–",
            f"{r.difference:+.1f}" if r else "–", f"[{_number(r.ci[0])}, {_number(r.ci[1])}]" if r else "–",
            f"{r.p_value:.3g}" if r and not math.isnan(r.p_value) else "–",
            f"{r.p_holm:.3g}" if r and not math.isnan(r.p_holm) else "–", str(r.n_seeds) if r else "0"])
    headers = ["method", "J", "backbone", "dataset", "trials", "epochs/trial", "val default", "val best (trial)",
               "chosen hyperparameters", "test acc default", "test acc tuned", "tuned − default",
               f"{100 * level:g}% CI", "p", "p (Holm)", "seeds"]
    budgets = sorted({(s["budget"]["trials"], s["sampler"]) for s in summaries})
    note = (f"Budget: {', '.join(f'{n} trials ({sampler})' for n, sampler in budgets)} per cell, the same for "
            "every method, each trial training the method's own schedule (epochs/trial); trial 0 is the defaults. "
            f"{_pruning_note(summaries)} "
            "Validation: a stratified split of the training images (val columns); test accuracy of the default and "
            "the tuned runs (best trial retrained on the full training split), paired on seed "
            f"({rows[0].test if rows else 'no pairs yet'}); p (Holm): over the {len(rows)} cells shown.")
    missing = [s["study"] for s in summaries if s["study"] not in by_study]
    if missing:
        note += (f" No default/tuned pair with a common seed yet for {len(missing)} cell(s): run the grid with and "
                 "without --hyperparameters tuned.")
    return tabulate(lines, headers=headers, tablefmt="github", disable_numparse=True) + "\n\n" + note + "\n"
