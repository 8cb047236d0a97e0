"""Canary routing against the real engines: a minimal CanaryController, written here through
the protocol the real controller implements (servegate.canary.protocol), decides who serves
each request; users get that side's answer, and each served request comes back to it as one
RequestObservation with the proxy's measurements. The candidate is the mixed-dtype engine, so who
answered is plain to see (it answers runs of commas)."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from servegate.canary.protocol import (
    ANSWER_PREFIX,
    METRICS,
    CanaryController,
    RequestObservation,
    Side,
)
from servegate.engine import RunningEngine
from servegate.proxy import ProxySettings, Upstream
from servegate.proxy.app import Proxy

from .proxy_harness import serve_in_thread

pytestmark = [pytest.mark.engine]

CHAT = {"messages": [{"role": "user", "content": "What is 2+2?"}], "temperature": 0,
        "max_tokens": 32}  # fmt: skip


class HalfCanary:
    """Routes u < 0.5 to the candidate; keeps what it observes."""

    def __init__(self) -> None:
        self.choices: list[Side] = []
        self.observations: list[RequestObservation] = []
        self.ran = False
        self.stopped = False

    def choose(self, u: float) -> Side:
        side: Side = "candidate" if u < 0.5 else "primary"
        self.choices.append(side)
        return side

    def observe(self, observation: RequestObservation) -> None:
        self.observations.append(observation)

    async def run(self, stop: asyncio.Event) -> None:
        self.ran = True
        await stop.wait()
        self.stopped = True

    async def finish(self, reason: str, evidence: Mapping[str, Any]) -> object:
        raise AssertionError("nothing here ends the canary")

    def snapshot(self) -> Mapping[str, Any]:
        return {"step": 0, "weight": 0.5, "phase": "progressing", "last_decision": None}


def _chat(base_url: str, key: str = "sk-user-canary-route-1f2e") -> str:
    request = urllib.request.Request(
        base_url + "/chat/completions", data=json.dumps(CHAT).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=120) as response:
        content: str = json.loads(response.read())["choices"][0]["message"]["content"]
        return content


def test_users_get_the_chosen_sides_answer_and_each_request_is_observed(
    clean_engine: RunningEngine, mixed_dtype_engine: RunningEngine, tmp_path: Path
) -> None:
    controller = HalfCanary()
    checked: CanaryController = controller  # the protocol is structural: mypy checks this
    settings = ProxySettings(
        primary=Upstream.parse("primary", clean_engine.base_url),
        candidate=Upstream.parse("candidate", mixed_dtype_engine.base_url),
        mode="canary",
        seed=7,
    )
    expected = {
        "primary": _chat(clean_engine.base_url),
        "candidate": _chat(mixed_dtype_engine.base_url),
    }
    assert expected["primary"] != expected["candidate"]
    proxy = Proxy(settings, controller=checked)
    with serve_in_thread(proxy.app()) as url:
        answers = [_chat(url + "/v1") for _ in range(6)]
        with urllib.request.urlopen(url + "/servegate/healthz", timeout=10) as response:
            health = json.loads(response.read())
    assert controller.ran
    assert controller.stopped
    assert set(controller.choices) == {"primary", "candidate"}, controller.choices  # seed 7
    assert answers == [expected[side] for side in controller.choices]
    assert [o.side for o in controller.observations] == controller.choices
    for observation in controller.observations:
        classes = {m for m in observation.metrics if m.startswith(ANSWER_PREFIX)}
        assert len(classes) == 1, observation  # one class from the answer classifier
        assert set(observation.metrics) - classes <= set(METRICS)
        garbage = 1.0 if observation.side == "candidate" else 0.0
        assert observation.metrics["garbage"] == garbage, observation
        assert observation.metrics["error"] == garbage  # a degenerate answer is not ok
    assert health["canary"]["weight"] == 0.5
