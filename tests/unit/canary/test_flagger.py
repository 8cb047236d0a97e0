"""Flagger's webhooks over HTTP (a real uvicorn server on loopback) with Flagger's payload:
go (2xx) and halt (non-2xx) follow the canary controller's current judgement."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
import uvicorn
from starlette.applications import Starlette

from servegate.canary.controller import Controller
from servegate.canary.flagger import HOOKS, MAX_BODY_BYTES, decide, flagger_routes
from servegate.canary.plan import parse_plan
from servegate.canary.protocol import Observation
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


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    """The webhooks served by uvicorn in a thread, answering from CONTROLLER[0]."""
    app = Starlette(routes=flagger_routes(current))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}/servegate/flagger"
    server.should_exit = True
    thread.join(timeout=10)


def fresh() -> Controller:
    CONTROLLER[:] = [Controller(parse_plan("10,50,100", "60s"), POLICY, clock=CLOCK)]
    return CONTROLLER[0]


def interval(controller: Controller, *, bad: bool = False, n: int = 600) -> str:
    rng = random.Random(0)
    for _ in range(n):
        side = controller.choose(rng.random())
        garbage = 1.0 if bad and side == "candidate" else 0.0
        metrics = {"error": 0.0, "garbage": garbage, "e2el_ms": 100 * rng.uniform(0.9, 1.1)}
        controller.observe(Observation(side, CLOCK.now, metrics))
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
    assert body["reason"].startswith("servegate holds at 10 %: error: too few samples")


async def test_a_rollback_halts_and_answers_flaggers_rollback_hook(base_url: str) -> None:
    assert interval(fresh(), bad=True) == "rollback"
    assert await hooks(base_url) == {
        "pre-rollout": 409, "rollout": 409, "confirm-promotion": 409, "rollback": 200,
    }  # fmt: skip
    _, body = await post(f"{base_url}/rollback")
    assert body["reason"].startswith("servegate rolled the candidate back: critical metric high")


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
