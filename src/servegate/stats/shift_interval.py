"""The Hodges–Lehmann shift between two samples and its exact distribution-free bounds.

The estimate is the median of every pairwise difference candidate − baseline; the bounds invert
the one-sided Mann–Whitney test (Hollander & Wolfe, ch. 4): the shift Δ is rejected "candidate
larger by more than Δ" exactly when U of the candidate shifted by Δ reaches the test's critical
u, i.e. when Δ lies below the u-th largest difference. So the lower bound is the (N − u + 1)-th
smallest of the N = n_b·n_c sorted differences and the upper bound the u-th, with u from the
exact null distribution of U (stats.mann_whitney). The interval and the test cannot disagree:
lower bound > 0 ⇔ one-sided p ≤ level (up to ties between the samples).

Applied to log values (`ratio_interval`) the estimate and bounds are ratios candidate / baseline:
what the performance gate judges block P95s and block throughputs by.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from servegate.stats.mann_whitney import critical_u, exact_p_value


@dataclass(frozen=True, slots=True)
class ShiftInterval:
    """The estimate and bounds of candidate − baseline (or candidate / baseline on logs).

    Each bound is one-sided at `level`: the lower one is below the true shift with probability
    at least 1 − level, the upper one above it alike, so the interval covers at least
    1 − 2·level. `attained` is the level the discrete exact test reaches (≤ `level`); an end the
    samples are too few to bound at `level` is ∓infinity (`attained` None)."""

    n_baseline: int
    n_candidate: int
    estimate: float
    low: float
    high: float
    level: float
    attained: float | None
    u: float  # pairs with candidate above baseline, ties counted half: the Mann-Whitney U

    @property
    def bounded(self) -> bool:
        return self.attained is not None

    def p_value(self, alternative: str) -> float:
        """The exact one-sided Mann-Whitney p of "candidate greater" or "less" (untied)."""
        u = self.u if alternative == "greater" else self.n_baseline * self.n_candidate - self.u
        return exact_p_value(u, self.n_candidate, self.n_baseline)

    @property
    def confidence(self) -> float:
        """Two-sided coverage of [low, high] that the exact test guarantees."""
        return 1 - 2 * (self.level if self.attained is None else self.attained)


def _check(baseline: Sequence[float], candidate: Sequence[float], level: float) -> None:
    if not 0 < level < 0.5:
        raise ValueError(f"level must be in (0, 0.5), got {level}")
    if not baseline or not candidate:
        raise ValueError("a shift interval needs at least one value on each side")


def shift_interval(
    baseline: Sequence[float], candidate: Sequence[float], level: float
) -> ShiftInterval:
    """Hodges–Lehmann shift candidate − baseline with its exact one-sided bounds at `level`."""
    _check(baseline, candidate, level)
    b = np.asarray(baseline, dtype=np.float64)
    c = np.asarray(candidate, dtype=np.float64)
    if not (np.all(np.isfinite(b)) and np.all(np.isfinite(c))):
        raise ValueError("a shift interval needs finite values (no NaN or infinity)")
    diffs = np.sort(np.subtract.outer(c, b).ravel())
    n = diffs.size
    estimate = float(np.median(diffs))
    u_obs = float(np.sum(diffs > 0) + np.sum(diffs == 0) / 2)
    crit = critical_u(c.size, b.size, level)
    if crit is None:
        return ShiftInterval(b.size, c.size, estimate, -math.inf, math.inf, level, None, u_obs)
    u, attained = crit
    # 1-indexed: lower = diffs_(n − u + 1), upper = diffs_(u).
    low, high = float(diffs[n - u]), float(diffs[u - 1])
    return ShiftInterval(b.size, c.size, estimate, low, high, level, attained, u_obs)


def ratio_interval(
    baseline: Sequence[float], candidate: Sequence[float], level: float
) -> ShiftInterval:
    """The shift of log values as a ratio candidate / baseline: estimate and bounds exp(·) of
    `shift_interval` on the logs (0 and ∞ for an unbounded end). Values must be positive."""
    _check(baseline, candidate, level)
    if min(baseline) <= 0 or min(candidate) <= 0:
        raise ValueError("a ratio interval needs positive values")
    s = shift_interval(np.log(baseline).tolist(), np.log(candidate).tolist(), level)
    return ShiftInterval(
        s.n_baseline,
        s.n_candidate,
        math.exp(s.estimate),
        math.exp(s.low),
        math.exp(s.high),
        s.level,
        s.attained,
        s.u,
    )
