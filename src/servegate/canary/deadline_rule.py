"""How long the candidate may take in canary mode: the policy's `canary.candidate_timeout_*`
keys, read once here; the proxy applies them (proxy/deadlines.py)."""

from __future__ import annotations

from dataclasses import dataclass

from servegate.config.models import Policy


@dataclass(frozen=True)
class DeadlineRule:
    """The candidate's deadlines: `factor` × the primary's P95 (never below `min_s`), `start_s`
    until the primary has `min_samples` answers, or fixed `total_s` / `idle_s`."""

    factor: float = 3.0
    min_s: float = 5.0
    start_s: float = 60.0
    total_s: float | None = None  # fixed: not derived
    idle_s: float | None = None
    min_samples: int = 20  # primary answers needed before the derived values apply

    @classmethod
    def from_policy(cls, policy: Policy) -> DeadlineRule:
        """The rule a policy sets."""
        return cls(
            factor=policy.canary.candidate_timeout_factor,
            min_s=policy.canary.candidate_timeout_min_s,
            start_s=policy.canary.candidate_timeout_start_s,
            total_s=policy.canary.candidate_total_timeout_s,
            idle_s=policy.canary.candidate_idle_timeout_s,
            min_samples=policy.canary.min_requests,
        )
