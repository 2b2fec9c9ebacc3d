"""The iterative foreground gate against the ``eigh`` gate on random token sets of ViT-S/B shape
(source: issue 20 item 2): the masks of both gating variants that use an eigenvector, compared
element by element, with the share of images the iteration accepted and the two gates' times.

    .venv/bin/python tests/helpers/measure_gate.py [--sets 10000] [--batch 100]

Token sets as in tests/methods/test_vmfproto_gating.py (tests/helpers/gating_token_sets.py: a
dominant direction, pure Gaussian, rank 2, constant), 16×16 patches, D = 384 and 768. Not a test: it prints what it finds.
"""
from __future__ import annotations

import argparse
import time

from gating_token_sets import token_sets  # this script's folder is on sys.path when it is run

from methods.vmfproto import gating


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    for dim in (384, 768):
        differing, accepted, seconds = {"attention_pca": 0, "pca": 0}, 0, {"iterative": 0.0, "eigh": 0.0}
        for start in range(0, args.sets, args.batch):
            tokens, attention = token_sets(args.batch, 256, dim, seed=start + dim)
            accepted += int(gating._subspace_iteration(gating._gram(tokens)[0].double())[1].sum())
            for variant in differing:
                tic = time.perf_counter()
                mask, _ = gating.foreground_mask(tokens, attention, variant, 0.5)
                seconds["iterative"] += time.perf_counter() - tic
                gating.top_eigenvector, iterative = gating.exact_top_eigenvector, gating.top_eigenvector
                try:
                    tic = time.perf_counter()
                    exact, _ = gating.foreground_mask(tokens, attention, variant, 0.5)
                    seconds["eigh"] += time.perf_counter() - tic
                finally:
                    gating.top_eigenvector = iterative
                differing[variant] += int((mask != exact).sum())
        print(f"D={dim}: {args.sets} sets, iteration accepted {accepted} ({accepted / args.sets:.1%}); "
              f"differing mask elements {differing}; gate seconds {seconds}")


if __name__ == "__main__":
    main()
