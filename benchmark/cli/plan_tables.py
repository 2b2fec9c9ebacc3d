"""The printing of ``protobench plan``: its job arrays, token caches, GPU-hours and what they
assume, and the training entries read every epoch."""
from __future__ import annotations

from collections import Counter

from rich.table import Table

from benchmark.estimates.plan import GB, Plan, RunCost
from benchmark.progress import output_console


def print_plan(plan: Plan) -> None:
    console = output_console()
    grid = plan.grid
    console.print(f"grid [bold]{grid.name}[/bold] ({grid.source}): {len(plan.runs)} runs; "
                  f"profile {plan.profile.name} ({plan.profile.source})")
    arrays = Table(title=f"{len(plan.arrays)} job array(s), one per job shape "
                         f"(≤ {plan.profile.array_parallelism} tasks of an array at once; "
                         f"≤ {plan.profile.runs_per_task} run(s) per task)")
    for column in ("job shape", "runs", "array tasks", "runs per task", "epochs", "est. hours",
                   "longest task h"):
        arrays.add_column(column, justify="left" if column == "job shape" else "right")
    for shape, tasks in plan.tasks:
        runs = [r for task in tasks for r in task]
        fewest, most = min(len(task) for task in tasks), max(len(task) for task in tasks)
        arrays.add_row(shape.describe(), str(len(runs)), str(len(tasks)),
                       str(most) if fewest == most else f"{fewest}–{most}",
                       str(sum(r.epochs for r in runs)), f"{sum(r.hours for r in runs):.1f}",
                       f"{max(sum(r.hours for r in task) for task in tasks):.1f}")
    console.print(arrays)
    caches = Table(title=f"{len(plan.caches)} token cache(s) to build (each once, shared by its runs)")
    for column in ("backbone", "dataset", "split", "view", "early tokens", "images", "GB", "runs"):
        caches.add_column(column, justify="right" if column in ("images", "GB", "runs") else "left")
    for need, readers in sorted(plan.caches, key=lambda c: (c[0].backbone, c[0].dataset, c[0].split, c[0].view)):
        caches.add_row(need.backbone, need.dataset, need.split, need.view, "yes" if need.early_tokens else "",
                       str(need.images), f"{need.bytes / GB:.2f}", str(readers))
    console.print(caches)
    console.print(f"token cache: {len(plan.caches)} entries, {plan.cache_bytes / GB:.1f} GB")
    sources = Counter(r.source for r in plan.runs)
    tasks = sum(len(t) for _, t in plan.tasks)
    console.print(f"estimate: [bold]{plan.gpu_hours:.1f} GPU-hours[/bold] "
                  f"({sum(r.hours for r in plan.runs):.1f} h training, {plan.startup_hours:.1f} h start-up of "
                  f"{tasks} array task(s) at {plan.profile.task_startup_s} s each, "
                  f"{plan.cache_hours:.1f} h token caches); "
                  f"runs costed by:")
    for source, n in sorted(sources.items(), key=lambda item: -item[1]):
        console.print(f"  {n} run(s): {source}")
    console.print(f"cost model: {plan.costs.source}")
    if plan.costs.cpu_caution():
        console.print(f"[yellow]{plan.costs.cpu_caution()}[/yellow]")
    console.print(f"storage: token-cache entries written, and training entries read, at {plan.profile.storage_gb_s:g} "
                  f"GB/s from the shared storage (once if within the job's mem_gb, else every epoch; "
                  f"cache_stage = \"local\": copied once, then read at {plan.profile.local_storage_gb_s:g} GB/s); "
                  f"job start-up {plan.profile.task_startup_s} s per array task (profile: storage_gb_s, "
                  f"local_storage_gb_s, task_startup_s)")
    print_epoch_reads(plan)

def print_epoch_reads(plan: Plan) -> None:
    """Training entries larger than a job's memory, read every epoch: the I/O time per epoch, and
    ``cache_stage = "local"`` recommended where it is longer than the epoch's compute."""
    console = output_console()
    groups: dict[tuple[str, str, str, float], list[RunCost]] = {}
    for run in plan.runs:
        if run.reads is not None and run.reads.every_epoch:
            entry = run.reads.entry
            groups.setdefault((entry.backbone, entry.view, run.reads.where, run.reads.epoch_seconds), []).append(run)
    for (backbone, view, where, seconds), runs in groups.items():
        entry = runs[0].reads.entry
        dominated = [r for r in runs if r.epoch_read_dominates]
        line = (f"I/O: {len(runs)} run(s) read the {backbone} {view} training entry ({entry.bytes / GB:.0f} GB, "
                f"more than the job's memory) every epoch from {where}: {seconds:.0f} s per epoch")
        if dominated:
            line += (f"; longer than the epoch's compute in {len(dominated)} of them — set cache_stage = \"local\" "
                     "(copy the entry to node-local scratch once per job)")
        console.print(line)
