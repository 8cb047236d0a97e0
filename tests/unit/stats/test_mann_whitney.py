import pytest

from servegate.stats import mann_whitney_u


def test_a_clearly_slower_candidate_is_significant_with_full_effect() -> None:
    baseline = [10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0]
    candidate = [30.0, 31.0, 32.0, 33.0, 34.0, 35.0, 36.0, 37.0]
    result = mann_whitney_u(baseline, candidate)
    assert result.p_value < 0.001
    assert result.effect == 1.0
    assert result.rank_biserial == 1.0


def test_a_faster_candidate_is_not_significant_when_testing_for_slower() -> None:
    result = mann_whitney_u([30.0, 31.0, 32.0, 33.0], [10.0, 11.0, 12.0, 13.0])
    assert result.p_value > 0.5
    assert result.effect == 0.0


def test_same_samples_show_no_shift() -> None:
    values = [1.0, 5.0, 2.0, 8.0, 3.0]
    result = mann_whitney_u(values, values, alternative="two-sided")
    assert result.effect == 0.5
    assert result.p_value == pytest.approx(1.0)


def test_all_values_tied_gives_no_shift_instead_of_dividing_by_zero() -> None:
    result = mann_whitney_u([5.0] * 10, [5.0] * 12)
    assert result.p_value == 1.0
    assert result.effect == 0.5
    assert result.u == 60.0


def test_ties_count_half_towards_the_effect() -> None:
    result = mann_whitney_u([1.0, 2.0], [2.0, 3.0])
    # pairs (c > b): 3>1, 3>2, 2>1 = 3, ties: 2=2 = 1 -> (3 + 0.5) / 4
    assert result.effect == pytest.approx(0.875)


@pytest.mark.parametrize(
    ("baseline", "candidate"),
    [([], [1.0]), ([1.0], []), ([], [])],
    ids=["no-baseline", "no-candidate", "nothing"],
)
def test_an_empty_sample_is_not_measured(baseline: list[float], candidate: list[float]) -> None:
    result = mann_whitney_u(baseline, candidate)
    assert not result.measured
    assert result.p_value == 1.0


def test_one_value_each_is_measured_but_never_significant() -> None:
    result = mann_whitney_u([1.0], [2.0])
    assert result.measured
    assert result.p_value >= 0.5


def test_nan_is_rejected() -> None:
    with pytest.raises(ValueError, match="finite"):
        mann_whitney_u([1.0, float("nan")], [2.0])
