"""How a step is dealt over worker processes, and how their client measurements are judged."""

from __future__ import annotations

import pytest

from servegate.load.monitor import ClientEvidence, judge_workers
from servegate.load.workers import deal, shares


@pytest.mark.parametrize(
    ("total", "parts", "expected"),
    [(5, 2, [3, 2]), (4, 2, [2, 2]), (1, 3, [1, 0, 0]), (256, 2, [128, 128])],
    ids=["odd", "even", "fewer-than-parts", "c256"],
)
def test_shares_split_a_count_near_equally_larger_first(
    total: int, parts: int, expected: list[int]
) -> None:
    assert shares(total, parts) == expected
    assert sum(shares(total, parts)) == total


@pytest.mark.parametrize(
    ("first", "warmup", "requests", "workers"),
    [(0, 3, 11, 2), (17, 4, 4, 4), (5, 0, 7, 3), (0, 256, 3000, 2)],
    ids=["uneven", "even", "no-warmup", "c256"],
)
def test_the_workers_get_exactly_the_items_one_process_would_send(
    first: int, warmup: int, requests: int, workers: int
) -> None:
    lists = deal(first, warmup, requests, workers)
    sent = sorted(i for mine in lists for i in mine)
    assert sent == list(range(first, first + warmup + requests))
    for mine, w, r in zip(lists, shares(warmup, workers), shares(requests, workers), strict=True):
        assert len(mine) == w + r
        # each worker warms up on warm-up items only, then measures measured items only
        assert all(i < first + warmup for i in mine[:w])
        assert all(i >= first + warmup for i in mine[w:])


def evidence(worker: int, cpu_s: float, lag_ms: float) -> ClientEvidence:
    return ClientEvidence(cpu_s=cpu_s, wall_s=1.0, loop_lag_ms=(lag_ms,) * 10, worker=worker)


def test_one_bound_worker_binds_the_step_and_is_named() -> None:
    load = judge_workers([evidence(1, 0.3, 1.0), evidence(2, 0.95, 1.0)])
    assert load.client_bound
    assert load.reasons == ("worker 2: client CPU 95% of one core (limit 80%)",)
    assert [(w.worker, w.client_bound) for w in load.workers] == [(1, False), (2, True)]
    assert load.cpu_s == pytest.approx(1.25)
    assert load.cpu_share == pytest.approx(0.95)  # the busiest process, not the sum


def test_workers_that_all_kept_up_leave_the_step_unbound() -> None:
    load = judge_workers([evidence(1, 0.5, 2.0), evidence(2, 0.6, 3.0)])
    assert not load.client_bound
    assert load.reasons == ()
    assert load.loop_lag_p99_ms == pytest.approx(3.0)
