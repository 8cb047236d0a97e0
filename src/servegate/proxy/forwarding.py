"""The user path: each request forwarded to the side that serves it and its answer streamed
back unchanged (status, end-to-end headers, bytes as they arrive). Nothing here waits for the
mirror, the store or the judgement; their work starts after the user's last byte is sent."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

import aiohttp

from servegate.proxy.exchange import Exchange
from servegate.proxy.limits import ByteBudget

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# Hop-by-hop headers (RFC 9110 §7.6.1) and those the client library computes itself.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"content-length",
        b"expect",
    }
)
# Request headers that travel to the candidate; everything else the user sent stays behind.
CANDIDATE_HEADERS = frozenset({"content-type", "accept"})


class BodyTooLargeError(Exception):
    """The request body is over the proxy's limit."""


class BodyTimeoutError(Exception):
    """The request body did not arrive in full within the body-read timeout (a slow upload)."""


class ClientGoneError(Exception):
    """The client disconnected before its request body was read."""


async def read_body(scope: Scope, receive: Receive, limit: int, timeout_s: float) -> bytes:
    """The whole request body within `timeout_s` in all (BodyTimeoutError after it), refused
    early when its declared or actual size passes `limit`."""
    try:
        async with asyncio.timeout(timeout_s):
            return await _read_body(scope, receive, limit)
    except TimeoutError:
        raise BodyTimeoutError from None


async def _read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                declared = int(value)
            except ValueError:
                declared = 0
            if declared > limit:
                raise BodyTooLargeError
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGoneError
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)


def _connection_named(raw: Iterable[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """Header names the sender listed in `Connection`: hop-by-hop too (RFC 9110 §7.6.1)."""
    return frozenset(
        token.strip().lower()
        for name, value in raw
        if name.lower() == b"connection"
        for token in value.split(b",")
        if token.strip()
    )


def _readable_encodings(value: bytes) -> bytes | None:
    """Accept-Encoding narrowed to the codings the proxy can read back (gzip, deflate), so a
    compressing primary is measured, not taken for a broken one; None: ask for none."""
    kept = [
        part.strip()
        for part in value.split(b",")
        if part.split(b";")[0].strip().lower() in (b"gzip", b"x-gzip", b"deflate", b"identity")
    ]
    return b", ".join(kept) if kept else None


def upstream_headers(
    raw: Iterable[tuple[bytes, bytes]], client: str | None = None
) -> list[tuple[str, str]]:
    """The user's end-to-end headers for the primary: Host, hop-by-hop headers and those named
    in `Connection` removed, Accept-Encoding narrowed to what the proxy reads, and the client's
    address appended to X-Forwarded-For (what the user sent is kept, never taken as the
    client)."""
    raw = list(raw)
    dropped = HOP_BY_HOP | _connection_named(raw)
    out: list[tuple[str, str]] = []
    forwarded: list[str] = []
    for name, value in raw:
        lower = name.lower()
        if lower in dropped:
            continue
        if lower == b"x-forwarded-for":
            forwarded.append(value.decode("latin-1").strip())
            continue
        if lower == b"accept-encoding":
            narrowed = _readable_encodings(value)
            if narrowed is None:
                continue
            value = narrowed
        out.append((name.decode("latin-1"), value.decode("latin-1")))
    if client is not None:
        forwarded.append(client)
    if forwarded:
        out.append(("x-forwarded-for", ", ".join(v for v in forwarded if v)))
    return out


def candidate_headers(raw: Iterable[tuple[bytes, bytes]], key: str | None) -> dict[str, str]:
    """What the candidate gets: the body's type and its own key, never the user's credentials."""
    headers = {
        name.decode("latin-1").lower(): value.decode("latin-1")
        for name, value in raw
        if name.decode("latin-1").lower() in CANDIDATE_HEADERS
    }
    if key:
        headers["authorization"] = f"Bearer {key}"
    return headers


def response_headers(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The upstream's response headers minus hop-by-hop ones and those its `Connection` names
    (Content-Length is kept)."""
    raw = list(raw)
    dropped = HOP_BY_HOP | _connection_named(raw)
    return [
        (name.lower(), value)
        for name, value in raw
        if name.lower() not in dropped or name.lower() == b"content-length"
    ]


async def send_error(
    send: Send, status: int, message: str, kind: str, *, retry_after_s: int | None = None
) -> None:
    """An OpenAI-shaped error answer from the proxy itself (502, 504, 503, 413, 408, 400)."""
    body = json.dumps(
        {"error": {"message": message, "type": kind, "param": None, "code": status}}
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"x-servegate-proxy", b"error"),
    ]
    if retry_after_s is not None:
        headers.append((b"retry-after", str(retry_after_s).encode()))
    if status in (408, 413, 503):  # the rest of an unread body is not read: close the connection
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def relay(
    session: aiohttp.ClientSession,
    *,
    method: str,
    url: str,
    headers: list[tuple[str, str]] | dict[str, str],
    body: bytes,
    limits: aiohttp.ClientTimeout,
    receive: Receive,
    send: Send,
    keep_bytes: int,
    side: str,
    budget: ByteBudget | None = None,
) -> Exchange:
    """Forward one request and stream the answer to the client as it arrives.

    A client that disconnects (before or during the answer) cancels the upstream request, so
    the engine stops generating; an upstream that fails after the headers went out ends the
    client's response unfinished, so the client sees a broken stream, never a clean short one."""
    exchange = Exchange(sent_ns=time.perf_counter_ns())
    task = asyncio.current_task()
    assert task is not None
    finished = False
    gone = False

    async def watch() -> None:
        nonlocal gone
        message = await receive()
        if message["type"] == "http.disconnect" and not finished:
            gone = True
            task.cancel()

    watcher = asyncio.create_task(watch())
    response: aiohttp.ClientResponse | None = None
    try:
        response = await session.request(
            method, url, headers=headers, data=body or None, allow_redirects=False, timeout=limits
        )
        exchange.status = response.status
        exchange.headers = {k.lower(): v for k, v in response.headers.items()}
        await send(
            {
                "type": "http.response.start",
                "status": response.status,
                "headers": response_headers(response.raw_headers),
            }
        )
        async for data in response.content.iter_any():
            await send({"type": "http.response.body", "body": data, "more_body": True})
            exchange.keep(data, time.perf_counter_ns(), keep_bytes, budget)
        exchange.done_ns = time.perf_counter_ns()
        finished = True
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    except asyncio.CancelledError:
        if not gone:
            raise
        task.uncancel()
        exchange.error, exchange.client_gone = "the client disconnected", True
    except TimeoutError:
        exchange.timed_out = True
        if response is None:
            exchange.error = f"the {side} did not answer in time"
            await send_error(send, 504, exchange.error, "upstream_timeout")
        else:
            exchange.error = f"the {side} went silent mid-answer"
    except aiohttp.ClientError as exc:
        if response is None:
            # The record keeps the cause; the user's 502 never names the upstream's host.
            exchange.error = f"the {side} is unreachable: {type(exc).__name__}: {exc}"
            shown = f"the {side} is unreachable ({type(exc).__name__})"
            await send_error(send, 502, shown, "upstream_unreachable")
        else:
            exchange.error = f"the {side} broke off: {type(exc).__name__}"
    finally:
        finished = True
        watcher.cancel()
        if response is not None and exchange.error:
            response.close()  # not reused: the upstream stops sending
        elif response is not None:
            response.release()
    if exchange.done_ns is None:
        exchange.done_ns = time.perf_counter_ns()
    return exchange
