"""The plain-http client (endpoints/wire.py) where it differs from aiohttp's: connection reuse,
bodies that end with the connection, bytes after an answer, the pool's limit. FAULTS.md's items
run through it in test_endpoint_faults.py (every ScriptedServer there is plain http)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from servegate.endpoints import ErrorCategory
from servegate.endpoints.assembly import StreamAssembler
from servegate.endpoints.http import OpenAIEndpoint
from servegate.endpoints.retry import RetryConfig
from servegate.endpoints.scripted import (
    Conn,
    Request,
    ScriptedServer,
    chat_body,
    chat_stream,
    reply_json,
    reply_stream,
)
from servegate.endpoints.transport import TimeoutConfig

CHAT = "/v1/chat/completions"
STREAM = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
PLAIN = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
ONCE = RetryConfig(max_attempts=1)


@pytest.fixture
async def server() -> AsyncIterator[ScriptedServer]:
    async with ScriptedServer() as srv:
        yield srv


def endpoint(srv: ScriptedServer, **options: Any) -> OpenAIEndpoint:
    options.setdefault("retry", ONCE)
    options.setdefault("timeouts", TimeoutConfig(deadline_s=5.0, idle_s=2.0, done_grace_s=0.2))
    return OpenAIEndpoint("candidate", srv.url, **options)


async def test_answers_on_one_connection_reuse_it(server: ScriptedServer) -> None:
    server.route(
        CHAT, reply_stream(chat_stream("a", "b")), reply_json(chat_body("c")), reply_stream(
            chat_stream("d"))
    )  # fmt: skip
    async with endpoint(server) as ep:
        results = [await ep.chat(STREAM), await ep.chat(PLAIN), await ep.chat(STREAM)]
    assert [r.content for r in results] == ["ab", "c", "d"]
    assert server.connections == 1


async def _until_close(request: Request, conn: Conn) -> None:
    # HTTP/1.1 without Content-Length or chunking: the body is whatever comes before the FIN
    body = json.dumps(chat_body("to the end")).encode()
    await conn.send(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + body)
    conn.close()


async def _stream_until_close(request: Request, conn: Conn) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
    await conn.send(head + b"".join(chat_stream("x", "y")))
    conn.close()


async def test_a_body_ended_by_the_connection_is_a_whole_answer(server: ScriptedServer) -> None:
    server.route(CHAT, _until_close, _stream_until_close, reply_json(chat_body("next")))
    async with endpoint(server) as ep:
        plain = await ep.chat(PLAIN)
        streamed = await ep.chat(STREAM)
        after = await ep.chat(PLAIN)
    assert (plain.content, plain.error) == ("to the end", None)
    assert (streamed.content, streamed.error) == ("xy", None)
    assert after.content == "next"
    assert server.connections == 3  # a connection whose end was the body's is never reused


async def _answer_then_junk(request: Request, conn: Conn) -> None:
    await reply_json(chat_body("first"))(request, conn)
    await conn.send(b"HTTP/1.1 200 OK\r\n")  # bytes nobody asked for


def _chunked(body: bytes) -> bytes:
    return f"{len(body):x}\r\n".encode() + body + b"\r\n"


async def _stream_and_a_second_answer_in_one_write(request: Request, conn: Conn) -> None:
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    # the answer's events (up to [DONE]: the reader keeps reading until the body ends), then a
    # second response whose token event would join the answer were it read as its body
    answer = chat_stream("fir", "st")[:-1]
    body = b"".join(_chunked(event) for event in answer) + b"0\r\n\r\n"
    extra = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunked(answer[2])
    await conn.send(head + body + extra)


@pytest.mark.parametrize(
    ("script", "body"),
    [(_answer_then_junk, PLAIN), (_stream_and_a_second_answer_in_one_write, STREAM)],
    ids=["junk-after-json", "second-answer-in-the-same-read"],
)
async def test_bytes_after_an_answer_keep_the_answer_and_retire_the_connection(
    server: ScriptedServer, script: Any, body: dict[str, Any]
) -> None:
    server.route(CHAT, script, reply_json(chat_body("second")))
    async with endpoint(server) as ep:
        first = await ep.chat(body)
        await asyncio.sleep(0.05)  # later junk arrives while the connection waits in the pool
        second = await ep.chat(PLAIN)
    assert (first.content, first.error) == ("first", None)
    assert (second.content, second.error) == ("second", None)
    assert server.connections == 2


async def _answer_and_close(request: Request, conn: Conn) -> None:
    await reply_json(chat_body("bye"))(request, conn)
    conn.close()


async def test_a_pooled_connection_the_server_closed_is_replaced(server: ScriptedServer) -> None:
    server.route(CHAT, _answer_and_close, reply_json(chat_body("fresh")))
    async with endpoint(server) as ep:
        first = await ep.chat(PLAIN)
        await asyncio.sleep(0.05)  # the FIN reaches the idle connection
        second = await ep.chat(PLAIN)
    assert (first.content, second.content) == ("bye", "fresh")
    assert second.error is None
    assert server.connections == 2


async def test_the_pool_never_opens_more_than_max_connections(server: ScriptedServer) -> None:
    open_now = peak = 0

    async def counted(request: Request, conn: Conn) -> None:
        nonlocal open_now, peak
        open_now += 1
        peak = max(peak, open_now)
        try:
            await reply_stream(chat_stream("t", "u"), delay_s=0.02)(request, conn)
        finally:
            open_now -= 1

    server.route(CHAT, counted)
    async with endpoint(server, max_connections=3) as ep:
        results = await asyncio.gather(*(ep.chat(STREAM) for _ in range(12)))
    assert [r.content for r in results] == ["tu"] * 12
    assert all(r.error is None for r in results)
    assert peak == 3
    assert server.connections == 3
    # queued requests count as sent once written: no TTFT includes the wait for a connection
    waits = [r.timing.sent_ns - (r.timing.queued_ns or r.timing.sent_ns) for r in results]
    assert sum(w > 20_000_000 for w in waits) >= 6


async def _connection_close_header(request: Request, conn: Conn) -> None:
    body = json.dumps(chat_body("last")).encode()
    head = (
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    await conn.send(head.encode() + body)


async def test_connection_close_from_the_server_is_honoured(server: ScriptedServer) -> None:
    server.route(CHAT, _connection_close_header, reply_json(chat_body("again")))
    async with endpoint(server) as ep:
        first = await ep.chat(PLAIN)
        second = await ep.chat(PLAIN)
    assert (first.content, second.content) == ("last", "again")
    assert server.connections == 2


async def _not_http_after_headers(request: Request, conn: Conn) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    await conn.send(head + b"\r\n5\r\ndata:\r\nzz\r\nbroken")


async def test_broken_chunk_framing_mid_body_is_protocol(server: ScriptedServer) -> None:
    server.route(CHAT, _not_http_after_headers)
    async with endpoint(server) as ep:
        result = await ep.chat(STREAM)
    assert result.error is not None
    assert result.error.category is ErrorCategory.PROTOCOL
    assert "malformed HTTP response" in result.error.message


async def _endless_header(request: Request, conn: Conn) -> None:
    await conn.send(b"HTTP/1.1 200 OK\r\nX-Pad: ")
    for _ in range(40):  # 160 KiB of one header value, never ended
        await conn.send(b"a" * 4096)
    await asyncio.sleep(10)


async def test_an_endless_header_fails_as_protocol_long_before_the_deadline(
    server: ScriptedServer,
) -> None:
    server.route(CHAT, _endless_header)
    async with endpoint(server) as ep:
        started = time.perf_counter()
        result = await ep.chat(STREAM, deadline_s=5)
        elapsed = time.perf_counter() - started
    assert result.error is not None
    assert result.error.category is ErrorCategory.PROTOCOL
    assert result.error.message == "response headers over 65536 bytes"
    assert elapsed < 4.0  # cut at the limit, not at the 5 s deadline


async def _interim_then_answer(request: Request, conn: Conn) -> None:
    await conn.send(b"HTTP/1.1 100 Continue\r\n\r\n")
    await conn.send(b"HTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n")
    await reply_json(chat_body("final"))(request, conn)


async def test_interim_responses_are_skipped_for_the_final_one(server: ScriptedServer) -> None:
    server.route(CHAT, _interim_then_answer, reply_json(chat_body("again")))
    async with endpoint(server) as ep:
        first = await ep.chat(PLAIN)
        second = await ep.chat(PLAIN)
    assert (first.status, first.content, first.error) == (200, "final", None)
    assert second.content == "again"
    assert server.connections == 1


async def test_a_bug_in_the_intake_is_raised_to_the_caller_not_reported_as_a_reset(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # aiohttp's path raises such a bug from the reading task; the wire client must not turn it
    # into a server fault (RESET) because it happened inside data_received
    def broken(*_: object) -> None:
        raise TypeError("a bug in the intake")

    monkeypatch.setattr(StreamAssembler, "add_data", broken)
    server.route(CHAT, reply_stream(chat_stream("a", "b")))
    async with endpoint(server) as ep:
        with pytest.raises(TypeError, match="a bug in the intake"):
            await ep.chat(STREAM)


async def test_a_large_body_in_the_same_read_as_the_headers_is_not_taken_for_a_long_head(
    server: ScriptedServer,
) -> None:
    # one write of headers and a 300 KB body: the head limit counts the head, not the body
    # (embeddings answers are this large)
    text = "x" * 300_000
    server.route(CHAT, reply_json(chat_body(text)))
    async with endpoint(server) as ep:
        result = await ep.chat(PLAIN)
    assert result.error is None, result.error
    assert result.content == text
