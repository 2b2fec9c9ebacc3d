"""Per-run compute costs for ``protobench plan``: measurements from ``protobench perf --out`` from
the target device where they cover a run, else the FLOPs-and-bytes model of
:mod:`benchmark.estimates.costmodel` (calibrated on the paper's RTX 8000 epochs).

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

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmark.config import RunSpec
from benchmark.errors import ProtobenchError
from benchmark.estimates.costmodel import DEFAULT_DEVICE, CostModel, calibrate, device
from benchmark.estimates.workload import (
    Shape,
    augmentation_factor,
    push_count,
    run_shape,
    split_images,
    stage_epochs,
    trunk_macs,
)

if TYPE_CHECKING:
    from benchmark.estimates.caches import CacheNeed


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
    frozen_seconds_per_image: float = 0.0  # the method's frozen per-image features (0: none, or not measured)

    def run_seconds(self, spec: RunSpec, train_images: int, test_images: int) -> float:
        """Seconds of ``spec`` at this measurement's shape: per stage, epochs × measured step
        seconds per image × training images; hooks × training images / measured training
        images (push and last-layer passes read the training split; under offline40 push reads
        the clean split, so this is an upper bound); evaluation × test images / measured test
        images; the frozen per-image features once per image of the training split and of each
        test view (clean, and noisy for part-annotated sets)."""
        steps = sum(epochs * self.step_seconds_per_image.get(name, self.step_seconds_per_image[self.last_stage])
                    for name, epochs in stage_epochs(spec)) * train_images
        views = 2 if spec.has_part_annotations else 1
        return (steps + self.hook_seconds * train_images / self.train_images
                + self.evaluate_seconds * test_images / self.test_images
                + self.frozen_seconds_per_image * (train_images + views * test_images))

@dataclass(frozen=True)
class TuningMeasurement:
    """One ``tuning`` row of ``protobench perf --tuning K --out``: K trials of a method's cell run
    sequentially, packed and batched (seconds; ``batched_s`` None where the method does not batch)."""

    method: str
    k: int
    sequential_s: float
    packed_s: float
    batched_s: float | None
    # the median over repeats of each mode's seconds ÷ the sequential seconds of the same repeat
    # (``packed_over_sequential``, ``batched_over_sequential``); absent: the medians' ratio
    paired: tuple[tuple[str, float], ...] = ()

    def factor(self) -> tuple[float, str]:
        """The cheaper of packed and batched trials over sequential ones, and which it is: the
        ratio measured side by side in each repeat (its median), else the ratio of the medians."""
        ratios = dict(self.paired)
        modes = [("packed", self.packed_s)] + ([("batched", self.batched_s)] if self.batched_s is not None else [])
        name, ratio = min(((mode, ratios.get(mode, seconds / self.sequential_s)) for mode, seconds in modes),
                          key=lambda mode: mode[1])
        return ratio, "packed trials" if name == "packed" else f"batched trials (--batch {self.k})"


@dataclass(frozen=True)
class Costs:
    """Measurements from ``perf`` (used where they cover a run) and the FLOPs-and-bytes model (the
    rest); ``source`` says where the numbers come from. ``tuning``: ``perf --tuning`` rows, which
    scale a trial's cost in ``plan --tuning-trials``."""

    measurements: tuple[Measurement, ...]
    model: CostModel
    source: str
    tuning: tuple[TuningMeasurement, ...] = ()

    @property
    def cpu_measured(self) -> bool:
        """Whether a measurement was taken on a CPU (``perf`` writes ``cpu`` or ``cuda:N: <name>``):
        its seconds and ratios are the CPU's, not the plan's GPU's."""
        return any(m.device.split(":")[0] == "cpu" for m in self.measurements)

    def cpu_caution(self) -> str | None:
        """The plan's warning when its measurements come from a CPU (None when none does)."""
        if not self.cpu_measured:
            return None
        return (f"caution: the perf file was measured on a CPU, so the measured runs are costed in CPU seconds and "
                f"its tuning ratios are the CPU's (compute-bound: K trials cost about K times one); they are not "
                f"{self.model.device.name} figures; run `protobench perf GRID --out FILE` (and `--tuning K`) on "
                f"the target GPU")

    def tuning_factor(self, method: str) -> tuple[float, str] | None:
        """A trial's measured cost over a sequential trial's for ``method`` (None: not measured)."""
        found = [t for t in self.tuning if t.method == method]
        return found[0].factor() if found else None

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
        test = split_images(spec, "test") * (2 if spec.has_part_annotations else 1)  # clean + noisy views
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
        trunk_images_per_second=float(row["trunk_images_per_second"]), device=str(row["device"]),
        frozen_seconds_per_image=float(row.get("frozen_features_seconds_per_image") or 0.0))  # older files: none

PERF_FIELDS = ("run", "method_name", "backbone", "tokens", "embed_dim", "classes", "prototypes_per_class",
               "train_images", "test_images", "stages", "evaluate_seconds", "trunk_images_per_second", "device")

TUNING_FIELDS = ("method", "k", "sequential_s", "packed_s", "batched_s")


def _tuning_measurements(path: Path, document: Any) -> tuple[TuningMeasurement, ...]:
    """The ``tuning`` rows of a ``perf --tuning K --out`` file (none in a plain ``perf --out`` list)."""
    if not isinstance(document, dict) or "tuning" not in document:
        return ()
    rows = document["tuning"]
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ProtobenchError(f"perf file {str(path)!r}: its `tuning` is not a list of rows; write it with "
                              "`protobench perf GRID --tuning K --out FILE`")
    out = []
    for row in rows:
        missing = [k for k in TUNING_FIELDS if k not in row]
        if missing:
            raise ProtobenchError(f"perf file {str(path)!r}: tuning row {row.get('method', '?')!r} lacks "
                                  f"{', '.join(missing)}; measure again with `protobench perf GRID --tuning K --out FILE`")
        try:
            paired = tuple((mode, float(row[f"{mode}_over_sequential"]["median"])) for mode in ("packed", "batched")
                           if isinstance(row.get(f"{mode}_over_sequential"), dict))
            measurement = TuningMeasurement(str(row["method"]), int(row["k"]), float(row["sequential_s"]),
                                            float(row["packed_s"]),
                                            None if row["batched_s"] is None else float(row["batched_s"]), paired)
        except (TypeError, ValueError, KeyError) as err:
            raise ProtobenchError(f"perf file {str(path)!r}: tuning row {row.get('method', '?')!r} is malformed "
                                  f"({err}); write it with `protobench perf --tuning K --out`") from err
        if not measurement.sequential_s > 0:
            raise ProtobenchError(f"perf file {str(path)!r}: tuning row {measurement.method!r} has sequential_s "
                                  f"{measurement.sequential_s}; measure again")
        out.append(measurement)
    return tuple(out)


def load_perf(path: str | Path, device_model: str = DEFAULT_DEVICE) -> Costs:
    """Costs from ``protobench perf --out FILE`` rows (the model on ``device_model`` for runs whose
    method they do not cover); a ``perf --tuning K --out`` file, ``{"rows": …, "tuning": …}``,
    adds its tuning rows."""
    path = Path(path)
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise ProtobenchError(f"perf file {str(path)!r} does not exist; write one with `protobench perf --out FILE`") from None
    except json.JSONDecodeError as err:
        raise ProtobenchError(f"perf file {str(path)!r} is not JSON ({err}); write it with `protobench perf --out`") from err
    tuning = _tuning_measurements(path, document)
    rows = document.get("rows") if isinstance(document, dict) else document
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
                 f"the FLOPs model wherever it has the run's method", tuning)


def load_perfs(paths: list[str | Path], device_model: str = DEFAULT_DEVICE) -> Costs:
    """Costs from several ``perf --out`` files (``plan --perf A --perf B``: e.g. the paper-scale
    timings and a ``perf --tuning K`` file): their rows in the order given (a run is charged the
    first file's measurement of its method), their tuning rows together; a method with tuning
    rows in two files is refused (which ratio to charge would be a guess)."""
    loaded = [load_perf(path, device_model) for path in paths]
    if len(loaded) == 1:
        return loaded[0]
    tuned: dict[str, str] = {}
    for path, costs in zip(paths, loaded):
        for row in costs.tuning:
            if row.method in tuned:
                raise ProtobenchError(f"perf files {tuned[row.method]!r} and {str(path)!r} both hold tuning rows of "
                                      f"{row.method!r}; pass one of them")
            tuned[row.method] = str(path)
    return Costs(tuple(m for c in loaded for m in c.measurements), loaded[0].model,
                 "; ".join(c.source for c in loaded), tuple(t for c in loaded for t in c.tuning))
