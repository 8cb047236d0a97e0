"""`--workers N`: the streams of a closed-loop step spread over N processes, results merged.

One Python event loop drives about one core's worth of streams (benchmarks/RESULTS.md); past
that its own queueing shows up as server latency. A `WorkerPool` starts N spawned processes
once; for each step it gives each worker its share of the streams, requests and warm-up, and
the step's work items dealt round-robin (warm-up items, then measured ones), so the workers send
between them exactly the items one process would have sent, none twice. Each
worker runs the ordinary `run_step` on its own event loop, with its own client monitor, and
sends its `StepEvidence` back; the pool merges them as per-request samples. Every stamp is
`perf_counter_ns` (CLOCK_MONOTONIC: one clock for every process on the machine), so exchanges
of different workers are comparable and the step's peak in flight is counted across workers.

A worker that dies or raises is reported in the merged evidence (`failures`), naming the
worker; its requests are missing from the step, never silently replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import multiprocessing
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from servegate.endpoints.protocol import Endpoint
from servegate.load.arrival import Arrival
from servegate.load.driver import Exchange, StepBounds, StepEvidence, StepProgress, run_step
from servegate.load.monitor import ClientEvidence
from servegate.load.server_metrics import INTERVAL_S, Scrape, ServerSampler
from servegate.load.workload import WorkSource

__all__ = ["WorkerError", "WorkerPool", "WorkerSetup", "deal", "merge_evidence", "shares"]

PROGRESS_STEPS = 50  # a worker reports its progress about this many times per step
STOP_S = 10.0  # how long a worker gets to close its connections and exit


class WorkerError(RuntimeError):
    """A worker process could not start; the load was not run."""

    exit_code = 1


@dataclass(frozen=True)
class WorkerSetup:
    """How a worker process builds its endpoint and work source: picklable callables
    (top-level functions or `functools.partial` of them), called in the worker."""

    endpoint: Callable[[], Endpoint]
    source: Callable[[], WorkSource]


def shares(total: int, parts: int) -> list[int]:
    """`total` split into `parts` near-equal counts, larger first: shares(5, 2) == [3, 2]."""
    base, extra = divmod(total, parts)
    return [base + (k < extra) for k in range(parts)]


def deal(first: int, warmup: int, requests: int, workers: int) -> list[tuple[int, ...]]:
    """The step's run-wide item indices per worker: warm-up items first..first+warmup-1, then
    the measured ones, dealt round-robin; worker k's list is in the order it sends them."""
    warm = range(first, first + warmup)
    measured = range(first + warmup, first + warmup + requests)
    return [tuple(warm[k::workers]) + tuple(measured[k::workers]) for k in range(workers)]


def _worker_main(conn: Connection, setup: WorkerSetup) -> None:
    """A worker process: run each step it is sent until it is sent None."""
    with asyncio.Runner() as runner:
        endpoint = setup.endpoint()
        base = setup.source()
        conn.send(("ready",))  # imports done: steps sent from now start without start-up skew
        try:
            while True:
                message = conn.recv()
                if message is None:
                    break
                arrival, bounds, first, indices = message

                def source(local: int, _first: int = first, _indices: Any = indices) -> Any:
                    return base(_indices[local - _first])

                every = max(1, bounds.requests // PROGRESS_STEPS)

                def progress(done: int, planned: int, _every: int = every) -> None:
                    if done % _every == 0 or done == planned:
                        conn.send(("progress", done, planned))

                try:
                    evidence = runner.run(
                        run_step(
                            endpoint, source, arrival, bounds, first_index=first, progress=progress
                        )
                    )
                except Exception as exc:
                    lines = traceback.format_exception_only(exc)
                    conn.send(("error", lines[-1].strip()))
                else:
                    conn.send(("evidence", evidence))
        finally:
            runner.run(endpoint.aclose())


def merge_evidence(
    arrival: Arrival,
    bounds: StepBounds,
    parts: Sequence[tuple[int, int, StepEvidence]],
    failures: Sequence[str],
    *,
    first: int,
    indices: Sequence[Sequence[int]],
    planned: int,
) -> StepEvidence:
    """The workers' evidence of one step as one step's: exchanges by completion time with their
    run-wide indices, the peak in flight counted over every worker's requests, and each worker's
    client measurements kept apart (`workers`) for the client-bound judgement. `parts` are
    (slot in `indices`, worker number from 1, evidence); `indices` are `deal`'s lists."""

    def relabel(xs: tuple[Exchange, ...], slot: int) -> list[Exchange]:
        mine = indices[slot]
        return [dataclasses.replace(x, index=mine[x.index - first]) for x in xs]

    warmup = [x for slot, _, e in parts for x in relabel(e.warmup, slot)]
    exchanges = sorted(
        (x for slot, _, e in parts for x in relabel(e.exchanges, slot)),
        key=lambda x: x.finished_ns,
    )
    start_ns = min((e.start_ns for _, _, e in parts), default=0)
    end_ns = max((e.end_ns for _, _, e in parts), default=start_ns)
    clients = tuple(dataclasses.replace(e.client, worker=number) for _, number, e in parts)
    used = [x.index for x in (*warmup, *exchanges)]
    return StepEvidence(
        arrival=arrival,
        bounds=bounds,
        warmup=tuple(warmup),
        exchanges=tuple(exchanges),
        start_ns=start_ns,
        end_ns=end_ns,
        planned=planned,
        # a worker's own bound; a failed worker's missing requests are in `failures`
        stopped_by="duration"
        if any(e.stopped_by == "duration" for _, _, e in parts)
        else "requests",
        peak_in_flight=_peak(exchanges),
        client=_summed(clients),
        next_index=max(used, default=first - 1) + 1,
        workers=clients,
        failures=tuple(failures),
    )


def _peak(exchanges: Sequence[Exchange]) -> int:
    """Most requests in flight at once, from the shared-clock stamps of every worker."""
    edges = sorted(
        [(x.started_ns, 1) for x in exchanges] + [(x.finished_ns, -1) for x in exchanges]
    )
    peak = now = 0
    for _, step in edges:
        now += step
        peak = max(peak, now)
    return peak


def _summed(clients: Sequence[ClientEvidence]) -> ClientEvidence:
    loads = [c.load_avg_1m for c in clients if c.load_avg_1m is not None]
    return ClientEvidence(
        cpu_s=sum(c.cpu_s for c in clients),
        wall_s=max((c.wall_s for c in clients), default=0.0),
        loop_lag_ms=tuple(lag for c in clients for lag in c.loop_lag_ms),
        schedule_lag_ms=tuple(lag for c in clients for lag in c.schedule_lag_ms),
        load_avg_1m=max(loads) if loads else None,
    )


class WorkerPool:
    """N spawned worker processes; `run_step` has `driver.run_step`'s signature (the endpoint
    and source arguments are the workers' own, built from the setup) and closed loops only."""

    def __init__(self, setup: WorkerSetup, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        context = multiprocessing.get_context("spawn")
        self.size = workers
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        self._threads = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="worker-pipe")
        self._dead: set[int] = set()
        for k in range(workers):
            parent, child = context.Pipe()
            proc = context.Process(
                target=_worker_main, args=(child, setup), name=f"servegate-worker-{k + 1}"
            )
            proc.start()
            child.close()  # the worker's end lives in the worker: its death is EOF here
            self._conns.append(parent)
            self._procs.append(proc)

    @property
    def pids(self) -> tuple[int | None, ...]:
        return tuple(p.pid for p in self._procs)

    async def ready(self) -> None:
        """Wait until every worker has started (imported, built its endpoint and source), so
        the workers of the first step start together; WorkerError names a worker that died."""
        loop = asyncio.get_running_loop()
        await asyncio.gather(
            *(loop.run_in_executor(self._threads, self._started, k) for k in range(self.size))
        )

    def _started(self, k: int) -> None:
        try:
            self._conns[k].recv()
        except (EOFError, OSError):
            self._dead.add(k)
            proc = self._procs[k]
            proc.join(timeout=STOP_S)
            raise WorkerError(
                f"worker {k + 1} of {self.size} (pid {proc.pid}) did not start "
                f"(exit code {proc.exitcode})"
            ) from None

    async def run_step(
        self,
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
        """One closed-loop step over the live workers; the server's gauges, when asked for,
        are scraped by this process for the whole step (warm-up included)."""
        if arrival.kind != "closed" or arrival.concurrency is None:
            raise ValueError("a worker pool runs closed-loop steps only")
        live = [k for k in range(self.size) if k not in self._dead]
        active = live[: min(len(live), arrival.concurrency, bounds.requests)]
        if not active:
            raise RuntimeError("every worker process has failed")
        m = len(active)
        streams = shares(arrival.concurrency, m)
        requests = shares(bounds.requests, m)
        warmups = shares(bounds.warmup, m)
        indices = deal(first_index, bounds.warmup, bounds.requests, m)
        for slot, k in enumerate(active):
            share = StepBounds(
                requests=requests[slot],
                duration_s=bounds.duration_s,
                warmup=warmups[slot],
                deadline_s=bounds.deadline_s,
                max_in_flight=bounds.max_in_flight,
            )
            mine = arrival.model_copy(update={"concurrency": streams[slot]})
            self._conns[k].send((mine, share, first_index, indices[slot]))
        done = dict.fromkeys(range(m), 0)
        loop = asyncio.get_running_loop()

        def report(slot: int, count: int) -> None:
            done[slot] = count
            if progress is not None:
                progress(sum(done.values()), bounds.requests)

        sampler = ServerSampler(server, server_interval_s)
        async with sampler:
            outcomes = await asyncio.gather(
                *(
                    loop.run_in_executor(self._threads, self._receive, slot, k, report, loop)
                    for slot, k in enumerate(active)
                )
            )
        parts = [
            (slot, active[slot] + 1, e)
            for slot, e in enumerate(outcomes)
            if isinstance(e, StepEvidence)
        ]
        failures = [e for e in outcomes if isinstance(e, str)]
        merged = merge_evidence(
            arrival,
            bounds,
            parts,
            failures,
            first=first_index,
            indices=indices,
            planned=bounds.requests,
        )
        return dataclasses.replace(merged, server=sampler.evidence())

    def _receive(
        self,
        slot: int,
        k: int,
        report: Callable[[int, int], None],
        loop: asyncio.AbstractEventLoop,
    ) -> StepEvidence | str:
        """In a thread: the worker's progress until its evidence, or why there is none."""
        conn = self._conns[k]
        try:
            while True:
                message = conn.recv()
                if message[0] == "progress":
                    loop.call_soon_threadsafe(report, slot, message[1])
                elif message[0] == "evidence":
                    evidence: StepEvidence = message[1]
                    return evidence
                else:
                    self._dead.add(k)
                    return f"worker {k + 1} of {self.size} failed: {message[1]}"
        except (EOFError, OSError):
            self._dead.add(k)
            proc = self._procs[k]
            proc.join(timeout=STOP_S)
            return (
                f"worker {k + 1} of {self.size} (pid {proc.pid}) ended without a result "
                f"(exit code {proc.exitcode}); its requests are not in this step"
            )

    async def aclose(self) -> None:
        """Ask every worker to stop, wait for it, and stop the ones that do not."""
        await asyncio.get_running_loop().run_in_executor(self._threads, self._stop)
        self._threads.shutdown(wait=False)

    def _stop(self) -> None:
        for conn in self._conns:  # a worker whose step raised is still alive and waiting
            with contextlib.suppress(OSError):
                conn.send(None)
        for proc in self._procs:
            proc.join(timeout=STOP_S)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=STOP_S)
        for conn in self._conns:
            conn.close()
