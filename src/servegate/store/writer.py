"""The incremental writer: each request and result is committed as it completes (SQLite WAL).

A database error while writing (disk full, locked past the busy timeout, read-only file) is raised
as StoreError naming the database and the operation; what was committed before stays.
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, func, insert, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, OperationalError, SQLAlchemyError

from servegate.config.extras import install_hint
from servegate.config.redaction import redact_config
from servegate.endpoints.recording import Result
from servegate.endpoints.types import Completion, RawResponse
from servegate.store import tables
from servegate.store.errors import StoreError, store_error, where, why
from servegate.store.heartbeat import HEARTBEAT_S, NOW_KEY, Heartbeat, beat, database_now
from servegate.store.process import hostname
from servegate.store.resume import takeover_refusal
from servegate.store.schema import upgrade
from servegate.verdict.model import GateResult, Report, safe_json

__all__ = ["DEFAULT_DB", "RunWriter", "StoreError", "list_runs", "open_engine"]

DEFAULT_DB = Path(".servegate") / "servegate.db"
PG_CONNECT_TIMEOUT_S = 10  # an unreachable PostgreSQL host is an error after this, not a hang


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _sqlite_pragmas(busy_timeout_s: float) -> Callable[[Any, Any], None]:
    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    return on_connect


def _wal(engine: Engine) -> None:
    """WAL mode, kept in the file, set once the file is known to be ours (a foreign database is
    refused by `upgrade` before this, untouched). A read-only file is read in the mode it has."""
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA journal_mode=WAL")
    except OperationalError:
        return


def open_engine(
    url_or_path: str | Path, *, busy_timeout_s: float = 10.0, create: bool = True
) -> Engine:
    """A SQLAlchemy engine for a URL (postgresql+psycopg://…) or a SQLite file path, its schema
    migrated to this version's head (store/schema.py: an empty database gets every table, an
    older one is upgraded, one from a newer servegate is refused). SQLite waits up to
    `busy_timeout_s` for another writer's lock before giving up. Without `create` (a command
    that only reads), a SQLite file that does not exist is a StoreError and nothing is made."""
    text = str(url_or_path)
    if "://" not in text:
        path = Path(text)
        if not create:
            _must_exist(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the database folder {path.parent}: {exc}") from None
        text = f"sqlite:///{path}"
    try:
        url = make_url(text)
    except ArgumentError:
        raise StoreError("cannot open the database: not a SQLAlchemy URL or a file path") from None
    if (
        not create
        and url.get_backend_name() == "sqlite"
        and url.database not in (None, "", ":memory:")
    ):
        _must_exist(Path(str(url.database)))
    args: dict[str, Any] = {}
    if url.drivername == "postgresql":  # the driver servegate[postgres] installs: psycopg 3
        url = url.set(drivername="postgresql+psycopg")
    if url.get_backend_name() == "postgresql" and "connect_timeout" not in url.query:
        args["connect_timeout"] = PG_CONNECT_TIMEOUT_S
    name = where(url)
    try:
        engine = create_engine(url, connect_args=args)
        if engine.dialect.name == "sqlite":
            event.listen(engine, "connect", _sqlite_pragmas(busy_timeout_s))
        upgrade(engine)
        if engine.dialect.name == "sqlite":
            _wal(engine)
    except StoreError:
        raise
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot open the database {name}: {why(exc)}") from None
    except ImportError as exc:
        hint = f": {install_hint('postgres')}" if url.get_backend_name() == "postgresql" else ""
        raise StoreError(
            f"cannot open the database {name}: its driver is not installed "
            f"({exc.name or exc}){hint}"
        ) from None
    return engine


def _must_exist(path: Path) -> None:
    if not path.is_file():
        raise StoreError(
            f"no run database at {path} (nothing was created): --db names an existing one"
        )


def clean_text(text: str | None) -> str | None:
    """The text as a database column can hold it (see why below); None stays None."""
    # Lone surrogates are valid JSON but not UTF-8 (sqlite3 and psycopg refuse them), and
    # PostgreSQL text cannot hold NUL: keep the row, mark the spot with U+FFFD. The JSON columns
    # keep the exact text, escaped.
    if text is None:
        return None
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace").replace("\0", "\ufffd")


RAW_BODY_CHARS = 65_536  # a raw response body (GET /metrics, /version) is kept up to this


def _result_json(result: Result) -> str:
    data = dataclasses.asdict(result)
    data.pop("raw", None)
    if isinstance(result, RawResponse):
        data["body"] = result.body.decode("utf-8", "replace")[:RAW_BODY_CHARS]
    return json.dumps(data, default=str, ensure_ascii=True)


@contextmanager
def writing(engine: Engine, operation: str) -> Iterator[Connection]:
    """One committed transaction; a database error becomes a one-line StoreError."""
    try:
        with engine.begin() as conn:
            yield conn
    except SQLAlchemyError as exc:
        raise store_error(engine, operation, exc) from None


class RunWriter:
    """Writes one run: its row, each request as it completes, each gate as it is judged, the
    final report, or the crash that ended it. Every write is its own committed transaction."""

    def __init__(self, engine: Engine, run_id: str, attempt: int = 1) -> None:
        self.engine = engine
        self.run_id = run_id
        self.attempt = attempt
        self._heartbeat: Heartbeat | None = None

    @classmethod
    def start(
        cls,
        engine: Engine,
        *,
        baseline_url: str,
        candidate_url: str,
        model: str | None,
        config: Mapping[str, Any],
        name: str | None = None,
        fingerprints: Mapping[str, Any] | None = None,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> RunWriter:
        """Insert the run's row, state `running`, with this process's pid and hostname, and what
        the endpoints were when it started (`fingerprints`, checked by a later resume); it beats
        every `heartbeat_s` until it ends (store/heartbeat.py)."""
        run_id = uuid.uuid4().hex[:12]
        with writing(engine, "start a run") as conn:
            conn.execute(
                insert(tables.runs).values(
                    id=run_id,
                    name=clean_text(name),
                    started_at=now(),
                    state="running",
                    baseline_url=baseline_url,
                    candidate_url=candidate_url,
                    model=clean_text(model),
                    config_json=json.dumps(redact_config(config), default=str),
                    pid=os.getpid(),
                    hostname=hostname(),
                    attempt=1,
                    fingerprint_json=(
                        json.dumps(fingerprints, sort_keys=True) if fingerprints else None
                    ),
                    heartbeat_at=database_now(),
                )
            )
        return cls(engine, run_id)._beating(heartbeat_s)

    @classmethod
    def resume(
        cls, engine: Engine, run_id: str, attempt: int, *, heartbeat_s: float = HEARTBEAT_S
    ) -> RunWriter:
        """Take over an interrupted or crashed run — or one whose heartbeat is older than the
        lease — as its attempt number `attempt`: state `running` again, owned by this process.
        Its rows stay as they are. The row is checked again as it is taken: a run that beat
        since it was read, or that another resume took, is refused (StoreError)."""
        runs = tables.runs
        with writing(engine, f"resume run {run_id}") as conn:
            found = (
                conn.execute(select(runs, database_now().label(NOW_KEY)).where(runs.c.id == run_id))
                .mappings()
                .first()
            )
            row: dict[str, Any] | None = None if found is None else dict(found)
            if row is None:
                raise StoreError(f"run {run_id} is gone from {where(engine.url)}")
            refusal = takeover_refusal(row)
            if refusal is None and int(row["attempt"] or 1) != attempt - 1:
                refusal = f"run {run_id} was resumed by another servegate meanwhile"
            if refusal is not None:
                raise StoreError(refusal)
            beat_at = row["heartbeat_at"]
            taken = conn.execute(
                update(runs)
                .where(runs.c.id == run_id)
                .where(func.coalesce(runs.c.attempt, 1) == attempt - 1)
                .where(runs.c.state == row["state"])
                .where(
                    runs.c.heartbeat_at.is_(None) if beat_at is None
                    else runs.c.heartbeat_at == beat_at
                )
                .values(
                    state="running",
                    finished_at=None,
                    reason=None,
                    pid=os.getpid(),
                    hostname=hostname(),
                    attempt=attempt,
                    heartbeat_at=database_now(),
                )
            )  # fmt: skip
            if taken.rowcount != 1:
                raise StoreError(
                    f"run {run_id} is still running: it beat or was resumed while being taken over"
                )
        return cls(engine, run_id, attempt)._beating(heartbeat_s)

    def _beating(self, every_s: float) -> RunWriter:
        self._heartbeat = Heartbeat(self.engine, self.run_id, self.attempt, every_s)
        self._heartbeat.beat()  # its first floor: later beats never fall behind this one
        return self

    def beat(self) -> bool:
        """Store a heartbeat now; False once the run is no longer this attempt's (taken over)."""
        if self._heartbeat is None:
            return beat(self.engine, self.run_id, self.attempt) is not None
        return self._heartbeat.beat()

    def stop_heartbeat(self) -> None:
        """No more heartbeats: the run ends, or (tests) plays a process that was killed."""
        if self._heartbeat is not None:
            self._heartbeat.stop()

    def _mine(self) -> Any:
        """The run's row while this attempt owns it: a writer whose run was taken over (it was
        silent past the lease) cannot end the run it no longer owns."""
        runs = tables.runs
        return (
            update(runs)
            .where(runs.c.id == self.run_id)
            .where(func.coalesce(runs.c.attempt, 1) == self.attempt)
        )

    def record(
        self,
        *,
        gate: str,
        probe: str,
        side: str,
        api: str,
        request: Mapping[str, Any],
        result: Result,
    ) -> None:
        """Commit one request and its result now, so a killed run loses nothing that completed."""
        err = result.error
        text = result if isinstance(result, Completion) else None
        with writing(
            self.engine, f"record the {side} request {gate}/{probe} of run {self.run_id}"
        ) as conn:
            conn.execute(
                insert(tables.requests).values(
                    run_id=self.run_id,
                    gate=gate,
                    probe=probe,
                    side=side,
                    api=api,
                    recorded_at=now(),
                    request_json=json.dumps(request, default=str, ensure_ascii=True),
                    http_status=result.status,
                    error_category=str(err.category) if err else None,
                    error_message=clean_text(err.message) if err else None,
                    content=clean_text(text.content) if text else None,
                    finish_reason=clean_text(text.finish_reason) if text else None,
                    ttft_ms=result.timing.ttft_ms,
                    e2el_ms=result.timing.e2el_ms,
                    result_json=_result_json(result),
                    attempt=self.attempt,
                )
            )

    def gate(self, result: GateResult) -> None:
        """Commit one judged gate now, before the next gate starts."""
        with writing(self.engine, f"record the {result.name} gate of run {self.run_id}") as conn:
            conn.execute(
                insert(tables.gate_results).values(
                    run_id=self.run_id,
                    gate=result.name,
                    status=str(result.status),
                    result_json=safe_json(result),
                    attempt=self.attempt,
                )
            )

    def finish(self, report: Report) -> None:
        """Mark the run finished with its verdict and the whole report."""
        self.stop_heartbeat()
        with writing(self.engine, f"record the verdict of run {self.run_id}") as conn:
            conn.execute(
                self._mine().values(
                    finished_at=report.finished_at,
                    state="finished",
                    verdict=str(report.verdict),
                    exit_code=report.exit_code,
                    reason=clean_text(report.reason),
                    report_json=safe_json(report),
                )
            )

    def fail(self, reason: str, exit_code: int) -> None:
        self.stop_heartbeat()
        with writing(self.engine, f"record the error of run {self.run_id}") as conn:
            conn.execute(
                self._mine().values(
                    finished_at=now(), state="error", reason=clean_text(reason), exit_code=exit_code
                )
            )

    def crashed(self, reason: str) -> None:
        """Mark the run crashed: it ended by an exception, with no verdict. `reason` is stored
        as given, so the caller removes secrets from it first."""
        self.stop_heartbeat()
        with writing(self.engine, f"mark run {self.run_id} crashed") as conn:
            conn.execute(
                self._mine().values(finished_at=now(), state="crashed", reason=clean_text(reason))
            )


def list_runs(engine: Engine, limit: int = 50) -> list[dict[str, Any]]:
    """Most recent runs first, with how many requests each recorded."""
    counts = (
        select(tables.requests.c.run_id, func.count().label("n"))
        .group_by(tables.requests.c.run_id)
        .subquery()
    )
    query = (
        select(
            tables.runs,
            func.coalesce(counts.c.n, 0).label("requests"),
            database_now().label(NOW_KEY),
        )
        .outerjoin(counts, counts.c.run_id == tables.runs.c.id)
        .order_by(tables.runs.c.started_at.desc())
        .limit(limit)
    )
    try:
        with engine.connect() as conn:
            return [dict(row._mapping) for row in conn.execute(query)]
    except SQLAlchemyError as exc:
        raise store_error(engine, "list the runs", exc) from None
