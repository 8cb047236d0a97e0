"""McNemar's exact test on paired pass/fail outcomes: did the candidate lose what the baseline won?

Only discordant pairs carry information: `regressions` (baseline passed, candidate failed) and
`improvements` (the reverse). Under "no change" each discordant pair is a fair coin, so the test is
a binomial on them; exact, because a gate sees a few dozen probes, not thousands.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction


@dataclass(frozen=True, slots=True)
class PairedCounts:
    """The 2x2 table of paired outcomes."""

    both_pass: int
    both_fail: int
    regressions: int  # baseline pass, candidate fail
    improvements: int  # baseline fail, candidate pass

    @classmethod
    def from_outcomes(cls, baseline: Sequence[bool], candidate: Sequence[bool]) -> PairedCounts:
        """Count paired outcomes; both sequences are per-probe results in the same order."""
        if len(baseline) != len(candidate):
            raise ValueError(
                f"paired outcomes need equal lengths, got {len(baseline)} and {len(candidate)}"
            )
        pairs = list(zip(baseline, candidate, strict=True))
        return cls(
            both_pass=sum(1 for b, c in pairs if b and c),
            both_fail=sum(1 for b, c in pairs if not b and not c),
            regressions=sum(1 for b, c in pairs if b and not c),
            improvements=sum(1 for b, c in pairs if not b and c),
        )

    @property
    def n(self) -> int:
        return self.both_pass + self.both_fail + self.regressions + self.improvements

    @property
    def discordant(self) -> int:
        return self.regressions + self.improvements


@dataclass(frozen=True, slots=True)
class McNemarResult:
    counts: PairedCounts
    p_two_sided: float
    p_candidate_worse: float  # one-sided: regressions outnumber improvements beyond chance


def _binomial_tail_at_least(k: int, n: int) -> Fraction:
    """P(X >= k) for X ~ Binomial(n, 1/2), exactly."""
    return Fraction(sum(math.comb(n, i) for i in range(k, n + 1)), 2**n)


def mcnemar_exact(counts: PairedCounts) -> McNemarResult:
    """Exact McNemar test; with no discordant pairs there is no evidence either way (p = 1)."""
    n_d, b = counts.discordant, counts.regressions
    if n_d == 0:
        return McNemarResult(counts, 1.0, 1.0)
    smaller = min(b, counts.improvements)
    # P(X <= smaller) = P(X >= n_d - smaller) by symmetry of Binomial(n, 1/2).
    two_sided = min(Fraction(1), 2 * _binomial_tail_at_least(n_d - smaller, n_d))
    worse = _binomial_tail_at_least(b, n_d)
    return McNemarResult(counts, float(two_sided), float(worse))
