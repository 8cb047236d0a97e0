"""End to end on PostgreSQL: `servegate gate --db postgresql+psycopg://…` against two loopback
servers records the run in the database, and `servegate runs --db …` lists it."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from servegate.endpoints.scripted import ScriptedServer, reply_json

pytestmark = pytest.mark.slow
SRC = Path(__file__).resolve().parents[3] / "src"

CHAT = {
    "id": "c1",
    "object": "chat.completion",
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "OK"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13},
}


def _server() -> ScriptedServer:
    return (
        ScriptedServer()
        .route("/v1/models", reply_json({"object": "list", "data": [{"id": "m"}]}))
        .route("/v1/chat/completions", reply_json(CHAT))
    )


async def _servegate(*args: str) -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "servegate", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=100)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_a_gate_run_is_recorded_in_postgresql_and_listed(
    postgres_url: str, tmp_path: Path
) -> None:
    async with _server() as baseline, _server() as candidate:
        code, out, err = await _servegate(
            "gate", "--baseline", baseline.url, "--candidate", candidate.url, "--model", "m",
            "--gates", "golden", "--category", "canary", "--db", postgres_url,
            "--json", str(tmp_path / "report.json"),
        )  # fmt: skip
    assert code in (0, 1, 3), f"exit {code}\n{out}\n{err}"
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["exit_code"] == code
    served = len(baseline.requests) + len(candidate.requests)
    # The preflight GET /models, sent to each side before the run exists, is not recorded.
    preflight = [r.path for s in (baseline, candidate) for r in s.requests[:1]]
    assert preflight == ["/v1/models", "/v1/models"]

    engine = create_engine(postgres_url)
    try:
        with engine.connect() as conn:
            runs = conn.execute(text("select id, state, verdict, pid from runs")).all()
            recorded = conn.execute(text("select count(*) from requests")).scalar_one()
            fingerprint = conn.execute(
                text("select count(*) from requests where gate = 'fingerprint'")
            ).scalar_one()
            gates = conn.execute(text("select gate from gate_results")).scalars().all()
    finally:
        engine.dispose()
    [(run_id, state, verdict, pid)] = runs
    assert (run_id, state, verdict) == (report["run_id"], "finished", report["verdict"])
    assert pid not in (None, os.getpid())  # the servegate process that ran the gate
    assert gates == ["golden"]
    # Every request the servers answered is a row but the preflight; the environment
    # fingerprint asks each side /version, /info, /models, /props and /metrics.
    assert recorded == served - len(preflight) > 0
    assert fingerprint == 2 * 5

    code, out, err = await _servegate("runs", "--db", postgres_url, "--json")
    assert code == 0, err
    [listed] = json.loads(out)
    assert (listed["id"], listed["state"], listed["requests"]) == (run_id, "finished", recorded)
