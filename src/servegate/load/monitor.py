"""The load generator measures itself: was the client the bottleneck of this step?

While a step runs, `ClientMonitor` records the process's CPU time (all threads) against wall
time, and a ticker task that asks to wake every 10 ms records how late each wake-up came: the
event loop's lag, which is also how late every response stamp can be. Open-loop steps add how
late each request went out against its schedule. `judge_client` turns these measurements into
the `client_bound` flag with its reasons: a measured flag, never a guess from the request rate.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType

from pydantic import BaseModel, ConfigDict

from servegate.stats.distribution import DistributionSummary

__all__ = [
    "CPU_SHARE_LIMIT",
    "DEFINITIONS",
    "LOOP_LAG_P99_LIMIT_MS",
    "SCHEDULE_LAG_P99_LIMIT_MS",
    "TICK_S",
    "ClientEvidence",
    "ClientLoad",
    "ClientMonitor",
    "judge_client",
    "judge_workers",
]

TICK_S = 0.01
CPU_SHARE_LIMIT = 0.8  # of one core (all one event loop can use); past 80 % events queue
LOOP_LAG_P99_LIMIT_MS = 10.0
SCHEDULE_LAG_P99_LIMIT_MS = 10.0

DEFINITIONS = {
    "cpu_share": "client process CPU seconds (all threads) / wall seconds of the measured phase; "
    "1.0 is one core, all an asyncio event loop can use",
    "loop_lag_ms": f"how late a ticker that asks to wake every {TICK_S * 1e3:g} ms wakes: "
    "every response stamp can be this late",
    "schedule_lag_ms": "open loop: request sent − request due by the arrival schedule",
    "load_avg_1m": "the machine's 1-minute load average at the end of the step (other processes "
    "compete for the same cores)",
    "workers": "with --workers N, each process judged on its own; the step is client-bound when "
    "any worker is, cpu_s is their sum and cpu_share and loop lag the busiest worker's",
}


@dataclass(frozen=True, slots=True)
class ClientEvidence:
    """What the client measured about itself during one step."""

    cpu_s: float
    wall_s: float
    loop_lag_ms: tuple[float, ...]
    schedule_lag_ms: tuple[float, ...] = ()
    load_avg_1m: float | None = None
    worker: int | None = None  # --workers: which process measured this (from 1)


class ClientMonitor:
    """`async with ClientMonitor() as monitor:` around the measured phase; then `evidence()`."""

    def __init__(self, tick_s: float = TICK_S) -> None:
        self._tick_s = tick_s
        self._lags: list[float] = []
        self._task: asyncio.Task[None] | None = None
        self._cpu0 = self._cpu1 = 0.0
        self._wall0 = self._wall1 = 0

    async def __aenter__(self) -> ClientMonitor:
        self._cpu0 = time.process_time()
        self._wall0 = self._wall1 = time.perf_counter_ns()
        self._task = asyncio.create_task(self._tick())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._cpu1 = time.process_time()
        self._wall1 = time.perf_counter_ns()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _tick(self) -> None:
        tick_ns = int(self._tick_s * 1e9)
        while True:
            before = time.perf_counter_ns()
            await asyncio.sleep(self._tick_s)
            late_ns = time.perf_counter_ns() - before - tick_ns
            self._lags.append(max(late_ns, 0) / 1e6)

    def evidence(self, schedule_lag_ms: tuple[float, ...] = ()) -> ClientEvidence:
        try:
            load: float | None = os.getloadavg()[0]
        except OSError:
            load = None
        return ClientEvidence(
            cpu_s=self._cpu1 - self._cpu0,
            wall_s=(self._wall1 - self._wall0) / 1e9,
            loop_lag_ms=tuple(self._lags),
            schedule_lag_ms=schedule_lag_ms,
            load_avg_1m=load,
        )


class ClientLoad(BaseModel):
    """The client's own load during a step and whether it, not the server, set the pace."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    definitions: dict[str, str]
    cpu_s: float
    wall_s: float
    cpu_share: float | None
    loop_lag_p50_ms: float | None
    loop_lag_p99_ms: float | None
    loop_lag_max_ms: float | None
    schedule_lag_p99_ms: float | None
    load_avg_1m: float | None
    client_bound: bool
    reasons: tuple[str, ...]
    worker: int | None = None  # --workers: this worker process's own load (from 1)
    workers: tuple[ClientLoad, ...] = ()  # --workers: each process's own, judged on its own


def judge_client(
    evidence: ClientEvidence,
    *,
    cpu_share_limit: float = CPU_SHARE_LIMIT,
    loop_lag_p99_limit_ms: float = LOOP_LAG_P99_LIMIT_MS,
    schedule_lag_p99_limit_ms: float = SCHEDULE_LAG_P99_LIMIT_MS,
) -> ClientLoad:
    """Client-bound when its CPU share, its loop lag p99 or its open-loop send lag p99 reached
    the limit; each reason names the measurement and the limit."""
    share = evidence.cpu_s / evidence.wall_s if evidence.wall_s > 0 else None
    lag = DistributionSummary.from_values(evidence.loop_lag_ms)
    sched = DistributionSummary.from_values(evidence.schedule_lag_ms)
    reasons: list[str] = []
    if share is not None and share >= cpu_share_limit:
        reasons.append(f"client CPU {share:.0%} of one core (limit {cpu_share_limit:.0%})")
    if lag.p99 is not None and lag.p99 >= loop_lag_p99_limit_ms:
        reasons.append(
            f"event-loop lag p99 {lag.p99:.1f} ms (limit {loop_lag_p99_limit_ms:g} ms): "
            "response stamps may be that late"
        )
    if sched.p99 is not None and sched.p99 >= schedule_lag_p99_limit_ms:
        reasons.append(
            f"requests sent late against the arrival schedule, p99 {sched.p99:.1f} ms "
            f"(limit {schedule_lag_p99_limit_ms:g} ms)"
        )
    return ClientLoad(
        definitions=DEFINITIONS,
        cpu_s=evidence.cpu_s,
        wall_s=evidence.wall_s,
        cpu_share=share,
        loop_lag_p50_ms=lag.p50,
        loop_lag_p99_ms=lag.p99,
        loop_lag_max_ms=lag.max,
        schedule_lag_p99_ms=sched.p99,
        load_avg_1m=evidence.load_avg_1m,
        client_bound=bool(reasons),
        reasons=tuple(reasons),
        worker=evidence.worker,
    )


def judge_workers(evidence: Sequence[ClientEvidence]) -> ClientLoad:
    """Several worker processes: each judged on its own (one event loop per process, one core
    each), the step client-bound when any of them was, each reason naming its worker."""
    loads = tuple(judge_client(e) for e in evidence)

    def most(values: Iterable[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return max(known) if known else None

    return ClientLoad(
        definitions=DEFINITIONS,
        cpu_s=sum(c.cpu_s for c in loads),
        wall_s=max((c.wall_s for c in loads), default=0.0),
        cpu_share=most(c.cpu_share for c in loads),
        loop_lag_p50_ms=most(c.loop_lag_p50_ms for c in loads),
        loop_lag_p99_ms=most(c.loop_lag_p99_ms for c in loads),
        loop_lag_max_ms=most(c.loop_lag_max_ms for c in loads),
        schedule_lag_p99_ms=most(c.schedule_lag_p99_ms for c in loads),
        load_avg_1m=most(c.load_avg_1m for c in loads),
        client_bound=any(c.client_bound for c in loads),
        reasons=tuple(f"worker {c.worker}: {r}" for c in loads for r in c.reasons),
        workers=loads,
    )
