"""The client's edges: a header value with a line break is refused before anything is sent, an
IDN host is asked by its IDNA name, HEAD does not wait for a body, every socket read keeps its
own arrival time, and https (aiohttp) succeeds against a TLS server the client trusts."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from servegate.cli.probe_cmd import probe
from servegate.endpoints import ErrorCategory
from servegate.endpoints.errors import EndpointError
from servegate.endpoints.http import OpenAIEndpoint
from servegate.endpoints.retry import RetryConfig
from servegate.endpoints.scripted import Conn, Request, ScriptedServer
from servegate.endpoints.transport import TimeoutConfig
from servegate.endpoints.wire import WireBody, WireConnection

ONCE = RetryConfig(max_attempts=1)
KEY = "sk-newline-canary-93c1"


@pytest.fixture
async def server() -> AsyncIterator[ScriptedServer]:
    async with ScriptedServer() as srv:
        yield srv


@pytest.mark.parametrize("value", [f"{KEY}\n", f"{KEY}\r\n", f"sk\r\nX-Injected: 1{KEY}"],
                         ids=["lf", "crlf", "injected-header"])  # fmt: skip
def test_an_api_key_with_a_line_break_is_refused_naming_the_variable_not_the_value(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("SERVEGATE_TEST_KEY", value)
    with pytest.raises(EndpointError) as refused:
        OpenAIEndpoint("candidate", "http://127.0.0.1:9/v1", api_key_env="SERVEGATE_TEST_KEY")
    assert "SERVEGATE_TEST_KEY" in str(refused.value)
    assert KEY not in str(refused.value)
    # the command line: one line, exit code 2, nothing sent
    result = CliRunner().invoke(
        probe, ["http://127.0.0.1:9/v1", "--api-key-env", "SERVEGATE_TEST_KEY"]
    )
    assert result.exit_code == 2, result.output
    [line] = result.output.strip().splitlines()
    assert line.startswith("servegate: error: API key variable SERVEGATE_TEST_KEY holds a line")
    assert KEY not in result.output


def test_a_header_given_with_a_line_break_is_refused_by_name() -> None:
    with pytest.raises(EndpointError, match="header X-Team holds a line break") as refused:
        OpenAIEndpoint("candidate", "http://127.0.0.1:9/v1", headers={"X-Team": "a\r\nb"})
    assert "a\r\nb" not in str(refused.value)


async def test_an_idn_host_is_looked_up_by_its_idna_name_not_a_crash() -> None:
    # `.invalid` never resolves: the request fails as infrastructure, naming the encoded host
    async with OpenAIEndpoint("candidate", "http://例え.invalid:9/v1", retry=ONCE) as ep:
        result = await ep.raw("GET", "models", deadline_s=10)
    assert result.error is not None, result
    assert result.error.category is ErrorCategory.INFRA


async def test_an_idn_host_is_sent_idna_encoded_in_the_host_header(server: ScriptedServer) -> None:
    # A name that resolves on every machine: `localhost` spelt with a fullwidth `ｌ` (U+FF4C),
    # which IDNA maps to `localhost` — the Host header must carry that ASCII form.
    async def answer(request: Request, conn: Conn) -> None:
        body = json.dumps({"host": request.headers.get("host")}).encode()
        await conn.send(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip

    server.route("/v1/models", answer)
    async with OpenAIEndpoint("candidate", f"http://ｌocalhost:{server.port}/v1",
                              retry=ONCE) as ep:  # fmt: skip
        result = await ep.raw("GET", "models", deadline_s=10)
    assert result.error is None, result.error
    assert result.json() == {"host": f"localhost:{server.port}"}


async def _head_answer(request: Request, conn: Conn) -> None:
    # A HEAD answer announces the length of the body a GET would get, and sends none.
    await conn.send(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 1234\r\n\r\n")  # fmt: skip


async def test_head_does_not_wait_for_the_body_it_announces(server: ScriptedServer) -> None:
    server.route("/v1/models", _head_answer)
    timeouts = TimeoutConfig(deadline_s=5.0, idle_s=2.0, done_grace_s=0.2)
    async with OpenAIEndpoint("candidate", server.url, retry=ONCE, timeouts=timeouts) as ep:
        t0 = time.perf_counter()
        result = await ep.raw("HEAD", "models")
        elapsed_s = time.perf_counter() - t0
        again = await ep.raw("HEAD", "models")  # and the connection serves the next request
    assert result.error is None, result.error
    assert (result.status, again.status, again.error) == (200, 200, None)
    assert elapsed_s < 1.0
    assert server.connections == 1


class _Transport(asyncio.Transport):
    """What WireConnection writes to, kept (asyncio's Transport, the part it uses)."""

    def __init__(self) -> None:
        super().__init__()
        self.written = b""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def abort(self) -> None:
        pass


async def test_reads_before_the_body_is_pumped_keep_their_own_arrival_times() -> None:
    conn = WireConnection()
    conn.connection_made(_Transport())
    head = conn.send(b"GET / HTTP/1.1\r\n\r\n")
    conn.data_received(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                       b"Transfer-Encoding: chunked\r\n\r\n")  # fmt: skip
    await head
    events = [b"data: 1\n\n", b"data: 2\n\n", b"data: 3\n\n"]
    stamps = []
    for event in events:  # three reads arrive before anyone reads the body
        conn.data_received(b"%x\r\n%s\r\n" % (len(event), event))
        stamps.append(conn.last_read_ns)
        await asyncio.sleep(0.01)
    conn.data_received(b"0\r\n\r\n")
    seen: list[tuple[bytes, int]] = []
    await WireBody(conn, idle_s=1.0).pump(lambda d, t: seen.append((d, t)), 0.1, lambda: False)
    assert [d for d, _ in seen] == events
    assert [t for _, t in seen] == stamps
    assert stamps[0] < stamps[1] < stamps[2]


def test_the_http_stack_of_each_scheme_is_named() -> None:
    from servegate.endpoints.http import http_stack

    assert http_stack("http://127.0.0.1:8000/v1").startswith("servegate wire")
    assert http_stack("https://example.com/v1").startswith("aiohttp ")


# --- https: a real TLS handshake against a certificate the client trusts ----------------------

TLS_CHILD = r"""
import asyncio, json, ssl, sys
from servegate.endpoints.http import OpenAIEndpoint
from servegate.endpoints.scripted import (
    ScriptedServer, chat_body, chat_stream, reply_json, reply_stream)

async def main(cert, key):
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    async with ScriptedServer(ssl_context=server_ctx) as srv:
        srv.route("/v1/chat/completions", reply_stream(chat_stream("O", "K")),
                  reply_json(chat_body("OK")))
        url = srv.url.replace("http://", "https://")
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        async with OpenAIEndpoint("candidate", url) as ep:
            streamed = await ep.chat({**body, "stream": True})
            plain = await ep.chat(body)
    print(json.dumps({
        "streamed": [streamed.content, streamed.error and streamed.error.message],
        "plain": [plain.content, plain.error and plain.error.message],
        "ttft_ms": streamed.timing.ttft_ms, "requests": len(srv.requests),
    }))

asyncio.run(main(*sys.argv[1:]))
"""


def test_https_succeeds_against_a_tls_server_the_client_trusts(tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not installed")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    # The child trusts the certificate the way a user trusts a private CA: SSL_CERT_FILE.
    env = {**os.environ, "SSL_CERT_FILE": str(cert)}
    child = subprocess.run([sys.executable, "-c", TLS_CHILD, str(cert), str(key)],
                           capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert child.returncode == 0, child.stderr
    out = json.loads(child.stdout)
    assert out["streamed"] == ["OK", None]
    assert out["plain"] == ["OK", None]
    assert out["ttft_ms"] > 0
    assert out["requests"] == 2
