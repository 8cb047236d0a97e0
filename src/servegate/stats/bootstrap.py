"""Bootstrap confidence interval of a quantile ratio: how sure "candidate P95 / baseline P95" is.

Percentile bootstrap on two independent samples (latencies of two servers are not paired): each
replicate resamples both sides with replacement and takes the ratio of their quantiles. Seeded,
so the same samples and seed give the same interval on any machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

MIN_SAMPLES = 20
_BATCH_CELLS = 2_000_000  # resampled values held at once (16 MB of float64)


@dataclass(frozen=True, slots=True)
class RatioInterval:
    """Candidate quantile / baseline quantile with a two-sided percentile-bootstrap interval.

    `measured` is False (ratio and ends None) when either side has fewer than `min_samples`
    values or the baseline's quantile is not positive (no ratio exists); `reason` says which.
    """

    quantile: float
    ratio: float | None
    low: float | None
    high: float | None
    confidence: float
    resamples: int
    seed: int
    n_baseline: int
    n_candidate: int
    reason: str = ""

    @property
    def measured(self) -> bool:
        return self.ratio is not None


def _checked(values: Sequence[float], side: str) -> npt.NDArray[np.float64]:
    data = np.asarray(values, dtype=np.float64)
    if data.ndim != 1:
        raise ValueError(f"{side} must be a flat sequence of numbers")
    if not np.all(np.isfinite(data)):
        raise ValueError(f"{side} has non-finite values (NaN or infinity)")
    return data


def _replicates(
    data: npt.NDArray[np.float64], quantile: float, resamples: int, rng: np.random.Generator
) -> npt.NDArray[np.float64]:
    """`resamples` bootstrap quantiles of `data`, drawn in batches to bound memory."""
    out = np.empty(resamples, dtype=np.float64)
    batch = max(1, _BATCH_CELLS // data.size)
    for start in range(0, resamples, batch):
        stop = min(start + batch, resamples)
        idx = rng.integers(0, data.size, size=(stop - start, data.size))
        out[start:stop] = np.quantile(data[idx], quantile, axis=1)
    return out


def quantile_ratio_interval(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    quantile: float = 0.95,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    min_samples: int = MIN_SAMPLES,
) -> RatioInterval:
    """Percentile-bootstrap interval of quantile(candidate) / quantile(baseline).

    Quantiles are linear-interpolated (numpy's default, as `DistributionSummary`). A replicate
    whose baseline quantile is 0 has no ratio and counts as +inf, so the interval stays honest
    (an infinite upper end) instead of silently dropping it.
    """
    if not 0 < quantile < 1:
        raise ValueError(f"quantile must be in (0, 1), got {quantile}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if resamples < 1 or min_samples < 1:
        raise ValueError("resamples and min_samples must be at least 1")
    b = _checked(baseline, "baseline")
    c = _checked(candidate, "candidate")

    def unmeasured(reason: str) -> RatioInterval:
        return RatioInterval(
            quantile, None, None, None, confidence, resamples, seed, b.size, c.size, reason
        )

    if b.size < min_samples or c.size < min_samples:
        return unmeasured(
            f"too few samples: baseline {b.size}, candidate {c.size} (need {min_samples} each)"
        )
    base_q = float(np.quantile(b, quantile))
    if base_q <= 0:
        return unmeasured(f"baseline quantile is {base_q:g}: a ratio to it does not exist")
    ratio = float(np.quantile(c, quantile)) / base_q
    rng = np.random.default_rng(seed)
    base_reps = _replicates(b, quantile, resamples, rng)
    cand_reps = _replicates(c, quantile, resamples, rng)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(base_reps > 0, cand_reps / np.where(base_reps > 0, base_reps, 1), np.inf)
    alpha = 1 - confidence
    # Order statistics rounded outwards (no interpolation): never narrower, and inf-safe.
    low = float(np.quantile(ratios, alpha / 2, method="lower"))
    high = float(np.quantile(ratios, 1 - alpha / 2, method="higher"))
    return RatioInterval(quantile, ratio, low, high, confidence, resamples, seed, b.size, c.size)
