"""Mann-Whitney U for unpaired samples (latencies): is the candidate slower beyond chance?

Kayenta-style: a performance threshold may only fail a gate when this test also says the shift is
significant, so one noisy run cannot roll back a release.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from math import ceil, comb
from typing import Literal

import numpy as np

Alternative = Literal["two-sided", "greater", "less"]


@dataclass(frozen=True, slots=True)
class MannWhitneyResult:
    """U of the candidate sample, its p-value and the effect size.

    `effect` is the probability of superiority P(candidate > baseline) + P(tie) / 2: 0.5 means no
    shift, 1.0 means every candidate value exceeds every baseline value. `rank_biserial` is the same
    effect on [-1, 1].
    """

    n_baseline: int
    n_candidate: int
    u: float
    p_value: float
    effect: float
    alternative: Alternative

    @property
    def rank_biserial(self) -> float:
        return 2 * self.effect - 1

    @property
    def measured(self) -> bool:
        """False when either sample is empty: no test was possible."""
        return self.n_baseline > 0 and self.n_candidate > 0


def mann_whitney_u(
    baseline: Sequence[float], candidate: Sequence[float], alternative: Alternative = "greater"
) -> MannWhitneyResult:
    """Test whether candidate values are shifted relative to baseline ("greater": candidate larger,
    i.e. slower for latencies). An empty side gives p = 1 and `measured` False."""
    b = np.asarray(baseline, dtype=np.float64)
    c = np.asarray(candidate, dtype=np.float64)
    if not (np.all(np.isfinite(b)) and np.all(np.isfinite(c))):
        raise ValueError("Mann-Whitney U needs finite values (no NaN or infinity)")
    if b.size == 0 or c.size == 0:
        return MannWhitneyResult(int(b.size), int(c.size), 0.0, 1.0, 0.5, alternative)
    if np.all(c == c[0]) and np.all(b == c[0]):
        # Every value tied: no shift, and scipy's normal approximation would divide by zero.
        u = b.size * c.size / 2
        return MannWhitneyResult(int(b.size), int(c.size), u, 1.0, 0.5, alternative)
    from scipy import stats as scipy_stats  # imported here: a second of start-up for every command

    res = scipy_stats.mannwhitneyu(c, b, alternative=alternative, method="auto")
    u = float(res.statistic)
    return MannWhitneyResult(
        n_baseline=int(b.size),
        n_candidate=int(c.size),
        u=u,
        p_value=float(res.pvalue),
        effect=u / (b.size * c.size),
        alternative=alternative,
    )


def smallest_p(n1: int, n2: int) -> float:
    """The smallest one-sided p a rank test of `n1` against `n2` samples can reach (every value
    of one side above every value of the other): 1 / C(n1 + n2, n1); 1.0 when a side is empty."""
    return 1 / comb(n1 + n2, n1) if n1 and n2 else 1.0


def can_be_significant(n1: int, n2: int, alpha: float) -> bool:
    """Whether `n1` against `n2` samples (blocks) can show a significant shift at `alpha`: at
    least 2 a side and a smallest possible p below it. The performance gate and the canary judge
    block P95s by this one rule; fewer is not measured, never a pass."""
    return n1 >= 2 and n2 >= 2 and smallest_p(n1, n2) < alpha


@lru_cache(maxsize=256)
def u_null_counts(n1: int, n2: int) -> tuple[float, ...]:
    """The exact null distribution of U for `n1` against `n2` untied samples: entry u is the
    number of the C(n1 + n2, n1) equally likely orderings in which u of the n1·n2 pairs have the
    first sample's value above the second's (symmetric about n1·n2 / 2). The recursion adds the
    largest value: from the first sample it is above all n2 values (U + n2), from the second
    above none (Mann & Whitney 1947). Floats: exact up to C(n1 + n2, n1) < 2**53."""
    if n1 < 0 or n2 < 0:
        raise ValueError(f"sample sizes must be >= 0, got {n1} and {n2}")
    # rows[j]: the distribution for i values of the first sample against j of the second.
    rows = [np.ones(1) for _ in range(n2 + 1)]  # i = 0: U is 0 whatever j
    for _ in range(n1):
        new = [np.ones(1)]  # j = 0: U is 0
        for j in range(1, n2 + 1):
            above = np.concatenate([np.zeros(j), rows[j]])  # largest from the first sample
            below = new[j - 1]  # largest from the second sample
            size = max(above.size, below.size)
            new.append(
                np.pad(above, (0, size - above.size)) + np.pad(below, (0, size - below.size))
            )
        rows = new
    return tuple(float(x) for x in rows[n2])


def exact_p_value(u: float, n1: int, n2: int) -> float:
    """One-sided exact p of an observed U of the first sample over the second (ties counted as
    half a pair): P(U >= u) under no shift, for untied samples."""
    counts = u_null_counts(n1, n2)
    total = sum(counts)
    return sum(counts[min(ceil(u - 1e-9), len(counts)) :]) / total


def critical_u(n1: int, n2: int, level: float) -> tuple[int, float] | None:
    """The smallest u with P(U >= u) <= `level` under no shift, and that tail's probability (the
    level a one-sided exact test at `level` attains: less than asked, the distribution being
    discrete); None when even U = n1·n2 is more likely than `level`."""
    counts = u_null_counts(n1, n2)
    total = sum(counts)
    tail = 0.0
    best: tuple[int, float] | None = None
    for u in range(len(counts) - 1, -1, -1):
        tail += counts[u]
        if tail / total > level:
            return best
        best = (u, tail / total)
    return best
