"""Pure statistics: rates, paired and unpaired tests, distributions, noise floor, degeneration,
bootstrap intervals and the one per-metric classification (pass / high / low / not measured)."""

from servegate.stats.bootstrap import RatioInterval, quantile_ratio_interval
from servegate.stats.classification import Classification, MetricClassification, classify
from servegate.stats.distribution import DistributionSummary
from servegate.stats.divergence import first_divergence, noise_limit
from servegate.stats.interval import Interval, wilson_interval
from servegate.stats.mann_whitney import MannWhitneyResult, mann_whitney_u
from servegate.stats.paired import McNemarResult, PairedCounts, mcnemar_exact
from servegate.stats.proportions import RateIncrease, rate_increase

__all__ = [
    "Classification",
    "DistributionSummary",
    "Interval",
    "MannWhitneyResult",
    "McNemarResult",
    "MetricClassification",
    "PairedCounts",
    "RateIncrease",
    "RatioInterval",
    "classify",
    "first_divergence",
    "mann_whitney_u",
    "mcnemar_exact",
    "noise_limit",
    "quantile_ratio_interval",
    "rate_increase",
    "wilson_interval",
]
