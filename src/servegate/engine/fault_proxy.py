"""The proxy half of the fault layer: relay a request upstream, rewriting what a fault asks for.

A `Fault` sees each request first and returns one of three things: a response it answered itself
(hang-long), a `Relay` saying how to rewrite this exchange, or None to pass it through untouched.
Untouched exchanges are copied byte for byte, chunk by chunk, so SSE streams keep their chunking;
rewritten SSE streams are parsed into events, the JSON in their `data:` lines is rewritten, and
each event is re-emitted as soon as it is complete (`data: [DONE]` and anything that is not JSON
pass unchanged).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import ClientResponse, ClientSession, ClientTimeout, web

Payload = dict[str, Any]
# Rewrites one JSON payload; None means "unchanged" (the original bytes are sent).
AnswerRewrite = Callable[[Payload], Payload | None]
# Rewrites one SSE event's JSON into zero or more events; None means "unchanged". Stateful: a
# new one is built for every streamed response.
EventRewrite = Callable[[Payload], list[Payload] | None]


@dataclass(frozen=True)
class Relay:
    """How to pass one request on: the body to send and what to change in the answer."""

    body: bytes
    answer: AnswerRewrite | None = None
    events: Callable[[], EventRewrite] | None = None
    delay_s: float = 0.0
    event_delay_s: float = 0.0


Fault = Callable[[web.Request, bytes], Awaitable[web.StreamResponse | Relay | None]]


@dataclass
class InFlight:
    """Requests the proxy holds right now, from arrival until their answer is sent (or dropped)."""

    count: int = 0


# Where a fault reads the proxy's in-flight count: `request.app[IN_FLIGHT].count`.
IN_FLIGHT = web.AppKey("in_flight", InFlight)

# Connection-level headers are per hop (RFC 9110 §7.6.1); the rest pass through untouched.
_HOP_HEADERS = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
     "trailer", "trailers", "transfer-encoding", "upgrade", "host"}
)  # fmt: skip
# A blank line ends an SSE event, whichever line ending the server uses.
_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_LINE_END = re.compile(r"\r\n|\r|\n")
_TERMINATOR = re.compile(rb"(?:\r\n\r\n|\n\n|\r\r)\Z")


def split_events(buffer: bytes) -> tuple[list[bytes], bytes]:
    """Complete SSE events in `buffer` (each with its terminator) and the incomplete rest."""
    events: list[bytes] = []
    start = 0
    for match in _EVENT_END.finditer(buffer):
        events.append(buffer[start : match.end()])
        start = match.end()
    return events, buffer[start:]


def rewrite_event(event: bytes, rewrite: EventRewrite) -> list[bytes]:
    """The event re-emitted after `rewrite`; non-JSON data and unchanged events keep their bytes."""
    ending = _TERMINATOR.search(event)
    terminator = ending.group() if ending else b"\n\n"
    body = event[: ending.start()] if ending else event
    lines = _LINE_END.split(body.decode("utf-8", errors="replace"))
    data = [line[5:].removeprefix(" ") for line in lines if line.startswith("data:")]
    if not data:
        return [event]
    try:
        payload = json.loads("\n".join(data))
    except ValueError:
        return [event]
    if not isinstance(payload, dict):
        return [event]
    rewritten = rewrite(payload)
    if rewritten is None:
        return [event]
    others = "".join(line + "\n" for line in lines if not line.startswith("data:"))
    return [(others + "data: " + json.dumps(item)).encode() + terminator for item in rewritten]


def rewrite_stream_bytes(raw: bytes, rewrite: EventRewrite) -> bytes:
    """A whole SSE byte stream after `rewrite` (the relay does the same event by event)."""
    events, rest = split_events(raw)
    return b"".join(out for event in events for out in rewrite_event(event, rewrite)) + rest


def rewrite_answer_bytes(raw: bytes, rewrite: AnswerRewrite) -> bytes:
    """A JSON answer body after `rewrite`; bodies that are not a JSON object keep their bytes."""
    try:
        payload = json.loads(raw)
    except ValueError:
        return raw
    if not isinstance(payload, dict):
        return raw
    rewritten = rewrite(payload)
    return raw if rewritten is None else json.dumps(rewritten).encode()


def _kind(answer: ClientResponse) -> str:
    if answer.status != 200 or answer.headers.get("Content-Encoding"):
        return "raw"
    content_type = answer.headers.get("Content-Type", "")
    if content_type.startswith("text/event-stream"):
        return "sse"
    if content_type.startswith("application/json"):
        return "json"
    return "raw"


async def _events(answer: ClientResponse) -> AsyncIterator[bytes]:
    buffer = b""
    async for chunk in answer.content.iter_any():
        events, buffer = split_events(buffer + chunk)
        for event in events:
            yield event
    if buffer:
        yield buffer


async def forward(
    request: web.Request, relay: Relay, session: ClientSession, upstream: str
) -> web.StreamResponse:
    """Send `relay.body` to `upstream` and stream the answer back, rewritten as `relay` says."""
    if relay.delay_s > 0:
        await asyncio.sleep(relay.delay_s)
    # aiohttp sets Content-Length from the body, which a fault may have changed.
    dropped = _HOP_HEADERS | {"content-length"}
    headers = {k: v for k, v in request.headers.items() if k.lower() not in dropped}
    async with session.request(
        request.method,
        upstream + request.rel_url.path_qs,
        headers=headers,
        data=relay.body if relay.body else None,
        allow_redirects=False,
    ) as answer:
        kind = _kind(answer)
        rewrites_json = kind == "json" and relay.answer is not None
        skipped = _HOP_HEADERS | {"content-length"} if rewrites_json else _HOP_HEADERS
        response = web.StreamResponse(status=answer.status, reason=answer.reason)
        for key, value in answer.headers.items():
            if key.lower() not in skipped:
                response.headers.add(key, value)
        if rewrites_json and relay.answer is not None:
            body = rewrite_answer_bytes(await answer.read(), relay.answer)
            response.content_length = len(body)
            await response.prepare(request)
            await response.write(body)
        elif kind == "sse" and (relay.events is not None or relay.event_delay_s > 0):
            await response.prepare(request)
            rewrite = relay.events() if relay.events is not None else None
            sent = 0
            async for event in _events(answer):
                for out in [event] if rewrite is None else rewrite_event(event, rewrite):
                    if sent and relay.event_delay_s > 0:
                        await asyncio.sleep(relay.event_delay_s)
                    await response.write(out)
                    sent += 1
        else:
            await response.prepare(request)
            async for chunk in answer.content.iter_any():
                await response.write(chunk)
        await response.write_eof()
        return response


def _log_request(path: Path, request: web.Request, body: bytes) -> None:
    try:
        payload: object = json.loads(body) if body else None
    except ValueError:
        payload = body.decode("utf-8", "replace")
    line = json.dumps({"method": request.method, "path": request.path, "body": payload})
    with path.open("a", encoding="utf-8") as handle:
        handle.write(line + "\n")


def proxy_app(fault: Fault, upstream: str, request_log: Path | None = None) -> web.Application:
    """An aiohttp app that applies `fault` and forwards everything it lets through; with
    `request_log`, each request (method, path, JSON body) is appended to it as it arrives, so a
    test can compare what the engine was sent with what servegate recorded."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    session_key = web.AppKey("session", ClientSession)
    app[IN_FLIGHT] = in_flight = InFlight()

    async def session_context(app: web.Application):  # type: ignore[no-untyped-def]
        # No total timeout: a slow generation is the engine's business, not the proxy's.
        timeout = ClientTimeout(total=None, sock_connect=10)
        async with ClientSession(timeout=timeout, auto_decompress=False) as session:
            app[session_key] = session
            yield

    async def handle(request: web.Request) -> web.StreamResponse:
        in_flight.count += 1
        try:
            body = await request.read()
            if request_log is not None:
                _log_request(request_log, request, body)
            decided = await fault(request, body)
            if isinstance(decided, web.StreamResponse):
                return decided
            relay = decided if decided is not None else Relay(body)
            return await forward(request, relay, request.app[session_key], upstream)
        finally:
            in_flight.count -= 1

    app.cleanup_ctx.append(session_context)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app
