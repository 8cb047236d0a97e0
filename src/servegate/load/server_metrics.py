"""The server's own view of a load phase: gauges scraped from its Prometheus `/metrics` endpoint.

Evidence beside the client's numbers, never judged here: how full the KV cache was, how many
requests the server ran at once and how many it kept waiting. `ServerSampler` scrapes once right
before a step's measured phase starts (awaited, so no request of the load waits behind it), then
every `interval_s` while it runs; a server without the endpoint, or whose endpoint has none of the
known gauges, is *not measured*, with the reason — never an error and never a zero. A failed
first scrape stops the sampling of that step, so a server that has no `/metrics` gets one request
per step, not one per second.

Names (`GAUGES`), newest first where a server renamed one: vLLM `vllm:kv_cache_usage_perc`
(formerly `vllm:gpu_cache_usage_perc`; a fraction, 1 = full, despite the name),
`vllm:num_requests_running`, `vllm:num_requests_waiting`; SGLang `sglang:token_usage`,
`sglang:num_running_reqs`, `sglang:num_queue_reqs`; TGI `tgi_batch_current_size`,
`tgi_queue_size`; llama.cpp's own server (with `--metrics`) `llamacpp:kv_cache_usage_ratio`,
`llamacpp:requests_processing`, `llamacpp:requests_deferred`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType

from pydantic import BaseModel, ConfigDict

from servegate.endpoints.exposition import Exposition, parse_exposition
from servegate.endpoints.protocol import Endpoint
from servegate.stats.distribution import DistributionSummary

__all__ = [
    "GAUGES",
    "INTERVAL_S",
    "METRICS_PATH",
    "Gauge",
    "Scrape",
    "ScrapeError",
    "ServerEvidence",
    "ServerGauge",
    "ServerMetrics",
    "ServerSampler",
    "endpoint_scrape",
    "read_gauges",
    "summarise_server",
]

METRICS_PATH = "../metrics"  # relative to the API base URL: http://host:port/v1 -> /metrics
INTERVAL_S = 1.0
SCRAPE_DEADLINE_S = 2.0


@dataclass(frozen=True, slots=True)
class Gauge:
    """One server-side quantity: its definition and the names servers give it."""

    key: str
    definition: str
    sources: tuple[str, ...]  # first present wins
    combine: str  # over several series of one name (several models, ranks or engines)


GAUGES = (
    Gauge(
        "kv_cache_usage",
        "fraction of the server's KV cache in use (1 = full), the fullest series",
        (
            "vllm:kv_cache_usage_perc",
            "vllm:gpu_cache_usage_perc",
            "sglang:token_usage",
            "llamacpp:kv_cache_usage_ratio",
        ),
        "max",
    ),
    Gauge(
        "requests_running",
        "requests the server was running (in its batch), summed over series",
        (
            "vllm:num_requests_running",
            "sglang:num_running_reqs",
            "tgi_batch_current_size",
            "llamacpp:requests_processing",
        ),
        "sum",
    ),
    Gauge(
        "requests_waiting",
        "requests the server kept waiting in its queue, summed over series",
        (
            "vllm:num_requests_waiting",
            "sglang:num_queue_reqs",
            "tgi_queue_size",
            "llamacpp:requests_deferred",
        ),
        "sum",
    ),
)


class ScrapeError(Exception):
    """A scrape that gave no samples; the message says why in one line."""


Scrape = Callable[[], Awaitable[Exposition]]


def endpoint_scrape(
    endpoint: Endpoint, path: str = METRICS_PATH, deadline_s: float = SCRAPE_DEADLINE_S
) -> Scrape:
    """A scrape of `path` through the endpoint's own `raw` call (no retries)."""

    async def scrape() -> Exposition:
        r = await endpoint.raw("GET", path, deadline_s=deadline_s)
        where = f"GET {path.removeprefix('..')}"
        if r.error is not None:
            raise ScrapeError(f"{where}: {r.error.category}: {r.error.message[:120]}")
        if not r.ok:
            raise ScrapeError(f"{where} answered HTTP {r.status}")
        exposition = parse_exposition(r.body.decode("utf-8", "replace"))
        if not exposition.samples:
            raise ScrapeError(f"{where} answered no Prometheus samples")
        return exposition

    return scrape


def read_gauges(exposition: Exposition) -> dict[str, tuple[str, float]]:
    """The known gauges present in one scrape: key -> (the server's metric name, value)."""
    out: dict[str, tuple[str, float]] = {}
    for gauge in GAUGES:
        for source in gauge.sources:
            values = exposition.values(source)
            if values:
                out[gauge.key] = (source, max(values) if gauge.combine == "max" else sum(values))
                break
    return out


@dataclass(frozen=True, slots=True)
class ServerEvidence:
    """What the scrapes of one phase saw: the gauges of each scrape that answered, in order."""

    readings: tuple[dict[str, tuple[str, float]], ...]
    scrapes: int  # attempted
    failures: tuple[str, ...]  # one line per failed scrape
    interval_s: float


class ServerSampler:
    """`async with ServerSampler(scrape) as sampler:` around a measured phase; then `evidence()`.

    With `scrape` None nothing is sent and `evidence()` is None (not asked for)."""

    def __init__(self, scrape: Scrape | None, interval_s: float = INTERVAL_S) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self._scrape = scrape
        self._interval_s = interval_s
        self._readings: list[dict[str, tuple[str, float]]] = []
        self._failures: list[str] = []
        self._scrapes = 0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ServerSampler:
        # The first scrape is awaited before the phase starts: it opens the connection and finds
        # out whether there is anything to scrape, so no request of the load waits behind it.
        if self._scrape is not None and await self._once(self._scrape):
            self._task = asyncio.create_task(self._run(self._scrape))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _once(self, scrape: Scrape) -> bool:
        """One scrape; False when it failed."""
        self._scrapes += 1
        try:
            self._readings.append(read_gauges(await scrape()))
        except ScrapeError as exc:
            self._failures.append(str(exc))
            return False
        return True

    async def _run(self, scrape: Scrape) -> None:
        next_at = time.perf_counter() + self._interval_s  # a grid: a slow scrape shifts nothing
        while True:
            await asyncio.sleep(max(next_at - time.perf_counter(), 0.0))
            next_at += self._interval_s
            await self._once(scrape)

    def evidence(self) -> ServerEvidence | None:
        if self._scrape is None:
            return None
        return ServerEvidence(
            readings=tuple(self._readings),
            scrapes=self._scrapes,
            failures=tuple(self._failures),
            interval_s=self._interval_s,
        )


class ServerGauge(BaseModel):
    """One gauge over a phase: its scraped values summarised."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    source: str  # the server's own metric name
    definition: str
    samples: int
    mean: float
    max: float


class ServerMetrics(BaseModel):
    """The server's gauges during a load phase, or why they were not measured."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    measured: bool
    reason: str  # why not measured; empty when measured
    interval_s: float
    scrapes: int
    failed_scrapes: int
    gauges: tuple[ServerGauge, ...]

    def describe(self) -> str:
        """One line: each gauge's mean and max, or why nothing was measured."""
        if not self.measured:
            return f"not measured: {self.reason}"
        return "; ".join(
            f"{g.key} mean {g.mean:.3g}, max {g.max:.3g} ({g.source}, "
            f"{g.samples} scrape{'s' if g.samples != 1 else ''})"
            for g in self.gauges
        )


def summarise_server(evidence: Sequence[ServerEvidence]) -> ServerMetrics:
    """Every reading of one or more phases (e.g. one side's load blocks) summarised per gauge."""
    readings = [r for e in evidence for r in e.readings]
    failures = [f for e in evidence for f in e.failures]
    interval = evidence[0].interval_s if evidence else INTERVAL_S
    scrapes = sum(e.scrapes for e in evidence)
    gauges = []
    for gauge in GAUGES:
        seen = [r[gauge.key] for r in readings if gauge.key in r]
        if seen:
            summary = DistributionSummary.from_values(v for _, v in seen)
            assert summary.mean is not None
            assert summary.max is not None
            gauges.append(
                ServerGauge(
                    key=gauge.key,
                    source=seen[-1][0],
                    definition=gauge.definition,
                    samples=len(seen),
                    mean=summary.mean,
                    max=summary.max,
                )
            )
    if gauges:
        reason = ""
    elif not scrapes:
        reason = "the phase ended before the first scrape"
    elif not readings:
        reason = failures[0] if failures else "no scrape answered"
    else:
        reason = (
            "/metrics has none of the known gauges ("
            + ", ".join(s for g in GAUGES for s in g.sources[:1])
            + ", and their SGLang, TGI and llama.cpp names)"
        )
    return ServerMetrics(
        measured=bool(gauges),
        reason=reason,
        interval_s=interval,
        scrapes=scrapes,
        failed_scrapes=len(failures),
        gauges=tuple(gauges),
    )
