"""The judge compares pairs on its own thread, falls back to the caller's thread when its small
queue is full (so no pair is lost and nothing waits unbounded), and survives a failing pair."""

from __future__ import annotations

import logging
import threading

import pytest

from servegate.proxy.judging import PairJudge


def test_pairs_are_judged_on_the_judges_thread_and_close_runs_what_is_queued() -> None:
    judge = PairJudge(size=64)
    ran: list[tuple[int, str]] = []
    for i in range(50):
        judge.submit(lambda i=i: ran.append((i, threading.current_thread().name)))
    judge.close()
    assert [i for i, _ in ran] == list(range(50))  # all of them, in order
    assert {name for _, name in ran} == {"servegate-proxy-judge"}
    assert (judge.done, judge.inline) == (50, 0)


def test_a_full_queue_judges_the_pair_at_once_on_the_callers_thread() -> None:
    judge = PairJudge(size=1)
    busy, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def blocking() -> None:
        busy.set()
        release.wait(timeout=10)

    judge.submit(blocking)
    assert busy.wait(timeout=10)  # the thread is inside the first judgement
    judge.submit(lambda: ran.append("queued:" + threading.current_thread().name))
    judge.submit(lambda: ran.append("inline:" + threading.current_thread().name))
    assert ran == ["inline:" + threading.current_thread().name]
    assert (judge.inline, judge.done) == (1, 1)
    release.set()
    judge.close()
    assert ran[1] == "queued:servegate-proxy-judge"
    assert judge.done == 3


def test_a_pair_that_fails_to_compare_is_logged_counted_and_the_judge_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    judge = PairJudge(size=8)
    ran: list[int] = []

    def broken() -> None:
        raise ValueError("a comparison bug")

    with caplog.at_level(logging.ERROR, logger="servegate.proxy"):
        judge.submit(broken)
        judge.submit(lambda: ran.append(1))
        judge.close()
    assert ran == [1]
    assert judge.done == 2
    assert "could not be compared" in caplog.text
    assert "a comparison bug" in caplog.text
