"""Where two outputs part, and how much of a difference the baseline's own noise allows.

The noise floor itself (the baseline against itself along its paths) is measured by the gates
(gates/noise.py); this module holds the two pure rules they share.
"""

from __future__ import annotations

from collections.abc import Sequence

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
