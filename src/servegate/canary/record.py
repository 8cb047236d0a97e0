"""The controller's decisions and state in the store (store/canary.py), keyed by session id."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine

from servegate.canary.controller import Decision
from servegate.canary.plan import CanaryPlan
from servegate.store.canary import CanaryDecision, open_session, record_decision


class StoreRecorder:
    """Writes each decision and the state it led to into one proxy session."""

    def __init__(self, engine: Engine, session_id: str) -> None:
        self.engine, self.session_id = engine, session_id

    def record(self, decision: Decision, state: Mapping[str, Any]) -> None:
        """One canary_decisions row and the session's state_json, in one transaction."""
        row = CanaryDecision(
            decided_at=datetime.fromtimestamp(decision.decided_at, UTC).isoformat(
                timespec="milliseconds"
            ),
            step_index=decision.step_index,
            weight=decision.weight,
            action=decision.action,
            score=decision.score,
            evidence={"reason": decision.reason, **decision.evidence},
        )
        record_decision(self.engine, self.session_id, row, state)


def open_canary_session(
    engine: Engine,
    session_id: str,
    plan: CanaryPlan,
    *,
    primary_url: str,
    candidate_url: str,
    config: Mapping[str, Any] | None = None,
) -> tuple[StoreRecorder, dict[str, Any] | None]:
    """The session's recorder and its saved state (None for a new session): build the
    `Controller` with both, and a restarted proxy resumes where the canary stood."""
    settings = {"steps": list(plan.steps), "interval_s": plan.interval_s, **(config or {})}
    state = open_session(
        engine, session_id, mode="canary", primary_url=primary_url,
        candidate_url=candidate_url, config=settings,
    )  # fmt: skip
    return StoreRecorder(engine, session_id), state
