"""The bundle's model card: ``README.md`` with the Hugging Face model-card YAML header (library,
datasets, license, every run's metrics as ``model-index`` results) written by huggingface_hub's
own ``ModelCardData``, so ``huggingface_hub.ModelCard.load`` reads it back."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from huggingface_hub import EvalResult, ModelCardData

from benchmark.escaping import markdown_cell, markdown_text, plain_label

CARD_FILE = "README.md"
#: result.json metrics → Hugging Face metric types (https://hf.co/metrics); the rest keep their name
METRIC_TYPES = {"acc": "accuracy"}
CARD_METRICS = ("acc", "con", "sta", "dis", "comp")


def _label(result: dict[str, Any]) -> str:
    return plain_label(f"{result.get('grid')}/{result.get('run_id')}")


def model_card(results: Sequence[dict[str, Any]], *, license: str, checkpoints: bool, name: str) -> str:
    """The card of the bundled runs' ``result.json`` contents."""
    evals = [
        EvalResult(task_type="image-classification", dataset_type=plain_label(r["spec"]["dataset"]),
                   dataset_name=plain_label(r["spec"]["dataset"]), dataset_split="test",
                   metric_type=METRIC_TYPES.get(metric, metric), metric_value=float(value),
                   metric_name=f"{metric} {_label(r)}")
        for r in results for metric in CARD_METRICS
        if isinstance(value := (r.get("metrics") or {}).get(metric), (int, float)) and not isinstance(value, bool)
    ]
    data = ModelCardData(
        library_name="protobench", license=license, model_name=name,
        datasets=sorted({plain_label(r["spec"]["dataset"]) for r in results}),
        metrics=sorted({e.metric_type for e in evals}),
        tags=["part-prototype", "interpretability", "image-classification"], eval_results=evals or None,
    )
    rows = ["| run | method | backbone (weights, checksum) | J | seed | " + " | ".join(CARD_METRICS) + " |",
            "|" + "---|" * (5 + len(CARD_METRICS))]
    for r in results:
        spec, prov, metrics = r["spec"], r.get("provenance") or {}, r.get("metrics") or {}
        trunk = f"{spec.get('backbone')} ({spec.get('weights', 'default')}, {prov.get('weights_checksum', '?')})"
        cells = [_label(r), r.get("method_display_name") or spec.get("method"), trunk,
                 spec.get("prototypes_per_class"), spec.get("seed"),
                 *(f"{metrics[m]:.2f}" if isinstance(metrics.get(m), (int, float)) else "–" for m in CARD_METRICS)]
        rows.append("| " + " | ".join(markdown_cell(c) for c in cells) + " |")
    weights = ("Each run folder holds `head.safetensors`: the trained head (the method's weights). The frozen trunk "
               "is not copied: the table names it (backbone, weights, checksum of its state dict), and "
               "`protobench evaluate GRID/RUN_ID` rebuilds it, checks the checksum and re-scores the run."
               if checkpoints else "This bundle holds results only (made without `--checkpoints`).")
    body = "\n".join([
        f"# {markdown_text(name)}", "",
        f"{len(results)} finished run(s) of protobench part-prototype classifiers on "
        "frozen DINO trunks: each run's spec, result, per-image records, training curves and provenance.", "",
        weights, "",
        "Check it with `protobench bundle verify .` (every file against `SHA256SUMS`); read it as a runs "
        "directory: `protobench report .`, `protobench site . --out site/`.", "",
        *rows, "",
    ])
    return f"---\n{data.to_yaml()}\n---\n\n{body}"
