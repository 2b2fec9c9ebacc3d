"""``protobench plan``: what a grid will cost before anything is submitted — runs, job arrays
(one per job shape of the cluster profile), token caches to build, and GPU-hours.

Nothing here needs a dataset or a weights file: dataset sizes are the official split sizes,
epochs come from each method's stages (built on a tiny stand-in context), and per-epoch
costs come from ``protobench perf --out`` measurements from the target device or, by default,
from the FLOPs-and-bytes model of :mod:`benchmark.tools.costmodel` (calibrated on the paper's
RTX 8000 epochs) for the profile's ``device_model`` (default H100).
Datasets already on disk are checked as ``run`` checks them (:func:`check_present_data`).

Reading the training entry (:func:`training_read_seconds`), whatever the compute costs: an
entry that fits in the job's ``mem_gb`` is read once (the page cache keeps it); a larger one
(offline40's) is read every epoch, from the shared storage at the profile's ``storage_gb_s``, or
with ``cache_stage = "local"`` copied once at that rate and read at ``local_storage_gb_s``.

Measured costs (``plan --perf FILE``): a run is charged the measurement of its method on the
same backbone, T (tokens), d (width), C and J when the file has one: per stage, epochs ×
the measured step seconds per training image × the run's training images, plus the measured
schedule hooks (discovery, push, last-layer phases) × training images / measured training
images, plus the measured evaluation × test images / measured test images — images are the
only extrapolation. Otherwise the closest measurement of the method (same backbone first) is
scaled by :meth:`Shape.flops`, an appended block's plus the prototype heads' multiply-adds
per image (∝ T·(12·d² + 2·T·d) + C·J·T·d) — the cost of a method without an appended
block, or dominated by non-matmul work (EM, Sinkhorn), scales less exactly; each run says
which measurement it used and what was scaled. Token caches cost one pass at the measured
bare-trunk rate of their backbone (unscaled: the mean measured rate when that backbone was not
measured — measure each backbone of the grid for its cache cost).
"""
from __future__ import annotations

import inspect
import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.cluster import ClusterProfile, JobShape, pack_runs
from benchmark.cache.sizing import cache_entry_bytes
from benchmark.config import RunSpec
from benchmark.tools.costmodel import DEFAULT_DEVICE, CostModel, calibrate, device
from benchmark.data.synthbirds import SYNTHBIRDS_DEFAULTS
from benchmark.errors import ProtobenchError
from benchmark.grid import GridSpec

GB = 10**9  # cache sizes are printed in decimal gigabytes

# Official split sizes (train, test).
SPLIT_IMAGES = {"cub": (5994, 5794), "dogs": (12000, 8580), "cars": (8144, 8041)}


def augmentation_factor(augmentation: str) -> int:
    """Training images per original image (offline40: every operation × copies_per_op copies)."""
    if augmentation == "none":
        return 1
    from benchmark.data.augment import OPERATIONS, OfflineAugmentedDataset

    copies = inspect.signature(OfflineAugmentedDataset).parameters["copies_per_op"].default
    return len(OPERATIONS) * copies


def split_images(spec: RunSpec, split: str) -> int:
    """Images of a split, from the official sizes (synthbirds: from its generation arguments)."""
    if spec.dataset == "synthbirds":
        args = {**SYNTHBIRDS_DEFAULTS, **spec.dataset_args}
        per_class = args["images_per_class"]
        train = math.ceil(per_class / 2)  # images 1, 3, 5, … of each class train
        return args["classes"] * (train if split == "train" else per_class - train)
    train, test = SPLIT_IMAGES[spec.dataset]
    return train if split == "train" else test


def stage_epochs(spec: RunSpec) -> list[tuple[str, int]]:
    """(name, epochs) of every stage of the run's method with its hyperparameters."""
    from benchmark.method_lookup import stand_in_method

    return [(stage.name, stage.epochs) for stage in stand_in_method(spec.method, spec.method_args,
                                                                     spec.prototypes_per_class).stages()]


def run_epochs(spec: RunSpec) -> int:
    """Epochs of every stage of the run's method with its hyperparameters."""
    return sum(epochs for _, epochs in stage_epochs(spec))


def check_present_data(runs: tuple[RunSpec, ...]) -> None:
    """Decode the images of every dataset whose ``data_root`` exists, as ``run`` does before
    compute (:func:`benchmark.run.runner.check_data`); absent datasets are left to ``run``."""
    from benchmark.run.runner import check_data

    present = {(s.dataset, s.data_root, s.image_size): s for s in runs
               if s.data_root and Path(s.data_root).expanduser().is_dir()}
    for spec in present.values():
        check_data(spec)


# ---- per-epoch costs -------------------------------------------------------------------------
# Widths of the registry's trunks (timm: vit_small embed_dim 384, vit_base 768) and class counts
# of the official datasets, for scaling a measurement to another run's shape.
DATASET_CLASSES = {"cub": 200, "dogs": 120, "cars": 196}


@dataclass(frozen=True)
class Shape:
    """What a method's per-image cost depends on besides the method: tokens T, width d, C, J."""

    tokens: int
    width: int
    classes: int
    prototypes_per_class: int

    def flops(self) -> float:
        """Multiply-adds per image of one appended pre-norm transformer block (per token: QKV and
        output projections 4·d², MLP of ratio 4 8·d², attention scores and weighted sum 2·T·d)
        plus the prototype similarities (C·J·d per token): the scaling model of ``plan --perf``."""
        return self.block_macs() + self.classes * self.prototypes_per_class * self.tokens * self.width

    def block_macs(self) -> float:
        """Multiply-adds per image of one pre-norm ViT block: T·(12·d² + 2·T·d)."""
        t, d = self.tokens, self.width
        return t * (12 * d * d + 2 * t * d)

    def describe(self) -> str:
        return f"T={self.tokens} d={self.width} C={self.classes} J={self.prototypes_per_class}"


def run_shape(spec: RunSpec) -> Shape:
    from benchmark.backbones import backbone_spec

    backbone = backbone_spec(spec.backbone)
    grid = backbone.grid(spec.image_size)
    width = int(spec.backbone_args.get("embed_dim", backbone.architecture.embed_dim))
    if spec.dataset == "synthbirds":
        classes = int({**SYNTHBIRDS_DEFAULTS, **spec.dataset_args}["classes"])
    else:
        classes = DATASET_CLASSES[spec.dataset]
    return Shape(grid[0] * grid[1], width, classes, spec.prototypes_per_class)


def trunk_macs(spec: RunSpec) -> float:
    """Forward multiply-adds per image of the run's whole trunk: depth × one block at its shape."""
    from benchmark.backbones import backbone_spec

    depth = int(spec.backbone_args.get("depth", backbone_spec(spec.backbone).architecture.depth))
    return depth * run_shape(spec).block_macs()


def push_count(spec: RunSpec) -> int:
    """Push epochs of the run's method (``push_epochs``; 0 for methods without a push)."""
    from benchmark.method_lookup import stand_in_method

    return len(getattr(stand_in_method(spec.method, spec.method_args, spec.prototypes_per_class),
                       "push_epochs", ()))


@dataclass(frozen=True)
class Measurement:
    """One row of ``protobench perf --out``: a method's costs on one shape."""

    label: str
    method: str
    backbone: str
    shape: Shape
    train_images: int
    test_images: int
    step_seconds_per_image: dict[str, float]  # stage name → median step seconds ÷ batch size
    last_stage: str  # the last training stage (charged to stages the measurement lacks)
    hook_seconds: float  # every on_stage_start / on_epoch_end call of the measured schedule
    evaluate_seconds: float
    trunk_images_per_second: float
    device: str

    def run_seconds(self, spec: RunSpec, train_images: int, test_images: int) -> float:
        """Seconds of ``spec`` at this measurement's shape: per stage, epochs × measured step
        seconds per image × training images; hooks × training images / measured training
        images (push and last-layer passes read the training split; under offline40 push reads
        the clean split, so this is an upper bound); evaluation × test images / measured test
        images."""
        steps = sum(epochs * self.step_seconds_per_image.get(name, self.step_seconds_per_image[self.last_stage])
                    for name, epochs in stage_epochs(spec)) * train_images
        return (steps + self.hook_seconds * train_images / self.train_images
                + self.evaluate_seconds * test_images / self.test_images)


@dataclass(frozen=True)
class Costs:
    """Measurements from ``perf`` (used where they cover a run) and the FLOPs-and-bytes model (the
    rest); ``source`` says where the numbers come from."""

    measurements: tuple[Measurement, ...]
    model: CostModel
    source: str

    def _closest(self, spec: RunSpec, shape: Shape) -> Measurement | None:
        mine = [m for m in self.measurements if m.method == spec.method]
        exact = [m for m in mine if m.backbone == spec.backbone and m.shape == shape]
        same_backbone = [m for m in mine if m.backbone == spec.backbone]
        return (exact or same_backbone or mine or [None])[0]

    def run_seconds(self, spec: RunSpec, epochs: int) -> tuple[float, str]:
        """Compute seconds of the whole run (every epoch of every stage, pushes, evaluation) and
        which cost produced them; storage reads are :func:`training_reads`."""
        train = split_images(spec, "train") * augmentation_factor(spec.augmentation)
        shape = run_shape(spec)
        found = self._closest(spec, shape)
        if found is not None:
            seconds = found.run_seconds(spec, train, split_images(spec, "test"))
            if found.backbone == spec.backbone and found.shape == shape:
                return seconds, f"measured ({found.label})"
            factor = shape.flops() / found.shape.flops()
            return seconds * factor, (f"scaled from measured ({found.label}, {found.shape.describe()}) "
                                      f"by block + head FLOPs ×{factor:.2f} to {shape.describe()}")
        test = split_images(spec, "test") * (2 if spec.is_cub_format else 1)  # clean + noisy views
        cost = self.model.run_cost(method=spec.method, precision=spec.precision, head_macs=shape.flops(),
                                   live_trunk_macs=0.0 if spec.cache else trunk_macs(spec), epochs=epochs,
                                   pushes=push_count(spec), train_images=train,
                                   push_images=split_images(spec, "train"), test_images=test)
        calibrated = spec.method == "nppp" or spec.method in self.model.calibration.overhead_bytes_per_image
        return cost.total, f"model ({self.model.device.name}{'' if calibrated else ', FLOPs only'})"

    def cache_seconds(self, need: CacheNeed) -> float:
        """One trunk pass over the entry's images: the measured bare-trunk rate of its backbone (the
        mean measured rate if it was not measured), else the model's trunk forward at fp32."""
        rates = [m.trunk_images_per_second for m in self.measurements if m.backbone == need.backbone] \
            or [m.trunk_images_per_second for m in self.measurements]
        if rates:
            return need.images * len(rates) / sum(rates)
        return self.model.compute_seconds(need.trunk_macs * need.images, "fp32")


PAPER_SHAPE = Shape(tokens=256, width=768, classes=200, prototypes_per_class=5)  # tab:supp_runtime: CUB,
PAPER_TRUNK_DEPTH = 12  # DINOv2 ViT-B/14 at 224×224 (16×16 patches), J = 5


def model_costs(device_model: str = DEFAULT_DEVICE) -> Costs:
    """The FLOPs-and-bytes model on ``device_model``, calibrated on the paper's RTX 8000 epochs."""
    calibration = calibrate(PAPER_TRUNK_DEPTH * PAPER_SHAPE.block_macs(), PAPER_SHAPE.flops())
    model = CostModel(device(device_model), calibration)
    return Costs((), model, model.describe())


def _measurement(row: dict[str, Any]) -> Measurement:
    stages = row["stages"]
    return Measurement(
        label=str(row["run"]), method=str(row["method_name"]), backbone=str(row["backbone"]),
        shape=Shape(int(row["tokens"]), int(row["embed_dim"]), int(row["classes"]), int(row["prototypes_per_class"])),
        train_images=int(row["train_images"]), test_images=int(row["test_images"]),
        step_seconds_per_image={str(s["name"]): float(s["step_seconds_per_image"]) for s in stages},
        last_stage=str(row.get("last_training_stage", stages[-1]["name"])),
        hook_seconds=sum(float(s["on_stage_start_seconds"]) + float(s["on_epoch_end_seconds"]) for s in stages),
        evaluate_seconds=float(row["evaluate_seconds"]),
        trunk_images_per_second=float(row["trunk_images_per_second"]), device=str(row["device"]))


PERF_FIELDS = ("run", "method_name", "backbone", "tokens", "embed_dim", "classes", "prototypes_per_class",
               "train_images", "test_images", "stages", "evaluate_seconds", "trunk_images_per_second", "device")


def load_perf(path: str | Path, device_model: str = DEFAULT_DEVICE) -> Costs:
    """Costs from ``protobench perf --out FILE`` rows (the model on ``device_model`` for runs whose
    method they do not cover)."""
    path = Path(path)
    try:
        rows = json.loads(path.read_text())
    except FileNotFoundError:
        raise ProtobenchError(f"perf file {str(path)!r} does not exist; write one with `protobench perf --out FILE`") from None
    except json.JSONDecodeError as err:
        raise ProtobenchError(f"perf file {str(path)!r} is not JSON ({err}); write it with `protobench perf --out`") from err
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise ProtobenchError(f"perf file {str(path)!r} is not the output of `protobench perf --out`: "
                              "expected a list of rows")
    for row in rows:
        missing = [k for k in PERF_FIELDS if k not in row]
        if missing:
            raise ProtobenchError(f"perf file {str(path)!r}: row {row.get('run', '?')!r} lacks "
                                  f"{', '.join(missing)}; it was written by an older `protobench perf`: "
                                  "measure again with `protobench perf … --out FILE`")
    try:
        measurements = tuple(_measurement(r) for r in rows)
    except (TypeError, ValueError, KeyError) as err:
        raise ProtobenchError(f"perf file {str(path)!r} has a malformed row ({err}); write it with `protobench perf --out`") from err
    devices = sorted({m.device for m in measurements})
    return Costs(measurements, model_costs(device_model).model,
                 f"measured: {path} (protobench perf on {', '.join(devices)}, token cache on), used instead of "
                 f"the FLOPs model wherever it has the run's method")


# ---- the plan --------------------------------------------------------------------------------
@dataclass(frozen=True)
class CacheNeed:
    """One token-cache entry the grid reads (backbone × dataset × split × view) and its size."""

    backbone: str
    dataset: str
    split: str
    view: str  # "clean" | "noise seed S" | "offline40 seed S" (S: the fixed augmentation seed)
    early_tokens: bool
    images: int
    image_size: int
    dtype: str
    bytes: int  # the entry's files, from its layout (benchmark.cache.tokens.entry_layout)
    trunk_macs: float  # forward multiply-adds per image of the trunk that writes it (plan.trunk_macs)
    noise_seed: int | None = None  # the stability-noise view's seed; None: clean images

    @property
    def view_key(self) -> dict[str, Any]:
        """The view as an entry's manifest records it (``benchmark.cache.tokens.View.key``)."""
        return {"kind": "clean"} if self.noise_seed is None else {"kind": "noise", "seed": self.noise_seed}


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
        from benchmark.grid import cache_group

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


def cache_needs(spec: RunSpec) -> list[tuple[tuple[Any, ...], CacheNeed]]:
    """The cache entries a run reads, each with the identity that decides sharing. Early-block
    tokens are stored for the training split only (``runner.needs_early_tokens``); the noise view
    is the fixed ``STABILITY_NOISE_SEED``'s, one entry per trunk and dataset."""
    if not spec.cache:
        return []
    from benchmark.cache.noise import STABILITY_NOISE_SEED
    from benchmark.method_lookup import get_method_class

    early = spec.cache_early_tokens or get_method_class(spec.method).needs_early_tokens
    trunk = (spec.backbone, spec.weights_id or spec.weights, json.dumps(spec.backbone_args, sort_keys=True),
             spec.dataset, spec.data_root, json.dumps(spec.dataset_args, sort_keys=True), spec.image_size,
             spec.cache_dtype)
    views = [("train", "clean", split_images(spec, "train"), early, None),
             ("test", "clean", split_images(spec, "test"), False, None)]
    if spec.augmentation != "none":  # the epochs read the copies, push the clean split (runner.py)
        from benchmark.data.augment import AUGMENTATION_SEED

        views.append(("train", f"{spec.augmentation} seed {AUGMENTATION_SEED}",
                      split_images(spec, "train") * augmentation_factor(spec.augmentation), early, None))
    if spec.is_cub_format:
        views.append(("test", f"noise seed {STABILITY_NOISE_SEED}", split_images(spec, "test"), False,
                      STABILITY_NOISE_SEED))
    return [((*trunk, split, view, with_early),
             CacheNeed(spec.backbone, spec.dataset, split, view, with_early, images, spec.image_size,
                       spec.cache_dtype, cache_entry_bytes(spec, images, with_early), trunk_macs(spec),
                       noise_seed))
            for split, view, images, with_early, noise_seed in views]


def grid_cache_needs(runs: Iterable[RunSpec]) -> list[tuple[CacheNeed, int]]:
    """Every distinct cache entry of ``runs``, with the number of runs reading it."""
    readers: Counter[tuple[Any, ...]] = Counter()
    needs: dict[tuple[Any, ...], CacheNeed] = {}
    for spec in runs:
        for key, need in cache_needs(spec):
            readers[key] += 1
            needs.setdefault(key, need)
    return [(needs[k], readers[k]) for k in needs]


def make_plan(grid: GridSpec, profile: ClusterProfile, costs: Costs) -> Plan:
    runs = []
    for spec in grid.runs:
        hours, source, reads = run_hours(costs, spec, profile)
        runs.append(RunCost(spec, profile.shape_for(spec), run_epochs(spec), hours, source, reads))
    caches = grid_cache_needs(grid.runs)
    # one trunk pass per entry, and writing it to the shared storage
    cache_hours = sum(costs.cache_seconds(need) + need.bytes / (profile.storage_gb_s * GB) for need, _ in caches) / 3600
    return Plan(grid, profile, tuple(runs), tuple(caches), cache_hours, costs)


def print_plan(plan: Plan) -> None:
    from rich.table import Table

    from benchmark.progress import output_console

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
    console.print(f"storage: token-cache entries written, and training entries read, at {plan.profile.storage_gb_s:g} "
                  f"GB/s from the shared storage (once if within the job's mem_gb, else every epoch; "
                  f"cache_stage = \"local\": copied once, then read at {plan.profile.local_storage_gb_s:g} GB/s); "
                  f"job start-up {plan.profile.task_startup_s} s per array task (profile: storage_gb_s, "
                  f"local_storage_gb_s, task_startup_s)")
    print_epoch_reads(plan)


def print_epoch_reads(plan: Plan) -> None:
    """Training entries larger than a job's memory, read every epoch: the I/O time per epoch, and
    ``cache_stage = "local"`` recommended where it is longer than the epoch's compute."""
    from benchmark.progress import output_console

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
