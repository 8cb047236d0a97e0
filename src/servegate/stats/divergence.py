"""Where two outputs part, and how much of a difference the baseline's own noise allows.

The noise floor itself (the baseline against itself along its paths) is measured by the gates
(gates/numerics/noise.py); this module holds the two pure rules they share.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from statistics import median

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


def noise_limit(floor: float, k: float, tolerance: float) -> float:
    """The largest drift still inside the noise: k × the baseline's own floor + the tolerance."""
    if k < 0 or tolerance < 0 or floor < 0:
        raise ValueError(f"floor, k and tolerance must be >= 0, got {floor}, {k}, {tolerance}")
    return k * floor + tolerance


def near_tie_limit(margin: float, self_flip_gaps: Iterable[float], cap: float) -> float:
    """The gap below which a flip is a near-tie: the policy's margin, raised to the median gap at
    which the baseline flipped against itself, never above `cap` — one odd self-flip cannot
    switch off confident-flip detection for a whole run."""
    gaps = [g for g in self_flip_gaps if g >= 0]
    own = median(gaps) if gaps else 0.0
    return max(margin, min(own, cap))
