"""Mann-Whitney U for unpaired samples (latencies): is the candidate slower beyond chance?

Kayenta-style: a performance threshold may only fail a gate when this test also says the shift is
significant, so one noisy run cannot roll back a release.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import comb
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
