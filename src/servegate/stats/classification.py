"""Kayenta-style classification of one metric: pass, high, low or not measured.

One function judges every performance metric the same way (Kayenta's Mann-Whitney classifier):
a metric is HIGH only when the candidate is shifted upwards *significantly* (Mann-Whitney U,
one-sided) *and* by more than the allowed effect (the ratio of a chosen statistic, e.g. mean or
p95, above 1 + allowed_increase); LOW is the mirror image. Significant but inside the band, or
outside the band but not significant, is PASS: noise can neither fail nor pass a metric by
itself. Too few samples on either side is NOT_MEASURED, never a pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

import numpy as np

from servegate.stats.distribution import DistributionSummary
from servegate.stats.mann_whitney import mann_whitney_u

Direction = Literal["increase", "decrease", "either"]
MIN_SAMPLES = 20


class Classification(StrEnum):
    PASS = "pass"
    HIGH = "high"
    LOW = "low"
    NOT_MEASURED = "not measured"


@dataclass(frozen=True, slots=True)
class MetricClassification:
    """The judgement of one metric with the numbers that led to it."""

    metric: str
    classification: Classification
    reason: str
    n_baseline: int
    n_candidate: int
    statistic: str  # the effect measure: "mean", "p50", "p95", ...
    ratio: float | None  # candidate statistic / baseline statistic
    p_value: float | None  # one-sided p of the direction that was tested (the smaller if both)
    effect: float | None  # probability of superiority P(candidate > baseline) + ties / 2


def _ratio(b: DistributionSummary, c: DistributionSummary, statistic: str) -> float | None:
    base, cand = b.statistic(statistic), c.statistic(statistic)
    if base is None or cand is None:
        return None
    if base == 0:
        return 1.0 if cand == 0 else float("inf") if cand > 0 else float("-inf")
    return cand / base


def classify(
    metric: str,
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    direction: Direction = "increase",
    allowed_increase: float = 0.2,
    allowed_decrease: float = 0.2,
    statistic: str = "mean",
    alpha: float = 0.05,
    min_samples: int = MIN_SAMPLES,
) -> MetricClassification:
    """Classify the candidate's sample against the baseline's.

    `direction` says which shift is bad enough to look for: "increase" (latencies), "decrease"
    (throughput) or "either" (each side tested at alpha / 2). Allowed shifts are fractions of
    the baseline's statistic (0.2 = 20 %).
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if allowed_increase < 0 or not 0 <= allowed_decrease < 1:
        raise ValueError("allowed_increase must be >= 0 and allowed_decrease in [0, 1)")
    if min_samples < 1:
        raise ValueError("min_samples must be at least 1")
    b_sum = DistributionSummary.from_values(baseline)
    c_sum = DistributionSummary.from_values(candidate)
    c_sum.statistic(statistic)  # an unknown statistic is an error even for tiny samples
    nb, nc = b_sum.count, c_sum.count

    def result(
        kind: Classification,
        reason: str,
        ratio: float | None = None,
        p: float | None = None,
        effect: float | None = None,
    ) -> MetricClassification:
        return MetricClassification(metric, kind, reason, nb, nc, statistic, ratio, p, effect)

    if nb < min_samples or nc < min_samples:
        return result(
            Classification.NOT_MEASURED,
            f"too few samples: baseline {nb}, candidate {nc} (need {min_samples} each)",
        )
    ratio = _ratio(b_sum, c_sum, statistic)
    if np.array_equal(np.sort(baseline), np.sort(candidate)):
        return result(Classification.PASS, "identical samples", ratio, 1.0, 0.5)
    tests = ("increase", "decrease") if direction == "either" else (direction,)
    level = alpha / len(tests)
    p_values: dict[str, float] = {}
    effect = 0.5
    for tested in tests:
        alternative: Literal["greater", "less"] = "greater" if tested == "increase" else "less"
        mw = mann_whitney_u(baseline, candidate, alternative=alternative)
        p_values[tested] = mw.p_value
        effect = mw.effect
    p_min = min(p_values.values())
    assert ratio is not None  # both samples are non-empty here
    if "increase" in p_values and p_values["increase"] < level and ratio > 1 + allowed_increase:
        return result(
            Classification.HIGH,
            f"{statistic} {ratio:.3g}x the baseline's (allowed {1 + allowed_increase:.3g}x), "
            f"Mann-Whitney p = {p_values['increase']:.2g} < {level:.2g}",
            ratio,
            p_values["increase"],
            effect,
        )
    if "decrease" in p_values and p_values["decrease"] < level and ratio < 1 - allowed_decrease:
        return result(
            Classification.LOW,
            f"{statistic} {ratio:.3g}x the baseline's (allowed {1 - allowed_decrease:.3g}x), "
            f"Mann-Whitney p = {p_values['decrease']:.2g} < {level:.2g}",
            ratio,
            p_values["decrease"],
            effect,
        )
    significant = p_min < level
    inside = f"{statistic} {ratio:.3g}x the baseline's"
    why = "inside the allowed band" if significant else f"not significant (p = {p_min:.2g})"
    return result(Classification.PASS, f"{inside}, {why}", ratio, p_min, effect)
