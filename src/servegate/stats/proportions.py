"""Is one failure rate higher than another beyond chance? Two independent samples of requests."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class RateIncrease:
    """Candidate failure rate − baseline failure rate, with a one-sided Fisher exact p-value."""

    baseline_failed: int
    baseline_n: int
    candidate_failed: int
    candidate_n: int
    p_value: float  # P(an increase at least this large | equal rates); 1.0 when nothing to test

    @property
    def baseline_rate(self) -> float | None:
        return self.baseline_failed / self.baseline_n if self.baseline_n else None

    @property
    def candidate_rate(self) -> float | None:
        return self.candidate_failed / self.candidate_n if self.candidate_n else None

    @property
    def increase(self) -> float | None:
        """Candidate rate − baseline rate (0.01 = one point); None when a side sent nothing."""
        b, c = self.baseline_rate, self.candidate_rate
        return None if b is None or c is None else c - b

    @property
    def ratio(self) -> float | None:
        """Candidate rate / baseline rate (inf when the baseline never failed and the candidate
        did, None when a side sent nothing or neither failed)."""
        b, c = self.baseline_rate, self.candidate_rate
        if b is None or c is None or (b == 0 and c == 0):
            return None
        return math.inf if b == 0 else c / b

    def beyond(self, limit: float, band: Literal["difference", "ratio"] = "difference") -> bool:
        """Past the band: an increase above `limit` (difference, 0.01 = one point), or a rate at
        least `limit` times the baseline's (ratio; any failure where the baseline had none)."""
        b, c = self.baseline_rate, self.candidate_rate
        if b is None or c is None:
            return False
        if band == "difference":
            return c - b > limit
        return c > 0 and (b == 0 or c >= limit * b)

    def regressed(
        self, limit: float, alpha: float, band: Literal["difference", "ratio"] = "difference"
    ) -> bool:
        """The one rate rule of the performance gate and the canary: past the band *and*
        significant (one-sided Fisher exact p below `alpha`)."""
        return self.beyond(limit, band) and self.p_value < alpha


def rate_increase(
    baseline_failed: int, baseline_n: int, candidate_failed: int, candidate_n: int
) -> RateIncrease:
    """The candidate's failure rate against the baseline's (one-sided Fisher exact test)."""
    if not (0 <= baseline_failed <= baseline_n and 0 <= candidate_failed <= candidate_n):
        raise ValueError("need 0 <= failed <= n on both sides")
    p = 1.0
    if baseline_n and candidate_n and (baseline_failed or candidate_failed):
        table = [
            [candidate_failed, candidate_n - candidate_failed],
            [baseline_failed, baseline_n - baseline_failed],
        ]
        from scipy import stats as scipy_stats  # here, not at start-up: scipy takes ~1 s to load

        p = float(scipy_stats.fisher_exact(table, alternative="greater").pvalue)
    return RateIncrease(baseline_failed, baseline_n, candidate_failed, candidate_n, p)
