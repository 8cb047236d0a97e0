"""Distribution summaries: the numbers a latency or divergence table prints."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

STATISTICS = ("mean", "p50", "p90", "p95", "p99", "min", "max")


@dataclass(frozen=True, slots=True)
class DistributionSummary:
    """Count, mean and percentiles of a sample; every statistic is None for an empty sample."""

    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    min: float | None
    max: float | None

    @classmethod
    def from_values(cls, values: Iterable[float]) -> DistributionSummary:
        """Summarise finite values (linear-interpolated percentiles); NaN or inf is an error."""
        data = np.asarray(list(values), dtype=np.float64)
        if data.size == 0:
            return cls(0, None, None, None, None, None, None, None)
        if not np.all(np.isfinite(data)):
            raise ValueError("cannot summarise non-finite values (NaN or infinity)")
        p50, p90, p95, p99 = (float(q) for q in np.percentile(data, [50, 90, 95, 99]))
        return cls(
            count=int(data.size),
            mean=float(data.mean()),
            p50=p50,
            p90=p90,
            p95=p95,
            p99=p99,
            min=float(data.min()),
            max=float(data.max()),
        )

    def statistic(self, name: str) -> float | None:
        """One statistic by name (`p95`, `mean`, ...), for policies that name them in YAML."""
        if name not in STATISTICS:
            raise ValueError(f"unknown statistic {name!r}; expected one of {', '.join(STATISTICS)}")
        value: float | None = getattr(self, name)
        return value
