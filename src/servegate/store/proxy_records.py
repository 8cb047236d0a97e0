"""`servegate proxy`'s rows: its session (kept across restarts under one name) and each mirrored
pair. Callers hand in values already redacted; this module only writes and reads them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, delete, insert, select, update

from servegate.store import tables
from servegate.store.errors import StoreError
from servegate.store.writer import clean_text, now, writing


@dataclass(frozen=True)
class PairRecord:
    """One proxy_pairs row as written (JSON columns decoded)."""

    id: int
    path: str
    request: dict[str, Any]
    primary: dict[str, Any]
    candidate: dict[str, Any] | None
    comparison: dict[str, Any] | None


def _dumps(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=True)


class ProxyRecorder:
    """Writes one proxy session; each write is its own committed transaction."""

    def __init__(self, engine: Engine, session_id: str) -> None:
        self.engine = engine
        self.session_id = session_id

    @classmethod
    def open(
        cls,
        engine: Engine,
        session_id: str,
        *,
        mode: str,
        primary_url: str,
        candidate_url: str,
        config: Mapping[str, Any],
    ) -> ProxyRecorder:
        """The session's row, created, or taken over as it was (its canary state kept); a session
        started in another mode is refused (StoreError), as `store.canary.open_session` does."""
        stamp = now()
        with writing(engine, f"open proxy session {session_id}") as conn:
            found = conn.execute(
                select(tables.proxy_sessions.c.mode).where(tables.proxy_sessions.c.id == session_id)
            ).first()
            if found is not None and found.mode != mode:
                raise StoreError(
                    f"proxy session {session_id!r} was started in {found.mode} mode, not {mode}: "
                    "choose another --session"
                )
            values = {
                "updated_at": stamp,
                "mode": mode,
                "primary_url": primary_url,
                "candidate_url": candidate_url,
                "config_json": _dumps(config),
            }
            if found is None:
                conn.execute(
                    insert(tables.proxy_sessions).values(id=session_id, started_at=stamp, **values)
                )
            else:
                conn.execute(
                    update(tables.proxy_sessions)
                    .where(tables.proxy_sessions.c.id == session_id)
                    .values(**values)
                )
        return cls(engine, session_id)

    def prune(self, older_than: str) -> int:
        """Delete pairs (of every session) recorded before `older_than`; how many."""
        return prune_pairs(self.engine, older_than)

    def write_pair(
        self,
        path: str,
        request: Mapping[str, Any],
        primary: Mapping[str, Any],
        candidate: Mapping[str, Any] | None,
        comparison: Mapping[str, Any] | None,
    ) -> None:
        """Commit one mirrored pair (candidate None: it was not mirrored, e.g. dropped)."""
        with writing(self.engine, "record a mirrored pair") as conn:
            conn.execute(
                insert(tables.proxy_pairs).values(
                    session_id=self.session_id,
                    recorded_at=now(),
                    path=clean_text(path) or "",
                    request_json=_dumps(request),
                    primary_json=_dumps(primary),
                    candidate_json=None if candidate is None else _dumps(candidate),
                    comparison_json=None if comparison is None else _dumps(comparison),
                )
            )


def prune_pairs(engine: Engine, older_than: str) -> int:
    """Delete every proxy pair recorded before `older_than` (ISO 8601, UTC); how many."""
    with writing(engine, "delete pairs past the retention") as conn:
        done = conn.execute(
            delete(tables.proxy_pairs).where(tables.proxy_pairs.c.recorded_at < older_than)
        )
        return int(done.rowcount or 0)


def read_pairs(engine: Engine, session_id: str) -> list[PairRecord]:
    """The session's pairs in the order they were written."""
    t = tables.proxy_pairs
    with engine.connect() as conn:
        rows = conn.execute(
            select(t).where(t.c.session_id == session_id).order_by(t.c.id)
        ).mappings()
        return [
            PairRecord(
                id=row["id"],
                path=row["path"],
                request=json.loads(row["request_json"]),
                primary=json.loads(row["primary_json"]),
                candidate=None
                if row["candidate_json"] is None
                else json.loads(row["candidate_json"]),
                comparison=(
                    None if row["comparison_json"] is None else json.loads(row["comparison_json"])
                ),
            )
            for row in rows
        ]
