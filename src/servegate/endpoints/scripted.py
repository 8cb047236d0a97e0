"""ScriptedServer: a loopback HTTP/1.1 server that answers with scripted, possibly malformed, bytes.

The test double that ships with the client (like httpx's MockTransport), so tests anywhere can
reproduce a fault byte for byte. Each route holds a queue of scripts; a request takes the next one
(the last one repeats). A script is `async (request, conn) -> None` and writes whatever bytes it
likes: wrong framing, a stream cut mid-chunk, headers and then silence, one byte per interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass
class Conn:
    writer: asyncio.StreamWriter
    closed: bool = False

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    def close(self) -> None:
        """A clean FIN after everything written."""
        self.closed = True
        self.writer.close()

    def reset(self) -> None:
        """An RST: SO_LINGER 0 then close drops the connection without a FIN."""
        self.closed = True
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()


Script = Callable[[Request, Conn], Awaitable[None]]


@dataclass
class ScriptedServer:
    routes: dict[str, list[Script]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    connections: int = 0
    ssl_context: ssl.SSLContext | None = None
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def route(self, path: str, *scripts: Script) -> ScriptedServer:
        self.routes[path] = list(scripts)
        return self

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def __aenter__(self) -> ScriptedServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.ssl_context)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Scripts run in a task of our own: cancelling the stream server's task on close would
        # make Python 3.11's asyncio.streams log the CancelledError it then reads back.
        task = asyncio.create_task(self._converse(reader, writer))
        self._tasks.add(task)
        await asyncio.wait({task})

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.connections += 1
        conn = Conn(writer)
        try:
            while not conn.closed:
                request = await _read_request(reader)
                if request is None:
                    break
                self.requests.append(request)
                queue = self.routes.get(request.path) or [reply_status(404)]
                script = queue.pop(0) if len(queue) > 1 else queue[0]
                await script(request, conn)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass  # the client went away; that is what some scripts provoke
        finally:
            self._tasks.discard(task)
            if not conn.closed:
                writer.close()


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    body = await reader.readexactly(length) if length else b""
    return Request(method, target.split("?", 1)[0], headers, body)


def _head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} X"] + [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def reply_bytes(
    body: bytes,
    status: int = 200,
    *,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
) -> Script:
    """A complete response with Content-Length; the connection stays open for the next request."""

    async def script(request: Request, conn: Conn) -> None:
        fields = {"Content-Type": content_type, "Content-Length": str(len(body))}
        await conn.send(_head(status, {**fields, **(headers or {})}) + body)

    return script


def reply_json(obj: Any, status: int = 200, *, headers: dict[str, str] | None = None) -> Script:
    return reply_bytes(json.dumps(obj).encode(), status, headers=headers)


def reply_status(status: int, body: bytes = b"", **kw: Any) -> Script:
    return reply_bytes(body, status, content_type=kw.pop("content_type", "text/plain"), **kw)


def reply_stream(
    parts: Iterable[bytes],
    *,
    delay_s: float = 0.0,
    first_delay_s: float = 0.0,
    end: str = "close",
    content_type: str = "text/event-stream",
    chunked: bool = True,
) -> Script:
    """Headers, then each part as it is written (a chunked-encoding chunk unless chunked=False),
    `delay_s` apart. end: "close" ends the body cleanly, "reset" drops the connection mid-body,
    "hang" keeps it open and silent."""
    items = list(parts)

    async def script(request: Request, conn: Conn) -> None:
        fields = {"Content-Type": content_type, "Cache-Control": "no-cache"}
        fields.update({"Transfer-Encoding": "chunked"} if chunked else {"Connection": "close"})
        await conn.send(_head(200, fields))
        await asyncio.sleep(first_delay_s)
        for i, part in enumerate(items):
            if i and delay_s:
                await asyncio.sleep(delay_s)
            await conn.send(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
        if end == "reset":
            conn.reset()
        elif end == "hang":
            await asyncio.Event().wait()
        elif chunked:
            await conn.send(b"0\r\n\r\n")
        else:
            conn.close()

    return script


def hang(after_headers: bool = False) -> Script:
    """Never answer (the scheduler loops forever), or answer headers and then nothing."""

    async def script(request: Request, conn: Conn) -> None:
        if after_headers:
            await conn.send(
                _head(200, {"Content-Type": "text/event-stream", "Connection": "close"})
            )
        await asyncio.Event().wait()

    return script


def sse(obj: Any) -> bytes:
    """One `data:` event holding `obj` as JSON (or the string as is)."""
    data = obj if isinstance(obj, str) else json.dumps(obj)
    return b"data: " + data.encode() + b"\n\n"


def chunk(
    content: str | None = None, *, finish_reason: str | None = None, **delta: Any
) -> dict[str, Any]:
    """A chat.completion.chunk with choice 0; extra keyword arguments go into the delta."""
    if content is not None:
        delta["content"] = content
    logprobs = delta.pop("logprobs", None)
    choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish_reason}
    if logprobs is not None:
        choice["logprobs"] = logprobs
    return {"object": "chat.completion.chunk", "model": "m", "choices": [choice]}


def chat_stream(*texts: str, usage: bool = True, done: bool = True) -> list[bytes]:
    """A well-formed chat stream: role chunk, one chunk per text, finish, usage, [DONE]."""
    parts = [sse(chunk("", role="assistant"))]
    parts += [sse(chunk(t)) for t in texts]
    parts.append(sse(chunk(finish_reason="stop")))
    if usage:
        tokens = len(texts)
        parts.append(
            sse({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": tokens}})
        )
    if done:
        parts.append(b"data: [DONE]\n\n")
    return parts


def chat_body(content: Any = "OK", **message: Any) -> dict[str, Any]:
    """A non-streamed chat.completion."""
    return {
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, **message},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }
