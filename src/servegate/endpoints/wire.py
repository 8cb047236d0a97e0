"""One keep-alive HTTP/1.1 client connection: an asyncio Protocol reading with httptools.

Why not aiohttp here: aiohttp hands every HTTP chunk of a body to a StreamReader and wakes the
reading task for it — five-plus Python calls and a task switch per chunk, and servers send every
SSE event as its own chunk. Here each socket read is parsed by httptools in `data_received`,
stamped once, and handed whole to a sink (the SSE parser) in the same call: no task switch per
read. The reading task waits once per response for its end, an error, or the idle clock.

Used for plain-http endpoints (`WirePool`); TLS goes through aiohttp (`OpenAIEndpoint`).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

import httptools
from multidict import CIMultiDict, CIMultiDictProxy

from servegate.endpoints.errors import ErrorCategory, FaultError
from servegate.endpoints.text import exception_text
from servegate.endpoints.transport import read_to_end

Sink = Callable[[bytes, int], None]  # a read of body bytes and its arrival perf_counter_ns
MAX_HEAD_BYTES = 64 * 1024  # status line and headers; aiohttp's own limits are of this order


class WireResponse:
    """The head of a response: what the receptions read of aiohttp's ClientResponse."""

    __slots__ = ("content_length", "content_type", "headers", "status")

    def __init__(self, status: int, headers: CIMultiDictProxy[str]) -> None:
        self.status = status
        self.headers = headers
        raw_type = headers.get("Content-Type", "")
        # as aiohttp: the media type only, lower case; no header at all reads as octet-stream
        self.content_type = raw_type.split(";", 1)[0].strip().lower() or "application/octet-stream"
        length = headers.get("Content-Length")
        self.content_length = int(length) if length is not None and length.isdigit() else None


class WireConnection(asyncio.Protocol):
    """One exchange at a time: `send`, then `head`, then the body by `pump`, `chunk` or
    `read_all` (WireBody). Any fault closes the connection; `reusable` says whether it may serve
    the next request."""

    # the state of one exchange (set by `reset`)
    _parser: httptools.HttpResponseParser | None
    _header_list: list[tuple[str, str]]
    _head: asyncio.Future[WireResponse] | None
    _held: deque[tuple[bytes, int]]  # reads of body bytes while no sink was set, each stamped
    _head_only: bool  # the answer to HEAD: no body follows the head, whatever it announces
    _complete: bool
    _answer_parts: int  # once complete: how many parts of the read were the answer's
    _interim: bool  # reading a 1xx response before the final one
    _until_close: bool  # neither Content-Length nor chunked: the body ends at EOF
    _keep_alive: bool
    bytes_read: int

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._loop = asyncio.get_running_loop()
        self._parts: list[bytes] = []  # body bytes of the read being parsed
        # httptools' body callback, a C call per HTTP chunk (servers send an event per chunk)
        self.on_body = self._parts.append
        self._sink: Sink | None = None
        self._done: Callable[[], bool] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._error: Exception | None = None  # a FaultError, or a bug re-raised to the reader
        self._stamp = 0  # arrival of the last read
        self.head_ns = 0  # arrival of the read that completed the head
        self._head_bytes = 0
        self.end_ns = 0
        self.reset()

    # --- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._stamp = stamp = time.perf_counter_ns()
        parser = self._parser
        if parser is None or self._error is not None:
            self._fail(FaultError(ErrorCategory.PROTOCOL, "bytes from the server between answers"))
            return
        try:
            parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(
                FaultError(
                    ErrorCategory.PROTOCOL, f"malformed HTTP response: {exception_text(exc)}"
                )
            )
            return
        if not self.head_ns:  # the head is still incomplete: an endless one must not grow forever
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                message = f"response headers over {MAX_HEAD_BYTES} bytes"
                self._fail(FaultError(ErrorCategory.PROTOCOL, message))
                return
        parts = self._parts
        cut = self._answer_parts
        if cut >= 0:  # the answer is complete: bytes after it are not its body
            if len(parts) > cut:
                self._keep_alive = False  # nor may the connection serve another answer
            del parts[cut:]
            self._answer_parts = 0  # nothing read later belongs to it either
        if not parts:
            return
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        parts.clear()
        self.bytes_read += len(body)
        sink = self._sink
        if sink is None:
            # each read keeps its own arrival: joined under the last one's stamp, the first token
            # would be late and the gaps between the reads zero
            self._held.append((body, stamp))
            self._wake()
            return
        try:
            sink(body, stamp)
        except Exception as exc:  # a fault, or a bug: raised in the reading task, never lost
            self._fail(exc)
            return
        done = self._done
        if done is not None and done():
            self._done = None  # the answer is complete: the reader moves to the grace clock
            self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._parser is None or self._complete or self._error is not None:
            return
        if self._head is not None and not self._head.done():
            reason = f": {exception_text(exc)}" if exc else ""
            self._fail(FaultError(ErrorCategory.INFRA, f"connection closed before headers{reason}"))
        elif self._until_close and exc is None:
            self._finish(time.perf_counter_ns())  # a body delimited by the end of the connection
        else:
            reason = exception_text(exc) if exc else "closed by the server"
            self._fail(FaultError(ErrorCategory.RESET, f"connection lost mid-body: {reason}"))

    # --- httptools callbacks -----------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._complete:  # bytes after the answer: never reuse this connection
            self._keep_alive = False

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._complete:
            return
        self._header_list.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        parser = self._parser
        assert parser is not None
        assert self._head is not None
        if self._complete or self._head.done():
            return
        status = parser.get_status_code()
        if 100 <= status < 200 and status != 101:  # interim (100 Continue, 103 Early Hints)
            self._interim = True
            self._header_list = []
            return
        headers = CIMultiDictProxy(CIMultiDict(self._header_list))
        chunked = "chunked" in headers.get("Transfer-Encoding", "").lower()
        self._until_close = not chunked and "Content-Length" not in headers
        self._head.set_result(WireResponse(status, headers))
        self.head_ns = self._stamp
        if self._head_only:  # a HEAD answer ends with its head (RFC 9110 §9.3.2)
            self._keep_alive = parser.should_keep_alive()
            self._answer_parts = len(self._parts)
            self._finish(self._stamp)

    def on_message_complete(self) -> None:
        parser = self._parser
        assert parser is not None
        if self._complete:
            self._keep_alive = False
            return
        if self._interim:  # the final response follows
            self._interim = False
            return
        self._keep_alive = parser.should_keep_alive()
        self._answer_parts = len(self._parts)
        self._finish(self._stamp)

    # --- one exchange ------------------------------------------------------------------------

    def send(self, request: bytes, *, head_only: bool = False) -> asyncio.Future[WireResponse]:
        """Write a whole request; the future resolves with the response head. `head_only`: the
        request is HEAD, its answer has no body."""
        assert self.transport is not None
        assert self._parser is None
        self._parser = httptools.HttpResponseParser(self)
        self._head_only = head_only
        self._head = head = self._loop.create_future()
        self.head_ns = 0
        self._head_bytes = 0
        if self.closed:  # the server closed it while it was idle in the pool
            self._fail(FaultError(ErrorCategory.INFRA, "connection closed before headers"))
        else:
            self.transport.write(request)
        return head

    @property
    def reusable(self) -> bool:
        """The last response was read to its end and the server keeps the connection open."""
        return self._complete and self._keep_alive and self._error is None and not self.closed

    def reset(self) -> None:
        """The state of one exchange, fresh: on connecting, and before each reuse (only when
        `reusable`)."""
        self._parser = None
        self._header_list = []
        self._head = None
        self._held = deque()
        self._head_only = False
        self._complete = False
        self._answer_parts = -1
        self._interim = False
        self._until_close = False
        self._keep_alive = False
        self.bytes_read = 0

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def take_held(self) -> tuple[bytes, int]:
        """The oldest read of body bytes nobody asked for yet, and its arrival; (b"", 0) if none."""
        held = self._held
        return held.popleft() if held else (b"", 0)

    def set_sink(self, sink: Sink | None, done: Callable[[], bool] | None = None) -> None:
        """Hand each read's body bytes to `sink`; wake the reader once when `done()` turns true."""
        self._sink = sink
        self._done = done

    @property
    def last_read_ns(self) -> int:
        return self._stamp

    @property
    def ended(self) -> bool:
        return self._complete or self._error is not None

    def raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    async def wait(self) -> None:
        """Until the body ends, fails, or more body bytes are held; cancellation passes."""
        if self.ended or self._held:
            return
        self._waiter = waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def _finish(self, stamp: int) -> None:
        self._complete = True
        self.end_ns = stamp
        self._wake()

    def _fail(self, error: Exception) -> None:
        if self._error is None:
            self._error = error
        head = self._head
        if head is not None and not head.done():
            head.set_exception(error)
        self.abort()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class WireBody:
    """BodyReader's interface over a WireConnection: an idle clock between reads, faults as
    FaultError (STALLED, RESET, PROTOCOL)."""

    def __init__(self, conn: WireConnection, idle_s: float, length: int | None = None) -> None:
        self._conn = conn
        self._length = length  # the announced Content-Length
        self._idle_s = idle_s
        self._limit = idle_s

    @property
    def bytes_read(self) -> int:
        return self._conn.bytes_read

    async def chunk(self, idle_s: float | None = None) -> tuple[bytes, int]:
        """The next read's bytes and arrival stamp; b"" at the end of the body."""
        conn = self._conn
        self._limit = self._idle_s if idle_s is None else idle_s
        data, stamp = conn.take_held()
        if data:
            return data, stamp
        try:
            async with asyncio.timeout(self._limit):
                await conn.wait()
        except TimeoutError:
            raise self._stalled() from None
        data, stamp = conn.take_held()
        if data:
            return data, stamp
        conn.raise_error()
        return b"", conn.end_ns

    async def read_all(self, max_bytes: int) -> tuple[bytes, int]:
        """The whole body (TOO_LARGE past `max_bytes`) and the stamp of its last byte."""
        return await read_to_end(self, max_bytes, self._length)

    async def pump(self, sink: Sink, grace_s: float, done: Callable[[], bool]) -> int:
        """Hand every read to `sink` as it arrives until the body ends; the end's stamp.

        The idle limit is `idle_s`, and `grace_s` once `done()` (the answer is complete and only
        the end of the body is awaited). A FaultError from `sink` ends the body with it.
        """
        conn = self._conn
        data, stamp = conn.take_held()
        while data:
            sink(data, stamp)
            data, stamp = conn.take_held()
        conn.set_sink(sink, None if done() else done)
        try:
            while not conn.ended:
                self._limit = grace_s if done() else self._idle_s
                left_s = self._limit - (time.perf_counter_ns() - conn.last_read_ns) / 1e9
                if left_s <= 0:
                    raise self._stalled()
                try:
                    async with asyncio.timeout(left_s):
                        await conn.wait()
                except TimeoutError:
                    continue  # the clock is checked against the last read above
        finally:
            conn.set_sink(None)
        conn.raise_error()
        return conn.end_ns

    def _stalled(self) -> FaultError:
        return FaultError(
            ErrorCategory.STALLED,
            f"no bytes for {self._limit:g} s after {self._conn.bytes_read} body bytes",
        )
