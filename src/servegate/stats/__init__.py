"""Pure statistics: rates, paired and unpaired tests, distributions, noise floor, degeneration."""

from servegate.stats.distribution import DistributionSummary
from servegate.stats.interval import Interval, wilson_interval
from servegate.stats.mann_whitney import MannWhitneyResult, mann_whitney_u
from servegate.stats.noise import NoiseFloor, ProbeNoise, drift_threshold, first_divergence
from servegate.stats.paired import McNemarResult, PairedCounts, mcnemar_exact

__all__ = [
    "DistributionSummary",
    "Interval",
    "MannWhitneyResult",
    "McNemarResult",
    "NoiseFloor",
    "PairedCounts",
    "ProbeNoise",
    "drift_threshold",
    "first_divergence",
    "mann_whitney_u",
    "mcnemar_exact",
    "wilson_interval",
]
