"""``protobench perf --robustness FAMILIES``: the robustness stage's time per image as a ratio to the
ordinary ``evaluate``'s, both measured in one process on the same prepared run (the grid's first),
alternating, ``repeats`` times (median and range of the ratios). The stage's batches run as
``evaluate --robustness`` runs them (benchmark/robustness/stage.py), on the first ``images`` test images."""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from benchmark.estimates.perf import _evaluate_seconds
from benchmark.method_lookup import declaration
from benchmark.robustness.live import LiveMethod, normalisation
from benchmark.robustness.options import RobustnessOptions
from benchmark.robustness.stage import _score_batch
from benchmark.run.prepare import Prepared
from benchmark.run.timing import timed


def stage_ratios(prep: Prepared, cache_root: Path, families: tuple[str, ...], *, images: int, repeats: int,
                 steps: int | None = None) -> dict[str, Any]:
    """Per family: the ratios (stage seconds per image ÷ evaluate seconds per image) of each repeat,
    their median and range, and the seconds behind them."""
    live = LiveMethod(prep.method, prep.trunk, *normalisation(prep.test_set), prep.spec.precision).to(prep.device)
    live.eval()
    reference = declaration(prep.spec.method).reference_row
    chunk = list(range(min(images, len(prep.test_set))))
    rows: dict[str, Any] = {}
    _evaluate_seconds(prep, cache_root)  # warm-up: opens (and builds) the token cache
    for family in families:
        options = RobustnessOptions((family,), images=len(chunk), batch_size=len(chunk),
                                    **({} if steps is None else {"steps": steps}))
        _score_batch(live, prep, chunk[:1], options, reference=reference, number=0)  # warm-up
        ratios, stage_s, evaluate_s = [], [], []
        for _ in range(repeats):
            seconds, test_images = _evaluate_seconds(prep, cache_root)
            spent = timed(prep.device, lambda: _score_batch(live, prep, chunk, options, reference=reference,
                                                            number=0))
            evaluate_s.append(seconds / test_images)
            stage_s.append(spent / len(chunk))
            ratios.append(stage_s[-1] / evaluate_s[-1])
        rows[family] = {"ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
                        "stage_seconds_per_image": stage_s, "evaluate_seconds_per_image": evaluate_s,
                        "images": len(chunk), "repeats": repeats, "steps": options.steps}
    return rows


def ratio_lines(prep: Prepared, rows: dict[str, Any]) -> list[str]:
    spec = prep.spec
    lines = [f"robustness stage vs evaluate, per image, {spec.method} on {spec.backbone} ({prep.device}, "
             f"{spec.precision}), measured side by side in one process:"]
    for family, row in rows.items():
        lines.append(f"  {family}: {row['ratio_median']:.1f}× evaluate (range {row['ratio_min']:.1f}–"
                     f"{row['ratio_max']:.1f} over {row['repeats']} repeats; {row['images']} images"
                     + (f", {row['steps']} PGD steps" if family == "misalignment" else "") + ")")
    return lines
