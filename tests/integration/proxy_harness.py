"""`servegate proxy` started as a user starts it (its own process, an OS-picked port), stopped
by its own PID; and the engine's answers normalised for comparison (ids and timestamps differ
between any two requests, to the engine itself too)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

VOLATILE = ("id", "created", "system_fingerprint")
PROXY = (sys.executable, "-m", "servegate", "proxy")


@dataclass(frozen=True)
class RunningProxy:
    url: str  # http://127.0.0.1:PORT
    process: subprocess.Popen[str]
    admin_url: str | None = None  # the admin address (canary mode), http://127.0.0.1:PORT

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def health(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + "/servegate/healthz", timeout=10) as response:
            value: dict[str, Any] = json.loads(response.read())
            return value

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url + "/servegate/metrics", timeout=10) as response:
            text: str = response.read().decode()
            return text

    def wait_health(self, key: str, at_least: int, timeout_s: float = 30.0) -> dict[str, Any]:
        """healthz once `key` reached `at_least` (the mirror and the recorder work after the
        user's answer, so a test waits for them instead of sleeping)."""
        deadline = time.monotonic() + timeout_s
        while True:
            health = self.health()
            if health[key] >= at_least or time.monotonic() > deadline:
                return health
            time.sleep(0.1)

    def wait_idle(self, timeout_s: float = 90.0) -> dict[str, Any]:
        """healthz once nothing is left to mirror, compare or write (earlier tests' pairs
        finish after their user's answer: a test that counts waits for them first)."""
        deadline = time.monotonic() + timeout_s
        keys = ("in_flight", "mirror_queue_depth", "mirror_in_flight", "records_pending")
        while True:
            health = self.health()
            if not any(health[k] for k in keys):
                return health
            if time.monotonic() > deadline:
                raise AssertionError(f"the proxy did not settle: {health}")
            time.sleep(0.1)


def metric(text: str, name: str, **labels: str) -> float:
    """One sample's value in a Prometheus exposition (0 when absent: a counter never touched)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    head = f"{name}{{{want}}}" if labels else name
    for line in text.splitlines():
        if line.startswith(head + " "):
            return float(line.split()[-1])
    return 0.0


@contextmanager
def start_proxy(
    *args: str,
    env: dict[str, str] | None = None,
    listen: str = "127.0.0.1:0",
    admin_listen: str = "127.0.0.1:0",
) -> Iterator[RunningProxy]:
    """`servegate proxy ARGS --listen 127.0.0.1:0`, until the block ends (then SIGTERM, wait)."""
    process = subprocess.Popen(
        [*PROXY, *args, "--listen", listen, "--admin-listen", admin_listen],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if "listening on" not in line:
            process.kill()
            _, err = process.communicate(timeout=10)
            raise AssertionError(f"proxy did not start: {line!r} {err[-2000:]}")
        url = line.split("listening on ", 1)[1].split("/v1", 1)[0]
        admin = re.search(r"admin endpoints on (http://[0-9.]+:[0-9]+)", line)
        yield RunningProxy(url=url, process=process, admin_url=admin and admin.group(1))
    finally:
        process.terminate()
        try:
            process.communicate(timeout=15)  # reads and closes the pipes
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate(timeout=5)


def normalised(value: Any) -> Any:
    """A response object without the fields that differ between any two identical requests."""
    if isinstance(value, dict):
        return {k: normalised(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [normalised(v) for v in value]
    return value


def normalised_body(data: bytes) -> Any:
    """A JSON body or an SSE stream as a list of normalised events."""
    text = data.decode()
    if text.startswith("data:") or "\ndata:" in text:
        events = [e[len("data: ") :] for e in text.split("\n\n") if e.startswith("data: ")]
        return [e if e == "[DONE]" else normalised(json.loads(e)) for e in events]
    try:
        return normalised(json.loads(text))
    except ValueError:
        return text


@contextmanager
def serve_in_thread(app: Any) -> Iterator[str]:
    """An ASGI app under uvicorn on a loopback port in a thread (httpx's test pattern); yields
    its URL and stops it when the block ends."""
    import socket
    import threading

    import uvicorn

    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise AssertionError("the server did not start")
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
