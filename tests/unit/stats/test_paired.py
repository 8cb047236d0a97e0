import pytest

from servegate.stats import PairedCounts, mcnemar_exact


def test_counts_split_paired_outcomes_into_the_four_cells() -> None:
    counts = PairedCounts.from_outcomes(
        [True, True, False, False, True], [True, False, True, False, False]
    )
    assert counts == PairedCounts(both_pass=1, both_fail=1, regressions=2, improvements=1)
    assert counts.n == 5
    assert counts.discordant == 3


def test_unequal_lengths_are_rejected() -> None:
    with pytest.raises(ValueError, match="equal lengths"):
        PairedCounts.from_outcomes([True], [True, False])


@pytest.mark.parametrize(
    ("baseline", "candidate"),
    [([], []), ([True] * 5, [True] * 5), ([False] * 4, [False] * 4)],
    ids=["zero-probes", "all-identical", "all-baseline-fail"],
)
def test_no_discordant_pairs_means_no_evidence(baseline: list[bool], candidate: list[bool]) -> None:
    result = mcnemar_exact(PairedCounts.from_outcomes(baseline, candidate))
    assert result.p_two_sided == 1.0
    assert result.p_candidate_worse == 1.0


@pytest.mark.parametrize(
    ("regressions", "improvements", "two_sided", "worse"),
    [
        (6, 0, 0.03125, 0.015625),
        (0, 6, 0.03125, 1.0),
        (3, 3, 1.0, 0.65625),
        (1, 0, 1.0, 0.5),
        (10, 2, 0.0386, 0.0193),
    ],
    ids=["all-regressions", "all-improvements", "tie", "n-equals-one", "mostly-worse"],
)
def test_exact_binomial_p_values_on_discordant_pairs(
    regressions: int, improvements: int, two_sided: float, worse: float
) -> None:
    counts = PairedCounts(
        both_pass=20, both_fail=3, regressions=regressions, improvements=improvements
    )
    result = mcnemar_exact(counts)
    assert result.p_two_sided == pytest.approx(two_sided, abs=1e-4)
    assert result.p_candidate_worse == pytest.approx(worse, abs=1e-4)


def test_concordant_pairs_do_not_change_the_p_value() -> None:
    few = mcnemar_exact(PairedCounts(both_pass=1, both_fail=0, regressions=5, improvements=1))
    many = mcnemar_exact(PairedCounts(both_pass=500, both_fail=90, regressions=5, improvements=1))
    assert few == mcnemar_exact(few.counts)
    assert few.p_two_sided == many.p_two_sided


# --- the sign test and the power statements of the replay's sampled checks -------------------

from scipy import stats as scipy_stats  # noqa: E402  (an independent reference, tests only)

from servegate.stats.paired import (  # noqa: E402
    detectable_share,
    fewest_one_way,
    sign_detectable,
    sign_test,
)


@pytest.mark.parametrize(("greater", "less"), [(10, 0), (7, 3), (0, 9), (12, 12), (30, 14)])
def test_the_sign_test_agrees_with_scipys_exact_binomial_test(greater: int, less: int) -> None:
    n = greater + less
    two = scipy_stats.binomtest(greater, n, 0.5, alternative="two-sided").pvalue
    one = scipy_stats.binomtest(greater, n, 0.5, alternative="greater").pvalue
    assert sign_test(greater, less) == pytest.approx(two, rel=1e-9)
    assert sign_test(greater, less, two_sided=False) == pytest.approx(one, rel=1e-9)


def test_no_untied_pair_is_no_evidence() -> None:
    assert sign_test(0, 0) == 1.0


def test_ten_one_way_pairs_are_the_fewest_that_reach_one_in_a_thousand() -> None:
    # 0.5^10 = 0.00098 < 0.001 <= 0.5^9; two-sided doubles p, so one more pair.
    assert fewest_one_way(0.001, two_sided=False) == 10
    assert fewest_one_way(0.001, two_sided=True) == 11


def test_fewer_pairs_than_a_rejection_needs_cannot_be_judged() -> None:
    assert detectable_share(9, 0.001, 0.9) is None
    assert sign_detectable(9, 0.001, 0.9) is None


@pytest.mark.parametrize("n", [10, 36, 72, 200])
def test_the_detectable_share_is_where_the_power_reaches_its_level(n: int) -> None:
    share = detectable_share(n, 0.001, 0.9)
    assert share is not None
    k = fewest_one_way(0.001, two_sided=False)

    def power(r: float) -> float:
        return float(scipy_stats.binom.sf(k - 1, n, r))

    assert power(share) >= 0.9
    assert power(share - 1e-6) < 0.9


@pytest.mark.parametrize(("n", "two_sided"), [(20, True), (72, True), (72, False), (300, True)])
def test_the_sign_tests_detectable_rate_rejects_with_the_stated_power(
    n: int, two_sided: bool
) -> None:
    q = sign_detectable(n, 0.001, 0.9, two_sided=two_sided)
    assert q is not None
    assert 0.5 < q < 1.0
    # The rejection region from scipy: the fewest "greater" with p below alpha.
    alternative = "two-sided" if two_sided else "greater"
    k = next(
        k
        for k in range(n // 2, n + 1)
        if scipy_stats.binomtest(k, n, 0.5, alternative=alternative).pvalue < 0.001
    )
    assert float(scipy_stats.binom.sf(k - 1, n, q)) >= 0.9
    assert float(scipy_stats.binom.sf(k - 1, n, q - 1e-6)) < 0.9
