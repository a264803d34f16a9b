"""Per-item statistics of a comparison: mean with standard error, and a paired test of two models on the same items.

Both models answer the same items, so the test is paired (it looks at per-item differences, which removes the items'
own difficulty from the noise): an exact McNemar test when the metric is 0/1 (accuracy, pass@1, exact match), a paired
t-test otherwise (bits per byte, loss). scipy does the distributions; tests check them against hand computations.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class PairedResult:
    test: str  # "mcnemar-exact" or "paired-t"
    n: int  # items both models answered
    mean_a: float
    mean_b: float
    delta: float  # mean_b - mean_a
    statistic: float  # discordant pairs b-only-right for McNemar, t for the t-test
    p_value: float

    def as_dict(self) -> dict:
        return asdict(self)


def mean_stderr(values: list[float]) -> tuple[float, float]:
    """Mean and its standard error (sample standard deviation / sqrt(n)); stderr is nan for fewer than 2 items."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = math.fsum(values) / n
    if n < 2:
        return mean, math.nan
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def is_binary(values) -> bool:
    return all(v in (0, 1, 0.0, 1.0, True, False) for v in values)


def paired_test(a: list[float], b: list[float]) -> PairedResult:
    """Paired test of model B against model A on the same items (a[i] and b[i] are the same item)."""
    if len(a) != len(b):
        raise ValueError(f"paired test needs the same items for both models, got {len(a)} and {len(b)}")
    n = len(a)
    mean_a, mean_b = (math.fsum(x) / n if n else math.nan for x in (a, b))
    if is_binary(a) and is_binary(b):
        return _mcnemar(a, b, mean_a, mean_b)
    return _paired_t(a, b, mean_a, mean_b)


def _mcnemar(a, b, mean_a, mean_b) -> PairedResult:
    from scipy.stats import binomtest

    only_a = sum(1 for x, y in zip(a, b) if x and not y)
    only_b = sum(1 for x, y in zip(a, b) if y and not x)
    discordant = only_a + only_b
    # Under H0 each discordant item is equally likely to favour either model: two-sided exact binomial test
    p = binomtest(only_b, discordant, 0.5).pvalue if discordant else 1.0
    return PairedResult("mcnemar-exact", len(a), mean_a, mean_b, mean_b - mean_a, float(only_b), float(p))


def _paired_t(a, b, mean_a, mean_b) -> PairedResult:
    from scipy.stats import ttest_rel

    diffs = [y - x for x, y in zip(a, b)]
    if len(diffs) < 2 or all(d == diffs[0] for d in diffs):
        # No spread in the differences: the t statistic is undefined (identical models give p = 1)
        p = 1.0 if all(d == 0 for d in diffs) else math.nan
        return PairedResult("paired-t", len(a), mean_a, mean_b, mean_b - mean_a, math.nan, p)
    result = ttest_rel(b, a)
    return PairedResult("paired-t", len(a), mean_a, mean_b, mean_b - mean_a, float(result.statistic),
                        float(result.pvalue))
