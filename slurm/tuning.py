"""``tune --executor slurm|submitit-local --workers K``: K array tasks of one :class:`TuneJob` that
share every cell's study (its journal file); each task works through the cells, asking a trial
wherever a slot is free, so the cells finish with exactly N complete trials between them."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmark.cluster import ClusterProfile, load_profile
from benchmark.errors import ProtobenchError
from benchmark.tuning.workers import TuneJob
from slurm.executors import make_executor


def submit_tune_workers(job: TuneJob, *, executor: str, workers: int, profile: str | None,
                        folder: Path) -> list[dict[str, Any]]:
    """Submit ``workers`` tasks, wait for them, and return the last one's study summaries (every
    worker returns when all cells are complete, so each has the final counts)."""
    if executor == "slurm" and not profile:
        raise ProtobenchError("--executor slurm needs --profile (slurm/profiles/local.toml for the test cluster)")
    cluster = load_profile(profile) if profile else ClusterProfile()
    ex = make_executor(executor, folder, cluster, job_name="protobench-tune")
    ex.update_parameters(**cluster.shape.submitit_parameters())
    if executor != "slurm":
        ex.update_parameters(gpus_per_node=0)
    jobs = ex.submit_array([job] * workers)
    answers = []
    for submitted in jobs:
        try:
            answers.append(submitted.result())
        except Exception as err:  # noqa: BLE001 - one worker's end (e.g. killed): the others finish its cells
            print(f"tuning worker {submitted.job_id} ended: {type(err).__name__}: {str(err).splitlines()[0]}")
    if not answers:
        raise ProtobenchError(f"every tuning worker failed; their logs are in {folder}")
    return answers[-1]
