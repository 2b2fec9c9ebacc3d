"""The options of ``protobench evaluate RUN --robustness ...`` (benchmark/robustness/stage.py)."""
from __future__ import annotations

import argparse
from pathlib import Path

from benchmark.robustness.options import (DEFAULT_EPSILON, DEFAULT_PERCENTILE, DEFAULT_STEP, DEFAULT_STEPS,
                                          DEFAULT_TOP_K, FAMILIES, RobustnessOptions, parse_families)


def add_robustness_options(p: argparse.ArgumentParser) -> None:
    """Add ``--robustness`` and its settings to the ``evaluate`` parser."""
    p.add_argument("--robustness", metavar="FAMILIES",
                   help=f"run only the robustness stage on the live trunk, from the checkpoint: a comma-separated "
                        f"list of {', '.join(FAMILIES)} (the ordinary evaluation is left as it is)")
    p.add_argument("--robustness-epsilon", type=float, default=DEFAULT_EPSILON,
                   help=f"L∞ budget of the misalignment PGD in pixel units, in (0, 1] (default {DEFAULT_EPSILON})")
    p.add_argument("--robustness-step", type=float, default=DEFAULT_STEP,
                   help=f"PGD step in pixel units, in (0, ε] (default {DEFAULT_STEP})")
    p.add_argument("--robustness-steps", type=int, default=DEFAULT_STEPS,
                   help=f"PGD steps, ≥ 1 (default {DEFAULT_STEPS})")
    p.add_argument("--robustness-percentile", type=float, default=DEFAULT_PERCENTILE,
                   help=f"percentile of the high-activation box kept out of the attack, in (0, 100) "
                        f"(default {DEFAULT_PERCENTILE:g})")
    p.add_argument("--robustness-top-k", type=int, default=DEFAULT_TOP_K,
                   help=f"ground-truth-class prototypes attacked per image (default {DEFAULT_TOP_K})")
    p.add_argument("--robustness-images", type=int,
                   help="size of the fixed subsample of test images (default: all)")
    p.add_argument("--robustness-batch", type=int, default=8, help="images per batch of the stage (default 8)")


def robustness_options(args: argparse.Namespace) -> RobustnessOptions:
    return RobustnessOptions(parse_families(args.robustness), epsilon=args.robustness_epsilon,
                             step=args.robustness_step, steps=args.robustness_steps,
                             percentile=args.robustness_percentile, top_k=args.robustness_top_k,
                             images=args.robustness_images, batch_size=args.robustness_batch)


def cmd_robustness(args: argparse.Namespace) -> int:
    from benchmark.robustness.stage import run_robustness

    section = run_robustness(Path(args.run_dir), robustness_options(args))
    print("  ".join(f"{k}={v:.2f}" for k, v in section["metrics"].items() if v is not None))
    for key, note in section["notes"].items():
        print(f"{key}: {note}")
    return 0
