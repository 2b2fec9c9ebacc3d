"""``protobench evaluate RUN_DIR``: evaluate a finished run again from its checkpoint (e.g. with
another ``map_pool``), without retraining."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmark.config import RunSpec
from benchmark.errors import ProtobenchError
from benchmark.evaluation import evaluate
from benchmark.runner import prepare
from benchmark.store import RunDir, atomic_write_json
from benchmark.training import load_checkpoint


def reevaluate(run_dir: Path, *, map_pool: int | None = None, cache_dir: str | None = None) -> dict[str, Any]:
    """Metrics of the run's final checkpoint; written to ``RUN_DIR/evaluations/map_pool<k>.json``."""
    rd = RunDir(run_dir)
    spec_data = rd.spec()
    if spec_data is None:
        raise ProtobenchError(f"{str(run_dir)!r} is not a run directory (no readable spec.json)")
    if not rd.checkpoint_path.exists():
        raise ProtobenchError(f"run {str(run_dir)!r} has no checkpoint.pt; run the grid first")
    spec = RunSpec.from_json(spec_data)
    if map_pool is not None:
        spec = spec.with_overrides(map_pool=map_pool)
    prep = prepare(spec)
    checkpoint = load_checkpoint(rd.checkpoint_path)
    if checkpoint["stage_index"] < len(prep.method.stages()):
        raise ProtobenchError(f"run {str(run_dir)!r} has not finished training; run the grid again to finish it")
    prep.method.load_state_dict(checkpoint["method"])
    prep.method.to(prep.device)
    cache_root = Path(cache_dir) if cache_dir else run_dir.parent.parent / ".token-cache"
    test_src, noisy_src = prep.test_sources(cache_root, progress=False)
    evaluated = evaluate(prep.method, prep.test_set, test_src, noisy_src, batch_size=spec.eval_batch_size,
                         device=prep.device, map_pool=spec.map_pool, noise_seed=spec.seed)
    atomic_write_json(rd.path / "evaluations" / f"map_pool{spec.map_pool}.json", evaluated)
    return evaluated
