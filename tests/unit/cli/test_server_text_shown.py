"""Text a server chose — its model id, its error messages — is shown, never interpreted: Rich
markup stays literal (and cannot crash the table), ANSI escapes are shown as `\\x1b`, in
`servegate probe` and `servegate runs`."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from servegate.cli import runs_cmd
from servegate.cli.probe_cmd import probe
from servegate.cli.runs_cmd import runs
from servegate.store.writer import RunWriter, open_engine

MODEL = "[bold red]m[/]\x1b[31mX"
ERROR = "[/] boom \x1b[2J[link=http://evil.example]x[/link]"


class _Hostile(BaseHTTPRequestHandler):
    def _send(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        else:
            self._send(404, {"error": {"message": ERROR}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(length)
        self._send(500, {"error": {"message": ERROR}})

    def log_message(self, *args: object) -> None:
        pass


def _squash(text: str) -> str:
    """Without spaces, line breaks and table borders: a table cell wraps where it likes."""
    return re.sub(r"[\s│┃]", "", text)


@pytest.fixture
def hostile_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()
    thread.join()


def test_probe_shows_a_hostile_model_id_and_error_text_literally(hostile_url: str) -> None:
    result = CliRunner().invoke(probe, [hostile_url, "--deadline-s", "5"])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output
    assert "[bold red]m[/]\\x1b[31mX" in result.output
    assert _squash("boom \\x1b[2J[link=http://evil.example]x[/link]") in _squash(result.output)


def test_runs_shows_a_hostile_model_id_and_reason_literally(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One line per run, so the cells are read whole: a console 400 columns wide. Setting COLUMNS
    # is not enough: the shared console reads it once, when it is imported (a pytest-xdist
    # worker exports COLUMNS=80 before that).
    monkeypatch.setattr(runs_cmd, "stdout", Console(width=400, highlight=False, soft_wrap=False))
    # A short --db: the table's title names it, and a long tmp_path (a pytest-xdist worker's
    # folder) folded the title and the cells under it at 80 columns.
    monkeypatch.chdir(tmp_path)
    db = Path("runs.db")
    writer = RunWriter.start(open_engine(db), baseline_url="http://b/v1\x1b[2J",
                             candidate_url="http://c/v1", model=MODEL, config={})  # fmt: skip
    writer.crashed(f"RuntimeError: {ERROR}")
    result = CliRunner().invoke(runs, ["--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output
    assert f"RuntimeError: {ERROR}".replace("\x1b", "\\x1b") in result.output
    assert "http://b/v1\\x1b[2J" in result.output
