"""The canary against candidates that hurt users without an HTTP 5xx: one that never answers long
prompts (the reference engine's hang-long fault; users give up after 10 s) and one that answers
HTTP 200 with an error body on 30 % of requests. The real controller routes, the proxy measures
each answer with the one answer classifier, and both roll back on the error rate.

Sizes: 5 answers per side make a measurement (canary.min_requests); a short interval with many
allowed extensions keeps a step's answers until enough have come in, so each test takes as long
as its requests (the hang test about 10-20 s of hanging, the error test ~30 short answers).
"""

from __future__ import annotations

import itertools
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import aiohttp
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from servegate.canary.controller import Controller
from servegate.canary.deadline_rule import DeadlineRule
from servegate.canary.plan import parse_plan
from servegate.config.models import CanaryPolicy, Policy
from servegate.engine import RunningEngine
from servegate.proxy import ProxySettings, Upstream
from servegate.proxy.app import Proxy

from .conftest import HANG_THRESHOLD_CHARS
from .proxy_harness import serve_in_thread

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(300)]

POLICY = Policy(canary=CanaryPolicy(min_requests=5, max_extensions=60))
PLAN = parse_plan("50,100", "2s")
USER_TIMEOUT_S = 10.0
BUDGET_S = 150.0  # the test gives up driving after this (before the fix: no rollback at all)


@contextmanager
def canary(primary: str, candidate: str) -> Iterator[tuple[str, Controller]]:
    controller = Controller(PLAN, POLICY)
    settings = ProxySettings(
        primary=Upstream.parse("primary", primary),
        candidate=Upstream.parse("candidate", candidate),
        mode="canary",
        seed=11,
        candidate_deadlines=DeadlineRule(min_samples=5),
    )
    with serve_in_thread(Proxy(settings, controller=controller).app()) as url:
        yield url, controller


def _chat(url: str, prompt: str) -> int:
    body = {"model": "smollm2", "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 8, "temperature": 0}  # fmt: skip
    request = urllib.request.Request(
        url + "/v1/chat/completions", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=USER_TIMEOUT_S) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (TimeoutError, urllib.error.URLError):
        return 0  # the user gave up


def _drive(url: str, controller: Controller, prompts: list[str], users: int) -> dict[str, Any]:
    """`users` clients send prompts in turn until the canary leaves `progressing`."""
    deadline = time.monotonic() + BUDGET_S
    counter = itertools.count()

    def user() -> None:
        while controller.phase == "progressing" and time.monotonic() < deadline:
            _chat(url, prompts[next(counter) % len(prompts)])

    with ThreadPoolExecutor(users) as pool:
        for _ in range(users):
            pool.submit(user)
    return controller.snapshot()


def test_a_candidate_that_never_answers_long_prompts_rolls_back_on_its_error_rate(
    clean_engine: RunningEngine, hang_long_engine: RunningEngine
) -> None:
    long = "Summarise in three words: " + "the river runs past the old mill. " * 20
    assert len(long) > HANG_THRESHOLD_CHARS
    with canary(clean_engine.base_url, hang_long_engine.base_url) as (url, controller):
        state = _drive(url, controller, [long], users=4)
    last = state["last_decision"]
    assert state["phase"] == "rolled_back", state
    assert last["action"] == "rollback"
    assert "error" in last["reason"], last["reason"]  # judged, not "not measured" for ever
    assert "extension" not in last["reason"], last["reason"]


def error_front(upstream: str) -> Starlette:
    """A candidate that answers 3 requests in 10 with HTTP 200 and an error body, and forwards
    the rest to a clean engine."""
    count = itertools.count()

    async def chat(request: Request) -> Response:
        body = await request.body()
        if next(count) % 10 in (1, 4, 7):
            return JSONResponse({"error": {"message": "CUDA error: an illegal memory access",
                                           "type": "server_error"}})  # fmt: skip
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{upstream}/chat/completions", data=body,
                         headers={"Content-Type": "application/json"}) as answer,
        ):  # fmt: skip
            return Response(await answer.read(), answer.status, media_type="application/json")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def test_a_candidate_answering_200_with_an_error_body_on_30_percent_rolls_back(
    clean_engine: RunningEngine,
) -> None:
    prompts = ["Reply with exactly: OK", "What is 2+3? Answer with a number."]
    with (
        serve_in_thread(error_front(clean_engine.base_url)) as front,
        canary(clean_engine.base_url, front + "/v1") as (url, controller),
    ):
        state = _drive(url, controller, prompts, users=1)
    last = state["last_decision"]
    assert state["phase"] == "rolled_back", state
    assert last["action"] == "rollback"
    assert "error" in last["reason"], last["reason"]
    assert "extension" not in last["reason"], last["reason"]
