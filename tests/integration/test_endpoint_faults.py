"""FAULTS.md items 1–35, driven through the public Endpoint against scripted servers on loopback."""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import AsyncIterator
from email.utils import formatdate
from pathlib import Path
from typing import Any

import pytest

from servegate.endpoints import Completion, ErrorCategory
from servegate.endpoints.http import OpenAIEndpoint
from servegate.endpoints.retry import RetryConfig
from servegate.endpoints.scripted import (
    Conn,
    Request,
    ScriptedServer,
    chat_body,
    chat_stream,
    chunk,
    hang,
    reply_bytes,
    reply_json,
    reply_status,
    reply_stream,
    sse,
)
from servegate.endpoints.timing import output_tokens
from servegate.endpoints.transport import TimeoutConfig

CHAT = "/v1/chat/completions"
STREAM = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
STREAM_USAGE = {**STREAM, "stream_options": {"include_usage": True}}
PLAIN = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
FAST_RETRY = RetryConfig(max_attempts=3, budget_s=2.0, max_wait_s=0.3, backoff_s=0.02)


@pytest.fixture
async def server() -> AsyncIterator[ScriptedServer]:
    async with ScriptedServer() as srv:
        yield srv


def endpoint(srv: ScriptedServer, **options: Any) -> OpenAIEndpoint:
    options.setdefault("retry", FAST_RETRY)
    options.setdefault("timeouts", TimeoutConfig(deadline_s=5.0, idle_s=2.0, done_grace_s=0.2))
    return OpenAIEndpoint("candidate", srv.url, **options)


async def stream_of(srv: ScriptedServer, parts: list[bytes], **kw: Any) -> Completion:
    srv.route(CHAT, reply_stream(parts, **kw))
    async with endpoint(srv) as ep:
        return await ep.chat(STREAM_USAGE)


def category(result: Completion) -> ErrorCategory | None:
    return result.error.category if result.error else None


# --- 1–15: SSE and stream parsing -------------------------------------------------------------

FRAME = 'data: {"choices":[{"index":0,"delta":{"content":"h\u00e9llo \u4e16\u754c"}}]}\r\n\r\n'
FRAME_BYTES = FRAME.encode()
# A stream is complete only when it says so: the finish chunk, then [DONE].
FINISH = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'


@pytest.mark.parametrize(
    "cut",
    [
        FRAME_BYTES.index(b"data") + 2,
        FRAME_BYTES.index("\u00e9".encode()) + 1,
        FRAME_BYTES.index("\u4e16".encode()) + 1,
        FRAME_BYTES.index("\u4e16".encode()) + 2,
        len(FRAME_BYTES) - 3,
        len(FRAME_BYTES) - 1,
    ],
    ids=[
        "inside-field-name",
        "inside-2-byte-char",
        "inside-3-byte-char-after-1",
        "inside-3-byte-char-after-2",
        "between-cr-and-lf",
        "between-last-cr-and-lf",
    ],
)
async def test_frame_split_anywhere_yields_the_same_completion(
    server: ScriptedServer, cut: int
) -> None:
    parts = [FRAME_BYTES[:cut], FRAME_BYTES[cut:], FINISH, b"data: [DONE]\n\n"]
    result = await stream_of(server, parts, delay_s=0.01)
    assert result.ok, result.error
    assert result.content == "h\u00e9llo \u4e16\u754c"


async def test_frame_sent_one_byte_at_a_time_yields_the_same_completion(
    server: ScriptedServer,
) -> None:
    whole = b"".join(chat_stream("Hello", " wor", "ld"))
    result = await stream_of(server, [whole[i : i + 1] for i in range(len(whole))])
    assert result.ok, result.error
    assert result.content == "Hello world"


async def test_space_at_chunk_boundary_inside_json_string_is_kept(server: ScriptedServer) -> None:
    frame = sse(chunk(" world"))
    cut = frame.index(b" world")
    parts = [sse(chunk("Hello")), frame[:cut], frame[cut:], b"data: [DONE]\n\n"]
    result = await stream_of(server, parts, delay_s=0.01)
    assert result.content == "Hello world"


@pytest.mark.parametrize(
    "eol", [b"\n", b"\r", b"\r\n", b"\r|\n"], ids=["lf", "cr", "crlf", "cr-then-lf-next-chunk"]
)
async def test_every_line_ending_style_ends_lines(server: ScriptedServer, eol: bytes) -> None:
    text = b"".join(chat_stream("a", "b")).replace(b"\n", eol)
    parts = text.split(b"|") if b"|" in eol else [text]
    parts = [p.replace(b"|", b"") for p in parts]
    result = await stream_of(server, parts, delay_s=0.005)
    assert result.ok, result.error
    assert result.content == "ab"


async def test_unicode_line_separators_in_content_are_not_line_breaks(
    server: ScriptedServer,
) -> None:
    text = "a\u2028b\u2029c\u0085d"
    frame = ("data: " + json.dumps(chunk(text), ensure_ascii=False) + "\n\n").encode()
    result = await stream_of(server, [frame, b"data: [DONE]\n\n"])
    assert result.content == text


async def test_multiline_data_joins_with_lf_and_one_leading_space_is_removed(
    server: ScriptedServer,
) -> None:
    frame = b'data: {"choices": [{"index": 0,\ndata:"delta": {"content": "x"}}]}\n\n'
    extra_space = b"data:  [DONE]\n\n"  # data is " [DONE]": not the sentinel
    result = await stream_of(server, [frame, extra_space])
    assert result.content == "x"
    assert category(result) is ErrorCategory.PARSE


async def test_thousands_of_ping_comments_are_dropped_and_flagged(server: ScriptedServer) -> None:
    pings = [b": ping\n\n" * 5000]
    result = await stream_of(server, [*pings, *chat_stream("ok")])
    assert result.ok, result.error
    assert result.content == "ok"
    assert "keepalive_comments" in result.flags


@pytest.mark.timed
async def test_keepalive_comments_do_not_extend_the_total_deadline(server: ScriptedServer) -> None:
    server.route(CHAT, reply_stream([b": ping\n\n"] * 1000, delay_s=0.01))
    async with endpoint(server) as ep:
        started = time.perf_counter()
        result = await ep.chat(STREAM, deadline_s=0.4)
    assert category(result) is ErrorCategory.TIMEOUT
    assert time.perf_counter() - started < 1.5


async def test_unknown_fields_bad_id_and_retry_are_ignored_and_post_is_never_reconnected(
    server: ScriptedServer,
) -> None:
    noise = b"foo: bar\nid: a\x00b\nretry: soon\nretry: 10\n"
    parts = [noise + sse(chunk("part")), b'data: {"choices"']
    result = await stream_of(server, parts, chunked=False)
    assert result.content == "part"
    assert category(result) is ErrorCategory.TRUNCATED
    assert len(server.requests) == 1


async def test_leading_bom_is_stripped_and_the_first_event_kept(server: ScriptedServer) -> None:
    parts = [b"\xef\xbb", b"\xbf" + b"".join(chat_stream("first", "second"))]
    result = await stream_of(server, parts, delay_s=0.01)
    assert result.content == "firstsecond"


async def test_invalid_utf8_fails_as_decode_not_a_crash(server: ScriptedServer) -> None:
    bad = b'data: {"choices":[{"index":0,"delta":{"content":"\xff\xfe"}}]}\n\n'
    result = await stream_of(server, [sse(chunk("ok")), bad, b"data: [DONE]\n\n"])
    assert category(result) is ErrorCategory.DECODE
    assert result.content == "ok"


async def test_clean_close_without_done_is_truncated_with_partial_text_kept(
    server: ScriptedServer,
) -> None:
    # Cut before the answer ended: no finish_reason, no [DONE].
    result = await stream_of(server, chat_stream("Hel", "lo", done=False)[:3])
    assert category(result) is ErrorCategory.TRUNCATED
    assert result.content == "Hello"
    assert "without [DONE]" in (result.error.message if result.error else "")


@pytest.mark.parametrize("usage", [True, False], ids=["usage-chunk-last", "finish-chunk-last"])
async def test_a_stream_that_ends_after_finish_reason_without_done_is_an_answer_flagged(
    server: ScriptedServer, usage: bool
) -> None:
    # transformers serve 5.24 ends every stream this way: the answer is whole, the terminator is
    # missing — recorded as a flag, not called a truncation.
    result = await stream_of(server, chat_stream("Hel", "lo", usage=usage, done=False))
    assert result.ok, result.error
    assert (result.content, result.finish_reason) == ("Hello", "stop")
    assert "no_done_after_finish" in result.flags
    assert (result.usage is not None) is usage


async def test_a_stream_cut_inside_an_event_after_finish_reason_is_still_truncated(
    server: ScriptedServer,
) -> None:
    parts = [*chat_stream("Hel", "lo", usage=False, done=False), b'data: {"choices"']
    result = await stream_of(server, parts, chunked=False)
    assert category(result) is ErrorCategory.TRUNCATED


@pytest.mark.parametrize(
    ("tail", "expected_category", "flag"),
    [
        (b"data: [DONE]", None, "unterminated_event"),
        (b"data: [DONE]x\n\n", ErrorCategory.PARSE, None),
        (b"data: [DONE]\n\n" + sse(chunk(" after")), None, "events_after_done"),
    ],
    ids=["done-without-blank-line", "done-with-suffix", "events-after-done"],
)
async def test_done_is_matched_exactly_and_irregular_endings_are_recorded(
    server: ScriptedServer,
    tail: bytes,
    expected_category: ErrorCategory | None,
    flag: str | None,
) -> None:
    result = await stream_of(server, [*chat_stream("x", done=False), tail])
    assert category(result) is expected_category
    assert result.content == "x"
    if flag:
        assert flag in result.flags


@pytest.mark.parametrize(
    "event",
    [
        sse({"error": {"message": "CUDA error: device-side assert", "code": 500}}),
        sse({"object": "error", "message": "CUDA error: device-side assert"}),
        b'event: error\ndata: {"message": "CUDA error: device-side assert"}\n\n',
    ],
    ids=["error-object", "object-error", "event-error"],
)
@pytest.mark.parametrize("only", [False, True], ids=["mid-stream", "only-event"])
async def test_error_event_fails_as_stream_error_with_its_message(
    server: ScriptedServer, event: bytes, only: bool
) -> None:
    parts = [event] if only else [sse(chunk("so far")), event, b"data: [DONE]\n\n"]
    result = await stream_of(server, parts)
    assert category(result) is ErrorCategory.STREAM_ERROR
    assert "CUDA error: device-side assert" in (result.error.message if result.error else "")
    assert result.content == (None if only else "so far")


async def test_data_that_is_not_json_fails_as_parse_naming_the_event(
    server: ScriptedServer,
) -> None:
    parts = [sse(chunk("a")), sse(chunk("b")), b"data: {not json\n\n", b"data: [DONE]\n\n"]
    result = await stream_of(server, parts)
    assert category(result) is ErrorCategory.PARSE
    assert "event 2" in (result.error.message if result.error else "")


@pytest.mark.parametrize(
    "parts",
    [[b"data: " + b"x" * 8192 + b"\n\n"], [b"data: " + b"y" * 1024] * 64],
    ids=["event-over-cap", "line-that-never-ends"],
)
async def test_oversized_event_or_endless_line_fails_as_too_large(
    server: ScriptedServer, parts: list[bytes]
) -> None:
    server.route(CHAT, reply_stream(parts, end="hang"))
    async with endpoint(server, max_bytes=4096) as ep:
        result = await ep.chat(STREAM)
    assert category(result) is ErrorCategory.TOO_LARGE


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (reply_json({"error": {"message": "stream not supported"}}), ErrorCategory.ERROR_BODY),
        (reply_json(chat_body("whole")), ErrorCategory.PROTOCOL),
        (reply_bytes(b"<html>proxy</html>", content_type="text/html"), ErrorCategory.PROTOCOL),
    ],
    ids=["json-error-body", "json-completion", "html"],
)
async def test_stream_answered_without_event_stream_is_an_error_body_or_protocol(
    server: ScriptedServer, reply: Any, expected: ErrorCategory
) -> None:
    server.route(CHAT, reply)
    async with endpoint(server) as ep:
        result = await ep.chat(STREAM)
    assert category(result) is expected


# --- 16–25: HTTP and transport ----------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_connection_refused_is_retried_then_fails_as_infra_naming_the_side() -> None:
    async with OpenAIEndpoint(
        "candidate", f"http://127.0.0.1:{closed_port()}/v1", retry=FAST_RETRY
    ) as ep:
        result = await ep.chat(PLAIN)
    assert result.error is not None
    assert (result.error.category, result.error.side) == (ErrorCategory.INFRA, "candidate")
    assert result.error.attempts == FAST_RETRY.max_attempts
    assert result.error.waited_s > 0


async def test_dns_failure_fails_as_infra() -> None:
    retry = RetryConfig(max_attempts=1)
    async with OpenAIEndpoint("baseline", "http://no-such-host.invalid/v1", retry=retry) as ep:
        result = await ep.chat(PLAIN, deadline_s=5)
    assert result.error is not None
    assert (result.error.category, result.error.side) == (ErrorCategory.INFRA, "baseline")


@pytest.mark.timed
async def test_no_headers_ever_fails_at_the_deadline_and_the_next_request_is_served(
    server: ScriptedServer,
) -> None:
    server.route(CHAT, hang(), reply_json(chat_body("OK")))
    async with endpoint(server) as ep:
        started = time.perf_counter()
        first = await ep.chat(PLAIN, deadline_s=0.3)
        elapsed = time.perf_counter() - started
        second = await ep.chat(PLAIN)
    assert category(first) is ErrorCategory.TIMEOUT
    assert 0.3 <= elapsed < 1.0
    assert second.ok
    assert second.content == "OK"


@pytest.mark.timed
async def test_headers_then_silence_fails_as_stalled_at_the_idle_timeout(
    server: ScriptedServer,
) -> None:
    server.route(CHAT, reply_stream([sse(chunk("a"))], end="hang"))
    timeouts = TimeoutConfig(deadline_s=5.0, idle_s=0.3)
    async with endpoint(server, timeouts=timeouts) as ep:
        started = time.perf_counter()
        result = await ep.chat(STREAM)
    assert category(result) is ErrorCategory.STALLED
    assert result.content == "a"
    assert time.perf_counter() - started < 2.0


async def test_idle_clock_restarts_with_every_read_so_a_slow_steady_stream_is_not_stalled(
    server: ScriptedServer,
) -> None:
    server.route(CHAT, reply_stream(chat_stream(*["t"] * 6), delay_s=0.12))
    timeouts = TimeoutConfig(deadline_s=5.0, idle_s=0.3)
    async with endpoint(server, timeouts=timeouts) as ep:
        result = await ep.chat(STREAM_USAGE)  # ~1.2 s in all, no gap near 0.3 s
    assert result.ok, result.error
    assert result.content == "tttttt"


@pytest.mark.timed
async def test_silence_after_some_events_fails_as_stalled_naming_the_bytes_read(
    server: ScriptedServer,
) -> None:
    parts = [sse(chunk("a")), sse(chunk("b"))]
    server.route(CHAT, reply_stream(parts, delay_s=0.1, end="hang"))
    timeouts = TimeoutConfig(deadline_s=5.0, idle_s=0.3)
    async with endpoint(server, timeouts=timeouts) as ep:
        started = time.perf_counter()
        result = await ep.chat(STREAM)
        elapsed = time.perf_counter() - started
    assert category(result) is ErrorCategory.STALLED
    assert result.content == "ab"
    assert 0.4 <= elapsed < 2.0
    assert result.error is not None
    assert f"no bytes for 0.3 s after {sum(map(len, parts))} body bytes" in result.error.message


@pytest.mark.timed
@pytest.mark.parametrize("end", ["hang", "reset"])
async def test_done_then_no_clean_end_keeps_the_answer_and_flags_it(
    server: ScriptedServer, end: str
) -> None:
    server.route(CHAT, reply_stream(chat_stream("ok"), end=end))
    async with endpoint(server) as ep:  # done_grace_s=0.2
        started = time.perf_counter()
        result = await ep.chat(STREAM_USAGE)
        elapsed = time.perf_counter() - started
    assert result.ok, result.error
    assert result.content == "ok"
    assert "unclean_end_after_done" in result.flags
    assert elapsed < 1.5


@pytest.mark.timed
async def test_one_byte_per_interval_is_cut_by_the_total_deadline(server: ScriptedServer) -> None:
    trickle = b"".join(chat_stream(*["token"] * 50))
    server.route(CHAT, reply_stream([bytes([b]) for b in trickle], delay_s=0.02))
    timeouts = TimeoutConfig(deadline_s=5.0, idle_s=0.5)
    async with endpoint(server, timeouts=timeouts) as ep:
        started = time.perf_counter()
        result = await ep.chat(STREAM, deadline_s=0.5)
    assert category(result) is ErrorCategory.TIMEOUT
    assert time.perf_counter() - started < 1.5


async def test_reset_mid_stream_keeps_partial_output_and_releases_the_connection(
    server: ScriptedServer,
) -> None:
    server.route(
        CHAT,
        reply_stream([sse(chunk("par")), sse(chunk("tial"))], end="reset", delay_s=0.01),
        reply_json(chat_body("next")),
    )
    async with endpoint(server) as ep:
        broken = await ep.chat(STREAM)
        after = await ep.chat(PLAIN)
    assert category(broken) is ErrorCategory.RESET
    assert broken.content == "partial"
    assert after.content == "next"


async def _not_http(request: Request, conn: Conn) -> None:
    await conn.send(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
    conn.close()


async def _short_body(request: Request, conn: Conn) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    await conn.send(head + b'{"choices"')
    conn.close()


@pytest.mark.parametrize(
    ("script", "expected"),
    [(_not_http, ErrorCategory.PROTOCOL), (_short_body, ErrorCategory.RESET)],
    ids=["not-http", "body-shorter-than-content-length"],
)
async def test_broken_http_framing_is_named_not_raised(
    server: ScriptedServer, script: Any, expected: ErrorCategory
) -> None:
    server.route(CHAT, script)
    async with endpoint(server) as ep:
        result = await ep.chat(PLAIN)
    assert category(result) is expected
    assert len(server.requests) == 1


HTTP_DATE_IN_30_S = "<an HTTP date 30 s from now>"


def http_date(seconds_ahead: float) -> str:
    return formatdate(time.time() + seconds_ahead, usegmt=True)


@pytest.mark.parametrize(
    ("headers", "low", "high"),
    [
        ({"Retry-After": "0.1"}, 0.1, 0.11),
        ({"Retry-After": "0"}, 0.0, 0.001),
        ({"retry-after-ms": "150"}, 0.15, 0.165),
        ({"Retry-After": "99999"}, 0.3, 0.3),
        ({"Retry-After": HTTP_DATE_IN_30_S}, 0.3, 0.3),
        ({"Retry-After": "-5"}, 0.01, 0.02),
        ({"Retry-After": "soon"}, 0.01, 0.02),
        ({}, 0.01, 0.02),
    ],
    ids=["float", "zero", "ms", "huge-capped", "http-date", "negative", "garbage", "absent"],
)
@pytest.mark.timed
@pytest.mark.parametrize("status", [429, 503])
async def test_retry_after_is_honoured_up_to_a_cap_and_the_wait_recorded(
    server: ScriptedServer, status: int, headers: dict[str, str], low: float, high: float
) -> None:
    # A date must be made when the test runs: one made at collection is past by then.
    headers = {k: http_date(30) if v == HTTP_DATE_IN_30_S else v for k, v in headers.items()}
    server.route(CHAT, reply_status(status, headers=headers), reply_json(chat_body("OK")))
    async with endpoint(server) as ep:
        result = await ep.chat(PLAIN)
    assert result.ok
    assert result.content == "OK"
    assert result.attempts == 2
    assert low <= result.waited_s <= high


async def test_rate_limit_past_the_retry_budget_fails_as_rate_limited(
    server: ScriptedServer,
) -> None:
    server.route(CHAT, reply_status(429, headers={"Retry-After": "0"}))
    async with endpoint(server) as ep:
        result = await ep.chat(PLAIN)
    assert category(result) is ErrorCategory.RATE_LIMITED
    assert result.error is not None
    assert result.error.attempts == FAST_RETRY.max_attempts
    assert len(server.requests) == FAST_RETRY.max_attempts


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (400, b"", ErrorCategory.REJECTED),
        (413, b"<html><body>Request Entity Too Large</body></html>", ErrorCategory.REJECTED),
        (422, b'{"error": {"message": "max_tokens must be positive"}}', ErrorCategory.REJECTED),
        (500, b"<html>" + b"Internal Server Error " * 100 + b"</html>", ErrorCategory.SERVER),
        (500, b"", ErrorCategory.SERVER),
    ],
    ids=["400-empty", "413-html", "422-json", "500-long-html", "500-empty"],
)
async def test_rejections_and_server_errors_are_never_retried_and_excerpted(
    server: ScriptedServer, status: int, body: bytes, expected: ErrorCategory
) -> None:
    server.route(CHAT, reply_status(status, body, content_type="text/html"))
    async with endpoint(server) as ep:
        result = await ep.chat(PLAIN)
    assert result.error is not None
    assert (result.error.category, result.error.status) == (expected, status)
    assert result.error.attempts == 1
    assert len(server.requests) == 1
    assert len(result.error.body_excerpt) <= 301
    if b"max_tokens" in body:
        assert "max_tokens must be positive" in result.error.message


async def test_both_sides_rejecting_the_same_way_read_the_same(server: ScriptedServer) -> None:
    server.route(CHAT, reply_json({"error": {"message": "context too long"}}, status=400))
    async with endpoint(server) as ep, OpenAIEndpoint("baseline", server.url) as base:
        a, b = await asyncio.gather(ep.chat(PLAIN), base.chat(PLAIN))
    assert a.error is not None
    assert b.error is not None
    assert (a.error.category, a.error.status, a.error.message) == (
        b.error.category,
        b.error.status,
        b.error.message,
    )


async def test_health_ok_while_inference_hangs_shows_only_in_a_real_completion(
    server: ScriptedServer,
) -> None:
    server.route("/health", reply_json({"status": "ok"})).route(CHAT, hang())
    async with endpoint(server) as ep:
        health = await ep.raw("GET", "../health")
        completion = await ep.chat({**PLAIN, "max_tokens": 1}, deadline_s=0.3)
    assert health.ok
    assert category(completion) is ErrorCategory.TIMEOUT


async def test_redirect_to_another_host_is_not_followed(server: ScriptedServer) -> None:
    server.route(CHAT, reply_status(307, headers={"Location": "http://evil.example/v1/chat"}))
    async with endpoint(server) as ep:
        result = await ep.chat(PLAIN)
    assert category(result) is ErrorCategory.PROTOCOL
    assert "evil.example" in (result.error.message if result.error else "")
    assert len(server.requests) == 1


@pytest.fixture
def self_signed(tmp_path: Path) -> ssl.SSLContext:
    """A server context with a certificate no trust store knows."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not installed")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


async def test_tls_failure_is_reported_never_worked_around(self_signed: ssl.SSLContext) -> None:
    context = self_signed
    async with ScriptedServer(ssl_context=context) as srv:
        srv.route(CHAT, reply_json(chat_body()))
        url = srv.url.replace("http://", "https://")
        async with OpenAIEndpoint("candidate", url, retry=FAST_RETRY) as ep:
            result = await ep.chat(PLAIN)
    assert result.error is not None
    assert result.error.category is ErrorCategory.TLS
    assert result.error.attempts == 1
    assert srv.requests == []


async def test_fully_buffered_stream_succeeds_but_is_flagged(server: ScriptedServer) -> None:
    whole = b"".join(chat_stream("a", "b", "c", "d"))
    result = await stream_of(server, [whole], first_delay_s=0.1)
    assert result.ok
    assert "buffered_stream" in result.flags


async def test_stream_with_spaced_chunks_is_not_flagged_buffered(server: ScriptedServer) -> None:
    result = await stream_of(server, chat_stream("a", "b", "c"), delay_s=0.02)
    assert result.ok
    assert "buffered_stream" not in result.flags
    assert len(result.timing.token_chunk_ns) == 3


# --- 26–35: semantically bad responses --------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"error": {"message": "model overloaded", "type": "server_error"}},
        {"object": "error", "message": "model overloaded"},
        {"error": "model overloaded"},
    ],
    ids=["error-object", "object-error", "error-string"],
)
async def test_http_200_with_an_error_body_fails_as_error_body(
    server: ScriptedServer, body: dict[str, Any]
) -> None:
    server.route(CHAT, reply_json(body))
    async with endpoint(server) as ep:
        result = await ep.chat(PLAIN)
    assert category(result) is ErrorCategory.ERROR_BODY
    assert "model overloaded" in (result.error.message if result.error else "")


async def test_usage_only_chunk_with_empty_choices_is_fine(server: ScriptedServer) -> None:
    result = await stream_of(server, chat_stream("hi", usage=True))
    assert result.ok
    assert result.usage is not None
    assert result.usage.completion_tokens == 1
    assert output_tokens(result) == (1, "usage")


async def test_content_chunk_without_choices_fails_as_schema(server: ScriptedServer) -> None:
    parts = [sse(chunk("a")), sse({"object": "chat.completion.chunk", "delta": {"content": "b"}})]
    result = await stream_of(server, [*parts, b"data: [DONE]\n\n"])
    assert category(result) is ErrorCategory.SCHEMA
    assert result.content == "a"


async def test_missing_usage_chunk_is_flagged_and_token_counts_marked_estimated(
    server: ScriptedServer,
) -> None:
    result = await stream_of(server, chat_stream("a", "b", usage=False))
    assert result.ok
    assert {"usage_missing", "chunk_tokens_estimated"} <= set(result.flags)
    assert output_tokens(result) == (2, "estimated")


async def test_streamed_logprob_entries_count_the_tokens_of_each_chunk(
    server: ScriptedServer,
) -> None:
    def lp(*tokens: str) -> dict[str, Any]:
        return {"content": [{"token": t, "logprob": -0.5, "top_logprobs": []} for t in tokens]}

    parts = [sse(chunk("ab", logprobs=lp("a", "b"))), sse(chunk("c", logprobs=lp("c")))]
    result = await stream_of(server, [*parts, b"data: [DONE]\n\n"], delay_s=0.01)
    assert result.timing.token_chunk_tokens == (2, 1)
    assert output_tokens(result) == (3, "logprobs")
    assert [e.token for e in result.logprobs or ()] == ["a", "b", "c"]


def call_delta(index: int | None = None, **fields: Any) -> dict[str, Any]:
    function = {k: v for k, v in fields.items() if k in ("name", "arguments")}
    delta: dict[str, Any] = {"function": function}
    if index is not None:
        delta["index"] = index
    if "id" in fields:
        delta["id"] = fields["id"]
    return delta


@pytest.mark.parametrize(
    ("deltas", "expected"),
    [
        (
            [call_delta(0, id="c1", name="f", arguments='{"a"'), call_delta(0, arguments=": 1}")],
            [("f", '{"a": 1}')],
        ),
        (
            [call_delta(id="c1", name="f", arguments='{"a"'), call_delta(arguments=": 1}")],
            [("f", '{"a": 1}')],
        ),
        (
            [
                call_delta(1, id="c2", name="g", arguments="{}"),
                call_delta(0, id="c1", name="f", arguments="{}"),
            ],
            [("f", "{}"), ("g", "{}")],
        ),
        (
            [
                call_delta(id="c1", name="f", arguments="{}"),
                call_delta(id="c2", name="g", arguments="{}"),
            ],
            [("f", "{}"), ("g", "{}")],
        ),
    ],
    ids=["indexed", "one-call-no-index", "parallel-out-of-order", "new-ids-no-index"],
)
async def test_tool_call_deltas_join_per_index_and_unambiguous_gaps_are_inferred(
    server: ScriptedServer, deltas: list[dict[str, Any]], expected: list[tuple[str, str]]
) -> None:
    parts = [sse(chunk(tool_calls=[d])) for d in deltas]
    result = await stream_of(server, [*parts, FINISH, b"data: [DONE]\n\n"])
    assert result.ok, result.error
    assert [(c.name, c.arguments) for c in result.tool_calls] == expected


@pytest.mark.parametrize(
    "deltas",
    [
        [
            call_delta(id="c1", name="f", arguments="{"),
            call_delta(id="c2", name="g", arguments="{"),
            call_delta(arguments="}"),
        ],
        [call_delta(0, id="c1", name="f", arguments="{}"), call_delta(0, id="c2", arguments="{}")],
    ],
    ids=["bare-fragment-with-two-open-calls", "second-id-on-the-same-index"],
)
async def test_ambiguous_tool_call_delta_fails_as_tool_index_never_merging_calls(
    server: ScriptedServer, deltas: list[dict[str, Any]]
) -> None:
    parts = [sse(chunk(tool_calls=[d])) for d in deltas]
    result = await stream_of(server, [*parts, FINISH, b"data: [DONE]\n\n"])
    assert category(result) is ErrorCategory.TOOL_INDEX


async def test_tool_arguments_that_are_not_json_are_flagged_with_the_raw_string(
    server: ScriptedServer,
) -> None:
    server.route(
        CHAT,
        reply_json(chat_body(None, tool_calls=[{"function": {"name": "f", "arguments": "{'a'"}}])),
    )
    async with endpoint(server) as ep:
        result = await ep.chat(PLAIN)
    assert result.ok
    assert "invalid_tool_args" in result.flags
    assert result.tool_calls[0].arguments == "{'a'"


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize("streaming", [False, True], ids=["body", "stream"])
async def test_non_finite_logprob_fails_as_non_finite_logprob(
    server: ScriptedServer, value: str, streaming: bool
) -> None:
    logprobs = {"content": [{"token": "a", "logprob": float(value), "top_logprobs": []}]}
    if streaming:
        frame = sse(chunk("a", logprobs=logprobs))  # json.dumps writes NaN/Infinity as servers do
        server.route(CHAT, reply_stream([frame, b"data: [DONE]\n\n"]))
    else:
        body = chat_body("a")
        body["choices"][0]["logprobs"] = logprobs
        server.route(CHAT, reply_json(body))
    async with endpoint(server) as ep:
        result = await ep.chat({**(STREAM if streaming else PLAIN), "logprobs": True})
    assert category(result) is ErrorCategory.NON_FINITE_LOGPROB


@pytest.mark.parametrize(
    ("message", "finish_reason", "content"),
    [
        ({"content": "done"}, "stop", "done"),
        ({"content": "cut"}, "length", "cut"),
        ({"content": ""}, "stop", ""),
        ({"content": None}, "stop", None),
        ({}, None, None),
    ],
    ids=["stop", "length", "empty-string", "null", "missing"],
)
async def test_finish_reason_and_null_versus_empty_content_stay_distinct(
    server: ScriptedServer,
    message: dict[str, Any],
    finish_reason: str | None,
    content: str | None,
) -> None:
    body = {"choices": [{"index": 0, "message": message, "finish_reason": finish_reason}]}
    server.route(CHAT, reply_json(body))
    async with endpoint(server) as ep:
        result = await ep.chat(PLAIN)
    assert result.ok
    assert (result.finish_reason, result.content) == (finish_reason, content)


async def test_a_stream_without_a_finish_reason_is_truncated_even_after_done(
    server: ScriptedServer,
) -> None:
    # Stock llama-cpp-python ends a stream that a newer request interrupted exactly so (issue
    # 18): HTTP 200, `[DONE]`, no finish_reason. A stream is complete only when it says so.
    parts = [sse(chunk("", role="assistant")), sse(chunk("x")), b"data: [DONE]\n\n"]
    result = await stream_of(server, parts)
    assert not result.ok
    assert result.error is not None
    assert result.error.category is ErrorCategory.TRUNCATED
    assert "no finish_reason" in result.error.message
    assert result.finish_reason is None
    assert result.content == "x"  # the partial answer is kept


def embedding_body(*vectors: Any) -> dict[str, Any]:
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    return {"object": "list", "data": data, "model": "e"}


@pytest.mark.parametrize(
    ("inputs", "vectors"),
    [
        (["a", "b"], [[0.1, 0.2], [0.1, 0.2, 0.3]]),
        (["a", "b"], [[0.1, 0.2]]),
        (["a"], [[0.1, math.nan]]),
        (["a"], [[0.0, 0.0]]),
    ],
    ids=["ragged-dimension", "wrong-count", "nan", "zero-norm"],
)
async def test_invalid_embeddings_fail_as_embedding_invalid(
    server: ScriptedServer, inputs: list[str], vectors: list[list[float]]
) -> None:
    server.route("/v1/embeddings", reply_json(embedding_body(*vectors)))
    async with endpoint(server) as ep:
        result = await ep.embeddings({"model": "e", "input": inputs})
    assert result.error is not None
    assert result.error.category is ErrorCategory.EMBEDDING_INVALID


async def test_embeddings_of_the_requested_dimension_are_returned_in_index_order(
    server: ScriptedServer,
) -> None:
    body = embedding_body([0.0, 1.0], [1.0, 0.0])
    body["data"].reverse()
    server.route("/v1/embeddings", reply_json(body))
    async with endpoint(server) as ep:
        result = await ep.embeddings({"model": "e", "input": ["a", "b"], "dimensions": 2})
    assert result.ok
    assert result.vectors == ((0.0, 1.0), (1.0, 0.0))


@pytest.mark.parametrize("streaming", [False, True], ids=["body", "stream"])
async def test_lone_surrogate_is_cleaned_on_intake_and_flagged(
    server: ScriptedServer, streaming: bool
) -> None:
    if streaming:
        parts = [b'data: {"choices":[{"index":0,"delta":{"content":"a\\ud800b"}}]}\n\n']
        server.route(CHAT, reply_stream([*parts, b"data: [DONE]\n\n"]))
    else:
        server.route(CHAT, reply_json(chat_body("a\ud800b")))
    async with endpoint(server) as ep:
        result = await ep.chat(STREAM if streaming else PLAIN)
    assert result.content == "a\ufffdb"
    assert "surrogates_cleaned" in result.flags
    (result.content or "").encode("utf-8")


async def test_surrogate_pair_split_across_deltas_is_joined_not_flagged(
    server: ScriptedServer,
) -> None:
    parts = [
        b'data: {"choices":[{"index":0,"delta":{"content":"\\ud83d"}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{"content":"\\ude00"}}]}\n\n',
        b"data: [DONE]\n\n",
    ]
    result = await stream_of(server, parts)
    assert result.content == "\U0001f600"
    assert "surrogates_cleaned" not in result.flags


async def test_nul_and_ansi_in_output_are_kept_verbatim_and_escaped_in_error_excerpts(
    server: ScriptedServer,
) -> None:
    hostile = "ok\x00\x1b[2J\x1b]0;pwned\x07"
    server.route(
        CHAT,
        reply_json(chat_body(hostile)),
        reply_status(500, hostile.encode(), content_type="text/plain"),
    )
    async with endpoint(server) as ep:
        kept = await ep.chat(PLAIN)
        failed = await ep.chat(PLAIN)
    assert kept.content == hostile  # reports neutralise it; the evidence is not rewritten
    assert failed.error is not None
    assert "\x1b" not in failed.error.body_excerpt
    assert "\x00" not in failed.error.body_excerpt
    assert "\\x1b[2J" in failed.error.body_excerpt


# --- resources and secrets --------------------------------------------------------------------


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_thousands_of_failing_requests_leak_no_connections(server: ScriptedServer) -> None:
    server.route(
        CHAT,
        reply_status(500, b"boom"),
        reply_stream([sse(chunk("x"))], end="reset"),
        reply_json({"error": "bad"}),
        reply_status(400),
    )
    server.routes[CHAT] *= 600
    before = open_fds()
    async with endpoint(server, max_connections=16) as ep:
        results = await asyncio.gather(
            *(ep.chat(STREAM if i % 4 == 1 else PLAIN) for i in range(2000))
        )
        during = open_fds()
    for _ in range(100):  # both ends close on the next loop turns
        if open_fds() <= before:
            break
        await asyncio.sleep(0.01)
    assert all(not r.ok for r in results)
    assert during - before <= 2 * 16 + 4  # client and server ends of at most 16 pooled sockets
    assert open_fds() <= before
    assert server.connections < 700  # keep-alive reused connections that stayed healthy


async def test_api_key_is_sent_as_bearer_and_never_shown(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-canary-0123456789"
    monkeypatch.setenv("SERVEGATE_TEST_KEY", secret)
    server.route(CHAT, reply_json({"error": {"message": "nope"}}, status=401))
    async with endpoint(server, api_key_env="SERVEGATE_TEST_KEY") as ep:
        result = await ep.chat(PLAIN)
        shown = repr(ep) + repr(result)
    assert server.requests[0].headers["authorization"] == f"Bearer {secret}"
    assert secret not in shown


# --- the completions path and raw requests ----------------------------------------------------

COMPLETIONS = "/v1/completions"


def legacy_chunk(text: str, tokens: list[str], values: list[float | None]) -> bytes:
    logprobs = {
        "tokens": tokens,
        "token_logprobs": values,
        "top_logprobs": [
            None if v is None else {t: v} for t, v in zip(tokens, values, strict=True)
        ],
        "text_offset": [],
    }
    return sse({"choices": [{"index": 0, "text": text, "logprobs": logprobs}]})


async def test_streamed_completion_with_echo_splits_prompt_logprobs(
    server: ScriptedServer,
) -> None:
    parts = [
        legacy_chunk("Hi there", ["Hi", " there"], [None, -2.0]),
        legacy_chunk("!", ["!"], [-0.25]),
        FINISH,
        sse({"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 1}}),
        b"data: [DONE]\n\n",
    ]
    server.route(COMPLETIONS, reply_stream(parts))
    body = {"model": "m", "prompt": "Hi there", "echo": True, "logprobs": 1, "stream": True}
    async with endpoint(server) as ep:
        result = await ep.completion(body)
    assert result.ok, result.error
    assert result.content == "Hi there!"
    assert result.prompt_logprobs is not None
    assert [None if e is None else e.token for e in result.prompt_logprobs] == [None, " there"]
    assert [(e.token, e.logprob) for e in result.logprobs or ()] == [("!", -0.25)]


async def test_non_streamed_completion_reads_text_and_finish_reason(
    server: ScriptedServer,
) -> None:
    body = {"choices": [{"index": 0, "text": " Paris", "finish_reason": "length"}]}
    server.route(COMPLETIONS, reply_json(body))
    async with endpoint(server) as ep:
        result = await ep.completion({"model": "m", "prompt": "Capital of France:"})
    assert (result.content, result.finish_reason) == (" Paris", "length")


async def test_reasoning_and_tool_call_deltas_stamp_tokens_but_the_role_chunk_does_not(
    server: ScriptedServer,
) -> None:
    parts = [
        sse(chunk("", role="assistant")),
        sse(chunk(reasoning_content="think")),
        sse(chunk(tool_calls=[call_delta(0, id="c", name="f", arguments="{}")])),
        sse(chunk("done")),
        FINISH,
        b"data: [DONE]\n\n",
    ]
    result = await stream_of(server, parts, delay_s=0.01)
    assert result.ok
    assert (result.reasoning, result.content) == ("think", "done")
    assert len(result.timing.token_chunk_ns) == 3
    assert result.timing.ttft_ms is not None
    assert result.timing.headers_ns is not None
    assert result.timing.token_chunk_ns[0] > result.timing.headers_ns


async def test_raw_requests_resolve_relative_to_the_base_url_and_keep_any_status(
    server: ScriptedServer,
) -> None:
    server.route("/version", reply_json({"version": "0.25.1"}))
    server.route("/v1/models", reply_status(503, b"warming up"))
    async with endpoint(server) as ep:
        version = await ep.raw("GET", "../version")
        models = await ep.raw("GET", "/models")
    assert version.json() == {"version": "0.25.1"}
    assert (models.status, models.ok, models.error) == (503, False, None)
    assert [r.path for r in server.requests] == ["/version", "/v1/models"]


async def test_cancelling_a_stream_releases_it_and_the_next_request_is_served(
    server: ScriptedServer,
) -> None:
    streaming = asyncio.Event()
    endless = reply_stream([sse(chunk("a"))] * 100, delay_s=0.05)

    async def stream_and_signal(request: Request, conn: Conn) -> None:
        streaming.set()
        await endless(request, conn)

    server.route(CHAT, stream_and_signal, reply_json(chat_body("after")))
    async with endpoint(server) as ep:
        task = asyncio.create_task(ep.chat(STREAM))
        await streaming.wait()
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        after = await ep.chat(PLAIN)
    assert after.content == "after", after.error
