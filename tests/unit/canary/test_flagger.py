"""Flagger's webhooks over HTTP (a real uvicorn server on loopback) with Flagger's payload:
go (2xx) and halt (non-2xx) follow the canary controller's current judgement."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp
import pytest
import uvicorn
from starlette.applications import Starlette

from servegate.canary.controller import Controller, Decision
from servegate.canary.flagger import FINISH_HOOK, HOOKS, MAX_BODY_BYTES, decide, flagger_routes
from servegate.canary.plan import parse_plan
from servegate.canary.protocol import RequestObservation
from servegate.config.models import CanaryPolicy, Policy
from servegate.engine.process import free_port

# Flagger v1.44.0, docs/gitbook/usage/webhooks.md and CanaryWebhookPayload in
# pkg/apis/flagger/v1beta1/canary.go: what its controller POSTs (Content-Type application/json).
PAYLOAD = {
    "name": "podinfo",
    "namespace": "test",
    "phase": "Progressing",
    "checksum": "85d557f47b",
    "metadata": {"test": "all", "token": "16688eb5e9f289f1991c"},
}
POLICY = Policy(canary=CanaryPolicy(min_requests=20, max_extensions=1))


class Clock:
    now = 1_000.0

    def __call__(self) -> float:
        return self.now


CLOCK = Clock()
CONTROLLER: list[Controller] = []


def current() -> dict[str, Any]:
    return CONTROLLER[0].snapshot()


async def finish_current(reason: str, evidence: Any) -> Decision:
    return await CONTROLLER[0].finish(reason, evidence)


class Recorded:
    """The decisions and states a controller handed to its recorder."""

    def __init__(self) -> None:
        self.rows: list[tuple[Decision, dict[str, Any]]] = []

    def record(self, decision: Decision, state: Any) -> None:
        self.rows.append((decision, dict(state)))


@contextmanager
def serving(app: Starlette) -> Iterator[str]:
    """`app` served by uvicorn in a thread on loopback; its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}/servegate/flagger"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    """The webhooks served by uvicorn in a thread, answering from CONTROLLER[0]."""
    routes = flagger_routes(current, finish=finish_current, admit=lambda _request: None)
    with serving(Starlette(routes=routes)) as url:
        yield url


def fresh(recorder: Recorded | None = None, *, secondary: bool = False) -> Controller:
    CONTROLLER[:] = [
        Controller(
            parse_plan("10,50,100", "60s"), POLICY, clock=CLOCK, recorder=recorder,
            secondary=secondary,
        )
    ]  # fmt: skip
    return CONTROLLER[0]


def interval(controller: Controller, *, bad: bool = False, n: int = 600) -> str:
    rng = random.Random(0)
    for _ in range(n):
        side = controller.choose(rng.random())
        garbage = 1.0 if bad and side == "candidate" else 0.0
        metrics = {"error": 0.0, "garbage": garbage, "e2el_ms": 100 * rng.uniform(0.9, 1.1)}
        controller.observe(RequestObservation(side, CLOCK.now, metrics))
    CLOCK.now += 60
    decision = controller.tick()
    assert decision is not None
    return decision.action


async def post(url: str, body: Any = PAYLOAD) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as session:
        kwargs: dict[str, Any] = {"data": body} if isinstance(body, bytes) else {"json": body}
        async with session.post(url, **kwargs) as response:
            return response.status, await response.json()


async def hooks(base_url: str) -> dict[str, int]:
    statuses = await asyncio.gather(*(post(f"{base_url}/{h}") for h in HOOKS))
    return dict(zip(HOOKS, (s for s, _ in statuses), strict=True))


async def test_before_any_judgement_pre_rollout_goes_and_rollout_halts(base_url: str) -> None:
    fresh()
    assert await hooks(base_url) == {
        "pre-rollout": 200, "rollout": 503, "confirm-promotion": 503, "rollback": 409,
    }  # fmt: skip
    _, body = await post(f"{base_url}/rollout")
    assert body["go"] is False
    assert body["reason"] == "servegate has not judged an interval yet (weight 10 %)"
    assert body["canary"] == {k: PAYLOAD[k] for k in ("name", "namespace", "phase", "checksum")}


async def test_a_passed_interval_lets_flagger_advance_and_promotion_waits_for_100(
    base_url: str,
) -> None:
    controller = fresh()
    assert interval(controller) == "promote"
    assert await hooks(base_url) == {
        "pre-rollout": 200, "rollout": 200, "confirm-promotion": 503, "rollback": 409,
    }  # fmt: skip
    _, body = await post(f"{base_url}/rollout")
    assert body["servegate"] == {
        "phase": "progressing", "weight": 50.0, "step_index": 1, "action": "promote",
        "score": 100.0,
    }  # fmt: skip
    assert interval(controller) == "complete"
    assert await hooks(base_url) == {
        "pre-rollout": 200, "rollout": 200, "confirm-promotion": 200, "rollback": 409,
    }  # fmt: skip


async def test_a_hold_halts_the_rollout_hook(base_url: str) -> None:
    assert interval(fresh(), n=30) == "hold"
    assert await hooks(base_url) == {
        "pre-rollout": 200, "rollout": 503, "confirm-promotion": 503, "rollback": 409,
    }  # fmt: skip
    _, body = await post(f"{base_url}/rollout")
    assert body["reason"].startswith("servegate holds at 10 %: not measured: error rate")
    assert "too few answers" in body["reason"]


async def test_a_rollback_halts_and_answers_flaggers_rollback_hook(base_url: str) -> None:
    assert interval(fresh(), bad=True) == "rollback"
    assert await hooks(base_url) == {
        "pre-rollout": 409, "rollout": 409, "confirm-promotion": 409, "rollback": 200,
    }  # fmt: skip
    _, body = await post(f"{base_url}/rollback")
    assert body["reason"].startswith("servegate rolled the candidate back: degenerate-answer rate")


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not json", "body is not JSON"),
        (b"[1, 2]", "body is not a JSON object"),
        ({"name": "podinfo", "namespace": "test"}, "field 'phase' missing or not a string"),
        ({**PAYLOAD, "metadata": {"n": 1}}, "field 'metadata' is not a map of strings"),
        (b"{" + b" " * MAX_BODY_BYTES + b"}", f"body over {MAX_BODY_BYTES} bytes"),
    ],
    ids=["not-json", "not-object", "no-phase", "metadata-not-strings", "oversized"],
)
async def test_a_payload_that_is_not_flaggers_is_refused_in_one_line(
    base_url: str, body: Any, reason: str
) -> None:
    fresh()
    status, answer = await post(f"{base_url}/rollout", body)
    assert (status, answer["reason"]) == (400, f"bad webhook payload: {reason}")


async def test_only_post_is_answered(base_url: str) -> None:
    async with aiohttp.ClientSession() as session, session.get(f"{base_url}/rollout") as r:
        assert r.status == 405


@pytest.mark.parametrize("hook", HOOKS)
def test_without_a_canary_behind_the_routes_no_hook_says_go(hook: str) -> None:
    status, reason = decide(hook, {})
    assert status == (409 if hook == "rollback" else 503)
    assert reason == "servegate has no canary judgement here"


FINISHED = {**PAYLOAD, "phase": "Succeeded"}


async def test_post_rollout_ends_a_promoted_canary_and_every_request_goes_to_the_primary(
    base_url: str,
) -> None:
    recorded = Recorded()
    controller = fresh(recorded)
    assert interval(controller) == "promote"
    assert interval(controller) == "complete"
    assert controller.choose(0.99) == "candidate"  # promoted: 100 % on the candidate
    status, body = await post(f"{base_url}/{FINISH_HOOK}", FINISHED)
    assert status == 200
    assert body["reason"] == (
        "Flagger finished test/podinfo (Succeeded) and scaled its canary to zero; every "
        "request now goes to the primary (servegate was promoted at 100 %)"
    )
    rng = random.Random(1)
    assert {controller.choose(rng.random()) for _ in range(1000)} == {"primary"}
    snap = controller.snapshot()
    assert (snap["phase"], snap["weight"], snap["secondary_weight"]) == ("finalised", 0.0, 0.0)
    decision, state = recorded.rows[-1]
    assert (decision.action, decision.weight, decision.score) == ("finalise", 100.0, None)
    assert decision.evidence["flagger"]["phase"] == "Succeeded"
    assert decision.evidence["before"] == {"phase": "promoted", "weight": 100.0}
    assert state["phase"] == "finalised"
    # the session judged its rollout: no decision hook says go any more
    assert await hooks(base_url) == {
        "pre-rollout": 503, "rollout": 503, "confirm-promotion": 503, "rollback": 409,
    }  # fmt: skip
    # Flagger retries a hook: the second call changes nothing and records nothing more
    again, body = await post(f"{base_url}/{FINISH_HOOK}", FINISHED)
    assert (again, body["reason"]) == (200, "already finalised")
    assert [d.action for d, _ in recorded.rows] == ["finalise"]  # tick() records nothing


async def test_post_rollout_mid_canary_stops_the_candidate_and_the_secondary(
    base_url: str,
) -> None:
    controller = fresh(Recorded(), secondary=True)
    rng = random.Random(2)
    assert {controller.choose(rng.random()) for _ in range(1000)} == {
        "primary", "candidate", "secondary",
    }  # fmt: skip
    status, _ = await post(f"{base_url}/{FINISH_HOOK}", {**PAYLOAD, "phase": "Failed"})
    assert status == 200
    assert {controller.choose(rng.random()) for _ in range(1000)} == {"primary"}
    # answers after the end judge nothing
    controller.observe(RequestObservation("candidate", CLOCK.now + 1, {"error": 1.0}))
    assert controller.snapshot()["requests"] == {}
    CLOCK.now += 600
    assert controller.tick() is None


async def test_post_rollout_with_a_bad_payload_changes_nothing(base_url: str) -> None:
    controller = fresh(Recorded())
    status, body = await post(f"{base_url}/{FINISH_HOOK}", b"not json")
    assert (status, body["reason"]) == (400, "bad webhook payload: body is not JSON")
    assert controller.phase == "progressing"


async def test_post_rollout_without_a_canary_behind_the_routes_is_refused() -> None:
    with serving(Starlette(routes=flagger_routes(dict, admit=lambda _request: None))) as url:
        status, body = await post(f"{url}/{FINISH_HOOK}", FINISHED)
    assert (status, body["reason"]) == (409, "servegate has no canary judgement here")


async def test_post_rollout_is_refused_unless_the_caller_is_admitted() -> None:
    controller = fresh()
    routes = flagger_routes(current, finish=finish_current)  # no admit: nobody may end it
    with serving(Starlette(routes=routes)) as url:
        status, body = await post(f"{url}/{FINISH_HOOK}", FINISHED)
    assert status == 403
    assert body["go"] is False
    assert controller.phase == "progressing"
