"""`runner.run` never throws away evidence: a deadline, a crash or a database error mid-run leave
every finished gate in the report and in the database.

The endpoints are ScriptedServers on loopback; the gates are stand-ins passed through the `gates`
registry, so these tests pin the runner's behaviour whatever the real gates send.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from servegate.config.models import EndpointConfig, GateConfig
from servegate.endpoints.scripted import ScriptedServer, reply_json
from servegate.gates.pair import EndpointPair
from servegate.runner import GateProgress, GateRunner, run
from servegate.store.writer import StoreError, open_engine
from servegate.verdict.model import GateResult, Status

COMPLETION = {
    "object": "text_completion",
    "model": "m",
    "choices": [{"index": 0, "text": "Hi", "finish_reason": "length"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


def _server() -> ScriptedServer:
    return (
        ScriptedServer()
        .route("/v1/models", reply_json({"object": "list", "data": [{"id": "m"}]}))
        .route("/v1/completions", reply_json(COMPLETION))
    )


@pytest.fixture
async def urls() -> AsyncIterator[tuple[str, str]]:
    async with _server() as baseline, _server() as candidate:
        yield baseline.url, candidate.url


def _cfg(urls: tuple[str, str], run_deadline_s: float = 60.0, key_env: str | None = None) -> Any:
    return GateConfig(
        baseline=EndpointConfig(url=urls[0]),
        candidate=EndpointConfig(url=urls[1], api_key_env=key_env),
        gates=("startup", "numerics", "golden"),
        run_deadline_s=run_deadline_s,
    )


def judged(name: str, status: Status, *, before: Callable[[], None] | None = None) -> GateRunner:
    """A gate that sends one recorded request to the baseline, then returns `status`."""

    async def gate(pair: EndpointPair, cfg: GateConfig, progress: GateProgress) -> GateResult:
        if before is not None:
            before()
        await pair.send(
            pair.baseline,
            "completions",
            {"prompt": "Hello", "max_tokens": 1},
            gate=name,
            probe="ready",
            deadline_s=10,
        )
        return GateResult(name=name, status=status, summary=f"{name} said {status}")

    return gate


def hangs(*, before: Callable[[], None] | None = None) -> GateRunner:
    """A gate that never finishes (a hung server with no per-request deadline)."""

    async def gate(pair: EndpointPair, cfg: GateConfig, progress: GateProgress) -> GateResult:
        if before is not None:
            before()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    return gate


def _rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql).fetchall()


async def test_the_run_deadline_keeps_a_finished_fail_and_marks_the_gates_it_cut_off(
    urls: tuple[str, str], tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    gates = {
        "startup": judged("startup", Status.FAIL),
        "numerics": hangs(),
        "golden": judged("golden", Status.PASS),
    }
    report = await run(_cfg(urls, run_deadline_s=1.0), store=open_engine(db), gates=gates)

    assert [(g.name, g.status, g.summary) for g in report.gates] == [
        ("startup", Status.FAIL, "startup said fail"),
        ("numerics", Status.INCONCLUSIVE, "the run deadline of 1 s expired during this gate"),
        ("golden", Status.SKIP, "not started: the run deadline expired"),
    ]
    # The finished FAIL decides the verdict: a deadline does not turn a regression into a shrug.
    assert (report.verdict, report.exit_code, report.reason) == (Status.FAIL, 1, "failed: startup")
    assert _rows(db, "select gate, status from gate_results order by rowid") == [
        ("startup", "fail"),
        ("numerics", "inconclusive"),
        ("golden", "skip"),
    ]
    assert _rows(db, "select state, verdict, exit_code from runs") == [("finished", "fail", 1)]
    assert _rows(db, "select gate, probe, side, http_status from requests") == [
        ("startup", "ready:isolation", "baseline", 200),  # the isolation request is recorded too
        ("startup", "ready", "baseline", 200),
    ]


async def test_without_a_store_the_deadline_still_keeps_the_finished_gates(
    urls: tuple[str, str],
) -> None:
    gates = {"startup": judged("startup", Status.PASS), "numerics": hangs(), "golden": hangs()}
    report = await run(_cfg(urls, run_deadline_s=0.5), gates=gates)
    assert [(g.name, g.status) for g in report.gates] == [
        ("startup", Status.PASS),
        ("numerics", Status.INCONCLUSIVE),
        ("golden", Status.SKIP),
    ]
    assert (report.verdict, report.run_id) == (Status.INCONCLUSIVE, "unsaved")


async def test_a_cancelled_run_is_marked_crashed_with_its_finished_gates_already_committed(
    urls: tuple[str, str], tmp_path: Path
) -> None:
    # Ctrl-C under asyncio.run cancels the main task: the same CancelledError as here.
    db = tmp_path / "runs.db"
    seen_while_numerics_ran: list[tuple[Any, ...]] = []

    def cancel_the_run() -> None:
        seen_while_numerics_ran.extend(_rows(db, "select gate, status from gate_results"))
        task = asyncio.current_task()
        assert task is not None
        task.cancel()

    gates = {
        "startup": judged("startup", Status.FAIL),
        "numerics": hangs(before=cancel_the_run),
        "golden": judged("golden", Status.PASS),
    }
    with pytest.raises(asyncio.CancelledError):
        await run(_cfg(urls), store=open_engine(db), gates=gates)

    # Read by another connection while the next gate ran: committed, not held until the end.
    assert seen_while_numerics_ran == [("startup", "fail")]
    [(state, reason, finished_at)] = _rows(db, "select state, reason, finished_at from runs")
    assert state == "crashed"
    assert reason.startswith("CancelledError: ")
    assert finished_at is not None
    assert _rows(db, "select gate, status from gate_results") == [("startup", "fail")]
    assert sorted(_rows(db, "select gate, probe from requests")) == [
        ("startup", "ready"),
        ("startup", "ready:isolation"),
    ]


@pytest.mark.parametrize(
    "error",
    [RuntimeError, KeyboardInterrupt],
    ids=["internal-error", "keyboard-interrupt"],
)
async def test_a_run_that_raises_is_marked_crashed_without_the_api_key(
    urls: tuple[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    error: type[BaseException],
) -> None:
    key = "sk-canary-7f3a91"
    monkeypatch.setenv("SERVEGATE_TEST_KEY", key)
    db = tmp_path / "runs.db"

    def boom() -> None:
        raise error(f"request failed with Authorization: Bearer {key}\nsecond line")

    gates = {
        "startup": judged("startup", Status.PASS),
        "numerics": judged("numerics", Status.PASS, before=boom),
        "golden": judged("golden", Status.PASS),
    }
    with pytest.raises(error):
        await run(_cfg(urls, key_env="SERVEGATE_TEST_KEY"), store=open_engine(db), gates=gates)

    [(state, reason)] = _rows(db, "select state, reason from runs")
    assert state == "crashed"
    assert reason == (
        f"{error.__name__}: request failed with Authorization: Bearer *** second line"
    )
    assert _rows(db, "select gate, status from gate_results") == [("startup", "pass")]
    with sqlite3.connect(db) as conn:
        assert not [line for line in conn.iterdump() if key in line]


async def test_a_database_locked_mid_run_is_a_store_error_and_the_committed_rows_stay(
    urls: tuple[str, str], tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    locker = sqlite3.connect(db, isolation_level=None)

    def lock() -> None:
        locker.execute("BEGIN EXCLUSIVE")

    gates = {
        "startup": judged("startup", Status.PASS),
        "numerics": judged("numerics", Status.PASS, before=lock),
        "golden": judged("golden", Status.PASS),
    }
    try:
        with pytest.raises(StoreError) as raised:
            await run(_cfg(urls), store=open_engine(db, busy_timeout_s=0.05), gates=gates)
    finally:
        locker.execute("ROLLBACK")
        locker.close()

    message = str(raised.value)
    # the first write after the lock: the isolation request sent before the numerics probe
    assert message.startswith("cannot record the baseline request numerics/ready:isolation of run ")
    assert message.endswith(f"in the database {db}: database is locked (another process held it "
                            "longer than the busy timeout)")  # fmt: skip
    assert "INSERT" not in message
    assert _rows(db, "select gate, status from gate_results") == [("startup", "pass")]
    assert sorted(_rows(db, "select gate, probe from requests")) == [
        ("startup", "ready"),
        ("startup", "ready:isolation"),
    ]


def _gates_cfg(urls: tuple[str, str], gates: tuple[str, ...]) -> Any:
    return GateConfig(
        baseline=EndpointConfig(url=urls[0]), candidate=EndpointConfig(url=urls[1]), gates=gates
    )


@pytest.mark.parametrize(
    ("golden", "summary"),
    [
        (Status.FAIL, "(golden: fail)"),
        (Status.INCONCLUSIVE, "(golden: inconclusive)"),
    ],
    ids=["after-a-failure", "after-an-inconclusive-gate"],
)
async def test_performance_is_skipped_until_the_correctness_gates_pass(
    urls: tuple[str, str], golden: Status, summary: str
) -> None:
    gates = {
        "startup": judged("startup", Status.PASS),
        "golden": judged("golden", golden),
        "performance": judged("performance", Status.PASS),
    }
    cfg = _gates_cfg(urls, ("startup", "golden", "performance"))
    report = await run(cfg, gates=gates)
    performance = report.gates[-1]
    assert (performance.name, performance.status) == ("performance", Status.SKIP)
    assert performance.summary == (
        f"skipped: performance is judged only after the correctness gates pass {summary}"
    )
    assert report.performance == ()


async def test_performance_runs_after_passing_correctness_gates_and_alone(
    urls: tuple[str, str],
) -> None:
    gates = {
        "startup": judged("startup", Status.PASS),
        "performance": judged("performance", Status.FAIL),
    }
    both = await run(_gates_cfg(urls, ("startup", "performance")), gates=gates)
    alone = await run(_gates_cfg(urls, ("performance",)), gates=gates)
    assert [(g.name, g.status) for g in both.gates] == [
        ("startup", Status.PASS),
        ("performance", Status.FAIL),
    ]
    assert [(g.name, g.status) for g in alone.gates] == [("performance", Status.FAIL)]
    assert alone.exit_code == 1
