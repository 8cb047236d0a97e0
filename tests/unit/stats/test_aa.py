"""The rules the performance gate and the canary share: the A/A widening, the block floor and
the rate rule (one home each, servegate.stats)."""

import math

import pytest

from servegate.stats.aa import deviation, widen_factor
from servegate.stats.mann_whitney import can_be_significant, smallest_p
from servegate.stats.proportions import rate_increase


@pytest.mark.parametrize(("ratio", "d"), [(1.0, 0.0), (1.25, 0.25), (0.8, 0.25), (2.0, 1.0)])
def test_a_replica_deviates_the_same_either_way(ratio: float, d: float) -> None:
    got = deviation(ratio)
    assert got is not None
    assert got == pytest.approx(d)
    assert widen_factor(got, 2.0) == pytest.approx(1 + 2 * d)


@pytest.mark.parametrize("ratio", [None, 0.0, -1.0, math.inf, math.nan])
def test_a_ratio_that_is_no_ratio_has_no_deviation_and_widens_nothing(ratio: float | None) -> None:
    assert deviation(ratio) is None
    assert widen_factor(deviation(ratio), 2.0) == 1.0


def test_four_blocks_a_side_can_reach_significance_but_two_and_three_cannot() -> None:
    assert smallest_p(4, 4) == pytest.approx(1 / 70)
    assert can_be_significant(4, 4, 0.05)
    assert not can_be_significant(2, 3, 0.05)  # smallest p 0.1
    assert not can_be_significant(1, 30, 0.05)
    assert smallest_p(0, 5) == 1.0


def test_a_rate_regresses_only_past_its_band_and_significant() -> None:
    big = rate_increase(0, 100, 20, 100)
    assert big.regressed(0.01, 0.05)
    small = rate_increase(0, 10, 1, 10)  # +10 points, but p = 0.5
    assert small.beyond(0.01)
    assert not small.regressed(0.01, 0.05)
    inside = rate_increase(10, 1000, 19, 1000)  # significant? +0.9 points, inside a 1-point band
    assert not inside.beyond(0.01)


def test_a_ratio_band_counts_any_failure_where_the_baseline_had_none() -> None:
    inc = rate_increase(0, 200, 12, 200)
    assert inc.ratio == math.inf
    assert inc.beyond(2.0, "ratio")
    assert inc.regressed(2.0, 0.05, "ratio")
    assert rate_increase(0, 50, 0, 50).ratio is None
