"""The FLOPs-and-bytes cost model ``protobench plan`` uses when it has no ``perf`` measurement
from the target device.

Per run, on a device of the table below (peak rates from the vendors' datasheets):

- **trunk pass**, once per token-cache entry: ``depth`` blocks of the trunk per image, forward;
- **cached epochs**: the head (an appended block + prototype similarities, :meth:`Shape.flops`)
  forward and backward (3× the forward multiply-adds, the usual fwd + 2·fwd for the backward)
  per training image and epoch, plus the method's non-matmul work (below), plus reading the
  training entry from storage (``plan.training_reads``);
- **pushes**: one head forward over the clean training split per push epoch;
- **evaluation**: one head forward over the clean and the noisy test split;
- **job start-up**: the profile's ``task_startup_s`` per array task (``Plan.startup_hours``).

Compute time = 2 × multiply-adds ÷ (achieved fraction × the device's peak rate at the run's
precision: bf16 → the bf16 tensor rate, fp32 and tf32 → the fp32 rate). Calibration on the
paper's live-trunk epochs (``paper/vmfproto.tex`` tab:supp_runtime, one Quadro RTX 8000, fp32 —
PyTorch's default; the paper names no precision): NPPP's 76.9 s epoch is the trunk forward +
its head's forward and backward over 5,994 images at the achieved fraction of the fp32 peak,
which fixes that fraction; vMFProto's 206.8 s less its FLOPs time is its non-matmul work
(eigh gate, vMF E-step, Sinkhorn), charged per training image and epoch and taken to be
memory-bound (it scales with memory bandwidth). Methods the paper did not time get FLOPs only.
"""
from __future__ import annotations

from dataclasses import dataclass

from benchmark.errors import ProtobenchError


@dataclass(frozen=True)
class Device:
    """A GPU's dense peak rates (no sparsity) and memory bandwidth."""

    name: str
    bf16_tflops: float  # tensor-core half precision (V100, RTX 8000: fp16; they have no bf16)
    fp32_tflops: float  # CUDA cores, no tensor cores
    memory_gb_s: float

    def peak_flops(self, precision: str) -> float:
        return (self.bf16_tflops if precision == "bf16" else self.fp32_tflops) * 1e12


DEVICES = {d.name: d for d in (
    # NVIDIA H100 Tensor Core GPU datasheet (SXM5): BF16 989.4 TFLOPS dense, FP32 66.9, HBM3 3.35 TB/s
    Device("H100", 989.4, 66.9, 3350.0),
    # NVIDIA H200 Tensor Core GPU datasheet (SXM): BF16 989 TFLOPS dense, FP32 67, HBM3e 4.8 TB/s
    Device("H200", 989.0, 67.0, 4800.0),
    # NVIDIA A100 Tensor Core GPU datasheet (SXM4 80 GB): BF16 312 TFLOPS dense, FP32 19.5, 2,039 GB/s
    Device("A100", 312.0, 19.5, 2039.0),
    # NVIDIA Tesla V100 datasheet (SXM2): FP16 tensor 125 TFLOPS (no bf16), FP32 15.7, HBM2 900 GB/s
    Device("V100", 125.0, 15.7, 900.0),
    # NVIDIA Quadro RTX 8000 datasheet: FP16 tensor 130.5 TFLOPS (no bf16), FP32 16.3, GDDR6 672 GB/s
    Device("RTX8000", 130.5, 16.3, 672.0),
)}
DEFAULT_DEVICE = "H100"
CALIBRATION_DEVICE = "RTX8000"  # where the paper measured (tab:supp_runtime)
CALIBRATION_PRECISION = "fp32"
CALIBRATION_IMAGES = 5994  # CUB training split
CALIBRATION_EPOCH_SECONDS = {"nppp": 76.9, "vmfproto": 206.8}  # live trunk, ViT-B/14, J = 5


def device(name: str) -> Device:
    if name not in DEVICES:
        raise ProtobenchError(f"unknown device model {name!r}; pass one of {', '.join(DEVICES)} "
                              "(--device-model or the profile's device_model)")
    return DEVICES[name]


@dataclass(frozen=True)
class Calibration:
    """What the paper's two RTX 8000 epochs fix: the achieved fraction of peak, and vMFProto's
    non-matmul seconds per image expressed as memory-bound work (bytes at RTX 8000 bandwidth)."""

    achieved_fraction: float
    overhead_bytes_per_image: dict[str, float]  # method → bytes-equivalent per training image per epoch


def calibrate(trunk_macs: float, head_macs: float) -> Calibration:
    """``trunk_macs``: the paper's trunk's forward multiply-adds per image (ViT-B/14 at 224);
    ``head_macs``: a head's forward multiply-adds per image at the paper's shape (C = 200, J = 5).
    A live-trunk epoch is 2·(trunk + 3·head)·images FLOPs; NPPP's is all matmul, vMFProto's
    remainder over the same FLOPs is its non-matmul work."""
    ref = DEVICES[CALIBRATION_DEVICE]
    flops = 2 * (trunk_macs + 3 * head_macs) * CALIBRATION_IMAGES
    fraction = flops / (CALIBRATION_EPOCH_SECONDS["nppp"] * ref.peak_flops(CALIBRATION_PRECISION))
    extra = CALIBRATION_EPOCH_SECONDS["vmfproto"] - CALIBRATION_EPOCH_SECONDS["nppp"]
    return Calibration(fraction, {"vmfproto": extra * ref.memory_gb_s * 1e9 / CALIBRATION_IMAGES})


@dataclass(frozen=True)
class ModelCost:
    """One run's seconds per phase on the model's device."""

    epochs: float  # head forward + backward and the method's non-matmul work, every epoch
    pushes: float
    evaluation: float

    @property
    def total(self) -> float:
        return self.epochs + self.pushes + self.evaluation


@dataclass(frozen=True)
class CostModel:
    device: Device
    calibration: Calibration

    def compute_seconds(self, macs: float, precision: str) -> float:
        """Seconds of ``macs`` multiply-adds (2 FLOPs each) at the calibrated fraction of peak."""
        return 2 * macs / (self.calibration.achieved_fraction * self.device.peak_flops(precision))

    def overhead_seconds(self, method: str, images: int) -> float:
        """The method's calibrated non-matmul work over ``images`` training images (0 if uncalibrated)."""
        return self.calibration.overhead_bytes_per_image.get(method, 0.0) * images / (self.device.memory_gb_s * 1e9)

    def run_cost(self, *, method: str, precision: str, head_macs: float, live_trunk_macs: float, epochs: int,
                 pushes: int, train_images: int, push_images: int, test_images: int) -> ModelCost:
        """A run's phases: ``epochs`` × (head fwd + bwd + non-matmul work) over its training
        images; ``pushes`` head forwards over the clean training split; one head forward over
        ``test_images`` (clean + noisy views). ``live_trunk_macs`` (0 for a cached run): the
        trunk's forward, added to every image of every phase."""
        forward = head_macs + live_trunk_macs
        per_epoch = (self.compute_seconds((3 * head_macs + live_trunk_macs) * train_images, precision)
                     + self.overhead_seconds(method, train_images))
        return ModelCost(epochs=epochs * per_epoch,
                         pushes=pushes * self.compute_seconds(forward * push_images, precision),
                         evaluation=self.compute_seconds(forward * test_images, precision))

    def describe(self) -> str:
        d = self.device
        vmf_ms = self.overhead_seconds("vmfproto", 1) * 1e3
        return (f"FLOPs-and-bytes model on {d.name} (peak bf16 {d.bf16_tflops:g} / fp32 {d.fp32_tflops:g} "
                f"TFLOP/s, {d.memory_gb_s:g} GB/s) at {self.calibration.achieved_fraction:.1%} of peak, "
                f"calibrated on the paper's live-trunk {CALIBRATION_DEVICE} epochs (NPPP "
                f"{CALIBRATION_EPOCH_SECONDS['nppp']} s, vMFProto {CALIBRATION_EPOCH_SECONDS['vmfproto']} s, "
                f"taken as {CALIBRATION_PRECISION}); assumptions: trunk forward once per cache entry, at fp32; "
                f"head forward + backward = 3× its forward multiply-adds per training image per epoch; one "
                f"head forward per push and for evaluation; vMFProto's non-matmul work memory-bound "
                f"({vmf_ms:.1f} ms per training image per epoch here) and charged every cached epoch (an upper "
                f"bound: its gate is read from the cache); other methods FLOPs only (measure EM, Sinkhorn, "
                f"deformable offsets with `perf`); tf32 at the fp32 peak")

