"""How often ``compare`` rejects a true null, and covers a true difference, on a crossed seeds ×
images design: the simulation behind docs/guides/statistics.md ("False positives, coverage and
power") and tests/reports/test_stats_crossed.py.

    python -m reports.stats_simulation            # the full grid (≈ 10 min on 2 cores), markdown
    python -m reports.stats_simulation --reduced  # the grid CI runs

Two methods a and b, S seeds each, the same I test images. Per image, method and seed the value
is drawn from a logistic model (base accuracy p₀; logit-scale effects):

    η[m, s, i] = logit(p₀) + u_i + v_mi + w_ms + δ·[m = a]
    u_i ~ N(0, 1)              the image's difficulty, shared by both methods
    v_mi ~ N(0, sd_image)      the method × image effect
    w_ms ~ N(0, τ)             the run-level seed shift; τ = shift / (100 p₀ (1 − p₀)) makes the
                               run's accuracy spread by ``shift`` points (delta method)
    accuracy: y = 100 · Bernoulli(expit(η));  bounded explanation metric: y = 100 · expit(η + e), e ~ N(0, 1)

A true null is δ = 0 (both methods have the same expected value over images and seeds). Coverage
and power are of δ set so a beats b by ``+2`` points (its true value computed by Monte Carlo on
200 × 5,000 fresh images). Each procedure is run through the suite's own code on every
simulated design at once: ``crossed`` (``reports.crossed``, what ``compare`` uses), the two it
replaced: ``image t`` (Student t over images of each image's seed-averaged difference) and
``seed t`` (paired Student t over the seeds' means), and two alternatives it was chosen over:
``Satterthwaite`` (its variance with Satterthwaite's df at every S, not Cochran–Cox at 2–3 seeds)
and ``truncated`` (both variance components set to 0 when negative, as a mixed model's REML fit
does in a balanced design, with Satterthwaite's df).
"""
from __future__ import annotations

import argparse
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from reports.crossed import MeanSquares, mean_squares, reference_of

ALPHA = 0.05
METRICS = ("acc", "sta")


@dataclass(frozen=True)
class Design:
    images: int
    seeds: int
    sd_image: float  # method × image effect, logit scale
    shift: float  # run-level seed shift, accuracy points of spread
    base: float  # base accuracy
    metric: str  # "acc" (0/1) or "sta" (a bounded per-image explanation metric)


FULL_GRID: dict[str, tuple] = {"images": (120, 1000, 5794), "seeds": (2, 3, 5), "sd_image": (0.0, 0.5, 1.0, 2.0),
                               "shift": (0.0, 0.5, 1.0), "base": (0.8, 0.95), "metric": METRICS}
REDUCED_GRID: dict[str, tuple] = {"images": (120, 1000), "seeds": (2, 3, 5), "sd_image": (0.0, 2.0),
                                  "shift": (0.0, 1.0), "base": (0.8,), "metric": METRICS}


def designs(grid: dict[str, tuple]) -> Iterator[Design]:
    for values in itertools.product(*grid.values()):
        yield Design(**dict(zip(grid, values)))


def _logit_shift(points: float, base: float) -> float:
    return points / (100.0 * base * (1.0 - base))  # d expit / d η = p (1 − p)


def simulate(rng: np.random.Generator, design: Design, n: int, delta: float = 0.0) -> np.ndarray:
    """``n`` designs' per-image differences a − b, shape (n, S, I); ``delta`` on the logit scale."""
    s, i = design.seeds, design.images
    eta = special.logit(design.base) + rng.normal(0.0, 1.0, (n, 1, 1, i))
    if design.sd_image:
        eta = eta + rng.normal(0.0, design.sd_image, (n, 2, 1, i))
    if design.shift:
        eta = eta + rng.normal(0.0, _logit_shift(design.shift, design.base), (n, 2, s, 1))
    eta = eta + np.array([delta, 0.0])[None, :, None, None]
    if design.metric == "acc":
        y = 100.0 * (rng.random((n, 2, s, i)) < special.expit(eta))
    else:
        y = 100.0 * special.expit(eta + rng.normal(0.0, 1.0, (n, 2, s, i)))
    return y[:, 0] - y[:, 1]


def true_difference(rng: np.random.Generator, design: Design, delta: float) -> float:
    """a − b's expected value at logit shift ``delta`` (Monte Carlo, 10⁶ image draws)."""
    one = Design(5000, 1, design.sd_image, 0.0, design.base, design.metric)
    return float(np.mean([simulate(rng, one, 20, delta).mean() for _ in range(10)]))


def rejections(d: np.ndarray, truth: float = 0.0) -> dict[str, np.ndarray]:
    """Per procedure, whether its 1 − ALPHA interval excludes ``truth`` on each design of ``d``."""
    ms = mean_squares(d)
    crossed = reference_of(ms)
    half = crossed.critical(1 - ALPHA) * crossed.se
    image_means = d.mean(axis=1)
    image_se = image_means.std(axis=-1, ddof=1) / np.sqrt(d.shape[2])
    seed_means = d.mean(axis=2)
    seed_se = seed_means.std(axis=-1, ddof=1) / np.sqrt(d.shape[1])
    with np.errstate(invalid="ignore", divide="ignore"):
        return {
            "crossed": np.abs(crossed.mean - truth) > half,
            "Satterthwaite": np.abs(crossed.mean - truth) > stats.t.isf(ALPHA / 2, crossed.df) * crossed.se,
            "truncated": _truncated(ms, truth),
            "image t": np.abs(image_means.mean(-1) - truth) > stats.t.isf(ALPHA / 2, d.shape[2] - 1) * image_se,
            "seed t": np.abs(seed_means.mean(-1) - truth) > stats.t.isf(ALPHA / 2, d.shape[1] - 1) * seed_se,
        }


def _truncated(ms: MeanSquares, truth: float) -> np.ndarray:
    """The interval with both variance components truncated at 0 (σ²_seed and σ²_image; the
    residual's always counts) and Satterthwaite's df of the mean squares that remain."""
    s, i = ms.seeds, ms.images
    has_seed, has_image = ms.seed > ms.residual, ms.image > ms.residual
    c_seed, c_image = has_seed.astype(float), has_image.astype(float)
    c_resid = 1.0 - c_seed - c_image  # σ²_s/S + σ²_i/I + σ²_e/(SI) as a sum of mean squares over S·I
    total = c_seed * ms.seed + c_image * ms.image + c_resid * ms.residual
    df = total ** 2 / ((c_seed * ms.seed) ** 2 / (s - 1) + (c_image * ms.image) ** 2 / (i - 1)
                       + (c_resid * ms.residual) ** 2 / ((s - 1) * (i - 1)))
    return np.abs(ms.mean - truth) > stats.t.isf(ALPHA / 2, df) * np.sqrt(total / (s * i))


@dataclass(frozen=True)
class Figures:
    design: Design
    sims: int
    false_positive: dict[str, float]
    coverage: dict[str, float]  # of the true +2-point difference
    power: dict[str, float]  # rejections of 0 when a beats b by 2 points


def run_design(design: Design, sims: int, seed: int, batch: int = 100) -> Figures:
    rng = np.random.default_rng([seed, design.images, design.seeds, int(10 * design.sd_image),
                                 int(10 * design.shift), int(100 * design.base), METRICS.index(design.metric)])
    delta = _logit_shift(2.0, design.base)
    truth = true_difference(rng, design, delta)
    null, miss, hit = ({} for _ in range(3))
    for start in range(0, sims, batch):
        n = min(batch, sims - start)
        for name, r in rejections(simulate(rng, design, n)).items():
            null[name] = null.get(name, 0) + int(r.sum())
        shifted = simulate(rng, design, n, delta)
        for name, r in rejections(shifted, truth).items():
            miss[name] = miss.get(name, 0) + int(r.sum())
        for name, r in rejections(shifted).items():
            hit[name] = hit.get(name, 0) + int(r.sum())
    return Figures(design, sims, {k: v / sims for k, v in null.items()}, {k: 1 - v / sims for k, v in miss.items()},
                   {k: v / sims for k, v in hit.items()})


def markdown(rows: list[Figures]) -> str:
    names = list(rows[0].false_positive)
    header = ("| images | seeds | sd image | shift | base | metric | "
              + " | ".join(f"FPR {n}" for n in names) + " | coverage crossed | "
              + " | ".join(f"power {n}" for n in names) + " |")
    lines = [header, "|" + "---|" * (6 + 2 * len(names) + 1)]
    for r in rows:
        d = r.design
        lines.append(f"| {d.images} | {d.seeds} | {d.sd_image:g} | {d.shift:g} | {d.base:g} | {d.metric} | "
                     + " | ".join(f"{r.false_positive[n]:.3f}" for n in names)
                     + f" | {r.coverage['crossed']:.3f} | "
                     + " | ".join(f"{r.power[n]:.3f}" for n in names) + " |")
    return "\n".join(lines)


def summary(rows: list[Figures]) -> str:
    """Per procedure and number of seeds: the range of the false-positive rate and of coverage."""
    out = []
    for name in rows[0].false_positive:
        for s in sorted({r.design.seeds for r in rows}):
            fpr = [r.false_positive[name] for r in rows if r.design.seeds == s]
            cov = [r.coverage[name] for r in rows if r.design.seeds == s]
            out.append(f"- {name}, {s} seeds: false-positive rate {min(fpr):.3f}–{max(fpr):.3f}, coverage of +2 "
                       f"points {min(cov):.3f}–{max(cov):.3f} ({len(fpr)} designs)")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m reports.stats_simulation", description=__doc__.split("\n\n")[0],
                                     allow_abbrev=False)
    parser.add_argument("--reduced", action="store_true", help="the reduced grid CI runs")
    parser.add_argument("--sims", type=int, default=1000, help="simulated designs per grid point (default 1000)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rows = [run_design(d, args.sims, args.seed) for d in designs(REDUCED_GRID if args.reduced else FULL_GRID)]
    print(markdown(rows) + "\n\n" + summary(rows))


if __name__ == "__main__":
    main()
