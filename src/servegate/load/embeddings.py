"""`servegate bench --api embeddings`: latency and throughput of `/v1/embeddings` under load.

The same sweep as the generation bench (closed-loop concurrency steps, open-loop rate steps, each
with its warm-up and its request and duration bounds; request indices continue across steps, so
no synthetic input is sent twice), but one answer per request and no stream: there is no TTFT or
inter-token latency, only the latency of the whole answer. Every answer is validated by the
client (one vector per input, finite, non-zero norm); failures are counted by category.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from servegate import __version__
from servegate.endpoints.protocol import Endpoint
from servegate.endpoints.types import Embeddings
from servegate.endpoints.urls import display_url
from servegate.load.arrival import Arrival, send_offsets_s
from servegate.load.bench import BenchProgress, step_bounds, timestamp
from servegate.load.driver import StepBounds, closed_loop, open_loop
from servegate.load.metrics import Distribution, Scalar
from servegate.load.monitor import ClientLoad, ClientMonitor, judge_client
from servegate.load.result import BenchBounds
from servegate.load.synthetic import synthetic_prompt
from servegate.stats.distribution import DistributionSummary

__all__ = [
    "DEFINITIONS",
    "EmbeddingsBenchResult",
    "EmbeddingsStepMetrics",
    "EmbeddingsWorkload",
    "bench_embeddings",
    "embeddings_request",
]

SCHEMA_VERSION = 1

DEFINITIONS: dict[str, str] = {
    "latency_ms": "answer complete − request sent (no streaming: the whole answer at once; the "
    "embeddings counterpart of E2EL)",
    "prompt_tokens": "usage.prompt_tokens of one request as the server counted it (all its inputs)",
    "duration_s": "first measured request due or sent → last measured request finished "
    "(warm-up excluded)",
    "requests_per_s": "successful requests / duration_s",
    "inputs_per_s": "inputs embedded by successful requests (vectors returned) / duration_s",
    "prompt_tokens_per_s": "usage.prompt_tokens of successful requests / duration_s (None when "
    "the server reported no usage)",
    "error_rate": "failed requests / requests sent",
    "timeout_rate": "requests that passed the request deadline or stalled / requests sent",
    "peak_concurrency": "most requests in flight at once during the measured phase",
    "dimensions": "successful answers by vector dimension (more than one key: the server "
    "answered with different dimensions)",
}


class EmbeddingsWorkload(BaseModel):
    """Random-word inputs of about `input_tokens` tokens, `inputs_per_request` per request."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["embeddings"] = "embeddings"
    input_tokens: int = Field(default=64, ge=1)
    inputs_per_request: int = Field(default=1, ge=1)
    seed: int = 0


def embeddings_request(
    spec: EmbeddingsWorkload, model: str | None, index: int
) -> dict[str, object]:
    """Request `index` of a run: always the same inputs for the same spec and index."""
    first = index * spec.inputs_per_request
    texts = [
        synthetic_prompt(spec.seed, first + k, spec.input_tokens)
        for k in range(spec.inputs_per_request)
    ]
    body: dict[str, object] = {"input": texts}
    if model is not None:
        body["model"] = model
    return body


def _distribution(name: str, values: Iterable[float]) -> Distribution:
    s = DistributionSummary.from_values(values)
    return Distribution(definition=DEFINITIONS[name], count=s.count, mean=s.mean, p50=s.p50,
                        p90=s.p90, p95=s.p95, p99=s.p99, min=s.min, max=s.max)  # fmt: skip


def _scalar(name: str, value: float | None) -> Scalar:
    return Scalar(definition=DEFINITIONS[name], value=value)


class EmbeddingsStepMetrics(BaseModel):
    """The numbers of one measured step (warm-up excluded)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sent: int
    succeeded: int
    failed: int
    errors: dict[str, int]  # failures by category
    duration_s: Scalar
    requests_per_s: Scalar
    inputs_per_s: Scalar
    prompt_tokens_per_s: Scalar
    error_rate: Scalar
    timeout_rate: Scalar
    peak_concurrency: Scalar
    latency_ms: Distribution
    prompt_tokens: Distribution
    dimensions: dict[str, int]
    dimensions_definition: str = DEFINITIONS["dimensions"]


class EmbeddingsStepResult(BaseModel):
    """One step of the sweep (one concurrency or rate), warm-up excluded."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str
    arrival: Arrival
    warmup: int
    warmup_failed: int
    planned: int
    stopped_by: Literal["requests", "duration"]
    metrics: EmbeddingsStepMetrics
    client: ClientLoad


class EmbeddingsBenchResult(BaseModel):
    """What `servegate bench --api embeddings --json` writes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = SCHEMA_VERSION
    kind: Literal["servegate.bench.embeddings"] = "servegate.bench.embeddings"
    servegate_version: str
    endpoint: str
    model: str | None
    started_at: str
    finished_at: str
    workload: EmbeddingsWorkload
    bounds: BenchBounds
    steps: tuple[EmbeddingsStepResult, ...]

    @property
    def succeeded(self) -> int:
        return sum(step.metrics.succeeded for step in self.steps)


def _latency_ms(result: Embeddings) -> float | None:
    done = result.timing.done_ns
    return None if done is None else (done - result.timing.sent_ns) / 1e6


def summarise(
    results: Sequence[Embeddings], *, duration_s: float, peak_concurrency: int
) -> EmbeddingsStepMetrics:
    """One step's numbers from its answers (pure); rates are per second of `duration_s`."""
    good = [r for r in results if r.ok]
    failed = [r for r in results if r.error is not None]
    sent = len(results)
    usage = [n for r in good if r.usage is not None and (n := r.usage.prompt_tokens) is not None]
    timeouts = sum(r.error.hung for r in failed if r.error is not None)

    def rate(count: float) -> float | None:
        return count / duration_s if duration_s > 0 else None

    return EmbeddingsStepMetrics(
        sent=sent,
        succeeded=len(good),
        failed=len(failed),
        errors=dict(Counter(str(r.error.category) for r in failed if r.error is not None)),
        duration_s=_scalar("duration_s", duration_s),
        requests_per_s=_scalar("requests_per_s", rate(len(good))),
        inputs_per_s=_scalar("inputs_per_s", rate(sum(len(r.vectors) for r in good))),
        prompt_tokens_per_s=_scalar(
            "prompt_tokens_per_s", rate(sum(usage)) if usage and len(usage) == len(good) else None
        ),
        error_rate=_scalar("error_rate", len(failed) / sent if sent else None),
        timeout_rate=_scalar("timeout_rate", timeouts / sent if sent else None),
        peak_concurrency=_scalar("peak_concurrency", float(peak_concurrency)),
        latency_ms=_distribution(
            "latency_ms", (v for r in good if (v := _latency_ms(r)) is not None)
        ),
        prompt_tokens=_distribution("prompt_tokens", (float(v) for v in usage)),
        dimensions=dict(Counter(str(len(r.vectors[0])) for r in good if r.vectors)),
    )


@dataclass
class _Phase:
    endpoint: Endpoint
    spec: EmbeddingsWorkload
    model: str | None
    deadline_s: float
    progress: Callable[[int], None] = lambda done: None

    def __post_init__(self) -> None:
        self.done: list[tuple[int, Embeddings]] = []  # (finished_ns, answer), completion order
        self.in_flight = self.peak = 0
        self.schedule_lag_ms: list[float] = []

    async def send(self, index: int, due_ns: int | None = None) -> None:
        body = embeddings_request(self.spec, self.model, index)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        if due_ns is not None:
            self.schedule_lag_ms.append((time.perf_counter_ns() - due_ns) / 1e6)
        try:
            result = await self.endpoint.embeddings(body, deadline_s=self.deadline_s)
        finally:
            self.in_flight -= 1
        self.done.append((time.perf_counter_ns(), result))
        self.progress(len(self.done))


async def _step(
    endpoint: Endpoint,
    spec: EmbeddingsWorkload,
    model: str | None,
    arrival: Arrival,
    bounds: StepBounds,
    first_index: int,
    progress: Callable[[int, int], None],
) -> tuple[EmbeddingsStepResult, int]:
    if arrival.kind not in ("closed", "poisson", "gamma", "ramp"):
        raise ValueError(f"embeddings bench has no {arrival.kind} arrivals")
    warm = _Phase(endpoint, spec, model, bounds.deadline_s)
    width = arrival.concurrency if arrival.kind == "closed" else bounds.warmup
    far = time.perf_counter_ns() + int(1e18)
    await closed_loop(warm, first_index, bounds.warmup, max(width or 1, 1), far)
    first = first_index + bounds.warmup
    offsets: tuple[float, ...] = ()
    planned = bounds.requests
    if arrival.kind != "closed":
        offsets = send_offsets_s(arrival, bounds.requests)
        planned = len(offsets)
    phase = _Phase(endpoint, spec, model, bounds.deadline_s, lambda done: progress(done, planned))
    async with ClientMonitor() as monitor:
        start_ns = time.perf_counter_ns()
        stop_ns = start_ns + int(bounds.duration_s * 1e9)
        if arrival.kind == "closed":
            assert arrival.concurrency is not None
            await closed_loop(phase, first, planned, arrival.concurrency, stop_ns)
        else:
            await open_loop(phase, first, offsets, start_ns, stop_ns, bounds.max_in_flight)
    end_ns = max((finished for finished, _ in phase.done), default=start_ns)
    results = [r for _, r in phase.done]
    step = EmbeddingsStepResult(
        label=arrival.label,
        arrival=arrival,
        warmup=len(warm.done),
        warmup_failed=sum(not r.ok for _, r in warm.done),
        planned=planned,
        stopped_by="requests" if len(results) >= planned else "duration",
        metrics=summarise(
            results, duration_s=(end_ns - start_ns) / 1e9, peak_concurrency=phase.peak
        ),
        client=judge_client(monitor.evidence(tuple(phase.schedule_lag_ms))),
    )
    return step, first + len(results)


async def bench_embeddings(
    endpoint: Endpoint,
    *,
    model: str | None,
    workload: EmbeddingsWorkload,
    arrivals: Sequence[Arrival],
    bounds: BenchBounds,
    progress: BenchProgress | None = None,
) -> EmbeddingsBenchResult:
    """Run every step in order and return the result (steps with errors are results too)."""
    if not arrivals:
        raise ValueError("a sweep needs at least one step")
    started = timestamp()
    steps: list[EmbeddingsStepResult] = []
    index = 0
    for arrival in arrivals:
        label = arrival.label

        def report(done: int, planned: int, _label: str = label) -> None:
            if progress is not None:
                progress(_label, done, planned)

        step, index = await _step(
            endpoint, workload, model, arrival, step_bounds(bounds, arrival), index, report
        )
        steps.append(step)
    return EmbeddingsBenchResult(
        servegate_version=__version__,
        endpoint=display_url(endpoint.base_url),
        model=model,
        started_at=started,
        finished_at=timestamp(),
        workload=workload,
        bounds=bounds,
        steps=tuple(steps),
    )
