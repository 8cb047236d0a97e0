"""A paired shift with its standard error: is the candidate systematically worse, or just noisy?

Used for perplexity: per-token NLL differences (candidate − baseline) on the same reference
tokens. Neighbouring tokens are correlated, so the standard error comes from *batch means*
(the mean of each block of consecutive differences), which stays honest where the naive
per-token error would be too small. z = mean / s.e.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

BLOCK_TOKENS = 32


@dataclass(frozen=True, slots=True)
class PairedShift:
    """Mean of paired differences, its batch-means standard error and z."""

    n: int
    mean: float
    stderr: float | None  # None with fewer than two blocks
    blocks: int

    @property
    def z(self) -> float | None:
        if self.stderr is None:
            return None
        if self.stderr == 0.0:
            return 0.0 if self.mean == 0.0 else math.copysign(math.inf, self.mean)
        return self.mean / self.stderr

    @classmethod
    def from_groups(
        cls, groups: Sequence[Sequence[float]], block: int = BLOCK_TOKENS
    ) -> PairedShift:
        """Differences in independent groups (one per text); blocks never straddle two groups.

        A group shorter than `block` is one block of its own."""
        means: list[float] = []
        values: list[float] = []
        for group in groups:
            values += group
            for start in range(0, len(group), block):
                chunk = group[start : start + block]
                if len(chunk) == block or start == 0:
                    means.append(sum(chunk) / len(chunk))
        n = len(values)
        if n == 0:
            return cls(0, 0.0, None, 0)
        mean = sum(values) / n
        if len(means) < 2:
            return cls(n, mean, None, len(means))
        centre = sum(means) / len(means)
        var = sum((m - centre) ** 2 for m in means) / (len(means) - 1)
        return cls(n, mean, math.sqrt(var / len(means)), len(means))
