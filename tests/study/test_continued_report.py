"""The continued study's verdict (hf_attnres/study/continued/report.py): the Student-t 95% CI of the paired held-out
deltas against a hand computation, and the one-line verdict it gives."""
import math

import pytest

from hf_attnres.study.continued.report import paired_ci, verdict


def test_ci_matches_hand_computation():
    # deltas 1, 2, 3: mean 2, std 1, t(0.975, 2 dof) = 4.302653
    mean, low, high = paired_ci([1.0, 2.0, 3.0])
    half = 4.302653 / math.sqrt(3)
    assert mean == pytest.approx(2.0)
    assert (low, high) == pytest.approx((2.0 - half, 2.0 + half), rel=1e-6)


@pytest.mark.parametrize("deltas, word", [
    ([-0.03, -0.02, -0.025], "helps"),      # the whole interval below zero: a lower loss
    ([0.03, 0.02, 0.025], "hurts"),
    ([0.03, -0.02, 0.001], "no measurable difference"),
])
def test_verdict_from_the_interval(deltas, word):
    line = verdict(deltas, "this budget")
    assert f"**{word} at this budget**" in line and "95% CI" in line and "n = 3" in line


def test_one_seed_gives_no_verdict():
    assert paired_ci([0.1]) is None
    assert verdict([0.1], "this budget").startswith("no verdict")
