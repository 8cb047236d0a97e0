"""Bad input to `servegate gate`: one clear line naming the problem, exit 2 or 3, no traceback."""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from servegate.store.writer import open_engine


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


class _ModelsOnly(BaseHTTPRequestHandler):
    """Passes preflight (GET …/models) under any base path; nothing else is needed here."""

    def do_GET(self) -> None:
        body = json.dumps({"object": "list", "data": [{"id": "m"}]}).encode()
        self.send_response(200 if self.path.endswith("/models") else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return None


def _serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def html_site() -> Iterator[str]:
    yield from _serve(_HtmlSite)


@pytest.fixture(scope="module")
def models_site() -> Iterator[str]:
    yield from _serve(_ModelsOnly)


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
    # named by the option the user typed (issue 28), not the configuration key baseline.url
    assert _one_clear_line(proc).startswith("servegate: error: --baseline: ")


def test_a_database_that_refuses_writes_is_one_line_naming_it_and_exit_2(
    models_site: str, tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    open_engine(db).dispose()  # an existing database, opened read-only below
    proc = servegate(
        "gate",
        "--baseline",
        models_site,
        "--candidate",
        models_site.replace("/v1", "/other/v1"),
        "--db",
        f"sqlite:///file:{db}?mode=ro&uri=true",
        "--quiet",
    )
    assert proc.returncode == 2
    line = _one_clear_line(proc)
    assert line == (
        f"servegate: error: cannot start a run in the database file:{db}: attempt to write a "
        "readonly database (the file, its -wal/-shm files or its folder is read-only)"
    )
    with sqlite3.connect(db) as conn:
        assert conn.execute("select count(*) from runs").fetchone() == (0,)
