"""Ctrl-C during a gate: exit 130 (128 + SIGINT) and one line, never click's "Aborted!" with
exit 1 — which a CI script reads as a rollback."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

pytestmark = pytest.mark.timeout(60)


def _terminal_signals() -> None:
    # A test runner started as a background job ignores SIGINT, and its children inherit that.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def silent_server() -> Iterator[socket.socket]:
    """A loopback server that accepts connections and never answers: the gate waits on it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        sock.settimeout(40)
        yield sock


def test_ctrl_c_during_a_gate_exits_130_with_one_line_and_no_traceback(
    silent_server: socket.socket,
) -> None:
    port = silent_server.getsockname()[1]
    child = subprocess.Popen(
        [sys.executable, "-m", "servegate", "gate", "--baseline", f"http://127.0.0.1:{port}/v1",
         "--candidate", f"http://localhost:{port}/v1", "--no-store", "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_terminal_signals,
    )  # fmt: skip
    try:
        conn, _ = silent_server.accept()  # the gate is running: preflight waits for /models
        time.sleep(0.5)
        assert child.poll() is None, child.communicate()
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == "servegate: interrupted", stderr
    assert "Aborted!" not in stderr
    assert "Traceback" not in stderr
    conn.close()
