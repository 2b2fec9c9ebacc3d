"""What the behaviour probe runs, read without torch: its micro problem, its arithmetic, its
configurations (benchmark/behaviour/probe.py runs it)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from methods.registry import declaration

#: the environment the probe's child process starts with (read by torch, MKL and oneDNN at start-up)
PINNED_ARITHMETIC: dict[str, str] = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE",
                                     "ONEDNN_MAX_CPU_ISA": "SSE41", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
#: the dtypes a probe runs in, best first (:func:`run_probe` falls back to the next)
PROBE_DTYPES: tuple[str, ...] = ("float64", "float32")
OUTPUTS: tuple[str, ...] = ("logits", "maps", "contributions", "logits_without_top", "global_features")
DEFAULT_CONFIGURATION = "default"
#: the probe request of the harness itself (benchmark/behaviour/harness_probe.py): the lockstep of
#: ``tune --batch K`` run with HARNESS_METHOD's defaults, so the training loop's paths for several
#: members run too and its members are checked against that method's probe alone
HARNESS = "@harness"
HARNESS_METHOD = "protopnet"


@dataclass(frozen=True)
class ProbeSetup:
    """The micro problem every probe solves (changing it makes every golden output incomparable:
    a new lock, :data:`benchmark.behaviour.lock.LOCK_FORMAT`)."""

    num_classes: int = 3
    prototypes_per_class: int = 2
    train_per_class: int = 44  # 132 training images: two passes of the lineage's PASS_BATCH_SIZE (128)
    test_per_class: int = 4
    embed_dim: int = 64  # vMF order ν = D/2 − 1 = 31 ≥ 25: the normaliser's Debye branch, as at D = 384, 768
    grid: tuple[int, int] = (3, 3)
    parts: int = 3
    noise: float = 0.3
    batch_size: int = 32
    seed: int = 0
    train_data_seed: int = 1
    test_data_seed: int = 2
    block_seed: int = 3


PROBE = ProbeSetup()


def configurations(method: str) -> dict[str, dict[str, Any]]:
    """What the probe runs for ``method``: its defaults and every variant its declaration names,
    each with the declaration's ``probe_args`` (shorter repeated phases) under the variant's own."""
    declared = declaration(method)
    shortened = dict(declared.probe_args)
    return {DEFAULT_CONFIGURATION: shortened,
            **{name: {**shortened, **args} for name, args in declared.variants.items()}}
