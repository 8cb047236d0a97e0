"""`servegate proxy` as an ASGI app: Starlette routes its own two paths (/servegate/metrics,
/servegate/healthz) and hands every other request to the forwarder.

Shadow mode: every request goes to the primary; a sampled share of the mirrorable OpenAI paths
is also queued for the candidate, and the pair is compared and recorded when both are done.
Answers are measured and pairs compared on the judge's thread, off the event loop.
Canary mode: a CanaryController picks the side that serves each mirrorable request; the user
gets that side's answer and the controller gets one RequestObservation per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import random
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from servegate.canary.flagger import flagger_routes
from servegate.canary.protocol import CanaryController, RequestObservation, Side
from servegate.config.policy import SamplingPolicy
from servegate.endpoints.types import Completion
from servegate.proxy.admin import AdminAccess
from servegate.proxy.comparison import compare_pair
from servegate.proxy.content import request_metrics
from servegate.proxy.deadlines import CandidateDeadlines
from servegate.proxy.exchange import MIRRORED_PATHS, Exchange, completion_of
from servegate.proxy.exposition import CONTENT_TYPE, ProxyMetrics
from servegate.proxy.forwarding import (
    BodyTimeoutError,
    BodyTooLargeError,
    ClientGoneError,
    Receive,
    Scope,
    Send,
    candidate_headers,
    read_body,
    relay,
    send_error,
    upstream_headers,
)
from servegate.proxy.judging import PairJudge
from servegate.proxy.limits import ByteBudget, path_escape
from servegate.proxy.recording import RECORD_CHARS, Record, RecordSink, request_value
from servegate.proxy.sampled import SampledWindow
from servegate.proxy.settings import ProxySettings, Upstream
from servegate.store.proxy_records import ProxyRecorder

METRICS_PATH = "/servegate/metrics"
HEALTH_PATH = "/servegate/healthz"
SAMPLED_PATH = "/servegate/sampled"
FLAGGER_PREFIX = "/servegate/flagger"
CANARY_STOP_S = 5.0  # how long the controller gets to stop on its own at shutdown
# Answers and pairs waiting for the judge's thread; beyond it one is measured or compared on the
# event loop at once. Small: each holds its answers; the judge keeps up unless CPU is short.
JUDGE_BACKLOG = 16


@dataclass
class MirrorJob:
    """A sampled request waiting for the candidate; `primary` resolves with the user's answer."""

    path: str
    body: bytes  # kept as bytes only (a queued job holds one copy of the request)
    headers: tuple[tuple[str, str], ...]
    candidate_headers: dict[str, str]
    primary: asyncio.Future[Exchange] = field(repr=False)
    primary_completion: Completion | None = None  # the user's answer as `_served` read it
    kept: int = 0  # the primary's kept answer bytes, held in the queues' byte budget


class Proxy:
    """The proxy's state: one client session, the mirror queue and workers, metrics, records."""

    def __init__(
        self,
        settings: ProxySettings,
        *,
        controller: CanaryController | None = None,
        recorder: ProxyRecorder | None = None,
        capture: Path | None = None,
        admin: AdminAccess | None = None,
        sampling: SamplingPolicy | None = None,
    ) -> None:
        if settings.mode == "canary" and controller is None:
            raise ValueError("canary mode needs a CanaryController")
        self.settings = settings
        self.controller = controller
        self.admin = admin or AdminAccess()  # default: nobody may change state
        self._recorder = recorder
        self._capture = capture
        self._rng = random.Random(settings.seed)
        self._queue: asyncio.Queue[MirrorJob] = asyncio.Queue(maxsize=settings.queue_size)
        self.metrics = ProxyMetrics(self._queue.qsize, settings.queue_size)
        self._session: aiohttp.ClientSession | None = None
        # What the mirror and record queues hold together, in bytes (a full budget drops).
        self.queued = ByteBudget(settings.max_queued_bytes)
        # What requests in flight hold: their bodies and the answer bytes kept to measure.
        self.buffered = ByteBudget(settings.max_buffered_bytes)
        self.metrics.buffered.set_function(lambda: float(self.buffered.held))
        self._reading = 0  # request bodies being buffered now
        self._admitted = 0  # requests from admission (body read) to their last byte
        self._tasks: list[asyncio.Task[None]] = []
        self._stop = asyncio.Event()
        self._sink: RecordSink | None = None
        self._judge: PairJudge | None = None
        self._pairs_lock = threading.Lock()  # pairs are counted on the judge's thread too
        self.in_flight = 0
        self._mirrors_taken = 0  # jobs taken from the queue by a worker
        self._pairs_judged = 0  # on the judge's thread, under the lock
        self._measures_queued = 0  # user answers handed to the judge (shadow mode)
        self._measured = 0  # on the judge's thread, under the lock
        self.dropped = 0
        self.pairs = 0
        # Sampled pairs prove nothing one by one: the latest are judged as distributions.
        self.sampled = SampledWindow(sampling or SamplingPolicy())
        self._primary_timeout = aiohttp.ClientTimeout(
            total=settings.primary_timeout_s, sock_connect=settings.primary_connect_timeout_s
        )
        self._candidate_timeout = aiohttp.ClientTimeout(total=settings.candidate_timeout_s)
        self.deadlines = CandidateDeadlines(settings.candidate_deadlines)

    # lifecycle ---------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        """Open the client session, start the mirror workers and the canary; undo on exit."""
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        self._session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,  # bytes pass through as the upstream encoded them
            skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
            trust_env=False,  # no proxy from the environment: upstreams come from settings only
        )
        self._sink = RecordSink(
            self._recorder,
            self._capture,
            size=self.settings.record_queue_size,
            budget=self.queued,
            bodies=self.settings.store_bodies,
            retention_s=self.settings.retention_days * 86_400,
            on_drop=self.metrics.record_drops.inc,
        )
        self._judge = PairJudge(size=JUDGE_BACKLOG)
        for _ in range(self.settings.mirror_workers if self.settings.mode == "shadow" else 0):
            self._tasks.append(asyncio.create_task(self._mirror_worker()))
        canary = None
        if self.controller is not None:
            canary = asyncio.create_task(self.controller.run(self._stop))
        try:
            yield
        finally:
            self._stop.set()
            for task in self._tasks:
                task.cancel()
            if canary is not None:  # it may record its last state; a stuck one is cancelled
                _, pending = await asyncio.wait({canary}, timeout=CANARY_STOP_S)
                for task in pending:
                    task.cancel()
                self._tasks.append(canary)
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self._session.close()
            await asyncio.to_thread(self._judge.close)  # its last pairs go to the sink
            await asyncio.to_thread(self._sink.close)

    def app(self) -> Starlette:
        """The ASGI application."""
        snapshot = self.controller.snapshot if self.controller is not None else dict
        return Starlette(
            routes=[
                Route(METRICS_PATH, self._metrics_endpoint, methods=["GET"]),
                Route(HEALTH_PATH, self._health_endpoint, methods=["GET"]),
                Route(SAMPLED_PATH, self._sampled_endpoint, methods=["GET"]),
                # Flagger's webhooks, answered from the canary's snapshot (a shadow proxy has
                # none: every hook answers "no canary judgement here", never a go).
                *flagger_routes(
                    snapshot,
                    prefix=FLAGGER_PREFIX,
                    finish=None if self.controller is None else self.controller.finish,
                    admit=self.admin.refusal,
                ),
                Mount("", app=self.forward),
            ],
            lifespan=self.lifespan,
        )

    # own endpoints -----------------------------------------------------------------------------

    async def _metrics_endpoint(self, _request: Request) -> Response:
        if self.controller is not None:
            self.metrics.canary(self.controller.snapshot())
        return Response(self.metrics.exposition(), media_type=CONTENT_TYPE)

    async def _health_endpoint(self, _request: Request) -> Response:
        health = self.health()
        return JSONResponse(health, 200 if health["status"] == "ok" else 503)

    async def _sampled_endpoint(self, _request: Request) -> Response:
        # The checks take milliseconds per thousand pairs: off the event loop all the same.
        return JSONResponse(await asyncio.to_thread(self.sampled.judge))

    @property
    def mirrors_in_flight(self) -> int:
        """Jobs taken from the queue whose pair is not yet compared."""
        return self._mirrors_taken - self._pairs_judged

    def health(self) -> dict[str, Any]:
        """What /servegate/healthz answers (HTTP 503 unless `status` is ok)."""
        canary = None if self.controller is None else dict(self.controller.snapshot())
        fault = None if canary is None else canary.get("fault")
        return {
            "status": "ok" if not fault else "unhealthy",
            "fault": fault,
            "mode": self.settings.mode,
            # a user's answer counts until it is measured: its metrics and capture follow it
            "in_flight": self.in_flight + self._measures_queued - self._measured,
            "buffered_bytes": self.buffered.held,
            "buffered_bytes_limit": self.settings.max_buffered_bytes,
            "mirror_queue_depth": self._queue.qsize(),
            "mirror_queue_capacity": self.settings.queue_size,
            "mirror_in_flight": self.mirrors_in_flight,
            "mirror_dropped": self.dropped,
            "mirror_pairs": self.pairs,
            "records_written": self._sink.written if self._sink else 0,
            "records_pending": self._sink.pending if self._sink else 0,
            "canary": canary,
        }

    # the user path -----------------------------------------------------------------------------

    async def forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry for every request that is not the proxy's own."""
        if scope["type"] != "http":
            return
        assert self._session is not None, "the proxy's lifespan has not started"
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
        if not raw_path.startswith(b"/"):  # only origin-form; the upstream's origin is fixed
            await send_error(send, 400, "request target must be a path", "invalid_request_error")
            return
        escape = path_escape(raw_path)
        if escape is not None:  # it could leave the upstream's configured prefix
            await send_error(send, 400, f"request path with {escape}", "invalid_request_error")
            return
        if self._admitted >= self.settings.max_in_flight:
            await self._refuse(send, "in_flight", f"the proxy is serving {self._admitted} "
                               "requests, its limit (--max-in-flight); retry")  # fmt: skip
            return
        if self._reading >= self.settings.max_body_reads:
            await self._refuse(send, "busy", f"the proxy is buffering {self._reading} request "
                               "bodies, its limit; retry")  # fmt: skip
            return
        self._admitted += 1
        try:
            await self._admit(scope, receive, send, raw_path)
        finally:
            self._admitted -= 1

    async def _refuse(self, send: Send, reason: str, message: str) -> None:
        self.metrics.refused.labels(reason).inc()
        await send_error(send, 503, message, "proxy_busy", retry_after_s=1)

    async def _admit(self, scope: Scope, receive: Receive, send: Send, raw_path: bytes) -> None:
        """Read the body, hold it within the buffered-bytes budget, serve; give it all back."""
        self._reading += 1
        try:
            body = await read_body(
                scope, receive, self.settings.max_body_bytes, self.settings.body_read_timeout_s
            )
        except BodyTimeoutError:
            self.metrics.refused.labels("body_timeout").inc()
            await send_error(
                send, 408,
                f"the request body did not arrive within {self.settings.body_read_timeout_s:g} s",
                "request_timeout",
            )  # fmt: skip
            return
        except BodyTooLargeError:
            await send_error(
                send,
                413,
                f"request body over the proxy's limit of {self.settings.max_body_bytes} bytes",
                "invalid_request_error",
            )
            return
        except ClientGoneError:
            return
        finally:
            self._reading -= 1
        if not self.buffered.take(len(body)):
            await self._refuse(send, "buffered_bytes", f"requests in flight hold "
                               f"{self.buffered.held} bytes, near the proxy's limit of "
                               f"{self.buffered.limit} (--max-buffered-bytes); retry")  # fmt: skip
            return
        held = len(body)
        self.in_flight += 1
        self.metrics.in_flight.inc()
        try:
            exchange = await self._serve(scope, receive, send, raw_path, body)
            held += exchange.kept_bytes if exchange is not None else 0
        finally:
            self.in_flight -= 1
            self.metrics.in_flight.dec()
            self.buffered.give(held)  # an exchange that raised kept nothing it can count

    async def _serve(
        self, scope: Scope, receive: Receive, send: Send, raw_path: bytes, body: bytes
    ) -> Exchange:
        """Forward one request to the side that serves it; the exchange, for the caller to
        release its kept bytes (the measurement runs on its own copy of the bookkeeping)."""
        assert self._session is not None
        path: str = scope["path"]
        routable = scope["method"] == "POST" and path in MIRRORED_PATHS
        side: Side = "primary"
        if routable and self.controller is not None:
            side = self.controller.choose(self._rng.random())
        upstream = self._upstream(side)
        headers: list[tuple[str, str]] | dict[str, str]
        if side == "candidate":
            headers = candidate_headers(scope["headers"], self.settings.candidate_key)
        else:
            client = scope.get("client")
            headers = upstream_headers(scope["headers"], None if client is None else client[0])
        job = None
        if routable and self.controller is None and self._rng.random() < self.settings.sample:
            job = self._mirror(scope, path, body)
        limits = self._primary_timeout
        if side == "candidate":  # the side under test never waits without a limit
            due = self.deadlines.current()
            limits = aiohttp.ClientTimeout(
                total=due.total_s,
                sock_read=due.idle_s,
                sock_connect=min(due.idle_s, self.settings.primary_connect_timeout_s),
            )
        try:
            exchange = await relay(
                self._session,
                method=scope["method"],
                url=upstream.url(raw_path, scope.get("query_string", b"")),
                headers=headers,
                body=body,
                limits=limits,
                receive=receive,
                send=send,
                keep_bytes=self.settings.record_bytes,
                side=side,
                budget=self.buffered,
            )
        except BaseException:
            if job is not None:
                job.primary.cancel()  # the pair is abandoned with the request
            raise
        if (
            routable
            and side == "primary"
            and exchange.error is None
            and (exchange.status or 500) < 400
        ):
            self.deadlines.observe(exchange)
        # The user has the last byte: measuring, pairing and recording start now.
        if job is not None:
            if self.queued.take(exchange.kept_bytes):  # the answer waits for its pair
                job.kept = exchange.kept_bytes
                job.primary.set_result(exchange)
            else:
                job.primary.cancel()  # the queues are full: the pair is abandoned, counted
                self.dropped += 1
                self.metrics.drops.inc()
        if not routable:
            return exchange
        if self.controller is None:  # shadow: measured on the judge's thread, off the loop
            assert self._judge is not None
            self._measures_queued += 1
            self._judge.submit(
                functools.partial(self._measure, side, path, body, scope, exchange, job)
            )
        else:  # read off the loop (an answer may inflate); the controller is the loop's own
            at = time.time()
            _, metrics = await asyncio.to_thread(
                self._served, side, path, body, scope, exchange, paired=False
            )
            assert self.controller is not None
            self.controller.observe(RequestObservation(side=side, at=at, metrics=metrics))
        return exchange

    def _measure(
        self,
        side: Side,
        path: str,
        body: bytes,
        scope: Scope,
        exchange: Exchange,
        job: MirrorJob | None,
    ) -> None:
        # On the judge's thread, ahead of the pair's own judgement (one thread, first in, first
        # out), so the pair reuses the answer read here; a pair judged on the loop because the
        # queue was full may find none yet and reads the answer itself.
        try:
            completion, _ = self._served(side, path, body, scope, exchange, paired=job is not None)
            if job is not None:
                job.primary_completion = completion
        finally:
            with self._pairs_lock:
                self._measured += 1

    def _upstream(self, side: Side) -> Upstream:
        if side == "candidate":
            return self.settings.candidate
        if side == "secondary" and self.settings.secondary is not None:
            return self.settings.secondary
        return self.settings.primary

    def _served(
        self, side: Side, path: str, body: bytes, scope: Scope, exchange: Exchange, *, paired: bool
    ) -> tuple[Completion | None, dict[str, float]]:
        """Measure the answer the user got: the Completion read from it (None: not read) and its
        metrics. Thread-safe: it runs on the judge's thread or a worker thread."""
        request = request_value(body)
        if not paired and self._capture is not None and isinstance(request, dict):
            assert self._sink is not None
            headers = tuple(upstream_headers(scope["headers"]))
            self._sink.put(Record(path=path, request=request, headers=headers, size=len(body)))
        # An answer the user walked away from counts too (class `abandoned`): users give up on
        # both sides alike unless one side makes them wait, which is that side's fault.
        completion = None
        if isinstance(request, dict):
            completion = completion_of(exchange, path, request)
            metrics = request_metrics(exchange, completion, request)
        else:
            metrics = request_metrics(exchange, None, {})
        self.metrics.served(side, metrics)
        return completion, metrics

    # the mirror --------------------------------------------------------------------------------

    def _mirror(self, scope: Scope, path: str, body: bytes) -> MirrorJob | None:
        request = request_value(body)
        if not isinstance(request, dict):
            return None  # not JSON: the primary's answer is its own business, nothing to compare
        job = MirrorJob(
            path=path,
            body=body,
            headers=tuple(upstream_headers(scope["headers"])),
            candidate_headers=candidate_headers(scope["headers"], self.settings.candidate_key),
            primary=asyncio.get_running_loop().create_future(),
        )
        try:
            if not self.queued.take(len(body)):
                raise asyncio.QueueFull  # the queues' byte cap: dropped like a full queue
            try:
                self._queue.put_nowait(job)
            except asyncio.QueueFull:
                self.queued.give(len(body))
                raise
        except asyncio.QueueFull:
            self.dropped += 1
            self.metrics.drops.inc()
            if self._sink is not None:
                self._sink.put(
                    Record(
                        path=path,
                        request=request,
                        headers=job.headers,
                        comparison={"dropped": "mirror queue full or its byte cap reached"},
                        pair=True,
                        size=len(body),
                    )
                )
            return None
        return job

    async def _mirror_worker(self) -> None:
        while True:
            job = await self._queue.get()
            self._mirrors_taken += 1
            try:
                candidate = await self._ask_candidate(job)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a mirror failure never reaches a user
                candidate = Exchange(sent_ns=time.perf_counter_ns(), error=repr(exc))
            if job.primary.done():
                self._pair(job, candidate)
            else:
                job.primary.add_done_callback(functools.partial(self._paired, job, candidate))

    async def _ask_candidate(self, job: MirrorJob) -> Exchange:
        assert self._session is not None
        url = self.settings.candidate.url(job.path.encode(), b"")
        exchange = Exchange(sent_ns=time.perf_counter_ns())
        try:
            async with self._session.post(
                url,
                data=job.body,
                headers=job.candidate_headers,
                timeout=self._candidate_timeout,
                allow_redirects=False,
            ) as response:
                exchange.status = response.status
                exchange.headers = {k.lower(): v for k, v in response.headers.items()}
                async for data in response.content.iter_any():
                    exchange.keep(data, time.perf_counter_ns(), self.settings.record_bytes)
                    if exchange.truncated:
                        break
        except TimeoutError:
            exchange.error, exchange.timed_out = "the candidate did not answer in time", True
        except aiohttp.ClientError as exc:
            exchange.error = f"the candidate failed: {type(exc).__name__}: {exc}"
        exchange.done_ns = time.perf_counter_ns()
        return exchange

    def _paired(self, job: MirrorJob, candidate: Exchange, _done: asyncio.Future[Exchange]) -> None:
        self._pair(job, candidate)

    def _pair(self, job: MirrorJob, candidate: Exchange) -> None:
        """Hand the pair to the judge: compared off the event loop (both sides are done)."""
        assert self._judge is not None
        self._judge.submit(functools.partial(self._judge_pair, job, candidate))

    def _judge_pair(self, job: MirrorJob, candidate: Exchange) -> None:
        # Runs on the judge's thread (or on the loop when its queue is full): only thread-safe
        # state here (prometheus_client, the sink's queue, the pair count under its lock).
        try:
            self._compare(job, candidate)
        finally:
            self.queued.give(len(job.body) + job.kept)
            with self._pairs_lock:
                self._pairs_judged += 1

    def _compare(self, job: MirrorJob, candidate: Exchange) -> None:
        if job.primary.cancelled():
            return
        primary = job.primary.result()
        request = json.loads(job.body)  # it parsed when the job was queued
        comparison = compare_pair(
            job.path, request, primary, candidate, primary_completion=job.primary_completion
        )
        self.metrics.served("candidate", comparison.candidate_metrics)
        self.metrics.paired(comparison)
        if not comparison.greedy and comparison.candidate_opening is not None:
            self.sampled.add(request, comparison)
        with self._pairs_lock:
            self.pairs += 1
        if self._sink is not None:
            self._sink.put(
                Record(
                    path=job.path,
                    request=request,
                    headers=job.headers,
                    primary=primary.as_record(),
                    candidate=candidate.as_record(),
                    comparison=comparison.as_dict(),
                    pair=True,
                    size=len(job.body)
                    + min(primary.kept_bytes, RECORD_CHARS)
                    + min(candidate.kept_bytes, RECORD_CHARS),
                )
            )
