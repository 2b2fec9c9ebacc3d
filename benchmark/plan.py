"""``protobench plan``: what a grid will cost before anything is submitted — runs, job arrays
(one per job shape of the cluster profile), token caches to build, and GPU-hours.

Nothing here needs a dataset or a weights file: dataset sizes are the official split sizes,
epochs come from each method's stages (built on a tiny stand-in context), and per-epoch
costs come from ``protobench perf --out`` measurements or, by default, from the paper.
Datasets already on disk are checked as ``run`` checks them (:func:`check_present_data`).

Default per-epoch costs — source: the paper's "Computational Cost" section
(``paper/vmfproto.tex``, Table ``tab:supp_runtime``; also ``reports/paper/runtime.csv``):
CUB-200-2011 (5,994 training images), DINOv2 ViT-B/14, J = 5, batch 128, mean epoch of a
clean 10-epoch run on one NVIDIA Quadro RTX 8000: NPPP 76.9 s, vMFProto 206.8 s; forward-only
inference NPPP 189.0 img/s, vMFProto 73.0 img/s. The paper times no other method and no
other backbone, so the other methods are charged NPPP's epoch and every backbone ViT-B/14's
(an over-estimate for ViT-S). A run's cost is epoch cost × (its training images / 5,994) ×
its epochs (every epoch of every stage); a token cache costs one trunk pass over its images
at NPPP's inference rate (trunk + a light head: an upper bound for the trunk alone).
"""
from __future__ import annotations

import inspect
import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.cluster import ClusterProfile, JobShape
from benchmark.config import RunSpec
from benchmark.data.synthbirds import SYNTHBIRDS_DEFAULTS
from benchmark.errors import ProtobenchError
from benchmark.grid import GridSpec

PAPER_SOURCE = ("paper Table tab:supp_runtime (CUB, DINOv2 ViT-B/14, J=5, batch 128, "
                "Quadro RTX 8000)")
PAPER_EPOCH_SECONDS = {"nppp": 76.9, "vmfproto": 206.8}  # CUB epoch, 5,994 training images
PAPER_STAND_IN = "nppp"  # the cost charged to methods the paper did not time
PAPER_TRUNK_IMAGES_PER_SECOND = 189.0  # NPPP's forward-only inference
CUB_TRAIN_IMAGES = 5994

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


def run_epochs(spec: RunSpec) -> int:
    """Epochs of every stage of the run's method with its hyperparameters."""
    from methods.registry import stand_in_method

    return sum(stage.epochs for stage in stand_in_method(spec.method, spec.method_args,
                                                         spec.prototypes_per_class).stages())


def check_present_data(runs: tuple[RunSpec, ...]) -> None:
    """Decode the images of every dataset whose ``data_root`` exists, as ``run`` does before
    compute (:func:`benchmark.runner.check_data`); absent datasets are left to ``run``."""
    from benchmark.runner import check_data

    present = {(s.dataset, s.data_root, s.image_size): s for s in runs
               if s.data_root and Path(s.data_root).expanduser().is_dir()}
    for spec in present.values():
        check_data(spec)


# ---- per-epoch costs -------------------------------------------------------------------------
@dataclass(frozen=True)
class Costs:
    """Seconds per training image per epoch, by (method, backbone) and by method, and the
    trunk's images/s; ``source`` says where the numbers come from."""

    per_image: dict[tuple[str, str], float]
    per_image_method: dict[str, float]
    trunk_images_per_second: float
    source: str

    def seconds_per_image(self, spec: RunSpec) -> tuple[float, str]:
        if (spec.method, spec.backbone) in self.per_image:
            return self.per_image[(spec.method, spec.backbone)], "measured"
        if spec.method in self.per_image_method:
            return self.per_image_method[spec.method], "measured (other backbone)"
        name = spec.method if spec.method in PAPER_EPOCH_SECONDS else PAPER_STAND_IN
        note = "paper" if name == spec.method else f"paper ({PAPER_STAND_IN}'s)"
        return PAPER_EPOCH_SECONDS[name] / CUB_TRAIN_IMAGES, note


def paper_costs() -> Costs:
    return Costs({}, {}, PAPER_TRUNK_IMAGES_PER_SECOND, PAPER_SOURCE)


def load_perf(path: str | Path) -> Costs:
    """Costs from ``protobench perf --out FILE`` rows (label "method J=… seed=… backbone dataset")."""
    path = Path(path)
    try:
        rows = json.loads(path.read_text())
    except FileNotFoundError:
        raise ProtobenchError(f"perf file {str(path)!r} does not exist; write one with `protobench perf --out FILE`") from None
    except json.JSONDecodeError as err:
        raise ProtobenchError(f"perf file {str(path)!r} is not JSON ({err}); write it with `protobench perf --out`") from err
    needed = ("run", "train_images", "epoch_seconds_from_cache", "trunk_images_per_second")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) and all(k in r for k in needed) for r in rows):
        raise ProtobenchError(f"perf file {str(path)!r} is not the output of `protobench perf --out`: "
                              f"expected a list of rows with {', '.join(needed)}")
    per_image: dict[tuple[str, str], float] = {}
    per_method: dict[str, list[float]] = {}
    for row in rows:
        words = str(row["run"]).split()
        if len(words) < 5:
            raise ProtobenchError(f"perf file {str(path)!r}: run label {row['run']!r} is not "
                                  "'method J=… seed=… backbone dataset'")
        method, backbone = words[0], words[3]
        cost = float(row["epoch_seconds_from_cache"]) / int(row["train_images"])
        per_image[(method, backbone)] = cost
        per_method.setdefault(method, []).append(cost)
    trunk = sum(float(r["trunk_images_per_second"]) for r in rows) / len(rows)
    devices = sorted({str(r.get("device", "?")) for r in rows})
    return Costs(per_image, {m: sum(v) / len(v) for m, v in per_method.items()}, trunk,
                 f"{path} (protobench perf on {', '.join(devices)}, token cache on)")


# ---- the plan --------------------------------------------------------------------------------
@dataclass(frozen=True)
class CacheNeed:
    """One token-cache entry the grid reads (backbone × dataset × split × view)."""

    backbone: str
    dataset: str
    split: str
    view: str  # "clean" | "noise seed S" | "offline40 seed S" (S: the fixed augmentation seed)
    early_tokens: bool
    images: int


@dataclass(frozen=True)
class RunCost:
    spec: RunSpec
    shape: JobShape
    epochs: int
    hours: float
    source: str


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
    def gpu_hours(self) -> float:
        return sum(r.hours * max(r.shape.gpus_per_node, 1) for r in self.runs) + self.cache_hours


def cache_needs(spec: RunSpec) -> list[tuple[tuple[Any, ...], CacheNeed]]:
    """The cache entries a run reads, each with the identity that decides sharing."""
    if not spec.cache:
        return []
    from methods.registry import get_method_class

    early = spec.cache_early_tokens or get_method_class(spec.method).needs_early_tokens
    trunk = (spec.backbone, spec.weights_id or spec.weights, json.dumps(spec.backbone_args, sort_keys=True),
             spec.dataset, spec.data_root, json.dumps(spec.dataset_args, sort_keys=True), spec.image_size,
             spec.cache_dtype, early)
    views = [("train", "clean", split_images(spec, "train")), ("test", "clean", split_images(spec, "test"))]
    if spec.augmentation != "none":  # the epochs read the copies, push the clean split (runner.py)
        from benchmark.data.augment import AUGMENTATION_SEED

        views.append(("train", f"{spec.augmentation} seed {AUGMENTATION_SEED}",
                      split_images(spec, "train") * augmentation_factor(spec.augmentation)))
    if spec.is_cub_format:
        views.append(("test", f"noise seed {spec.seed}", split_images(spec, "test")))
    return [((*trunk, split, view), CacheNeed(spec.backbone, spec.dataset, split, view, early, images))
            for split, view, images in views]


def make_plan(grid: GridSpec, profile: ClusterProfile, costs: Costs) -> Plan:
    runs = []
    readers: Counter[tuple[Any, ...]] = Counter()
    needs: dict[tuple[Any, ...], CacheNeed] = {}
    for spec in grid.runs:
        epochs = run_epochs(spec)
        per_image, source = costs.seconds_per_image(spec)
        images = split_images(spec, "train") * augmentation_factor(spec.augmentation)
        runs.append(RunCost(spec, profile.shape_for(spec), epochs, epochs * images * per_image / 3600, source))
        for key, need in cache_needs(spec):
            readers[key] += 1
            needs.setdefault(key, need)
    cache_hours = sum(n.images for n in needs.values()) / costs.trunk_images_per_second / 3600
    return Plan(grid, profile, tuple(runs), tuple((needs[k], readers[k]) for k in needs), cache_hours, costs)


def print_plan(plan: Plan) -> None:
    from rich.table import Table

    from benchmark.progress import output_console

    console = output_console()
    grid = plan.grid
    console.print(f"grid [bold]{grid.name}[/bold] ({grid.source}): {len(plan.runs)} runs; "
                  f"profile {plan.profile.name} ({plan.profile.source})")
    arrays = Table(title=f"{len(plan.arrays)} job array(s), one per job shape "
                         f"(≤ {plan.profile.array_parallelism} tasks of an array at once)")
    for column in ("job shape", "runs (array tasks)", "epochs", "est. hours"):
        arrays.add_column(column, justify="left" if column == "job shape" else "right")
    for shape, runs in plan.arrays:
        arrays.add_row(shape.describe(), str(len(runs)), str(sum(r.epochs for r in runs)),
                       f"{sum(r.hours for r in runs):.1f}")
    console.print(arrays)
    caches = Table(title=f"{len(plan.caches)} token cache(s) to build (each once, shared by its runs)")
    for column in ("backbone", "dataset", "split", "view", "early tokens", "images", "runs"):
        caches.add_column(column, justify="right" if column in ("images", "runs") else "left")
    for need, readers in sorted(plan.caches, key=lambda c: (c[0].backbone, c[0].dataset, c[0].split, c[0].view)):
        caches.add_row(need.backbone, need.dataset, need.split, need.view, "yes" if need.early_tokens else "",
                       str(need.images), str(readers))
    console.print(caches)
    sources = Counter(r.source for r in plan.runs)
    console.print(f"estimate: [bold]{plan.gpu_hours:.1f} GPU-hours[/bold] "
                  f"({sum(r.hours for r in plan.runs):.1f} h training, {plan.cache_hours:.1f} h token caches); "
                  f"per-epoch costs from {plan.costs.source}; runs costed by "
                  + ", ".join(f"{source}: {n}" for source, n in sources.items()))
