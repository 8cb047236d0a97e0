"""Migrations on open, on SQLite and on a real PostgreSQL: from empty, from servegate 0.1.0's
tables (with and without a version table), at head, and from a newer servegate (refused)."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import (
    Column,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    inspect,
    select,
    text,
)
from sqlalchemy.engine import make_url

from servegate.store import schema, tables
from servegate.store.writer import RunWriter, StoreError, list_runs, open_engine


def _url(db: str) -> str:
    return db if "://" in db else f"sqlite:///{db}"


def _plain(db: str) -> Engine:
    """An engine of its own, as another program would open the database: no migration."""
    return create_engine(_url(db))


def _version(db: str) -> list[str]:
    engine = _plain(db)
    try:
        with engine.connect() as conn:
            table = f"{schema.VERSION_TABLE}"
            return [r[0] for r in conn.execute(text(f"select version_num from {table}"))]
    finally:
        engine.dispose()


def _columns(db: str, table: str) -> list[str]:
    engine = _plain(db)
    try:
        return [c["name"] for c in inspect(engine).get_columns(table)]
    finally:
        engine.dispose()


def _old_metadata(*, with_process: bool = False) -> MetaData:
    """store/tables.py as servegate 0.1.0 had it (git 8b196a7), for `create_all`; with the
    process columns, as it was when servegate still called `create_all` (before Alembic)."""
    old = MetaData()
    process = [Column("pid", Integer), Column("hostname", String(255))] if with_process else []
    Table(
        "runs", old,
        Column("id", String(32), primary_key=True),
        Column("name", String(200), nullable=True),
        Column("started_at", String(40), nullable=False),
        Column("finished_at", String(40), nullable=True),
        Column("state", String(16), nullable=False),
        Column("verdict", String(16), nullable=True),
        Column("exit_code", Integer, nullable=True),
        Column("reason", Text, nullable=True),
        Column("baseline_url", Text, nullable=False),
        Column("candidate_url", Text, nullable=False),
        Column("model", String(200), nullable=True),
        Column("config_json", Text, nullable=False),
        Column("report_json", Text, nullable=True),
        *process,
    )  # fmt: skip
    requests = Table(
        "requests", old,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("run_id", String(32), ForeignKey("runs.id"), nullable=False),
        Column("gate", String(40), nullable=False),
        Column("probe", String(200), nullable=False),
        Column("side", String(40), nullable=False),
        Column("api", String(20), nullable=False),
        Column("recorded_at", String(40), nullable=False),
        Column("request_json", Text, nullable=False),
        Column("http_status", Integer, nullable=True),
        Column("error_category", String(40), nullable=True),
        Column("error_message", Text, nullable=True),
        Column("content", Text, nullable=True),
        Column("finish_reason", String(40), nullable=True),
        Column("ttft_ms", Float, nullable=True),
        Column("e2el_ms", Float, nullable=True),
        Column("result_json", Text, nullable=False),
    )  # fmt: skip
    Index("ix_requests_run_probe", requests.c.run_id, requests.c.gate, requests.c.probe,
          requests.c.side)  # fmt: skip
    Table(
        "gate_results", old,
        Column("run_id", String(32), ForeignKey("runs.id"), primary_key=True),
        Column("gate", String(40), primary_key=True),
        Column("status", String(16), nullable=False),
        Column("result_json", Text, nullable=False),
    )  # fmt: skip
    return old


OLD_ROWS = [
    "insert into runs (id, started_at, finished_at, state, verdict, exit_code, reason, "
    "baseline_url, candidate_url, config_json) values ('old0run', '2026-01-01T00:00:00.000+00:00',"
    " '2026-01-01T00:01:00.000+00:00', 'finished', 'fail', 1, 'failed: golden', 'http://b/v1', "
    "'http://c/v1', '{}')",
    "insert into requests (run_id, gate, probe, side, api, recorded_at, request_json, "
    "result_json, e2el_ms) values ('old0run', 'golden', 'canary-ok', 'candidate', 'chat', 't', "
    "'{}', '{}', 12.5)",
]


def _fill_old(db: str, *, create: bool) -> None:
    engine = _plain(db)
    try:
        if create:
            _old_metadata().create_all(engine)
        with engine.begin() as conn:
            for statement in OLD_ROWS:
                conn.execute(text(statement))
    finally:
        engine.dispose()


def _assert_old_rows_kept_and_new_rows_get_the_process(db: str) -> None:
    engine = open_engine(db)
    [old] = list_runs(engine)
    assert (old["id"], old["verdict"], old["requests"]) == ("old0run", "fail", 1)
    assert (old["pid"], old["hostname"]) == (None, None)
    with engine.connect() as conn:
        e2el = conn.execute(select(tables.requests.c.e2el_ms)).scalar_one()
    assert e2el == 12.5
    writer = RunWriter.start(engine, baseline_url="b", candidate_url="c", model=None, config={})
    with engine.connect() as conn:
        row = conn.execute(
            select(tables.runs.c.pid, tables.runs.c.hostname).where(
                tables.runs.c.id == writer.run_id
            )
        ).one()
    assert tuple(row) == (os.getpid(), socket.gethostname())
    engine.dispose()


def test_an_empty_database_is_migrated_to_exactly_the_tables(store_url: str) -> None:
    open_engine(store_url).dispose()
    assert _version(store_url) == [schema.head()] == ["0006_run_heartbeat"]
    engine = _plain(store_url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"version_table": schema.VERSION_TABLE})
            # Alembic's autogenerate diff: columns, types, nullability, keys, indexes.
            assert compare_metadata(ctx, tables.metadata) == []
        found = inspect(engine)
        assert set(found.get_table_names()) == {*tables.metadata.tables, schema.VERSION_TABLE}
        for table in tables.metadata.sorted_tables:
            got = {c["name"]: c for c in found.get_columns(table.name)}
            assert list(got) == [c.name for c in table.columns], table.name
            for column in table.columns:
                assert got[column.name]["nullable"] == column.nullable, column
                kind = got[column.name]["type"].python_type
                assert kind is column.type.python_type, column
            assert found.get_pk_constraint(table.name)["constrained_columns"] == [
                c.name for c in table.primary_key
            ]
        [index] = found.get_indexes("requests")
        assert (index["name"], index["column_names"]) == (
            "ix_requests_run_probe",
            ["run_id", "gate", "probe", "side"],
        )
    finally:
        engine.dispose()


def test_a_database_made_by_0_1_0_is_stamped_then_upgraded_keeping_its_rows(
    store_url: str,
) -> None:
    _fill_old(store_url, create=True)
    assert "pid" not in _columns(store_url, "runs")
    _assert_old_rows_kept_and_new_rows_get_the_process(store_url)
    assert _columns(store_url, "runs")[-5:] == [
        "pid", "hostname", "attempt", "fingerprint_json", "heartbeat_at"
    ]  # fmt: skip
    assert _version(store_url) == [schema.head()]


def test_a_database_at_revision_1_is_upgraded_keeping_its_rows(store_url: str) -> None:
    engine = _plain(store_url)
    with engine.begin() as conn:
        command.upgrade(schema.alembic_config(conn), "0001_initial")
    engine.dispose()
    assert _version(store_url) == ["0001_initial"]
    _fill_old(store_url, create=False)
    _assert_old_rows_kept_and_new_rows_get_the_process(store_url)
    assert _version(store_url) == [schema.head()]


def test_an_unversioned_database_with_pid_and_hostname_is_stamped_at_head(store_url: str) -> None:
    # What servegate wrote between the process columns and Alembic: create_all of its tables.
    engine = _plain(store_url)
    _old_metadata(with_process=True).create_all(engine)
    engine.dispose()
    _fill_old(store_url, create=False)
    open_engine(store_url).dispose()
    assert _version(store_url) == [schema.head()]
    assert [r["id"] for r in list_runs(open_engine(store_url))] == ["old0run"]


def test_a_database_at_head_is_not_migrated_again(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_engine(store_url).dispose()

    def no_upgrade(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("a database at head was migrated")

    monkeypatch.setattr(command, "upgrade", no_upgrade)
    open_engine(store_url).dispose()
    assert _version(store_url) == [schema.head()]


def test_a_database_from_a_newer_servegate_is_refused_not_downgraded(store_url: str) -> None:
    open_engine(store_url).dispose()
    engine = _plain(store_url)
    with engine.begin() as conn:
        conn.execute(text(f"update {schema.VERSION_TABLE} set version_num = '0099_future'"))
    engine.dispose()
    with pytest.raises(StoreError) as raised:
        open_engine(store_url)
    message = str(raised.value)
    shown = store_url if "://" not in store_url else make_url(store_url).render_as_string()
    assert message == (
        f"the database {shown} is at schema revision 0099_future, which this servegate does "
        "not know (it knows up to 0006_run_heartbeat): a newer servegate wrote it; upgrade "
        "servegate or use another --db"
    )
    assert raised.value.exit_code == 2
    assert _version(store_url) == ["0099_future"]
    assert "pid" in _columns(store_url, "runs")


def test_a_table_missing_a_required_column_is_refused_untouched(store_url: str) -> None:
    engine = _plain(store_url)
    with engine.begin() as conn:
        conn.execute(text("create table runs (id varchar(32) primary key, state varchar(16))"))
    engine.dispose()
    with pytest.raises(StoreError) as raised:
        open_engine(store_url)
    shown = store_url if "://" not in store_url else make_url(store_url).render_as_string()
    assert str(raised.value) == (
        f"the database {shown} has a 'runs' table without the column 'baseline_url'"
        ": it belongs to another schema; use a new --db"
    )
    assert _columns(store_url, "runs") == ["id", "state"]
    engine = _plain(store_url)
    assert set(inspect(engine).get_table_names()) == {"runs"}
    engine.dispose()


def test_half_of_a_revision_is_refused(store_url: str) -> None:
    _fill_old(store_url, create=True)
    engine = _plain(store_url)
    with engine.begin() as conn:
        conn.execute(text("alter table runs add column pid integer"))
    engine.dispose()
    with pytest.raises(StoreError, match=r"has only part of revision 0002_run_process \(pid "):
        open_engine(store_url)


def test_servegates_opening_one_new_database_at_once_migrate_it_once(store_url: str) -> None:
    errors: list[BaseException] = []

    def opener() -> None:
        try:
            open_engine(store_url).dispose()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert _version(store_url) == [schema.head()]


def test_a_read_only_sqlite_database_at_head_opens_and_reads(tmp_path: Path) -> None:
    # An up-to-date database is only read when opened: `servegate runs` and `report` work on a
    # copy that cannot be written (here a read-only SQLite connection, which binds root too).
    db = tmp_path / "runs.db"
    RunWriter.start(open_engine(db), baseline_url="b", candidate_url="c", model=None, config={})
    engine = open_engine(f"sqlite:///file:{db}?mode=ro&uri=true")
    assert len(list_runs(engine)) == 1
    with pytest.raises(StoreError, match="readonly database"):
        RunWriter.start(engine, baseline_url="b", candidate_url="c", model=None, config={})
    engine.dispose()


def test_a_read_only_sqlite_database_that_needs_a_migration_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    _fill_old(str(db), create=True)
    with pytest.raises(StoreError) as raised:
        open_engine(f"sqlite:///file:{db}?mode=ro&uri=true")
    assert str(raised.value) == (
        f"cannot open the database file:{db}: attempt to write a readonly database (the file, "
        "its -wal/-shm files or its folder is read-only)"
    )
    assert "pid" not in _columns(str(db), "runs")
