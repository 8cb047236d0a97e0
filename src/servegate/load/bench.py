"""A load sweep against one endpoint: `collect` one step at a time, `evaluate` each into numbers.

Steps run one after the other (one per concurrency, rate, or the replay), each with its own
warm-up; request indices continue across steps, so no synthetic prompt is sent twice in a run
and a later run with the same spec sends exactly the same requests in the same order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from servegate import __version__
from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.urls import display_url
from servegate.load.arrival import Arrival
from servegate.load.correctness import check_responses
from servegate.load.driver import StepBounds, StepEvidence, StepRunner, run_step
from servegate.load.lengths import check_lengths
from servegate.load.metrics import measure, summarise
from servegate.load.monitor import judge_client, judge_workers
from servegate.load.result import BenchBounds, BenchResult, StepResult
from servegate.load.server_metrics import INTERVAL_S, Scrape, summarise_server
from servegate.load.slo import SLO
from servegate.load.sweep import ATTAINMENT, sweep_limit
from servegate.load.workload import Workload, WorkSource

__all__ = ["BenchProgress", "bench", "evaluate_step", "step_bounds"]

BenchProgress = Callable[[str, int, int], None]  # (step label, finished, planned)


def step_bounds(bounds: BenchBounds, arrival: Arrival) -> StepBounds:
    """The bounds of one step; the default warm-up is one request per stream (closed loop) or a
    single request (open loop and replay)."""
    warmup = bounds.warmup
    if warmup is None:
        warmup = (arrival.concurrency or 1) if arrival.kind == "closed" else 1
    return StepBounds(
        requests=bounds.requests,
        duration_s=bounds.duration_s,
        warmup=warmup,
        deadline_s=bounds.deadline_s,
        max_in_flight=bounds.max_in_flight,
    )


def evaluate_step(evidence: StepEvidence, slo: SLO | None) -> StepResult:
    """The numbers of one step, from what was seen (pure)."""
    exchanges = evidence.exchanges
    measures = [measure(x.completion) for x in exchanges]
    duration_s = (evidence.end_ns - evidence.start_ns) / 1e9
    return StepResult(
        label=evidence.arrival.label,
        arrival=evidence.arrival,
        warmup=len(evidence.warmup),
        warmup_failed=sum(not x.completion.ok for x in evidence.warmup),
        planned=evidence.planned,
        stopped_by=evidence.stopped_by,
        metrics=summarise(
            measures, duration_s=duration_s, peak_concurrency=evidence.peak_in_flight, slo=slo
        ),
        correctness=check_responses([(x.item, x.completion) for x in exchanges]),
        lengths=check_lengths([(x.item, m) for x, m in zip(exchanges, measures, strict=True)]),
        client=judge_workers(evidence.workers)
        if evidence.workers
        else judge_client(evidence.client),
        server=summarise_server([evidence.server]) if evidence.server is not None else None,
        worker_failures=evidence.failures,
    )


def timestamp() -> str:
    """Now, UTC, ISO 8601 to the second: when a bench step started or finished."""
    return datetime.now(UTC).isoformat(timespec="seconds")


async def bench(
    endpoint: Endpoint,
    *,
    model: str | None,
    workload: Workload,
    source: WorkSource,
    arrivals: Sequence[Arrival],
    bounds: BenchBounds,
    slo: SLO | None = None,
    replay_offsets_s: Sequence[float] | None = None,
    progress: BenchProgress | None = None,
    server: Scrape | None = None,
    server_interval_s: float = INTERVAL_S,
    slo_attainment: float = ATTAINMENT,
    step_runner: StepRunner = run_step,
    workers: int = 1,
) -> BenchResult:
    """Run every step in order and return the result (steps with errors are results too).
    `step_runner` is `run_step` or a `WorkerPool`'s (`workers` processes); a step in which a
    worker failed is the last one run."""
    if not arrivals:
        raise ValueError("a sweep needs at least one step")
    started = timestamp()
    steps: list[StepResult] = []
    index = 0
    for arrival in arrivals:
        label = arrival.label

        def report(done: int, planned: int, _label: str = label) -> None:
            if progress is not None:
                progress(_label, done, planned)

        evidence = await step_runner(
            endpoint,
            source,
            arrival,
            step_bounds(bounds, arrival),
            first_index=index,
            replay_offsets_s=replay_offsets_s,
            progress=report,
            server=server,
            server_interval_s=server_interval_s,
        )
        index = evidence.next_index
        steps.append(evaluate_step(evidence, slo))
        if evidence.failures:
            break  # the load asked for can no longer be delivered
    return BenchResult(
        servegate_version=__version__,
        endpoint=display_url(endpoint.base_url),
        model=model,
        started_at=started,
        finished_at=timestamp(),
        workload=workload,
        slo=slo,
        bounds=bounds,
        steps=tuple(steps),
        max_under_slo=sweep_limit(steps, slo_attainment) if slo is not None else None,
        workers=workers,
    )
