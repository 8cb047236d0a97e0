"""The store as memory, against the reference engine: a run killed with SIGKILL and resumed (on
SQLite; on PostgreSQL too under -m heavy), and a baseline recorded, its server stopped, and
compared with.

The run compares the clean reference engine with `mixed-dtype` (a regression every measurement
so far fails) through startup, numerics and the golden canaries. The process is killed with
SIGKILL while numerics is sending; `servegate gate --resume RUN` must then give the verdict and
gate statuses of the same run left alone, keep the gate that finished before the kill, and
count each request once. A baseline recorded from a clean engine that is then stopped must give
`mixed-dtype` and `mmap-off` the verdicts they get against that engine live: through startup and
the golden canaries in the default run (a minute or two), and with numerics too (its stored
logprobs, noise floor and reference-text scores; about five minutes) under `-m heavy`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text

from servegate.engine import RunningEngine
from servegate.store.writer import open_engine

from .conftest import run_servegate

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(900)]

# Two numerics prompts: mixed-dtype answers both with commas (a confident flip each), and the
# gate still sends some 40 requests after the kill point below (50 in all, measured).
# --complete: Gate 1's canaries fail mixed-dtype at once (the run would fail fast there); the
# kill must land mid-numerics, so every gate runs.
GATE_ARGS = ("--gates", "startup,numerics,golden", "--category", "canary",
             "--numerics-prompts", "2", "--complete", "--quiet")  # fmt: skip
KILL_AFTER_NUMERICS_REQUESTS = 6
# What a stored baseline is recorded with and compared on: every gate of GATE_ARGS is minutes of
# perplexity scoring (heavy); without numerics the same assertions take a minute or two.
STORED_GATE_ARGS = [
    pytest.param(("--gates", "startup,golden", "--category", "canary", "--quiet"),
                 id="startup-golden"),
    pytest.param(GATE_ARGS, id="startup-numerics-golden", marks=pytest.mark.heavy),
]  # fmt: skip


def _args(
    clean: RunningEngine,
    candidate: RunningEngine,
    db: str,
    out: Path,
    gate_args: tuple[str, ...] = GATE_ARGS,
) -> list[str]:
    return ["gate", "--baseline", clean.base_url, "--candidate", candidate.base_url,
            "--db", db, "--json", str(out), *gate_args]  # fmt: skip


def _sql(db: str) -> Engine:
    return create_engine(db if "://" in db else f"sqlite:///{db}")


def _rows(engine: Engine, sql: str) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(sql))]


JUDGED_REQUESTS = (  # per gate, the requests of the attempt that judged it
    "select r.gate, count(*) from requests r join gate_results g "
    "on g.run_id = r.run_id and g.gate = r.gate "
    "where coalesce(r.attempt, 1) = coalesce(g.attempt, 1) group by r.gate order by r.gate"
)


@pytest.fixture(scope="module")
def left_alone(
    clean_engine: RunningEngine, mixed_dtype_engine: RunningEngine, tmp_path_factory: Any
) -> Iterator[tuple[dict[str, Any], list[tuple[Any, ...]]]]:
    """The same run, not killed: its report and its requests per gate."""
    folder = tmp_path_factory.mktemp("left-alone")
    db, out = str(folder / "runs.db"), folder / "report.json"
    proc = run_servegate(*_args(clean_engine, mixed_dtype_engine, db, out), timeout_s=600)
    assert proc.returncode == 1, proc.stderr
    engine = _sql(db)
    yield json.loads(out.read_text()), _rows(engine, JUDGED_REQUESTS)
    engine.dispose()


# The store's own half of a resume (the resume point, the second attempt, the requests counted
# once) runs on both databases in tests/unit/orchestration/test_runner.py, and the heartbeat that
# tells a killed run from a running one in tests/unit/store/test_heartbeat.py; this SIGKILL of a
# real run repeats them on PostgreSQL at ~90 s, so that half runs under -m heavy.
@pytest.mark.parametrize(
    "store_url", ["sqlite", pytest.param("postgresql", marks=pytest.mark.heavy)], indirect=True
)
def test_a_run_killed_mid_gate_resumes_to_the_same_verdict_without_duplicates(
    clean_engine: RunningEngine,
    mixed_dtype_engine: RunningEngine,
    left_alone: tuple[dict[str, Any], list[tuple[Any, ...]]],
    store_url: str,
    tmp_path: Path,
) -> None:
    reference, reference_requests = left_alone
    out = tmp_path / "report.json"
    open_engine(store_url).dispose()  # the schema, so that the polling below can read it
    args = _args(clean_engine, mixed_dtype_engine, store_url, out)
    log = (tmp_path / "killed.log").open("wb")
    child = subprocess.Popen([sys.executable, "-m", "servegate", *args], stdout=log, stderr=log)
    engine = _sql(store_url)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and child.poll() is None:
            sent = _rows(engine, "select count(*) from requests where gate = 'numerics'")
            if sent and sent[0][0] >= KILL_AFTER_NUMERICS_REQUESTS:
                break
            time.sleep(0.2)
        assert child.poll() is None, (
            "the run ended before it could be killed mid-numerics: "
            + (tmp_path / "killed.log").read_text()[-2000:]
        )
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)

        # What the kill left: startup judged, numerics half sent, no verdict.
        [(run_id, state)] = _rows(engine, "select id, state from runs")
        assert state == "running"  # SIGKILL leaves no chance to write anything else
        assert _rows(engine, "select gate from gate_results") == [("startup",)]
        listed = run_servegate("runs", "--db", store_url, "--json")
        assert [r["state"] for r in json.loads(listed.stdout)] == ["interrupted"]
        killed_numerics = _rows(engine, "select count(*) from requests where gate = 'numerics'")

        resumed = run_servegate("gate", "--resume", run_id, "--db", store_url,
                                "--json", str(out), "--quiet", timeout_s=600)  # fmt: skip
        assert "Traceback" not in resumed.stderr, resumed.stderr
        report = json.loads(out.read_text())

        assert resumed.returncode == reference["exit_code"] == 1
        assert (report["run_id"], report["attempt"]) == (run_id, 2)
        assert [(g["name"], g["status"]) for g in report["gates"]] == [
            (g["name"], g["status"]) for g in reference["gates"]
        ]
        assert report["reason"] == reference["reason"]
        # startup was not sent again: its gate and requests are the first attempt's.
        assert _rows(engine, "select gate, attempt from gate_results order by gate") == [
            ("golden", 2),
            ("numerics", 2),
            ("startup", 1),
        ]
        assert _rows(engine, "select count(*) from requests where gate = 'startup'") == [
            (dict(reference_requests)["startup"],)
        ]
        # Each gate counts exactly the requests of one whole run; the killed attempt's numerics
        # requests are kept, not counted.
        assert _rows(engine, JUDGED_REQUESTS) == reference_requests
        assert (
            _rows(engine, "select count(*) from requests where gate = 'numerics' and attempt = 1")
            == killed_numerics
        )
        assert _rows(engine, "select state, verdict, attempt from runs") == [
            ("finished", "fail", 2)
        ]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        log.close()
        engine.dispose()


def _refused(url: str) -> bool:
    host, port = url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


@pytest.mark.parametrize("gate_args", STORED_GATE_ARGS)
def test_a_stored_baseline_gives_the_live_verdicts_with_its_server_stopped(
    engine_factory: Callable[..., Any],
    mixed_dtype_engine: RunningEngine,
    benign_engine: RunningEngine,
    gate_args: tuple[str, ...],
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "runs.db")
    candidates = (mixed_dtype_engine, benign_engine)
    live: dict[str, dict[str, Any]] = {}
    with engine_factory("clean") as old:
        for candidate in candidates:
            out = tmp_path / f"live-{candidate.variant}.json"
            proc = run_servegate(*_args(old, candidate, db, out, gate_args), timeout_s=600)
            assert "Traceback" not in proc.stderr, proc.stderr
            live[candidate.variant] = json.loads(out.read_text())
        recorded = run_servegate(
            "baseline", "record", "--endpoint", old.base_url, "--name", "before-upgrade",
            "--db", db, *gate_args, timeout_s=600,
        )  # fmt: skip
        assert recorded.returncode == 0, recorded.stderr
        old_url = old.base_url
    assert _refused(old_url)  # the baseline's server is gone

    listed = json.loads(run_servegate("baseline", "list", "--db", db, "--json").stdout)
    assert [b["name"] for b in listed] == ["before-upgrade"]
    for candidate in candidates:
        live_report = live[candidate.variant]
        out = tmp_path / f"stored-{candidate.variant}.json"
        proc = run_servegate(
            "gate", "--baseline-run", "before-upgrade", "--candidate", candidate.base_url,
            "--db", db, "--json", str(out), *gate_args, timeout_s=600,
        )  # fmt: skip
        assert "Traceback" not in proc.stderr, proc.stderr
        report = json.loads(out.read_text())
        assert proc.returncode == live_report["exit_code"], candidate.variant
        assert [(g["name"], g["status"]) for g in report["gates"]] == [
            (g["name"], g["status"]) for g in live_report["gates"]
        ], candidate.variant
        assert report["baseline"]["stored_baseline"].startswith("before-upgrade (recorded ")
    assert live["mixed-dtype"]["exit_code"] == 1
    assert live["mmap-off"]["exit_code"] == 0


def test_the_servers_own_empty_and_failed_answers_are_named_and_never_truth(
    clean_engine: RunningEngine, benign_engine: RunningEngine, tmp_path: Path
) -> None:
    # Measured on the reference engine (SmolLM2-135M through llama-cpp-python's server), the same
    # on every run and on both sides of the recording's own A/A run: golden tools-single-auto is
    # answered with 9 tokens that parse to neither text nor a tool call, and every streamed
    # tool-call answer closes without [DONE]. Before, `baseline record` refused the whole
    # recording (exit 3); now those answers are stored, named, and never the baseline's truth.
    # The engine serves no sentence embeddings (HTTP 500 to a batch, per-token vectors to one
    # input): against its recording the embeddings gate is not applicable, as it is live.
    db, out = str(tmp_path / "runs.db"), tmp_path / "stored.json"
    args = ("--gates", "embeddings,golden", "--category", "tools", "--quiet", "--db", db)
    recorded = run_servegate("baseline", "record", "--endpoint", clean_engine.base_url,
                             "--name", "tools", *args, timeout_s=600)  # fmt: skip
    assert recorded.returncode == 0, recorded.stderr
    named = " ".join(recorded.stderr.split())
    assert "left out of the baseline: its empty or error answers to " in named
    assert "golden/tools-single-auto (empty)" in named
    assert "golden/tools-parallel:stream (truncated)" in named
    proc = run_servegate("gate", "--baseline-run", "tools", "--candidate", benign_engine.base_url,
                         "--json", str(out), *args, timeout_s=600)  # fmt: skip
    report = json.loads(out.read_text())
    assert proc.returncode == 0, (report["verdict"], proc.stderr[-2000:])
    statuses = {g["name"]: g["status"] for g in report["gates"]}
    assert statuses == {"embeddings": "skip", "golden": "pass"}, statuses
    golden = next(g for g in report["gates"] if g["name"] == "golden")
    unjudged = next(c for c in golden["checks"] if c["name"] == "unjudged_probes")
    assert unjudged["outcome"] == "not-measured"
    assert "tools-single-auto: baseline not_sent" in unjudged["reason"]


@pytest.mark.heavy
@pytest.mark.timeout(3000)
def test_the_documented_baseline_run_command_exits_0_on_a_good_candidate(
    engine_factory: Callable[..., Any], benign_engine: RunningEngine, tmp_path: Path
) -> None:
    # Issue 20 item 9: the default gate list includes performance, which against a recording
    # was inconclusive, so the README's `gate --baseline-run before --candidate URL` exited 3
    # on a good candidate. The gate command exactly as documented (defaults untouched); the
    # recording asks the golden canaries only, to keep this test minutes shorter (the whole
    # default recording is timed in benchmarks/RESULTS-time.md, and the probes SmolLM2 answers
    # empty are tested above): what a recording never asked is listed as not measured, not a
    # gap.
    db = str(tmp_path / "runs.db")
    with engine_factory("clean") as old:
        recorded = run_servegate(
            "baseline", "record", "--endpoint", old.base_url, "--name", "before", "--db", db,
            "--category", "canary", timeout_s=1500,
        )  # fmt: skip
        assert recorded.returncode == 0, recorded.stderr
    out = tmp_path / "report.json"
    proc = run_servegate(
        "gate", "--baseline-run", "before", "--candidate", benign_engine.base_url,
        "--db", db, "--json", str(out), timeout_s=1500,
    )  # fmt: skip
    report = json.loads(out.read_text())
    assert proc.returncode == 0, (
        report["verdict"],
        [(g["name"], g["status"]) for g in report["gates"]],
    )
    performance = next(g for g in report["gates"] if g["name"] == "performance")
    assert performance["status"] == "skip"
    assert performance["not_applicable"]
