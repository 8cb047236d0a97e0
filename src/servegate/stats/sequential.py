"""Alpha spending over planned looks: looking early must not raise the false-alarm rate.

A check that looks at its data K times and may stop at any look gets K chances to be fooled by
noise. A spending function α(t) says how much of the total error rate α may have been spent by
information fraction t (here: blocks a side so far / the planned maximum); look k may test at
what α(t_k) has reached minus what the earlier looks spent. The looks are then combined by the
union bound (Bonferroni): whatever the correlation between looks, the chance that *any* look
errs is at most the sum of their levels ≤ α. This is conservative (the looks are positively
correlated, so exact group-sequential boundaries would be a little wider), and it needs no
normal approximation, which an exact rank test over 6 blocks a side would not honour.

The rank test is discrete (6 against 6 blocks: one-sided p ∈ {1/924, 2/924, …}), so a look
attains less than it may spend; only what it attained is counted as spent and the rest carries to
the next look.

Two classic shapes (Lan & DeMets 1983): `pocock` spends most at the first looks (early
decisions, the default: the gate is meant to stop early when it can), `obrien-fleming` keeps
almost everything for the last look (early stops only for gross shifts).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from statistics import NormalDist
from typing import Literal

from servegate.stats.mann_whitney import critical_u

Spending = Literal["pocock", "obrien-fleming"]


def spent(alpha: float, t: float, rule: Spending = "pocock") -> float:
    """α(t): how much of the one-sided `alpha` may be spent by information fraction t ∈ (0, 1]
    (α(1) = α)."""
    if not 0 < t <= 1:
        raise ValueError(f"information fraction must be in (0, 1], got {t}")
    if rule == "pocock":
        return alpha * math.log(1 + (math.e - 1) * t)
    z = NormalDist().inv_cdf(1 - alpha)
    return 1 - NormalDist().cdf(z / math.sqrt(t))


@dataclass(frozen=True, slots=True)
class Look:
    """One planned look: blocks a side, the one-sided level it may test each bound at, and the
    level its exact test attains with that many blocks (0 when it cannot reach the level)."""

    number: int  # 1-based
    blocks: int
    level: float
    attained: float


def look_levels(alpha: float, blocks: Sequence[int], rule: Spending = "pocock") -> tuple[Look, ...]:
    """The levels of looks after `blocks[k]` blocks a side (ascending; the last the maximum),
    each bound tested one-sided, and the sum of every look's attained level ≤ `alpha`."""
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")
    if not blocks or any(b <= a for a, b in pairwise(blocks)):
        raise ValueError(f"looks must be ascending block counts, got {list(blocks)}")
    used = 0.0
    out = []
    for k, n in enumerate(blocks):
        level = max(spent(alpha, n / blocks[-1], rule) - used, 0.0)
        crit = critical_u(n, n, level) if level > 0 else None
        attained = 0.0 if crit is None else crit[1]
        used += attained
        out.append(Look(k + 1, n, level, attained))
    return tuple(out)
