"""The incremental writer: each request and result is committed as it completes (SQLite WAL)."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, insert, select, update
from sqlalchemy.exc import SQLAlchemyError

from servegate.endpoints.types import Completion
from servegate.store import tables
from servegate.verdict.model import GateResult, Report

DEFAULT_DB = Path(".servegate") / "servegate.db"


class StoreError(Exception):
    """The database cannot be opened or written; committed rows are kept. Exit code 2."""

    exit_code = 2


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def open_engine(url_or_path: str | Path) -> Engine:
    """A SQLAlchemy engine for a URL (postgresql://…) or a SQLite file path; tables created."""
    text = str(url_or_path)
    if "://" not in text:
        path = Path(text)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the database folder {path.parent}: {exc}") from None
        text = f"sqlite:///{path}"
    try:
        engine = create_engine(text)
        if engine.dialect.name == "sqlite":
            event.listen(engine, "connect", _sqlite_pragmas)
        tables.metadata.create_all(engine)
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot open the database {text}: {exc.__class__.__name__}") from None
    return engine


def _clean(text: str | None) -> str | None:
    # Lone surrogates are valid JSON but sqlite3 refuses them; keep the row, mark the spot.
    if text is None:
        return None
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _result_json(result: Completion) -> str:
    data = dataclasses.asdict(result)
    data.pop("raw", None)
    return json.dumps(data, default=str, ensure_ascii=True)


class RunWriter:
    """Writes one run: its row, each request as it completes, each gate, the final report."""

    def __init__(self, engine: Engine, run_id: str) -> None:
        self.engine = engine
        self.run_id = run_id

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
    ) -> RunWriter:
        run_id = uuid.uuid4().hex[:12]
        with engine.begin() as conn:
            conn.execute(
                insert(tables.runs).values(
                    id=run_id,
                    name=name,
                    started_at=now(),
                    state="running",
                    baseline_url=baseline_url,
                    candidate_url=candidate_url,
                    model=model,
                    config_json=json.dumps(config, default=str),
                )
            )
        return cls(engine, run_id)

    def record(
        self,
        *,
        gate: str,
        probe: str,
        side: str,
        api: str,
        request: Mapping[str, Any],
        result: Completion,
    ) -> None:
        """Commit one request and its result now, so a killed run loses nothing that completed."""
        err = result.error
        with self.engine.begin() as conn:
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
                    error_message=_clean(err.message) if err else None,
                    content=_clean(result.content),
                    finish_reason=result.finish_reason,
                    ttft_ms=result.timing.ttft_ms,
                    e2el_ms=result.timing.e2el_ms,
                    result_json=_result_json(result),
                )
            )

    def gate(self, result: GateResult) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                insert(tables.gate_results).values(
                    run_id=self.run_id,
                    gate=result.name,
                    status=str(result.status),
                    result_json=result.model_dump_json(),
                )
            )

    def finish(self, report: Report) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                update(tables.runs)
                .where(tables.runs.c.id == self.run_id)
                .values(
                    finished_at=report.finished_at,
                    state="finished",
                    verdict=str(report.verdict),
                    exit_code=report.exit_code,
                    reason=report.reason,
                    report_json=report.model_dump_json(),
                )
            )

    def fail(self, reason: str, exit_code: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                update(tables.runs)
                .where(tables.runs.c.id == self.run_id)
                .values(finished_at=now(), state="error", reason=reason, exit_code=exit_code)
            )


def list_runs(engine: Engine, limit: int = 50) -> list[dict[str, Any]]:
    """Most recent runs first, with how many requests each recorded."""
    from sqlalchemy import func

    counts = (
        select(tables.requests.c.run_id, func.count().label("n"))
        .group_by(tables.requests.c.run_id)
        .subquery()
    )
    query = (
        select(tables.runs, func.coalesce(counts.c.n, 0).label("requests"))
        .outerjoin(counts, counts.c.run_id == tables.runs.c.id)
        .order_by(tables.runs.c.started_at.desc())
        .limit(limit)
    )
    with engine.connect() as conn:
        return [dict(row._mapping) for row in conn.execute(query)]
