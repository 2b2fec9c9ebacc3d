"""``protobench plan``: what a grid will cost before anything is submitted — runs, job arrays
(one per job shape of the cluster profile), token caches to build, and GPU-hours; printed by
:mod:`benchmark.cli.plan_tables`.

Nothing here needs a dataset or a weights file: dataset sizes are the official split sizes,
epochs come from each method's stages (:mod:`benchmark.estimates.workload`), and per-epoch
costs come from ``protobench perf --out`` measurements from the target device or, by default,
from the FLOPs-and-bytes model (:mod:`benchmark.estimates.costs`) for the profile's
``device_model`` (default H100).

Reading the training entry (:func:`training_reads`), whatever the compute costs: an
entry that fits in the job's ``mem_gb`` is read once (the page cache keeps it); a larger one
(offline40's) is read every epoch, from the shared storage at the profile's ``storage_gb_s``, or
with ``cache_stage = "local"`` copied once at that rate and read at ``local_storage_gb_s``.
"""
from __future__ import annotations

from dataclasses import dataclass

from benchmark.config import RunSpec
from benchmark.estimates.caches import CacheNeed, cache_needs, grid_cache_needs
from benchmark.estimates.costs import Costs
from benchmark.estimates.workload import run_epochs
from benchmark.grid import GridSpec, cache_group
from benchmark.cluster import ClusterProfile, JobShape, pack_runs


GB = 10**9  # cache sizes are printed in decimal gigabytes

@dataclass(frozen=True)
class TrainingReads:
    """How a run reads the training entry its epochs read, and what that costs."""

    entry: CacheNeed
    every_epoch: bool  # the entry is larger than the job's memory, so the page cache cannot keep it
    epoch_seconds: float  # one read of the entry from where the epochs read it
    seconds: float  # every read of the run (and the copy to node-local scratch, if staged)
    where: str

def training_reads(spec: RunSpec, profile: ClusterProfile) -> TrainingReads | None:
    """The training entry's reads (None: no token cache). An entry within the job's ``mem_gb``
    is read once (the page cache keeps it: an assumption); a larger one every epoch, from the
    shared storage at ``storage_gb_s``, or — ``cache_stage = "local"`` — copied once at that rate
    and read at ``local_storage_gb_s``."""
    needs = [need for _, need in cache_needs(spec) if need.split == "train"]
    if not needs:
        return None
    entry = needs[-1]  # the augmented view when there is one: the epochs read it (runner.py)
    every_epoch = entry.bytes > profile.shape_for(spec).mem_gb * GB
    reads = run_epochs(spec) if every_epoch else 1
    shared = entry.bytes / (profile.storage_gb_s * GB)
    if spec.cache_stage == "local":
        local = entry.bytes / (profile.local_storage_gb_s * GB)
        return TrainingReads(entry, every_epoch, local, shared + reads * local,
                             f"node-local scratch at {profile.local_storage_gb_s:g} GB/s")
    return TrainingReads(entry, every_epoch, shared, reads * shared,
                         f"shared storage at {profile.storage_gb_s:g} GB/s")

def run_hours(costs: Costs, spec: RunSpec, profile: ClusterProfile) -> tuple[float, str, TrainingReads | None]:
    """Hours of one run (compute + training-entry reads), the compute's source, and the reads."""
    seconds, source = costs.run_seconds(spec, run_epochs(spec))
    reads = training_reads(spec, profile)
    return (seconds + (reads.seconds if reads else 0.0)) / 3600, source, reads

@dataclass(frozen=True)
class RunCost:
    spec: RunSpec
    shape: JobShape
    epochs: int
    hours: float  # compute and training-entry reads
    source: str
    reads: TrainingReads | None

    @property
    def epoch_read_dominates(self) -> bool:
        """The entry is read from shared storage every epoch, and that takes longer than the rest."""
        if self.reads is None or not self.reads.every_epoch or self.spec.cache_stage == "local":
            return False
        compute_per_epoch = (self.hours * 3600 - self.reads.seconds) / self.epochs
        return self.reads.epoch_seconds > compute_per_epoch

@dataclass(frozen=True)
class Plan:
    grid: GridSpec
    profile: ClusterProfile
    runs: tuple[RunCost, ...]
    caches: tuple[tuple[CacheNeed, int], ...]  # entry, number of runs reading it
    cache_hours: float
    costs: Costs

    @property
    def arrays(self) -> list[tuple[JobShape, list[RunCost]]]:
        groups: dict[JobShape, list[RunCost]] = {}
        for run in self.runs:
            groups.setdefault(run.shape, []).append(run)
        return list(groups.items())

    @property
    def tasks(self) -> list[tuple[JobShape, list[tuple[RunCost, ...]]]]:
        """The array tasks of each job array, packed as ``run`` packs them
        (:func:`benchmark.cluster.pack_runs`, ``runs_per_task`` of the profile)."""
        packed = []
        for shape, runs in self.arrays:
            by_id = {r.spec.run_id: r for r in runs}
            ordered = sorted((r.spec for r in runs), key=cache_group)
            tasks = pack_runs(ordered, self.profile, lambda spec: by_id[spec.run_id].hours)
            packed.append((shape, [tuple(by_id[spec.run_id] for spec in task) for task in tasks]))
        return packed

    @property
    def startup_hours(self) -> float:
        """Start-up of every array task (``task_startup_s``): a packed task pays it once."""
        return sum(len(tasks) * max(shape.gpus_per_node, 1) for shape, tasks in self.tasks) \
            * self.profile.task_startup_s / 3600

    @property
    def cache_bytes(self) -> int:
        return sum(need.bytes for need, _ in self.caches)

    @property
    def gpu_hours(self) -> float:
        return sum(r.hours * max(r.shape.gpus_per_node, 1) for r in self.runs) + self.startup_hours + self.cache_hours

def make_plan(grid: GridSpec, profile: ClusterProfile, costs: Costs) -> Plan:
    runs = []
    for spec in grid.runs:
        hours, source, reads = run_hours(costs, spec, profile)
        runs.append(RunCost(spec, profile.shape_for(spec), run_epochs(spec), hours, source, reads))
    caches = grid_cache_needs(grid.runs)
    # one trunk pass per entry, and writing it to the shared storage
    cache_hours = sum(costs.cache_seconds(need) + need.bytes / (profile.storage_gb_s * GB) for need, _ in caches) / 3600
    return Plan(grid, profile, tuple(runs), tuple(caches), cache_hours, costs)
