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


class ClientGoneError(Exception):
    """The client disconnected before its request body was read."""


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The whole request body, refused early when its declared or actual size passes `limit`."""
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


def upstream_headers(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """The user's end-to-end headers for the primary (Host and hop-by-hop removed)."""
    return [
        (name.decode("latin-1"), value.decode("latin-1"))
        for name, value in raw
        if name.lower() not in HOP_BY_HOP
    ]


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
    """The upstream's response headers minus hop-by-hop ones (Content-Length is kept)."""
    return [
        (name.lower(), value)
        for name, value in raw
        if name.lower() not in HOP_BY_HOP or name.lower() == b"content-length"
    ]


async def send_error(send: Send, status: int, message: str, kind: str) -> None:
    """An OpenAI-shaped error answer from the proxy itself (502, 504, 413, 400)."""
    body = json.dumps(
        {"error": {"message": message, "type": kind, "param": None, "code": status}}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"x-servegate-proxy", b"error"),
            ],
        }
    )
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
            exchange.keep(data, time.perf_counter_ns(), keep_bytes)
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
            exchange.error = f"the {side} is unreachable: {type(exc).__name__}: {exc}"
            await send_error(send, 502, exchange.error, "upstream_unreachable")
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
