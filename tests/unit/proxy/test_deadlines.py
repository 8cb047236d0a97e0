"""The candidate's deadlines in canary mode follow the primary's measured latency (the gates'
3× rule), with a floor, a start value and fixed overrides from the policy."""

from __future__ import annotations

import pytest

from servegate.canary.deadline_rule import DeadlineRule
from servegate.proxy.deadlines import CandidateDeadlines
from servegate.proxy.exchange import Exchange

MS = 1_000_000


def _answer(e2el_ms: int, first_byte_ms: int) -> Exchange:
    exchange = Exchange(sent_ns=0, status=200)
    exchange.keep(b"a", first_byte_ms * MS, 1 << 20)
    exchange.keep(b"b", e2el_ms * MS, 1 << 20)
    exchange.done_ns = e2el_ms * MS
    return exchange


def test_before_enough_primary_answers_the_start_deadline_applies() -> None:
    deadlines = CandidateDeadlines(DeadlineRule(start_s=60.0, min_samples=3))
    deadlines.observe(_answer(4000, 500))
    assert (deadlines.current().total_s, deadlines.current().idle_s) == (60.0, 60.0)


def test_the_deadlines_are_three_times_the_primarys_p95() -> None:
    deadlines = CandidateDeadlines(DeadlineRule(factor=3.0, min_s=1.0, min_samples=20))
    for _ in range(20):
        deadlines.observe(_answer(4000, 3000))  # 3 s to the first byte, then 1 s
    due = deadlines.current()
    assert due.total_s == pytest.approx(12.0)
    assert due.idle_s == pytest.approx(9.0)
    assert due.derived_from == 20


def test_a_fast_primary_does_not_make_the_deadline_shorter_than_the_floor() -> None:
    deadlines = CandidateDeadlines(DeadlineRule(min_s=5.0, min_samples=1))
    deadlines.observe(_answer(20, 10))
    assert (deadlines.current().total_s, deadlines.current().idle_s) == (5.0, 5.0)


def test_fixed_deadlines_from_the_policy_win() -> None:
    deadlines = CandidateDeadlines(DeadlineRule(total_s=30.0, idle_s=50.0, min_samples=1))
    deadlines.observe(_answer(4000, 3000))
    due = deadlines.current()
    assert (due.total_s, due.idle_s) == (30.0, 30.0)  # idle never beyond the total
