"""A run beats while it runs; one whose heartbeat is older than the lease (LEASE_S) is shown
`interrupted` and may be taken over by `gate --resume RUN` from any host or container, a live one
never — on SQLite and on PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine

from servegate.store.errors import StoreError
from servegate.store.heartbeat import HEARTBEAT_S, LEASE_S
from servegate.store.process import shown_state
from servegate.store.resume import load_resume_point
from servegate.store.writer import RunWriter

Rows = Callable[[str, str], list[tuple[Any, ...]]]
Sql = Callable[[str, str], None]
OTHER = "a-container-that-is-gone"


def _start(engine: Engine, **kw: Any) -> RunWriter:
    return RunWriter.start(engine, baseline_url="http://b/v1", candidate_url="http://c/v1",
                           model="m", config={}, **kw)  # fmt: skip


def _ago(seconds: float) -> str:
    return (datetime.now(UTC) - timedelta(seconds=seconds)).isoformat(timespec="milliseconds")


def test_the_lease_spans_several_beats() -> None:
    assert LEASE_S >= 4 * HEARTBEAT_S


def test_a_running_run_beats(engine: Engine, store_url: str, rows: Rows) -> None:
    writer = _start(engine, heartbeat_s=0.05)
    [(first,)] = rows(store_url, f"select heartbeat_at from runs where id = '{writer.run_id}'")
    assert first is not None
    time.sleep(0.3)
    [(later,)] = rows(store_url, f"select heartbeat_at from runs where id = '{writer.run_id}'")
    assert later > first
    writer.crashed("test over")


def _killed_elsewhere(store_url: str, sql: Sql, run_id: str, beat_s_ago: float) -> None:
    # What a kill -9 in another container leaves: `running`, a pid this host cannot check, and
    # the last heartbeat it wrote.
    sql(store_url, f"update runs set hostname = '{OTHER}', pid = 1, "
                   f"heartbeat_at = '{_ago(beat_s_ago)}' where id = '{run_id}'")  # fmt: skip


def test_a_run_killed_in_another_container_is_taken_over_once_its_lease_ran_out(
    engine: Engine, store_url: str, sql: Sql, rows: Rows
) -> None:
    writer = _start(engine, heartbeat_s=3600)
    writer.stop_heartbeat()
    _killed_elsewhere(store_url, sql, writer.run_id, LEASE_S + 5)
    point = load_resume_point(engine, writer.run_id)
    assert point.attempt == 2
    again = RunWriter.resume(engine, writer.run_id, point.attempt)
    [(state, attempt, host, beat)] = rows(
        store_url, f"select state, attempt, hostname, heartbeat_at from runs "
                   f"where id = '{writer.run_id}'"
    )  # fmt: skip
    assert (state, attempt) == ("running", 2)
    assert host != OTHER
    assert beat > _ago(60)
    again.crashed("test over")


def test_a_run_beating_in_another_container_is_never_taken_over(
    engine: Engine, store_url: str, sql: Sql
) -> None:
    writer = _start(engine, heartbeat_s=3600)
    writer.stop_heartbeat()
    _killed_elsewhere(store_url, sql, writer.run_id, 5)
    with pytest.raises(StoreError, match=r"still running .* heartbeat 5 s ago") as refused:
        load_resume_point(engine, writer.run_id)
    assert f"{LEASE_S:g} s" in str(refused.value)
    # nor by a resume that skips the check: the row is checked again as it is taken
    with pytest.raises(StoreError, match="still running"):
        RunWriter.resume(engine, writer.run_id, 2)


def test_a_run_that_beat_again_after_its_resume_point_was_read_is_not_taken_over(
    engine: Engine, store_url: str, sql: Sql, rows: Rows
) -> None:
    writer = _start(engine, heartbeat_s=3600)
    writer.stop_heartbeat()
    _killed_elsewhere(store_url, sql, writer.run_id, LEASE_S + 5)
    point = load_resume_point(engine, writer.run_id)
    sql(store_url, f"update runs set heartbeat_at = '{_ago(0)}' where id = '{writer.run_id}'")
    with pytest.raises(StoreError, match="still running"):
        RunWriter.resume(engine, writer.run_id, point.attempt)
    [(attempt,)] = rows(store_url, f"select attempt from runs where id = '{writer.run_id}'")
    assert attempt == 1


def test_a_taken_over_writer_stops_beating_and_cannot_end_the_run(
    engine: Engine, store_url: str, sql: Sql, rows: Rows
) -> None:
    old = _start(engine, heartbeat_s=3600)
    old.stop_heartbeat()
    _killed_elsewhere(store_url, sql, old.run_id, LEASE_S + 5)
    new = RunWriter.resume(engine, old.run_id, 2)
    assert old.beat() is False  # the row is no longer its own
    old.crashed("a zombie's last word")
    [(state, reason)] = rows(store_url, f"select state, reason from runs where id = '{old.run_id}'")
    assert (state, reason) == ("running", None)
    new.crashed("test over")


@pytest.mark.parametrize(
    ("beat_s_ago", "shown"),
    [(None, "running"), (5, "running"), (LEASE_S + 1, "interrupted")],
    ids=["before-heartbeats", "beating", "lease-over"],
)
def test_a_run_on_another_host_is_shown_by_its_heartbeat(
    beat_s_ago: float | None, shown: str
) -> None:
    row = {"state": "running", "pid": 1, "hostname": OTHER,
           "heartbeat_at": None if beat_s_ago is None else _ago(beat_s_ago)}  # fmt: skip
    assert shown_state(row, host="here") == shown


def test_a_reused_pid_on_the_same_host_does_not_keep_a_dead_run_alive() -> None:
    # A container restarted with the same hostname: pid 1 is alive again, but not the run's.
    row = {"state": "running", "pid": 1, "hostname": "pod-0", "heartbeat_at": _ago(LEASE_S + 1)}
    assert shown_state(row, host="pod-0", alive=lambda pid: True) == "interrupted"
