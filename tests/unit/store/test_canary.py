"""The canary's decisions and state in the store (SQLite and PostgreSQL): written together,
read back by a restarted controller, and refused for a session of another mode."""

from __future__ import annotations

import random

import pytest
from sqlalchemy import Engine
from tests.unit.store.conftest import Rows

from servegate.canary.controller import Controller
from servegate.canary.plan import parse_plan
from servegate.canary.protocol import RequestObservation
from servegate.canary.record import open_canary_session
from servegate.config.models import CanaryPolicy, Policy
from servegate.store.canary import list_decisions, load_state, open_session
from servegate.store.errors import StoreError

PLAN = parse_plan("10,50,100", "60s")
POLICY = Policy(canary=CanaryPolicy(min_requests=20))


def _serve(controller: Controller, now: float, n: int, *, bad: bool) -> None:
    rng = random.Random(0)
    for _ in range(n):
        side = controller.choose(rng.random())
        garbage = 1.0 if bad and side == "candidate" else 0.0
        metrics = {"error": 0.0, "garbage": garbage, "e2el_ms": 200 * rng.uniform(0.9, 1.1)}
        controller.observe(RequestObservation(side, now, metrics))


@pytest.mark.parametrize("bad", [False, True], ids=["promote", "rollback"])
def test_a_decision_and_its_state_are_written_together_and_resumed(
    engine: Engine, store_url: str, rows: Rows, bad: bool
) -> None:
    now = [5_000.0]
    recorder, state = open_canary_session(
        engine, "s1", PLAN, primary_url="http://p/v1", candidate_url="http://c/v1"
    )
    assert state is None
    controller = Controller(PLAN, POLICY, recorder=recorder, clock=lambda: now[0])
    _serve(controller, now[0], 600, bad=bad)
    now[0] += 60
    decision = controller.tick()
    assert decision is not None
    recorder.record(decision, controller.state())

    [stored] = list_decisions(engine, "s1")
    assert (stored.action, stored.step_index, stored.weight) == (
        ("rollback", 0, 10.0) if bad else ("promote", 0, 10.0)
    )
    assert stored.evidence["reason"] == decision.reason
    assert {c["name"] for c in stored.evidence["checks"]} >= {"garbage", "error", "e2el_ms"}
    [(state_json,)] = rows(store_url, "SELECT state_json FROM proxy_sessions WHERE id = 's1'")
    assert '"phase": "rolled_back"' in state_json if bad else '"step_index": 1' in state_json

    _, saved = open_canary_session(
        engine, "s1", PLAN, primary_url="http://p/v1", candidate_url="http://c/v1"
    )
    assert saved == load_state(engine, "s1")
    restarted = Controller(PLAN, POLICY, state=saved)
    assert (restarted.phase, restarted.weight) == (
        ("rolled_back", 0.0) if bad else ("progressing", 50.0)
    )


def test_a_shadow_session_is_not_taken_for_a_canary(engine: Engine) -> None:
    open_session(engine, "s2", mode="shadow", primary_url="p", candidate_url="c", config={})
    with pytest.raises(
        StoreError, match=r"^proxy session 's2' was started in shadow mode, not canary"
    ):
        open_canary_session(engine, "s2", PLAN, primary_url="p", candidate_url="c")


def test_no_state_for_an_unknown_session(engine: Engine) -> None:
    assert load_state(engine, "nobody") is None
    assert list_decisions(engine, "nobody") == []
