"""A keep-alive pool of WireConnections to one plain-http origin, and the requests it writes.

At most `limit` connections are open; a request that finds none idle and the limit reached waits
its turn (client queueing: the request counts as sent only once written). Connect faults are
INFRA, as with aiohttp: refused, DNS, and the connect timeout.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections import deque
from collections.abc import Mapping
from typing import Any

from servegate.endpoints.errors import ErrorCategory, FaultError
from servegate.endpoints.text import exception_text
from servegate.endpoints.wire import WireConnection


class WirePool:
    def __init__(
        self, host: str, port: int, headers: Mapping[str, str], *, limit: int, connect_s: float
    ) -> None:
        self._host = host
        self._port = port
        self._limit = max(1, limit)
        self._connect_s = connect_s
        host_header = host if port == 80 else f"{host}:{port}"
        if ":" in host and not host.startswith("["):
            host_header = f"[{host}]:{port}"  # an IPv6 literal
        lines = [f"Host: {host_header}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        self._common = ("\r\n".join(lines) + "\r\n").encode("latin-1")
        self._idle: list[WireConnection] = []
        self._open = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.closed = False

    def request(
        self, method: str, target: str, body: Mapping[str, Any] | None, accept: str | None
    ) -> bytes:
        """The bytes of one request: common headers, then JSON body (as aiohttp's `json=`)."""
        head = f"{method} {target} HTTP/1.1\r\n".encode("latin-1") + self._common
        extra = f"Accept: {accept}\r\n" if accept else ""
        if body is None:
            if method in ("POST", "PUT", "PATCH"):
                extra += "Content-Length: 0\r\n"
            return head + f"{extra}\r\n".encode("latin-1")
        data = json.dumps(dict(body)).encode()
        extra += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        return head + f"{extra}\r\n".encode("latin-1") + data

    async def acquire(self) -> WireConnection:
        loop = asyncio.get_running_loop()
        while True:
            while self._idle:
                conn = self._idle.pop()
                if not conn.closed:
                    return conn
                self._open -= 1  # the server closed it while it waited
            if self._open < self._limit:
                self._open += 1
                try:
                    return await self._connect(loop)
                except BaseException:
                    self._open -= 1
                    self._wake_one()
                    raise
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                elif waiter.done() and not waiter.cancelled():
                    self._wake_one()  # it was our turn: pass it on
                raise

    def release(self, conn: WireConnection) -> None:
        """Back to the pool when it can serve another request; closed otherwise."""
        if conn.reusable and not self.closed:
            conn.reset()
            self._idle.append(conn)
        else:
            conn.abort()
            self._open -= 1
        self._wake_one()

    def close(self) -> None:
        self.closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.abort()
            self._open -= 1

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> WireConnection:
        try:
            async with asyncio.timeout(self._connect_s):
                _, conn = await loop.create_connection(WireConnection, self._host, self._port)
        except TimeoutError:
            raise FaultError(ErrorCategory.INFRA, "connect timed out") from None
        except socket.gaierror as exc:
            raise FaultError(
                ErrorCategory.INFRA, f"DNS lookup failed: {exception_text(exc)}"
            ) from exc
        except OSError as exc:
            raise FaultError(
                ErrorCategory.INFRA, f"connection failed: {exception_text(exc)}"
            ) from exc
        return conn
