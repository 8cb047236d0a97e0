"""Shadow mode and the users' data: by default no prompt or answer reaches disk (only what the
comparison needs), `--store-bodies redacted|full` opts in, pairs older than `--retention-days`
are deleted, and the database and capture files are readable by their owner only. Small
upstreams on loopback (no engine); the proxy is the CLI's own process."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import insert
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from servegate.store import tables
from servegate.store.proxy_records import ProxyRecorder, read_pairs
from servegate.store.writer import open_engine

from .proxy_harness import PROXY, RunningProxy, serve_in_thread, start_proxy

PROMPT = "my neighbour's name is Ada Quist and she lives at 12 Elm Road"
KEY = "sk-userkey0123456789abcdef"
ANSWER = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Noted, Ada."},
                       "finish_reason": "stop"}]}  # fmt: skip


def fake_engine() -> Starlette:
    async def chat(request: Request) -> JSONResponse:
        await request.body()
        return JSONResponse(ANSWER)

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def _chat(proxy: RunningProxy) -> None:
    import urllib.request

    body = {"messages": [{"role": "user", "content": f"{PROMPT} (key {KEY})"}], "temperature": 0}
    request = urllib.request.Request(
        proxy.base_url + "/chat/completions", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200


def _run(tmp_path: Path, *extra: str) -> tuple[Path, list[Any]]:
    db = tmp_path / "proxy.db"
    with (
        serve_in_thread(fake_engine()) as primary,
        serve_in_thread(fake_engine()) as candidate,
        start_proxy("--primary", primary + "/v1", "--candidate", candidate + "/v1",
                    "--sample", "1", "--db", str(db), *extra) as proxy,
    ):  # fmt: skip
        _chat(proxy)
        proxy.wait_health("mirror_pairs", 1)
        proxy.wait_idle()
    engine = open_engine(db)
    try:
        return db, read_pairs(engine, "proxy")
    finally:
        engine.dispose()


def _disk(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.iterdir() if p.is_file())


def test_by_default_no_prompt_or_answer_reaches_disk(tmp_path: Path) -> None:
    _, [pair] = _run(tmp_path)
    assert PROMPT.encode() not in _disk(tmp_path)
    assert b"Noted, Ada" not in _disk(tmp_path)
    assert pair.request["body"] is None
    assert pair.primary["body"] is None
    assert pair.comparison is not None
    assert pair.comparison["exact_match"] is True  # the comparison is kept


def test_redacted_keeps_the_text_without_keys_and_full_keeps_it_whole(tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    (tmp_path / "f").mkdir()
    _, [redacted] = _run(tmp_path / "r", "--store-bodies", "redacted")
    _, [full] = _run(tmp_path / "f", "--store-bodies", "full")
    assert PROMPT in json.dumps(redacted.request)
    assert KEY not in json.dumps(redacted.request)
    assert KEY in json.dumps(full.request)
    assert "Noted, Ada." in redacted.primary["body"]


def test_a_capture_file_needs_bodies_to_be_stored() -> None:
    done = subprocess.run(
        [*PROXY, "--primary", "http://127.0.0.1:9/v1", "--candidate", "http://127.0.0.1:10/v1",
         "--capture", "/tmp/servegate-never.jsonl", "--listen", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--store-bodies" in done.stderr


def test_the_database_and_the_capture_file_are_owner_only(tmp_path: Path) -> None:
    capture = tmp_path / "capture.jsonl"
    _run(tmp_path, "--store-bodies", "redacted", "--capture", str(capture))
    files = [p for p in tmp_path.iterdir() if p.is_file()]
    assert capture in files
    assert tmp_path / "proxy.db" in files
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in files}
    assert set(modes.values()) == {0o600}, modes


def test_pairs_older_than_the_retention_are_deleted(tmp_path: Path) -> None:
    db = tmp_path / "proxy.db"
    engine = open_engine(db)
    recorder = ProxyRecorder.open(engine, "proxy", mode="shadow", primary_url="p",
                                  candidate_url="c", config={})  # fmt: skip
    old = (datetime.now(UTC) - timedelta(days=40)).isoformat(timespec="milliseconds")
    with engine.begin() as conn:
        conn.execute(insert(tables.proxy_pairs).values(
            session_id="proxy", recorded_at=old, path="/v1/chat/completions",
            request_json="{}", primary_json="{}",
        ))  # fmt: skip
    recorder.write_pair("/v1/chat/completions", {}, {}, None, None)  # recent: kept
    engine.dispose()
    time.sleep(0.01)
    _, pairs = _run(tmp_path, "--retention-days", "30")
    assert len(pairs) == 2  # the recent one and this run's; the 40-day-old one is gone


def test_a_bad_store_bodies_value_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "servegate", "proxy", "--primary", "http://127.0.0.1:9/v1",
         "--candidate", "http://127.0.0.1:10/v1", "--store-bodies", "some"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
