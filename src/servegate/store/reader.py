"""Reading finished runs back: a run by id (or a unique prefix), its report, its timings.

Every failure is a StoreError with one line naming the run: unknown, ambiguous, without a
report (crashed, interrupted, still running), or holding a report this version cannot read.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from sqlalchemy import Engine, and_, func, or_, select
from sqlalchemy.exc import SQLAlchemyError

from servegate.store import tables
from servegate.store.errors import StoreError, store_error, where
from servegate.store.heartbeat import NOW_KEY, database_now
from servegate.store.process import shown_state
from servegate.verdict.model import Report

MIN_PREFIX = 4


def _printable(text: str) -> str:
    return text if text.isprintable() else repr(text)


def find_run(engine: Engine, ref: str) -> dict[str, Any]:
    """The run whose id is `ref`, or the only one starting with it (at least 4 characters)."""
    runs = tables.runs
    with_now = select(runs, database_now().label(NOW_KEY))  # the lease is judged on its clock
    exact = with_now.where(runs.c.id == ref)
    prefix = with_now.where(runs.c.id.startswith(ref, autoescape=True)).limit(2)
    try:
        with engine.connect() as conn:
            rows = [dict(r._mapping) for r in conn.execute(exact)]
            if not rows and len(ref) >= MIN_PREFIX:
                rows = [dict(r._mapping) for r in conn.execute(prefix)]
    except SQLAlchemyError as exc:
        raise store_error(engine, f"read run {_printable(ref)}", exc) from None
    if not rows:
        raise StoreError(f"no run {_printable(ref)} in {where(engine.url)} (see `servegate runs`)")
    if len(rows) > 1:
        raise StoreError(f"run {_printable(ref)} is ambiguous in {where(engine.url)}: give more "
                         "of its id")  # fmt: skip
    return rows[0]


def latest_named_run(engine: Engine, name: str) -> dict[str, Any] | None:
    """The newest run called `name` (with the database's clock, for its lease), or None."""
    runs = tables.runs
    query = (
        select(runs, database_now().label(NOW_KEY))
        .where(runs.c.name == name)
        .order_by(runs.c.started_at.desc())
        .limit(1)
    )
    try:
        with engine.connect() as conn:
            found = conn.execute(query).first()
    except SQLAlchemyError as exc:
        raise store_error(engine, f"read run {_printable(name)}", exc) from None
    return None if found is None else dict(found._mapping)


def stored_report(engine: Engine, ref: str) -> Report:
    """The report a finished run stored; a run without one is an error naming its state."""
    run = find_run(engine, ref)
    text = run.get("report_json")
    if not text:
        state = shown_state(run)
        why = f": {run['reason']}" if run.get("reason") else ""
        raise StoreError(f"run {run['id']} has no report (it is {state}{why})")
    try:
        return Report.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where_ = ".".join(str(p) for p in first["loc"]) or "the document"
        raise StoreError(f"run {run['id']}: its stored report cannot be read by this version "
                         f"({where_}: {first['msg']})") from None  # fmt: skip


def request_latencies(engine: Engine, run_id: str) -> dict[str, list[float]]:
    """End-to-end latency (ms) of each completion of the run that succeeded, by side. The 1-token
    isolation requests sent before each probe are left out (they are not the probes' latency),
    and so are plain GETs (model listing, fingerprint).
    Of a resumed run, each gate's requests are those of the attempt that judged it."""
    req, judged = tables.requests, tables.gate_results
    query = (
        select(req.c.side, req.c.e2el_ms)
        .outerjoin(judged, and_(judged.c.run_id == req.c.run_id, judged.c.gate == req.c.gate))
        .where(
            req.c.run_id == run_id,
            or_(
                judged.c.gate.is_(None),
                func.coalesce(req.c.attempt, 1) == func.coalesce(judged.c.attempt, 1),
            ),
            req.c.e2el_ms.is_not(None),
            req.c.error_category.is_(None),
            req.c.probe.not_like("%:isolation"),
            req.c.api.in_(("chat", "completions")),  # generation, not GET /models and the like
        )
        .order_by(req.c.id)
    )
    out: dict[str, list[float]] = {}
    try:
        with engine.connect() as conn:
            for side, e2el in conn.execute(query):
                out.setdefault(str(side), []).append(float(e2el))
    except SQLAlchemyError as exc:
        raise store_error(engine, f"read the timings of run {run_id}", exc) from None
    return out
