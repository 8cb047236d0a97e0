"""A database that stops accepting writes mid-run: one clear StoreError, committed rows kept.

Each failure is real SQLite behaviour on a file in tmp_path: another connection holding an
exclusive lock past the busy timeout, a file made read-only, a database that cannot grow.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url

from servegate.endpoints.types import Completion
from servegate.store.writer import RunWriter, StoreError, open_engine
from servegate.verdict.model import Fingerprint, GateResult, Report, Status

BIG = "x" * 200_000  # more than any free space left in the file's pages


@contextmanager
def locked(db: Path, engine: Engine) -> Iterator[None]:
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        other.execute("ROLLBACK")
        other.close()


@contextmanager
def read_only(db: Path, engine: Engine) -> Iterator[None]:
    # SQLite refuses every write on a read-only connection (SQLITE_READONLY), as it does for a
    # read-only file: the same error for root, who may write files whatever their mode.
    def no_writes(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.execute("PRAGMA query_only=ON")

    engine.dispose()
    event.listen(engine, "connect", no_writes)
    try:
        yield
    finally:
        event.remove(engine, "connect", no_writes)
        engine.dispose()


@contextmanager
def full(db: Path, engine: Engine) -> Iterator[None]:
    def cannot_grow(dbapi_conn: Any, _record: Any) -> None:
        pages = dbapi_conn.execute("PRAGMA page_count").fetchone()[0]
        dbapi_conn.execute(f"PRAGMA max_page_count={pages}")

    engine.dispose()
    event.listen(engine, "connect", cannot_grow)
    try:
        yield
    finally:
        event.remove(engine, "connect", cannot_grow)
        engine.dispose()


FAILURES = [
    pytest.param(locked, "database is locked (another process held it", id="locked"),
    pytest.param(
        read_only,
        "attempt to write a readonly database (the file, its -wal/-shm files or its folder "
        "is read-only)",
        id="read-only",
    ),
    pytest.param(full, "database or disk is full (no space left for the database)", id="full"),
]


def _report(run_id: str) -> Report:
    fp = Fingerprint(url="http://b/v1")
    return Report(
        tool="servegate test",
        run_id=run_id,
        started_at="t0",
        finished_at="t1",
        duration_s=1.0,
        verdict=Status.FAIL,
        exit_code=1,
        reason=BIG,
        baseline=fp,
        candidate=fp,
        gates=(),
    )


def _record(writer: RunWriter, probe: str, content: str = "OK") -> None:
    writer.record(
        gate="golden",
        probe=probe,
        side="candidate",
        api="chat",
        request={"messages": [{"role": "user", "content": "secret prompt text"}]},
        result=Completion(status=200, content=content),
    )


OPERATIONS: list[Any] = [
    pytest.param(
        lambda w: _record(w, "canary-2", BIG),
        "record the candidate request golden/canary-2 of run",
        id="record",
    ),
    pytest.param(
        lambda w: w.gate(GateResult(name="context", status=Status.PASS, summary=BIG)),
        "record the context gate of run",
        id="gate",
    ),
    pytest.param(lambda w: w.finish(_report(w.run_id)), "record the verdict of run", id="finish"),
]


@pytest.mark.parametrize(("failure", "why"), FAILURES)
@pytest.mark.parametrize(("operation", "what"), OPERATIONS)
def test_a_write_that_fails_is_one_line_naming_database_and_operation_and_keeps_what_was_committed(
    tmp_path: Path,
    failure: Callable[[Path, Engine], AbstractContextManager[None]],
    why: str,
    operation: Callable[[RunWriter], None],
    what: str,
) -> None:
    db = tmp_path / "runs.db"
    engine = open_engine(db, busy_timeout_s=0.05)
    writer = RunWriter.start(engine, baseline_url="b", candidate_url="c", model="m", config={})
    _record(writer, "canary-1")
    writer.gate(GateResult(name="golden", status=Status.FAIL, summary="regressed"))

    with failure(db, engine), pytest.raises(StoreError) as raised:
        operation(writer)

    message = str(raised.value)
    assert message.startswith(f"cannot {what} {writer.run_id} in the database {db}: {why}")
    assert "\n" not in message
    for leak in ("INSERT", "UPDATE", "[SQL", "secret prompt"):
        assert leak not in message
    assert raised.value.exit_code == 2
    with sqlite3.connect(db) as conn:
        assert conn.execute("select probe from requests").fetchall() == [("canary-1",)]
        assert conn.execute("select gate, status from gate_results").fetchall() == [
            ("golden", "fail")
        ]
        assert conn.execute("select state from runs").fetchall() == [("running",)]
    # Once the database accepts writes again, the same writer goes on.
    _record(writer, "canary-3")
    with sqlite3.connect(db) as conn:
        assert conn.execute("select count(*) from requests").fetchone() == (2,)


def test_a_run_that_cannot_start_names_the_database(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    engine = open_engine(db, busy_timeout_s=0.05)
    with locked(db, engine), pytest.raises(StoreError) as raised:
        RunWriter.start(engine, baseline_url="b", candidate_url="c", model=None, config={})
    assert str(raised.value).startswith(f"cannot start a run in the database {db}: database is")


def test_a_database_url_password_is_never_in_the_error() -> None:
    # Nothing listens on port 1. A bare postgresql:// URL uses psycopg (3), the driver
    # servegate[postgres] installs.
    with pytest.raises(StoreError) as raised:
        open_engine("postgresql://servegate:pw-canary-55@127.0.0.1:1/runs")
    message = str(raised.value)
    assert "pw-canary-55" not in message
    assert message.startswith(
        "cannot open the database postgresql+psycopg://servegate:***@127.0.0.1:1/runs: "
        "connection failed: "
    )
    assert "Connection refused" in message
    assert "\n" not in message


# The same on PostgreSQL: a server that turned read-only, or another session holding the tables'
# locks past the lock timeout.
@contextmanager
def pg_read_only(engine: Engine) -> Iterator[None]:
    with _on_connect(engine, "SET default_transaction_read_only = on"):
        yield


@contextmanager
def pg_locked(engine: Engine) -> Iterator[None]:
    other = create_engine(engine.url)
    try:
        with other.begin() as conn, _on_connect(engine, "SET lock_timeout = '50ms'"):
            conn.execute(text("LOCK TABLE runs, requests, gate_results IN ACCESS EXCLUSIVE MODE"))
            yield
    finally:
        other.dispose()


@contextmanager
def _on_connect(engine: Engine, statement: str) -> Iterator[None]:
    def setting(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.autocommit = True
        dbapi_conn.execute(statement)
        dbapi_conn.autocommit = False

    engine.dispose()
    event.listen(engine, "connect", setting)
    try:
        yield
    finally:
        event.remove(engine, "connect", setting)
        engine.dispose()


PG_FAILURES = [
    pytest.param(pg_read_only, "cannot execute ", id="read-only"),
    pytest.param(pg_locked, "canceling statement due to lock timeout", id="locked"),
]


@pytest.mark.parametrize(("failure", "why"), PG_FAILURES)
@pytest.mark.parametrize(("operation", "what"), OPERATIONS)
def test_a_postgresql_write_that_fails_is_one_line_and_keeps_what_was_committed(
    postgres_url: str,
    failure: Callable[[Engine], AbstractContextManager[None]],
    why: str,
    operation: Callable[[RunWriter], None],
    what: str,
) -> None:
    engine = open_engine(postgres_url)
    writer = RunWriter.start(engine, baseline_url="b", candidate_url="c", model="m", config={})
    _record(writer, "canary-1")
    writer.gate(GateResult(name="golden", status=Status.FAIL, summary="regressed"))

    with failure(engine), pytest.raises(StoreError) as raised:
        operation(writer)

    message = str(raised.value)
    shown = make_url(postgres_url).render_as_string()
    assert message.startswith(f"cannot {what} {writer.run_id} in the database {shown}: {why}")
    assert "\n" not in message
    for leak in ("[SQL", "secret prompt", "INSERT INTO", "UPDATE runs"):
        assert leak not in message
    with engine.connect() as conn:
        assert conn.execute(text("select probe from requests")).all() == [("canary-1",)]
        assert conn.execute(text("select state from runs")).all() == [("running",)]
    _record(writer, "canary-3")
    with engine.connect() as conn:
        assert conn.execute(text("select count(*) from requests")).scalar_one() == 2
    engine.dispose()
