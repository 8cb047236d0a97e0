"""Drive one step of load against an Endpoint: warm-up, then the measured phase. I/O only.

The warm-up requests are sent first (as many at once as the step's concurrency allows) and
awaited; none of them is measured. The measured phase then sends until its request count is
reached or its duration has passed, whichever comes first; requests already in flight finish
under their own deadline, so a step lasts at most duration + request deadline. Nothing here
judges: `StepEvidence` is what was seen, and `servegate.load.bench` turns it into numbers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.types import Completion
from servegate.load.arrival import Arrival, send_offsets_s
from servegate.load.monitor import ClientEvidence, ClientMonitor
from servegate.load.server_metrics import INTERVAL_S, Scrape, ServerEvidence, ServerSampler
from servegate.load.workload import WorkItem, WorkSource

__all__ = [
    "Exchange",
    "StepBounds",
    "StepEvidence",
    "StepProgress",
    "StepRunner",
    "StopReason",
    "for_load",
    "run_step",
]

StepProgress = Callable[[int, int], None]  # (requests finished, requests planned)
StopReason = Literal["requests", "duration"]
StepRunner = Callable[..., Awaitable["StepEvidence"]]  # run_step, or a worker pool's run_step


@runtime_checkable
class LoadCapable(Protocol):
    """An endpoint that can give load its own client: no retries, `connections` connections."""

    def under_load(self, connections: int) -> Endpoint: ...


def for_load(endpoint: Endpoint, connections: int) -> Endpoint:
    """`endpoint` as load must send to it (as `servegate bench` does): no retries — a retried
    request's timing would be its last attempt's, and the 429/503 or transport failure it
    retried would vanish — and a pool of `connections` (the concurrency asked), so no request
    queues in the client while the server is measured. Endpoints without their own client
    (fakes, a stored baseline) are used as they are."""
    if isinstance(endpoint, LoadCapable):
        return endpoint.under_load(connections)
    return endpoint


@dataclass(frozen=True, slots=True)
class StepBounds:
    """Every step is bounded by a request count and a duration."""

    requests: int
    duration_s: float
    warmup: int
    deadline_s: float  # per request
    max_in_flight: int = 1024  # open loop: requests past this wait (and are sent late)

    def __post_init__(self) -> None:
        if self.requests < 1 or self.duration_s <= 0 or self.warmup < 0 or self.deadline_s <= 0:
            raise ValueError(f"invalid step bounds: {self}")
        if self.max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")


@dataclass(frozen=True, slots=True)
class Exchange:
    """One request and its result, with the client's own stamps (perf_counter_ns)."""

    index: int  # run-wide: selects the work item
    item: WorkItem
    completion: Completion
    started_ns: int  # the client called the endpoint
    finished_ns: int  # the call returned
    due_ns: int | None = None  # open loop: when the schedule wanted it sent


@dataclass(frozen=True, slots=True)
class StepEvidence:
    arrival: Arrival
    bounds: StepBounds
    warmup: tuple[Exchange, ...]
    exchanges: tuple[Exchange, ...]  # the measured phase, in order of completion
    start_ns: int
    end_ns: int
    planned: int
    stopped_by: StopReason
    peak_in_flight: int
    client: ClientEvidence
    next_index: int  # the first run-wide index the next step should use
    server: ServerEvidence | None = None  # the server's own gauges; None: not asked for
    # --workers: each worker process's own measurements, and the workers that gave no result
    workers: tuple[ClientEvidence, ...] = ()
    failures: tuple[str, ...] = ()


class _Phase:
    """Bookkeeping shared by the requests of one phase."""

    def __init__(self, endpoint: Endpoint, source: WorkSource, deadline_s: float) -> None:
        self.endpoint = endpoint
        self.source = source
        self.deadline_s = deadline_s
        self.done: list[Exchange] = []
        self.in_flight = 0
        self.peak = 0
        self.progress: Callable[[], None] = lambda: None

    async def send(self, index: int, due_ns: int | None = None) -> None:
        item = self.source(index)
        call = self.endpoint.chat if item.api == "chat" else self.endpoint.completion
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        started = time.perf_counter_ns()
        try:
            completion = await call(item.body, deadline_s=self.deadline_s)
        finally:
            self.in_flight -= 1
        self.done.append(Exchange(index, item, completion, started, time.perf_counter_ns(), due_ns))
        self.progress()


class Sender(Protocol):
    """What the arrival loops drive: one request of the step by its index (and its due time)."""

    async def send(self, index: int, due_ns: int | None = None) -> None: ...


async def closed_loop(
    phase: Sender, first: int, count: int, concurrency: int, stop_ns: int
) -> None:
    """`concurrency` streams, each sending the next index when its last answer is in."""
    indices = iter(range(first, first + count))

    async def stream() -> None:
        for index in indices:  # shared: each stream takes the next index
            if time.perf_counter_ns() >= stop_ns:
                return
            await phase.send(index)

    await asyncio.gather(*(stream() for _ in range(min(concurrency, count))))


async def open_loop(
    phase: Sender, first: int, offsets_s: Sequence[float], start_ns: int, stop_ns: int, cap: int
) -> None:
    """Each index sent at its offset from `start_ns`, whatever is in flight (at most `cap`)."""
    slots = asyncio.Semaphore(cap)
    tasks: set[asyncio.Task[None]] = set()

    async def one(index: int, due_ns: int) -> None:
        try:
            await phase.send(index, due_ns)
        finally:
            slots.release()

    try:
        for k, offset in enumerate(offsets_s):
            due_ns = start_ns + int(offset * 1e9)
            if due_ns >= stop_ns:
                break
            wait_ns = due_ns - time.perf_counter_ns()
            if wait_ns > 0:
                await asyncio.sleep(wait_ns / 1e9)
            await slots.acquire()
            task = asyncio.create_task(one(first + k, due_ns))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()


async def run_step(
    endpoint: Endpoint,
    source: WorkSource,
    arrival: Arrival,
    bounds: StepBounds,
    *,
    first_index: int = 0,
    replay_offsets_s: Sequence[float] | None = None,
    progress: StepProgress | None = None,
    server: Scrape | None = None,
    server_interval_s: float = INTERVAL_S,
) -> StepEvidence:
    """Warm up, then measure one step. Warm-up request i is work item first_index + i and
    measured request k the item after them (a replay's measured request k is its line k).
    With `server`, the server's own gauges are scraped during the measured phase."""
    warm = _Phase(endpoint, source, bounds.deadline_s)
    width = arrival.concurrency if arrival.kind == "closed" else bounds.warmup
    far = time.perf_counter_ns() + int(1e18)
    await closed_loop(warm, first_index, bounds.warmup, max(width or 1, 1), far)
    # A replay's measured phase is the file from its first line, each line at its own offset.
    first = 0 if arrival.kind == "replay" else first_index + bounds.warmup

    offsets: tuple[float, ...] = ()
    planned = bounds.requests
    if arrival.kind != "closed":
        offsets = send_offsets_s(arrival, bounds.requests, replay_offsets_s)
        planned = len(offsets)
    phase = _Phase(endpoint, source, bounds.deadline_s)
    if progress is not None:
        report = progress
        phase.progress = lambda: report(len(phase.done), planned)
    sampler = ServerSampler(server, server_interval_s)
    async with sampler, ClientMonitor() as monitor:
        start_ns = time.perf_counter_ns()
        stop_ns = start_ns + int(bounds.duration_s * 1e9)
        if arrival.kind == "closed":
            assert arrival.concurrency is not None
            await closed_loop(phase, first, planned, arrival.concurrency, stop_ns)
        else:
            await open_loop(phase, first, offsets, start_ns, stop_ns, bounds.max_in_flight)
    exchanges = tuple(phase.done)
    sched = tuple((x.started_ns - x.due_ns) / 1e6 for x in exchanges if x.due_ns is not None)
    return StepEvidence(
        arrival=arrival,
        bounds=bounds,
        warmup=tuple(warm.done),
        exchanges=exchanges,
        start_ns=start_ns,
        end_ns=max((x.finished_ns for x in exchanges), default=start_ns),
        planned=planned,
        stopped_by="requests" if len(exchanges) >= planned else "duration",
        peak_in_flight=phase.peak,
        client=monitor.evidence(sched),
        next_index=first + len(exchanges),
        server=sampler.evidence(),
    )
