"""The sampling gate's statistics on plain data: size and power checked by simulation."""

from __future__ import annotations

import numpy as np
import pytest

from servegate.stats.goodness_of_fit import (
    Cell,
    bonferroni,
    cell_power,
    detectable_temperature_error,
    goodness_of_fit,
    homogeneity,
    narrower_power,
    pooled_bins,
    rest_between,
    rest_p,
    tempered,
)

# The reported top tokens of "Name a musical instrument." on SmolLM2-135M (llama.cpp), rounded;
# the unreported 49,000-odd tokens share the rest.
REPORTED = (0.42, 0.15, 0.05, 0.03, 0.03, 0.025, 0.02, 0.02, 0.015, 0.012, 0.01, 0.008)
REST = 1 - sum(REPORTED)
# A full distribution behind that report: the rest spread over 400 tokens below the last one.
TAIL = np.random.default_rng(7).dirichlet(np.ones(400)) * REST
TAIL = np.minimum(TAIL, REPORTED[-1] * 0.99)
TAIL *= REST / TAIL.sum()
FULL = np.concatenate([REPORTED, TAIL])


def _draw(rng: np.random.Generator, probs: np.ndarray, n: int, reported: int) -> list[int]:
    """Counts of the first `reported` categories and of the rest pooled, from n draws."""
    counts = rng.multinomial(n, probs / probs.sum())
    return [*counts[:reported], int(counts[reported:].sum())]


def test_categories_expected_too_rarely_are_pooled_and_a_short_pool_joins_the_smallest_bin() -> (
    None
):
    assert pooled_bins([50.0, 20.0, 3.0, 2.0, 1.0], 5.0) == [[0], [1], [2, 3, 4]]
    assert pooled_bins([50.0, 20.0, 3.0, 1.0], 5.0) == [[0], [1, 2, 3]]
    assert pooled_bins([3.0, 1.0], 5.0) == [[0, 1]]


def test_draws_that_follow_the_stated_distribution_fit_it() -> None:
    fit = goodness_of_fit([42, 15, 43], [0.42, 0.15, 0.43])
    assert fit is not None
    assert fit.statistic == pytest.approx(0.0)
    assert fit.p_value == pytest.approx(1.0)


def test_a_drawn_category_of_probability_zero_is_impossible() -> None:
    fit = goodness_of_fit([40, 0, 2], [0.5, 0.5, 0.0])
    assert fit is not None
    assert fit.p_value == 0.0


def test_one_bin_is_nothing_to_test() -> None:
    assert goodness_of_fit([3, 1], [0.6, 0.4]) is None


def test_a_greedy_sampler_fails_the_fit_of_the_reported_distribution() -> None:
    fit = goodness_of_fit([96, *[0] * len(REPORTED)], [*REPORTED, REST])
    assert fit is not None
    assert fit.p_value < 1e-20


@pytest.mark.parametrize("n", [48, 96])
def test_the_fit_keeps_its_size_when_the_unreported_rest_is_pooled(n: int) -> None:
    """Draws from a full distribution, tested against its report: the rejection rate at 0.05
    stays near 0.05 (2,000 simulated cells, a fixed seed)."""
    rng = np.random.default_rng(1)
    rejected = 0
    for _ in range(2000):
        fit = goodness_of_fit(_draw(rng, FULL, n, len(REPORTED)), [*REPORTED, REST])
        rejected += fit is not None and fit.p_value < 0.05
    assert 0.03 <= rejected / 2000 <= 0.07


def _simulated_power(factor: float, n: int, alpha: float, rng: np.random.Generator) -> float:
    alt = tempered(FULL, factor)
    hits = sum(
        (fit := goodness_of_fit(_draw(rng, alt, n, len(REPORTED)), [*REPORTED, REST])) is not None
        and fit.p_value < alpha
        for _ in range(1000)
    )
    return hits / 1000


@pytest.mark.parametrize("factor", [0.7, 1.0 / 0.7, 0.5])
def test_the_stated_power_at_temperature_one_is_a_lower_bound(factor: float) -> None:
    """The power statement assumes the least detectable share for the unreported tokens, so a
    real distribution behind the report is detected at least as often as stated."""
    cell = Cell(REPORTED, REST, 1.0, 96)
    stated = cell_power(cell, factor, 0.001)
    simulated = _simulated_power(factor, 96, 0.001, np.random.default_rng(2))
    assert simulated >= stated - 0.04


def test_the_stated_power_of_a_conditional_fit_matches_simulation() -> None:
    """At temperature 0.5 among the reported tokens the alternative is exact: the noncentral
    chi-square power agrees with simulated rejections."""
    null = tempered(REPORTED, 0.5)
    alt = tempered(REPORTED, 0.5 * 1.6)
    stated = cell_power(Cell(REPORTED, 0.0, 0.5, 60, inside=60), 1.6, 0.002)
    rng = np.random.default_rng(3)
    hits = 0
    for _ in range(1000):
        fit = goodness_of_fit(list(rng.multinomial(60, alt)), list(null))
        hits += fit is not None and fit.p_value < 0.001  # the fit's half of the level
    assert abs(hits / 1000 - stated) < 0.04


def test_the_unreported_share_lies_within_its_bounds_at_every_temperature() -> None:
    known = np.asarray(REPORTED)
    for t in (0.3, 0.5, 0.8, 1.0, 1.5, 2.0):
        lo, hi = rest_between(known, REST, t)
        share = float(tempered(FULL, t)[len(REPORTED) :].sum())
        assert lo - 1e-9 <= share <= hi + 1e-9, t


def test_the_unreported_share_outside_its_bounds_is_significant() -> None:
    assert rest_p(20, 48, (0.0, 0.05)) < 1e-8  # colder than asked allows: too many unreported
    assert rest_p(2, 48, (0.4, 1.0)) < 1e-7  # hotter than asked needs more
    assert rest_p(3, 48, (0.0, 0.1)) > 0.2


def test_a_larger_sample_detects_a_smaller_temperature_error() -> None:
    small = detectable_temperature_error([Cell(REPORTED, REST, 1.0, 48)] * 4, 0.001 / 4)
    large = detectable_temperature_error([Cell(REPORTED, REST, 1.0, 192)] * 4, 0.001 / 4)
    assert small.lower is not None
    assert large.lower is not None
    assert large.lower < small.lower
    assert large.text(0.9).startswith(f"a temperature ≥ {large.lower:.0%} too low")


def test_two_sets_of_draws_from_one_distribution_keep_the_homogeneity_test_s_size() -> None:
    rng = np.random.default_rng(4)
    tokens = [f"t{i}" for i in range(len(FULL))]
    rejected = 0
    for _ in range(1000):
        a, b = (dict(zip(tokens, rng.multinomial(96, FULL), strict=True)) for _ in range(2))
        test = homogeneity({k: int(v) for k, v in a.items() if v},
                           {k: int(v) for k, v in b.items() if v})  # fmt: skip
        rejected += test is not None and test.p_value < 0.05
    assert 0.025 <= rejected / 1000 <= 0.075


def test_a_candidate_sampling_hotter_differs_from_the_baseline() -> None:
    rng = np.random.default_rng(5)
    tokens = [f"t{i}" for i in range(len(FULL))]
    a = dict(zip(tokens, map(int, rng.multinomial(384, FULL)), strict=True))
    b = dict(zip(tokens, map(int, rng.multinomial(384, tempered(FULL, 1.6))), strict=True))
    test = homogeneity(a, b)
    assert test is not None
    assert test.p_value < 1e-6


def test_two_sides_that_always_draw_one_token_are_the_same_distribution() -> None:
    test = homogeneity({"The": 48}, {"The": 48})
    assert test is not None
    assert test.p_value == 1.0


def test_a_kept_set_one_token_short_is_detected_as_stated() -> None:
    probs = (0.42, 0.15, 0.05)
    stated = narrower_power([Cell(probs, 0.0, 1.0, 48, inside=48)], 0.001)
    short = np.asarray(probs[:-1]) / sum(probs[:-1])
    rng = np.random.default_rng(6)
    hits = sum(
        (fit := goodness_of_fit([*rng.multinomial(48, short), 0], list(probs))) is not None
        and fit.p_value < 0.001
        for _ in range(1000)
    )
    assert abs(hits / 1000 - stated) < 0.1


def test_bonferroni_multiplies_the_smallest_p_by_the_number_of_prompts() -> None:
    assert bonferroni([0.0004, 0.3, 0.9, 0.5], 0.001) == (pytest.approx(0.0016), False)
    assert bonferroni([0.0001, 0.3], 0.001) == (pytest.approx(0.0002), True)
    assert bonferroni([], 0.001) == (1.0, False)
