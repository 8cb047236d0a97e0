"""The canary fails safe: when the controller cannot record its decision (another process holds
an exclusive lock on the SQLite store across an interval boundary, past the busy timeout), every
request goes back to the primary, /servegate/healthz says unhealthy, a metric counts it and
Flagger's hooks answer "not ready". No engine needed: nothing is served."""

from __future__ import annotations

import json
import sqlite3
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from servegate.canary.controller import Controller
from servegate.canary.plan import parse_plan
from servegate.canary.record import open_canary_session
from servegate.config.models import Policy
from servegate.proxy import ProxySettings, Upstream
from servegate.proxy.app import Proxy
from servegate.store.canary import list_decisions
from servegate.store.writer import open_engine

from .proxy_harness import metric, serve_in_thread

PLAN = parse_plan("10,100", "500ms")


def _call(url: str, data: dict[str, Any] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(
        url,
        data=None if data is None else json.dumps(data).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode()


def test_a_locked_store_at_an_interval_boundary_sends_everyone_to_the_primary(
    tmp_path: Path,
) -> None:
    db = tmp_path / "canary.db"
    engine = open_engine(db, busy_timeout_s=0.2)
    recorder, state = open_canary_session(
        engine, "locked", PLAN, primary_url="http://p/v1", candidate_url="http://c/v1"
    )
    controller = Controller(PLAN, Policy(), recorder=recorder, state=state)
    settings = ProxySettings(
        primary=Upstream.parse("primary", "http://127.0.0.1:9/v1"),
        candidate=Upstream.parse("candidate", "http://127.0.0.1:10/v1"),
        mode="canary",
    )
    assert controller.choose(0.0) == "candidate"  # 10 %: u = 0 goes to the candidate
    lock = sqlite3.connect(db, timeout=0.1, isolation_level=None)
    try:
        with serve_in_thread(Proxy(settings, controller=controller).app()) as url:
            lock.execute("BEGIN EXCLUSIVE")  # held across the interval's end (0.5 s)
            deadline = time.monotonic() + 20
            while not controller.snapshot().get("fault") and time.monotonic() < deadline:
                time.sleep(0.05)
            health = _call(url + "/servegate/healthz")
            exposition = urllib.request.urlopen(url + "/servegate/metrics", timeout=10).read()
            hooks = {
                hook: _call(
                    f"{url}/servegate/flagger/{hook}",
                    {"name": "llm", "namespace": "t", "phase": "Progressing", "metadata": {}},
                )
                for hook in ("pre-rollout", "rollout", "confirm-promotion", "rollback")
            }
            lock.execute("ROLLBACK")
    finally:
        lock.close()
    assert [controller.choose(u / 10) for u in range(10)] == ["primary"] * 10
    fault = controller.snapshot()["fault"]
    assert "locked" in fault, fault
    assert health[0] == 503
    assert health[1]["status"] == "unhealthy"
    assert health[1]["canary"]["weight"] == 0.0
    assert metric(exposition.decode(), "servegate_proxy_canary_faults_total") == 1.0
    for hook, (status, body) in hooks.items():
        assert status == 503, (hook, body)
        assert "failed safe" in body["reason"]
    assert list_decisions(engine, "locked") == []  # nothing half-written
    engine.dispose()
