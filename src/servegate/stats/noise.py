"""The noise floor: how much the baseline disagrees with itself (A/A); drift is judged against it.

LLM outputs drift for benign reasons (batch composition, thread count). The baseline is asked the
same prompts twice; the share of pairs that differ is the floor a candidate's drift is compared
with, and the first-divergence indices show how early benign drift starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from servegate.stats.distribution import DistributionSummary

# An output is compared as text (per character) or as a token sequence (per token).
Output = str | Sequence[str]


def first_divergence(a: Output, b: Output) -> int | None:
    """Index of the first differing element, len(shorter) when one is a prefix, None if equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    if len(a) == len(b):
        return None
    return min(len(a), len(b))


def drift_threshold(floor: float, k: float, epsilon: float) -> float:
    """Largest drift (a mismatch rate) still inside the noise: k x floor + epsilon, capped at 1."""
    if k < 0 or epsilon < 0:
        raise ValueError(f"k and epsilon must be >= 0, got k={k}, epsilon={epsilon}")
    return min(1.0, k * floor + epsilon)


@dataclass(frozen=True, slots=True)
class ProbeNoise:
    """A/A agreement of one probe over its repeated pairs."""

    probe: str
    pairs: int
    exact_matches: int
    divergences: tuple[int, ...]  # first-divergence index of each pair that differed

    @property
    def exact_match_rate(self) -> float | None:
        return self.exact_matches / self.pairs if self.pairs else None

    @property
    def mismatch_rate(self) -> float | None:
        rate = self.exact_match_rate
        return None if rate is None else 1.0 - rate


@dataclass(frozen=True, slots=True)
class NoiseFloor:
    """Baseline-versus-itself agreement over all probes; `measured` is False with no pairs."""

    probes: tuple[ProbeNoise, ...]

    @classmethod
    def from_pairs(cls, pairs: Mapping[str, Sequence[tuple[Output, Output]]]) -> NoiseFloor:
        """Build from A/A output pairs keyed by probe id (the same prompt sent twice, greedy)."""
        probes = []
        for probe, items in pairs.items():
            indices = [first_divergence(a, b) for a, b in items]
            diverged = tuple(i for i in indices if i is not None)
            probes.append(ProbeNoise(probe, len(items), len(items) - len(diverged), diverged))
        return cls(tuple(probes))

    @property
    def pairs(self) -> int:
        return sum(p.pairs for p in self.probes)

    @property
    def measured(self) -> bool:
        return self.pairs > 0

    @property
    def exact_match_rate(self) -> float | None:
        """Pooled over every pair; None when nothing was measured."""
        if not self.measured:
            return None
        return sum(p.exact_matches for p in self.probes) / self.pairs

    @property
    def mismatch_rate(self) -> float | None:
        rate = self.exact_match_rate
        return None if rate is None else 1.0 - rate

    @property
    def divergence(self) -> DistributionSummary:
        """First-divergence indices of the pairs that differed (empty when all agreed)."""
        return DistributionSummary.from_values(i for p in self.probes for i in p.divergences)

    def probe(self, probe_id: str) -> ProbeNoise | None:
        return next((p for p in self.probes if p.probe == probe_id), None)

    def drift_threshold(self, k: float, epsilon: float) -> float | None:
        """Largest candidate mismatch rate inside the noise; None (inconclusive) if unmeasured."""
        floor = self.mismatch_rate
        return None if floor is None else drift_threshold(floor, k, epsilon)

    def within_noise(self, drift: float, k: float, epsilon: float) -> bool | None:
        """Whether a candidate mismatch rate is inside the noise; None if unmeasured."""
        limit = self.drift_threshold(k, epsilon)
        return None if limit is None else drift <= limit
