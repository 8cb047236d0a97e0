"""The Hodges-Lehmann shift and its exact bounds: consistent with the Mann-Whitney test."""

from __future__ import annotations

import math
from math import comb

import numpy as np
import pytest
from scipy import stats as scipy_stats

from servegate.stats.mann_whitney import critical_u, exact_p_value, mann_whitney_u, u_null_counts
from servegate.stats.shift_interval import ratio_interval, shift_interval


@pytest.mark.parametrize(("n1", "n2"), [(1, 1), (3, 4), (6, 6), (8, 5), (12, 12)])
def test_the_exact_null_distribution_of_u_counts_every_ordering_once_and_is_symmetric(
    n1: int, n2: int
) -> None:
    counts = u_null_counts(n1, n2)
    assert len(counts) == n1 * n2 + 1
    assert sum(counts) == comb(n1 + n2, n1)
    assert counts == counts[::-1]


@pytest.mark.parametrize(("n1", "n2"), [(4, 4), (6, 6), (5, 9), (10, 10)])
def test_the_exact_p_value_is_scipys_exact_mann_whitney_p(n1: int, n2: int) -> None:
    rng = np.random.default_rng(n1 * 100 + n2)
    for _ in range(30):
        c, b = rng.normal(0.5, 1, n1), rng.normal(0, 1, n2)
        res = scipy_stats.mannwhitneyu(c, b, alternative="greater", method="exact")
        assert exact_p_value(float(res.statistic), n1, n2) == pytest.approx(res.pvalue, rel=1e-9)


def test_six_blocks_a_side_reach_one_in_924_and_three_cannot_reach_five_percent() -> None:
    assert critical_u(6, 6, 0.0011) == (36, pytest.approx(1 / 924))
    assert critical_u(6, 6, 0.001) is None
    assert critical_u(3, 3, 0.049) is None  # smallest p 1/20


@pytest.mark.parametrize(("nb", "nc"), [(3, 3), (4, 4), (5, 7), (6, 6), (7, 5)])
@pytest.mark.parametrize("level", [0.01, 0.025, 0.05, 0.1])
def test_the_lower_bound_is_above_zero_exactly_when_the_one_sided_test_is_significant(
    nb: int, nc: int, level: float
) -> None:
    # Many random samples, with and without a shift: no ties (continuous values), and sizes
    # under 8 so `mann_whitney_u` (scipy's "auto") computes the exact p.
    rng = np.random.default_rng(int(level * 1000) + 10 * nb + nc)
    agreed = 0
    for trial in range(300):
        shift = rng.choice([0.0, 0.5, 1.0, 2.0, -1.0])
        b = rng.lognormal(0.0, 0.3, nb).tolist()
        c = (rng.lognormal(0.0, 0.3, nc) * math.exp(shift * 0.3)).tolist()
        mw_up = mann_whitney_u(b, c, alternative="greater")
        mw_down = mann_whitney_u(b, c, alternative="less")
        ci = shift_interval(b, c, level)
        assert (ci.low > 0) == (mw_up.p_value <= level), (trial, ci, mw_up)
        assert (ci.high < 0) == (mw_down.p_value <= level), (trial, ci, mw_down)
        r = ratio_interval(b, c, level)
        assert (r.low > 1) == (mw_up.p_value <= level)
        assert ci.p_value("greater") == pytest.approx(mw_up.p_value, rel=1e-9)
        agreed += 1
    assert agreed == 300


@pytest.mark.parametrize(("nb", "nc"), [(8, 8), (10, 12)])
def test_the_equivalence_holds_beyond_the_sizes_scipy_computes_exactly_by_default(
    nb: int, nc: int
) -> None:
    rng = np.random.default_rng(nb + nc)
    for _ in range(200):
        b, c = rng.normal(0, 1, nb), rng.normal(rng.choice([0.0, 0.7]), 1, nc)
        p = scipy_stats.mannwhitneyu(c, b, alternative="greater", method="exact").pvalue
        assert (shift_interval(b.tolist(), c.tolist(), 0.02).low > 0) == (p <= 0.02)


def test_a_pure_shift_is_estimated_and_bounded_around_it() -> None:
    b = [10.0, 12.0, 11.0, 13.0, 9.0, 14.0]
    ci = shift_interval(b, [x + 5 for x in b], 0.025)
    assert ci.estimate == 5.0
    assert ci.low < 5.0 < ci.high
    assert ci.confidence >= 0.95
    assert ci.u == 35.5  # every candidate above every baseline but 9 + 5 = 14: a tie, half


def test_too_few_values_leave_the_ends_unbounded_not_a_false_bound() -> None:
    ci = ratio_interval([1.0, 1.1], [3.0, 3.3], 0.05)  # 2 v 2: smallest p 1/6
    assert not ci.bounded
    assert (ci.low, ci.high) == (0.0, math.inf)
    assert ci.estimate == pytest.approx(3.0)


def test_the_ratio_interval_covers_the_true_ratio_at_least_as_often_as_promised() -> None:
    rng = np.random.default_rng(7)
    covered, trials, level = 0, 400, 0.025
    for _ in range(trials):
        b = rng.lognormal(0, 0.25, 6)
        c = rng.lognormal(0, 0.25, 6) * 1.3
        ci = ratio_interval(b.tolist(), c.tolist(), level)
        covered += ci.low <= 1.3 <= ci.high
    # Guaranteed coverage >= 1 - 2 * attained (about 0.96 at 6 v 6); 400 trials: a margin.
    assert covered / trials >= 0.93


@pytest.mark.parametrize(
    ("b", "c", "level", "why"),
    [
        ([], [1.0], 0.05, "at least one value on each side"),
        ([1.0], [1.0], 0.0, "level must be in"),
        ([1.0], [1.0], 0.5, "level must be in"),
        ([0.0, 1.0], [1.0], 0.05, "positive values"),
    ],
)
def test_bad_input_is_an_error(b: list[float], c: list[float], level: float, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        ratio_interval(b, c, level)
