"""The study's statistics: mean +- std over seeds, paired deltas, the scaling fit and the compute multiplier.

Pure functions of plain numbers, so each is tested on synthetic data with a known answer.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Stat:
    mean: float
    std: float  # sample standard deviation (n - 1); nan for a single value
    n: int

    def __str__(self) -> str:
        if self.n == 0:
            return "-"
        return f"{self.mean:.4f}" if self.n == 1 else f"{self.mean:.4f} +- {self.std:.4f}"


def mean_std(values) -> Stat:
    values = [float(v) for v in values]
    n = len(values)
    if n == 0:
        return Stat(math.nan, math.nan, 0)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else math.nan
    return Stat(mean, std, n)


def paired_deltas(baseline: dict, other: dict) -> dict:
    """{seed: other - baseline} over the seeds both have: same seed = same init and data order, so the seed-to-seed
    noise they share cancels."""
    return {seed: other[seed] - baseline[seed] for seed in sorted(set(baseline) & set(other))}


def paired_t(deltas) -> float:
    """The paired t statistic mean / (std / sqrt(n)) of per-seed deltas (n - 1 degrees of freedom; |t| > 4.30 is
    p < 0.05 two-sided at n = 3). nan with fewer than two deltas or none varying."""
    stat = mean_std(deltas)
    if stat.n < 2 or stat.std == 0:
        return math.nan
    return stat.mean / (stat.std / math.sqrt(stat.n))


@dataclass(frozen=True)
class PowerLaw:
    """L = a * C^b."""

    a: float
    b: float

    def loss(self, compute: float) -> float:
        return self.a * compute**self.b

    def compute_for(self, loss: float) -> float:
        """The compute at which this law reaches `loss`; inf past float range (a nearly flat law, b ~ 0, reaches a
        lower loss only at astronomical compute)."""
        exponent = math.log(loss / self.a) / self.b
        return math.exp(exponent) if exponent < math.log(sys.float_info.max) else math.inf


def fit_power_law(compute, loss) -> PowerLaw:
    """Least squares on log L = log a + b log C (at least two distinct compute values, all numbers > 0)."""
    compute, loss = [float(c) for c in compute], [float(v) for v in loss]
    if len(compute) != len(loss):
        raise ValueError(f"fit_power_law: {len(compute)} compute values but {len(loss)} losses")
    if len(set(compute)) < 2:
        raise ValueError("fit_power_law needs at least two distinct compute values")
    if min(compute) <= 0 or min(loss) <= 0 or not all(map(math.isfinite, compute + loss)):
        raise ValueError("fit_power_law needs finite compute and loss values > 0")
    x, y = [math.log(c) for c in compute], [math.log(v) for v in loss]
    mx, my = sum(x) / len(x), sum(y) / len(y)
    b = sum((xi - mx) * (yi - my) for xi, yi in zip(x, y)) / sum((xi - mx) ** 2 for xi in x)
    return PowerLaw(math.exp(my - b * mx), b)


def compute_multiplier(baseline: PowerLaw, other: PowerLaw, compute: float) -> float:
    """How much more compute the baseline needs to reach the loss `other` reaches at `compute` (the paper: Block
    AttnRes matches a baseline trained with 1.25x the compute). nan when the baseline's fit does not decrease with
    compute (b >= 0): then no amount of compute makes it match."""
    if baseline.b >= 0:
        return math.nan
    return baseline.compute_for(other.loss(compute)) / compute


def training_flops(params: int, tokens: int) -> float:
    """C = 6 N D: forward (2 N D) and backward (4 N D) matmul FLOPs, attention's sequence term left out."""
    return 6.0 * params * tokens


def bootstrap_multiplier(baseline: dict, other: dict, compute_of: dict, at: float, samples: int = 2000,
                         seed: int = 0, level: float = 0.9) -> tuple[float, float, float]:
    """The compute multiplier of `other` vs `baseline` at compute `at` with a percentile bootstrap interval.

    `baseline` / `other`: {size: [final loss of each seed]}; `compute_of`: {size: training FLOPs}. Each resample
    draws, for every size, its seeds with replacement (the seeds are what varies between replications of the grid),
    refits both power laws and recomputes the multiplier. Returns (point estimate, low, high) at `level` (two-sided);
    resamples whose baseline fit does not decrease are counted as infinite (no compute makes the baseline match)."""
    import random

    def fit(points: dict):
        sizes = sorted(points)
        return fit_power_law([compute_of[s] for s in sizes], [sum(points[s]) / len(points[s]) for s in sizes])

    point = compute_multiplier(fit(baseline), fit(other), at)
    rng = random.Random(seed)
    draws = []
    for _ in range(samples):
        resample = [{s: [rng.choice(v) for _ in v] for s, v in series.items()} for series in (baseline, other)]
        m = compute_multiplier(fit(resample[0]), fit(resample[1]), at)
        draws.append(math.inf if math.isnan(m) else m)
    draws.sort()
    tail = (1 - level) / 2
    return point, draws[int(tail * (samples - 1))], draws[int((1 - tail) * (samples - 1))]
