"""The A/A floor's one widening rule: how far a baseline is from its own replica (or the canary's
primary from its secondary) in the same blocks, and how much that widens a candidate's band.

A replica at ratio r of the baseline deviates by d = max(r, 1/r) − 1 (symmetric: 0.8× and 1.25×
are the same deviation); the band widens by the factor 1 + k·d (policy `performance_aa_k`), and a
deviation beyond `performance_aa_max` leaves the metric not measured: the machine is too noisy.
"""

from __future__ import annotations

import math

__all__ = ["deviation", "widen_factor"]


def deviation(ratio: float | None) -> float | None:
    """max(r, 1/r) − 1 of a replica / baseline ratio; None when the ratio is not a positive
    finite number."""
    if ratio is None or not math.isfinite(ratio) or ratio <= 0:
        return None
    return max(ratio, 1 / ratio) - 1


def widen_factor(d: float | None, k: float) -> float:
    """The factor 1 + k·d by which a deviation `d` widens a band; 1.0 when not measured."""
    return 1.0 if d is None else 1 + k * d
