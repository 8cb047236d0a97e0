"""OpenAIEndpoint: the Endpoint protocol over HTTP.

Plain http goes through servegate's own HTTP/1.1 client (`wire.py`: an asyncio Protocol with
httptools, one call per socket read rather than aiohttp's per-chunk task switch); https through
aiohttp. One keep-alive pool per endpoint, created lazily inside the running loop. Calls
never raise for server faults: the result's `error` says what failed, on which side, after how
many attempts. Redirects are not followed, TLS is always verified, and the API key is read from a
named environment variable, sent as a Bearer token, and never put in a message or repr.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from types import SimpleNamespace
from typing import Any, TypeVar

import aiohttp
from yarl import URL

from servegate import __version__
from servegate.endpoints.errors import EndpointError, ErrorCategory, FaultError, RequestError
from servegate.endpoints.reception import (
    CompletionReception,
    EmbeddingsReception,
    RawReception,
    Reception,
)
from servegate.endpoints.retry import RetryConfig, is_retryable, retry_after_s, wait_s
from servegate.endpoints.sse import DEFAULT_MAX_EVENT_BYTES
from servegate.endpoints.timing import TimingRecorder
from servegate.endpoints.transport import BodyReader, TimeoutConfig, transport_fault
from servegate.endpoints.types import Completion, Embeddings, RawResponse
from servegate.endpoints.wire import WireBody
from servegate.endpoints.wire_pool import WirePool

R = TypeVar("R")
_BREAKS = re.compile(r"[\r\n\0]")  # never in a header: it would end it and split the request
MAX_KEPT_URLS = 32  # joined request URLs kept per endpoint (raw() may be asked for any path)
Retryable = TypeVar("Retryable", Completion, Embeddings)


def api_key_from(var: str, what: str = "API key") -> str:
    """The key held by environment variable `var`; EndpointError (naming the variable, never
    its value) when it is unset, empty, or holds a line break or NUL — a key read from a file (a
    Kubernetes Secret) often ends with a newline, and sent verbatim it would end the header."""
    key = os.environ.get(var)
    if not key:
        raise EndpointError(f"{what} variable {var} is not set or empty")
    if _BREAKS.search(key):
        raise EndpointError(
            f"{what} variable {var} holds a line break or NUL (a trailing newline from a secret "
            "file?): remove it; nothing was sent"
        )
    return key


class OpenAIEndpoint:
    """An OpenAI-compatible server at `base_url` (e.g. http://127.0.0.1:8000/v1)."""

    def __init__(
        self,
        name: str,
        base_url: str,
        *,
        api_key_env: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeouts: TimeoutConfig | None = None,
        retry: RetryConfig | None = None,
        max_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        max_connections: int = 64,
    ) -> None:
        url = _checked_url(base_url)
        self._name = name
        self._base = url
        self._timeouts = timeouts or TimeoutConfig()
        self._retry = retry or RetryConfig()
        self._max_bytes = max_bytes
        self._max_connections = max_connections
        self._headers = {"User-Agent": f"servegate/{__version__}", **(headers or {})}
        for header, value in self._headers.items():
            if _BREAKS.search(value) or _BREAKS.search(header):
                raise EndpointError(f"header {header} holds a line break or NUL: refused, not sent")
        if api_key_env is not None:
            self._headers["Authorization"] = f"Bearer {api_key_from(api_key_env)}"
        self._session: aiohttp.ClientSession | None = None  # https: aiohttp (TLS)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pool: WirePool | None = None  # http: the lean HTTP/1.1 client (wire.py)
        self._pool_loop: asyncio.AbstractEventLoop | None = None
        self._urls: dict[str, URL] = {}
        self._load_views: dict[int, OpenAIEndpoint] = {}

    def under_load(self, connections: int) -> OpenAIEndpoint:
        """This endpoint as load sends to it: no retries and a pool of `connections`; kept per
        connection count (its connections are reused by the next step) and closed with it."""
        if self._retry.max_attempts == 1 and self._max_connections == connections:
            return self
        view = self._load_views.get(connections)
        if view is None:
            view = OpenAIEndpoint(
                self._name,
                self.base_url,
                headers=self._headers,  # with the Authorization this endpoint was given
                timeouts=self._timeouts,
                retry=RetryConfig(max_attempts=1),
                max_bytes=self._max_bytes,
                max_connections=connections,
            )
            self._load_views[connections] = view
        return view

    def __repr__(self) -> str:
        return f"OpenAIEndpoint(name={self._name!r}, base_url={self.base_url!r})"

    @property
    def name(self) -> str:
        return self._name

    @property
    def base_url(self) -> str:
        return str(self._base).rstrip("/")

    async def chat(self, body: Mapping[str, Any], *, deadline_s: float | None = None) -> Completion:
        """POST /chat/completions; streams when body["stream"] is true."""
        return await self._generate("chat/completions", body, deadline_s, chat=True)

    async def completion(
        self, body: Mapping[str, Any], *, deadline_s: float | None = None
    ) -> Completion:
        """POST /completions; streams when body["stream"] is true."""
        return await self._generate("completions", body, deadline_s, chat=False)

    async def embeddings(
        self, body: Mapping[str, Any], *, deadline_s: float | None = None
    ) -> Embeddings:
        """POST /embeddings, vectors validated (count, dimension, finite, non-zero)."""
        deadline_at = self._deadline_at(deadline_s)

        async def once() -> tuple[Embeddings, Mapping[str, str]]:
            reception = EmbeddingsReception(
                body, timeouts=self._timeouts, max_bytes=self._max_bytes
            )
            return await self._exchange("POST", "embeddings", body, deadline_at, reception)

        return await self._retrying(once, deadline_at)

    async def raw(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        deadline_s: float | None = None,
    ) -> RawResponse:
        """Any request relative to base_url (e.g. GET /models, GET ../version); no retries."""
        reception = RawReception(timeouts=self._timeouts, max_bytes=self._max_bytes)
        result, _ = await self._exchange(
            method.upper(), path, body, self._deadline_at(deadline_s), reception
        )
        return result

    async def aclose(self) -> None:
        """Close the connection pool; the endpoint opens a new one if used again."""
        views, self._load_views = list(self._load_views.values()), {}
        for view in views:
            await view.aclose()
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

    async def __aenter__(self) -> OpenAIEndpoint:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _generate(
        self, path: str, body: Mapping[str, Any], deadline_s: float | None, *, chat: bool
    ) -> Completion:
        deadline_at = self._deadline_at(deadline_s)

        async def once() -> tuple[Completion, Mapping[str, str]]:
            reception = CompletionReception(
                body, chat=chat, timeouts=self._timeouts, max_bytes=self._max_bytes
            )
            return await self._exchange("POST", path, body, deadline_at, reception)

        return await self._retrying(once, deadline_at)

    def _deadline_at(self, deadline_s: float | None) -> float:
        seconds = self._timeouts.deadline_s if deadline_s is None else deadline_s
        return asyncio.get_running_loop().time() + seconds

    async def _retrying(
        self,
        once: Callable[[], Awaitable[tuple[Retryable, Mapping[str, str]]]],
        deadline_at: float,
    ) -> Retryable:
        loop = asyncio.get_running_loop()
        attempts, waited = 0, 0.0
        error: RequestError | None = None
        while True:
            attempts += 1
            result, headers = await once()
            error = result.error
            if error is None or not is_retryable(error) or attempts >= self._retry.max_attempts:
                break
            pause = wait_s(self._retry, attempts, retry_after_s(headers))
            if waited + pause > self._retry.budget_s or loop.time() + pause >= deadline_at:
                break
            await asyncio.sleep(pause)
            waited += pause
        if attempts == 1 and error is None and (result.attempts, result.waited_s) == (1, 0.0):
            return result  # the usual case: nothing to record, no copy
        if error is not None:
            error = dataclasses.replace(error, attempts=attempts, waited_s=waited)
        final: Retryable = dataclasses.replace(
            result, error=error, attempts=attempts, waited_s=waited
        )
        return final

    async def _exchange(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        deadline_at: float,
        reception: Reception[R],
    ) -> tuple[R, Mapping[str, str]]:
        url = self._url(path)
        recorder = TimingRecorder()
        headers: Mapping[str, str] = {}
        status: int | None = None
        stream = bool(body and body.get("stream"))
        try:
            async with asyncio.timeout_at(deadline_at):
                # sent_ns moves on as the request is written: the wait for a pooled connection
                # before that is client queueing, not the server's TTFT.
                recorder.queued_ns = recorder.sent_ns = time.perf_counter_ns()
                if self._base.scheme == "http":
                    pool = self._pool_now()
                    conn = await pool.acquire()
                    try:
                        request = pool.request(
                            method, url.raw_path_qs, body, "text/event-stream" if stream else None
                        )
                        head = conn.send(request, head_only=method == "HEAD")
                        recorder.wrote()
                        wire_response = await head
                        recorder.headers_ns = conn.head_ns
                        headers, status = wire_response.headers, wire_response.status
                        length = None if method == "HEAD" else wire_response.content_length
                        reader = WireBody(conn, self._timeouts.idle_s, length)
                        return await reception.receive(wire_response, reader, recorder), headers
                    finally:
                        pool.release(conn)
                async with self._session_now().request(
                    method,
                    url,
                    json=None if body is None else dict(body),
                    headers={"Accept": "text/event-stream"} if stream else None,
                    allow_redirects=False,
                    trace_request_ctx=recorder,
                ) as response:
                    recorder.headers_ns = time.perf_counter_ns()
                    headers, status = response.headers, response.status
                    body_reader = BodyReader(response, self._timeouts.idle_s)
                    return await reception.receive(response, body_reader, recorder), headers
        except FaultError as exc:
            fault = exc
        except aiohttp.ClientError as exc:
            fault = transport_fault(exc, got_headers=recorder.headers_ns is not None)
        except TimeoutError:
            when = "before response headers" if recorder.headers_ns is None else "mid-body"
            fault = FaultError(ErrorCategory.TIMEOUT, f"request deadline passed {when}")
        except OSError as exc:
            fault = transport_fault(exc, got_headers=recorder.headers_ns is not None)
        error = RequestError(
            fault.category,
            fault.message,
            status=status,
            body_excerpt=fault.body_excerpt,
            side=self._name,
        )
        return reception.fail(error, recorder), headers

    def _url(self, path: str) -> URL:
        url = self._urls.get(path)
        if url is not None:
            return url  # joined and checked before: every generation request asks this again
        url = self._base.join(URL(path.lstrip("/")))
        if url.origin() != self._base.origin():
            raise EndpointError(f"path {path!r} leaves the endpoint's origin")
        if len(self._urls) < MAX_KEPT_URLS:
            self._urls[path] = url
        return url

    def _pool_now(self) -> WirePool:
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool.closed or self._pool_loop is not loop:
            # raw_host: the IDNA (ASCII) form of an internationalised name, as DNS and the
            # Host header need it (`host` is the Unicode form).
            host, port = self._base.raw_host, self._base.port
            assert host is not None
            assert port is not None
            self._pool = WirePool(
                host,
                port,
                self._headers,
                limit=self._max_connections,
                connect_s=self._timeouts.connect_s,
            )
            self._pool_loop = loop
        return self._pool

    def _session_now(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            connector = aiohttp.TCPConnector(limit=self._max_connections)
            written = aiohttp.TraceConfig()
            written.on_request_headers_sent.append(_stamp_written)
            written.on_request_chunk_sent.append(_stamp_written)
            self._session = aiohttp.ClientSession(
                connector=connector,
                trace_configs=[written],
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._timeouts.connect_s),
                trust_env=False,
            )
            self._loop = loop
        return self._session


async def _stamp_written(session: aiohttp.ClientSession, ctx: SimpleNamespace, _: object) -> None:
    """Headers, then each body chunk, handed to the connection: the last one is `sent_ns`."""
    recorder = ctx.trace_request_ctx
    if isinstance(recorder, TimingRecorder):
        recorder.wrote()


def _checked_url(base_url: str) -> URL:
    try:
        url = URL(base_url.rstrip("/") + "/")
    except ValueError as exc:
        raise EndpointError(f"base URL does not parse: {exc}") from None
    if url.user or url.password:
        raise EndpointError("base URL must not carry credentials; use api_key_env")
    if url.scheme not in ("http", "https") or not url.host:
        raise EndpointError(f"base URL must be http(s)://host[:port]/path, got {base_url!r}")
    return url


def http_stack(base_url: str) -> str:
    """Which HTTP client reads an endpoint at `base_url`: timings of two sides read by different
    stacks differ by the clients' own overhead, and the report says so."""
    if base_url.startswith("https://"):
        return f"aiohttp {aiohttp.__version__} (https)"
    return "servegate wire HTTP/1.1 (httptools)"


def open_endpoint(name: str, base_url: str, **options: Any) -> OpenAIEndpoint:
    """An OpenAIEndpoint; options are OpenAIEndpoint's keyword arguments."""
    return OpenAIEndpoint(name, base_url, **options)
