"""What a killed run left behind, read back for `servegate gate --resume RUN`.

The unit of resume is a gate. A gate's judgement compares measurements taken together (the
baseline's noise floor beside the candidate's drift, interleaved load blocks), so a gate the run
did not finish is measured again whole, as a new attempt of the same run; the gates it finished
keep their stored results and are not sent again. The interrupted attempt's requests stay in
the database (nothing completed is thrown away); readers take, per gate, only the requests of
the attempt that judged it, so nothing is counted twice.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Engine, select
from sqlalchemy.exc import SQLAlchemyError

from servegate.store import tables
from servegate.store.errors import StoreError, store_error
from servegate.store.heartbeat import LEASE_S, NOW_KEY, beat_age_s
from servegate.store.process import shown_state
from servegate.store.reader import find_run
from servegate.verdict.model import GateResult

RESUMABLE = frozenset({"interrupted", "crashed"})


@dataclass(frozen=True)
class ResumePoint:
    """A run to continue: its stored configuration and fingerprints, and the gates it judged."""

    run_id: str
    name: str | None
    started_at: str
    attempt: int  # the attempt the resume will be
    config: dict[str, Any]
    fingerprints: dict[str, Any]
    finished: tuple[GateResult, ...]


def takeover_refusal(run: Mapping[str, Any]) -> str | None:
    """Why the run in this row cannot be resumed now, or None."""
    state = shown_state(run)
    if state in RESUMABLE:
        return None
    if state == "running":
        beat = run.get("heartbeat_at")
        age = beat_age_s(beat, run.get(NOW_KEY)) if beat else None
        alive = (
            f"heartbeat {age:.0f} s ago; a run is taken over only once its heartbeat is older "
            f"than {LEASE_S:g} s"
            if age is not None
            else "no heartbeat: written by an older servegate"
        )
        return (
            f"run {run['id']} is still running (pid {run.get('pid')} on "
            f"{run.get('hostname') or 'an unknown host'}, {alive}); stop it first, or start a "
            "new run"
        )
    if state == "finished":
        return f"run {run['id']} finished with verdict {run.get('verdict')}: nothing to resume"
    return f"run {run['id']} ended with an error ({run.get('reason')}): start a new run"


def load_resume_point(engine: Engine, ref: str) -> ResumePoint:
    """The run `ref` (id or unique prefix) if it can be resumed; StoreError (one line) if not."""
    run = find_run(engine, ref)
    refusal = takeover_refusal(run)
    if refusal is not None:
        raise StoreError(refusal)
    query = select(tables.gate_results.c.gate, tables.gate_results.c.result_json).where(
        tables.gate_results.c.run_id == run["id"]
    )
    try:
        with engine.connect() as conn:
            rows = list(conn.execute(query))
    except SQLAlchemyError as exc:
        raise store_error(engine, f"read the gates of run {run['id']}", exc) from None
    try:
        finished = tuple(GateResult.model_validate_json(text) for _, text in rows)
    except ValidationError:
        raise StoreError(
            f"run {run['id']}: a stored gate result cannot be read by this version; start a new run"
        ) from None
    return ResumePoint(
        run_id=str(run["id"]),
        name=run.get("name"),
        started_at=str(run["started_at"]),
        attempt=int(run.get("attempt") or 1) + 1,
        config=json.loads(run["config_json"]),
        fingerprints=json.loads(run["fingerprint_json"] or "{}"),
        finished=finished,
    )


def changed(stored: Mapping[str, Any], now: Mapping[str, Any], what: str) -> str | None:
    """The first top-level key whose value differs, worded for a refusal (`what` says against
    what); None when equal."""
    for key in sorted(set(stored) | set(now)):
        if stored.get(key) != now.get(key):
            return (
                f"{what}: {key} was "
                f"{json.dumps(stored.get(key), sort_keys=True)[:200]}, is now "
                f"{json.dumps(now.get(key), sort_keys=True)[:200]}"
            )
    return None
