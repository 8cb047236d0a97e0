"""A known fake key in the environment and a password in a URL leave no trace: not in the run
database, not in any report format, not in what servegate prints.

A real run against the reference engine (llama.cpp accepts any bearer token), with both sides'
key taken from the environment, every report format written, and a stored report rendered again
by `servegate report`; before it, a `user:password@` URL, which is refused.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from servegate.engine import RunningEngine

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(600)]

KEY = "sk-servegate-canary-5f0c1e9a7b"
PASSWORD = "pw-canary-81d3c7"


def _servegate(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SERVEGATE_CANARY_KEY": KEY}
    return subprocess.run([sys.executable, "-m", "servegate", *args], capture_output=True,
                          text=True, timeout=500, env=env)  # fmt: skip


def test_a_secret_key_and_a_url_password_appear_nowhere(
    clean_engine: RunningEngine, benign_engine: RunningEngine, tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    # A URL carrying a password is refused before anything is sent or stored, without echoing it.
    with_password = benign_engine.base_url.replace("http://", f"http://servegate:{PASSWORD}@")
    refused = _servegate("gate", "--baseline", clean_engine.base_url, "--candidate",
                         with_password, "--db", str(db))  # fmt: skip
    assert (refused.returncode, refused.stderr) == (
        2,
        "servegate: error: base URL must not carry credentials; use api_key_env\n",
    )
    outputs = {f: tmp_path / f"report.{f}" for f in ("json", "html", "markdown", "junit")}
    gate = _servegate(
        "gate", "--baseline", clean_engine.base_url, "--candidate", benign_engine.base_url,
        "--api-key-env", "SERVEGATE_CANARY_KEY", "--gates", "startup,golden",
        "--category", "canary", "--db", str(db), "--show-info",
        *[a for f, p in outputs.items() for a in (f"--{f}", str(p))],
    )  # fmt: skip
    assert "Traceback" not in gate.stderr, gate.stderr
    assert gate.returncode in {0, 1}, gate.stderr  # judged, whatever the verdict
    report = json.loads(outputs["json"].read_text())
    again = tmp_path / "again.html"
    rendered = _servegate("report", report["run_id"], "--db", str(db), "--html", str(again))
    assert rendered.returncode == 0, rendered.stderr
    listed = _servegate("runs", "--db", str(db), "--json")

    texts = {
        "refused": refused.stdout + refused.stderr,
        "gate stdout": gate.stdout,
        "gate stderr": gate.stderr,
        "runs": listed.stdout + listed.stderr,
        "report": rendered.stdout + rendered.stderr,
        **{str(p.name): p.read_text(encoding="utf-8") for p in [*outputs.values(), again]},
    }
    with sqlite3.connect(db) as conn:
        texts["database"] = "\n".join(conn.iterdump())
    # The canary did reach the run: the key variable's name is recorded, the URL is reported.
    assert "SERVEGATE_CANARY_KEY" in texts["database"]
    assert benign_engine.base_url in texts["report.json"]
    for secret in (KEY, PASSWORD):
        leaked = [name for name, text in texts.items() if secret in text]
        assert leaked == [], f"{secret} found in {leaked}"
