import numpy as np
import pytest

from servegate.stats import Classification, classify


def _sample(n: int, seed: int, scale: float = 1.0) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(v) for v in scale * rng.normal(100.0, 5.0, size=n)]


def test_a_clear_30_percent_latency_increase_is_high() -> None:
    result = classify("ttft_ms", _sample(60, 1), _sample(60, 2, scale=1.3))
    assert result.classification is Classification.HIGH
    assert result.ratio == pytest.approx(1.3, rel=0.05)
    assert result.p_value is not None
    assert result.p_value < 0.001
    assert result.effect == pytest.approx(1.0, abs=0.01)


def test_a_significant_shift_inside_the_allowed_band_passes() -> None:
    result = classify("ttft_ms", _sample(60, 1), _sample(60, 2, scale=1.3), allowed_increase=0.5)
    assert result.classification is Classification.PASS
    assert "inside the allowed band" in result.reason


def test_a_large_ratio_that_is_not_significant_passes() -> None:
    # Two tiny, overlapping samples: the mean ratio is past the band, the rank test is not sure.
    baseline = [10.0, 200.0, 30.0]
    candidate = [12.0, 25.0, 400.0]
    result = classify("e2el_ms", baseline, candidate, min_samples=3)
    assert result.ratio is not None
    assert result.ratio > 1.2
    assert result.classification is Classification.PASS
    assert "not significant" in result.reason


def test_identical_samples_pass() -> None:
    values = _sample(40, 3)
    result = classify("tpot_ms", values, list(reversed(values)))
    assert result.classification is Classification.PASS
    assert result.reason == "identical samples"
    assert result.ratio == 1.0


@pytest.mark.parametrize(
    ("baseline", "candidate"),
    [([], [1.0] * 30), ([1.0] * 30, []), ([1.0] * 5, [2.0] * 5)],
    ids=["no-baseline", "no-candidate", "tiny"],
)
def test_too_few_samples_are_not_measured_never_a_pass(
    baseline: list[float], candidate: list[float]
) -> None:
    result = classify("ttft_ms", baseline, candidate)
    assert result.classification is Classification.NOT_MEASURED
    assert result.ratio is None
    assert "too few samples" in result.reason


def test_heavy_ties_are_classified_by_rank() -> None:
    baseline = [10.0] * 25 + [11.0] * 5
    candidate = [13.0] * 25 + [14.0] * 5
    result = classify("ttft_ms", baseline, candidate)
    assert result.classification is Classification.HIGH


def test_a_throughput_drop_is_low_when_looking_for_decreases() -> None:
    result = classify(
        "output_tokens_per_s", _sample(40, 4), _sample(40, 5, scale=0.7), direction="decrease"
    )
    assert result.classification is Classification.LOW
    assert result.ratio == pytest.approx(0.7, rel=0.05)


def test_a_latency_drop_is_not_high_and_passes_when_only_increases_matter() -> None:
    result = classify("ttft_ms", _sample(40, 4), _sample(40, 5, scale=0.7))
    assert result.classification is Classification.PASS


@pytest.mark.parametrize(
    ("scale", "expected"),
    [(1.3, Classification.HIGH), (0.7, Classification.LOW), (1.0, Classification.PASS)],
    ids=["up", "down", "same"],
)
def test_either_direction_finds_both_shifts(scale: float, expected: Classification) -> None:
    result = classify("x", _sample(50, 6), _sample(50, 7, scale=scale), direction="either")
    assert result.classification is expected


def test_the_effect_can_be_a_quantile_ratio() -> None:
    baseline = [100.0] * 40 + [100.0] * 10
    candidate = [100.0] * 40 + [200.0] * 10  # only the tail moved
    by_mean = classify("e2el_ms", baseline, candidate, statistic="mean", allowed_increase=0.25)
    by_p95 = classify("e2el_ms", baseline, candidate, statistic="p95", allowed_increase=0.25)
    assert by_mean.classification is Classification.PASS
    assert by_p95.classification is Classification.HIGH
    assert by_p95.ratio == pytest.approx(2.0)


def test_an_unknown_statistic_is_an_error_even_for_tiny_samples() -> None:
    with pytest.raises(ValueError, match="unknown statistic"):
        classify("x", [1.0], [1.0], statistic="p42")
