import pytest

from servegate.stats import DistributionSummary


def test_empty_sample_has_a_count_and_no_statistics() -> None:
    summary = DistributionSummary.from_values([])
    assert summary.count == 0
    assert summary.mean is None
    assert summary.p99 is None


def test_one_value_is_every_percentile() -> None:
    summary = DistributionSummary.from_values([42.0])
    assert summary.count == 1
    assert summary.mean == summary.p50 == summary.p99 == summary.min == summary.max == 42.0


def test_percentiles_interpolate_linearly() -> None:
    summary = DistributionSummary.from_values(range(1, 101))
    assert summary.count == 100
    assert summary.mean == pytest.approx(50.5)
    assert summary.p50 == pytest.approx(50.5)
    assert summary.p90 == pytest.approx(90.1)
    assert summary.p95 == pytest.approx(95.05)
    assert summary.p99 == pytest.approx(99.01)
    assert (summary.min, summary.max) == (1.0, 100.0)


def test_identical_values_collapse_to_one_number() -> None:
    summary = DistributionSummary.from_values([3.0] * 7)
    assert summary.p50 == summary.p95 == summary.mean == 3.0


@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=["nan", "infinity"])
def test_non_finite_values_are_rejected(bad: float) -> None:
    with pytest.raises(ValueError, match="non-finite"):
        DistributionSummary.from_values([1.0, bad])


def test_statistics_can_be_named_as_in_a_policy_file() -> None:
    summary = DistributionSummary.from_values([1.0, 2.0, 3.0])
    assert summary.statistic("p50") == 2.0
    with pytest.raises(ValueError, match="unknown statistic 'p42'"):
        summary.statistic("p42")
