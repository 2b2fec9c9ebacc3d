"""``protobench evaluate RUN_DIR``: evaluate a finished run again from its checkpoint (e.g. with
another ``map_pool``), without retraining; ``--rescore`` puts the current metric code's scores
into its ``result.json``."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmark.bundle.head import read_head
from benchmark.bundle.manifest import HEAD_FILE
from benchmark.cache.noise import STABILITY_NOISE_SEED
from benchmark.config import RunSpec
from benchmark.errors import ProtobenchError
from benchmark.progress import NO_PROGRESS
from benchmark.run.evaluation import evaluate
from benchmark.run.funnybirds_eval import open_funnybirds
from benchmark.run.identity import code_change, method_fingerprint, metrics_fingerprint
from benchmark.run.provenance import provenance
from benchmark.run.records import write_records
from benchmark.run.prepare import Prepared, prepare
from benchmark.run.store import RunDir, atomic_write_checked, atomic_write_json, default_cache_root, json_bytes, run_lock
from benchmark.run.checkpoint import load_checkpoint
from benchmark.run.training import deterministic_algorithms
from methods.common.precision import matmul_precision


def check_trained(run_dir: Path) -> RunSpec:
    """What :func:`load_trained` needs, checked without compute: a run directory with its spec and
    checkpoint, an importable method (an adapter named by import path must be on PYTHONPATH) and,
    for a real dataset, its data root on this machine. Returns the run's spec."""
    from benchmark.method_lookup import get_method_class

    rd = RunDir(run_dir)
    spec_data = rd.spec()
    if spec_data is None:
        raise ProtobenchError(f"{str(run_dir)!r} is not a run directory (no readable spec.json); give "
                              "RUNS_DIR/GRID/RUN_ID of a finished run")
    if not rd.checkpoint_path.exists() and not (rd.path / HEAD_FILE).exists():
        raise ProtobenchError(f"run {str(run_dir)!r} has no checkpoint.pt (nor the {HEAD_FILE} of a bundle made "
                              "with --checkpoints); run the grid first")
    spec = RunSpec.from_json(spec_data)
    get_method_class(spec.method)  # ProtobenchError naming the module and PYTHONPATH when it does not import
    if spec.dataset != "synthbirds" and not Path(spec.data_root).expanduser().exists():
        raise ProtobenchError(f"run {str(run_dir)!r} reads its dataset from {spec.data_root!r}, which does not "
                              "exist here; run the command where that path exists (the directory `protobench "
                              "run` ran in, for a relative path)")
    return spec


def load_trained(run_dir: Path, **overrides: object) -> Prepared:
    """The run's data, trunk and method with its final checkpoint loaded (training must be done)."""
    rd = RunDir(run_dir)
    spec = check_trained(run_dir).with_overrides(**overrides)
    prep = prepare(spec)
    if is_bundled(run_dir):
        prep.method.load_state_dict(_bundled_head(rd, prep.trunk.weights_checksum))
    else:
        checkpoint = load_checkpoint(rd.checkpoint_path)
        if checkpoint["stage_index"] < len(prep.method.stages()):
            raise ProtobenchError(f"run {str(run_dir)!r} has not finished training; run the grid again to finish it")
        prep.method.load_state_dict(checkpoint["method"])
    prep.method.to(prep.device).eval()
    return prep


def is_bundled(run_dir: Path) -> bool:
    """A run of a bundle (``protobench bundle --checkpoints``): its head as safetensors, no checkpoint."""
    return not RunDir(run_dir).checkpoint_path.exists() and (Path(run_dir) / HEAD_FILE).is_file()


def _bundled_head(rd: RunDir, trunk_checksum: str) -> dict[str, Any]:
    """A bundled run's head, once the trunk built here is the one it was trained on (by the
    checksum of its state dict, recorded in the run's provenance): the bundle references the trunk."""
    recorded = ((rd.result() or {}).get("provenance") or {}).get("weights_checksum")
    if recorded is not None and recorded != trunk_checksum:
        raise ProtobenchError(f"run {str(rd.path)!r} was trained on trunk weights with checksum {recorded}, but the "
                              f"trunk its spec builds here has {trunk_checksum}: the head would score on another "
                              "trunk; use the same weights (spec.weights, the timm and torch versions of provenance)")
    return read_head(rd.path / HEAD_FILE)


def run_cache_root(run_dir: Path) -> Path:
    """Where ``protobench run`` put the token cache of ``RUNS_DIR/<grid>/<run_id>``."""
    return default_cache_root(run_dir.parent.parent)


def reevaluate(run_dir: Path, *, map_pool: int | None = None, cache_dir: str | None = None,
               allow_code_change: bool = False, rescore: bool = False) -> dict[str, Any]:
    """Metrics of the run's final checkpoint, computed as the run computed them: its precision
    (autocast and matmul mode), deterministic-kernel choice, batch sizes and evaluation seeds, so
    a finished run re-evaluated gives its result.json metrics exactly (another ``map_pool`` aside).
    Written to ``RUN_DIR/evaluations/map_pool<k>.json`` with the precision and the code used.
    With the run's own ``map_pool`` (the default), also the run's per-image and per-prototype
    records (:mod:`benchmark.run.records`): how a run finished before they existed gets them.
    A run whose method code has changed since (benchmark/run/identity.py) is refused unless
    ``allow_code_change``: the numbers would be another code's; code refactored since with its
    behaviour identical (the probe lock says so) is not a change.
    ``rescore``: the new scores replace those of ``result.json`` (:func:`replace_scores`)."""
    result = RunDir(run_dir).result() or {}
    if rescore and not result:
        raise ProtobenchError(f"run {str(run_dir)!r} has no result.json to rescore; run the grid to finish it")
    recorded = result.get("method_fingerprint")
    own_map_pool = check_trained(run_dir).map_pool
    if rescore and map_pool not in (None, own_map_pool):  # before any compute
        raise ProtobenchError(f"--rescore replaces the run's own scores (map_pool {own_map_pool}); drop --map-pool "
                              f"{map_pool}, or evaluate without --rescore to write evaluations/ only")
    prep = load_trained(run_dir, **({} if map_pool is None else {"map_pool": map_pool}))
    spec = prep.spec
    if spec.evaluation_split != "test":
        raise ProtobenchError(f"{str(run_dir)!r} is a tuning trial, scored on the validation split; it is never "
                              "evaluated on test (train the study's best trial with `protobench run GRID "
                              "--hyperparameters tuned`)")
    fingerprint = method_fingerprint(spec.method)
    changed = code_change(spec.method, recorded, fingerprint).stale \
        if isinstance(recorded, str) and recorded != fingerprint else None
    if changed is not None and not allow_code_change:
        raise ProtobenchError(f"the code of method {spec.method!r} changed since run {str(run_dir)!r} was trained "
                              f"(its result is stale: {changed}): re-evaluating would score another code's numbers; "
                              "retrain it (protobench run GRID --rerun-stale) or pass --allow-code-change")
    cache_root = Path(cache_dir) if cache_dir else run_cache_root(run_dir)
    test_src, noisy_src = prep.test_sources(cache_root)
    with matmul_precision(spec.precision), deterministic_algorithms(spec.deterministic):
        evaluated = evaluate(prep.method, prep.test_set, test_src, noisy_src, batch_size=spec.eval_batch_size,
                             device=prep.device, map_pool=spec.map_pool, noise_seed=STABILITY_NOISE_SEED,
                             precision=spec.precision, train=prep.train_source(cache_root, augmented=False),
                             train_dataset=prep.train_set, initial=prep.initial_method(),
                             funnybirds=open_funnybirds(prep, cache_root, NO_PROGRESS))
    summary = evaluated.summary
    summary["provenance"] = {**provenance(prep.device), "precision": spec.precision,
                             "deterministic_algorithms": spec.deterministic, "method_fingerprint": fingerprint,
                             "metrics_fingerprint": metrics_fingerprint()}
    atomic_write_json(run_dir / "evaluations" / f"map_pool{spec.map_pool}.json", summary)
    if spec.map_pool == own_map_pool and not is_bundled(run_dir):  # a bundle's records are its manifest's
        write_records(run_dir, evaluated.tables)
    if rescore:
        replace_scores(run_dir, summary)
    return summary


def replace_scores(run_dir: Path, summary: dict[str, Any]) -> None:
    """Put a re-evaluation's scores (``summary``: metrics, notes, evaluation settings) into the
    run's ``result.json`` under the run's lock, with the current metrics fingerprint; the scores
    they replace, their fingerprint and the code that rescored are appended to
    ``provenance.rescored``. Written atomically: a failure leaves the old file whole."""
    rd = RunDir(run_dir)
    with run_lock(rd.path):
        result = rd.result() or {}
        scored = {key: value for key, value in summary.items() if key != "provenance"}
        earlier = {"metrics": result.get("metrics"), "metrics_fingerprint": result.get("metrics_fingerprint"),
                   "rescored_by": summary["provenance"]["code_version"]}
        provenance = dict(result.get("provenance") or {})
        provenance["rescored"] = [*provenance.get("rescored", []), earlier]
        updated = {**result, **scored, "metrics_fingerprint": summary["provenance"]["metrics_fingerprint"],
                   "provenance": provenance}
        atomic_write_checked(rd.result_path, json_bytes(updated))
