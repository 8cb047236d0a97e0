"""The candidate's own deadlines in canary mode: a total and an idle limit per request, derived
from the primary's recent answers as the gates derive a deadline from the baseline's latency
(`timeout_factor` × its latency), unless the policy fixes them.

The primary keeps the user's own limits (none by default: the proxy must not cut a long answer
the user is waiting for); the candidate is the side under test, and a hang must end as a
timeout of the candidate, not as a request nobody counts."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from servegate.canary.deadline_rule import DeadlineRule
from servegate.proxy.exchange import Exchange

WINDOW = 256  # the primary's most recent ok answers the deadlines are derived from


@dataclass(frozen=True)
class Deadlines:
    total_s: float
    idle_s: float
    derived_from: int  # primary answers behind the values (0: start or fixed values)


def _p95(values: deque[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


class CandidateDeadlines:
    """`observe` each ok primary answer; `current()` the candidate's deadlines now."""

    def __init__(self, rule: DeadlineRule) -> None:
        self.rule = rule
        self._e2el_s: deque[float] = deque(maxlen=WINDOW)
        self._wait_s: deque[float] = deque(maxlen=WINDOW)

    def observe(self, exchange: Exchange) -> None:
        """Take one complete primary answer (the caller passes ok answers only)."""
        if exchange.done_ns is None:
            return
        self._e2el_s.append((exchange.done_ns - exchange.sent_ns) / 1e9)
        self._wait_s.append(exchange.longest_wait_ns / 1e9)

    def current(self) -> Deadlines:
        """The total and idle deadlines for the next candidate request."""
        rule, n = self.rule, len(self._e2el_s)
        if n < rule.min_samples:
            total, idle, used = rule.start_s, rule.start_s, 0
        else:
            total = max(rule.min_s, rule.factor * _p95(self._e2el_s))
            idle = max(rule.min_s, rule.factor * _p95(self._wait_s))
            used = n
        if rule.total_s is not None:
            total = rule.total_s
        if rule.idle_s is not None:
            idle = rule.idle_s
        return Deadlines(total_s=total, idle_s=min(idle, total), derived_from=used)
