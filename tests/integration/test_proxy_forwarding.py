"""Bounded memory and honest forwarding, against small upstreams served on loopback (no engine):
slow uploads time out, the bodies buffered at once are limited, the queues share a byte cap,
headers named in `Connection` stay behind, `X-Forwarded-For` is appended, a 502 does not name
the upstream, a gzip-compressing primary is measured (not called broken), and no request path
leaves the configured upstream prefix."""

from __future__ import annotations

import gzip
import json
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from servegate.proxy import Proxy, ProxySettings, Upstream

from .proxy_harness import metric, serve_in_thread, start_proxy

ANSWER = {
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Four."},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}  # fmt: skip
CHAT = json.dumps({"messages": [{"role": "user", "content": "2+2?"}], "temperature": 0}).encode()


class Upstream_:
    """A fake OpenAI server that records what it was sent; gzip when asked and `compress`."""

    def __init__(self, *, compress: bool = False) -> None:
        self.seen: list[dict[str, Any]] = []
        self.compress = compress

    def app(self) -> Starlette:
        async def any_path(request: Request) -> Response:
            body = await request.body()
            self.seen.append({"path": request.url.path, "raw": request.scope.get("raw_path"),
                              "headers": dict(request.headers), "body": body})  # fmt: skip
            data = json.dumps(ANSWER).encode()
            if self.compress and "gzip" in request.headers.get("accept-encoding", ""):
                return Response(gzip.compress(data), media_type="application/json",
                                headers={"content-encoding": "gzip"})  # fmt: skip
            return JSONResponse(ANSWER)

        return Starlette(routes=[Route("/{path:path}", any_path, methods=["GET", "POST"])])


@contextmanager
def proxied(upstream: Upstream_, **settings: Any) -> Iterator[str]:
    with serve_in_thread(upstream.app()) as origin:
        config = ProxySettings(
            primary=Upstream.parse("primary", settings.pop("primary", origin + "/llm/v1")),
            candidate=Upstream.parse("candidate", "http://127.0.0.1:10/v1"),
            sample=settings.pop("sample", 0.0),
            **settings,
        )
        with serve_in_thread(Proxy(config).app()) as url:
            yield url


def raw_request(url: str, head: bytes, body: bytes = b"", *, wait_s: float = 10.0) -> bytes:
    """Send `head` and `body` as they are; what comes back (until close or `wait_s`)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait_s) as sock:
        sock.sendall(head + body)
        out = b""
        try:
            while chunk := sock.recv(65536):
                out += chunk
                if b"\r\n\r\n" in out and _complete(out):
                    break
        except TimeoutError:
            pass
        return out


def _complete(data: bytes) -> bool:
    head, _, body = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False


def post(path: str, body: bytes, *extra: bytes) -> bytes:
    lines = [f"POST {path} HTTP/1.1".encode(), b"Host: proxy", b"Content-Type: application/json",
             f"Content-Length: {len(body)}".encode(), *extra]  # fmt: skip
    return b"\r\n".join(lines) + b"\r\n\r\n"


def status(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def test_headers_named_in_connection_stay_behind_and_x_forwarded_for_is_appended(
    tmp_path: Path,
) -> None:
    upstream = Upstream_()
    with (
        serve_in_thread(upstream.app()) as origin,
        start_proxy("--primary", origin + "/v1", "--candidate", "http://127.0.0.1:10/v1",
                    "--sample", "0", "--db", str(tmp_path / "p.db")) as proxy,
    ):  # fmt: skip
        # the user's X-Forwarded-For is kept as their claim; the peer is appended, not replaced
        head = post("/v1/chat/completions", CHAT, b"Connection: keep-alive, X-Secret-Hop",
                    b"X-Secret-Hop: internal", b"X-Forwarded-For: 203.0.113.9")  # fmt: skip
        answer = raw_request(proxy.url, head, CHAT)
    assert status(answer) == 200, answer[:200]
    [seen] = upstream.seen
    assert "x-secret-hop" not in seen["headers"]
    assert seen["headers"]["x-forwarded-for"] == "203.0.113.9, 127.0.0.1"


def test_a_502_does_not_name_the_upstream() -> None:
    with proxied(Upstream_(), primary="http://127.0.0.1:9/v1") as url:
        answer = raw_request(url, post("/v1/chat/completions", CHAT), CHAT)
    assert status(answer) == 502
    body = answer.partition(b"\r\n\r\n")[2]
    assert b"127.0.0.1" not in body, body
    assert b":9" not in body, body
    assert b"primary is unreachable" in body


def test_a_slow_upload_is_cut_at_the_body_read_timeout() -> None:
    upstream = Upstream_()
    with proxied(upstream, body_read_timeout_s=0.5) as url:
        began = time.monotonic()
        head = post("/v1/chat/completions", b"x" * 1000)
        answer = raw_request(url, head, b"x" * 10, wait_s=10)  # 990 bytes never come
        took = time.monotonic() - began
    assert status(answer) == 408, answer[:200]
    assert took < 5
    assert upstream.seen == []


def test_bodies_buffered_at_once_are_limited() -> None:
    upstream = Upstream_()
    with proxied(upstream, max_body_reads=1, body_read_timeout_s=5.0) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as slow:
            slow.sendall(post("/v1/chat/completions", b"x" * 1000) + b"x" * 10)
            time.sleep(0.3)  # the first upload is being buffered
            second = raw_request(url, post("/v1/chat/completions", CHAT), CHAT)
    assert status(second) == 503, second[:300]
    assert b"retry-after" in second.lower()


def test_a_gzip_compressing_primary_is_measured_not_called_broken() -> None:
    upstream = Upstream_(compress=True)
    with proxied(upstream) as url:
        head = post("/v1/chat/completions", CHAT, b"Accept-Encoding: gzip, br")
        answer = raw_request(url, head, CHAT)
        time.sleep(0.3)  # measured after the last byte
        exposition = raw_request(url, b"GET /servegate/metrics HTTP/1.1\r\nHost: p\r\n\r\n")
    assert status(answer) == 200
    assert b"content-encoding: gzip" in answer.lower()  # the user gets what was asked for
    assert upstream.seen[0]["headers"]["accept-encoding"] == "gzip"  # only what we can read
    text = exposition.partition(b"\r\n\r\n")[2].decode()
    assert metric(text, "servegate_proxy_errors_total", side="primary") == 0.0
    assert metric(text, "servegate_proxy_answers_total", side="primary", answer_class="ok") == 1.0


def test_no_path_leaves_the_upstream_prefix() -> None:
    upstream = Upstream_()
    paths = ["/v1/../admin", "/v1/%2e%2e/admin", "/v1/%2E%2e/%2e%2E/admin", "/v1/./models",
             "/v1%2f..%2fadmin", "/v1/..\\admin"]  # fmt: skip
    with proxied(upstream) as url:
        answers = {p: raw_request(url, f"GET {p} HTTP/1.1\r\nHost: p\r\n\r\n".encode())
                   for p in paths}  # fmt: skip
        fine = raw_request(url, b"GET /v1/models HTTP/1.1\r\nHost: p\r\n\r\n")
    assert {p: status(a) for p, a in answers.items()} == dict.fromkeys(paths, 400)
    assert status(fine) == 200
    assert [s["path"] for s in upstream.seen] == ["/llm/v1/models"]


def test_the_mirror_queue_drops_once_the_byte_cap_is_reached() -> None:
    upstream = Upstream_()
    big = json.dumps({"messages": [{"role": "user", "content": "x" * 5000}]}).encode()
    with proxied(upstream, sample=1.0, max_queued_bytes=4096) as url:
        answer = raw_request(url, post("/v1/chat/completions", big), big)
        time.sleep(0.3)
        health = json.loads(
            raw_request(url, b"GET /servegate/healthz HTTP/1.1\r\nHost: p\r\n\r\n").partition(
                b"\r\n\r\n"
            )[2]
        )
    assert status(answer) == 200
    assert health["mirror_dropped"] == 1
