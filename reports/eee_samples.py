"""A run's Every Eval Ever samples file, ``<uuid>_samples.jsonl``: one line per test image, each
valid against ``instance_level_eval.schema.json`` 0.3.0 (reports/eee_schema/).

The schema is written for prompts and answers; image classification maps onto it as
(docs/protocol/harness.md, "Reports"):

- ``sample_id`` and ``input.raw``: the image's path below the dataset root (the per-image
  records' ``image``, the id the suite pairs images by); ``input.reference``: the true class,
  ``output.raw``: the predicted class, each its index in the dataset's class list as a decimal
  string (a run records indices, not names); ``interaction_type`` ``single_turn``;
- ``answer_attribution``: the prediction as the argmax of the class logits (turn 0, terminal);
- ``evaluation``: ``score`` 1 or 0 and ``is_correct`` (the image's part of the run's accuracy,
  ``evaluation_result_id`` ``acc``), and beside them, under the result ids of the aggregate
  record, the image's part of each explanation metric the records hold (``sta``, ``dis``,
  ``comp``, ``sanity`` in percent, ``sanity_ssim`` in [−1, 1]; an undefined part is left out);
- ``sample_hash``: SHA-256 of the canonical JSON of ``{"raw": input.raw, "reference":
  input.reference}`` (sorted keys, no spaces; the schema: "hash of (input.raw +
  input.reference)"; the JSON form keeps the two apart), so the same image and label hash alike
  in every lab's file;
- ``metadata.test_index``: the image's position in the test split.

Lines are sorted-key JSON without spaces, in test-split order; the file's SHA-256 is the
record's ``detailed_evaluation_results.checksum``.
"""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from reports.eee import SCHEMA_VERSION

#: the per-image record columns a line carries in ``evaluation`` (benchmark/run/record_schema.py)
EXPLANATION_PARTS: tuple[str, ...] = ("sta", "dis", "comp", "sanity", "sanity_signed", "sanity_ssim")
#: how the predicted class is read off the model's output
EXTRACTION_METHOD = "argmax of the class logits"


def sample_hash(raw: str, reference: list[str]) -> str:
    """SHA-256 of ``{"raw": raw, "reference": reference}`` as canonical JSON (module docstring)."""
    payload = json.dumps({"raw": raw, "reference": reference}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def sample_lines(table: pd.DataFrame, *, evaluation_id: str, model_id: str,
                 evaluation_name: str) -> bytes:
    """The samples file of a run whose per-image records are ``table`` (checked against their
    schema by ``benchmark.run.records.read_records``): one JSON line per row."""
    parts = [c for c in EXPLANATION_PARTS if c in table.columns]
    columns = {c: table[c].astype(np.float64).to_numpy() for c in parts}
    lines = []
    rows = zip(table["index"].tolist(), table["image"].astype(str).tolist(), table["label"].tolist(),
               table["predicted"].tolist(), table["correct"].tolist())
    for row, (index, image, label, predicted, correct) in enumerate(rows):
        scores = {c: float(values[row]) for c, values in columns.items() if not math.isnan(values[row])}
        line = sample_line(image, int(label), int(predicted), bool(correct), scores, index=int(index),
                           evaluation_id=evaluation_id, model_id=model_id, evaluation_name=evaluation_name)
        lines.append(json.dumps(line, sort_keys=True, separators=(",", ":"), allow_nan=False))
    return "".join(line + "\n" for line in lines).encode("utf-8")


def sample_line(image: str, label: int, predicted: int, correct: bool, parts: Mapping[str, float], *,
                index: int, evaluation_id: str, model_id: str, evaluation_name: str) -> dict[str, object]:
    """One test image as an instance-level record (module docstring)."""
    reference, answer = [str(label)], str(predicted)
    return {
        "schema_version": SCHEMA_VERSION,
        "evaluation_id": evaluation_id,
        "model_id": model_id,
        "evaluation_name": evaluation_name,
        "evaluation_result_id": "acc",
        "sample_id": image,
        "sample_hash": sample_hash(image, reference),
        "interaction_type": "single_turn",
        "input": {"raw": image, "reference": reference},
        "output": {"raw": [answer]},
        "answer_attribution": [{"turn_idx": 0, "source": "output.raw", "extracted_value": answer,
                                "extraction_method": EXTRACTION_METHOD, "is_terminal": True}],
        "evaluation": {"score": 1.0 if correct else 0.0, "is_correct": correct, **parts},
        "metadata": {"test_index": str(index)},
    }
