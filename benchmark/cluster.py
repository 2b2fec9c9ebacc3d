"""Cluster profiles: what one SLURM job of a grid asks for, read from ``slurm/profiles/*.toml``.

```toml
partition = "gpu"                 # every key is optional; the defaults below apply
account = "my-project"
gpus_per_node = 1
cpus_per_task = 8
mem_gb = 48
timeout_min = 240
setup = ["module load cuda/12.1"]  # shell lines run in the job before Python starts
signal_delay_s = 120               # SIGUSR2 this long before the time limit: checkpoint + requeue
array_parallelism = 16             # tasks of one array running at once
runs_per_task = 4                  # runs sharing a token-cache entry packed into one array task
task_time_budget_min = 200         # packed runs' estimated time per task (default: see below)
task_startup_s = 60                # estimated start-up of one task (process, imports, trunk, cache)

[backbone.dinov2_vitb14]           # a different job shape for one backbone's runs
timeout_min = 480
```

Runs with the same :class:`JobShape` go into one job array; with ``runs_per_task`` > 1 the
runs of one token-cache group (:func:`benchmark.grid.cache_group`) are packed back to back into
array tasks (:func:`pack_runs`), at most ``runs_per_task`` each and, by their estimated hours,
within the task's time budget (default: the shape's ``timeout_min`` less ``signal_delay_s`` and
``task_startup_s``).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from benchmark.checks import require_type, unknown_key_error
from benchmark.config import RunSpec, read_toml
from benchmark.errors import ProtobenchError
from benchmark.grid import cache_group
from benchmark.estimates.costmodel import DEVICES


@dataclass(frozen=True)
class JobShape:
    """The resources of one job: runs with equal shapes share a job array."""

    partition: str = ""  # "" → the cluster's default partition
    account: str = ""
    qos: str = ""
    constraint: str = ""
    gpus_per_node: int = 1
    cpus_per_task: int = 8
    mem_gb: float = 32.0
    timeout_min: int = 240

    def describe(self) -> str:
        where = ", ".join(f"{k} {v}" for k, v in (("partition", self.partition), ("account", self.account),
                                                  ("qos", self.qos), ("constraint", self.constraint)) if v)
        what = (f"{self.gpus_per_node} GPU, {self.cpus_per_task} CPU, {self.mem_gb:g} GB, "
                f"{self.timeout_min} min")
        return f"{where}; {what}" if where else what

    def submitit_parameters(self) -> dict[str, Any]:
        """``AutoExecutor.update_parameters`` keywords (generic ones plus ``slurm_`` ones)."""
        params: dict[str, Any] = {
            "gpus_per_node": self.gpus_per_node,
            "cpus_per_task": self.cpus_per_task,
            "mem_gb": self.mem_gb,
            "timeout_min": self.timeout_min,
        }
        for key in ("partition", "account", "qos", "constraint"):
            if getattr(self, key):
                params[f"slurm_{key}"] = getattr(self, key)
        return params


SHAPE_KEYS: tuple[str, ...] = tuple(f.name for f in fields(JobShape))


@dataclass(frozen=True)
class ClusterProfile:
    """A cluster profile: the default job shape, per-backbone shapes, and how jobs start."""

    name: str = "default"
    source: str = "built-in defaults"
    description: str = ""
    shape: JobShape = JobShape()
    backbone_shapes: tuple[tuple[str, JobShape], ...] = ()
    setup: tuple[str, ...] = ()
    signal_delay_s: int = 120
    array_parallelism: int = 32
    max_requeues: int = 3  # requeues after hitting the time limit (preemptions do not count)
    device: str = "auto"  # the runs' device on the cluster (an operational field: same run ids)
    snapshot: bool = True  # run queued jobs on a copy of the code taken at submission
    sbatch: dict[str, str] = field(default_factory=dict)  # extra #SBATCH flags, e.g. {"gres": "gpu:a100:1"}
    runs_per_task: int = 1  # runs packed back to back into one array task (1: one run per task)
    task_time_budget_min: int | None = None  # estimated run time per task (None: see task_budget_hours)
    task_startup_s: int = 60  # planning estimate of a task's start-up: process, imports, trunk, cache open
    device_model: str = "H100"  # the GPU `plan`'s cost model assumes (benchmark/estimates/costmodel.DEVICES)
    storage_gb_s: float = 1.0  # planning estimate of a job's read bandwidth from the shared cache storage
    local_storage_gb_s: float = 2.0  # planning estimate of node-local scratch reads (cache_stage = "local")

    def shape_for(self, spec: RunSpec) -> JobShape:
        return dict(self.backbone_shapes).get(spec.backbone, self.shape)

    def task_budget_hours(self, shape: JobShape) -> float:
        """Estimated run time one task of ``shape`` may hold: ``task_time_budget_min``, else the
        time limit less the requeue signal's lead (``signal_delay_s``) and the task's start-up."""
        if self.task_time_budget_min is not None:
            return self.task_time_budget_min / 60
        return (shape.timeout_min * 60 - self.signal_delay_s - self.task_startup_s) / 3600

    def slurm_parameters(self) -> dict[str, Any]:
        """The ``slurm_`` keywords that are the same for every array of the profile."""
        params: dict[str, Any] = {
            "slurm_signal_delay_s": self.signal_delay_s,
            "slurm_array_parallelism": self.array_parallelism,
        }
        if self.setup:
            params["slurm_setup"] = list(self.setup)
        if self.sbatch:
            params["slurm_additional_parameters"] = dict(self.sbatch)
        return params


PROFILE_KEYS: tuple[str, ...] = (*SHAPE_KEYS, "description", "setup", "signal_delay_s", "array_parallelism",
                                 "max_requeues", "device", "snapshot", "sbatch", "backbone", "runs_per_task",
                                 "task_time_budget_min", "task_startup_s", "device_model", "storage_gb_s",
                                 "local_storage_gb_s")
_TYPES: dict[str, type | tuple[type, ...]] = {
    "partition": str, "account": str, "qos": str, "constraint": str, "description": str, "device": str,
    "gpus_per_node": int, "cpus_per_task": int, "timeout_min": int, "signal_delay_s": int,
    "array_parallelism": int, "max_requeues": int, "mem_gb": (int, float), "setup": list, "snapshot": bool,
    "sbatch": dict, "backbone": dict, "runs_per_task": int, "task_time_budget_min": int, "task_startup_s": int,
    "device_model": str, "storage_gb_s": (int, float), "local_storage_gb_s": (int, float),
}
_MINIMUM = {"gpus_per_node": 0, "cpus_per_task": 1, "mem_gb": 0.1, "timeout_min": 1, "signal_delay_s": 0,
            "array_parallelism": 1, "max_requeues": 0, "runs_per_task": 1, "task_time_budget_min": 1,
            "task_startup_s": 0, "storage_gb_s": 0.001, "local_storage_gb_s": 0.001}


def _check(key: str, value: Any, where: str) -> None:
    require_type(key, value, _TYPES[key], where)
    if key in _MINIMUM and value < _MINIMUM[key]:
        raise ProtobenchError(f"{where}: {key} = {value!r} must be ≥ {_MINIMUM[key]}")
    if key == "setup" and not all(isinstance(line, str) for line in value):
        raise ProtobenchError(f"{where}: setup must be a list of shell lines (strings)")
    if key == "sbatch" and not all(isinstance(v, (str, int)) for v in value.values()):
        raise ProtobenchError(f"{where}: [sbatch] values must be strings or integers (an #SBATCH flag each)")
    if key == "device_model" and value not in DEVICES:
        raise ProtobenchError(f"{where}: device_model = {value!r} must be one of {', '.join(DEVICES)} "
                              "(the GPUs of `plan`'s cost model)")
    if key == "device" and value not in ("auto", "cpu") and not value.startswith("cuda"):
        raise ProtobenchError(f"{where}: device = {value!r} must be 'auto', 'cpu' or 'cuda[:N]'")


def _shape(values: dict[str, Any], base: JobShape, where: str) -> JobShape:
    for key, value in values.items():
        if key not in SHAPE_KEYS:
            raise unknown_key_error(key, list(SHAPE_KEYS), where)
        _check(key, value, where)
    shape = replace(base, **values)
    return replace(shape, mem_gb=float(shape.mem_gb))


def parse_profile(data: dict[str, Any], *, source: str, name: str) -> ClusterProfile:
    """Validate a parsed profile document; every error names the file and the key."""
    from benchmark.backbones import backbone_spec

    where = f"profile {source}"
    for key, value in data.items():
        if key not in PROFILE_KEYS:
            raise unknown_key_error(key, list(PROFILE_KEYS), where)
        _check(key, value, where)
    shape = _shape({k: v for k, v in data.items() if k in SHAPE_KEYS}, JobShape(), where)
    overrides = []
    for given, values in data.get("backbone", {}).items():
        try:
            backbone = backbone_spec(given).key
        except ProtobenchError as err:
            raise ProtobenchError(f"{where}: [backbone.{given}] names no backbone: {err}") from None
        if not isinstance(values, dict):
            raise ProtobenchError(f"{where}: [backbone.{backbone}] must be a table of job-shape keys")
        overrides.append((backbone, _shape(values, shape, f"{where} [backbone.{backbone}]")))
    profile = ClusterProfile(
        name=name,
        source=source,
        description=data.get("description", ""),
        shape=shape,
        backbone_shapes=tuple(overrides),
        setup=tuple(data.get("setup", ())),
        signal_delay_s=data.get("signal_delay_s", ClusterProfile.signal_delay_s),
        array_parallelism=data.get("array_parallelism", ClusterProfile.array_parallelism),
        max_requeues=data.get("max_requeues", ClusterProfile.max_requeues),
        device=data.get("device", ClusterProfile.device),
        snapshot=data.get("snapshot", ClusterProfile.snapshot),
        sbatch={k: str(v) for k, v in data.get("sbatch", {}).items()},
        runs_per_task=data.get("runs_per_task", ClusterProfile.runs_per_task),
        task_time_budget_min=data.get("task_time_budget_min"),
        task_startup_s=data.get("task_startup_s", ClusterProfile.task_startup_s),
        device_model=data.get("device_model", ClusterProfile.device_model),
        storage_gb_s=float(data.get("storage_gb_s", ClusterProfile.storage_gb_s)),
        local_storage_gb_s=float(data.get("local_storage_gb_s", ClusterProfile.local_storage_gb_s)),
    )
    for label, job in (("", shape), *((f" [backbone.{b}]", s) for b, s in overrides)):
        if job.timeout_min * 60 <= profile.signal_delay_s:
            raise ProtobenchError(
                f"{where}{label}: timeout_min = {job.timeout_min} is not longer than signal_delay_s = "
                f"{profile.signal_delay_s} s, so the checkpoint-and-requeue signal would arrive when the job "
                "starts; raise timeout_min or lower signal_delay_s")
        budget = profile.task_time_budget_min
        if budget is not None and budget * 60 > job.timeout_min * 60 - profile.signal_delay_s:
            raise ProtobenchError(
                f"{where}{label}: task_time_budget_min = {budget} does not fit in timeout_min = {job.timeout_min} "
                f"less signal_delay_s = {profile.signal_delay_s} s, so packed runs would be requeued by design; "
                "lower task_time_budget_min (or leave it out: the limit less the signal lead and start-up)")
    return profile


def load_profile(path: str | Path) -> ClusterProfile:
    """Read a cluster profile TOML (``slurm/profiles/*.toml``)."""
    path = Path(path)
    data = read_toml(path, "cluster profile", "give a TOML file such as slurm/profiles/example.toml")
    return parse_profile(data, source=str(path), name=path.stem)


def pack_runs(specs: list[RunSpec], profile: ClusterProfile, hours: Callable[[RunSpec], float]
              ) -> list[tuple[RunSpec, ...]]:
    """Array tasks of one job shape: consecutive runs of one token-cache group
    (:func:`benchmark.grid.cache_group`), at most ``runs_per_task`` a task and, by their
    estimated ``hours``, within :meth:`ClusterProfile.task_budget_hours` (a run longer than the
    budget gets a task of its own: it checkpoints and is requeued as an unpacked run is).
    ``specs`` are of one shape, in cache order; the tasks keep that order."""
    tasks: list[list[RunSpec]] = []
    group: tuple[str, ...] | None = None
    used = 0.0
    for spec in specs:
        cost = hours(spec)
        budget = profile.task_budget_hours(profile.shape_for(spec))
        if (tasks and cache_group(spec) == group and len(tasks[-1]) < profile.runs_per_task
                and used + cost <= budget):
            tasks[-1].append(spec)
            used += cost
        else:
            tasks.append([spec])
            group, used = cache_group(spec), cost
    return [tuple(task) for task in tasks]
