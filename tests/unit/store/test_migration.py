"""A database written by servegate 0.1.0 (runs without pid and hostname) opens, keeps its runs."""

from __future__ import annotations

import os
import socket
import sqlite3
from pathlib import Path

import pytest

from servegate.store import tables
from servegate.store.migration import add_missing_columns
from servegate.store.writer import RunWriter, StoreError, list_runs, open_engine

# The DDL SQLAlchemy emitted for SQLite from store/tables.py at servegate 0.1.0, kept verbatim.
SCHEMA_0_1_0 = """
CREATE TABLE runs (
    id VARCHAR(32) NOT NULL,
    name VARCHAR(200),
    started_at VARCHAR(40) NOT NULL,
    finished_at VARCHAR(40),
    state VARCHAR(16) NOT NULL,
    verdict VARCHAR(16),
    exit_code INTEGER,
    reason TEXT,
    baseline_url TEXT NOT NULL,
    candidate_url TEXT NOT NULL,
    model VARCHAR(200),
    config_json TEXT NOT NULL,
    report_json TEXT,
    PRIMARY KEY (id)
);
CREATE TABLE gate_results (
    run_id VARCHAR(32) NOT NULL,
    gate VARCHAR(40) NOT NULL,
    status VARCHAR(16) NOT NULL,
    result_json TEXT NOT NULL,
    PRIMARY KEY (run_id, gate),
    FOREIGN KEY(run_id) REFERENCES runs (id)
);
CREATE TABLE requests (
    id INTEGER NOT NULL,
    run_id VARCHAR(32) NOT NULL,
    gate VARCHAR(40) NOT NULL,
    probe VARCHAR(200) NOT NULL,
    side VARCHAR(40) NOT NULL,
    api VARCHAR(20) NOT NULL,
    recorded_at VARCHAR(40) NOT NULL,
    request_json TEXT NOT NULL,
    http_status INTEGER,
    error_category VARCHAR(40),
    error_message TEXT,
    content TEXT,
    finish_reason VARCHAR(40),
    ttft_ms FLOAT,
    e2el_ms FLOAT,
    result_json TEXT NOT NULL,
    PRIMARY KEY (id),
    FOREIGN KEY(run_id) REFERENCES runs (id)
);
CREATE INDEX ix_requests_run_probe ON requests (run_id, gate, probe, side);
INSERT INTO runs (id, started_at, finished_at, state, verdict, exit_code, reason, baseline_url,
                  candidate_url, config_json)
VALUES ('old0run', '2026-01-01T00:00:00.000+00:00', '2026-01-01T00:01:00.000+00:00',
        'finished', 'fail', 1, 'failed: golden', 'http://b/v1', 'http://c/v1', '{}');
INSERT INTO requests (run_id, gate, probe, side, api, recorded_at, request_json, result_json)
VALUES ('old0run', 'golden', 'canary-ok', 'candidate', 'chat', 't', '{}', '{}');
"""


def _columns(db: Path, table: str) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [row[1] for row in conn.execute(f"pragma table_info({table})")]


def test_a_0_1_0_database_gains_pid_and_hostname_and_keeps_its_runs(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with sqlite3.connect(db) as conn:
        conn.executescript(SCHEMA_0_1_0)
    assert "pid" not in _columns(db, "runs")

    engine = open_engine(db)

    assert _columns(db, "runs")[-2:] == ["pid", "hostname"]
    [old] = list_runs(engine)
    assert (old["id"], old["verdict"], old["requests"], old["pid"]) == ("old0run", "fail", 1, None)
    writer = RunWriter.start(engine, baseline_url="b", candidate_url="c", model=None, config={})
    with sqlite3.connect(db) as conn:
        row = conn.execute("select pid, hostname from runs where id = ?", (writer.run_id,))
        assert row.fetchone() == (os.getpid(), socket.gethostname())
    # Opening again finds nothing to add.
    assert add_missing_columns(open_engine(db), tables.metadata) == []


def test_a_new_database_is_created_with_every_column(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    open_engine(db)
    assert _columns(db, "runs") == [c.name for c in tables.runs.columns]


def test_a_table_missing_a_required_column_is_refused_not_altered(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with sqlite3.connect(db) as conn:
        conn.execute("create table runs (id varchar(32) primary key, state varchar(16))")
    with pytest.raises(StoreError) as raised:
        open_engine(db)
    assert str(raised.value) == (
        f"the database {db} has a 'runs' table without the column 'started_at'"
        ": it belongs to another schema; use a new --db"
    )
    assert _columns(db, "runs") == ["id", "state"]
