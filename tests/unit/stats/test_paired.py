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
