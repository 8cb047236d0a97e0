import pytest

from servegate.stats import wilson_interval


def test_no_observations_give_the_uninformative_interval() -> None:
    interval = wilson_interval(0, 0)
    assert (interval.low, interval.high) == (0.0, 1.0)
    assert interval.rate is None


@pytest.mark.parametrize(
    ("successes", "n", "low", "high"),
    [
        (0, 10, 0.0, 0.2775),
        (10, 10, 0.7225, 1.0),
        (5, 10, 0.2366, 0.7634),
        (1, 1, 0.2065, 1.0),
        (81, 100, 0.7222, 0.8749),
    ],
    ids=["none-pass", "all-pass", "half", "n-equals-one", "large-n"],
)
def test_wilson_interval_matches_published_values(
    successes: int, n: int, low: float, high: float
) -> None:
    interval = wilson_interval(successes, n)
    assert interval.low == pytest.approx(low, abs=1e-4)
    assert interval.high == pytest.approx(high, abs=1e-4)


def test_interval_narrows_as_the_sample_grows() -> None:
    small = wilson_interval(9, 10)
    large = wilson_interval(900, 1000)
    assert large.high - large.low < small.high - small.low


@pytest.mark.parametrize(
    ("successes", "n", "confidence"),
    [(-1, 5, 0.95), (6, 5, 0.95), (1, -1, 0.95), (1, 5, 1.0), (1, 5, 0.0)],
    ids=["negative-successes", "more-successes-than-trials", "negative-n", "conf-1", "conf-0"],
)
def test_impossible_inputs_are_rejected(successes: int, n: int, confidence: float) -> None:
    with pytest.raises(ValueError, match=r"must|need"):
        wilson_interval(successes, n, confidence)
