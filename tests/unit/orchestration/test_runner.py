"""`runner.run` never throws away evidence: a deadline, a crash or a database error mid-run leave
every finished gate in the report and in the database.

The endpoints are ScriptedServers on loopback; the gates are stand-ins passed through the `gates`
registry, so these tests pin the runner's behaviour whatever the real gates send.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from servegate.cli.gate_resume import resumed_config
from servegate.config.loader import ConfigError
from servegate.config.models import EndpointConfig, GateConfig
from servegate.endpoints.scripted import ScriptedServer, reply_json
from servegate.gates.pair import EndpointPair
from servegate.orchestration.runner import GateProgress, GateRunner, PreflightError, run
from servegate.store.reader import request_latencies
from servegate.store.resume import ResumePoint, load_resume_point
from servegate.store.writer import StoreError, open_engine
from servegate.verdict.model import Check, GateResult, Outcome, Status

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


def _read(db: str, sql: str) -> list[tuple[Any, ...]]:
    """`_rows` for a SQLite path or a PostgreSQL URL, through an engine of its own."""
    engine = create_engine(db if "://" in db else f"sqlite:///{db}")
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql))]
    finally:
        engine.dispose()


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
    # The environment fingerprint's GETs, sent before the run's row existed, are recorded too.
    assert {
        r[:2] for r in _rows(db, "select gate, side from requests where probe = 'environment'")
    } == {("fingerprint", "baseline"), ("fingerprint", "candidate")}
    assert _rows(
        db, "select gate, probe, side, http_status from requests where gate != 'fingerprint'"
    ) == [
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
    assert sorted(_rows(db, "select gate, probe from requests where gate != 'fingerprint'")) == [
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
    assert sorted(_rows(db, "select gate, probe from requests where gate != 'fingerprint'")) == [
        ("startup", "ready"),
        ("startup", "ready:isolation"),
    ]


def _gates_cfg(urls: tuple[str, str], gates: tuple[str, ...]) -> Any:
    return GateConfig(
        baseline=EndpointConfig(url=urls[0]), candidate=EndpointConfig(url=urls[1]), gates=gates
    )


async def test_performance_is_skipped_after_a_failed_correctness_gate(
    urls: tuple[str, str],
) -> None:
    gates = {
        "startup": judged("startup", Status.PASS),
        "golden": judged("golden", Status.FAIL),
        "performance": judged("performance", Status.PASS),
    }
    cfg = _gates_cfg(urls, ("startup", "golden", "performance"))
    report = await run(cfg, gates=gates)
    performance = report.gates[-1]
    assert (performance.name, performance.status) == ("performance", Status.SKIP)
    assert performance.summary == (
        "skipped: a correctness gate failed, the run rolls back (golden: fail)"
    )
    assert report.performance == ()


async def test_performance_is_measured_after_an_inconclusive_correctness_gate_and_can_fail_the_run(
    urls: tuple[str, str],
) -> None:
    # Issue 18: a stock server whose prompt logprobs could not be trusted left numerics
    # inconclusive, and performance was never measured; a 200 ms slower candidate got exit 3.
    gates = {
        "startup": judged("startup", Status.PASS),
        "golden": judged("golden", Status.INCONCLUSIVE),
        "performance": judged("performance", Status.FAIL),
    }
    cfg = _gates_cfg(urls, ("startup", "golden", "performance"))
    report = await run(cfg, gates=gates)
    assert [(g.name, g.status) for g in report.gates][-1] == ("performance", Status.FAIL)
    assert report.exit_code == 1


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


def counted(name: str, calls: list[str], *, crash_first: bool = False) -> GateRunner:
    """`judged(name, PASS)` that notes each call in `calls`; with `crash_first` its first call
    sends its request and then raises, as a run killed inside the gate would leave it."""
    inner = judged(name, Status.PASS)

    async def gate(pair: EndpointPair, cfg: GateConfig, progress: GateProgress) -> GateResult:
        calls.append(name)
        result = await inner(pair, cfg, progress)
        if crash_first and calls.count(name) == 1:
            raise RuntimeError("killed mid-gate")
        return result

    return gate


async def test_a_crashed_run_resumes_only_its_unfinished_gates_as_a_second_attempt(
    urls: tuple[str, str], store_url: str
) -> None:
    # On SQLite and on PostgreSQL: the store's half of tests/integration/test_gate_stored_runs.py,
    # whose SIGKILLed run on a real engine runs on SQLite by default (PostgreSQL under -m heavy).
    db = store_url
    calls: list[str] = []
    gates = {
        "startup": counted("startup", calls),
        "numerics": counted("numerics", calls, crash_first=True),
        "golden": counted("golden", calls),
    }
    crashed = open_engine(db)
    with pytest.raises(RuntimeError):
        await run(_cfg(urls), store=crashed, gates=gates)
    crashed.dispose()
    [(run_id, state)] = _read(db, "select id, state from runs")
    assert state == "crashed"

    store = open_engine(db)
    point = load_resume_point(store, run_id)
    assert (point.attempt, [g.name for g in point.finished]) == (2, ["startup"])
    report = await run(GateConfig.model_validate(point.config), store=store, gates=gates,
                       resume=point)  # fmt: skip

    # startup is not sent again; numerics, which the crash cut short, runs whole once more.
    assert calls == ["startup", "numerics", "numerics", "golden"]
    assert (report.run_id, report.attempt, report.verdict) == (run_id, 2, Status.PASS)
    assert [g.name for g in report.gates] == ["startup", "numerics", "golden"]
    assert _read(db, "select state, verdict, attempt from runs") == [("finished", "pass", 2)]
    assert _read(db, "select gate, attempt from gate_results order by gate") == [
        ("golden", 2),
        ("numerics", 2),
        ("startup", 1),
    ]
    # Nothing the killed attempt completed is thrown away, and nothing is counted twice: each
    # gate's timings are those of the attempt that judged it.
    assert _read(
        db,
        "select gate, attempt, count(*) from requests where gate != 'fingerprint' "
        "group by gate, attempt order by gate, attempt",
    ) == [
        ("golden", 2, 2),
        ("numerics", 1, 2),
        ("numerics", 2, 2),
        ("startup", 1, 2),
    ]
    assert len(request_latencies(store, run_id)["baseline"]) == 3
    store.dispose()


async def test_a_resume_is_refused_when_an_endpoint_serves_other_models(
    urls: tuple[str, str], tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    calls: list[str] = []
    gates = {
        "startup": counted("startup", calls),
        "numerics": counted("numerics", calls, crash_first=True),
    }
    with pytest.raises(RuntimeError):
        await run(_cfg(urls), store=open_engine(db), gates=gates)
    [(run_id,)] = _rows(db, "select id from runs")
    other = ScriptedServer().route(
        "/v1/models", reply_json({"object": "list", "data": [{"id": "m"}, {"id": "m-v2"}]})
    )
    async with other:
        cfg = _cfg((urls[0], other.url))
        point = load_resume_point(open_engine(db), run_id)
        with pytest.raises(PreflightError) as refused:
            await run(cfg, store=open_engine(db), gates=gates, resume=point)
    assert refused.value.exit_code == 2
    assert str(refused.value) == (
        f"cannot resume run {run_id}: an endpoint or the suite changed since the run started: "
        'candidate.models was ["m"], is now ["m", "m-v2"]; start a new run'
    )
    assert calls == ["startup", "numerics"]  # nothing was sent for the refused resume
    assert _rows(db, "select state, attempt from runs") == [("crashed", 1)]


async def test_only_an_interrupted_or_crashed_run_can_be_resumed(
    urls: tuple[str, str], tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    store = open_engine(db)
    report = await run(_cfg(urls), store=store, gates={"startup": judged("startup", Status.FAIL)})
    with pytest.raises(StoreError, match=rf"^run {report.run_id} finished with verdict fail: "
                       "nothing to resume$"):  # fmt: skip
        load_resume_point(store, report.run_id)
    with pytest.raises(StoreError, match=r"^no run nosuchrun in "):
        load_resume_point(store, "nosuchrun")
    # A run still marked running by a live process (this one) is not taken over.
    with sqlite3.connect(db) as conn:
        conn.execute("update runs set state = 'running', pid = ?", (os.getpid(),))
    with pytest.raises(StoreError, match=rf"^run {report.run_id} is still running \(pid "):
        load_resume_point(store, report.run_id)


def test_a_resume_keeps_the_stored_configuration_and_refuses_a_changed_one() -> None:
    stored = GateConfig(
        baseline=EndpointConfig(url="http://127.0.0.1:1/v1"),
        candidate=EndpointConfig(url="http://127.0.0.1:2/v1"),
    )
    point = ResumePoint(
        run_id="abc123", name=None, started_at="2026-12-01T00:00:00+00:00", attempt=2,
        config=stored.model_dump(mode="json"), fingerprints={}, finished=(),
    )  # fmt: skip
    assert resumed_config(point, None, run_deadline_s=None) == stored
    # The run deadline does not change what is measured: a resume may give a new one.
    longer = resumed_config(point, None, run_deadline_s=99.0)
    assert longer.run_deadline_s == 99.0
    assert resumed_config(point, stored, run_deadline_s=None) == stored
    with pytest.raises(ConfigError) as refused:
        resumed_config(point, stored.model_copy(update={"strict": True}), run_deadline_s=None)
    assert str(refused.value) == (
        "cannot resume run abc123: the configuration changed since the run started: strict was "
        "false, is now true; give the command line that started it, or --resume RUN alone"
    )


def startup_with(ready: Outcome, status: Status) -> GateRunner:
    """A startup gate whose readiness check has `ready` and whose status is `status` (another
    check, e.g. the over-long prompt, not measured under --strict)."""

    async def gate(pair: EndpointPair, cfg: GateConfig, progress: GateProgress) -> GateResult:
        checks = (
            Check(name="ready", title="a real 1-token completion on both sides", outcome=ready),
            Check(
                name="impossible_request", title="over-long prompt", outcome=Outcome.NOT_MEASURED
            ),
        )
        return GateResult(name="startup", status=status, summary="startup", checks=checks)

    return gate


@pytest.mark.parametrize(
    ("ready", "golden_runs"),
    [(Outcome.PASS, True), (Outcome.NOT_MEASURED, False), (Outcome.FAIL, False)],
    ids=["ready-with-a-gap", "readiness-not-measured", "not-ready"],
)
async def test_only_the_readiness_check_stops_the_gates_after_startup(
    urls: tuple[str, str], ready: Outcome, golden_runs: bool
) -> None:
    # Issue 20 item 10: under --strict any startup gap made the startup gate inconclusive, and
    # every later gate was skipped as "a side is not ready" though both sides had answered.
    gates = {
        "startup": startup_with(ready, Status.INCONCLUSIVE),
        "golden": judged("golden", Status.PASS),
    }
    report = await run(_gates_cfg(urls, ("startup", "golden")), gates=gates)
    golden = report.gates[-1]
    assert (golden.status is Status.PASS) is golden_runs
    if not golden_runs:
        assert golden.summary == "skipped: a side is not ready (see startup)"


@pytest.mark.parametrize("gate", ["performance", "sampling"])
async def test_a_gate_a_stored_recording_cannot_answer_is_not_applicable_and_a_good_run_exits_0(
    urls: tuple[str, str], gate: str
) -> None:
    # Issue 20 item 9: the default gate list includes performance, which against a recording
    # was INCONCLUSIVE, so `gate --baseline-run NAME --candidate URL` exited 3 on a good
    # candidate. It is not applicable there: skipped with its reason, never a pass or a gap.
    # The sampling gate (issue 26) has no draws in a recording either.
    from servegate.orchestration.runner import ON_A_RECORDING
    from servegate.verdict.rules import decide

    cfg = _gates_cfg(urls, ("startup", gate))
    result = await ON_A_RECORDING[gate](None, cfg, lambda *a: None)  # type: ignore[arg-type]
    assert result.name == gate
    assert result.status is Status.SKIP
    assert result.not_applicable
    assert result.not_measured == ()
    startup = GateResult(name="startup", status=Status.PASS, summary="ok")
    assert decide([startup, result]).exit_code == 0
