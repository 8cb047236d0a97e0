"""Bad input to `servegate gate`: one clear line naming the problem, exit 2 or 3, no traceback."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class _HtmlSite(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html><body>Not Found</body></html>"
        self.send_response(404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture(scope="module")
def html_site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HtmlSite)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@pytest.fixture
def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def servegate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servegate", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def _one_clear_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_unreachable_endpoint_exits_3_naming_the_side(closed_port_url: str) -> None:
    other = closed_port_url.replace("/v1", "/other/v1")
    proc = servegate(
        "gate",
        "--baseline",
        closed_port_url,
        "--candidate",
        other,
        "--no-store",
        "--probe-deadline-s",
        "3",
    )
    assert proc.returncode == 3
    line = _one_clear_line(proc)
    assert "baseline" in line
    assert "unreachable" in line


def test_a_server_that_is_not_openai_is_a_usage_error(html_site: str) -> None:
    proc = servegate("gate", "--baseline", html_site, "--candidate", html_site + "/x", "--no-store")
    assert proc.returncode == 2
    line = _one_clear_line(proc)
    assert "does not look like an OpenAI-compatible server" in line
    assert "404" in line


def test_baseline_equal_to_candidate_is_a_usage_error() -> None:
    proc = servegate(
        "gate",
        "--baseline",
        "http://127.0.0.1:9/v1",
        "--candidate",
        "http://127.0.0.1:9/v1/",
        "--no-store",
    )
    assert proc.returncode == 2
    assert "same endpoint" in _one_clear_line(proc)


def test_unknown_option_is_a_usage_error() -> None:
    proc = servegate("gate", "--baseline", "http://a/v1", "--candidate", "http://b/v1", "--bogus")
    assert proc.returncode == 2
    assert "--bogus" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_api_key_variable_is_named_without_a_value(closed_port_url: str) -> None:
    env = {k: v for k, v in __import__("os").environ.items() if k != "SERVEGATE_TEST_KEY"}
    proc = servegate(
        "gate",
        "--baseline",
        closed_port_url,
        "--candidate",
        closed_port_url.replace("/v1", "/w/v1"),
        "--api-key-env",
        "SERVEGATE_TEST_KEY",
        "--no-store",
        env=env,
    )
    assert proc.returncode == 2
    assert "SERVEGATE_TEST_KEY" in _one_clear_line(proc)


def test_a_url_without_scheme_is_a_usage_error() -> None:
    proc = servegate(
        "gate", "--baseline", "127.0.0.1:8000", "--candidate", "http://b/v1", "--no-store"
    )
    assert proc.returncode == 2
    assert "baseline.url" in _one_clear_line(proc)
