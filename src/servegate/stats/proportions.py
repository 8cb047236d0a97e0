"""Is one failure rate higher than another beyond chance? Two independent samples of requests."""

from __future__ import annotations

from dataclasses import dataclass


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
