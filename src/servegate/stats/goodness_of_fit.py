"""Do draws follow a stated distribution, and do two sets of draws follow the same one?

Pearson's chi-square, with the categories a test cannot carry pooled: every bin keeps an
expected count of at least `min_expected` (Cochran's rule; the size of the test at that rule is
checked by simulation in the unit tests). The power functions use the same bins as the tests,
so a power statement is about the test that was run.

A *temperature error* is a sampler that draws at T·f instead of the asked T (f = 1 + x or
1 / (1 + x)): `detectable_temperature_error` is the smallest x that the tests of several
prompts together detect with the asked probability.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
Probs = Sequence[float] | Floats
# Power is simulated: this many tests of the alternative, from this seed (the same draws for
# every alternative, so a power curve is smooth in the error).
SIMULATIONS = 2000
SEED = 20261203
# The relative temperature errors tried, smallest first: 1 % to 400 %.
ERROR_GRID: tuple[float, ...] = tuple(
    float(x) for x in np.unique(np.round(np.geomspace(0.01, 4.0, 60), 3))
)


@dataclass(frozen=True, slots=True)
class FitResult:
    """A chi-square test: observed against expected counts in the pooled bins."""

    statistic: float
    df: int
    p_value: float
    n: int
    observed: tuple[float, ...]
    expected: tuple[float, ...]


def pooled_bins(expected: Sequence[float], min_expected: float) -> list[list[int]]:
    """Bins of category indexes, largest first: each category whose expected count reaches
    `min_expected` alone, the rest pooled; a pool still short of it joins the smallest bin."""
    order = sorted(range(len(expected)), key=lambda i: -expected[i])
    kept = [[i] for i in order if expected[i] >= min_expected]
    rest = [i for i in order if expected[i] < min_expected]
    if rest:
        if sum(expected[i] for i in rest) >= min_expected or not kept:
            kept.append(rest)
        else:
            kept[-1].extend(rest)
    return kept


def _chi2_sf(statistic: float, df: int) -> float:
    from scipy import stats  # here, not at start-up: scipy takes ~1 s to load

    return float(stats.chi2.sf(statistic, df))


def _binned(values: Sequence[float], bins: Sequence[Sequence[int]]) -> Floats:
    return np.array([sum(values[i] for i in b) for b in bins], dtype=np.float64)


def goodness_of_fit(
    observed: Sequence[int], probs: Sequence[float], *, min_expected: float = 5.0
) -> FitResult | None:
    """Pearson's test of counts against category probabilities (summing to 1; a category with
    probability 0 that was drawn is an infinite statistic, p 0). None: fewer than two bins."""
    n = int(sum(observed))
    p = np.asarray(probs, dtype=np.float64)
    if n == 0 or len(p) != len(observed) or p.sum() <= 0:
        return None
    p = p / p.sum()
    expected = list(n * p)
    impossible = sum(o for o, e in zip(observed, expected, strict=True) if e == 0)
    if impossible:
        return FitResult(math.inf, max(1, len(p) - 1), 0.0, n, tuple(map(float, observed)),
                         tuple(expected))  # fmt: skip
    bins = pooled_bins(expected, min_expected)
    if len(bins) < 2:
        return None
    o, e = _binned(list(map(float, observed)), bins), _binned(expected, bins)
    statistic = float(((o - e) ** 2 / e).sum())
    df = len(bins) - 1
    return FitResult(statistic, df, _chi2_sf(statistic, df), n, tuple(o), tuple(e))


def homogeneity(
    a: Mapping[str, int], b: Mapping[str, int], *, min_expected: float = 5.0
) -> FitResult | None:
    """Pearson's test that two sets of draws come from one distribution (a 2 × c table whose
    rare categories are pooled until every cell expects `min_expected`). Two sets that fall in
    one bin are the same distribution as far as the draws can tell: statistic 0, p 1."""
    n_a, n_b = sum(a.values()), sum(b.values())
    if n_a == 0 or n_b == 0:
        return None
    keys = sorted(set(a) | set(b))
    n = n_a + n_b
    totals = [a.get(k, 0) + b.get(k, 0) for k in keys]
    # A cell's expected count is its column total × its row share; the smaller row decides.
    smaller = min(n_a, n_b) / n
    bins = pooled_bins([t * smaller for t in totals], min_expected)
    if len(bins) < 2:
        return FitResult(0.0, 0, 1.0, n, (), ())
    col = _binned(list(map(float, totals)), bins)
    rows = np.array([_binned([float(s.get(k, 0)) for k in keys], bins) for s in (a, b)])
    expected = np.outer([n_a, n_b], col) / n
    statistic = float(((rows - expected) ** 2 / expected).sum())
    df = len(bins) - 1
    return FitResult(
        statistic, df, _chi2_sf(statistic, df), n, tuple(rows.ravel()), tuple(expected.ravel())
    )


def tempered(probs: Probs, factor: float) -> Floats:
    """Probabilities at a temperature `factor` times the one they were reported at, renormalised
    over the given tokens: p ** (1 / factor)."""
    p = np.asarray(probs, dtype=np.float64)
    with np.errstate(divide="ignore"):
        logits = np.where(p > 0, np.log(np.where(p > 0, p, 1.0)), -np.inf) / factor
    logits -= logits.max()
    out: Floats = np.exp(logits)
    normalised: Floats = out / out.sum()
    return normalised


def _noncentrality(q: Floats, alt: Floats, n: float, bins: Sequence[Sequence[int]]) -> float:
    qb, ab = _binned(list(q), bins), _binned(list(alt), bins)
    return float(n * ((ab - qb) ** 2 / qb).sum())


def fit_power(
    probs: Probs,
    alternative: Probs,
    n: float,
    alpha: float,
    *,
    min_expected: float = 5.0,
    last_between: tuple[float, float] | None = None,
) -> float:
    """Probability that `goodness_of_fit` at level `alpha` rejects `probs` when the draws
    follow `alternative`, by simulation (SIMULATIONS tests of the same bins, a fixed seed: the
    noncentral chi-square overstates it at these sizes, 0.92 for a simulated 0.81).
    `last_between`: the last category's share under the alternative is known only to lie in
    this interval (the tokens nobody reported): the share that the chi-square distance makes
    least detectable is assumed."""
    q = np.asarray(probs, dtype=np.float64)
    q = q / q.sum()
    alt = np.asarray(alternative, dtype=np.float64)
    alt = alt / alt.sum()
    bins = pooled_bins(list(n * q), min_expected)
    if len(bins) < 2 or n <= 0:
        return 0.0
    if last_between is not None:
        known = alt[:-1] / max(alt[:-1].sum(), 1e-300)
        alt = _least_detectable(q, known, bins, last_between)
    from scipy import stats

    critical = float(stats.chi2.isf(alpha, len(bins) - 1))
    qb, ab = _binned(list(q), bins), _binned(list(alt), bins)
    draws = round(n)
    counts = np.random.default_rng(SEED).multinomial(draws, ab / ab.sum(), size=SIMULATIONS)
    expected = draws * qb
    statistic = ((counts - expected) ** 2 / expected).sum(axis=1)
    return float((statistic > critical).mean())


def _least_detectable(
    q: Floats, known: Floats, bins: Sequence[Sequence[int]], between: tuple[float, float]
) -> Floats:
    """The alternative (1 − r)·known ⊕ r, with r in `between` minimising the noncentrality
    (a quadratic in r: its minimum, clipped to the interval)."""
    last = len(q) - 1
    k = np.zeros(len(bins))
    r_in = np.zeros(len(bins))
    qb = _binned(list(q), bins)
    for j, b in enumerate(bins):
        k[j] = sum(known[i] for i in b if i != last)
        r_in[j] = 1.0 if last in b else 0.0
    u, v = r_in - k, k - qb
    denominator = float((u * u / qb).sum())
    lo, hi = between
    r = lo if denominator == 0 else min(hi, max(lo, -float((u * v / qb).sum()) / denominator))
    return np.append((1 - r) * known, r)


@dataclass(frozen=True, slots=True)
class Cell:
    """One prompt's test, for a power statement: the reported tokens' probabilities and the
    unreported rest at temperature 1, the temperature asked, the draws tested, and `inside`:
    None for the unconditional test at temperature 1, else the draws among the reported tokens
    (at another temperature the fit is conditional on them, and the rest's share is tested
    against its bounds, each at half the level: `tempered_p`)."""

    probs: tuple[float, ...]
    rest: float
    temperature: float
    n: int
    inside: int | None = None


def cell_power(cell: Cell, factor: float, alpha: float, *, min_expected: float = 5.0) -> float:
    """Power of one cell's test against sampling at `factor` × its temperature (a lower bound
    where the unreported tokens' share is only bounded)."""
    t = cell.temperature
    alt = tempered(cell.probs, t * factor)
    if cell.inside is not None:
        fit = fit_power(tempered(cell.probs, t), alt, cell.inside, alpha / 2,
                        min_expected=min_expected)  # fmt: skip
        return max(fit, rest_power(cell, factor, alpha / 2))
    if t != 1.0:
        raise ValueError("an unconditional cell is tested at temperature 1")
    known: Floats = np.asarray(cell.probs) * (1 - cell.rest) / max(sum(cell.probs), 1e-300)
    between = rest_between(known, cell.rest, factor)
    with_rest: Floats = np.append(known, cell.rest)
    return fit_power(
        with_rest, np.append(alt, 0.0), cell.n, alpha, min_expected=min_expected,
        last_between=between,
    )  # fmt: skip


def rest_p(outside: int, n: int, between: tuple[float, float]) -> float:
    """One-sided binomial p of `outside` unreported draws in `n` against a share in `between`:
    the smaller of "too few for its lower bound" and "too many for its upper bound"."""
    from scipy import stats

    lo, hi = between
    low = float(stats.binom.cdf(outside, n, lo)) if lo > 0 else 1.0
    high = float(stats.binom.sf(outside - 1, n, hi)) if hi < 1 else 1.0
    return min(low, high)


def rest_power(cell: Cell, factor: float, alpha: float) -> float:
    """Power of `rest_p` at `alpha` when the draws are at `factor` × the cell's temperature
    and the unreported share is the least detectable one its bounds allow."""
    from scipy import stats

    if cell.rest <= 0 or cell.n <= 0:
        return 0.0
    t, n = cell.temperature, cell.n
    lo0, hi0 = rest_between(cell.probs, cell.rest, t)
    lo1, hi1 = rest_between(cell.probs, cell.rest, t * factor)
    if hi1 < lo0:  # colder: too few unreported draws; the largest share allowed is the hardest
        k = int(stats.binom.ppf(alpha, n, lo0))
        k -= 1 if stats.binom.cdf(k, n, lo0) > alpha else 0
        return float(stats.binom.cdf(k, n, hi1)) if k >= 0 else 0.0
    if lo1 > hi0:  # hotter: too many
        k = int(stats.binom.isf(alpha, n, hi0)) + 1
        return float(stats.binom.sf(k - 1, n, lo1))
    return 0.0


def rest_between(known: Probs, rest: float, factor: float) -> tuple[float, float]:
    """Where the unreported tokens' share can lie at temperature `factor`, from the temperature-1
    report (`known` the reported tokens' probabilities, `rest` the others'): the smallest share
    when hotter than 1, the largest when colder, the other end open. From what is
    reported: each unreported token is at most as likely as the least likely reported one
    (p_min), so tempering scales the rest's mass by at most p_min ** (1/factor − 1) when colder
    and at least that when hotter (p ** (1/f) = p · p ** (1/f − 1))."""
    p = np.asarray(known, dtype=np.float64)
    if rest <= 0 or not len(p):
        return 0.0, 0.0
    if factor == 1.0:
        share = rest / (float(p.sum()) + rest)
        return share, share
    scaled_known = float((p ** (1 / factor)).sum())
    edge = rest * float(p.min()) ** (1 / factor - 1)
    share = edge / (scaled_known + edge)
    return (0.0, share) if factor < 1 else (share, 1.0)


@dataclass(frozen=True, slots=True)
class Detectable:
    """The smallest relative temperature errors detected with the asked probability: sampling
    at T / (1 + lower) and at T · (1 + higher); None where no error in the grid is."""

    lower: float | None
    higher: float | None

    def text(self, power: float) -> str:
        """E.g. "a temperature ≥ 26 % too low or ≥ 23 % too high is detected with probability
        ≥ 0.9", and which way nothing in the grid is."""
        ways = (("too low", self.lower), ("too high", self.higher))
        found = [f"≥ {x:.0%} {way}" for way, x in ways if x is not None]
        missing = [way for way, x in ways if x is None]
        level = f"with probability ≥ {power:g}"
        up_to = f"{ERROR_GRID[-1]:.0%}"
        if not found:
            return f"no temperature error up to {up_to} either way is detected {level}"
        text = f"a temperature {' or '.join(found)} is detected {level}"
        return text + (f" (one {missing[0]}: not up to {up_to})" if missing else "")


def family_power(
    cells: Sequence[Cell], factor: float, alpha_each: float, *, min_expected: float = 5.0
) -> float:
    """Probability that at least one cell's test rejects at `alpha_each` when every cell's
    draws are at `factor` × its temperature."""
    missed = 1.0
    for cell in cells:
        missed *= 1 - cell_power(cell, factor, alpha_each, min_expected=min_expected)
    return 1 - missed


def detectable_temperature_error(
    cells: Sequence[Cell],
    alpha_each: float,
    *,
    power: float = 0.9,
    min_expected: float = 5.0,
    grid: Sequence[float] = ERROR_GRID,
) -> Detectable:
    """The smallest relative temperature errors, each way, that the cells' tests at
    `alpha_each` detect together (any one rejecting) with probability ≥ `power`."""

    def detects(x: float, toward: float) -> bool:
        factor = (1 + x) if toward > 0 else 1 / (1 + x)
        return family_power(cells, factor, alpha_each, min_expected=min_expected) >= power

    def smallest(toward: float) -> float | None:
        # Power grows with the error: bisect the grid for the first error detected.
        if not grid or not detects(grid[-1], toward):
            return None
        lo, hi = -1, len(grid) - 1  # grid[hi] is detected, grid[lo] (when ≥ 0) is not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if detects(grid[mid], toward) else (mid, hi)
        return grid[hi]

    return Detectable(smallest(-1), smallest(+1))


def narrower_power(cells: Sequence[Cell], alpha_each: float, *, min_expected: float = 5.0) -> float:
    """Probability that the cells' fits (temperature 1, conditional on a kept set) detect a
    sampler that never draws the least likely token of each kept set."""
    missed = 1.0
    for cell in cells:
        if len(cell.probs) < 2:
            continue
        short = np.asarray((*cell.probs[:-1], 0.0), dtype=np.float64)
        missed *= 1 - fit_power(cell.probs, short, cell.n, alpha_each, min_expected=min_expected)
    return 1 - missed


def bonferroni(p_values: Sequence[float], alpha: float) -> tuple[float, bool]:
    """The family's adjusted p (the smallest p × the number of tests, at most 1) and whether
    the family rejects at `alpha`: the multiple-testing rule of the sampling checks."""
    if not p_values:
        return 1.0, False
    adjusted = min(1.0, min(p_values) * len(p_values))
    return adjusted, adjusted < alpha
