"""Reading one HTTP response under the three clocks, and naming transport failures.

Clocks: the request deadline (asyncio.timeout_at around the whole exchange, so a server that never
sends headers becomes TIMEOUT, and one byte per interval cannot stretch it), the idle timeout
(longest silence after headers, STALLED), and the connect timeout (INFRA, retried).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

import aiohttp

from servegate.endpoints.errors import ErrorCategory, FaultError
from servegate.endpoints.text import exception_text

DEFAULT_MAX_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class TimeoutConfig:
    """Clocks of one request; a call's `deadline_s` replaces `deadline_s` here."""

    deadline_s: float = 300.0  # whole request: connect, headers, body, retries and their waits
    idle_s: float = 60.0  # longest silence after headers before the stream counts as stalled
    connect_s: float = 10.0  # TCP/TLS connect; a connect timeout is an infra failure
    done_grace_s: float = 1.0  # how long to wait for the body to end after `data: [DONE]`


class ResponseHead(Protocol):
    """What a reception reads of a response before its body (aiohttp's or the wire's)."""

    @property
    def status(self) -> int: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def content_type(self) -> str: ...
    @property
    def content_length(self) -> int | None: ...


class Body(Protocol):
    """A response body read under the idle clock (BodyReader over aiohttp, WireBody)."""

    @property
    def bytes_read(self) -> int: ...

    async def chunk(self, idle_s: float | None = None) -> tuple[bytes, int]:
        """The next bytes and their arrival stamp; b"" at the end of the body."""
        ...

    async def read_all(self, max_bytes: int) -> tuple[bytes, int]:
        """The whole body (TOO_LARGE past `max_bytes`) and the stamp of its last byte."""
        ...

    async def pump(
        self, sink: Callable[[bytes, int], None], grace_s: float, done: Callable[[], bool]
    ) -> int:
        """Each read to `sink` until the body ends (idle limit `grace_s` once `done()`); the
        end's stamp."""
        ...


class BodyReader:
    """Chunks of one response body, each stamped with perf_counter_ns as it is read.

    Used as `async with reader:` around a read loop, one idle clock serves the whole body and is
    moved on before each wait; bare, each wait gets its own. Buffered bytes need no clock.
    """

    def __init__(self, response: aiohttp.ClientResponse, idle_s: float) -> None:
        self._response = response
        self._idle_s = idle_s
        self._clock: asyncio.Timeout | None = None
        self._limit = idle_s  # the idle limit of the current wait, for the STALLED message
        self.bytes_read = 0

    async def __aenter__(self) -> BodyReader:
        assert self._clock is None, "BodyReader clock entered twice"
        clock = asyncio.timeout(None)
        await clock.__aenter__()
        self._clock = clock
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        clock, self._clock = self._clock, None
        assert clock is not None
        try:
            await clock.__aexit__(exc_type, exc, tb)
        except TimeoutError:
            raise self._stalled() from None

    async def chunk(self, idle_s: float | None = None) -> tuple[bytes, int]:
        """The next chunk and its arrival stamp; b"" at the end of the body."""
        limit = self._limit = self._idle_s if idle_s is None else idle_s
        content = self._response.content
        try:
            data = content.read_nowait()  # all that is buffered; b"" when nothing or at the end
            if not data and not content.is_eof():
                clock = self._clock
                if clock is None:
                    async with asyncio.timeout(limit):
                        data = await content.readany()
                else:
                    clock.reschedule(asyncio.get_running_loop().time() + limit)
                    data = await content.readany()
        except TimeoutError:
            raise self._stalled() from None
        except aiohttp.ClientError as exc:
            raise FaultError(
                ErrorCategory.RESET, f"connection lost: {exception_text(exc)}"
            ) from exc
        self.bytes_read += len(data)
        return data, time.perf_counter_ns()

    def _stalled(self) -> FaultError:
        return FaultError(
            ErrorCategory.STALLED,
            f"no bytes for {self._limit:g} s after {self.bytes_read} body bytes",
        )

    async def pump(
        self, sink: Callable[[bytes, int], None], grace_s: float, done: Callable[[], bool]
    ) -> int:
        """Each chunk to `sink` as read until the body ends; the stamp of the end."""
        async with self:  # one idle clock for the stream (a stall surfaces at its exit)
            while True:
                data, arrival = await self.chunk(grace_s if done() else None)
                if not data:
                    return arrival
                sink(data, arrival)

    async def read_all(self, max_bytes: int) -> tuple[bytes, int]:
        """The whole body (TOO_LARGE past `max_bytes`) and the stamp of its last byte."""
        async with self:
            return await read_to_end(self, max_bytes, self._response.content_length)


async def read_to_end(body: Body, max_bytes: int, length: int | None) -> tuple[bytes, int]:
    """A body's bytes to its end (TOO_LARGE past `max_bytes`, or at once when the announced
    `length` is over it) and the stamp of its last byte."""
    if length is not None and length > max_bytes:
        raise FaultError(ErrorCategory.TOO_LARGE, f"body of {length} bytes over {max_bytes}")
    parts: list[bytes] = []
    size = 0
    stamp = time.perf_counter_ns()
    while True:
        data, arrival = await body.chunk()
        if not data:
            return b"".join(parts), stamp
        size += len(data)
        if size > max_bytes:
            raise FaultError(ErrorCategory.TOO_LARGE, f"body over {max_bytes} bytes")
        parts.append(data)
        stamp = arrival


def transport_fault(exc: BaseException, *, got_headers: bool) -> FaultError:
    """Name a client exception: TLS, infra (refused, DNS, closed before headers) or reset."""
    if isinstance(exc, FaultError):
        return exc
    if isinstance(exc, aiohttp.ClientSSLError | ssl.SSLError):
        return FaultError(ErrorCategory.TLS, f"TLS failure: {exception_text(exc)}")
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return FaultError(ErrorCategory.INFRA, f"DNS lookup failed: {exception_text(exc)}")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return FaultError(ErrorCategory.INFRA, f"connection failed: {exception_text(exc)}")
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return FaultError(ErrorCategory.INFRA, "connect timed out")
    if isinstance(exc, aiohttp.ClientResponseError):
        return FaultError(ErrorCategory.PROTOCOL, f"malformed HTTP response: {exception_text(exc)}")
    if isinstance(exc, aiohttp.InvalidURL):
        return FaultError(ErrorCategory.PROTOCOL, f"invalid URL: {exception_text(exc)}")
    if not got_headers:
        return FaultError(
            ErrorCategory.INFRA, f"connection closed before headers: {exception_text(exc)}"
        )
    return FaultError(ErrorCategory.RESET, f"connection lost mid-body: {exception_text(exc)}")
