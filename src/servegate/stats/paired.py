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


def sign_test(greater: int, less: int, *, two_sided: bool = True) -> float:
    """Exact sign test: `greater` pairs where the candidate's value is the larger, `less` where
    it is the smaller (ties carry no information and are left out). Under "no change" each
    untied pair is a fair coin; one-sided, the alternative is "the candidate's is larger". No
    untied pair: p = 1."""
    result = mcnemar_exact(PairedCounts(0, 0, greater, less))
    return result.p_two_sided if two_sided else result.p_candidate_worse


def _binomial_at_least(k: int, n: int, rate: float) -> float:
    """P(X >= k) for X ~ Binomial(n, rate)."""
    return sum(math.comb(n, i) * rate**i * (1 - rate) ** (n - i) for i in range(k, n + 1))


def fewest_one_way(alpha: float, *, two_sided: bool) -> int:
    """The fewest discordant pairs, all going the candidate's way and none the other, that
    reject at `alpha` (p = 0.5^k one-sided, twice that two-sided)."""
    k = 0
    while (2.0 if two_sided else 1.0) * 0.5**k >= alpha:
        k += 1
    return k


def _bisect(at_least: int, n: int, power: float, lo: float) -> float:
    """The smallest rate r in [lo, 1] with P(Binomial(n, r) >= at_least) >= power."""
    hi = 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        if _binomial_at_least(at_least, n, mid) >= power:
            hi = mid
        else:
            lo = mid
    return hi


def detectable_share(
    n: int, alpha: float, power: float, *, two_sided: bool = False
) -> float | None:
    """McNemar's power over `n` pairs: the smallest share r of pairs where the candidate fails
    and the baseline does not (the reverse never happening) that makes the test reject at
    `alpha` with probability >= `power`. None when even n such pairs cannot reject."""
    k = fewest_one_way(alpha, two_sided=two_sided)
    return None if k > n else _bisect(k, n, power, 0.0)


def sign_detectable(n: int, alpha: float, power: float, *, two_sided: bool = True) -> float | None:
    """The sign test's power over `n` untied pairs: the smallest probability q >= 1/2 that the
    candidate's value is the larger (two-sided: or, by symmetry, the smaller) that makes the
    test reject at `alpha` with probability >= `power`. None when `n` pairs cannot reject."""
    sides = 2 if two_sided else 1
    for k in range(n // 2, n + 1):
        if sides * float(_binomial_tail_at_least(k, n)) < alpha:
            return _bisect(k, n, power, 0.5)
    return None
