"""The driver against an in-process Endpoint: counts, bounds, warm-up and schedules (no clocks
asserted, only what was sent and when it was allowed to be)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import pytest
from tests.unit.stub_endpoint import StubEndpoint

from servegate.endpoints.errors import ErrorCategory, RequestError
from servegate.endpoints.types import Completion, Timing, Usage
from servegate.load import (
    Arrival,
    BenchBounds,
    BenchResult,
    StepBounds,
    SyntheticWorkload,
    WorkItem,
    bench,
    closed_loop,
    open_loop,
    run_step,
    send_offsets_s,
    synthetic_source,
)

MS = 1_000_000


class FakeEndpoint(StubEndpoint):
    """Answers every request after `delay_s` with two tokens; every `fail_every`-th fails."""

    def __init__(self, delay_s: float = 0.0, fail_every: int = 0) -> None:
        super().__init__("fake", "http://fake:8000/v1?token=secret")
        self.delay_s = delay_s
        self.fail_every = fail_every
        self.bodies: list[Mapping[str, Any]] = []
        self.in_flight = 0
        self.peak = 0

    async def chat(self, body: Mapping[str, Any], *, deadline_s: float | None = None) -> Completion:
        self.bodies.append(body)
        number = len(self.bodies)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.delay_s)
        finally:
            self.in_flight -= 1
        now = time.perf_counter_ns()
        timing = Timing(
            sent_ns=now - 3 * MS,
            token_chunk_ns=(now - 2 * MS, now - MS),
            token_chunk_tokens=(1, 1),
            done_ns=now,
        )
        failed = self.fail_every and number % self.fail_every == 0
        return Completion(
            status=200,
            content="Fine words, nothing odd.",
            finish_reason="length",
            usage=Usage(prompt_tokens=20, completion_tokens=2),
            timing=timing,
            error=RequestError(ErrorCategory.SERVER, "boom") if failed else None,
        )

    completion = chat


def _items(index: int) -> WorkItem:
    return WorkItem(api="chat", body={"n": index}, label=f"item {index}", max_tokens=2)


async def test_a_closed_loop_keeps_exactly_its_concurrency_in_flight() -> None:
    ep = FakeEndpoint(delay_s=0.001)
    bounds = StepBounds(requests=20, duration_s=60, warmup=4, deadline_s=5)
    ev = await run_step(ep, _items, closed_loop(4), bounds, first_index=10)
    assert len(ev.warmup) == 4
    assert [x.index for x in ev.warmup] == [10, 11, 12, 13]
    assert sorted(x.index for x in ev.exchanges) == list(range(14, 34))
    assert ev.peak_in_flight == ep.peak == 4
    assert (ev.planned, ev.stopped_by, ev.next_index) == (20, "requests", 34)
    assert all(x.due_ns is None for x in ev.exchanges)
    assert ev.end_ns >= ev.start_ns


async def test_a_closed_loop_stops_sending_when_its_duration_is_over() -> None:
    ep = FakeEndpoint(delay_s=0.02)
    bounds = StepBounds(requests=10_000, duration_s=0.15, warmup=0, deadline_s=5)
    ev = await run_step(ep, _items, closed_loop(2), bounds)
    assert ev.stopped_by == "duration"
    assert 0 < len(ev.exchanges) < 10_000
    assert sorted(x.index for x in ev.exchanges) == list(range(len(ev.exchanges)))
    assert ev.next_index == len(ev.exchanges)


async def test_an_open_loop_sends_what_its_schedule_holds_inside_the_duration() -> None:
    arrival = open_loop(10.0, seed=4)
    bounds = StepBounds(requests=100, duration_s=0.5, warmup=0, deadline_s=5)
    ev = await run_step(FakeEndpoint(), _items, arrival, bounds)
    due = [o for o in send_offsets_s(arrival, 100) if o < 0.5]
    assert len(ev.exchanges) == len(due)
    assert ev.stopped_by == "duration"
    assert all(x.due_ns is not None and x.started_ns >= x.due_ns for x in ev.exchanges)
    assert len(ev.client.schedule_lag_ms) == len(due)


async def test_an_open_loop_holds_back_past_its_in_flight_cap() -> None:
    ep = FakeEndpoint(delay_s=0.01)
    bounds = StepBounds(requests=12, duration_s=60, warmup=0, deadline_s=5, max_in_flight=2)
    ev = await run_step(ep, _items, open_loop(10_000.0), bounds)
    assert len(ev.exchanges) == 12
    assert ep.peak == 2


async def test_a_replay_sends_its_lines_in_order_after_the_warm_up() -> None:
    ep = FakeEndpoint()
    bounds = StepBounds(requests=100, duration_s=60, warmup=1, deadline_s=5)
    ev = await run_step(
        ep, _items, Arrival(kind="replay", time_scale=0.5), bounds, replay_offsets_s=[0, 0.02, 0.04]
    )
    assert ev.planned == 3
    assert sorted(x.index for x in ev.exchanges) == [0, 1, 2]
    assert [b["n"] for b in ep.bodies] == [0, 0, 1, 2]  # warm-up, then lines 0..2


async def test_progress_reports_every_measured_request() -> None:
    seen: list[tuple[int, int]] = []
    bounds = StepBounds(requests=5, duration_s=60, warmup=2, deadline_s=5)
    await run_step(
        FakeEndpoint(), _items, closed_loop(1), bounds, progress=lambda d, p: seen.append((d, p))
    )
    assert seen == [(1, 5), (2, 5), (3, 5), (4, 5), (5, 5)]


@pytest.mark.parametrize(
    "fields",
    [
        {"requests": 0, "duration_s": 1, "warmup": 0, "deadline_s": 1},
        {"requests": 1, "duration_s": 0, "warmup": 0, "deadline_s": 1},
        {"requests": 1, "duration_s": 1, "warmup": -1, "deadline_s": 1},
        {"requests": 1, "duration_s": 1, "warmup": 0, "deadline_s": 1, "max_in_flight": 0},
    ],
    ids=["no-requests", "no-duration", "negative-warmup", "no-in-flight"],
)
def test_unbounded_steps_are_refused(fields: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"bounds|max_in_flight"):
        StepBounds(**fields)  # type: ignore[arg-type]


async def test_a_sweep_never_sends_the_same_synthetic_prompt_twice_and_round_trips() -> None:
    ep = FakeEndpoint(fail_every=4)
    spec = SyntheticWorkload(input_tokens=16, output_tokens=2, seed=5)
    result = await bench(
        ep,
        model="m",
        workload=spec,
        source=synthetic_source(spec, "m"),
        arrivals=[closed_loop(1), closed_loop(3)],
        bounds=BenchBounds(requests=5, duration_s=60, deadline_s=5),
    )
    prompts = [b["messages"][0]["content"] for b in ep.bodies]
    assert len(prompts) == 1 + 5 + 3 + 5  # default warm-up: one per stream
    assert len(set(prompts)) == len(prompts)
    assert [s.warmup for s in result.steps] == [1, 3]
    assert [s.label for s in result.steps] == ["c=1", "c=3"]
    assert result.endpoint == "http://fake:8000/v1"
    # every 4th request fails: bodies 4 and 12 were measured, body 8 was step 2's warm-up
    assert [s.metrics.failed for s in result.steps] == [1, 1]
    assert [s.warmup_failed for s in result.steps] == [0, 1]
    assert result.steps[0].metrics.errors == {"server": result.steps[0].metrics.failed}
    again = BenchResult.model_validate_json(result.model_dump_json())
    assert again == result
    assert again.workload == spec  # the spec a later run repeats


async def test_an_all_error_step_is_a_result_not_an_exception() -> None:
    ep = FakeEndpoint(fail_every=1)
    spec = SyntheticWorkload(input_tokens=8, output_tokens=2)
    result = await bench(
        ep,
        model=None,
        workload=spec,
        source=synthetic_source(spec, None),
        arrivals=[closed_loop(2)],
        bounds=BenchBounds(requests=4, duration_s=60, warmup=0, deadline_s=5),
    )
    step = result.steps[0]
    assert (step.metrics.sent, step.metrics.failed, step.warmup) == (4, 4, 0)
    assert step.metrics.ttft_ms.count == 0
    assert result.succeeded == 0
