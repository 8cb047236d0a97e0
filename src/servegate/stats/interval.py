"""Confidence intervals for a rate: how sure a pass rate over a few probes really is."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist


@dataclass(frozen=True, slots=True)
class Interval:
    """A two-sided confidence interval for a proportion, both ends in [0, 1]."""

    successes: int
    n: int
    low: float
    high: float
    confidence: float

    @property
    def rate(self) -> float | None:
        """The observed rate, or None when nothing was observed."""
        return self.successes / self.n if self.n else None


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> Interval:
    """Wilson score interval; with n == 0 it is the uninformative [0, 1]."""
    if n < 0 or not 0 <= successes <= max(n, 0):
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n == 0:
        return Interval(successes, n, 0.0, 1.0, confidence)
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # Clamp float noise so p = 0 or 1 gives an end exactly at 0 or 1.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return Interval(successes, n, low, high, confidence)
