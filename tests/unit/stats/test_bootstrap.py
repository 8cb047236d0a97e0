import numpy as np
import pytest

from servegate.stats import quantile_ratio_interval


def _latencies(n: int, seed: int, scale: float = 1.0) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(v) for v in scale * rng.lognormal(mean=4.0, sigma=0.3, size=n)]


def test_a_clear_30_percent_shift_gives_an_interval_around_1_3_that_excludes_1() -> None:
    baseline = _latencies(400, seed=1)
    candidate = _latencies(400, seed=2, scale=1.3)
    ci = quantile_ratio_interval(baseline, candidate, quantile=0.95, seed=7)
    assert ci.measured
    assert ci.ratio == pytest.approx(1.3, rel=0.1)
    assert ci.low is not None
    assert ci.high is not None
    assert 1.0 < ci.low <= ci.ratio <= ci.high
    assert ci.low < 1.3 < ci.high


def test_identical_samples_give_a_ratio_of_one_inside_the_interval() -> None:
    values = _latencies(200, seed=3)
    ci = quantile_ratio_interval(values, values, seed=0)
    assert ci.ratio == 1.0
    assert ci.low is not None
    assert ci.high is not None
    assert ci.low <= 1.0 <= ci.high


def test_all_values_tied_give_a_zero_width_interval_at_one() -> None:
    ci = quantile_ratio_interval([5.0] * 30, [5.0] * 40)
    assert (ci.ratio, ci.low, ci.high) == (1.0, 1.0, 1.0)


def test_the_same_seed_gives_the_same_interval_and_is_recorded() -> None:
    baseline, candidate = _latencies(100, seed=4), _latencies(100, seed=5)
    first = quantile_ratio_interval(baseline, candidate, seed=11, resamples=500)
    again = quantile_ratio_interval(baseline, candidate, seed=11, resamples=500)
    assert first == again
    assert (first.seed, first.resamples) == (11, 500)


@pytest.mark.parametrize(
    ("n_baseline", "n_candidate"),
    [(0, 50), (50, 0), (19, 50), (50, 3)],
    ids=["no-baseline", "no-candidate", "baseline-tiny", "candidate-tiny"],
)
def test_too_few_samples_are_not_measured(n_baseline: int, n_candidate: int) -> None:
    ci = quantile_ratio_interval([1.0] * n_baseline, [1.0] * n_candidate, min_samples=20)
    assert not ci.measured
    assert (ci.ratio, ci.low, ci.high) == (None, None, None)
    assert "too few samples" in ci.reason


def test_a_baseline_quantile_of_zero_has_no_ratio() -> None:
    ci = quantile_ratio_interval([0.0] * 30, [1.0] * 30)
    assert not ci.measured
    assert "does not exist" in ci.reason


def test_replicates_with_a_zero_baseline_quantile_widen_the_interval_to_infinity() -> None:
    # Mostly zeros: some resamples of the baseline have a p50 of 0, so no finite upper end.
    baseline = [0.0] * 14 + [1.0] * 16
    ci = quantile_ratio_interval(baseline, [1.0] * 30, quantile=0.5, seed=1)
    assert ci.measured
    assert ci.high == float("inf")


def test_non_finite_values_are_an_error() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        quantile_ratio_interval([1.0] * 30, [float("nan")] * 30)


@pytest.mark.parametrize(
    "kwargs",
    [{"quantile": 1.0}, {"quantile": 0.0}, {"confidence": 1.0}, {"resamples": 0}],
    ids=["q1", "q0", "confidence1", "no-resamples"],
)
def test_invalid_parameters_are_an_error(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        quantile_ratio_interval([1.0] * 30, [1.0] * 30, **kwargs)  # type: ignore[arg-type]


def test_large_samples_are_resampled_in_bounded_batches() -> None:
    baseline, candidate = _latencies(20_000, seed=8), _latencies(20_000, seed=9)
    ci = quantile_ratio_interval(baseline, candidate, resamples=300)
    assert ci.low is not None
    assert ci.high is not None
    assert ci.low < 1.0 < ci.high
