"""``protobench perf``: side-by-side timings in one process, reported as ratios.

Every quantity that two rows are compared on is timed *interleaved*, batch by batch, so a
change of machine load hits every contender alike:

- inference: on each batch the bare trunk, then trunk + each method's logits;
- training steps: on each batch one step (loss, backward, optimiser step, ``after_step``) of
  every stage of every method, read from the token cache, and one step of the first row's last
  stage recomputing the trunk (``cache = false``);

and reported as the median over batches with its spread (quartiles and min–max). The hooks
of each method's schedule (``on_stage_start``: discovery, initialisation; ``on_epoch_end``:
push, projection, last-layer phases — called for every epoch of the schedule, as training
does) and one ``evaluate`` pass are whole-split passes, timed once each.

A run with ``measure_live_epoch`` records the mean epoch of its schedule with the trunk in the
loop (:func:`benchmark.run.timing.live_trunk_epoch_seconds`) next to the cached epoch time in
``result.json``.

Protocol of the paper's runtime table: batch 128, five warm-up batches, the timed region
starts after the images are on the device.
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from benchmark.backbones import FrozenTrunk
from benchmark.cache.frozen import WithFrozenFeatures, compute_frozen_features
from benchmark.cache.noise import STABILITY_NOISE_SEED
from benchmark.config import RunSpec
from benchmark.grid import GridSpec, parse_grid
from benchmark.method_lookup import declaration
from benchmark.run.evaluation import evaluate
from benchmark.run.prepare import Prepared, prepare
from benchmark.run.timing import WARMUP_BATCHES, head_forward, image_batches, interleaved_seconds, timed
from benchmark.run.steps import SourceTrainData
from benchmark.run.training import make_optimizer, run_epoch
from methods.base import PrototypeMethod, Stage, set_trainable

TIMED_BATCHES = 20
PAPER_SCALE_METHODS = ("vmfproto", "protopnet", "deformable_protopnet", "tesnet", "evalprotopnet", "mgproto",
                       "nppp", "pipnet", "kmex", "comfe")


def paper_scale_grid(overrides: dict[str, Any] | None = None) -> GridSpec:
    """``perf --paper-scale``: the paper's runtime setting (full-size DINOv2 ViT-B/14, C = 200,
    J = 5, batch 128) with random weights (same compute as the pretrained ones) on synthbirds
    generated with 200 classes × 2 images (one training, one test image per class): C = 200 heads
    at the smallest dataset, since timings are per batch and per image — timed batches draw
    128 of the 200 training images, so no CUB-sized dataset is generated or cached. A method that
    clusters each class's training images into its J prototypes (``clusters_each_class``: KMEx)
    runs on 200 × 2J images of its own."""
    per_class = 5
    clustering = [m for m in PAPER_SCALE_METHODS if declaration(m).clusters_each_class]
    others = [m for m in PAPER_SCALE_METHODS if m not in clustering]
    document = {
        "name": "perf_paper_scale",
        "defaults": {"dataset": "synthbirds", "data_root": "data/synthbirds-paper-scale",
                     "dataset_args": {"classes": 200, "images_per_class": 2, "seed": 0},
                     "backbone": "dinov2_vitb14", "weights": "random", "prototypes_per_class": per_class,
                     "batch_size": 128, "eval_batch_size": 128, "seed": 0},
        "sweep": [{"method": others},
                  {"method": clustering, "data_root": "data/synthbirds-paper-scale-clustered",  # half the images train
                   "dataset_args": {"classes": 200, "images_per_class": 2 * per_class, "seed": 0}}],
    }
    return parse_grid(document, source="protobench perf --paper-scale", overrides=overrides)


def _trunk_identity(spec: RunSpec) -> str:
    """What makes two runs' trunks the same module: backbone, weights, overrides, size, device."""
    return json.dumps([spec.backbone, spec.weights, spec.weights_id, spec.backbone_args, spec.image_size,
                       spec.device], sort_keys=True)


def prepare_sharing_trunks(specs: list[RunSpec]) -> list[Prepared]:
    """:func:`benchmark.run.prepare.prepare` for each run, loading each distinct trunk once (the
    seven methods of ``perf.toml`` share one)."""
    trunks: dict[str, FrozenTrunk] = {}
    preps = []
    for spec in specs:
        prep = prepare(spec, trunk=trunks.get(_trunk_identity(spec)))
        trunks.setdefault(_trunk_identity(spec), prep.trunk)
        preps.append(prep)
    return preps


# ---- statistics ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Spread:
    """Median, quartiles (inclusive method) and range of repeated measurements."""

    median: float
    q1: float
    q3: float
    low: float
    high: float
    count: int

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        if not values:
            raise ValueError("no measurements")
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else values * 3
        return cls(statistics.median(values), q1, q3, min(values), max(values), len(values))

    def to_json(self) -> dict[str, float]:
        return {"median": self.median, "q1": self.q1, "q3": self.q3, "min": self.low, "max": self.high,
                "count": self.count}


def _index_batches(n: int, batch_size: int, count: int, seed: int) -> list[torch.Tensor]:
    """``count`` training batches of distinct images (all ``n`` cycled when ``n < batch_size``),
    each a seeded random draw: the same batches for every contender."""
    batches = []
    for b in range(count):
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100_003 + b))
        batches.append(order.repeat(math.ceil(batch_size / n))[:batch_size])
    return batches


# ---- inference ---------------------------------------------------------------------------------
def inference_fault(ratio: dict[str, float]) -> bool:
    """A method's inference ratio (trunk ÷ trunk + method) above 1 beyond its spread (lower
    quartile > 1): trunk + method ran faster than the trunk alone, which only a measurement
    fault (load, frequency scaling) produces."""
    return ratio["q1"] > 1.0


# ---- training steps and hooks ----------------------------------------------------------------
@dataclass
class _Contender:
    """One timed training step kind: a stage of a method over a token source."""

    row: int
    method: PrototypeMethod
    stage: Stage
    optimizer: torch.optim.Optimizer | None
    source: Any
    device: torch.device
    epoch: int = 0  # the global epoch the step runs as (a phase of the stage: ``phase_epochs``)

    def step(self, indices: torch.Tensor) -> float:
        """Seconds of one harness step (``run_epoch`` over one batch): loss, backward, optimiser
        step, ``after_step``."""
        set_trainable(self.method, self.stage)
        return timed(self.device, lambda: run_epoch(
            self.method, self.source, self.stage, self.optimizer, indices, batch_size=len(indices),
            device=self.device, epoch=self.epoch))


def _phases(method: PrototypeMethod, stage: Stage, first_epoch: int) -> list[tuple[int, int]]:
    """(global epoch, epochs it lasts) of each phase of ``stage`` (:meth:`PrototypeMethod.phase_epochs`)."""
    end = first_epoch + stage.epochs
    starts = sorted({e for e in method.phase_epochs(stage, first_epoch) if first_epoch <= e < end} | {first_epoch})
    return [(e, nxt - e) for e, nxt in zip(starts, [*starts[1:], end])]


def _walk_schedule(row: int, prep: Prepared, cached: Any,
                   warmup: int) -> tuple[list[list[tuple[_Contender, int]]], list[dict[str, Any]]]:
    """Run the method's schedule in order with ``warmup`` steps per phase of each stage instead
    of full epochs, timing its hooks: ``on_stage_start`` once per stage, ``on_epoch_end`` after
    every epoch of the schedule (as :func:`benchmark.run.training.train` calls them). Returns a
    step contender per phase of each stage (``phase_epochs``; the method is brought to the state
    of the phase's epoch by ``assume_epoch``) and the hook timings."""
    method, device, spec = prep.method, prep.device, prep.spec
    data = SourceTrainData(cached, device, spec.seed)
    warm_batches = _index_batches(len(cached), spec.batch_size, warmup, spec.seed + 1)
    contenders, stages = [], []
    global_epoch = 0
    for stage in method.stages():
        if stage.epochs == 0:
            continue
        set_trainable(method, stage)
        optimizer = make_optimizer(stage) if stage.trains else None
        start = timed(device, lambda: method.on_stage_start(stage, global_epoch, data))
        phases = []
        for epoch, epochs in _phases(method, stage, global_epoch):
            method.assume_epoch(epoch)
            contender = _Contender(row, method, stage, optimizer, cached, device, epoch)
            for indices in warm_batches:
                contender.step(indices)
            phases.append((contender, epochs))
        epoch_end = 0.0
        with torch.no_grad():
            for epoch in range(global_epoch, global_epoch + stage.epochs):
                epoch_end += timed(device, lambda: method.on_epoch_end(stage, epoch, data))
        global_epoch += stage.epochs
        contenders.append(phases)
        stages.append({"name": stage.name, "epochs": stage.epochs, "trains": stage.trains,
                       "on_stage_start_seconds": start, "on_epoch_end_seconds": epoch_end})
    return contenders, stages


def _evaluate_seconds(prep: Prepared, cache_root: Path) -> tuple[float, int]:
    clean, noisy = prep.test_sources(cache_root)
    spec = prep.spec
    seconds = timed(prep.device, lambda: evaluate(
        prep.method, prep.test_set, clean, noisy, batch_size=spec.eval_batch_size, device=prep.device,
        map_pool=spec.map_pool, noise_seed=STABILITY_NOISE_SEED))
    return seconds, len(clean)


def _frozen_features_seconds(prep: Prepared, cached: Any) -> float | None:
    """Seconds of the method's frozen per-image features over the training split (vMFProto's gate:
    its attention map refined by a PCA, ``eigh``), computed once per run before its epochs; None
    for a method without any. Timed again here, warm, apart from opening the cache entry."""
    if not isinstance(cached, WithFrozenFeatures):
        return None
    return timed(prep.device, lambda: compute_frozen_features(
        cached.source, prep.method.frozen_features, batch_size=prep.spec.eval_batch_size, device=prep.device))


def _describe(prep: Prepared) -> str:
    spec = prep.spec
    return f"{spec.method} J={spec.prototypes_per_class}" + ("" if spec.variant == "default" else f" [{spec.variant}]")


def measure(preps: list[Prepared], cache_root: Path, *, warmup: int = WARMUP_BATCHES,
            timed_batches: int = TIMED_BATCHES, baseline: int = 0) -> list[dict[str, Any]]:
    """Timings of several prepared runs side by side in this process (rows in ``preps`` order;
    ratios relative to row ``baseline``). The step recomputing the trunk is timed for the first
    run only (its cost is the trunk's, whatever the method)."""
    if timed_batches < 1 or warmup < 0:
        raise ValueError("timed_batches must be ≥ 1 and warmup ≥ 0")
    first = preps[0]
    device = first.device
    trunk = first.trunk

    # inference: bare trunk, then every method, on each batch
    for prep in preps:
        prep.method.to(device).eval()
    images = image_batches(first.test_set, first.spec.eval_batch_size, warmup + timed_batches, device)
    seconds = interleaved_seconds([trunk] + [head_forward(p.trunk, p.method) for p in preps], images, device, warmup)
    trunk_seconds, head_seconds = seconds[0], seconds[1:]

    # hooks, in schedule order, with warm-up steps of every stage
    walked, frozen_seconds = [], []
    for k, prep in enumerate(preps):
        cached = prep.train_source(cache_root)
        frozen_seconds.append(_frozen_features_seconds(prep, cached))
        contenders, stages = _walk_schedule(k, prep, cached, warmup)
        walked.append((cached, contenders, stages))
    steppers = [c for _, contenders, _ in walked for phases in contenders for c, _ in phases]
    last_trains: dict[int, list[tuple[_Contender, int]]] = {}
    for _, contenders, _ in walked:
        for phases in contenders:
            if phases[0][0].stage.trains:
                last_trains[phases[0][0].row] = phases
    live_method = last_trains[0][0][0] if 0 in last_trains else steppers[0]
    live = _Contender(0, live_method.method, live_method.stage, live_method.optimizer,
                      first.train_source(None), device, live_method.epoch)
    live.step(_index_batches(len(live.source), first.spec.batch_size, 1, first.spec.seed + 2)[0])  # warm-up

    # training steps: every stage of every method, and the live-trunk step, on each batch
    step_seconds: dict[int, list[float]] = {id(c): [] for c in [*steppers, live]}
    for indices in _index_batches(len(walked[0][0]), first.spec.batch_size, timed_batches, first.spec.seed):
        for c in [*steppers, live]:
            step_seconds[id(c)].append(c.step(indices))

    def weighted(phases: list[tuple[_Contender, int]]) -> list[float]:
        """Per timed batch, a stage's step seconds as its epochs average them: each phase's step
        weighted by the epochs it lasts."""
        total = sum(epochs for _, epochs in phases)
        return [sum(epochs * step_seconds[id(c)][b] for c, epochs in phases) / total for b in range(timed_batches)]

    rows = []
    base = weighted(last_trains[baseline]) if baseline in last_trains else None
    for k, (prep, (cached, contenders, stages)) in enumerate(zip(preps, walked)):
        spec = prep.spec
        batch = spec.batch_size
        for phases, stage in zip(contenders, stages):
            stage["phases"] = [{"epoch": c.epoch, "epochs": epochs, "step_seconds": Spread.of(step_seconds[id(c)]).to_json()}
                               for c, epochs in phases]
            stage["step_seconds"] = Spread.of(weighted(phases)).to_json()
            stage["step_seconds_per_image"] = stage["step_seconds"]["median"] / batch
        evaluate_s, test_images = _evaluate_seconds(prep, cache_root)
        mine = weighted(last_trains[k]) if k in last_trains else None
        row: dict[str, Any] = {
            "run": spec.label,
            "method": _describe(prep),
            "method_name": spec.method,
            "backbone": spec.backbone,
            "classes": prep.method.num_classes,
            "prototypes_per_class": spec.prototypes_per_class,
            "embed_dim": prep.trunk.embed_dim,
            "tokens": prep.trunk.grid[0] * prep.trunk.grid[1],
            "device": str(device) + (f": {torch.cuda.get_device_name(device)}" if device.type == "cuda" else ""),
            "batch_size": batch,
            "eval_batch_size": spec.eval_batch_size,
            "train_images": len(cached),
            "test_images": test_images,
            "timed_batches": timed_batches,
            "warmup_batches": warmup,
            "trunk_images_per_second": spec.eval_batch_size * len(trunk_seconds) / sum(trunk_seconds),
            "method_inference_images_per_second": spec.eval_batch_size * len(head_seconds[k]) / sum(head_seconds[k]),
            # throughput ratio per batch: trunk seconds / (trunk + method) seconds
            "inference_ratio_method_over_trunk": Spread.of(
                [t / h for t, h in zip(trunk_seconds, head_seconds[k])]).to_json(),
            "stages": stages,
            "evaluate_seconds": evaluate_s,
            # once per run, over the training split (and again over the test views in evaluation)
            "frozen_features_seconds_per_image": None if frozen_seconds[k] is None else frozen_seconds[k] / len(cached),
        }
        row["inference_measurement_fault"] = inference_fault(row["inference_ratio_method_over_trunk"])
        if mine is not None:
            row["last_training_stage"] = last_trains[k][0][0].stage.name
            row["epoch_seconds_from_cache"] = statistics.median(mine) / batch * len(cached)
            if base is not None:
                row["epoch_ratio_over_baseline"] = Spread.of([a / b for a, b in zip(mine, base)]).to_json()
        if base is not None:
            for phases, stage in zip(contenders, stages):
                for (c, _), phase in zip(phases, stage["phases"]):
                    phase["step_ratio_over_baseline"] = Spread.of(
                        [a / b for a, b in zip(step_seconds[id(c)], base)]).to_json()
        if k == 0:
            live_s, cached_s = step_seconds[id(live)], step_seconds[id(live_method)]
            row["epoch_seconds_recomputing_trunk"] = statistics.median(live_s) / batch * len(cached)
            row["epoch_speedup_from_cache"] = Spread.of([a / b for a, b in zip(live_s, cached_s)]).to_json()
        rows.append(row)
    return rows
