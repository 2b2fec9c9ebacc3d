"""The printing of ``protobench perf``: its measurements as two tables (medians with interquartile
ranges) and the lines that flag a measurement fault."""
from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from benchmark.progress import output_console


def _spread_text(spread: dict[str, float], fmt: str = ".3f") -> str:
    return f"{spread['median']:{fmt}} [{spread['q1']:{fmt}}–{spread['q3']:{fmt}}]"

def print_perf(rows: list[dict[str, Any]], baseline: int) -> None:
    """The measurements as two tables (medians with interquartile ranges) and a summary line."""
    base = rows[baseline]
    first = rows[0]
    console = output_console()
    title = (f"protobench perf ({first['device']}, batch {first['batch_size']}, {first['train_images']} training "
             f"images, {first['timed_batches']} timed batches; median [quartiles] over batches)")
    table = Table(title=escape(title))
    for col in ("method", "img/s (trunk + method)", "÷ bare trunk", "epoch from cache (s)",
                f"epoch ÷ {base['method_name']}", "hooks (s)", "evaluate (s)"):
        table.add_column(col, justify="left" if col == "method" else "right")
    for r in rows:
        hooks = sum(s["on_stage_start_seconds"] + s["on_epoch_end_seconds"] for s in r["stages"])
        table.add_row(escape(r["method"]), f"{r['method_inference_images_per_second']:.1f}",
                      _spread_text(r["inference_ratio_method_over_trunk"]),
                      f"{r['epoch_seconds_from_cache']:.3f}" if "epoch_seconds_from_cache" in r else "—",
                      _spread_text(r["epoch_ratio_over_baseline"], ".2f") if "epoch_ratio_over_baseline" in r else "—",
                      f"{hooks:.2f}", f"{r['evaluate_seconds']:.2f}")
    console.print(table)
    for r in rows:
        if r.get("inference_measurement_fault"):
            console.print(escape(f"measurement fault: {r['method']} ÷ bare trunk "
                                 f"{_spread_text(r['inference_ratio_method_over_trunk'])} is above 1 beyond its "
                                 "spread (trunk + method faster than the trunk alone); not a result: re-run on a "
                                 "quieter machine"))
    stages = Table(title=escape("every stage and each phase of it (from the epoch its step's cost changes): step "
                                "seconds per batch (median [quartiles]; a stage's weighted by its phases' epochs), "
                                "hooks over the schedule"))
    for col in ("method", "stage", "epochs", "step (s)", f"step ÷ {base['method_name']} epoch step",
                "on_stage_start (s)", "on_epoch_end, all epochs (s)"):
        stages.add_column(col, justify="left" if col in ("method", "stage") else "right")
    for r in rows:
        for s in r["stages"]:
            stages.add_row(escape(r["method"]), s["name"], str(s["epochs"]), _spread_text(s["step_seconds"]), "",
                           f"{s['on_stage_start_seconds']:.3f}", f"{s['on_epoch_end_seconds']:.3f}")
            if len(s["phases"]) < 2:
                continue
            for phase in s["phases"]:
                ratio = phase.get("step_ratio_over_baseline")
                stages.add_row("", f"  from epoch {phase['epoch']}", str(phase["epochs"]),
                               _spread_text(phase["step_seconds"]), _spread_text(ratio, ".2f") if ratio else "—",
                               "", "")
    console.print(stages)
    frozen = [f"{r['method']} {1e3 * r['frozen_features_seconds_per_image']:.3f} ms/image" for r in rows
              if r.get("frozen_features_seconds_per_image") is not None]
    if frozen:
        console.print(escape("frozen per-image features, once per run before the epochs (the gate of the frozen "
                             "view): " + ", ".join(frozen)))
    if "epoch_seconds_recomputing_trunk" in first:
        console.print(escape(f"bare trunk: {first['trunk_images_per_second']:.1f} img/s; {first['method']} epoch recomputing "
                      f"the trunk: {first['epoch_seconds_recomputing_trunk']:.3f} s = "
                      f"{_spread_text(first['epoch_speedup_from_cache'], '.1f')}× the cached epoch"))


def print_tuning_perf(rows: list[dict[str, Any]]) -> None:
    """``perf --tuning K``: per method the seconds of K trials run sequentially, packed and batched
    (median over repeats), their ratios to sequential [quartiles], trials per hour and the
    per-trial overhead."""
    console = output_console()
    table = Table(title=escape(f"tuning trials (K = {rows[0]['k']}, {rows[0]['repeats']} repeat(s); seconds of "
                               "the K trials, median; ratio to sequential, median [quartiles] over repeats)"))
    for col in ("method", "one trial (s)", "sequential (s)", "packed (s)", "÷ seq.", "batched (s)", "÷ seq.",
                "trials/h seq. · packed · batched", "overhead/trial seq. · packed (s)", "max |Δacc| batched"):
        table.add_column(col, justify="left" if col == "method" else "right")
    for r in rows:
        batched = r["batched_s"] is not None
        per_hour = " · ".join(f"{v:.0f}" for v in r["trials_per_hour"].values())
        overhead = " · ".join(f"{r['overhead_per_trial_s'][m]['median']:.3f}" for m in ("sequential", "packed"))
        table.add_row(escape(r["method"]), f"{r['one_trial_s']:.2f}", f"{r['sequential_s']:.2f}",
                      f"{r['packed_s']:.2f}", _spread_text(r["packed_over_sequential"], ".2f"),
                      f"{r['batched_s']:.2f}" if batched else "— (does not batch)",
                      _spread_text(r["batched_over_sequential"], ".2f") if batched else "—",
                      per_hour, overhead, f"{r['max_abs_diff_batched']:.2g}" if batched else "—")
    console.print(table)
