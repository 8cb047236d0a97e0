"""The canary's memory in the store: its session's state and every decision with its evidence.

A proxy session (one `proxy_sessions` row, kept across restarts) holds the controller's state in
`state_json`; each judged interval is one `canary_decisions` row. A decision and the state it led
to are written in one transaction, so a restart never sees one without the other.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, insert, select, update
from sqlalchemy.exc import SQLAlchemyError

from servegate.store import tables
from servegate.store.errors import StoreError, store_error
from servegate.store.writer import now


@dataclass(frozen=True)
class CanaryDecision:
    """One recorded decision: what the controller did at the end of an interval, and why."""

    decided_at: str
    step_index: int
    weight: float
    action: str  # promote | hold | rollback | complete | finalise
    score: float | None
    evidence: dict[str, Any]


def open_session(
    engine: Engine,
    session_id: str,
    *,
    mode: str,
    primary_url: str,
    candidate_url: str,
    config: Mapping[str, Any],
) -> dict[str, Any] | None:
    """Create the session's row unless it exists; the state it holds (None: none yet).

    The URLs must come without secrets: they are written as given.
    """
    row = tables.proxy_sessions
    try:
        with engine.begin() as conn:
            found = conn.execute(
                select(row.c.mode, row.c.state_json).where(row.c.id == session_id)
            ).first()
            if found is None:
                stamp = now()
                conn.execute(
                    insert(row).values(
                        id=session_id, started_at=stamp, updated_at=stamp, mode=mode,
                        primary_url=primary_url, candidate_url=candidate_url,
                        config_json=json.dumps(dict(config), sort_keys=True), state_json=None,
                    )
                )  # fmt: skip
                return None
    except SQLAlchemyError as exc:
        raise store_error(engine, f"open proxy session {session_id!r}", exc) from None
    if found.mode != mode:
        raise StoreError(
            f"proxy session {session_id!r} was started in {found.mode} mode, not {mode}: "
            "choose another --session"
        )
    return None if found.state_json is None else dict(json.loads(found.state_json))


def load_state(engine: Engine, session_id: str) -> dict[str, Any] | None:
    """The canary state saved for the session, or None (no such session, or no state yet)."""
    row = tables.proxy_sessions
    try:
        with engine.connect() as conn:
            found = conn.execute(select(row.c.state_json).where(row.c.id == session_id)).first()
    except SQLAlchemyError as exc:
        raise store_error(engine, f"read proxy session {session_id!r}", exc) from None
    if found is None or found.state_json is None:
        return None
    return dict(json.loads(found.state_json))


def record_decision(
    engine: Engine, session_id: str, decision: CanaryDecision, state: Mapping[str, Any]
) -> None:
    """Write one decision and the state it led to, together (one transaction)."""
    sessions, decisions = tables.proxy_sessions, tables.canary_decisions
    try:
        with engine.begin() as conn:
            conn.execute(
                insert(decisions).values(
                    session_id=session_id, decided_at=decision.decided_at,
                    step_index=decision.step_index, weight=decision.weight,
                    action=decision.action, score=decision.score,
                    evidence_json=json.dumps(decision.evidence, sort_keys=True),
                )
            )  # fmt: skip
            done = conn.execute(
                update(sessions)
                .where(sessions.c.id == session_id)
                .values(updated_at=now(), state_json=json.dumps(dict(state), sort_keys=True))
            )
            if done.rowcount != 1:
                raise StoreError(f"no proxy session {session_id!r} to record a decision in")
    except SQLAlchemyError as exc:
        raise store_error(engine, f"record a canary decision of {session_id!r}", exc) from None


def list_decisions(engine: Engine, session_id: str) -> list[CanaryDecision]:
    """Every decision of the session, oldest first."""
    d = tables.canary_decisions
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(d).where(d.c.session_id == session_id).order_by(d.c.id))
            return [
                CanaryDecision(
                    decided_at=r.decided_at, step_index=r.step_index, weight=r.weight,
                    action=r.action, score=r.score, evidence=json.loads(r.evidence_json),
                )
                for r in rows
            ]  # fmt: skip
    except SQLAlchemyError as exc:
        raise store_error(engine, f"read the canary decisions of {session_id!r}", exc) from None
