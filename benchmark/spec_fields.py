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

VALIDATION_FIELDS = ("evaluation_split", "validation_fraction", "validation_seed")


def identity_fields(values: dict[str, Any]) -> dict[str, Any]:
    """The fields of a RunSpec's plain values (``asdict``, or a ``spec`` read back from
    result.json) that define the result: operational ones dropped, the weights by their label."""
    d = {k: v for k, v in values.items() if k not in OPERATIONAL_FIELDS}
    # The tuning fields name the result only where they are used (a trial; a tuned run), so every
    # run id from before they existed is unchanged.
    if d.get("evaluation_split", "test") == "test":
        for key in VALIDATION_FIELDS:
            d.pop(key, None)
    if d.get("tuned") in (None, {}, "{}"):  # "{}": an export CSV's text of the empty table
        d.pop("tuned", None)
    # A random trunk and a named weights file are different science; the path is not.
    d["weights_id"] = values.get("weights_id") or ("random" if values.get("weights") == "random" else "pretrained")
    return d


def tuned_variant(variant: str) -> str:
    """The variant of a run with its tuning cell's best hyperparameters (``run --hyperparameters
    tuned``): ``tuned``, or ``V-tuned`` for a variant ``V``, so reports never pool it with the default."""
    return "tuned" if variant == "default" else f"{variant}-tuned"


#: ``RUNS/GRID.tuning``: a grid's studies and trial runs, beside its runs; reports reading a runs
#: folder leave trials out (they are scored on validation, never on test)
TUNING_DIR_SUFFIX = ".tuning"
