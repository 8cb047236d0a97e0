"""Alpha spending over looks: looking early does not raise the false-alarm rate (checked by A/A
repeats of the whole sequential rule on simulated blocks, not only by the union bound)."""

from __future__ import annotations

import numpy as np
import pytest

from servegate.stats.sequential import Spending, look_levels, spent
from servegate.stats.shift_interval import ratio_interval

DESIGNS = [(6, 8, 10, 12), (6, 8, 10), (4, 6, 8, 10, 12), (3, 5, 7, 9, 11, 12), (6,)]


@pytest.mark.parametrize("rule", ["pocock", "obrien-fleming"])
@pytest.mark.parametrize("blocks", DESIGNS)
def test_the_looks_together_never_attain_more_than_alpha(
    rule: Spending, blocks: tuple[int, ...]
) -> None:
    looks = look_levels(0.05, blocks, rule)
    assert [x.blocks for x in looks] == list(blocks)
    assert sum(x.attained for x in looks) <= 0.05 + 1e-12
    assert all(x.attained <= x.level for x in looks)


def test_the_default_design_can_decide_at_its_first_look_and_carries_what_it_did_not_use() -> None:
    first, second, *_ = look_levels(0.05, (6, 8, 10, 12), "pocock")
    assert first.level == pytest.approx(spent(0.05, 0.5))
    assert first.attained >= 1 / 924  # 6 v 6 can bound a ratio at this level
    assert first.attained < first.level  # discrete: less than it may spend
    assert second.level == pytest.approx(spent(0.05, 8 / 12) - first.attained)


def test_a_look_that_cannot_reach_its_level_spends_nothing() -> None:
    first, second, *_ = look_levels(0.05, (3, 5, 7, 9, 11, 12), "pocock")
    assert first.attained == 0.0  # 3 v 3: smallest p 0.05
    assert second.level == pytest.approx(spent(0.05, 5 / 12))


@pytest.mark.parametrize("t", [0.0, 1.5])
def test_an_information_fraction_outside_zero_to_one_is_an_error(t: float) -> None:
    with pytest.raises(ValueError, match="information fraction must be in"):
        spent(0.05, t)


def _sequential_fails(rng: np.random.Generator, ratio: float, levels: list[float] | None) -> bool:
    """One simulated gate at the worst case for a false alarm: the candidate's blocks exactly
    at the band. It fails when a look's lower bound is beyond the band, stops when a look
    passes; `levels` None: every look at the full 0.05 (no spending)."""
    band, sd = 1.2, 0.15
    design = (6, 8, 10, 12)
    b = rng.lognormal(0, sd, design[-1])
    c = rng.lognormal(0, sd, design[-1]) * ratio
    for k, n in enumerate(design):
        level = 0.05 if levels is None else levels[k]
        ci = ratio_interval(b[:n].tolist(), c[:n].tolist(), level)
        if ci.bounded and ci.low > band:
            return True
        if ci.bounded and ci.high <= band:
            return False
    return False


def test_aa_repeats_at_the_band_fail_at_most_alpha_with_spending_and_more_without() -> None:
    levels = [x.level for x in look_levels(0.05, (6, 8, 10, 12), "pocock")]
    rng = np.random.default_rng(20261203)
    runs = 3000
    spent_rate = sum(_sequential_fails(rng, 1.2, levels) for _ in range(runs)) / runs
    naive_rate = sum(_sequential_fails(rng, 1.2, None) for _ in range(runs)) / runs
    # 3000 runs: the standard error of a 5 % rate is 0.4 %.
    assert spent_rate <= 0.05, spent_rate
    assert naive_rate > 0.06, naive_rate  # four looks at 0.05 each inflate the error


def test_aa_repeats_of_identical_sides_almost_never_fail() -> None:
    levels = [x.level for x in look_levels(0.05, (6, 8, 10, 12), "pocock")]
    rng = np.random.default_rng(3)
    fails = sum(_sequential_fails(rng, 1.0, levels) for _ in range(1000))
    assert fails == 0
