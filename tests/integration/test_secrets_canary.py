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


LAUNCH_KEY = "sk-launch-canary-2e94d0"
LAUNCH_ENV = "env-canary-7a61b3"


def test_a_launch_blocks_key_and_environment_appear_nowhere(
    benign_engine: RunningEngine, tmp_path: Path
) -> None:
    """A managed baseline started with `--api_key KEY` on its command line (llama.cpp then
    demands it) and a secret in its environment: the run database, every report and what
    servegate prints keep the names and the shape of the command, never the values."""
    from servegate.engine.launch import llama_command
    from servegate.engine.model import shipped_model_path

    argv = llama_command(shipped_model_path(), 1, ("--api_key", LAUNCH_KEY))
    argv[argv.index("--port") + 1] = "{port}"
    config = {
        "baseline": {"launch": {"command": argv, "env": {"SERVEGATE_LAUNCH_TOKEN": LAUNCH_ENV},
                                "ready_timeout_s": 120},
                     "api_key_env": "SERVEGATE_CANARY_KEY"},
        "candidate": {"url": benign_engine.base_url, "api_key_env": "SERVEGATE_CANARY_KEY"},
        "gates": ["startup", "golden"],
        "categories": ["canary"],
    }  # fmt: skip
    path = tmp_path / "gate.yaml"
    path.write_text(json.dumps(config))
    db = tmp_path / "runs.db"
    outputs = {f: tmp_path / f"report.{f}" for f in ("json", "html", "markdown", "junit")}
    env = {**os.environ, "SERVEGATE_CANARY_KEY": LAUNCH_KEY}
    gate = subprocess.run(
        [sys.executable, "-m", "servegate", "gate", "--config", str(path), "--db", str(db),
         "--run-dir", str(tmp_path / "runs"), "--show-info",
         *[a for f, p in outputs.items() for a in (f"--{f}", str(p))]],
        capture_output=True, text=True, timeout=500, env=env,
    )  # fmt: skip
    assert "Traceback" not in gate.stderr, gate.stderr
    report = json.loads(outputs["json"].read_text())
    assert report["baseline"]["launch"]["outcome"] == "ready", report["reason"]
    assert gate.returncode in {0, 1}, gate.stderr
    texts = _leaks(gate, db, outputs, tmp_path)
    assert "SERVEGATE_LAUNCH_TOKEN" in texts["database"]
    assert "--api_key" in texts["database"]
    for secret in (LAUNCH_KEY, LAUNCH_ENV):
        leaked = [name for name, text in texts.items() if secret in text]
        assert leaked == [], f"{secret} found in {leaked}"


SHELL_PASSWORD = "pw-shell-canary-4e27a9"
SHELL_KEY = "sk-shell-canary-c61f08"


def _gate_with(
    config: dict[str, object], tmp_path: Path
) -> tuple[subprocess.CompletedProcess[str], Path, dict[str, Path]]:
    """`servegate gate --config` with a database, every report format and --show-info."""
    path = tmp_path / "gate.yaml"
    path.write_text(json.dumps(config))
    db = tmp_path / "runs.db"
    outputs = {f: tmp_path / f"report.{f}" for f in ("json", "html", "markdown", "junit")}
    gate = _servegate(
        "gate", "--config", str(path), "--db", str(db), "--run-dir", str(tmp_path / "runs"),
        "--show-info", *[a for f, p in outputs.items() for a in (f"--{f}", str(p))],
    )  # fmt: skip
    return gate, db, outputs


def _leaks(
    gate: subprocess.CompletedProcess[str], db: Path, outputs: dict[str, Path], tmp_path: Path
) -> dict[str, str]:
    """Every text a run leaves: what servegate printed, each report format, the reports
    rendered again from the database, `runs`, and a dump of the database itself."""
    report = json.loads(outputs["json"].read_text())
    again_md = tmp_path / "again.md"
    again = _servegate("report", report["run_id"], "--db", str(db), "--markdown", str(again_md))
    listed = _servegate("runs", "--db", str(db), "--json")
    texts = {
        "gate": gate.stdout + gate.stderr,
        "runs": listed.stdout + listed.stderr,
        "report": again.stdout + again.stderr + again_md.read_text(encoding="utf-8"),
        **{p.name: p.read_text(encoding="utf-8") for p in outputs.values()},
    }
    with sqlite3.connect(db) as conn:
        texts["database"] = "\n".join(conn.iterdump())
    return texts


def test_a_shell_launch_that_fails_shows_its_password_nowhere(
    benign_engine: RunningEngine, tmp_path: Path
) -> None:
    """FAULTS 59: the candidate's `launch` is a shell string with a password and a key, and its
    engine prints its command line (and the key, vLLM-style) before it fails: the finding, the
    reports, the database and the terminal show the command's shape, never the values."""
    script = (
        f"echo starting engine --password {SHELL_PASSWORD} --api-key={SHELL_KEY}; "
        f"echo \"non-default args: {{'api_key': ['{SHELL_KEY}']}}\"; "
        f"echo 'Traceback (most recent call last):'; echo '  File x'; "
        f"echo 'RuntimeError: the key {SHELL_KEY} was refused'; exit 3"
    )
    config = {
        "baseline": {"url": benign_engine.base_url},
        "candidate": {"launch": {"command": ["sh", "-c", f"{script} --password {SHELL_PASSWORD}"],
                                 "ready_timeout_s": 60}},
        "gates": ["startup"],
    }  # fmt: skip
    gate, db, outputs = _gate_with(config, tmp_path)
    assert "Traceback" not in gate.stderr.split("RuntimeError")[0], gate.stderr
    report = json.loads(outputs["json"].read_text())
    assert (gate.returncode, report["candidate"]["launch"]["outcome"]) == (1, "exited")
    finding = next(f for g in report["gates"] for f in g["findings"] if f["probe"] == "launch")
    assert "RuntimeError: the key *** was refused" in finding["message"]  # the log was read
    assert "--password ***" in report["candidate"]["launch"]["command"]
    texts = _leaks(gate, db, outputs, tmp_path)
    for secret in (SHELL_PASSWORD, SHELL_KEY):
        leaked = [name for name, text in texts.items() if secret in text]
        assert leaked == [], f"{secret} found in {leaked}"


VLLM_KEY = "sk-vllm-canary-0d5b71"


@pytest.mark.vllm
@pytest.mark.timeout(600)
def test_a_real_vllm_launch_with_an_api_key_that_fails_shows_the_key_nowhere(
    tmp_path: Path,
) -> None:
    """FAULTS 60 on a real vLLM: `--api-key K` and a flag vLLM does not know. The log's first
    line is the serve wrapper's command line with K in it; K is in no report, database row or
    terminal line. Measured on vLLM 0.32.0 (2026-12-03): vLLM itself prints `'api_key': '***'`
    among its non-default args, and this failure log is 308 lines (argparse prints every
    option), so the excerpt (the last 30) never reached the wrapper's line — this passed before
    the redactor reached log excerpts too; `test_a_shell_launch_that_fails_shows_its_password_
    nowhere` is the case that leaked."""
    from tests.integration.test_vllm_engine import _llama, _vllm

    launch = _vllm("--api-key", VLLM_KEY, "--no-such-flag")
    config = {"baseline": {"launch": _llama()}, "candidate": {"launch": launch},
              "gates": ["startup"]}  # fmt: skip
    gate, db, outputs = _gate_with(config, tmp_path)
    report = json.loads(outputs["json"].read_text())
    assert report["candidate"]["launch"]["outcome"] == "exited", report["reason"]
    log = Path(report["candidate"]["launch"]["log_path"]).read_text()
    assert VLLM_KEY in log.splitlines()[0]  # the wrapper's command line
    texts = _leaks(gate, db, outputs, tmp_path)
    leaked = [name for name, text in texts.items() if VLLM_KEY in text]
    assert leaked == [], f"{VLLM_KEY} found in {leaked}"
