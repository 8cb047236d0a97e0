"""The highest setting of a sweep that met the SLOs, on plain step results."""

from __future__ import annotations

import pytest

from servegate.endpoints.types import Completion, Timing
from servegate.load.arrival import Arrival, closed_loop, open_loop
from servegate.load.bench import evaluate_step
from servegate.load.driver import Exchange, StepBounds, StepEvidence
from servegate.load.monitor import ClientEvidence
from servegate.load.result import StepResult
from servegate.load.slo import parse_slo
from servegate.load.sweep import meets_slo, sweep_limit
from servegate.load.workload import SyntheticWorkload, synthetic_source

SOURCE = synthetic_source(SyntheticWorkload(input_tokens=8, output_tokens=4), "m")


def _step(arrival: Arrival, ttft_ms: list[float], *, client_bound: bool = False) -> StepResult:
    """A step whose requests had these TTFTs (E2EL 10 ms later), judged against TTFT ≤ 100 ms."""
    exchanges = []
    for i, ttft in enumerate(ttft_ms):
        t = i * 10**9
        chunks = (t + int(ttft * 1e6), t + int((ttft + 10) * 1e6))
        done = Completion(
            status=200, content="a b", finish_reason="length",
            timing=Timing(sent_ns=t, token_chunk_ns=chunks, token_chunk_tokens=(1, 1),
                          done_ns=chunks[-1]),
        )  # fmt: skip
        exchanges.append(Exchange(i, SOURCE(i), done, t, chunks[-1]))
    cpu = 0.9 if client_bound else 0.05
    evidence = StepEvidence(
        arrival=arrival, bounds=StepBounds(requests=len(ttft_ms), duration_s=60, warmup=0,
                                           deadline_s=60),
        warmup=(), exchanges=tuple(exchanges), start_ns=0, end_ns=exchanges[-1].finished_ns,
        planned=len(ttft_ms), stopped_by="requests", peak_in_flight=1,
        client=ClientEvidence(cpu_s=cpu, wall_s=1.0, loop_lag_ms=(0.1,) * 20),
        next_index=len(ttft_ms),
    )  # fmt: skip
    return evaluate_step(evidence, parse_slo("ttft_ms=100"))


FAST = [50.0] * 20
ONE_SLOW = [50.0] * 19 + [500.0]  # 95 % met
TWO_SLOW = [50.0] * 18 + [500.0] * 2  # 90 % met


def test_a_step_meets_the_slo_when_95_percent_of_its_requests_do() -> None:
    assert meets_slo(_step(closed_loop(1), ONE_SLOW)) is True
    assert meets_slo(_step(closed_loop(1), TWO_SLOW)) is False
    assert meets_slo(_step(closed_loop(1), TWO_SLOW), attainment=0.9) is True


def test_the_limit_is_the_highest_concurrency_that_met_it_and_the_next_that_missed() -> None:
    steps = [
        _step(closed_loop(8), TWO_SLOW),
        _step(closed_loop(1), FAST),
        _step(closed_loop(4), ONE_SLOW),
    ]
    limit = sweep_limit(steps)
    assert limit is not None
    assert (limit.setting, limit.best, limit.best_label) == ("concurrency", 4.0, "c=4")
    assert (limit.met, limit.missed) == (("c=1", "c=4"), ("c=8",))
    assert limit.describe() == "max concurrency under SLO: c=4 (c=8 missed)"


def test_when_the_highest_setting_met_it_the_limit_may_be_higher() -> None:
    limit = sweep_limit([_step(open_loop(2.0), FAST), _step(open_loop(4.0), FAST)])
    assert limit is not None
    assert (limit.setting, limit.best) == ("rate_rps", 4.0)
    assert "the limit may be higher" in limit.note


def test_no_step_meeting_it_has_no_limit_and_says_so() -> None:
    limit = sweep_limit([_step(closed_loop(1), TWO_SLOW), _step(closed_loop(2), TWO_SLOW)])
    assert limit is not None
    assert limit.best is None
    assert limit.describe() == (
        "max concurrency under SLO: none of the steps met it "
        "(the lowest setting tried, c=1, already missed)"
    )


def test_a_client_bound_step_that_missed_is_named() -> None:
    limit = sweep_limit(
        [_step(closed_loop(1), FAST), _step(closed_loop(64), TWO_SLOW, client_bound=True)]
    )
    assert limit is not None
    assert "client-bound at c=64: the limit may be the client's" in limit.note


@pytest.mark.parametrize("arrival", [Arrival(kind="replay")], ids=["replay"])
def test_a_replay_has_no_setting_to_sweep(arrival: Arrival) -> None:
    assert sweep_limit([_step(arrival, FAST)]) is None
