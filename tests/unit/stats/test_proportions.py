import pytest

from servegate.stats import rate_increase


def test_twelve_failures_in_forty_against_none_is_a_significant_increase() -> None:
    result = rate_increase(0, 40, 12, 40)
    assert result.increase == pytest.approx(0.3)
    assert result.p_value < 0.001


def test_one_failure_against_none_is_not_significant() -> None:
    result = rate_increase(0, 40, 1, 40)
    assert result.increase == pytest.approx(0.025)
    assert result.p_value == pytest.approx(0.5)


def test_fewer_failures_than_the_baseline_is_no_increase() -> None:
    result = rate_increase(5, 40, 0, 40)
    assert result.increase == pytest.approx(-0.125)
    assert result.p_value == pytest.approx(1.0)


def test_no_failures_anywhere_or_an_empty_side_has_nothing_to_test() -> None:
    assert rate_increase(0, 40, 0, 40).p_value == 1.0
    assert rate_increase(0, 0, 3, 10).increase is None


def test_more_failures_than_requests_is_an_error() -> None:
    with pytest.raises(ValueError, match="failed <= n"):
        rate_increase(3, 2, 0, 2)
