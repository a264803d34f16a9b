"""The paired tests of the comparison report equal reference computations (Student's t by numerical integration,
McNemar's exact binomial)."""
from __future__ import annotations

import math

import pytest

from hf_attnres.evaluation.stats import mean_stderr, paired_test


def test_paired_tests_equal_reference_computations():
    a = [0.9, 1.1, 1.3, 0.7, 1.0, 1.2]
    b = [0.8, 1.0, 1.35, 0.5, 0.9, 1.0]
    diffs = [y - x for x, y in zip(a, b)]
    n, mean = len(diffs), sum(diffs) / len(diffs)
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    t = mean / (sd / math.sqrt(n))
    result = paired_test(a, b)
    assert result.test == "paired-t" and result.statistic == pytest.approx(t) and result.delta == pytest.approx(mean)
    # two-sided p of Student's t with 5 degrees of freedom, by numerical integration of its density
    density = lambda x: math.gamma(3) / (math.sqrt(5 * math.pi) * math.gamma(2.5)) * (1 + x * x / 5) ** -3  # noqa: E731
    steps = 200000
    upper = abs(t) + 200.0
    h = (upper - abs(t)) / steps
    tail = h * (sum(density(abs(t) + (i + 0.5) * h) for i in range(steps)))
    assert result.p_value == pytest.approx(2 * tail, rel=1e-3)

    # McNemar, exact: 7 items only B gets right, 2 only A does; p = 2 * P(X <= 2), X ~ Bin(9, 1/2)
    a = [1] * 2 + [0] * 7 + [1] * 5 + [0] * 4
    b = [0] * 2 + [1] * 7 + [1] * 5 + [0] * 4
    result = paired_test(a, b)
    assert result.test == "mcnemar-exact" and result.statistic == 7
    assert result.p_value == pytest.approx(2 * sum(math.comb(9, k) for k in range(3)) / 2**9)
    assert paired_test([1, 0, 1], [1, 0, 1]).p_value == 1.0  # no discordant item
    assert mean_stderr([1.0, 2.0, 3.0]) == pytest.approx((2.0, 1 / math.sqrt(3)))
    with pytest.raises(ValueError, match="same items"):
        paired_test([1.0], [1.0, 2.0])
