"""Which fields of a run's spec name its science and which only say where or how it runs.

A floor module (tests/test_import_graph.py): it imports nothing of the suite, so ``reports``
reads a ``spec`` back from ``result.json`` by the same rule as :class:`benchmark.config.RunSpec`
hashes it, without loading the harness.
"""
from __future__ import annotations

from typing import Any

# Fields that say where/how to run, not what to compute: excluded from the run id.
# ``precision`` is not among them: tf32/bf16 change the numbers, so they are another run.
# ``deterministic`` only picks deterministic kernels for the same computation (docs/guides/gpu.md).
# (measure_live_epoch only adds a timing, taken after evaluation; no metric depends on it.)
OPERATIONAL_FIELDS = ("data_root", "cache", "device", "num_workers", "weights", "cache_early_tokens",
                      "cache_stage", "measure_live_epoch", "cache_in_memory", "checkpoint_every", "deterministic")


def identity_fields(values: dict[str, Any]) -> dict[str, Any]:
    """The fields of a RunSpec's plain values (``asdict``, or a ``spec`` read back from
    result.json) that define the result: operational ones dropped, the weights by their label."""
    d = {k: v for k, v in values.items() if k not in OPERATIONAL_FIELDS}
    # A random trunk and a named weights file are different science; the path is not.
    d["weights_id"] = values.get("weights_id") or ("random" if values.get("weights") == "random" else "pretrained")
    return d
