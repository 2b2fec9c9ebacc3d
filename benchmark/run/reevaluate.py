"""``protobench evaluate RUN_DIR``: evaluate a finished run again from its checkpoint (e.g. with
another ``map_pool``), without retraining."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmark.cache.tokens import STABILITY_NOISE_SEED
from benchmark.config import RunSpec
from benchmark.errors import ProtobenchError
from benchmark.run.evaluation import evaluate
from benchmark.run.identity import method_fingerprint
from benchmark.run.provenance import provenance
from benchmark.run.runner import Prepared, prepare
from benchmark.run.store import RunDir, atomic_write_json, default_cache_root
from benchmark.run.training import deterministic_algorithms, load_checkpoint
from methods.common.precision import matmul_precision


def load_trained(run_dir: Path, **overrides: object) -> Prepared:
    """The run's data, trunk and method with its final checkpoint loaded (training must be done)."""
    rd = RunDir(run_dir)
    spec_data = rd.spec()
    if spec_data is None:
        raise ProtobenchError(f"{str(run_dir)!r} is not a run directory (no readable spec.json)")
    if not rd.checkpoint_path.exists():
        raise ProtobenchError(f"run {str(run_dir)!r} has no checkpoint.pt; run the grid first")
    spec = RunSpec.from_json(spec_data).with_overrides(**overrides)
    prep = prepare(spec)
    checkpoint = load_checkpoint(rd.checkpoint_path)
    if checkpoint["stage_index"] < len(prep.method.stages()):
        raise ProtobenchError(f"run {str(run_dir)!r} has not finished training; run the grid again to finish it")
    prep.method.load_state_dict(checkpoint["method"])
    prep.method.to(prep.device).eval()
    return prep


def run_cache_root(run_dir: Path) -> Path:
    """Where ``protobench run`` put the token cache of ``RUNS_DIR/<grid>/<run_id>``."""
    return default_cache_root(run_dir.parent.parent)


def reevaluate(run_dir: Path, *, map_pool: int | None = None, cache_dir: str | None = None,
               allow_code_change: bool = False) -> dict[str, Any]:
    """Metrics of the run's final checkpoint, computed as the run computed them: its precision
    (autocast and matmul mode), deterministic-kernel choice, batch sizes and evaluation seeds, so
    a finished run re-evaluated gives its result.json metrics exactly (another ``map_pool`` aside).
    Written to ``RUN_DIR/evaluations/map_pool<k>.json`` with the precision and the code used.
    A run whose method code has changed since (benchmark/run/identity.py) is refused unless
    ``allow_code_change``: the numbers would be another code's."""
    result = RunDir(run_dir).result() or {}
    recorded = result.get("method_fingerprint")
    prep = load_trained(run_dir, **({} if map_pool is None else {"map_pool": map_pool}))
    spec = prep.spec
    fingerprint = method_fingerprint(spec.method)
    if isinstance(recorded, str) and recorded != fingerprint and not allow_code_change:
        raise ProtobenchError(f"the code of method {spec.method!r} changed since run {str(run_dir)!r} was trained "
                              "(its result is stale): re-evaluating would score another code's numbers; retrain it "
                              "(protobench run GRID --rerun-stale) or pass --allow-code-change")
    cache_root = Path(cache_dir) if cache_dir else run_cache_root(run_dir)
    test_src, noisy_src = prep.test_sources(cache_root)
    with matmul_precision(spec.precision), deterministic_algorithms(spec.deterministic):
        evaluated = evaluate(prep.method, prep.test_set, test_src, noisy_src, batch_size=spec.eval_batch_size,
                             device=prep.device, map_pool=spec.map_pool, noise_seed=STABILITY_NOISE_SEED,
                             precision=spec.precision)
    evaluated["provenance"] = {**provenance(prep.device), "precision": spec.precision,
                               "deterministic_algorithms": spec.deterministic, "method_fingerprint": fingerprint}
    atomic_write_json(run_dir / "evaluations" / f"map_pool{spec.map_pool}.json", evaluated)
    return evaluated
